package follow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/internal/testutil"
)

// TestClusterNodeShutdowns follows an R3 stream on a 3-node cluster while
// the node that is the JetStream meta leader is shut down, then while the
// node that holds the Follower's consumer is (each restarted after): every
// message is handed over once, in order. The time from each shutdown to the
// next message handed over is logged. The shutdowns are graceful (servers
// in this process cannot be SIGKILLed); the chaos suite kills real
// processes under the coordinator, which reads through a Follower.
func TestClusterNodeShutdowns(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster; not in -short")
	}
	cl := testutil.StartCluster(t, 3, 0)
	nc, err := nats.Connect(cl.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	retry(t, ctx, "create the stream", func(ctx context.Context) error {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "F", Subjects: []string{"f.>"}, Replicas: 3})
		return err
	})
	published := 0
	publishN := func(k int) {
		for range k {
			published++
			i := published
			retry(t, ctx, fmt.Sprintf("publish %d", i), func(ctx context.Context) error {
				_, err := js.Publish(ctx, "f.x", fmt.Appendf(nil, "%d", i), jetstream.WithMsgID(fmt.Sprint(i)))
				return err
			})
		}
	}
	publishN(20)

	var c collector
	f := follow.Start(ctx, js, follow.Config{Stream: "F"}, c.handle)
	defer f.Stop()
	c.waitCount(t, 20, 30*time.Second)

	for round, pick := range []func() int{
		func() int { // the meta leader
			for i := range cl.Len() {
				if cl.Server(i).Server().JetStreamIsLeader() {
					return i
				}
			}
			return -1
		},
		func() int { // the server of the Follower's consumer
			name := consumerName(t, ctx, js)
			for i := range cl.Len() {
				if cl.Server(i).Server().JetStreamIsConsumerLeader("$G", "F", name) {
					return i
				}
			}
			return -1
		},
	} {
		var victim int
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("round %d: a node to shut down", round), func() bool {
			victim = pick()
			return victim >= 0
		})
		have := len(c.snapshot())
		killed := time.Now()
		cl.Shutdown(victim)
		publishN(20)
		c.waitCount(t, have+1, 60*time.Second)
		t.Logf("round %d: shut down %s; next message handed over after %v", round, cl.Name(victim), time.Since(killed).Round(time.Millisecond))
		checkRun(t, c.waitCount(t, published, 60*time.Second), 1, 1)
		cl.Start(victim)
	}
	publishN(20)
	checkRun(t, c.waitCount(t, published, 60*time.Second), 1, 1)
	time.Sleep(100 * time.Millisecond)
	if got := len(c.snapshot()); got != published {
		t.Fatalf("%d messages handed over, %d stored", got, published)
	}
}

// consumerName is the name of the only consumer of stream F.
func consumerName(t *testing.T, ctx context.Context, js jetstream.JetStream) string {
	var name string
	retry(t, ctx, "list consumers", func(ctx context.Context) error {
		s, err := js.Stream(ctx, "F")
		if err != nil {
			return err
		}
		names := s.ConsumerNames(ctx)
		for n := range names.Name() {
			name = n
		}
		if name == "" {
			return fmt.Errorf("no consumer (%v)", names.Err())
		}
		return nil
	})
	return name
}

// retry runs op with a 2 s deadline until it succeeds (a cluster electing
// leaders drops requests) or ctx ends.
func retry(t *testing.T, ctx context.Context, what string, op func(context.Context) error) {
	t.Helper()
	for {
		octx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := op(octx)
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClusterDeliverNew: on a 3-node cluster too (where the server picks a
// new consumer's start on its leader, after the meta layer placed it), the
// answer to the creation of a deliver-new consumer of an R3 stream reports
// the stream's last sequence as delivered, and a Follower with FromNew
// starts after it.
func TestClusterDeliverNew(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster; not in -short")
	}
	cl := testutil.StartCluster(t, 3, 0)
	nc, err := nats.Connect(cl.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	retry(t, ctx, "create the stream", func(ctx context.Context) error {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "F", Subjects: []string{"f.>"}, Replicas: 3})
		return err
	})
	for i := 1; i <= 7; i++ {
		retry(t, ctx, fmt.Sprintf("publish %d", i), func(ctx context.Context) error {
			_, err := js.Publish(ctx, "f.x", fmt.Appendf(nil, "%d", i), jetstream.WithMsgID(fmt.Sprint(i)))
			return err
		})
	}
	// A consumer starts from the stream as its own server holds it: one
	// placed on a replica still applying the publishes starts earlier
	// (it reads more, never less; under load a replica lagged all 7 and
	// the answer said 0). What is pinned here is the answer on replicas
	// that hold the whole stream.
	testutil.WaitFor(t, 30*time.Second, "every replica to hold the 7 messages", func() bool {
		for i := range cl.Len() {
			jsz, err := cl.Server(i).Server().Jsz(&server.JSzOptions{Accounts: true, Streams: true})
			if err != nil {
				return false
			}
			held := false
			for _, a := range jsz.AccountDetails {
				for _, sd := range a.Streams {
					held = held || (sd.Name == "F" && sd.State.LastSeq == 7)
				}
			}
			if !held {
				return false
			}
		}
		return true
	})
	var info *jetstream.ConsumerInfo
	retry(t, ctx, "create a deliver-new consumer", func(ctx context.Context) error {
		c, err := js.CreateConsumer(ctx, "F", jetstream.ConsumerConfig{Name: "new", FilterSubject: "f.y",
			DeliverPolicy: jetstream.DeliverNewPolicy, AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, Replicas: 1})
		if err == nil {
			info = c.CachedInfo()
		}
		return err
	})
	if info.Delivered.Stream != 7 || info.Delivered.Consumer != 0 {
		t.Fatalf("delivered %+v, want stream 7, consumer 0", info.Delivered)
	}
	var c collector
	f := follow.Start(ctx, js, follow.Config{Stream: "F", FromNew: true}, c.handle)
	defer f.Stop()
	select {
	case <-f.Ready():
	case <-ctx.Done():
		t.Fatal("no consumer")
	}
	if got := f.Next(); got != 8 {
		t.Fatalf("Next = %d once ready, want 8", got)
	}
}
