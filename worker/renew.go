package worker

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/maknow/tenure/events"
)

// maxRenewBatches bounds the renewal inputs of one worker awaiting their
// verdicts (per partition: a batch renew holds leases of one partition).
// While they are all in flight, renewals that fall due queue up and leave
// together, in one batch renew, when one comes back: renewals coalesce under
// load and go alone, at once, when the worker is idle.
//
// Four, not two (as it was until issue 20): a worker with two inputs of up
// to 256 leases in flight waits for every verdict of one before the next
// leaves, and the pipeline behind it sits partly idle meanwhile. Measured
// with tenure bench --quick --only pipeline (8 workers x 512 leases),
// interleaved runs: with sync interval two gave 25,971-41,574 renewals/s
// at 1.45 cores busy, four 31,923-52,377 at 1.62-1.64, eight about as
// four; with sync always two and four were equal when run alternately
// (25,559 and 26,528 against 25,746 and 25,844; two gave 27,604-29,144 in
// other runs), while eight (20,076-27,008) stores more, smaller inputs,
// each fsynced on its own (BENCHMARKS.md, issue 20).
const maxRenewBatches = 4

// renewReq is one lease's renewal handed to the worker's renewer. A lease
// has one renewal in flight at a time (Lease.renewMu), so it reuses one.
type renewReq struct {
	ref      events.LeaseRef
	deadline time.Time         // the lease's local deadline when it was handed over
	trace    trace.SpanContext // the lease's trace context, which a renewal sent alone carries (a batch carries none)
	done     chan renewResult  // buffered: one result
}

// newRenewReq is the renewal request of a lease whose trace context is sc.
func newRenewReq(sc trace.SpanContext) *renewReq {
	return &renewReq{trace: sc, done: make(chan renewResult, 1)}
}

// renewResult is the outcome of one renewal: its verdict, or err. t0 is the
// local time just before the input carrying it was first published (zero if
// nothing was published).
type renewResult struct {
	d   events.Decision
	t0  time.Time
	err error
}

// renewVia hands req (its ref set) to the renewer and waits for its
// outcome.
func (w *Worker) renewVia(req *renewReq) renewResult {
	k := w.part.Of(req.ref.Job).Index
	w.rmu.Lock()
	if w.ctx.Err() != nil {
		w.rmu.Unlock()
		return renewResult{err: ErrClosed}
	}
	w.renewQ[k] = append(w.renewQ[k], req)
	w.rmu.Unlock()
	select {
	case w.renewS <- struct{}{}:
	default:
	}
	return <-req.done // the renewer answers every request, even on Close
}

// renewer sends the queued renewals, at most events.MaxBatch per input and
// maxRenewBatches inputs at a time per partition: in a partitioned
// deployment each partition's coordinator judges its own leases, so their
// renewals travel in inputs of their own, to their own partition. It exits
// on Close, failing what is still queued with ErrClosed.
func (w *Worker) renewer() {
	defer w.wg.Done()
	defer func() {
		w.rmu.Lock()
		qs := w.renewQ
		w.renewQ = make([][]*renewReq, len(qs))
		w.rmu.Unlock()
		for _, q := range qs {
			for _, r := range q {
				r.done <- renewResult{err: ErrClosed}
			}
		}
	}()
	for {
		select {
		case <-w.renewS:
		case <-w.ctx.Done():
			return
		}
		w.rmu.Lock()
		for k := range w.renewQ {
			for w.renewN[k] < maxRenewBatches && len(w.renewQ[k]) > 0 {
				q := w.renewQ[k]
				n := min(len(q), events.MaxBatch)
				batch := make([]*renewReq, n)
				copy(batch, q)
				clear(q[:n])
				w.renewQ[k] = q[n:]
				if len(w.renewQ[k]) == 0 {
					w.renewQ[k] = nil
				}
				w.renewN[k]++
				w.wg.Add(1) // the renewer itself is counted: never from zero
				go func() {
					defer w.wg.Done()
					w.sendRenewals(batch)
					w.rmu.Lock()
					w.renewN[k]--
					w.rmu.Unlock()
					select { // more may have queued meanwhile
					case w.renewS <- struct{}{}:
					default:
					}
				}()
			}
		}
		w.rmu.Unlock()
	}
}

// sendRenewals publishes one input for the renewals of batch, all leases of
// one partition (a single renew for one, a batch renew for more, to that
// partition), and hands each its verdict.
func (w *Worker) sendRenewals(batch []*renewReq) {
	in := events.Input{Verb: events.VerbRenew}
	if len(batch) == 1 {
		r := &batch[0].ref
		in.Job, in.LeaseID, in.Generation, in.RenewSeq, in.LeaseMS = r.Job, r.LeaseID, r.Generation, r.RenewSeq, r.LeaseMS
	} else {
		in.Job = events.NoJob
		in.Leases = make([]events.LeaseRef, len(batch))
		for i, r := range batch {
			in.Leases[i] = r.ref
		}
	}
	p := w.newInput(&in)
	if len(batch) == 1 {
		p.trace = batch[0].trace
	}
	p.part = w.part.Of(batch[0].ref.Job) // a batch renew's job token is "_"
	p.t0 = w.clk.Now()
	for _, r := range batch { // the publish attempts fit in the earliest lease
		if p.deadline.IsZero() || r.deadline.Before(p.deadline) {
			p.deadline = r.deadline
		}
	}
	ds, err := w.sendN(context.Background(), p, len(batch))
	// Verdicts come in the order of the leases; match them by job all the
	// same. A verdict about no job (a rejected input) answers them all.
	answered := make([]bool, len(batch))
	for _, d := range ds {
		if d.Job.ID == events.NoJob {
			for i, r := range batch {
				if !answered[i] {
					answered[i] = true
					r.done <- renewResult{d: d, t0: p.t0}
				}
			}
			break
		}
		for i, r := range batch {
			if !answered[i] && r.ref.Job == d.Job.ID {
				answered[i] = true
				r.done <- renewResult{d: d, t0: p.t0}
				break
			}
		}
	}
	if err == nil {
		err = fmt.Errorf("%w: input %s: verdict missing", ErrNoVerdict, p.msgID)
	}
	for i, r := range batch {
		if !answered[i] {
			r.done <- renewResult{t0: p.t0, err: err}
		}
	}
}
