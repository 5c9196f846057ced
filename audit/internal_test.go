package audit

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/testutil"
)

func TestParseAckReply(t *testing.T) {
	for _, c := range []struct {
		reply        string
		seq, pending uint64
		ts           int64
		ok           bool
	}{
		{"$JS.ACK.TENURE_IN.c1.1.42.7.1767225600000000001.3", 42, 3, 1767225600000000001, true},
		{"$JS.ACK.hub.ACCHASH.TENURE_IN.c1.1.42.7.1767225600000000001.3", 42, 3, 1767225600000000001, true},
		{"$JS.ACK.hub.ACCHASH.TENURE_IN.c1.1.42.7.1767225600000000001.3.tok", 42, 3, 1767225600000000001, true},
		{"$JS.ACK.TENURE_IN.c1.1.42.7.x.3", 0, 0, 0, false},
		{"$JS.ACK.TENURE_IN.c1.1.42.7.1", 0, 0, 0, false},
		{"$JS.ACK.TENURE_IN.c1.1.42.7.1.2.3", 0, 0, 0, false},
		{"_INBOX.x", 0, 0, 0, false},
		{"", 0, 0, 0, false},
	} {
		seq, ts, pending, ok := parseAckReply(c.reply)
		if seq != c.seq || ts != c.ts || pending != c.pending || ok != c.ok {
			t.Errorf("%q: %d %d %d %v", c.reply, seq, ts, pending, ok)
		}
	}
}

// The reply subjects of a real server parse, and agree with Metadata.
func TestParseAckReplyServer(t *testing.T) {
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, "t.x", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.OrderedConsumer(ctx, "T", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		meta, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		seq, ts, pending, ok := parseAckReply(m.Reply())
		if !ok || seq != meta.Sequence.Stream || ts != meta.Timestamp.UnixNano() || pending != meta.NumPending {
			t.Fatalf("%q: %d %d %d %v, metadata %+v", m.Reply(), seq, ts, pending, ok, meta)
		}
	}
}
