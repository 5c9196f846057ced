package worker

import (
	"context"
	"errors"
	"fmt"
	"github.com/maknow/tenure/internal/testutil"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
)

// A handler that returns nil completes each job exactly once, with
// SUCCESS; the Job carries the queue fields of the offer.
func TestRunSuccessCompletesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wa := e.watch()
	w := e.worker("w1")
	var mu sync.Mutex
	ran := map[string][]Job{}
	run := startRun(t, w, "q", func(ctx context.Context, j *Job) error {
		if err := j.Lease.Progress(ctx, 50); err != nil {
			return err
		}
		mu.Lock()
		ran[j.ID] = append(ran[j.ID], *j)
		mu.Unlock()
		return nil
	})
	jobs := []string{"a", "b", "c", "d", "e"}
	for i, job := range jobs {
		e.submit(0, job, "q", events.Input{Priority: int64(i % 3), MaxAttempts: 4, Payload: "payload of " + job, HasPayload: true})
	}
	for _, job := range jobs {
		wa.state(10*time.Second, job, events.StateCompleted)
	}
	if err := run.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, job := range jobs {
		if len(ran[job]) != 1 {
			t.Fatalf("%s: handler ran %d times, want once", job, len(ran[job]))
		}
		j := ran[job][0]
		if j.Queue != "q" || !j.HasPayload || j.Payload != "payload of "+job || j.Attempt != 1 || j.MaxAttempts != 4 ||
			j.Priority != int64(i%3) || j.Submitter != "op1" || j.LastReason != "" || j.SubmittedAt.IsZero() {
			t.Errorf("%s: job %+v", job, j)
		}
		if tok := j.Lease.Token(); tok.Job != job || tok.Generation != 1 {
			t.Errorf("%s: token %s", job, tok)
		}
		var completed []events.Decision
		for _, d := range wa.of(job) {
			if d.Kind == events.KindCompleted {
				completed = append(completed, d)
			}
		}
		if len(completed) != 1 || completed[0].Job.Result != events.OutcomeSuccess || completed[0].Job.ProgressValue != 50 {
			t.Errorf("%s: completed decisions %+v, want one SUCCESS after progress 50", job, completed)
		}
	}
}

// A handler's error fails the attempt: the queue retries it after its
// backoff, and the job ends DEAD after max_attempts. The detail is the
// error's text, its control characters replaced (the protocol refuses
// them in text).
func TestRunErrorRetriesThenDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wa := e.watch()
	w := e.worker("w1")
	var attempts []uint64
	var mu sync.Mutex
	startRun(t, w, "q", func(_ context.Context, j *Job) error {
		mu.Lock()
		attempts = append(attempts, j.Attempt)
		mu.Unlock()
		return fmt.Errorf("boom\nat attempt %d", j.Attempt)
	})
	e.submit(0, "j1", "q", events.Input{MaxAttempts: 3, BackoffMS: 200, BackoffMax: 300})
	dead := wa.state(20*time.Second, "j1", events.StateDead)
	if dead.Kind != events.KindDead || dead.Reason != events.ReasonAttemptFailed || dead.Job.Attempt != 3 {
		t.Fatalf("end %s/%s attempt %d, want dead/attempt_failed after 3", dead.Kind, dead.Reason, dead.Job.Attempt)
	}
	mu.Lock()
	if fmt.Sprint(attempts) != "[1 2 3]" {
		t.Errorf("handler saw attempts %v, want [1 2 3]", attempts)
	}
	mu.Unlock()
	ds := wa.of("j1")
	var results, offers []events.Decision
	var requeued []events.Decision
	for _, d := range ds {
		switch d.Kind {
		case events.KindCompleted:
			results = append(results, d)
		case events.KindAssigned:
			offers = append(offers, d)
		case events.KindRequeued:
			requeued = append(requeued, d)
		}
	}
	if len(results) != 3 || len(offers) != 3 || len(requeued) != 2 {
		t.Fatalf("decisions %s: want 3 offers, 3 results, 2 requeues", kinds(ds))
	}
	for i, d := range results {
		if want := fmt.Sprintf("boom at attempt %d", i+1); d.Job.Result != events.OutcomeFailed {
			t.Errorf("result %d: %s, want FAILED", i, d.Job.Result)
		} else if detail := resultDetail(t, e, d.Cause); detail != want {
			t.Errorf("result %d: detail %q, want %q", i, detail, want)
		}
	}
	// The backoff: attempt k waits min(300, 200*2^(k-1)) ms less a jitter
	// of at most a quarter; the next offer is not made before ready_at.
	for i, rq := range requeued {
		wait := time.Duration(rq.Job.ReadyAt - rq.Job.EndedAt)
		base := min(300*time.Millisecond, 200*time.Millisecond<<i)
		if wait > base || wait < base-base/4 {
			t.Errorf("requeue %d: backoff %v, want %v less at most a quarter", i, wait, base)
		}
		if next := offers[i+1]; next.At < rq.Job.ReadyAt {
			t.Errorf("attempt %d offered %v before its ready_at", i+2, time.Duration(rq.Job.ReadyAt-next.At))
		}
	}
}

// resultDetail is the detail of the result input stored at seq.
func resultDetail(t *testing.T, e *env, seq uint64) string {
	t.Helper()
	for _, m := range e.readStream("TENURE_IN") {
		if m.seq != seq {
			continue
		}
		var in events.Input
		if err := events.DecodeInput(m.subject, m.data, &in); err != nil {
			t.Fatalf("input %d: %v", seq, err)
		}
		return in.Text
	}
	t.Fatalf("no input %d", seq)
	return ""
}

// resultInput is the result input stored at seq.
func resultInput(t *testing.T, e *env, seq uint64) events.Input {
	t.Helper()
	for _, m := range e.readStream("TENURE_IN") {
		if m.seq == seq {
			var in events.Input
			if err := events.DecodeInput(m.subject, m.data, &in); err != nil {
				t.Fatalf("input %d: %v", seq, err)
			}
			return in
		}
	}
	t.Fatalf("no input %d", seq)
	return events.Input{}
}

// An error matching ErrPermanent fails the job at once: FAILED, with
// "permanent":true, never retried although attempts remain.
func TestRunPermanentError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wa := e.watch()
	w := e.worker("w1")
	var calls atomic.Int32
	startRun(t, w, "q", func(_ context.Context, j *Job) error {
		calls.Add(1)
		if j.ID == "wrapped" {
			return fmt.Errorf("no such customer: %w", ErrPermanent)
		}
		return Permanent(errors.New("malformed payload"))
	})
	for _, job := range []string{"marked", "wrapped"} {
		e.submit(0, job, "q", events.Input{MaxAttempts: 5, BackoffMS: 10})
	}
	for job, detail := range map[string]string{"marked": "malformed payload", "wrapped": "no such customer: worker: permanent failure"} {
		end := wa.state(10*time.Second, job, events.StateFailed)
		if end.Kind != events.KindCompleted || end.Job.Attempt != 1 {
			t.Fatalf("%s: end %s/%s attempt %d, want completed FAILED after 1", job, end.Kind, end.Reason, end.Job.Attempt)
		}
		in := resultInput(t, e, end.Cause)
		if !in.Permanent || in.Outcome != events.OutcomeFailed || in.Text != detail {
			t.Errorf("%s: result %s permanent %v detail %q, want FAILED permanent %q", job, in.Outcome, in.Permanent, in.Text, detail)
		}
	}
	// A requeue would be decided by the result's own input; a job
	// submitted now completes after it, and the watcher receives the
	// decisions in their order: by then a requeue would have been seen.
	e.submit(0, "marker", "q", events.Input{})
	wa.state(10*time.Second, "marker", events.StateFailed)
	for _, job := range []string{"marked", "wrapped"} {
		for _, d := range wa.of(job) {
			if d.Kind == events.KindRequeued || d.Kind == events.KindAssigned && d.Job.Attempt > 1 {
				t.Errorf("%s %s after a permanent failure", job, d.Kind)
			}
		}
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("handler called %d times, want 3 (marked, wrapped, marker)", n)
	}
}

// A panic in the handler is a failed attempt (detail "panic: ..."), the
// stack goes to the ErrorHandler, and the worker goes on: the job's retry
// and another job complete.
func TestRunPanicIsAFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wa := e.watch()
	var log errorLog
	w := e.worker("w1", WithErrorHandler(log.handle))
	startRun(t, w, "q", func(_ context.Context, j *Job) error {
		if j.ID == "bad" && j.Attempt == 1 {
			var s []int
			_ = s[j.Attempt] // out of range: the runtime panics
		}
		return nil
	})
	e.submit(0, "bad", "q", events.Input{BackoffMS: 10})
	wa.state(10*time.Second, "bad", events.StateCompleted)
	e.submit(0, "good", "q", events.Input{})
	wa.state(10*time.Second, "good", events.StateCompleted)
	var failed []events.Decision
	for _, d := range wa.of("bad") {
		if d.Kind == events.KindCompleted && d.Job.Result == events.OutcomeFailed {
			failed = append(failed, d)
		}
	}
	if len(failed) != 1 {
		t.Fatalf("bad: %s: want one FAILED attempt, then a success", kinds(wa.of("bad")))
	}
	if detail := resultDetail(t, e, failed[0].Cause); !strings.HasPrefix(detail, "panic: runtime error: index out of range [1] with length 0") {
		t.Errorf("detail %q, want the panic", detail)
	}
	reported := false
	for _, err := range log.all() {
		reported = reported || strings.Contains(err.Error(), "handler panicked") && strings.Contains(err.Error(), "run_test.go")
	}
	if !reported {
		t.Errorf("the panic and its stack were not reported: %v", log.all())
	}
}

// Run never runs more handlers at once than its concurrency, and reaches
// it when there is work.
func TestRunConcurrencyLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wa := e.watch()
	w := e.worker("w1")
	const limit, n = 3, 15
	var running, most atomic.Int32
	startRun(t, w, "q", func(ctx context.Context, j *Job) error {
		now := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if now <= m || most.CompareAndSwap(m, now) {
				break
			}
		}
		select {
		case <-time.After(60 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}, WithConcurrency(limit))
	for i := range n {
		e.submit(0, fmt.Sprintf("j%d", i), "q", events.Input{})
	}
	for i := range n {
		wa.state(20*time.Second, fmt.Sprintf("j%d", i), events.StateCompleted)
	}
	if m := most.Load(); m != limit {
		t.Fatalf("at most %d handlers ran at once, want %d (the limit, reached)", m, limit)
	}
	for _, d := range wa.all() {
		if d.Kind == events.KindCapacitySet && d.Capacity.Slots > limit {
			t.Fatalf("announced %d slots, above the limit %d", d.Capacity.Slots, limit)
		}
	}
}

// An operator's cancel cancels the handler's context with a cause
// matching ErrCancelRequested, and Run reconciles (cancel ACK, CANCELLED):
// the job ends CANCELLED. A revocation cancels it with lease_revoked
// (ErrLostAuthority); the handler's return is not reported, and the job's
// next attempt runs.
func TestRunHandlerContextOnCancelAndRevoke(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wa := e.watch()
	var log errorLog
	w := e.worker("w1", WithErrorHandler(log.handle))
	started := make(chan string, 4)
	causes := make(chan error, 4)
	startRun(t, w, "q", func(ctx context.Context, j *Job) error {
		if j.Attempt > 1 {
			return nil
		}
		started <- j.ID
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return context.Cause(ctx)
	}, WithConcurrency(2))

	e.submit(0, "c", "q", events.Input{})
	waitFor(t, started, "c")
	e.publishOps(0, &events.Input{Job: "c", Verb: events.VerbCancel, Text: "customer withdrew"})
	cause := <-causes
	var ve *VerdictError
	if !errors.Is(cause, ErrCancelRequested) || !errors.As(cause, &ve) || ve.Kind != events.KindCancelRequested {
		t.Fatalf("cause after cancel %v, want the cancel_requested decision", cause)
	}
	end := wa.state(10*time.Second, "c", events.StateCancelled)
	if !end.Job.CancelAck || end.Job.Result != events.OutcomeCancelled {
		t.Fatalf("c ended %+v, want CANCELLED with the cancel ACKed", end.Job)
	}

	e.submit(0, "r", "q", events.Input{BackoffMS: 10})
	waitFor(t, started, "r")
	e.publishOps(0, &events.Input{Job: "r", Verb: events.VerbResolve, Action: events.ActionRevoke, Text: "drain"})
	cause = <-causes
	if !errors.Is(cause, ErrLostAuthority) || !errors.As(cause, &ve) || ve.Reason != events.ReasonLeaseRevoked {
		t.Fatalf("cause after revoke %v, want lease_revoked", cause)
	}
	end = wa.state(10*time.Second, "r", events.StateCompleted)
	if end.Job.Generation != 2 || end.Job.Attempt != 2 {
		t.Fatalf("r completed at generation %d attempt %d, want the second", end.Job.Generation, end.Job.Attempt)
	}
	for _, d := range wa.of("r") {
		if d.Verb == events.VerbResult && d.Job.Generation == 1 {
			t.Fatalf("a result of the revoked lease was sent: %s/%s", d.Kind, d.Reason)
		}
	}
	reported := false
	for _, err := range log.all() {
		reported = reported || errors.Is(err, ErrLostAuthority) && strings.Contains(err.Error(), "not reported")
	}
	if !reported {
		t.Errorf("the unreported return was not reported to the ErrorHandler: %v", log.all())
	}
}

func waitFor[T comparable](t *testing.T, ch <-chan T, want T) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("got %v, want %v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %v", want)
	}
}

// Shutdown: when Run's ctx ends, the capacity is withdrawn (a pull of 0
// slots, stored before anything else Run sends), the running handlers'
// contexts are cancelled with ErrRunStopped, their leases released (not
// counted: the next worker's attempt is attempt 1 again), nothing more is
// offered to the worker, and Run returns nil once they have returned.
func TestRunShutdownReleasesAndWithdraws(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wa := e.watch()
	w1 := e.worker("w1")
	started := make(chan string, 4)
	causes := make(chan error, 4)
	run := startRun(t, w1, "q", func(ctx context.Context, j *Job) error {
		started <- j.ID
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}, WithConcurrency(2))
	for _, job := range []string{"a", "b", "c"} {
		e.submit(0, job, "q", events.Input{})
	}
	got := map[string]bool{}
	for range 2 {
		select {
		case job := <-started:
			got[job] = true
		case <-time.After(10 * time.Second):
			t.Fatal("the handlers did not start")
		}
	}
	if err := run.stop(t); err != nil {
		t.Fatalf("Run after shutdown: %v, want nil", err)
	}
	for range 2 {
		if cause := <-causes; !errors.Is(cause, ErrRunStopped) || !errors.Is(cause, context.Canceled) {
			t.Fatalf("handler's cause %v, want ErrRunStopped wrapping context.Canceled", cause)
		}
	}
	e.caughtUp()
	// The watcher's core subscription may still be delivering the last
	// decisions the coordinator stored.
	testutil.WaitFor(t, 10*time.Second, "the watcher to see both releases", func() bool {
		n := 0
		for _, d := range wa.all() {
			if d.Actor == "w1" && d.Kind == events.KindReleased {
				n++
			}
		}
		return n >= 2
	})
	// The last of w1's pulls withdrew the capacity, before the releases.
	var withdrawSeq uint64
	releases := 0
	for _, d := range wa.all() {
		if d.Actor != "w1" {
			continue
		}
		switch {
		case d.Kind == events.KindCapacitySet:
			withdrawSeq = 0
			if d.Capacity.Slots == 0 {
				withdrawSeq = d.Cause
			}
		case d.Kind == events.KindReleased:
			releases++
			if withdrawSeq == 0 || d.Cause < withdrawSeq {
				t.Errorf("%s released (input %d) before the capacity was withdrawn (input %d)", d.Job.ID, d.Cause, withdrawSeq)
			}
			if !got[d.Job.ID] {
				t.Errorf("released %s, which was not running", d.Job.ID)
			}
		case d.Kind == events.KindCompleted:
			t.Errorf("%s completed (%s) at shutdown, want released", d.Job.ID, d.Job.Result)
		}
	}
	if withdrawSeq == 0 || releases != 2 {
		t.Fatalf("withdrawn at input %d, %d releases; want the capacity withdrawn last, 2 releases", withdrawSeq, releases)
	}
	for _, d := range wa.all() {
		if d.Kind == events.KindAssigned && d.Job.Holder == "w1" && d.Cause > withdrawSeq {
			t.Errorf("%s offered to w1 after its withdrawal", d.Job.ID)
		}
	}
	// Another worker takes the three jobs; the released ones' attempts
	// were not counted.
	w2 := e.worker("w2")
	var mu sync.Mutex
	attempts := map[string]uint64{}
	startRun(t, w2, "q", func(_ context.Context, j *Job) error {
		mu.Lock()
		attempts[j.ID] = j.Attempt
		mu.Unlock()
		return nil
	}, WithConcurrency(3))
	for _, job := range []string{"a", "b", "c"} {
		wa.state(10*time.Second, job, events.StateCompleted)
	}
	mu.Lock()
	defer mu.Unlock()
	for job, n := range attempts {
		if n != 1 {
			t.Errorf("%s: attempt %d at w2, want 1 (a release is not counted)", job, n)
		}
	}
}

// A handler that returns nil after the shutdown began has completed its
// job: SUCCESS, not a release.
func TestRunShutdownLetsAFinishedHandlerComplete(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wa := e.watch()
	w := e.worker("w1")
	started := make(chan string, 1)
	run := startRun(t, w, "q", func(ctx context.Context, j *Job) error {
		started <- j.ID
		<-ctx.Done()
		return nil // the last step could not be interrupted: done all the same
	})
	e.submit(0, "a", "q", events.Input{})
	waitFor(t, started, "a")
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if end := wa.state(10*time.Second, "a", events.StateCompleted); end.Job.Result != events.OutcomeSuccess {
		t.Fatalf("a: %s", end.Job.Result)
	}
}

// Two Runs of one worker on two queues each get their own queue's jobs;
// an offer a dispatcher makes still reaches Offers(); a second Run on a
// queue already run is refused.
func TestRunTwoQueuesOneWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wa := e.watch()
	w := e.worker("w1")
	var mu sync.Mutex
	seen := map[string][]string{}
	handler := func(queue string) Handler {
		return func(_ context.Context, j *Job) error {
			mu.Lock()
			seen[queue] = append(seen[queue], j.Queue+"/"+j.ID)
			mu.Unlock()
			return nil
		}
	}
	startRun(t, w, "qa", handler("qa"), WithConcurrency(2))
	startRun(t, w, "qb", handler("qb"))
	for i := range 4 {
		e.submit(0, fmt.Sprintf("a%d", i), "qa", events.Input{})
		e.submit(0, fmt.Sprintf("b%d", i), "qb", events.Input{})
	}
	e.publishOps(0, &events.Input{Job: "plain", Verb: events.VerbOffer, Holder: "w1"})
	select {
	case o := <-w.Offers():
		if o.Job != "plain" {
			t.Fatalf("Offers() got %s, want the dispatcher's offer only", o.Job)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dispatcher's offer did not reach Offers()")
	}
	for i := range 4 {
		wa.state(10*time.Second, fmt.Sprintf("a%d", i), events.StateCompleted)
		wa.state(10*time.Second, fmt.Sprintf("b%d", i), events.StateCompleted)
	}
	mu.Lock()
	for queue, jobs := range seen {
		if len(jobs) != 4 {
			t.Errorf("%s ran %v, want its 4 jobs", queue, jobs)
		}
		for _, j := range jobs {
			if !strings.HasPrefix(j, queue+"/"+queue[1:]) {
				t.Errorf("the handler of %s ran %s", queue, j)
			}
		}
	}
	mu.Unlock()
	err := w.Run(context.Background(), "qa", handler("qa"))
	if !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("a second Run on qa: %v, want ErrAlreadyRunning", err)
	}
	select {
	case o := <-w.Offers():
		t.Fatalf("a queue's offer reached Offers(): %s", o.Job)
	default:
	}
}

// Closing the Worker stops its Runs: the handlers' contexts are cancelled
// (ErrClosed), and Run returns ErrClosed once they have returned.
func TestRunStopsWhenTheWorkerCloses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("w1")
	started := make(chan string, 1)
	causes := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- w.Run(context.Background(), "q", func(ctx context.Context, j *Job) error {
			started <- j.ID
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		})
	}()
	e.submit(0, "a", "q", events.Input{})
	waitFor(t, started, "a")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if cause := <-causes; !errors.Is(cause, ErrClosed) {
		t.Fatalf("handler's cause %v, want ErrClosed", cause)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Run: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Close")
	}
	if err := w.Run(context.Background(), "q", nop); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close: %v, want ErrClosed", err)
	}
}

// Run coalesces its ACKs and results under load (rules revision 7): 300
// jobs submitted at once to a Run of concurrency 64 are each ACKed once
// and completed once, with fewer ACK and result inputs than jobs, batches
// among them, and every batch element's verdict its own.
func TestRunBatchesAcksAndResults(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wa := e.watch()
	w := e.worker("w1")
	run := startRun(t, w, "q", func(context.Context, *Job) error { return nil }, WithConcurrency(64))
	in := events.Input{Role: events.RoleOps, Actor: "op1", Job: events.NoJob, Verb: events.VerbSubmit}
	const n = 300
	for i := range n {
		in.Batch = append(in.Batch, events.Input{Job: fmt.Sprintf("b%03d", i), Queue: "q"})
		if len(in.Batch) == events.MaxBatch || i == n-1 {
			e.publishOps(0, &in)
			in.Batch = nil
		}
	}
	wa.until(60*time.Second, "every job completed", func(ds []events.Decision) bool {
		done := 0
		for _, d := range ds {
			if d.Kind == events.KindCompleted {
				done++
			}
		}
		return done == n
	})
	if err := run.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	acked, completed := map[string]int{}, map[string]int{}
	inputs := map[events.Verb]map[uint64]int{events.VerbAck: {}, events.VerbResult: {}}
	for _, d := range wa.all() {
		if d.Kind.Derived() || d.Actor != "w1" {
			continue
		}
		switch d.Verb {
		case events.VerbAck:
			if d.Kind != events.KindAcked {
				t.Errorf("ACK of %s: %s/%s", d.Job.ID, d.Kind, d.Reason)
			}
			acked[d.Job.ID]++
		case events.VerbResult:
			if d.Kind != events.KindCompleted || d.Job.Result != events.OutcomeSuccess {
				t.Errorf("result of %s: %s/%s", d.Job.ID, d.Kind, d.Reason)
			}
			completed[d.Job.ID]++
		default:
			continue
		}
		inputs[d.Verb][d.Cause]++
	}
	for i := range n {
		job := fmt.Sprintf("b%03d", i)
		if acked[job] != 1 || completed[job] != 1 {
			t.Errorf("%s: %d ACKs and %d results accepted, want one each", job, acked[job], completed[job])
		}
	}
	for v, byInput := range inputs {
		most := 0
		for _, k := range byInput {
			most = max(most, k)
		}
		if len(byInput) >= n || most < 2 {
			t.Errorf("%d %s inputs for %d jobs, the largest of %d: want batches", len(byInput), v, n, most)
		}
		t.Logf("%s: %d inputs for %d jobs, the largest of %d", v, len(byInput), n, most)
	}
}
