package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/coordinator/coordtest"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

const testPartitions = 4

// newPartitionedEnv starts a real embedded server and a coordinator group
// running a deployment of testPartitions partitions, live on every one. The
// server has no input partition mapping: an input reaches a partition only
// if its publisher computed the partition's subject, as the SDK must.
func newPartitionedEnv(t *testing.T) (*env, []streams.Topology) {
	t.Helper()
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close) // after the group has stopped (cleanups run last first)
	coordtest.RunGroup(t, coordinator.Config{ID: "c1", Conn: nc, LeaderTTL: 600 * time.Millisecond}, testPartitions, 15*time.Second)
	return &env{t: t, srv: srv, js: js}, streams.Topology{}.Partitions(testPartitions)
}

// partitionInputs returns, for each partition, its stored inputs.
func (e *env) partitionInputs(topos []streams.Topology) [][]msg {
	out := make([][]msg, len(topos))
	for k, topo := range topos {
		out[k] = e.readStream(topo.InputStream())
	}
	return out
}

// partitionDecisions returns every stored decision of every partition,
// with its partition index.
func (e *env) partitionDecisions(topos []streams.Topology) (ds []events.Decision, parts []int) {
	e.t.Helper()
	for k, topo := range topos {
		for _, m := range e.readStream(topo.DecisionStream()) {
			d, err := events.DecodeDecision(m.data)
			if err != nil {
				e.t.Fatal(err)
			}
			if !strings.HasSuffix(m.subject, "."+strconv.Itoa(k)) {
				e.t.Fatalf("decision %s stored in partition %d", m.subject, k)
			}
			ds, parts = append(ds, d), append(parts, k)
		}
	}
	return ds, parts
}

// jobsOverPartitions returns n job ids with at least one in every
// partition.
func jobsOverPartitions(t *testing.T, prefix string, n int) []string {
	t.Helper()
	jobs := make([]string, n)
	seen := make([]int, testPartitions)
	for i := range jobs {
		jobs[i] = fmt.Sprintf("%s-%d", prefix, i)
		seen[events.PartitionOf(jobs[i], testPartitions)]++
	}
	if slices.Contains(seen, 0) {
		t.Fatalf("jobs %v do not cover every partition: %v", jobs, seen)
	}
	return jobs
}

// A worker connected to a partitioned deployment with no option but the
// server finds the partitions, publishes each input to its job's partition,
// gets every verdict (input sequences repeat across partitions: each is
// matched within its own), and coalesces renewals into one batch renew per
// partition, each judged by its partition.
func TestPartitionedAcquireRenewComplete(t *testing.T) {
	t.Parallel()
	e, topos := newPartitionedEnv(t)
	w := e.worker("w1")
	if w.part.Count != testPartitions || len(w.ins) != testPartitions || len(w.fols) != testPartitions {
		t.Fatalf("worker found %d partitions (%d input streams, %d decision consumers), want %d",
			w.part.Count, len(w.ins), len(w.fols), testPartitions)
	}
	ctx := context.Background()
	jobs := jobsOverPartitions(t, "pj", 40)
	leases := make([]*Lease, len(jobs))
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Go(func() {
			l, err := w.Acquire(ctx, job, WithLeaseDuration(time.Minute)) // no automatic renewal during the test
			if err != nil {
				t.Errorf("acquire %s: %v", job, err)
				return
			}
			if l.Job() != job {
				t.Errorf("acquire %s returned the lease of %s", job, l.Job())
			}
			leases[i] = l
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Round 1, made deterministic: while every partition's renewal slots
	// are taken, all 40 renewals queue; freed at once, they leave as one
	// batch renew per partition.
	w.rmu.Lock()
	for k := range w.renewN {
		w.renewN[k] = maxRenewBatches
	}
	w.rmu.Unlock()
	errs := make(chan error, 4*len(leases))
	for _, l := range leases {
		wg.Go(func() {
			if err := l.Renew(ctx); err != nil {
				errs <- fmt.Errorf("round 1: %s: %w", l.Job(), err)
			}
		})
	}
	testutil.WaitFor(t, 5*time.Second, "every renewal queued", func() bool {
		w.rmu.Lock()
		defer w.rmu.Unlock()
		n := 0
		for _, q := range w.renewQ {
			n += len(q)
		}
		return n == len(leases)
	})
	w.rmu.Lock()
	for k := range w.renewN {
		w.renewN[k] = 0
	}
	w.rmu.Unlock()
	select {
	case w.renewS <- struct{}{}:
	default: // a wake-up is pending already
	}
	wg.Wait()
	// Three more rounds, as they come.
	for _, l := range leases {
		wg.Go(func() {
			for r := 2; r <= 4; r++ {
				if err := l.Renew(ctx); err != nil {
					errs <- fmt.Errorf("round %d: %s: %w", r, l.Job(), err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, l := range leases {
		if err := l.Complete(ctx, events.OutcomeSuccess, ""); err != nil {
			t.Errorf("complete %s: %v", l.Job(), err)
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLeaseEnded) {
			t.Errorf("%s: cause %v, want ErrLeaseEnded", l.Job(), cause)
		}
	}

	// Every input went to its job's partition, each batch renew holds
	// leases of its own partition only, and the first round was exactly
	// one batch per partition.
	var total int
	testutil.WaitFor(t, 10*time.Second, "every verdict stored", func() bool {
		ds, _ := e.partitionDecisions(topos)
		total = 0
		for _, d := range ds {
			if d.Kind == events.KindCompleted {
				total++
			}
		}
		return total == len(jobs)
	})
	batchSubject := func(k int) string {
		return topos[k].Partition.InputSubject(events.RoleWorker, "w1", events.NoJob, events.VerbRenew)
	}
	inputs := e.partitionInputs(topos)
	for k, ms := range inputs {
		batches := 0
		for _, m := range ms {
			var in events.Input
			six, ok := topos[k].Partition.StripInput(m.subject)
			if !ok {
				t.Fatalf("partition %d stores %s", k, m.subject)
			}
			if err := events.DecodeInput(six, m.data, &in); err != nil || in.Role != events.RoleWorker {
				continue
			}
			if m.subject == batchSubject(k) {
				batches++
				for _, ref := range in.Leases {
					if got := events.PartitionOf(ref.Job, testPartitions); got != uint32(k) {
						t.Errorf("batch renew %d of partition %d renews %s of partition %d", m.seq, k, ref.Job, got)
					}
				}
				if batches == 1 {
					want := 0
					for _, job := range jobs {
						if events.PartitionOf(job, testPartitions) == uint32(k) {
							want++
						}
					}
					if len(in.Leases) != want {
						t.Errorf("partition %d: first batch renew has %d leases, want all %d of the partition", k, len(in.Leases), want)
					}
				}
			} else if in.Job != events.NoJob && events.PartitionOf(in.Job, testPartitions) != uint32(k) {
				t.Errorf("input %s of job %s stored in partition %d", m.subject, in.Job, k)
			}
		}
		if batches == 0 {
			t.Errorf("partition %d: no batch renew", k)
		}
	}
	ds, parts := e.partitionDecisions(topos)
	renewed := map[string]int{}
	for i, d := range ds {
		if d.Reason == events.ReasonWrongPartition {
			t.Errorf("partition %d: %s/%s for %s", parts[i], d.Kind, d.Reason, d.Job.ID)
		}
		if d.Kind == events.KindRenewed {
			renewed[d.Job.ID]++
		}
	}
	for _, job := range jobs {
		if renewed[job] != 4 {
			t.Errorf("%s renewed %d times, want 4", job, renewed[job])
		}
	}
}

// Verdicts are matched by partition and sequence: a verdict of input 5 of
// one partition does not answer input 5 of another.
func TestVerdictKeyedByPartition(t *testing.T) {
	t.Parallel()
	e, _ := newPartitionedEnv(t)
	w := e.worker("w1")
	const seq = 1 << 40
	w.dispatchFrom(1, events.Decision{Cause: seq, Kind: events.KindRenewed, Role: events.RoleWorker, Actor: "w1", Verb: events.VerbRenew, Job: events.Job{ID: "x"}})
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if ds, err := w.awaitN(short, 2, seq, 1, events.VerbRenew, "x"); !errors.Is(err, ErrNoVerdict) || len(ds) != 0 {
		t.Fatalf("partition 2 took the verdict of partition 1: %v, %v", ds, err)
	}
	ctx, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if ds, err := w.awaitN(ctx, 1, seq, 1, events.VerbRenew, "x"); err != nil || ds[0].Cause != seq {
		t.Fatalf("partition 1's verdict: %v, %v", ds, err)
	}
}

// Offers come from every partition; accepting one sends the ACK to the
// offered job's partition.
func TestPartitionedOffers(t *testing.T) {
	t.Parallel()
	e, topos := newPartitionedEnv(t)
	w := e.worker("w1")
	ctx := context.Background()
	jobs := jobsOverPartitions(t, "offer", 12)
	for _, job := range jobs {
		in := events.Input{Role: events.RoleOps, Actor: "op1", Job: job, Verb: events.VerbOffer, Holder: "w1", LeaseMS: 30000}
		subject := events.Partition{Count: testPartitions}.Of(job).InputSubject(events.RoleOps, "op1", job, events.VerbOffer)
		if _, err := e.js.Publish(ctx, subject, events.AppendInputBody(nil, &in)); err != nil {
			t.Fatalf("offer %s: %v", job, err)
		}
	}
	got := map[string]bool{}
	timeout := time.After(10 * time.Second)
	for len(got) < len(jobs) {
		select {
		case o := <-w.Offers():
			if got[o.Job] {
				t.Fatalf("offer of %s twice", o.Job)
			}
			got[o.Job] = true
			l, err := o.Accept(ctx)
			if err != nil {
				t.Fatalf("accept %s: %v", o.Job, err)
			}
			if l.Job() != o.Job || l.Token().LeaseID != o.LeaseID {
				t.Fatalf("accepted %s/%s, got the lease %s", o.Job, o.LeaseID, l.Token())
			}
			if err := l.Complete(ctx, events.OutcomeSuccess, ""); err != nil {
				t.Fatalf("complete %s: %v", o.Job, err)
			}
		case <-timeout:
			t.Fatalf("%d of %d offers received", len(got), len(jobs))
		}
	}
	ds, parts := e.partitionDecisions(topos)
	acked := map[string]int{}
	for i, d := range ds {
		if d.Kind == events.KindAcked {
			acked[d.Job.ID]++
			if want := int(events.PartitionOf(d.Job.ID, testPartitions)); parts[i] != want {
				t.Errorf("%s acked in partition %d, want %d", d.Job.ID, parts[i], want)
			}
		}
	}
	for _, job := range jobs {
		if acked[job] != 1 {
			t.Errorf("%s acked %d times", job, acked[job])
		}
	}
}

// In a partitioned deployment Run announces to every partition (each
// pull to the partition's own subject), never runs more handlers than its
// concurrency although every partition may offer its free slots, declines
// the surplus (not counted: every job completes at attempt 1), and
// completes every job once.
func TestPartitionedRun(t *testing.T) {
	t.Parallel()
	e, topos := newPartitionedEnv(t)
	wa := e.watch()
	w := e.worker("w1")
	const limit = 2
	jobs := jobsOverPartitions(t, "pq", 24)
	var running, most atomic.Int32
	run := startRun(t, w, "q", func(ctx context.Context, j *Job) error {
		now := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}, WithConcurrency(limit))
	for _, job := range jobs {
		e.submit(testPartitions, job, "q", events.Input{})
	}
	for _, job := range jobs {
		wa.state(30*time.Second, job, events.StateCompleted)
	}
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if m := most.Load(); m > limit || m < 1 {
		t.Fatalf("at most %d handlers at once, want at most %d", m, limit)
	}
	ds, parts := e.partitionDecisions(topos)
	pulls := make([]int, testPartitions)
	completed := map[string]int{}
	declines := 0
	for i, d := range ds {
		switch {
		case d.Kind == events.KindCapacitySet && d.Actor == "w1":
			pulls[parts[i]]++
			if d.Capacity.Slots > limit {
				t.Errorf("partition %d: announced %d slots, above %d", parts[i], d.Capacity.Slots, limit)
			}
		case d.Kind == events.KindCompleted:
			completed[d.Job.ID]++
			if d.Job.Attempt != 1 || d.Job.Result != events.OutcomeSuccess {
				t.Errorf("%s completed %s at attempt %d, want SUCCESS at 1", d.Job.ID, d.Job.Result, d.Job.Attempt)
			}
		case d.Kind == events.KindReleased:
			declines++
		case d.Reason == events.ReasonWrongPartition:
			t.Errorf("partition %d: %s/%s", parts[i], d.Kind, d.Reason)
		}
	}
	for k, n := range pulls {
		if n < 2 { // an announcement and the withdrawal at least
			t.Errorf("partition %d got %d pulls", k, n)
		}
	}
	for _, job := range jobs {
		if completed[job] != 1 {
			t.Errorf("%s completed %d times", job, completed[job])
		}
	}
	t.Logf("%d surplus offers declined; pulls per partition %v", declines, pulls)
}
