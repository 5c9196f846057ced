package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/fence"
)

// FencingToken names one lease: a job, the lease's id and its generation.
// Pass it with every side effect; a guarded resource admits it only if no
// newer lease of the job has been seen (see Fence, and package fence for
// the adapters). It is fence.Token.
type FencingToken = fence.Token

// ParseFencingToken parses the form String writes.
func ParseFencingToken(s string) (FencingToken, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || !events.ValidToken(parts[0]) || !events.ValidToken(parts[1]) {
		return FencingToken{}, fmt.Errorf("worker: bad fencing token %q", s)
	}
	gen, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil || gen == 0 {
		return FencingToken{}, fmt.Errorf("worker: bad fencing token %q: generation", s)
	}
	return FencingToken{Job: parts[0], LeaseID: parts[1], Generation: gen}, nil
}

// Lease is one lease this worker holds, from a granted Acquire or an
// accepted Offer. Its methods are safe for concurrent use.
//
// While the lease is held a goroutine owned by it renews it every
// RenewFraction of its duration. Context is cancelled, with a cause, the
// moment authority is lost; after that the worker must stop side effects.
// The lease's object stays usable: Complete, Release and AckCancel still
// publish and return the coordinator's verdict (after a cancel request,
// AckCancel and Complete(OutcomeCancelled or OutcomeFailed) are exactly what
// is expected).
type Lease struct {
	w     *Worker
	token FencingToken
	opts  LeaseOptions

	ctx      context.Context // authority: cancelled with a cause when lost
	cancel   context.CancelCauseFunc
	cancelC  chan struct{} // closed when cancellation is requested
	cancel1  sync.Once
	loopDone chan struct{} // closed when the renew loop has exited

	progressMu sync.Mutex // progress reports are stored in sequence order
	renewMu    sync.Mutex // one renewal at a time
	req        *renewReq  // the renewal in flight, under renewMu

	mu          sync.Mutex
	deadline    time.Time   // conservative local deadline
	timer       clock.Timer // fires at deadline
	interval    time.Duration
	renewSeq    uint64
	pendingSeq  uint64    // renew_seq of the renewal whose verdict is not known yet (0: none)
	pendingT0   time.Time // local time just before it was first published
	progressSeq uint64
}

// newLease starts the lease granted or acked by decision d, for an input
// published just after local time t0.
func (w *Worker) newLease(d events.Decision, t0 time.Time, lo LeaseOptions) (*Lease, error) {
	j := &d.Job
	l := &Lease{
		w:           w,
		token:       FencingToken{Job: j.ID, LeaseID: j.LeaseID, Generation: j.Generation},
		opts:        lo,
		cancelC:     make(chan struct{}),
		loopDone:    make(chan struct{}),
		req:         newRenewReq(lo.trace),
		interval:    renewInterval(j.Duration, lo.RenewFraction),
		renewSeq:    j.RenewSeq,
		progressSeq: j.ProgressSeq,
		deadline:    t0.Add(time.Duration(j.ExpiresAt - d.At)),
	}
	l.ctx, l.cancel = context.WithCancelCause(w.ctx)
	l.mu.Lock()
	l.timer = w.clk.AfterFunc(clock.Until(w.clk, l.deadline), l.onDeadline)
	l.mu.Unlock()
	if err := w.register(l); err != nil {
		close(l.loopDone)
		return nil, err
	}
	return l, nil
}

func renewInterval(dur int64, fraction float64) time.Duration {
	return max(time.Duration(float64(dur)*fraction), time.Millisecond)
}

// Job is the job's id.
func (l *Lease) Job() string { return l.token.Job }

// Token is the lease's fencing token.
func (l *Lease) Token() FencingToken { return l.token }

// Context is cancelled the moment this worker must assume it lost authority,
// with a cause (context.Cause) matching, with errors.Is:
//   - ErrExpired: the local conservative deadline passed (with ErrNoVerdict
//     when a renewal was sent and its verdict not learned), or the
//     coordinator's expired decision;
//   - ErrLostAuthority with ErrStaleGeneration, ErrConflict, ...: a verdict
//     refused a renewal or another operation (a *VerdictError);
//   - ErrCancelRequested: an operator asked for cancellation;
//   - ErrLeaseEnded: this worker completed or released the lease;
//   - ErrClosed: the Worker was closed.
func (l *Lease) Context() context.Context { return l.ctx }

// Expires is the local conservative deadline: the local time just before the
// last accepted grant, ACK or renewal was published, plus the lease duration
// the coordinator granted with it. The coordinator's expiry is never earlier.
func (l *Lease) Expires() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// CancelRequested is closed when an operator's cancellation request for
// this lease reaches the worker. Reconcile with AckCancel, then Complete
// with OutcomeCancelled or OutcomeFailed.
func (l *Lease) CancelRequested() <-chan struct{} { return l.cancelC }

// Progress reports progress (0 to 100). The lease manages progress_seq:
// reports are numbered and stored in call order. Progress never renews the
// lease. It returns nil when the coordinator accepted the report, a
// *VerdictError when it did not, or an error matching ErrNoVerdict.
func (l *Lease) Progress(ctx context.Context, value int) error {
	l.progressMu.Lock()
	defer l.progressMu.Unlock()
	l.mu.Lock()
	if l.progressSeq >= events.MaxSeq {
		l.mu.Unlock()
		return fmt.Errorf("worker: progress %s: %w", l.token, ErrSequenceExhausted)
	}
	l.progressSeq++
	seq := l.progressSeq
	l.mu.Unlock()
	return l.do(ctx, "progress", &events.Input{
		Job: l.token.Job, Verb: events.VerbProgress, LeaseID: l.token.LeaseID,
		Generation: l.token.Generation, ProgressSeq: seq, Value: int64(value),
	})
}

// Complete reports the lease's terminal result. Accepted, it ends the lease
// (the context's cause becomes ErrLeaseEnded unless authority was lost
// before). After a cancel request only OutcomeCancelled and OutcomeFailed
// are accepted.
func (l *Lease) Complete(ctx context.Context, outcome events.Outcome, detail string) error {
	if outcome == events.OutcomeNone {
		return errors.New("worker: complete: no outcome")
	}
	return l.result(ctx, outcome, detail, false)
}

// FailPermanently reports the result FAILED with "permanent":true: a
// queue job's attempt that failed so is not retried, the job ends FAILED
// at once (PROTOCOL.md §22.4). Accepted, it ends the lease, as Complete.
func (l *Lease) FailPermanently(ctx context.Context, detail string) error {
	return l.result(ctx, events.OutcomeFailed, detail, true)
}

func (l *Lease) result(ctx context.Context, outcome events.Outcome, detail string, permanent bool) error {
	return l.do(ctx, "complete", &events.Input{
		Job: l.token.Job, Verb: events.VerbResult, LeaseID: l.token.LeaseID,
		Generation: l.token.Generation, Outcome: outcome, Text: detail, Permanent: permanent,
	})
}

// resultVia reports the lease's terminal result through the worker's
// result batcher (Run: with the results of other leases that end
// meanwhile, in one batch result), which sends the same input again while
// its verdict is not learned and the lease's local deadline has not
// passed. Like Complete, it returns nil when the result was accepted.
func (l *Lease) resultVia(outcome events.Outcome, detail string, permanent bool) error {
	res := l.w.results.do(events.Input{Job: l.token.Job, LeaseID: l.token.LeaseID, Generation: l.token.Generation,
		Outcome: outcome, Text: detail, Permanent: permanent}, l.Expires(), l.opts.trace)
	if res.err != nil {
		return fmt.Errorf("worker: complete %s: %w", l.token, res.err)
	}
	return l.observe(res.d)
}

// Release gives the lease back without a result; accepted, it ends the
// lease. It is refused after a cancel request (reconcile instead).
func (l *Lease) Release(ctx context.Context) error {
	return l.do(ctx, "release", &events.Input{
		Job: l.token.Job, Verb: events.VerbRelease, LeaseID: l.token.LeaseID, Generation: l.token.Generation,
	})
}

// AckCancel acknowledges a cancellation request: the worker has stopped.
// Follow it with Complete(OutcomeCancelled or OutcomeFailed).
func (l *Lease) AckCancel(ctx context.Context) error {
	return l.do(ctx, "cancel_ack", &events.Input{
		Job: l.token.Job, Verb: events.VerbCancelAck, LeaseID: l.token.LeaseID, Generation: l.token.Generation,
	})
}

func (l *Lease) do(ctx context.Context, op string, in *events.Input) error {
	d, err := l.w.send(ctx, l.input(in))
	if err != nil {
		return fmt.Errorf("worker: %s %s: %w", op, l.token, err)
	}
	return l.observe(d)
}

// input prepares in, an input of this lease: its publish attempts are
// bounded by the lease's local deadline (Options.PublishTimeout).
func (l *Lease) input(in *events.Input) *input {
	p := l.w.newInput(in)
	p.deadline = l.Expires()
	p.trace = l.opts.trace
	return p
}

// observe applies the verdict of one of this lease's operations and returns
// it as an error (nil when accepted).
func (l *Lease) observe(d events.Decision) error {
	err := errOf(d)
	if errors.Is(err, ErrCancelRequested) {
		l.lose(err) // first: once CancelRequested is closed, Context is done
		l.markCancel()
	}
	if errors.Is(err, ErrLostAuthority) {
		l.lose(err)
	}
	if j := &d.Job; j.ID == l.token.Job && j.Generation != 0 &&
		(j.Generation != l.token.Generation || !j.State.Live()) {
		cause := err
		if cause == nil {
			cause = ErrLeaseEnded
		}
		l.finish(cause)
		l.w.unregister(l)
	}
	return err
}

// handle applies a decision about this lease that no call of it caused
// (cancel request, expiry, revocation). It runs under the worker's lock and
// reports whether the lease has ended.
func (l *Lease) handle(d events.Decision) (ended bool) {
	if d.Job.Generation != l.token.Generation {
		return false
	}
	switch d.Kind {
	case events.KindCancelRequested:
		l.lose(verdictError(d)) // first: once CancelRequested is closed, Context is done
		l.markCancel()
	case events.KindExpired:
		l.finish(verdictError(d))
		return true
	case events.KindUnresolved:
		l.finish(verdictError(d))
		l.markCancel()
		return true
	case events.KindResolved:
		if d.Reason == events.ReasonLeaseRevoked || d.Reason == events.ReasonSettled {
			l.finish(verdictError(d))
			return true
		}
	}
	return false
}

func (l *Lease) markCancel() { l.cancel1.Do(func() { close(l.cancelC) }) }

// lose cancels the authority context (the first cause wins).
func (l *Lease) lose(cause error) {
	l.cancel(cause)
	l.mu.Lock()
	l.timer.Stop()
	l.mu.Unlock()
}

// finish ends the lease locally. Losing authority already stops the renew
// loop; finish exists to name the intent at call sites.
func (l *Lease) finish(cause error) { l.lose(cause) }

// onDeadline runs when the local deadline timer fires.
func (l *Lease) onDeadline() {
	l.mu.Lock()
	if l.w.clk.Now().Before(l.deadline) {
		l.mu.Unlock()
		return // extended meanwhile; the timer was reset
	}
	dl, unknown := l.deadline, l.pendingSeq != 0
	l.mu.Unlock()
	at := dl.Format(time.RFC3339Nano)
	// ErrLostAuthority too: the worker must assume the lease gone (its doc:
	// every authority-ending sentinel comes with it).
	if unknown {
		l.lose(fmt.Errorf("%w: local deadline %s passed before the renewal's verdict was learned: %w (%w)", ErrExpired, at, ErrNoVerdict, ErrLostAuthority))
		return
	}
	l.lose(fmt.Errorf("%w: local deadline %s passed (%w)", ErrExpired, at, ErrLostAuthority))
}

// extend moves the local deadline after an accepted renewal published just
// after t0, for a lease extended by dur (ns) from the coordinator's time.
func (l *Lease) extend(t0 time.Time, dur int64, leaseDur int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		return // authority already given up: never taken back
	}
	l.deadline = t0.Add(time.Duration(dur))
	l.timer.Reset(clock.Until(l.w.clk, l.deadline))
	if leaseDur > 0 {
		l.interval = renewInterval(leaseDur, l.opts.RenewFraction)
	}
}

// run is the renew loop. It exits when authority is lost or the lease ends.
func (l *Lease) run() {
	defer l.w.wg.Done()
	defer close(l.loopDone)
	l.mu.Lock()
	t := l.w.clk.NewTimer(l.interval)
	l.mu.Unlock()
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C():
		}
		if l.ctx.Err() != nil {
			return // both were ready: authority loss wins
		}
		if h := l.opts.beforeRenew; h != nil {
			h()
		}
		l.renewMu.Lock()
		err := l.renew()
		l.renewMu.Unlock()
		if err != nil && l.opts.RenewErrorHandler != nil {
			l.opts.RenewErrorHandler(l, err)
		}
		l.mu.Lock()
		next := l.interval
		if errors.Is(err, ErrNoVerdict) {
			next = max(next/4, 5*time.Millisecond) // retry the same renewal soon
		}
		if half := clock.Until(l.w.clk, l.deadline) / 2; half < next {
			next = max(half, time.Millisecond)
		}
		l.mu.Unlock()
		t.Reset(next)
	}
}

// Renew renews the lease now, besides the automatic renewals (one renewal
// of a lease is in flight at a time), and returns nil once the coordinator
// accepted it, a *VerdictError when it did not (a refusal that ends
// authority also cancels Context), or an error matching ErrNoVerdict. ctx
// is checked before the renewal is sent; once sent, Renew waits for its
// verdict, at most the worker's VerdictTimeout. Like the automatic ones,
// it coalesces with the worker's other renewals due at the same time.
func (l *Lease) Renew(ctx context.Context) error {
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	return l.renew()
}

// renew sends the pending renewal, or a new one with the next renew_seq,
// and applies its verdict. Renewals go through the worker's renewer, which
// coalesces those that are due together into one batch renew. A renewal
// whose verdict is not learned stays pending: the next attempt resends the
// same renew_seq (a duplicate_renew verdict then says the first was
// accepted). The caller holds renewMu.
func (l *Lease) renew() error {
	l.mu.Lock()
	if l.pendingSeq == 0 {
		if l.renewSeq >= events.MaxSeq {
			l.mu.Unlock()
			err := fmt.Errorf("worker: renew %s: %w (%w)", l.token, ErrSequenceExhausted, ErrLostAuthority)
			l.lose(err) // it cannot be renewed again: authority ends at its expiry
			return err
		}
		l.renewSeq++
		l.pendingSeq, l.pendingT0 = l.renewSeq, time.Time{}
	}
	l.req.ref = events.LeaseRef{Job: l.token.Job, LeaseID: l.token.LeaseID, Generation: l.token.Generation, RenewSeq: l.pendingSeq}
	l.req.deadline = l.deadline
	ref := l.req.ref
	l.mu.Unlock()
	// Once decided, a renewal is sent and its verdict learned even if the
	// lease ends or its local deadline passes meanwhile (the context is
	// cancelled regardless): the verdict is reported, and never gives
	// authority back.
	res := l.w.renewVia(l.req)
	l.mu.Lock()
	if l.pendingSeq == ref.RenewSeq && l.pendingT0.IsZero() {
		l.pendingT0 = res.t0
	}
	t0 := l.pendingT0
	if res.err == nil && l.pendingSeq == ref.RenewSeq {
		l.pendingSeq, l.pendingT0 = 0, time.Time{}
	}
	l.mu.Unlock()
	if res.err != nil {
		return fmt.Errorf("worker: renew %s: %w", l.token, res.err)
	}
	d := res.d
	switch {
	case d.Kind == events.KindRenewed:
		l.extend(t0, d.Job.ExpiresAt-d.At, d.Job.Duration)
		return nil
	case d.Kind == events.KindDuplicate && d.Reason == events.ReasonDuplicateRenew:
		// Stored twice (the duplicate window had passed, or an earlier
		// attempt's verdict was not learned): the first was accepted at
		// RenewAt, after t0.
		l.extend(t0, d.Job.ExpiresAt-d.Job.RenewAt, d.Job.Duration)
		return nil
	}
	return l.observe(d)
}
