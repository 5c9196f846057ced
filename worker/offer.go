package worker

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/maknow/tenure/events"
)

// Offer is a lease a dispatcher offered to this worker. It binds nobody until
// accepted: Accept before AckDeadline, or Decline.
type Offer struct {
	Job         string
	LeaseID     string
	Generation  uint64
	Duration    time.Duration   // the lease duration an accepted offer starts with
	AckDeadline time.Time       // on the coordinator's clock
	Decision    events.Decision // the offered decision

	w    *Worker
	ack  *input // the ACK, kept so that a retried Accept resends the same message
	decl *input // the release of Decline, likewise
	// localDeadline is AckDeadline on this worker's clock, conservatively:
	// the time the offer was read plus what was left of the ACK window
	// when it was decided. It bounds each publish attempt of the ACK and
	// of Decline (Options.PublishTimeout), as a lease's deadline does.
	localDeadline time.Time
	// seq is the offer's sequence in the decision stream (0: not known);
	// trace the trace context its message carried (PROTOCOL.md §27: the
	// one of the submit or offer that put the job there).
	seq   uint64
	trace trace.SpanContext
}

// newOffer is the offer of decision d, read at local time now from the
// message dv tells of.
func newOffer(w *Worker, d events.Decision, now time.Time, dv delivery) Offer {
	return Offer{
		seq: dv.seq, trace: w.spanContextOf(dv.h),
		Job: d.Job.ID, LeaseID: d.Job.LeaseID, Generation: d.Job.Generation,
		Duration:      time.Duration(d.Job.Duration),
		AckDeadline:   time.Unix(0, d.Job.AckDeadline),
		Decision:      d,
		w:             w,
		localDeadline: now.Add(time.Duration(d.Job.AckDeadline - d.At)),
	}
}

// TraceContext returns ctx with the trace context the offer's message
// carried as its remote parent (PROTOCOL.md §27), or ctx itself when it
// carried none: a span started from it continues the trace of the submit
// (or the dispatcher's offer) that put the job there.
func (o *Offer) TraceContext(ctx context.Context) context.Context {
	if !o.trace.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, o.trace)
}

// Token is the fencing token of the offered lease.
func (o *Offer) Token() FencingToken {
	return FencingToken{Job: o.Job, LeaseID: o.LeaseID, Generation: o.Generation}
}

// Accept sends the ACK (lease id and generation) and returns the lease once
// the coordinator acked it; the lease's duration runs from the ACK. A late
// ACK comes back as a *VerdictError matching ErrExpired, a withdrawn offer
// as one matching ErrLostAuthority. After an error matching ErrNoVerdict,
// calling Accept again on the same Offer resends the same ACK message (same
// Msg-Id), so that its first verdict is the one learned. An Offer is not
// safe for concurrent use.
func (o *Offer) Accept(ctx context.Context, opts ...LeaseOption) (*Lease, error) {
	if o.w == nil {
		return nil, fmt.Errorf("worker: accept: offer not received from a Worker")
	}
	lo, err := leaseOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.ack == nil {
		o.ack = o.w.newInput(&events.Input{Job: o.Job, Verb: events.VerbAck, LeaseID: o.LeaseID, Generation: o.Generation})
		o.ack.deadline = o.localDeadline
		o.ack.trace = o.trace
	}
	p := o.ack
	d, err := o.w.send(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("worker: accept %s: %w", o.Token(), err)
	}
	if d.Kind != events.KindAcked {
		return nil, verdictError(d)
	}
	lo.trace = o.trace
	return o.w.newLease(d, p.t0, lo)
}

// Decline gives the offer back (a release of the offered lease), so that it
// can be offered to someone else before its ACK deadline.
func (o *Offer) Decline(ctx context.Context) error {
	if o.w == nil {
		return fmt.Errorf("worker: decline: offer not received from a Worker")
	}
	if o.decl == nil {
		o.decl = o.w.newInput(&events.Input{Job: o.Job, Verb: events.VerbRelease, LeaseID: o.LeaseID, Generation: o.Generation})
		o.decl.deadline = o.localDeadline
		o.decl.trace = o.trace
	}
	d, err := o.w.send(ctx, o.decl)
	if err != nil {
		return fmt.Errorf("worker: decline %s: %w", o.Token(), err)
	}
	return errOf(d)
}
