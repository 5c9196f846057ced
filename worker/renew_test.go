package worker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

// Renewals that fall due together coalesce into batch renews
// (tenure.in.worker.<id>._.renew), and each lease still gets its own verdict:
// every Renew returns accepted, each lease's renew_seq advances by exactly
// the renewals it made, and the auto-renewal loop keeps working after.
func TestRenewalsCoalesce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("w1")
	ctx := context.Background()
	const n, rounds = 60, 4
	leases := make([]*Lease, n)
	var wg sync.WaitGroup
	for i := range leases {
		wg.Go(func() {
			l, err := w.Acquire(ctx, fmt.Sprintf("j%d", i), WithLeaseDuration(30*time.Second))
			if err != nil {
				t.Error(err)
				return
			}
			leases[i] = l
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	errs := make(chan error, n*rounds)
	for _, l := range leases {
		wg.Go(func() {
			for range rounds {
				if err := l.Renew(ctx); err != nil {
					errs <- fmt.Errorf("%s: %w", l.Job(), err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	e.caughtUp()
	batches, singles, leasesInBatches := 0, 0, 0
	for _, m := range e.readStream("TENURE_IN") {
		switch m.subject {
		case events.InputSubject(events.RoleWorker, "w1", events.NoJob, events.VerbRenew):
			batches++
			var in events.Input
			if err := events.DecodeInput(m.subject, m.data, &in); err != nil {
				t.Fatalf("batch renew %d: %v", m.seq, err)
			}
			leasesInBatches += len(in.Leases)
		default:
			if in := (events.Input{}); events.DecodeInput(m.subject, m.data, &in) == nil && in.Verb == events.VerbRenew {
				singles++
			}
		}
	}
	t.Logf("%d renewals: %d batch renews (%d leases), %d single renews", n*rounds, batches, leasesInBatches, singles)
	if batches == 0 {
		t.Fatal("no batch renew: renewals due together did not coalesce")
	}
	if leasesInBatches+singles != n*rounds {
		t.Fatalf("%d renewals stored, want %d", leasesInBatches+singles, n*rounds)
	}
	renewed, seq := map[string]int{}, map[string]uint64{}
	for _, m := range e.readStream("TENURE_OUT") {
		d, err := events.DecodeDecision(m.data)
		if err != nil {
			t.Fatal(err)
		}
		if d.Kind == events.KindRenewed {
			renewed[d.Job.ID]++
		}
		seq[d.Job.ID] = d.Job.RenewSeq
	}
	for i := range leases {
		if job := fmt.Sprintf("j%d", i); renewed[job] != rounds || seq[job] != rounds {
			t.Fatalf("%s: %d renewed verdicts, renew_seq %d: want %d", job, renewed[job], seq[job], rounds)
		}
	}
	// The automatic renewals go the same way.
	// 10 s, not 300 ms or 3 s: on two cores loaded by other suites a
	// renewal's verdict took longer than a 300 ms lease had left, and
	// with 3 s none came within 15 s (load 12). A lease that ends fails
	// at once, with its cause.
	l, err := w.Acquire(ctx, "auto", WithLeaseDuration(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	first := l.Expires()
	testutil.WaitFor(t, 40*time.Second, "an automatic renewal", func() bool {
		if l.Context().Err() != nil {
			t.Fatalf("the lease ended before its renewal: %v", context.Cause(l.Context()))
		}
		return l.Expires().After(first.Add(1500 * time.Millisecond))
	})
	if err := l.Context().Err(); err != nil {
		t.Fatalf("lease context: %v", context.Cause(l.Context()))
	}
}

// A batch renew's verdicts reach each lease even when some of them refuse:
// a lease renewed with a stale sequence (its renewal in a batch with
// others) gets its own late verdict, the others are renewed.
func TestBatchVerdictsPerLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("w1")
	ctx := context.Background()
	a, err := w.Acquire(ctx, "a", WithLeaseDuration(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.Acquire(ctx, "b", WithLeaseDuration(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Send both through the renewer at once, b with a sequence already used.
	b.mu.Lock()
	b.renewSeq = 0
	b.mu.Unlock()
	if err := b.Renew(ctx); err != nil { // renew_seq 1: accepted
		t.Fatal(err)
	}
	b.mu.Lock()
	b.renewSeq = 0 // the next is 1 again: a duplicate
	b.mu.Unlock()
	ra, rb := newRenewReq(trace.SpanContext{}), newRenewReq(trace.SpanContext{})
	ra.ref = events.LeaseRef{Job: "a", LeaseID: a.token.LeaseID, Generation: 1, RenewSeq: 1}
	rb.ref = events.LeaseRef{Job: "b", LeaseID: b.token.LeaseID, Generation: 1, RenewSeq: 1}
	w.sendRenewals([]*renewReq{ra, rb})
	resA, resB := <-ra.done, <-rb.done
	if resA.err != nil || resA.d.Kind != events.KindRenewed || resA.d.Job.ID != "a" {
		t.Fatalf("a: %+v", resA)
	}
	if resB.err != nil || resB.d.Kind != events.KindDuplicate || resB.d.Job.ID != "b" {
		t.Fatalf("b: %+v", resB)
	}
	if resA.d.Cause != resB.d.Cause {
		t.Fatalf("the two verdicts have causes %d and %d: not one batch", resA.d.Cause, resB.d.Cause)
	}
}
