package follow_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/internal/testutil"
)

// sizedBody is the body of message seq, size bytes long, that says which
// it is.
func sizedBody(seq, size int) []byte {
	b := fmt.Appendf(nil, "%d:", seq)
	return append(b, bytes.Repeat([]byte{'x'}, max(0, size-len(b)))...)
}

// checkSized fails unless msgs are the stream's messages from 1 on, each
// with the body sizedBody(seq, sizes[seq-1]).
func checkSized(t *testing.T, msgs []follow.Msg, sizes []int) {
	t.Helper()
	if len(msgs) != len(sizes) {
		t.Fatalf("%d messages handed over, %d stored", len(msgs), len(sizes))
	}
	for i, m := range msgs {
		if m.Seq != uint64(i+1) || !bytes.Equal(m.Data, sizedBody(i+1, sizes[i])) {
			t.Fatalf("message %d: seq %d, %d bytes; want seq %d, %d bytes", i, m.Seq, len(m.Data), i+1, sizes[i])
		}
	}
}

// TestLargeMessages: a stream of messages of the server's max_payload
// (1 MiB) among small and medium ones, read by Followers asking for far
// fewer bytes ahead: every message is handed over, in order, none dropped,
// the consumer never replaced, and the bytes asked for never exceed
// PullBytes plus one message. Each Follower's handler stops before each
// large message, and the server's own count of what the consumer
// delivered shows how far ahead of the handler it went.
func TestLargeMessages(t *testing.T) {
	ctx, js := setup(t, true)
	maxPayload := int(js.Conn().MaxPayload())
	var sizes []int
	for i := 1; i <= 48; i++ {
		switch {
		case i%8 == 0:
			sizes = append(sizes, maxPayload)
		case i%8 == 4:
			sizes = append(sizes, 40<<10)
		default:
			sizes = append(sizes, 10+i)
		}
		if _, err := js.Publish(ctx, "f.x", sizedBody(i, sizes[i-1])); err != nil {
			t.Fatalf("publish %d (%d bytes): %v", i, sizes[i-1], err)
		}
	}
	// What the server counts for a delivery of message seq: subject, ack
	// reply (~110 bytes) and body.
	wire := func(seq int) int { return len("f.x") + 128 + sizes[seq-1] }

	for _, c := range []struct {
		name      string
		pullBytes int
		room      int // follow's room beyond max_payload for a large message
	}{
		{"64KiB", 64 << 10, 0},
		{"1KiB", 1 << 10, 0},
		{"100B", 100, 0},                         // every message is asked for alone
		{"no room", 64 << 10, -(maxPayload / 2)}, // a large request too small: asked for without a bound
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.room != 0 {
				defer follow.SetLargeRoom(c.room)()
			}
			var mu sync.Mutex
			var msgs []follow.Msg
			maxAhead, large, unbounded := 0, 0, 0
			gate := make(chan struct{})
			blocked := make(chan int)
			cfg := follow.Config{Stream: "F", PullBytes: c.pullBytes, Heartbeat: 500 * time.Millisecond}
			f := follow.StartWithPullHook(ctx, js, cfg, func(ctx context.Context, m follow.Msg) {
				if int(m.Seq) < len(sizes) && sizes[m.Seq] == maxPayload {
					// The next one is large: let the test look.
					select {
					case blocked <- int(m.Seq):
					case <-ctx.Done():
						return
					}
					select {
					case <-gate:
					case <-ctx.Done():
						return
					}
				}
				mu.Lock()
				msgs = append(msgs, m)
				mu.Unlock()
			}, func(reqs []follow.PullInfo) {
				mu.Lock()
				defer mu.Unlock()
				ahead := 0
				for _, r := range reqs {
					if r.Large {
						large++
					}
					if r.MaxBytes == 0 {
						ahead += maxPayload + 8<<10 // one message, the largest
						unbounded++
						continue
					}
					ahead += r.LeftBytes
				}
				maxAhead = max(maxAhead, ahead)
			})
			defer f.Stop()
			for {
				var seq int
				select {
				case seq = <-blocked:
				case <-time.After(20 * time.Second):
					t.Fatalf("stuck after %d messages", len(msgs))
				}
				// The handler holds message seq: what has the consumer
				// delivered beyond it?
				time.Sleep(100 * time.Millisecond)
				cons, err := js.Consumer(ctx, "F", f.ConsumerName())
				if err != nil {
					t.Fatal(err)
				}
				delivered := int(cons.CachedInfo().Delivered.Stream)
				ahead := 0
				for s := seq + 1; s <= delivered; s++ {
					ahead += wire(s)
				}
				if bound := c.pullBytes + wire(seq+1); ahead > bound {
					t.Errorf("handler at %d: delivered up to %d, %d bytes ahead, more than %d", seq, delivered, ahead, bound)
				}
				gate <- struct{}{}
				if seq+1 == len(sizes) {
					break
				}
			}
			testutil.WaitFor(t, 20*time.Second, "every message handed over", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(msgs) >= len(sizes)
			})
			mu.Lock()
			defer mu.Unlock()
			checkSized(t, msgs, sizes)
			if bound := c.pullBytes + maxPayload + 8<<10; maxAhead > bound {
				t.Errorf("%d bytes asked for ahead, more than PullBytes + one message (%d)", maxAhead, bound)
			}
			if large == 0 {
				t.Error("no message asked for alone")
			}
			if (unbounded > 0) != (c.room < 0) {
				t.Errorf("%d requests without a byte bound", unbounded)
			}
			if f.Replaced() != 0 || f.Dropped() != 0 {
				t.Errorf("Replaced %d, Dropped %d", f.Replaced(), f.Dropped())
			}
		})
	}
}

// TestRequestsEndingOnBytes: with PullBytes a few messages' worth, most
// requests end on their bytes (the server ends them with a 409 Message
// Size Exceeds MaxBytes, or silently when they are spent exactly) rather
// than on their count; the Follower honours every such end (they match
// its own count of the request's messages and bytes), drops nothing and
// keeps its consumer.
func TestRequestsEndingOnBytes(t *testing.T) {
	ctx, js := setup(t, true)
	sizes := make([]int, 300)
	for i := range sizes {
		sizes[i] = 20 + (i*37)%200
		if _, err := js.Publish(ctx, "f.x", sizedBody(i+1, sizes[i])); err != nil {
			t.Fatal(err)
		}
	}
	var c collector
	var d drops
	pulls := 0
	f := follow.StartWithPullHook(ctx, js, follow.Config{Stream: "F", PullBytes: 2000, OnDrop: d.onDrop}, c.handle,
		func([]follow.PullInfo) { pulls++ })
	defer f.Stop()
	checkSized(t, c.waitCount(t, len(sizes), 20*time.Second), sizes)
	if f.Replaced() != 0 || f.Dropped() != 0 {
		t.Errorf("Replaced %d, Dropped %d (%v)", f.Replaced(), f.Dropped(), d.get())
	}
	f.Stop()
	if pulls < 50 {
		t.Errorf("%d pull requests for %d messages of 1 KB each", pulls, len(sizes))
	}
}

// TestIdleFollowerKeepsItsConsumer: while nothing is stored the requests
// expire (408 Request Timeout, 5 s) and are renewed, and heartbeats come
// every Heartbeat; every one of them is the Follower's own, so nothing is
// dropped and the consumer is kept.
func TestIdleFollowerKeepsItsConsumer(t *testing.T) {
	ctx, js := setup(t, true)
	publish(t, ctx, js, 1, 10)
	var c collector
	var d drops
	f := follow.Start(ctx, js, follow.Config{Stream: "F", Heartbeat: 500 * time.Millisecond, OnDrop: d.onDrop}, c.handle)
	defer f.Stop()
	c.waitCount(t, 10, 10*time.Second)
	time.Sleep(6 * time.Second)
	publish(t, ctx, js, 11, 20)
	checkRun(t, c.waitCount(t, 20, 10*time.Second), 1, 1)
	if f.Replaced() != 0 || f.Dropped() != 0 {
		t.Errorf("Replaced %d, Dropped %d (%v)", f.Replaced(), f.Dropped(), d.get())
	}
}

// TestAckFormatV2: a server that writes ack replies in the 11-token form
// (domain and account hash first; nats-server's js_ack_fc_v2) is read as
// well.
func TestAckFormatV2(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "v2.conf")
	if err := os.WriteFile(conf, []byte("feature_flags { js_ack_fc_v2: true }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testutil.StartServer(t, testutil.ConfigFile(conf))
	_, js := testutil.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "F", Subjects: []string{"f.>"}}); err != nil {
		t.Fatal(err)
	}
	publish(t, ctx, js, 1, 30)
	var c collector
	var d drops
	f := follow.Start(ctx, js, follow.Config{Stream: "F", PullAhead: 8, OnDrop: d.onDrop}, c.handle)
	defer f.Stop()
	checkRun(t, c.waitCount(t, 30, 10*time.Second), 1, 1)
	if f.Replaced() != 0 || f.Dropped() != 0 {
		t.Errorf("Replaced %d, Dropped %d (%v)", f.Replaced(), f.Dropped(), d.get())
	}
}
