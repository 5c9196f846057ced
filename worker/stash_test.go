package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
)

// Verdicts nobody waits for any more (their callers gave up) do not push
// out a decision a lease being registered needs: with 10,000 of them
// stashed around it, a cancel request that overtook its lease's
// registration still reaches the lease (the stash of 4,096 entries it
// replaced dropped it silently).
func TestStashKeepsWhatALeaseNeeds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("w1")
	const seq = 1 << 40
	abandoned := func(from, n int) {
		for i := range n {
			w.dispatch(events.Decision{Cause: uint64(seq + from + i), Kind: events.KindRenewed, Role: events.RoleWorker, Actor: "w1", Verb: events.VerbRenew, Job: events.Job{ID: "x"}})
		}
	}
	abandoned(0, 5000)
	job := events.Job{ID: "y", LeaseID: "L7", Generation: 1, Holder: "w1", State: events.StateActive, Duration: int64(time.Minute)}
	w.dispatch(events.Decision{Cause: seq - 1, Kind: events.KindCancelRequested, Reason: events.ReasonOk, Role: events.RoleOps,
		Actor: "op1", Addressee: "w1", Job: job})
	abandoned(5000, 5000)
	now := time.Now()
	granted := job
	granted.ExpiresAt = now.Add(time.Minute).UnixNano()
	l, err := w.newLease(events.Decision{Cause: seq - 2, Kind: events.KindGranted, At: now.UnixNano(), Job: granted}, now, LeaseOptions{RenewFraction: DefaultRenewFraction})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, l.CancelRequested(), time.Second, "the stashed cancel request")
	// And a verdict stashed first is still there for a caller that comes
	// back for it (a resend under the same Msg-Id has the same sequence).
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if d, err := w.await(ctx, seq, events.VerbRenew, "x"); err != nil || d.Cause != seq {
		t.Fatalf("the first stashed verdict: %v %v", d, err)
	}
	waitDone(t, l.loopDone, time.Second, "the renew loop to exit")
}

func TestStash(t *testing.T) {
	t0 := time.Unix(1000, 0)
	v := func(seq uint64, job string) events.Decision {
		return events.Decision{Cause: seq, Kind: events.KindRenewed, Job: events.Job{ID: job}}
	}
	t.Run("verdicts by input, up to n, a whole-input one alone", func(t *testing.T) {
		s := newStash()
		k := verdictKey{1, 7}
		for _, j := range []string{"a", "b", "c"} {
			if err := s.addVerdict(k, v(7, j), t0); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.addVerdict(verdictKey{2, 7}, v(7, "other-partition"), t0); err != nil {
			t.Fatal(err)
		}
		if got := s.takeVerdicts(k, 2, anyVerdict); len(got) != 2 || got[0].Job.ID != "a" || got[1].Job.ID != "b" {
			t.Fatalf("take 2: %v", got)
		}
		if got := s.takeVerdicts(k, 5, anyVerdict); len(got) != 1 || got[0].Job.ID != "c" {
			t.Fatalf("take the rest: %v", got)
		}
		if got := s.takeVerdicts(k, 1, anyVerdict); got != nil {
			t.Fatalf("taken twice: %v", got)
		}
		if s.n != 1 {
			t.Fatalf("held %d, want 1 (partition 2's)", s.n)
		}
		k3 := verdictKey{0, 9}
		_ = s.addVerdict(k3, v(9, events.NoJob), t0)
		_ = s.addVerdict(k3, v(9, "late"), t0)
		if got := s.takeVerdicts(k3, 3, anyVerdict); len(got) != 1 || got[0].Job.ID != events.NoJob {
			t.Fatalf("whole-input verdict: %v", got)
		}
	})
	t.Run("aged out after stashAge, not before", func(t *testing.T) {
		s := newStash()
		_ = s.addVerdict(verdictKey{0, 1}, v(1, "a"), t0)
		_ = s.addLease(leaseKey{"j", "L1"}, v(2, "j"), t0)
		_ = s.addVerdict(verdictKey{0, 3}, v(3, "c"), t0.Add(stashAge))
		if s.n != 3 {
			t.Fatalf("at stashAge: held %d, want 3", s.n)
		}
		if err := s.addVerdict(verdictKey{0, 4}, v(4, "d"), t0.Add(stashAge+time.Millisecond)); err != nil {
			t.Fatalf("an aged-out drop is no error: %v", err)
		}
		if s.n != 2 || s.takeVerdicts(verdictKey{0, 1}, 1, anyVerdict) != nil || s.takeLease(leaseKey{"j", "L1"}) != nil {
			t.Fatalf("past stashAge: held %d, the first two should be gone", s.n)
		}
		if got := s.takeVerdicts(verdictKey{0, 3}, 1, anyVerdict); len(got) != 1 {
			t.Fatalf("the third: %v", got)
		}
	})
	t.Run("a list claimed and stashed again is not aged out by its predecessor's entry", func(t *testing.T) {
		s := newStash()
		k := verdictKey{0, 1}
		_ = s.addVerdict(k, v(1, "a"), t0)
		s.takeVerdicts(k, 1, anyVerdict)
		_ = s.addVerdict(k, v(1, "b"), t0.Add(stashAge))
		_ = s.addVerdict(verdictKey{0, 2}, v(2, "x"), t0.Add(stashAge+time.Millisecond))
		if got := s.takeVerdicts(k, 1, anyVerdict); len(got) != 1 || got[0].Job.ID != "b" {
			t.Fatalf("the second list: %v", got)
		}
	})
	t.Run("past stashMax the oldest is dropped and reported", func(t *testing.T) {
		s := newStash()
		var err error
		for i := range stashMax + 1 {
			if err = s.addVerdict(verdictKey{0, uint64(i + 1)}, v(uint64(i+1), "j"), t0); err != nil {
				break
			}
		}
		if err == nil || !strings.Contains(err.Error(), "the verdicts of input 1]") {
			t.Fatalf("err %v, want the drop of input 1 reported", err)
		}
		if s.n != stashMax || s.takeVerdicts(verdictKey{0, 1}, 1, anyVerdict) != nil || s.takeVerdicts(verdictKey{0, 2}, 1, anyVerdict) == nil {
			t.Fatalf("held %d, want %d with input 1 dropped and 2 kept", s.n, stashMax)
		}
		if len(s.order)-s.head > stashMax {
			t.Fatalf("order holds %d entries", len(s.order)-s.head)
		}
	})
}

// anyVerdict takes every verdict (a waiter of any input).
func anyVerdict(*events.Decision) bool { return true }
