package streams_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/testutil"
)

// Open waits out a cluster that has lost its quorum (no meta or stream
// leader: requests are dropped or refused) and succeeds once it is back,
// each look-up bounded on its own even when the caller's deadline is far.
func TestOpenWaitsOutALeaderlessCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster; not in -short")
	}
	cl := testutil.StartCluster(t, 3, 0)
	nc, err := nats.Connect(cl.Server(0).ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	top := streams.Topology{Replicas: 3}
	deadline := time.Now().Add(time.Minute)
	for {
		ectx, ecancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := streams.Ensure(ectx, js, top, leaderTTL)
		ecancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ensure on the cluster: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The node that stays up must lead nothing: a raft leader that has lost
	// its peers can go on answering look-ups (in CI one answered for over a
	// minute), and then Open rightly succeeds. So keep a node that is not
	// the meta leader and move every stream's leadership off it first.
	keep := 0
	for i := range cl.Len() {
		if !cl.Server(i).Server().JetStreamIsLeader() {
			keep = i
			break
		}
	}
	assets := []string{top.InputStream(), top.DecisionStream(), "KV_" + top.LeaderBucket(), "OBJ_" + top.SnapshotBucket()}
	for _, name := range assets {
		moved := time.Now().Add(time.Minute)
		for {
			lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
			var leader string
			s, err := js.Stream(lctx, name)
			if err == nil {
				var info *jetstream.StreamInfo
				if info, err = s.Info(lctx); err == nil && info.Cluster != nil {
					leader = info.Cluster.Leader
				}
			}
			lcancel()
			if leader != "" && leader != cl.Name(keep) {
				break
			}
			if time.Now().After(moved) {
				t.Fatalf("stream %s: leader %q, want one other than %s (%v)", name, leader, cl.Name(keep), err)
			}
			if leader == cl.Name(keep) {
				_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+name, nil, 2*time.Second)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	kc, err := nats.Connect(cl.Server(keep).ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	kjs, _ := jetstream.New(kc)
	for i := range cl.Len() {
		if i != keep {
			cl.Shutdown(i) // the kept node alone: no quorum
		}
	}
	// Check that the cluster refuses the first look-up Open makes.
	refused := time.Now().Add(time.Minute)
	for {
		lctx, lcancel := context.WithTimeout(ctx, time.Second)
		_, err := kjs.Stream(lctx, top.InputStream())
		lcancel()
		if err != nil && errors.Is(streams.Classify(err), streams.ErrTransient) {
			break
		}
		if time.Now().After(refused) {
			t.Fatalf("the input stream still answers a minute after the quorum was lost: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	type result struct {
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		_, err := streams.Open(ctx, kjs, top)
		done <- result{err, time.Now()}
	}()
	time.Sleep(3 * time.Second)
	select {
	case r := <-done:
		t.Fatalf("Open returned while the cluster had no quorum: %v", r.err)
	default:
	}
	back := time.Now()
	for i := range cl.Len() {
		if i != keep {
			cl.Start(i)
		}
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Open after the quorum came back: %v", r.err)
		}
		t.Logf("Open returned %v after the nodes were started again", r.at.Sub(back).Round(time.Millisecond))
	case <-time.After(streams.OpenRetry + 10*time.Second):
		t.Fatal("Open still waiting after the quorum came back")
	}
}
