package worker

import (
	"context"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
)

// The matching that follows every input may offer a queue job to the very
// worker whose input freed the slot, in that input's decisions, after its
// verdict (assigned, caused by the worker's pull, result or
// release). Such an offer is no verdict: it reaches Offers(), and the
// input's waiter gets its own verdict, whichever of the two is read first.
func TestAssignedOfferIsNoVerdict(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("w1")
	const seq = 1 << 40
	verdict := events.Decision{Cause: seq, N: 0, Of: 2, Kind: events.KindCapacitySet, Reason: events.ReasonOk,
		Role: events.RoleWorker, Actor: "w1", Verb: events.VerbPull, Addressee: "w1", Job: events.Job{ID: events.NoJob},
		Capacity: &events.Capacity{Queue: "q", Slots: 1}}
	now := time.Now()
	offer := func(job string) events.Decision {
		return events.Decision{Cause: seq, N: 1, Of: 2, At: now.UnixNano(), Kind: events.KindAssigned, Reason: events.ReasonOk,
			Role: events.RoleWorker, Actor: "w1", Verb: events.VerbPull, Addressee: "w1",
			Job: events.Job{ID: job, LeaseID: "L9", Generation: 1, Holder: "w1", State: events.StateOffered,
				AckDeadline: now.Add(time.Minute).UnixNano(), Queue: "q", Attempt: 1, MaxAttempts: 3}}
	}
	for _, c := range []struct {
		name       string
		offerFirst bool
		job        string
		seq        uint64
	}{
		{"verdict first", false, "j1", seq},
		{"offer first", true, "j2", seq + 1},
	} {
		v, o := verdict, offer(c.job)
		v.Cause, o.Cause = c.seq, c.seq
		if c.offerFirst {
			w.dispatch(o)
			w.dispatch(v)
		} else {
			w.dispatch(v)
			w.dispatch(o)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d, err := w.await(ctx, c.seq, events.VerbPull, events.NoJob)
		cancel()
		if err != nil || d.Kind != events.KindCapacitySet {
			t.Fatalf("%s: the pull's verdict: %s/%s, %v; want capacity_set", c.name, d.Kind, d.Reason, err)
		}
		select {
		case got := <-w.Offers():
			if got.Job != c.job || got.Decision.Kind != events.KindAssigned {
				t.Fatalf("%s: offer %s/%s, want %s/assigned", c.name, got.Job, got.Decision.Reason, c.job)
			}
		case <-time.After(time.Second):
			t.Fatalf("%s: the assigned offer never reached Offers()", c.name)
		}
	}
}
