package worker

import (
	"context"
	"fmt"

	"github.com/maknow/tenure/events"
)

// Acquire asks for a new lease on job and returns it once granted. Under
// competition exactly one acquirer is granted the new generation; the others
// get a *VerdictError matching ErrLeaseHeld (and ErrRejected) whose
// Decision.Job names the current holder and generation. Other refusals
// (job closed, conflict pending, max generations, duration out of policy)
// are *VerdictErrors matching ErrRejected; an error matching ErrNoVerdict
// means the outcome is unknown (a lease granted but never learned simply
// expires).
func (w *Worker) Acquire(ctx context.Context, job string, opts ...LeaseOption) (*Lease, error) {
	if !events.ValidToken(job) {
		return nil, fmt.Errorf("worker: acquire: invalid job %q", job)
	}
	lo, err := leaseOptions(opts)
	if err != nil {
		return nil, err
	}
	p := w.newInput(&events.Input{Job: job, Verb: events.VerbAcquire, LeaseMS: lo.Duration.Milliseconds()})
	if lo.Duration > 0 { // its publish attempts fit in the lease asked for
		p.deadline = w.clk.Now().Add(lo.Duration)
	}
	d, err := w.send(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("worker: acquire %s: %w", job, err)
	}
	if d.Kind != events.KindGranted {
		return nil, verdictError(d)
	}
	return w.newLease(d, p.t0, lo)
}
