package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/events"
)

// refused publishes on each subject and expects the server to refuse it with
// a permissions violation (the message reaches nobody: no stream stores it,
// no JetStream API handles it).
func refused(t *testing.T, c *client, who string, subjects ...string) {
	t.Helper()
	for _, s := range subjects {
		if err := c.nc.Publish(s, []byte(`{"v":1,"seq":1,"purge":true}`)); err != nil {
			t.Fatalf("%s publish %s: %v", who, s, err)
		}
		if err := c.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		c.errs.expectViolation(t, who+" publishing on "+s, `Publish to "`+s+`"`)
	}
}

// refusedSub subscribes to each subject and expects a permissions violation.
func refusedSub(t *testing.T, c *client, who string, subjects ...string) {
	t.Helper()
	for _, s := range subjects {
		sub, err := c.nc.SubscribeSync(s)
		if err != nil {
			t.Fatalf("%s subscribe %s: %v", who, s, err)
		}
		_ = c.nc.Flush()
		c.errs.expectViolation(t, who+" subscribing to "+s, `Subscription to "`+s+`"`)
		_ = sub.Unsubscribe()
	}
}

// A worker user can speak only for itself, only as a worker, cannot write
// or administer the streams, and cannot read another worker's decisions. It
// lives in an account of its own: the deployment's subjects it can reach at
// all are its own inputs and, under the worker API prefix, its few consumers
// on the decision stream; no core subscription to decisions (where the
// coordinator's reply inboxes would show), no other consumer name, no
// message bigger than the largest input.
func TestWorkerConfinement(t *testing.T) {
	t.Parallel()
	e := newEnv(t, auth.Options{})
	ctx := context.Background()
	w1 := connect(t, e.b, e.url, "w1")
	w2 := connect(t, e.b, e.url, "w2")
	const api = "JS.TENURE.API."
	if c, _ := e.b.Credential("w1"); c.JetStreamAPIPrefix+"." != api || c.Account != "TENURE_W_w1" {
		t.Fatalf("w1's credential: account %q, API prefix %q", c.Account, c.JetStreamAPIPrefix)
	}
	mine := ownConsumer(t, w1, "w1", 0)
	// w2 holds a lease: there are decisions addressed to w2.
	a2, err := w2.js.Publish(ctx, "tenure.in.worker.w2.conf-2.acquire", []byte(`{"v":1,"lease_ms":600000}`))
	if err != nil {
		t.Fatal(err)
	}
	a1, err := w1.js.Publish(ctx, "tenure.in.worker.w1.conf-1.acquire", []byte(`{"v":1,"lease_ms":600000}`))
	if err != nil {
		t.Fatal(err)
	}
	if d := mine.verdict(t, a1.Sequence); d.Kind != events.KindGranted {
		t.Fatalf("w1 acquire: %s/%s", d.Kind, d.Reason)
	}
	e.caughtUp(t)
	before := notCoord(t, e.read(t, "TENURE_OUT"))

	t.Run("publish as another worker", func(t *testing.T) {
		refused(t, w1, "w1", "tenure.in.worker.w2.conf-2.renew", "tenure.in.worker.w2._.renew")
		// Through the JetStream client: no PubAck (the stream never sees it).
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if ack, err := w1.js.Publish(pctx, "tenure.in.worker.w2.conf-2.release",
			[]byte(`{"v":1,"lease_id":"L`+itoa(a2.Sequence)+`","generation":1}`)); err == nil {
			t.Fatalf("w1 publishing as w2 was stored as input %d", ack.Sequence)
		}
		w1.errs.expectViolation(t, "w1 JetStream publish as w2", `"tenure.in.worker.w2.conf-2.release"`)
	})

	t.Run("publish with another role", func(t *testing.T) {
		refused(t, w1, "w1", "tenure.in.ops.w1.conf-2.cancel", "tenure.in.coord.w1._.tick", "tenure.in.ops.disp.conf-2.resolve")
	})

	t.Run("identity claimed in the body", func(t *testing.T) {
		ack, err := w1.js.Publish(ctx, "tenure.in.worker.w1.conf-3.acquire", []byte(`{"v":1,"actor":"w2","lease_ms":60000}`))
		if err != nil {
			t.Fatal(err)
		}
		d := mine.verdict(t, ack.Sequence)
		if d.Kind != events.KindRejected || d.Reason != events.ReasonIdentityMismatch {
			t.Fatalf("body claiming w2 on w1's subject: %s/%s, want rejected/identity_mismatch", d.Kind, d.Reason)
		}
	})

	t.Run("decision stream", func(t *testing.T) {
		refused(t, w1, "w1", "tenure.out.w1.conf-1.granted", "tenure.out.w2.conf-2.expired")
		// Not even its own decisions as core messages: their reply subjects
		// are the coordinator's append inboxes.
		refusedSub(t, w1, "w1", "tenure.out.w1.>", "tenure.out.w1.conf-1.granted")
	})

	t.Run("stream and consumer administration", func(t *testing.T) {
		var subjects []string
		for _, p := range []string{"$JS.API.", api} {
			for _, s := range []string{
				"STREAM.DELETE.TENURE_IN", "STREAM.DELETE.TENURE_OUT", "STREAM.PURGE.TENURE_IN", "STREAM.PURGE.TENURE_OUT",
				"STREAM.MSG.DELETE.TENURE_IN", "STREAM.MSG.DELETE.TENURE_OUT", "STREAM.UPDATE.TENURE_IN", "STREAM.CREATE.EVIL",
				"STREAM.DELETE.KV_TENURE_LEADER", "CONSUMER.DELETE.TENURE_OUT.anything", "CONSUMER.DELETE.TENURE_OUT.tw_w2_0",
				"CONSUMER.NAMES.TENURE_OUT", "CONSUMER.LIST.TENURE_OUT", "STREAM.NAMES", "INFO",
			} {
				subjects = append(subjects, p+s)
			}
		}
		refused(t, w1, "w1", append(subjects, "$KV.TENURE_LEADER.leader", "$O.TENURE_SNAPSHOTS.M.projector")...)
		// Through the JetStream client: an error, and nothing removed.
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if err := w1.js.DeleteStream(dctx, "TENURE_IN"); err == nil {
			t.Fatal("w1 deleted TENURE_IN")
		}
		w1.errs.expectViolation(t, "w1 DeleteStream", api+"STREAM.DELETE.TENURE_IN")
	})

	t.Run("other workers' decisions", func(t *testing.T) {
		refusedSub(t, w1, "w1", "tenure.out.w2.>", "tenure.out.>", "tenure.out.*.conf-2.*", "_INBOX_w2.>", "_INBOX.>", ">")
		for _, cfg := range []jetstream.ConsumerConfig{
			{FilterSubject: "tenure.out.w2.>"},
			{FilterSubject: "tenure.out.>"},
			{FilterSubject: "tenure.out.*.conf-2.*"},
			{FilterSubjects: []string{"tenure.out.w1.>", "tenure.out.w2.>"}},
			{}, // no filter: the whole stream
			{Name: "tw_w2_0", FilterSubject: "tenure.out.w2.>"}, // another worker's name
			{Name: "tw_w1_9", FilterSubject: "tenure.out.w1.>"}, // a name beyond its own
			{Name: "mine", FilterSubject: "tenure.out.w1.>"},    // any other name
		} {
			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err := w1.js.CreateConsumer(cctx, "TENURE_OUT", cfg)
			cancel()
			if err == nil {
				t.Fatalf("w1 created a consumer %+v", cfg)
			}
			w1.errs.expectViolation(t, "w1 consumer", api+"CONSUMER.CREATE.TENURE_OUT")
		}
		var subjects []string
		for _, p := range []string{"$JS.API.", api} {
			subjects = append(subjects, p+"CONSUMER.CREATE.TENURE_OUT", p+"CONSUMER.DURABLE.CREATE.TENURE_OUT.mine",
				p+"STREAM.MSG.GET.TENURE_OUT", p+"DIRECT.GET.TENURE_OUT", p+"DIRECT.GET.TENURE_OUT.tenure.out.w2.conf-2.granted",
				p+"STREAM.INFO.TENURE_IN", p+"CONSUMER.MSG.NEXT.TENURE_OUT.tw_w2_0", p+"CONSUMER.INFO.TENURE_OUT.tw_w2_0")
		}
		refused(t, w1, "w1", subjects...)
		// The filter in the API subject must be the consumer's only filter:
		// the server refuses a consumer that claims w1's filter in its
		// subject but asks for w2's decisions in its configuration.
		for _, body := range []string{
			`{"stream_name":"TENURE_OUT","config":{"name":"tw_w1_1","filter_subject":"tenure.out.w2.>","ack_policy":"none"}}`,
			`{"stream_name":"TENURE_OUT","config":{"name":"tw_w1_1","filter_subjects":["tenure.out.w1.>","tenure.out.w2.>"],"ack_policy":"none"}}`,
		} {
			resp, err := w1.nc.Request(api+"CONSUMER.CREATE.TENURE_OUT.tw_w1_1.tenure.out.w1.>", []byte(body), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var r struct {
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(resp.Data, &r); err != nil || r.Error == nil {
				t.Fatalf("sneaky consumer %s: %s, want an error", body, resp.Data)
			}
		}
	})

	t.Run("chain heads", func(t *testing.T) {
		// Its account imports them: it can keep them, not publish them.
		h := receivesHead(t, w1, "w1", "tenure.heads", func() {
			if _, err := w1.js.Publish(ctx, "tenure.in.worker.w1.conf-4.acquire", []byte(`{"v":1,"lease_ms":600000}`)); err != nil {
				t.Fatal(err)
			}
		})
		if h.Stream != "TENURE_OUT" || h.Coordinator != "coord" {
			t.Errorf("head %+v", h)
		}
		refused(t, w1, "w1", "tenure.heads", "tenure.heads.0")
	})

	t.Run("payload", func(t *testing.T) {
		// The server announces the account's limit; the client refuses
		// bigger messages itself, and none reaches the stream.
		if got, want := w1.nc.MaxPayload(), int64(auth.DefaultWorkerLimits.MaxPayload); got != want {
			t.Fatalf("w1's max payload %d, want %d", got, want)
		}
		if err := w1.nc.Publish("tenure.in.worker.w1.conf-9.acquire", make([]byte, auth.DefaultWorkerLimits.MaxPayload+1)); !errors.Is(err, nats.ErrMaxPayload) {
			t.Fatalf("publish of %d bytes: %v, want nats.ErrMaxPayload", auth.DefaultWorkerLimits.MaxPayload+1, err)
		}
	})

	e.caughtUp(t)
	var w2Inputs int
	for _, m := range e.read(t, "TENURE_IN") {
		if strings.HasPrefix(m.subject, "tenure.in.worker.w2.") {
			w2Inputs++
		}
		if !strings.HasPrefix(m.subject, "tenure.in.worker.") && !strings.HasPrefix(m.subject, "tenure.in.coord.coord.") {
			t.Errorf("input %d on %s", m.seq, m.subject)
		}
	}
	if w2Inputs != 1 {
		t.Errorf("%d inputs on w2's subjects, want its one acquire", w2Inputs)
	}
	out := e.read(t, "TENURE_OUT")
	if n := notCoord(t, out); out[0].seq != 1 || n != before+2 { // + the identity_mismatch verdict, the acquire of conf-4
		t.Errorf("decision stream: %d decisions (besides the coordinator's own) from %d, want %d from 1", n, out[0].seq, before+1)
	}
	e.coord.noViolations(t, "coordinator")
}

// workerReader is one of a worker's own consumers on the decision stream.
type workerReader struct {
	cons jetstream.Consumer
}

// ownConsumer creates consumer slot i of worker name (its permissions allow
// no other), filtered to its decisions, through its connection.
func ownConsumer(t *testing.T, c *client, name string, i int) *workerReader {
	t.Helper()
	cons, err := c.js.CreateConsumer(context.Background(), "TENURE_OUT", jetstream.ConsumerConfig{
		Name: events.WorkerConsumerName(name, i), FilterSubject: events.AddresseeFilter(name),
		AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute,
	})
	if err != nil {
		t.Fatalf("%s's consumer %d: %v", name, i, err)
	}
	return &workerReader{cons: cons}
}

// verdict reads until the verdict of input seq.
func (r *workerReader) verdict(t *testing.T, seq uint64) events.Decision {
	t.Helper()
	for {
		m, err := r.cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("verdict of input %d: %v", seq, err)
		}
		d, err := events.DecodeDecision(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		if d.Cause == seq && !d.Kind.Derived() {
			return d
		}
	}
}

// A dispatcher publishes only as itself in the ops role, reads every
// decision, and administers nothing.
func TestDispatcherConfinement(t *testing.T) {
	t.Parallel()
	e := newEnv(t, auth.Options{})
	d := connect(t, e.b, e.url, "disp")
	refused(t, d, "disp",
		"tenure.in.ops.other.job-1.offer",
		"tenure.in.worker.disp.job-1.acquire",
		"tenure.in.worker.w1.job-1.release",
		"tenure.in.coord.disp._.policy",
		"tenure.out.w1.job-1.granted",
		"$JS.API.STREAM.DELETE.TENURE_IN",
		"$JS.API.STREAM.PURGE.TENURE_OUT",
		"$JS.API.STREAM.MSG.DELETE.TENURE_IN",
		"$JS.API.STREAM.UPDATE.TENURE_OUT",
		"$JS.API.STREAM.INFO.TENURE_IN",
		"$JS.API.DIRECT.GET.TENURE_IN",
		"$JS.API.CONSUMER.CREATE.TENURE_IN.x.tenure.in.>",
		"$KV.TENURE_LEADER.leader",
	)
	refusedSub(t, d, "disp", "tenure.in.>", "_INBOX_w1.>", "_INBOX.>", "$SRV.PING")
	// The chain heads: an auditor's to keep, not to publish.
	receivesHead(t, d, "disp", "tenure.heads", func() {
		if _, err := d.js.Publish(context.Background(), "tenure.in.ops.disp.job-h.offer", []byte(`{"v":1,"holder":"w1","lease_ms":60000,"ack_ms":60000}`)); err != nil {
			t.Fatal(err)
		}
	})
	refused(t, d, "disp", "tenure.heads", "tenure.heads.1")
	// Allowed: every decision, live.
	d.errs.reset()
	if _, err := d.nc.SubscribeSync("tenure.out.>"); err != nil {
		t.Fatal(err)
	}
	if err := d.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	d.noViolations(t, "disp")
}

// The coordinator user writes decisions and its own ticks, but can delete,
// purge, update or rewrite neither stream, nor speak for anyone else. (The
// end of the input stream's genesis is the administrator's.)
func TestCoordinatorConfinement(t *testing.T) {
	t.Parallel()
	e := newEnv(t, auth.Options{})
	c := connect(t, e.b, e.url, "coord")
	refused(t, c, "coord",
		"$JS.API.STREAM.DELETE.TENURE_IN",
		"$JS.API.STREAM.DELETE.TENURE_OUT",
		"$JS.API.STREAM.DELETE.KV_TENURE_LEADER",
		"$JS.API.STREAM.DELETE.OBJ_TENURE_SNAPSHOTS",
		"$JS.API.STREAM.PURGE.TENURE_IN",
		"$JS.API.STREAM.PURGE.TENURE_OUT",
		"$JS.API.STREAM.MSG.DELETE.TENURE_IN",
		"$JS.API.STREAM.MSG.DELETE.TENURE_OUT",
		"$JS.API.STREAM.UPDATE.TENURE_OUT",
		"$JS.API.STREAM.UPDATE.TENURE_IN",
		"$JS.API.STREAM.UPDATE.OBJ_TENURE_SNAPSHOTS",
		"$JS.API.STREAM.PURGE.KV_TENURE_LEADER",
		"$JS.API.STREAM.MSG.DELETE.KV_TENURE_LEADER",
		"$JS.API.STREAM.MSG.DELETE.OBJ_TENURE_SNAPSHOTS",
		"$JS.API.STREAM.CREATE.OTHER",
		"tenure.in.worker.w1.job-1.acquire",
		"tenure.in.ops.coord.job-1.offer",
		"tenure.in.coord.other._.tick",
	)
	refusedSub(t, c, "coord", "_INBOX_w1.>", "tenure.out.>", "tenure.in.>")
	// Through the JetStream client too; the log is intact afterwards.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if s, err := c.js.Stream(context.Background(), "TENURE_IN"); err != nil {
		t.Fatal(err)
	} else if err := s.Purge(ctx); err == nil {
		t.Fatal("coordinator purged TENURE_IN")
	}
	// Only the coordinator's own inputs (rules, policy, checkpoints), from 1.
	for i, m := range e.read(t, "TENURE_IN") {
		if m.seq != uint64(i+1) || !strings.HasPrefix(m.subject, "tenure.in.coord.coord._.") {
			t.Fatalf("TENURE_IN: input %d on %s", m.seq, m.subject)
		}
	}
}

// notCoord counts the decisions that answer no input of the coordinator's
// own (its rules, policy, ticks and checkpoints come and go on their own).
func notCoord(t *testing.T, out []stored) int {
	t.Helper()
	n := 0
	for _, m := range out {
		d, err := events.DecodeDecision(m.data)
		if err != nil {
			t.Fatal(err)
		}
		if d.Role != events.RoleCoord {
			n++
		}
	}
	return n
}

func itoa(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
