package follow_test

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/internal/testutil"
)

// drops records what a Follower reports to OnDrop.
type drops struct {
	mu      sync.Mutex
	reasons map[string]int
}

func (d *drops) onDrop(reason, _ string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reasons == nil {
		d.reasons = map[string]int{}
	}
	d.reasons[reason]++
}

func (d *drops) get() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.reasons)
}

// replySubs is what any client with monitoring access (or a good guess)
// learns of a connection: its subscriptions. It returns the literal ones
// under an inbox prefix, which is where a reader's pull requests have
// their replies (the wildcard one is the client's API response inbox).
func replySubs(t *testing.T, srv *embedded.Server, conn, prefix string) []string {
	t.Helper()
	cz, err := srv.Server().Connz(&server.ConnzOptions{Subscriptions: true})
	if err != nil {
		t.Fatal(err)
	}
	var subs []string
	for _, c := range cz.Conns {
		if c.Name != conn {
			continue
		}
		for _, s := range c.Subs {
			if strings.HasPrefix(s, prefix+".") && !strings.ContainsAny(s, "*>") {
				subs = append(subs, s)
			}
		}
	}
	slices.Sort(subs)
	return subs
}

// TestForgedDeliveriesAreDropped: an attacker who knows the Follower's
// inbox and the reply subject of one of its outstanding requests (read here
// from the server's list of subscriptions) aims at it every message it can
// make the server send: push consumers of the same stream and of another
// one, a PubAck, a JetStream API response, pulls of its own consumers
// (deliveries, heartbeats, a timeout, a "push based" refusal, a "consumer
// deleted"). The handler receives exactly the stream's messages, in order,
// once each; the Follower counts and reports what it dropped, keeps its
// consumer and does not stop.
func TestForgedDeliveriesAreDropped(t *testing.T) {
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	newStream(t, ctx, js)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "G", Subjects: []string{"g.>"}}); err != nil {
		t.Fatal(err)
	}
	publish(t, ctx, js, 1, 20)
	for i := range 10 {
		if _, err := js.Publish(ctx, "g.x", fmt.Appendf(nil, "forged %d", i)); err != nil {
			t.Fatal(err)
		}
	}

	var c collector
	var d drops
	// A long heartbeat keeps the requests outstanding (20 s) for the whole
	// attack.
	f := follow.Start(ctx, js, follow.Config{Stream: "F", Heartbeat: 10 * time.Second, OnDrop: d.onDrop}, c.handle)
	defer f.Stop()
	checkRun(t, c.waitCount(t, 20, 10*time.Second), 1, 1)

	var targets []string
	testutil.WaitFor(t, 5*time.Second, "the subscriptions of the outstanding requests", func() bool {
		targets = replySubs(t, srv, t.Name(), "_INBOX")
		got := f.Outstanding()
		return len(targets) > 0 && slices.Equal(slices.Sorted(slices.Values(got)), targets)
	})
	target := targets[0]
	inbox := target[:strings.LastIndexByte(target, '.')]

	anc, err := nats.Connect(srv.ClientURL(), nats.Name("attacker"))
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	ajs, err := jetstream.New(anc)
	if err != nil {
		t.Fatal(err)
	}
	// (a) Push consumers delivering to the Follower: every message of F
	// again (from another consumer), every message of G, and to an
	// unsubscribed subject under its inbox.
	for _, pc := range []struct{ stream, name, subject string }{
		{"F", "evil-push-f", target}, {"G", "evil-push-g", target}, {"F", "evil-push-x", inbox + ".x"},
	} {
		if _, err := ajs.CreatePushConsumer(ctx, pc.stream, jetstream.ConsumerConfig{Durable: pc.name,
			DeliverSubject: pc.subject, AckPolicy: jetstream.AckNonePolicy}); err != nil {
			t.Fatalf("push consumer %s: %v", pc.name, err)
		}
	}
	// (b) A PubAck.
	if err := anc.PublishRequest("g.x", target, []byte("acked")); err != nil {
		t.Fatal(err)
	}
	// (c) A JetStream API response.
	if err := anc.PublishRequest("$JS.API.STREAM.INFO.F", target, nil); err != nil {
		t.Fatal(err)
	}
	// (d) Pulls of the attacker's own consumers, replying to the Follower.
	for _, pc := range []struct {
		stream, name string
		policy       jetstream.DeliverPolicy
	}{
		{"F", "evil-pull-f", jetstream.DeliverAllPolicy}, {"G", "evil-pull-g", jetstream.DeliverAllPolicy},
		{"G", "evil-idle", jetstream.DeliverNewPolicy}, {"G", "evil-doomed", jetstream.DeliverNewPolicy},
	} {
		if _, err := ajs.CreateConsumer(ctx, pc.stream, jetstream.ConsumerConfig{Durable: pc.name,
			AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: pc.policy}); err != nil {
			t.Fatalf("pull consumer %s: %v", pc.name, err)
		}
	}
	pull := func(stream, consumer, req string) {
		t.Helper()
		if err := anc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+stream+"."+consumer, target, []byte(req)); err != nil {
			t.Fatal(err)
		}
	}
	pull("F", "evil-pull-f", `{"batch":5}`)
	pull("G", "evil-pull-g", `{"batch":5}`)
	// Heartbeats, then a 408 Request Timeout with its own counts.
	pull("G", "evil-idle", `{"batch":7,"expires":1000000000,"idle_heartbeat":200000000}`)
	// 409 Consumer is push based.
	pull("F", "evil-push-x", `{"batch":1}`)
	// 409 Consumer Deleted, once the attacker deletes its consumer.
	pull("G", "evil-doomed", `{"batch":3,"expires":10000000000}`)
	if err := anc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The pull waits at the server (nothing new in G): its deletion ends
	// the pull with a 409 Consumer Deleted to the Follower's inbox.
	doomed, err := ajs.Consumer(ctx, "G", "evil-doomed")
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the doomed consumer's pull waiting", func() bool {
		info, err := doomed.Info(ctx)
		return err == nil && info.NumWaiting > 0
	})
	if err := ajs.DeleteConsumer(ctx, "G", "evil-doomed"); err != nil {
		t.Fatal(err)
	}

	want := []string{follow.DropOtherConsumer, follow.DropOtherStream, follow.DropNoAckReply,
		follow.DropStatusMismatch, follow.DropUnexpectedStatus}
	testutil.WaitFor(t, 10*time.Second, "every kind of forgery dropped", func() bool {
		if n := f.Replaced(); n != 0 {
			t.Fatalf("the Follower replaced its consumer during the attack (dropped %v)", d.get())
		}
		got := d.get()
		for _, r := range want {
			if got[r] == 0 {
				return false
			}
		}
		// 20 from evil-push-f, 10 or 11 from evil-push-g, 5 and 5 pulled,
		// a PubAck, an API response, heartbeats and a timeout.
		return got[follow.DropOtherConsumer] >= 25 && got[follow.DropOtherStream] >= 15
	})
	// The forged "consumer deleted" is looked into: the consumer is
	// there, so it is kept.
	testutil.WaitFor(t, 10*time.Second, "the Follower to look its consumer up", func() bool { return f.Lookups() > 0 })
	if n := f.Replaced(); n != 0 {
		t.Fatalf("the Follower replaced its consumer after a forged \"consumer deleted\" (%d)", n)
	}
	// More of the stream's messages, the last a marker: what the Follower
	// hands over before it is all it handed over, in order, once each.
	publish(t, ctx, js, 21, 41)
	c.waitCount(t, 41, 10*time.Second)
	got := c.snapshot()
	if len(got) != 41 {
		t.Fatalf("%d messages handed over, the stream holds 41", len(got))
	}
	checkRun(t, got, 1, 1)
	reasons := d.get()
	total := 0
	for _, n := range reasons {
		total += n
	}
	t.Logf("dropped %d: %v", f.Dropped(), reasons)
	if f.Dropped() != uint64(total) {
		t.Errorf("Dropped() = %d, OnDrop told of %d", f.Dropped(), total)
	}
	if n := f.Replaced(); n != 0 {
		t.Errorf("the Follower replaced its consumer %d times", n)
	}
	select {
	case <-f.Done():
		t.Error("the Follower stopped")
	default:
	}
}

// TestStoredMessageThatLooksLikeAStatus: a publisher stores messages with
// an empty body and the headers of a server status (a worker can publish
// to the input stream). They are the stream's messages: handed over in
// order, with their headers, and taken for nothing else.
func TestStoredMessageThatLooksLikeAStatus(t *testing.T) {
	ctx, js := setup(t, true)
	publish(t, ctx, js, 1, 3)
	fakes := []nats.Header{
		{"Status": {"409"}, "Description": {"Consumer Deleted"}},
		{"Status": {"100"}, "Description": {"Idle Heartbeat"}},
		{"Status": {"408"}, "Description": {"Request Timeout"}, "Nats-Pending-Messages": {"1"}, "Nats-Pending-Bytes": {"0"}},
		{"Status": {"503"}},
	}
	for _, h := range fakes {
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "f.x", Header: h}); err != nil {
			t.Fatal(err)
		}
	}
	var c collector
	var d drops
	f := follow.Start(ctx, js, follow.Config{Stream: "F", Heartbeat: 500 * time.Millisecond, OnDrop: d.onDrop}, c.handle)
	defer f.Stop()
	got := c.waitCount(t, 3+len(fakes), 10*time.Second)
	checkRun(t, got[:3], 1, 1)
	for i, h := range fakes {
		m := got[3+i]
		if m.Seq != uint64(4+i) || len(m.Data) != 0 || m.Header.Get("Status") != h.Get("Status") {
			t.Errorf("message %d: seq %d, %d bytes, header %v", 4+i, m.Seq, len(m.Data), m.Header)
		}
	}
	publish(t, ctx, js, 8, 10)
	checkRun(t, c.waitCount(t, 10, 10*time.Second)[7:], 8, 1)
	if f.Replaced() != 0 || f.Dropped() != 0 {
		t.Errorf("Replaced %d, Dropped %d (%v)", f.Replaced(), f.Dropped(), d.get())
	}
}

// TestInboxesAreNotNUIDs: the reply subjects of a Follower's requests are
// <inbox prefix>.<32 lowercase hex digits>.<request id>, with a token
// unrelated to the process's NUIDs (nats.go's NewInbox, which the embedded
// server's generator shares, is predictable), new for each consumer; its
// consumer names are tenure_<32 hex digits>.
func TestInboxesAreNotNUIDs(t *testing.T) {
	srv := testutil.StartServer(t)
	for _, prefix := range []string{"", "_INBOX_w1"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			opts := []nats.Option{nats.Name(t.Name())}
			want := "_INBOX"
			if prefix != "" {
				opts = append(opts, nats.CustomInboxPrefix(prefix))
				want = prefix
			}
			nc, err := nats.Connect(srv.ClientURL(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := js.Stream(ctx, "F"); err != nil {
				newStream(t, ctx, js)
			}
			nuidPrefix := func() string { // the process-wide NUID generator's current prefix
				in := nc.NewInbox()
				return in[strings.LastIndexByte(in, '.')+1:][:12]
			}
			nuids := []string{nuidPrefix()}
			var fols []*follow.Follower
			for range 5 {
				f := follow.Start(ctx, js, follow.Config{Stream: "F"}, func(context.Context, follow.Msg) {})
				defer f.Stop()
				<-f.Ready()
				fols = append(fols, f)
			}
			nuids = append(nuids, nuidPrefix())
			token := regexp.MustCompile(`^` + regexp.QuoteMeta(want) + `\.([0-9a-f]{32})\.[0-9]+$`)
			var subs []string
			testutil.WaitFor(t, 5*time.Second, "the requests' subscriptions", func() bool {
				subs = replySubs(t, srv, t.Name(), want)
				n := 0
				for _, f := range fols {
					n += len(f.Outstanding())
				}
				return len(subs) >= len(fols) && len(subs) == n
			})
			tokens := map[string]bool{}
			for _, s := range subs {
				for _, n := range nuids {
					if strings.Contains(s, n) {
						t.Fatalf("reply subject %q contains the NUID prefix %s", s, n)
					}
				}
				m := token.FindStringSubmatch(s)
				if m == nil {
					t.Fatalf("reply subject %q is not %s.<32 hex digits>.<id>", s, want)
				}
				tokens[m[1]] = true
			}
			if len(tokens) != len(fols) {
				t.Errorf("%d distinct inbox tokens for %d Followers: %v", len(tokens), len(fols), subs)
			}
			name := regexp.MustCompile(`^tenure_[0-9a-f]{32}$`)
			for _, f := range fols {
				if n := f.ConsumerName(); !name.MatchString(n) {
					t.Errorf("consumer name %q", n)
				}
				if in := f.Inbox(); !tokens[strings.TrimPrefix(in, want+".")] {
					t.Errorf("inbox %q is none of the subscriptions'", in)
				}
			}
			// A new consumer, a new inbox.
			f := fols[0]
			before := f.Inbox()
			if err := js.DeleteConsumer(ctx, "F", f.ConsumerName()); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, 10*time.Second, "a replacement", func() bool { return f.Replaced() == 1 && f.Inbox() != "" })
			if after := f.Inbox(); after == before {
				t.Errorf("the new consumer reads through the old inbox %s", after)
			}
		})
	}
}
