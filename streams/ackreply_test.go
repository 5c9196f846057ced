package streams_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

func TestParseAckReply(t *testing.T) {
	for _, c := range []struct {
		reply string
		want  streams.Delivery
		ok    bool
	}{
		{"$JS.ACK.TENURE_IN.c1.1.42.7.1767225600000000001.3", streams.Delivery{Stream: "TENURE_IN", Consumer: "c1", StreamSeq: 42, ConsumerSeq: 7, Time: 1767225600000000001, Pending: 3}, true},
		{"$JS.ACK.hub.ACCHASH.TENURE_IN.c1.1.42.7.1767225600000000001.3", streams.Delivery{Stream: "TENURE_IN", Consumer: "c1", StreamSeq: 42, ConsumerSeq: 7, Time: 1767225600000000001, Pending: 3}, true},
		{"$JS.ACK.hub.ACCHASH.TENURE_IN.c1.1.42.7.1767225600000000001.3.tok", streams.Delivery{Stream: "TENURE_IN", Consumer: "c1", StreamSeq: 42, ConsumerSeq: 7, Time: 1767225600000000001, Pending: 3}, true},
		{"$JS.ACK._.ACCHASH.S.c.1.1.1.1.0", streams.Delivery{Stream: "S", Consumer: "c", StreamSeq: 1, ConsumerSeq: 1, Time: 1}, true},
		{"$JS.ACK..c1.1.42.7.1767225600000000001.3", streams.Delivery{}, false},
		{"$JS.ACK.TENURE_IN..1.42.7.1767225600000000001.3", streams.Delivery{}, false},
		{"$JS.ACK.hub.ACCHASH.TENURE_IN.c1.1.42.7.1767225600000000001", streams.Delivery{}, false},
		{"$JS.FC.TENURE_IN.c1.1.42.7.1767225600000000001.3", streams.Delivery{}, false},
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

// ParseAckReply runs on every message a reader reads: it must not
// allocate.
func TestParseAckReplyAllocs(t *testing.T) {
	replies := []string{
		"$JS.ACK.TENURE_IN.c1.1.42.7.1767225600000000001.3",
		"$JS.ACK.hub.ACCHASH.TENURE_IN.c1.1.42.7.1767225600000000001.3.tok",
	}
	var sink streams.Delivery
	if n := testing.AllocsPerRun(1000, func() {
		for _, r := range replies {
			sink, _ = streams.ParseAckReply(r)
		}
	}); n != 0 {
		t.Errorf("%v allocations per run", n)
	}
	_ = sink
}

func BenchmarkParseAckReply(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := streams.ParseAckReply("$JS.ACK.TENURE_IN.tenure_0123456789abcdef0123456789abcdef.1.42.7.1767225600000000001.3"); !ok {
			b.Fatal("not parsed")
		}
	}
}

// The reply subjects of a real server parse, and agree with Metadata, in
// both of the server's formats.
func TestParseAckReplyServer(t *testing.T) {
	t.Run("v1", func(t *testing.T) { testParseAckReplyServer(t) })
	t.Run("v2", func(t *testing.T) {
		conf := filepath.Join(t.TempDir(), "v2.conf")
		if err := os.WriteFile(conf, []byte("feature_flags { js_ack_fc_v2: true }\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		testParseAckReplyServer(t, testutil.ConfigFile(conf))
	})
}

func testParseAckReplyServer(t *testing.T, opts ...testutil.Option) {
	srv := testutil.StartServer(t, opts...)
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
		want := streams.Delivery{Stream: meta.Stream, Consumer: meta.Consumer, StreamSeq: meta.Sequence.Stream, ConsumerSeq: meta.Sequence.Consumer, Time: meta.Timestamp.UnixNano(), Pending: meta.NumPending}
		if !ok || d != want {
			t.Fatalf("%q: %+v %v, metadata %+v", m.Reply(), d, ok, meta)
		}
		if v2 := len(opts) > 0; v2 != (strings.Count(m.Reply(), ".") > 8) {
			t.Fatalf("%q: not the form asked for (v2 %v)", m.Reply(), v2)
		}
	}
}
