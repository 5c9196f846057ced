package worker

// Run's announce loop in testing/synctest bubbles, against the in-memory
// coordinator of renewloop_test.go (why not the embedded server: see
// there): the instants of the announcements are exact.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/events"
)

func nop(context.Context, *Job) error { return nil }

// Run announces its capacity at once and again every third of the ttl,
// each announcement with slots = the concurrency and the ttl, so that it
// never lapses; when its ctx ends it withdraws (slots 0) and returns nil.
func TestRunAnnouncesBeforeTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, f := fakeWorker(t, 3*time.Second)
		defer w.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- w.Run(ctx, "q", nop, WithConcurrency(4), WithCapacityTTL(3*time.Second)) }()
		time.Sleep(3*time.Second + 500*time.Millisecond)
		synctest.Wait()
		got := f.pullsSeen()
		if len(got) != 4 {
			t.Fatalf("%d announcements in 3.5 s with a ttl of 3 s, want 4 (at 0, 1, 2, 3 s): %v", len(got), got)
		}
		for i, p := range got {
			if want := start.Add(time.Duration(i) * time.Second); !p.at.Equal(want) || p.queue != "q" || p.slots != 4 || p.ttl != 3*time.Second {
				t.Errorf("announcement %d: %+v at +%v, want q, 4 slots, ttl 3s at +%v", i, p, p.at.Sub(start), want.Sub(start))
			}
			if i > 0 && p.at.Sub(got[i-1].at) >= p.ttl {
				t.Errorf("announcement %d came %v after the previous one: the capacity lapsed", i, p.at.Sub(got[i-1].at))
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v, want nil after its ctx ended", err)
		}
		got = f.pullsSeen()
		if last := got[len(got)-1]; len(got) != 5 || last.slots != 0 || !last.at.Equal(start.Add(3500*time.Millisecond)) {
			t.Fatalf("after the ctx ended: %v, want one more announcement, of 0 slots, at +3.5s", got)
		}
	})
}

// An announcement whose verdict is not learned is reported and sent again
// a quarter of the interval after it gave up (its call waited
// VerdictTimeout), then every interval again once answered.
func TestRunAnnouncementRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log errorLog
		w, f := fakeWorker(t, 3*time.Second, WithErrorHandler(log.handle), WithVerdictTimeout(2*time.Second))
		defer w.Close()
		f.setMode(noVerdicts)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- w.Run(ctx, "q", nop, WithCapacityTTL(4*time.Second)) }()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		f.setMode(answer)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		// 0: no verdict until +2s; retry a quarter of 4/3 s later: +2.333s,
		// no verdict until +4.333s; +4.666s answered; then +6s.
		want := []time.Duration{0, 2333333333, 4666666666, 6000000000}
		got := f.pullsSeen()
		if len(got) != len(want) {
			t.Fatalf("announcements %v, want at +%v", got, want)
		}
		for i, p := range got {
			if d := p.at.Sub(start); d < want[i]-time.Microsecond || d > want[i]+time.Microsecond {
				t.Errorf("announcement %d at +%v, want +%v", i, d, want[i])
			}
		}
		errs := log.all()
		if len(errs) != 2 || !errors.Is(errs[0], ErrNoVerdict) {
			t.Errorf("reported %v, want the two announcements without a verdict", errs)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// With WithClock, the announce loop follows that clock, not package
// time's.
func TestRunAnnounceInjectedClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		w, f := fakeWorker(t, 3*time.Second, WithClock(fc))
		defer w.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx, "q", nop, WithCapacityTTL(3*time.Second)) }()
		synctest.Wait()
		time.Sleep(time.Minute) // package time's clock: nothing is due on it
		synctest.Wait()
		if got := f.pullsSeen(); len(got) != 1 {
			t.Fatalf("after a minute of package time's clock: %v, want the first announcement only", got)
		}
		fc.Advance(time.Second)
		synctest.Wait()
		if got := f.pullsSeen(); len(got) != 2 || !got[1].at.Equal(fc.Now()) {
			t.Fatalf("after Advance(1s): %v, want a second announcement at %v", got, fc.Now())
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// When the coordinator withdraws the announcement (a withdrawn decision:
// an offer to this worker was not ACKed in time), Run announces again at
// once rather than at its next interval: a worker that is alive keeps
// receiving jobs.
func TestRunAnnouncesAgainWhenWithdrawn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, f := fakeWorker(t, 30*time.Second)
		defer w.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- w.Run(ctx, "q", nop, WithConcurrency(2), WithCapacityTTL(30*time.Second)) }()
		time.Sleep(time.Second)
		synctest.Wait()
		if got := f.pullsSeen(); len(got) != 1 {
			t.Fatalf("%d announcements in the first second, want 1", len(got))
		}
		w.dispatch(events.Decision{Cause: 1 << 40, Kind: events.KindWithdrawn, Reason: events.ReasonAckDeadlinePassed,
			Role: events.RoleCoord, Actor: "c1", Verb: events.VerbTick, Addressee: w.ID(), Job: events.Job{ID: events.NoJob},
			Capacity: &events.Capacity{Queue: "q"}})
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		got := f.pullsSeen()
		if len(got) != 2 || got[1].slots != 2 || got[1].at.Sub(start) > 1010*time.Millisecond {
			t.Fatalf("after the withdrawal at +1s: %v, want a second announcement of 2 slots at once", got)
		}
		// Another queue's withdrawal changes nothing.
		w.dispatch(events.Decision{Cause: 1<<40 + 1, Kind: events.KindWithdrawn, Reason: events.ReasonAckDeadlinePassed,
			Role: events.RoleCoord, Actor: "c1", Verb: events.VerbTick, Addressee: w.ID(), Job: events.Job{ID: events.NoJob},
			Capacity: &events.Capacity{Queue: "other"}})
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if got := f.pullsSeen(); len(got) != 2 {
			t.Fatalf("another queue's withdrawal made %d announcements, want none more", len(got)-2)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// A refused announcement (a log below rules revision 4, say) stops Run,
// which returns the refusal, after withdrawing.
func TestRunStopsOnARefusedAnnouncement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, f := fakeWorker(t, 3*time.Second)
		defer w.Close()
		f.setMode(rejectPulls)
		err := w.Run(context.Background(), "q", nop)
		var ve *VerdictError
		if !errors.Is(err, ErrRejected) || !errors.As(err, &ve) || ve.Reason != "bad_value" {
			t.Fatalf("Run: %v, want the refusal", err)
		}
		if got := f.pullsSeen(); len(got) != 2 || got[1].slots != 0 {
			t.Fatalf("pulls %v, want the announcement and the withdrawal", got)
		}
		// The queue is free again for another Run.
		f.setMode(answer)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := w.Run(ctx, "q", nop); err != nil {
			t.Fatalf("Run after the first returned: %v", err)
		}
	})
}

// A pull refused bad_subject (a log whose rules input a crash lost judges
// it under revision 1, which knows no pull, until a live coordinator moves
// it to its revision again) does not stop Run: the refusal is reported and
// the announcement tried again, and accepted once the log knows queues
// again (the simulator's seeds 13603 and 61869 stopped Run for good).
func TestRunAnnouncesAgainAfterAnUnknownVerb(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log errorLog
		w, f := fakeWorker(t, 3*time.Second, WithErrorHandler(log.handle))
		defer w.Close()
		f.setMode(unknownPulls)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx, "q", nop, WithCapacityTTL(30*time.Second)) }()
		time.Sleep(10 * time.Second)
		select {
		case err := <-done:
			t.Fatalf("Run stopped on bad_subject: %v", err)
		default:
		}
		refused := len(f.pullsSeen())
		if refused < 2 {
			t.Fatalf("%d pulls while refused, want the announcement tried again", refused)
		}
		f.setMode(answer)
		time.Sleep(10 * time.Second)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if n := len(f.pullsSeen()); n <= refused {
			t.Fatalf("no pull after the log knew queues again (%d pulls)", n)
		}
		reported := false
		for _, err := range log.all() {
			var ve *VerdictError
			if errors.As(err, &ve) && ve.Reason == events.ReasonBadSubject {
				reported = true
			}
		}
		if !reported {
			t.Fatalf("the refusal was not reported: %v", log.all())
		}
	})
}

// newJob gives the handler the job's concurrency key (rules revision 9)
// and its schedule (revision 8), from the assigned decision's projection.
func TestNewJobFlowFields(t *testing.T) {
	o := &Offer{Decision: events.Decision{Job: events.Job{ID: "j", Queue: "q", ConcurrencyKey: "acct-42", SubmittedAt: 5e9, Delay: 2e9}}}
	j := newJob(o, nil)
	if j.ConcurrencyKey != "acct-42" || !j.ScheduledFor.Equal(time.Unix(7, 0)) {
		t.Fatalf("job %+v", j)
	}
}

// A surplus offer is declined only once the corrected announcement is
// stored. Here the coordinator ended j1 while its ACK was on the way (its
// verdict never comes) and offered j2 in its place: Run corrects its
// announcement to the leases whose ACKs were accepted, none, before it
// declines j2. That correction's verdict is lost; declining then, with 1
// slot still announced and j2 the one live lease, would be a refusal (a
// strike, a hold, a halved window: PROTOCOL.md §22.8) against an honest
// worker. Run sends the correction again at once and declines after it is
// stored. (The long run's "withdrawn offer_declined" included such
// declines; before this, Run declined with the correction lost.)
func TestRunSurplusDeclinedOnceItsAnnouncementIsStored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := surplusInputs(t, time.Second, 1, 3*time.Second)
		lost, stored, released := slices.Index(got, "pull 0 lost"), slices.Index(got, "pull 0"), slices.Index(got, "release j2")
		if lost < 0 || released < 0 || stored < 0 || stored > released {
			t.Errorf("inputs %v: want the correction (pull 0) lost, sent again and stored, then j2 released", got)
		}
	})
}

// surplusInputs runs Run (concurrency 1) on the fake coordinator, which
// answers no ACK, loses the next lose pulls of 0 slots and waits
// verdictTimeout for each: j1 is offered, then j2 with an ACK window of
// j2Ack, which passes. It returns the pulls and releases, in order.
func surplusInputs(t *testing.T, verdictTimeout time.Duration, lose int, j2Ack time.Duration) []string {
	w, f := fakeWorker(t, time.Minute, WithVerdictTimeout(verdictTimeout))
	defer w.Close()
	f.mu.Lock()
	f.holdAcks, f.loseZeroPulls = true, lose
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, "q", nop, WithConcurrency(1), WithCapacityTTL(30*time.Second)) }()
	synctest.Wait() // announced: 1 slot
	f.offerJob("j1", 10*time.Second)
	synctest.Wait() // j1's ACK sent; its verdict never comes
	f.offerJob("j2", j2Ack)
	time.Sleep(j2Ack)
	synctest.Wait()
	var got []string
	for _, s := range f.logged() {
		if !strings.HasPrefix(s, "ack ") {
			got = append(got, s)
		}
	}
	t.Logf("inputs %v", got)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	return got
}

// A correction never stored is tried surplusAnnounceTries times at most,
// and only while half j2's ACK window lasts: j2 is then declined before
// its ACK deadline (a refusal, but a timely one), not held in a loop of
// announcements.
func TestRunSurplusCorrectionTriedBoundedly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := surplusInputs(t, 200*time.Millisecond, 1000, 10*time.Second)
		released := slices.Index(got, "release j2")
		if released < 0 || slices.Contains(got[:released], "pull 0") {
			t.Fatalf("inputs %v: want j2 released, no correction stored", got)
		}
		if n := len(slices.DeleteFunc(slices.Clone(got[:released]), func(s string) bool { return s != "pull 0 lost" })); n != surplusAnnounceTries {
			t.Errorf("%d corrections before the release, want %d", n, surplusAnnounceTries)
		}
	})
}
