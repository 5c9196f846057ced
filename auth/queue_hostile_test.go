package auth_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/worker"
)

// queueHostileJobs is how many jobs TestAttackQueueStarvedOrKilled queues.
const queueHostileJobs = 1000

// A worker cannot starve a queue's honest workers nor kill its jobs
// (issue "Queues that one worker cannot starve or kill", rules revision
// 5). One queue of 1,000 jobs, two honest SDK workers (worker.Run, four
// slots each) and w2, holding only its own credentials, announcing 256
// slots again and again and, by mode: declining every offer; ACKing it
// and releasing it; never ACKing; ACKing and never renewing (the lease
// expires). Every job must end COMPLETED exactly once and none DEAD, and
// the audit be clean; the honest workers' throughput, against the same
// run without w2, is logged (tenure bench's queue_hostile_ratio measures
// it). Under revision 4, declining sent jobs DEAD at max_generations and
// starved the honest workers (the most free slots took every offer).
//
// Throughput is measured as the time to complete 95% of the jobs: the
// last few wait out an ACK timeout or a lease w2 sat on (at most its
// window of 8 at once), which would make the time to the last job a
// measure of those timeouts rather than of the honest workers' rate.
func TestAttackQueueStarvedOrKilled(t *testing.T) {
	t.Parallel()
	base95, base := queueHostileRun(t, "")
	for _, mode := range []string{"decline", "release", "never-ack", "ack-expire"} {
		t.Run(mode, func(t *testing.T) {
			d95, d := queueHostileRun(t, mode)
			t.Logf("%s: 95%% of %d jobs in %v with w2, %v without: honest throughput ratio %.2f (all of them: %v, %v)",
				mode, queueHostileJobs, d95.Round(time.Millisecond), base95.Round(time.Millisecond), float64(base95)/float64(d95),
				d.Round(time.Millisecond), base.Round(time.Millisecond))
		})
	}
}

// queueHostileRun runs the scenario on a fresh deployment, with w2 in mode
// ("" for none), and returns the time the honest workers took to complete
// 95% of the jobs, and all of them.
func queueHostileRun(t *testing.T, mode string) (p95, all time.Duration) {
	t.Helper()
	e := newAttackEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const queue = "work"
	// Every job submitted first (its ACK timeout and lease short, so that
	// w2's modes cost seconds, not minutes).
	disp := connect(t, e.b, e.url, "disp")
	var acks []jetstream.PubAckFuture
	for i := range queueHostileJobs {
		f, err := disp.js.PublishAsync(fmt.Sprintf("tenure.in.ops.disp.j%04d.submit", i),
			[]byte(`{"v":1,"queue":"work","max_attempts":3,"backoff_ms":100,"lease_ms":2000,"ack_timeout_ms":1000}`))
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, f)
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatal("no PubAck for a submit")
		}
	}

	var hostileWG sync.WaitGroup
	if mode != "" {
		a := e.attacker(t)
		w2, err := worker.Connect(a.nc, "w2", worker.WithErrorHandler(func(error) {}))
		if err != nil {
			t.Fatal(err)
		}
		defer w2.Close()
		hostileWG.Add(2)
		go func() { // announce 256 slots, again and again
			defer hostileWG.Done()
			for ctx.Err() == nil {
				_, _ = a.js.Publish(ctx, "tenure.in.worker.w2._.pull", []byte(`{"v":1,"queue":"work","slots":256,"ttl_ms":60000}`))
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
		go func() {
			defer hostileWG.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case o, ok := <-w2.Offers():
					if !ok {
						return
					}
					switch mode {
					case "decline":
						_ = o.Decline(ctx)
					case "release":
						if l, err := o.Accept(ctx); err == nil {
							_ = l.Release(ctx)
						}
					case "ack-expire": // a bare ACK: nothing renews the lease
						_, _ = a.js.Publish(ctx, "tenure.in.worker.w2."+o.Job+".ack",
							fmt.Appendf(nil, `{"v":1,"lease_id":%q,"generation":%d}`, o.LeaseID, o.Generation))
					}
				}
			}
		}()
	}

	// The honest workers run the queue.
	var done atomic.Int64
	var at95 atomic.Int64 // ns since start when 95% were done
	start := time.Now()
	var runs sync.WaitGroup
	for _, id := range []string{"w1", "w3"} {
		c := connect(t, e.b, e.url, id)
		w, err := worker.Connect(c.nc, id, worker.WithErrorHandler(func(error) {}))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		runs.Go(func() {
			_ = w.Run(ctx, queue, func(context.Context, *worker.Job) error {
				if done.Add(1) == queueHostileJobs*95/100 {
					at95.Store(int64(time.Since(start)))
				}
				return nil
			}, worker.WithConcurrency(4))
		})
	}
	deadline := time.Now().Add(90 * time.Second)
	for done.Load() < queueHostileJobs && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // a progress counter, read until it is full or the deadline passes
	}
	took := time.Since(start)
	if n := done.Load(); n < queueHostileJobs {
		t.Errorf("mode %q: the honest workers ran %d of %d jobs in %v", mode, n, queueHostileJobs, took.Round(time.Millisecond))
	}
	// Every job COMPLETED, once; none DEAD. (A handler that returned has
	// its result sent after: the last ones may still be on their way.)
	_ = testutil.Poll(30*time.Second, func() error {
		n := 0
		for _, sd := range e.decisions(t) {
			if sd.d.Kind == events.KindCompleted {
				n++
			}
		}
		if n < queueHostileJobs {
			return fmt.Errorf("%d completed", n)
		}
		return nil
	})
	e.checkCoordinator(t)
	completed := map[string]int{}
	dead, toHostile := 0, 0
	for _, sd := range e.decisions(t) {
		d := sd.d
		switch {
		case d.Kind == events.KindCompleted && d.Job.Result == events.OutcomeSuccess:
			completed[d.Job.ID]++
		case d.Kind == events.KindDead:
			dead++
			if dead <= 3 {
				t.Errorf("mode %q: decision %d: job %s DEAD (%s, generation %d, attempt %d)", mode, sd.seq, d.Job.ID, d.Reason, d.Job.Generation, d.Job.Attempt)
			}
		case d.Kind == events.KindAssigned && d.Job.Holder == "w2":
			toHostile++
		}
	}
	once := 0
	for _, n := range completed {
		if n == 1 {
			once++
		}
	}
	if once != queueHostileJobs || len(completed) != queueHostileJobs {
		t.Errorf("mode %q: %d jobs completed exactly once, %d completed at all, of %d", mode, once, len(completed), queueHostileJobs)
	}
	if dead > 0 {
		t.Errorf("mode %q: %d jobs DEAD", mode, dead)
	}
	t.Logf("mode %q: %d jobs completed in %v; %d offers went to w2", mode, len(completed), took.Round(time.Millisecond), toHostile)
	cancel()
	runs.Wait()
	hostileWG.Wait()
	e.checkAudit(t)
	if at95.Load() == 0 { // never reached: the whole run
		return took, took
	}
	return time.Duration(at95.Load()), took
}
