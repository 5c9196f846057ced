package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/events"
)

// A drain (WithDrain) is River's Stop: when its context ends, Run
// withdraws the capacity at once and takes no more jobs, but the running
// handlers go on: one that returns nil completes (SUCCESS), one that
// returns an error fails its attempt (FAILED, counted: nothing interrupted
// it), and one still running when the drain's timeout passes (on the
// worker's clock) has its context cancelled with ErrRunStopped and its
// lease released. Run returns nil. The result handler is told each
// outcome.
func TestRunDrain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wa := e.watch()
	fc := clock.NewFake(time.Now())
	w1 := e.worker("w1", WithClock(fc))
	started := make(chan string, 3)
	finish := map[string]chan struct{}{"ok": make(chan struct{}), "bad": make(chan struct{})}
	cancelledEarly := make(chan string, 3)
	causes := make(chan error, 1)
	var mu sync.Mutex
	results := map[string]Result{}
	drain, startDrain := context.WithCancel(context.Background())
	run := startRun(t, w1, "q", func(ctx context.Context, j *Job) error {
		started <- j.ID
		if j.ID == "slow" {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return context.Cause(ctx)
		}
		<-finish[j.ID]
		if ctx.Err() != nil {
			cancelledEarly <- j.ID
		}
		if j.ID == "bad" {
			return errors.New("disk full")
		}
		return nil
	}, WithConcurrency(3), WithDrain(drain, time.Minute), WithResultHandler(func(j *Job, res Result) {
		mu.Lock()
		results[j.ID] = res
		mu.Unlock()
	}))
	for _, job := range []string{"ok", "bad", "slow"} {
		e.submit(0, job, "q", events.Input{LeaseMS: 10 * 60 * 1000, MaxAttempts: 3})
	}
	for range 3 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the handlers did not start")
		}
	}
	startDrain()
	// The capacity is withdrawn at once, while every handler still runs.
	withdrawn := func(ds []events.Decision) (uint64, bool) {
		for i := len(ds) - 1; i >= 0; i-- {
			if d := ds[i]; d.Actor == "w1" && d.Kind == events.KindCapacitySet {
				return d.Cause, d.Capacity.Slots == 0
			}
		}
		return 0, false
	}
	wa.until(10*time.Second, "w1's capacity withdrawn", func(ds []events.Decision) bool { _, ok := withdrawn(ds); return ok })
	// A job submitted now waits for another worker: w1 takes no more.
	e.submit(0, "later", "q", events.Input{})
	w2 := e.worker("w2")
	startRun(t, w2, "q", func(context.Context, *Job) error { return nil })
	wa.state(10*time.Second, "later", events.StateCompleted)
	for _, d := range wa.of("later") {
		if d.Kind == events.KindAssigned && d.Job.Holder != "w2" {
			t.Fatalf("later offered to %s during w1's drain", d.Job.Holder)
		}
	}
	// The two handlers that finish during the drain report as usual.
	close(finish["ok"])
	close(finish["bad"])
	wa.state(10*time.Second, "ok", events.StateCompleted)
	wa.until(10*time.Second, "bad requeued", func(ds []events.Decision) bool {
		for _, d := range ds {
			if d.Job.ID == "bad" && d.Kind == events.KindRequeued {
				return true
			}
		}
		return false
	})
	for _, d := range wa.of("bad") {
		if d.Kind == events.KindRequeued && (d.Reason != events.ReasonAttemptFailed || d.Job.Attempt != 1) {
			t.Fatalf("bad after its error in the drain: requeued/%s after attempt %d, want attempt_failed (a counted attempt)", d.Reason, d.Job.Attempt)
		}
	}
	select {
	case job := <-cancelledEarly:
		t.Fatalf("%s's context was cancelled during the drain, before its timeout", job)
	default:
	}
	// The slow one runs until the drain's timeout passes on the worker's
	// clock; then its context is cancelled and its lease released.
	select {
	case cause := <-causes:
		t.Fatalf("slow cancelled before the timeout: %v", cause)
	default:
	}
	fc.Advance(time.Minute)
	select {
	case cause := <-causes:
		if !errors.Is(cause, ErrRunStopped) {
			t.Fatalf("slow's cause %v, want ErrRunStopped", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("slow was not cancelled when the drain's timeout passed")
	}
	if err := run.stop(t); err != nil {
		t.Fatalf("Run after a drain: %v, want nil", err)
	}
	// Released (then offered to w2, which completes it).
	wa.state(10*time.Second, "slow", events.StateCompleted)
	var ends []string
	for _, d := range wa.of("slow") {
		if d.Kind == events.KindReleased || d.Kind == events.KindCompleted {
			ends = append(ends, d.Job.Holder+" "+d.Kind.String())
		}
	}
	if len(ends) != 2 || ends[0] != "w1 released" || ends[1] != "w2 completed" {
		t.Fatalf("slow's attempts ended %v, want w1 released, w2 completed", ends)
	}
	mu.Lock()
	defer mu.Unlock()
	for job, want := range map[string]string{
		"ok":   "SUCCESS",
		"bad":  "FAILED (retried if attempts remain): disk full",
		"slow": "released (the run was stopping): not an attempt",
	} {
		if got := results[job].String(); got != want {
			t.Errorf("%s: result %q, want %q", job, got, want)
		}
	}
}
