package streams_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// Open, on a cluster that has lost its quorum, never waits for the caller's
// far deadline: a look-up the cluster drops (right after the quorum is
// lost, a member still believes in a leader and stays silent) is bounded on
// its own (openAttempt) and retried. What comes back is not fixed by
// nats-server: once a member knows its group is leaderless it answers a
// stream look-up from its own replica (Open then succeeds), and until then
// look-ups time out (Open fails with ErrTransient after OpenRetry). Either
// way it returns in bounded time, and succeeds once the quorum is back.
func TestOpenBoundedOnALeaderlessCluster(t *testing.T) {
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

	// Quotas are refused for the replicated input stream, which they
	// leave as it is (streams.ErrQuotasReplicated says why).
	q := streams.Quotas{Workers: []string{"w1"}, MaxBytes: 1 << 20, MaxMsgs: 100, BytesPerS: 1 << 20, MsgsPerS: 100}
	if _, err := streams.ApplyQuotas(ctx, js, top, q); !errors.Is(err, streams.ErrQuotasReplicated) {
		t.Fatalf("quotas on a replicated input stream: %v, want ErrQuotasReplicated", err)
	}
	if _, err := js.Stream(ctx, top.IntakeStream("w1")); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("an intake stream after the refusal: %v", err)
	}

	cl.Shutdown(1)
	cl.Shutdown(2) // node 0 alone: no quorum
	lost := time.Now()
	_, err = streams.Open(ctx, js, top)
	took := time.Since(lost)
	if err != nil && !errors.Is(err, streams.ErrTransient) {
		t.Fatalf("Open without a quorum: %v, want success or ErrTransient", err)
	}
	// Each of Open's four look-ups retries for at most OpenRetry plus the
	// attempt in flight (openAttempt, 5 s), plus slack for a loaded
	// machine: well below the caller's three minutes, which a dropped
	// request without its own bound would wait for.
	if limit := 4*(streams.OpenRetry+5*time.Second) + 10*time.Second; took > limit {
		t.Fatalf("Open without a quorum took %v, more than %v", took, limit)
	}
	t.Logf("without a quorum Open returned after %v: %v", took.Round(time.Millisecond), err)

	type result struct {
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		_, err := streams.Open(ctx, js, top)
		done <- result{err, time.Now()}
	}()
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
