package streams_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

func TestPartitionedTopologyNames(t *testing.T) {
	ts := streams.Topology{}.Partitions(4)
	if len(ts) != 4 {
		t.Fatalf("%d partitions", len(ts))
	}
	p2 := ts[2]
	got := []string{p2.InputStream(), p2.DecisionStream(), p2.LeaderBucket(), p2.SnapshotBucket()}
	want := []string{"TENURE_P2_IN", "TENURE_P2_OUT", "TENURE_P2_LEADER", "TENURE_P2_SNAPSHOTS"}
	if !slices.Equal(got, want) {
		t.Errorf("partition 2 names = %v, want %v", got, want)
	}
	if c := p2.InputConfig(); !slices.Equal(c.Subjects, []string{"tenure.in.*.*.*.*.2"}) || c.Metadata[streams.MetaPartitions] != "4" || c.Metadata[streams.MetaPartition] != "2" {
		t.Errorf("partition 2 input config: subjects %v metadata %v", c.Subjects, c.Metadata)
	}
	if got := p2.HeadSubject(); got != "tenure.heads.2" {
		t.Errorf("partition 2 head subject = %q", got)
	}
	if one := (streams.Topology{}).Partitions(0); len(one) != 1 || one[0].InputStream() != "TENURE_IN" || one[0].HeadSubject() != "tenure.heads" {
		t.Errorf("Partitions(0) = %v", one)
	}
}

// TestPartitionMappingRoutesLikePartitionOf publishes six-token inputs for
// many jobs through the server's subject mapping and checks that each was
// stored by the stream of events.PartitionOf(job): the server's partition()
// and Tenure's hash agree, so clients may compute partitions themselves.
func TestPartitionMappingRoutesLikePartitionOf(t *testing.T) {
	const count = 4
	ctx := testCtx(t)
	srv := testutil.StartServer(t, testutil.Partitions(count))
	_, js := testutil.Connect(t, srv.ClientURL())
	if _, err := streams.EnsureAll(ctx, js, streams.Topology{}, count, leaderTTL); err != nil {
		t.Fatal(err)
	}
	if n, err := streams.Discover(ctx, js, streams.Topology{}); err != nil || n != count {
		t.Fatalf("Discover = %d, %v; want %d", n, err, count)
	}
	// In genesis, a mapped input finds no stream; each partition's own
	// coordinator rules subject does.
	if _, err := js.Publish(ctx, events.InputSubject(events.RoleWorker, "w1", "job-0", events.VerbAcquire), []byte(`{"v":1}`)); !errors.Is(streams.Classify(err), streams.ErrNoResponders) {
		t.Fatalf("publish in genesis: %v, want no responders", err)
	}
	for _, pt := range (streams.Topology{}).Partitions(count) {
		ack, err := js.Publish(ctx, pt.Partition.InputSubject(events.RoleCoord, "c1", events.NoJob, events.VerbRules), []byte(`{"v":1}`))
		if err != nil || ack.Stream != pt.InputStream() {
			t.Fatalf("rules of %s in genesis: %v, %+v", pt.Partition, err, ack)
		}
		if _, err := streams.EndGenesis(ctx, js, pt); err != nil {
			t.Fatal(err)
		}
	}
	seen := make([]int, count)
	for i := 0; i < 200; i++ {
		job := fmt.Sprintf("job-%d", i*31)
		ack, err := js.Publish(ctx, events.InputSubject(events.RoleWorker, "w1", job, events.VerbAcquire), []byte(`{"v":1}`))
		if err != nil {
			t.Fatalf("publish %s: %v", job, err)
		}
		k := events.PartitionOf(job, count)
		want := streams.Topology{}.Partitions(count)[k].InputStream()
		if ack.Stream != want {
			t.Fatalf("job %s stored in %s, want %s (partition %d)", job, ack.Stream, want, k)
		}
		seen[k]++
		// The stored subject carries the partition token.
		m, err := js.Stream(ctx, want)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := m.GetMsg(ctx, ack.Sequence)
		if err != nil || raw.Subject != events.InputSubject(events.RoleWorker, "w1", job, events.VerbAcquire)+fmt.Sprintf(".%d", k) {
			t.Fatalf("stored subject %q, %v", raw.Subject, err)
		}
	}
	for k, n := range seen {
		if n == 0 {
			t.Errorf("no job in partition %d", k)
		}
	}
	// A client that knows the count publishes to the partition directly.
	part := events.Partition{Index: 3, Count: count}
	ack, err := js.Publish(ctx, part.InputSubject(events.RoleWorker, "w1", "anything", events.VerbAcquire), []byte(`{"v":1}`))
	if err != nil || ack.Stream != "TENURE_P3_IN" {
		t.Fatalf("direct publish: %+v, %v", ack, err)
	}
	// Decisions of different partitions are stored apart, and a worker's
	// filter (tenure.out.<id>.>) matches every partition's decisions.
	nc, _ := testutil.Connect(t, srv.ClientURL())
	sub, err := nc.SubscribeSync(events.AddresseeFilter("w1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	d := events.Decision{Addressee: "w1", Kind: events.KindGranted, Job: events.Job{ID: "anything"}}
	if ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: part.DecisionSubject(&d), Data: []byte("{}")}); err != nil || ack.Stream != "TENURE_P3_OUT" {
		t.Fatalf("decision publish: %+v, %v", ack, err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || m.Subject != "tenure.out.w1.anything.granted.3" {
		t.Fatalf("worker subscription: %v, %v", m, err)
	}
}

// TestPartitionCountIsFixed: a coordinator configured with another count
// than the deployment's is refused by Ensure.
func TestPartitionCountIsFixed(t *testing.T) {
	ctx := testCtx(t)
	js := startJS(t)
	if _, err := streams.EnsureAll(ctx, js, streams.Topology{}, 4, leaderTTL); err != nil {
		t.Fatal(err)
	}
	_, err := streams.EnsureAll(ctx, js, streams.Topology{}, 2, leaderTTL)
	var mm *streams.ConfigMismatchError
	if !errors.As(err, &mm) || mm.Field != "Metadata[tenure_partitions]" || mm.Stream != "TENURE_P0_IN" {
		t.Fatalf("EnsureAll with another count: %v, want a partition count mismatch on TENURE_P0_IN", err)
	}
	h, err := streams.Open(ctx, js, streams.Topology{}.Partitions(4)[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Verify(streams.Topology{}.Partitions(4)[1]); err != nil {
		t.Errorf("Verify of partition 1: %v", err)
	}
	if err := h.Verify(streams.Topology{}.Partitions(8)[1]); err == nil {
		t.Error("Verify with another count passed")
	}
	if _, err := streams.Discover(ctx, js, streams.Topology{Prefix: "NONE"}); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("Discover of no deployment: %v", err)
	}
}

// TestDiscoverWorker: a worker finds the deployment by looking up its
// consumer name, no stream info: on a server without permissions, through
// the plain API (nothing answers under the worker API prefix), an
// unpartitioned deployment, a partitioned one with its count, and none at
// all. (auth's tests run it under tenure auth init's permissions.)
func TestDiscoverWorker(t *testing.T) {
	for _, count := range []uint32{0, 3} {
		ctx := testCtx(t)
		srv := testutil.StartServer(t)
		nc, js := testutil.Connect(t, srv.ClientURL())
		if _, _, err := streams.DiscoverWorker(ctx, nc, streams.Topology{}, "tw_w1_0"); !errors.Is(err, streams.ErrStreamNotFound) {
			t.Errorf("DiscoverWorker of no deployment: %v", err)
		}
		if _, err := streams.EnsureAll(ctx, js, streams.Topology{}, count, leaderTTL); err != nil {
			t.Fatal(err)
		}
		wjs, n, err := streams.DiscoverWorker(ctx, nc, streams.Topology{}, "tw_w1_0")
		if err != nil || n != count {
			t.Fatalf("DiscoverWorker = %d, %v; want %d", n, err, count)
		}
		if p := wjs.Options().APIPrefix; p != "" && p != jetstream.DefaultAPIPrefix {
			t.Errorf("DiscoverWorker: API prefix %q, want the plain one", p)
		}
		if _, _, err := streams.DiscoverWorker(ctx, nc, streams.Topology{Prefix: "NONE"}, "tw_w1_0"); !errors.Is(err, streams.ErrStreamNotFound) {
			t.Errorf("DiscoverWorker of no deployment: %v", err)
		}
	}
}
