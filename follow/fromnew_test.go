package follow_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/follow"
)

// TestDeliverNewStartsAfterLastSeq pins the behaviour of nats-server that
// Config.FromNew relies on: the answer to the creation of a pull consumer
// with deliver policy "new" reports as delivered (delivered.stream_seq)
// the stream's last sequence, whatever its filter (here one the last
// message does not match), and 0 for a stream that never held a message;
// the consumer's first delivery is then the first message stored after
// it. If this fails, the server changed and FromNew must follow.
func TestDeliverNewStartsAfterLastSeq(t *testing.T) {
	ctx, js := setup(t, true)
	create := func(name string) *jetstream.ConsumerInfo {
		t.Helper()
		c, err := js.CreateConsumer(ctx, "F", jetstream.ConsumerConfig{
			Name: name, FilterSubject: "f.even", DeliverPolicy: jetstream.DeliverNewPolicy,
			AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, Replicas: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		return c.CachedInfo()
	}
	if info := create("empty"); info.Delivered.Stream != 0 || info.Delivered.Consumer != 0 {
		t.Fatalf("on an empty stream: delivered %+v, want stream 0, consumer 0", info.Delivered)
	}
	publish(t, ctx, js, 1, 7) // 7 is on f.odd: not the filter's
	info := create("seven")
	if info.Delivered.Stream != 7 || info.Delivered.Consumer != 0 {
		t.Fatalf("after 7 messages: delivered %+v, want stream 7, consumer 0", info.Delivered)
	}
	publish(t, ctx, js, 8, 8)
	c, err := js.Consumer(ctx, "F", "seven")
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if md, err := m.Metadata(); err != nil || md.Sequence.Stream != 8 || md.Sequence.Consumer != 1 {
		t.Fatalf("first delivery %+v (%v), want stream sequence 8, delivery 1", md, err)
	}
}

// TestFromNew: a Follower started with FromNew reads what is stored after
// its first consumer exists, Next says where that starts, and a
// replacement (its consumer deleted) reads on after the last message
// handed over, without a gap.
func TestFromNew(t *testing.T) {
	ctx, js := setup(t, true)
	publish(t, ctx, js, 1, 20)
	var c collector
	f := follow.Start(ctx, js, follow.Config{Stream: "F", StartSeq: 3, FromNew: true, Names: []string{"fn"},
		Heartbeat: 500 * time.Millisecond, Retry: 20 * time.Millisecond}, c.handle)
	defer f.Stop()
	select {
	case <-f.Ready():
	case <-ctx.Done():
		t.Fatal("no consumer")
	}
	if got := f.Next(); got != 21 {
		t.Fatalf("Next = %d once ready, want 21", got)
	}
	publish(t, ctx, js, 21, 30)
	checkRun(t, c.waitCount(t, 10, 10*time.Second), 21, 1)
	if err := js.DeleteConsumer(ctx, "F", "fn"); err != nil {
		t.Fatal(err)
	}
	publish(t, ctx, js, 31, 40) // stored while the consumer may be gone
	got := c.waitCount(t, 20, 10*time.Second)
	checkRun(t, got, 21, 1)
	if f.Replaced() == 0 {
		t.Error("the deleted consumer was not replaced")
	}
	if len(got) != 20 {
		t.Errorf("%d messages, want 20", len(got))
	}
}
