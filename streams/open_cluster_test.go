package streams_test

import (
	"context"
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

	cl.Shutdown(1)
	cl.Shutdown(2) // node 1 alone: no quorum
	type result struct {
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		_, err := streams.Open(ctx, js, top)
		done <- result{err, time.Now()}
	}()
	time.Sleep(3 * time.Second)
	select {
	case r := <-done:
		t.Fatalf("Open returned while the cluster had no quorum: %v", r.err)
	default:
	}
	back := time.Now()
	cl.Start(1)
	cl.Start(2)
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
