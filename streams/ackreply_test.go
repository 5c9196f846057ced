package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/testutil"
)

func TestParseAckReply(t *testing.T) {
	for _, c := range []struct {
		reply string
		want  streams.Delivery
		ok    bool
	}{
		{"$JS.ACK.TENURE_IN.c1.1.42.7.1767225600000000001.3", streams.Delivery{StreamSeq: 42, ConsumerSeq: 7, Time: 1767225600000000001, Pending: 3}, true},
		{"$JS.ACK.hub.ACCHASH.TENURE_IN.c1.1.42.7.1767225600000000001.3", streams.Delivery{StreamSeq: 42, ConsumerSeq: 7, Time: 1767225600000000001, Pending: 3}, true},
		{"$JS.ACK.hub.ACCHASH.TENURE_IN.c1.1.42.7.1767225600000000001.3.tok", streams.Delivery{StreamSeq: 42, ConsumerSeq: 7, Time: 1767225600000000001, Pending: 3}, true},
		{"$JS.ACK.TENURE_IN.c1.1.42.7.x.3", streams.Delivery{}, false},
		{"$JS.ACK.TENURE_IN.c1.1.42.7.1", streams.Delivery{}, false},
		{"$JS.ACK.TENURE_IN.c1.1.42.7.1.2.3", streams.Delivery{}, false},
		{"$JS.ACK.TENURE_IN.c1.1.42.7.99999999999999999999.3", streams.Delivery{}, false},
		{"_INBOX.x", streams.Delivery{}, false},
		{"", streams.Delivery{}, false},
	} {
		got, ok := streams.ParseAckReply(c.reply)
		if got != c.want || ok != c.ok {
			t.Errorf("%q: %+v %v, want %+v %v", c.reply, got, ok, c.want, c.ok)
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
		d, ok := streams.ParseAckReply(m.Reply())
		want := streams.Delivery{StreamSeq: meta.Sequence.Stream, ConsumerSeq: meta.Sequence.Consumer, Time: meta.Timestamp.UnixNano(), Pending: meta.NumPending}
		if !ok || d != want {
			t.Fatalf("%q: %+v %v, metadata %+v", m.Reply(), d, ok, meta)
		}
	}
}
