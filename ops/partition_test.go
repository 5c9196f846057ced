package ops_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/coordinator/coordtest"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/streams"
)

const testPartitions = 4

// startPartitioned runs a real embedded server and a coordinator group over
// a deployment of testPartitions partitions, live on every one, and returns
// an ops client (created with no more than for an unpartitioned one) and a
// JetStream context. The server has no input partition mapping: an input
// reaches a partition only if the client computed its subject.
func startPartitioned(t *testing.T) (*ops.Client, jetstream.JetStream) {
	t.Helper()
	srv := testutil.StartServer(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close) // after the group has stopped (cleanups run last first)
	coordtest.RunGroup(t, coordinator.Config{ID: "c1", Conn: nc, LeaderTTL: 600 * time.Millisecond}, testPartitions, 15*time.Second)
	onc, js := testutil.Connect(t, srv.ClientURL())
	cl, err := ops.New(onc, "disp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl, js
}

// requireCause checks that the verdict d was caused by an input stored in
// partition k with subject want.
func requireCause(t *testing.T, js jetstream.JetStream, k uint32, d events.Decision, want string) {
	t.Helper()
	ctx := context.Background()
	topo := (streams.Topology{}).Partitions(testPartitions)[k]
	s, err := js.Stream(ctx, topo.InputStream())
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(ctx, d.Cause)
	if err != nil {
		t.Fatalf("%s input %d: %v", topo.InputStream(), d.Cause, err)
	}
	if m.Subject != want {
		t.Fatalf("verdict %s/%s of %s: caused by %s input %d, %s; want %s", d.Kind, d.Reason, d.Job.ID, topo.InputStream(), d.Cause, m.Subject, want)
	}
}

// Offer, cancel and resolve go to the job's partition and return the
// verdict of that partition's input (input sequences repeat across
// partitions); the policy goes to every partition, each of which then
// judges by it; every call deletes its consumers.
func TestPartitionedOperatorVerdicts(t *testing.T) {
	c, js := startPartitioned(t)
	ctx := context.Background()
	topos := streams.Topology{}.Partitions(testPartitions)
	consumers := func(k int) int {
		s, err := js.Stream(ctx, topos[k].DecisionStream())
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	base := make([]int, testPartitions)
	for k := range base {
		base[k] = consumers(k)
	}
	if n, err := c.Partitions(ctx); err != nil || n != testPartitions {
		t.Fatalf("Partitions = %d, %v; want %d", n, err, testPartitions)
	}
	var jobs []string
	seen := make([]int, testPartitions)
	for i := range 12 {
		job := fmt.Sprintf("oj-%d", i)
		jobs = append(jobs, job)
		seen[events.PartitionOf(job, testPartitions)]++
	}
	for k, n := range seen {
		if n == 0 {
			t.Fatalf("no job in partition %d", k)
		}
	}
	part := func(job string) events.Partition { return events.Partition{Count: testPartitions}.Of(job) }
	for _, job := range jobs {
		k := part(job)
		d, err := c.Offer(ctx, job, "w1", 5000, 60000)
		if err != nil || d.Kind != events.KindOffered || d.Job.ID != job || d.Job.Holder != "w1" {
			t.Fatalf("offer %s: %v %+v", job, err, d)
		}
		requireCause(t, js, k.Index, d, k.InputSubject(events.RoleOps, "disp", job, events.VerbOffer))
		_, err = c.Offer(ctx, job, "w2", 0, 0)
		var rej *ops.RejectedError
		if !errors.As(err, &rej) || rej.Decision.Reason != events.ReasonLeaseHeld || rej.Decision.Job.ID != job {
			t.Fatalf("second offer of %s: %v", job, err)
		}
	}
	for _, job := range jobs {
		k := part(job)
		d, err := c.Cancel(ctx, job, "", 0, "changed my mind")
		if err != nil || d.Kind != events.KindCancelRequested || d.Reason != events.ReasonOfferWithdrawn || d.Job.ID != job {
			t.Fatalf("cancel %s: %v %+v", job, err, d)
		}
		requireCause(t, js, k.Index, d, k.InputSubject(events.RoleOps, "disp", job, events.VerbCancel))
		var rej *ops.RejectedError
		if _, err := c.Revoke(ctx, job, ""); !errors.As(err, &rej) || rej.Decision.Reason != events.ReasonNothingToResolve || rej.Decision.Job.ID != job {
			t.Fatalf("revoke %s: %v", job, err)
		}
	}

	// The policy reaches every partition.
	p := events.DefaultPolicy()
	p.MaxLease = 10 * int64(time.Second)
	p.DefaultLease = 5 * int64(time.Second)
	ds, err := c.SetPolicyAll(ctx, p)
	if err != nil || len(ds) != testPartitions {
		t.Fatalf("policy: %d verdicts, %v", len(ds), err)
	}
	for k, d := range ds {
		if d.Kind != events.KindPolicySet || d.Policy == nil || d.Policy.MaxLease != p.MaxLease {
			t.Fatalf("partition %d: policy verdict %+v", k, d)
		}
		pk := events.Partition{Index: uint32(k), Count: testPartitions}
		requireCause(t, js, pk.Index, d, pk.InputSubject(events.RoleOps, "disp", events.NoJob, events.VerbPolicy))
	}
	for _, job := range []string{"late-0", "late-1", "late-2", "late-3", "late-4", "late-5", "late-6", "late-7"} {
		var rej *ops.RejectedError
		if _, err := c.Offer(ctx, job, "w1", 20000, 0); !errors.As(err, &rej) || rej.Decision.Reason != events.ReasonDurationOutOfPolicy {
			t.Fatalf("offer of %s (partition %d) over the new max: %v", job, part(job).Index, err)
		}
	}
	// A policy every partition refuses: one refusal per partition, each
	// named, the first returned by SetPolicy.
	bad := events.DefaultPolicy()
	bad.MinLease = bad.MaxLease + 1
	d, err := c.SetPolicy(ctx, bad)
	var rej *ops.RejectedError
	if !errors.As(err, &rej) || d.Reason != events.ReasonBadPolicy {
		t.Fatalf("bad policy: %+v, %v", d, err)
	}
	for k := range testPartitions {
		if s := fmt.Sprintf("partition %d of %d: ", k, testPartitions); !strings.Contains(err.Error(), s) {
			t.Errorf("the error does not name partition %d: %v", k, err)
		}
	}

	// No consumer left behind on any partition: the client's decision
	// reader of each (the policy started them) until Close.
	for k := range topos {
		testutil.WaitFor(t, 2*time.Second, fmt.Sprintf("%s: %d consumers (the baseline and the reader)", topos[k].DecisionStream(), base[k]+1), func() bool {
			return consumers(k) == base[k]+1
		})
	}
	c.Close()
	for k := range topos {
		testutil.WaitFor(t, 2*time.Second, fmt.Sprintf("%s: %d consumers (the baseline)", topos[k].DecisionStream(), base[k]), func() bool {
			return consumers(k) == base[k]
		})
	}
}

// SubmitMany in a partitioned deployment: each partition's jobs go to it
// in batch submits of its own, each verdict from that partition's input.
func TestPartitionedSubmitMany(t *testing.T) {
	c, js := startPartitioned(t)
	ctx := context.Background()
	var jobs []ops.SubmitJob
	for i := range 300 {
		jobs = append(jobs, ops.SubmitJob{ID: fmt.Sprintf("pj-%d", i), Queue: "q"})
	}
	res, err := c.SubmitMany(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	causes := map[[2]uint64]int{} // (partition, input) -> jobs
	for i, r := range res {
		d := r.Decision
		k := events.Partition{Count: testPartitions}.Of(jobs[i].ID)
		if d.Kind != events.KindSubmitted || d.Job.ID != jobs[i].ID {
			t.Fatalf("job %s: %s/%s %s", jobs[i].ID, d.Kind, d.Reason, d.Job.ID)
		}
		requireCause(t, js, k.Index, d, k.InputSubject(events.RoleOps, "disp", events.NoJob, events.VerbSubmit))
		causes[[2]uint64{uint64(k.Index), d.Cause}]++
	}
	if len(causes) != testPartitions {
		t.Fatalf("%d inputs for 300 jobs in %d partitions, want one each: %v", len(causes), testPartitions, causes)
	}
}
