package auth_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// The threat model's server side (auth.Limits). These tests pin the
// behaviour of nats-server v2.15.2 that the documentation describes: if one
// of them fails, the server changed and the documentation must follow.
func TestLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, auth.Options{})
	ctx := context.Background()
	w1 := connect(t, e.b, e.url, "w1")
	w2 := connect(t, e.b, e.url, "w2")
	disp := connect(t, e.b, e.url, "disp")
	if _, err := w2.js.Publish(ctx, "tenure.in.worker.w2.secret-job.acquire", []byte(`{"v":1,"lease_ms":600000}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := w1.js.Publish(ctx, "tenure.in.worker.w1.own-job.acquire", []byte(`{"v":1,"lease_ms":600000}`)); err != nil {
		t.Fatal(err)
	}
	e.caughtUp(t)

	t.Run("no consumer but its own", func(t *testing.T) {
		// A dispatcher's durable consumer on every decision: its name is
		// known, but w1's account imports only its own consumer names.
		if _, err := disp.js.CreateConsumer(ctx, "TENURE_OUT", jetstream.ConsumerConfig{
			Durable: "dashboard", FilterSubject: "tenure.out.>", AckPolicy: jetstream.AckNonePolicy,
		}); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := w1.js.Consumer(cctx, "TENURE_OUT", "dashboard"); err == nil {
			t.Fatal("w1 reached the dispatcher's consumer")
		}
		w1.errs.expectViolation(t, "w1 consumer info of dashboard", "JS.TENURE.API.CONSUMER.INFO.TENURE_OUT.dashboard")
		refused(t, w1, "w1", "JS.TENURE.API.CONSUMER.MSG.NEXT.TENURE_OUT.dashboard", "$JS.API.CONSUMER.MSG.NEXT.TENURE_OUT.dashboard")
		// The stream has room for every worker's four.
		s, err := disp.js.Stream(ctx, "TENURE_OUT")
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.MaxConsumers; got != streams.DecisionMaxConsumers {
			t.Fatalf("TENURE_OUT max consumers %d, want %d", got, streams.DecisionMaxConsumers)
		}
	})

	t.Run("connections per worker", func(t *testing.T) {
		// w1 has one connection already; its account allows 16.
		for range auth.DefaultWorkerLimits.MaxConnections - 1 {
			connect(t, e.b, e.url, "w1")
		}
		c, _ := e.b.Credential("w1")
		if nc, err := c.Connect(e.url); err == nil {
			nc.Close()
			t.Fatalf("connection %d of w1 accepted", auth.DefaultWorkerLimits.MaxConnections+1)
		}
		// Another worker's account is not affected.
		connect(t, e.b, e.url, "w2")
	})

	t.Run("push consumer delivers own decisions to core subscribers", func(t *testing.T) {
		// A consumer's deliver subject is in the request body, which
		// permissions do not see. The server refuses a deliver subject in
		// the consumer's own stream (tenure.out.>: "forms a cycle"), and
		// neither streams nor the JetStream API receive such deliveries;
		// but a core subscriber elsewhere does: here the coordinator's
		// micro service subject gets w1's own (genuine) decisions.
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := w1.js.CreateConsumer(cctx, "TENURE_OUT", jetstream.ConsumerConfig{
			Name: "tw_w1_1", FilterSubject: "tenure.out.w1.>", DeliverSubject: "tenure.out.w2.secret-job.revoked",
			AckPolicy: jetstream.AckNonePolicy,
		}); err == nil || !strings.Contains(err.Error(), "cycle") {
			t.Fatalf("deliver subject on tenure.out: %v, want the cycle error", err)
		}
		relay, err := w1.js.CreateConsumer(cctx, "TENURE_OUT", jetstream.ConsumerConfig{
			Name: "tw_w1_2", FilterSubject: "tenure.out.w1.>", DeliverSubject: "tenure.in.worker.w2.secret-job.release",
			AckPolicy: jetstream.AckNonePolicy,
		})
		if err != nil {
			t.Fatal(err)
		}
		coord := connect(t, e.b, e.url, "coord")
		sub, err := coord.nc.SubscribeSync("$SRV.STATS.tenure")
		if err != nil {
			t.Fatal(err)
		}
		_ = coord.nc.Flush()
		if _, err := w1.js.CreateConsumer(cctx, "TENURE_OUT", jetstream.ConsumerConfig{
			Name: "tw_w1_3", FilterSubject: "tenure.out.w1.>", DeliverSubject: "$SRV.STATS.tenure",
			AckPolicy: jetstream.AckNonePolicy,
		}); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := events.DecodeDecision(m.Data); err != nil || d.Addressee != "w1" {
			t.Fatalf("relayed %s: %v", m.Data, err)
		}
		// tw_w1_2 has delivered nothing, and never will: no subscriber,
		// stream or other, has interest in its deliver subject (an input
		// stream capturing it would be one; the server delivers a push
		// consumer's messages only to an interest, as tw_w1_3's show).
		info, err := relay.Info(cctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.PushBound || info.Delivered.Consumer != 0 {
			t.Fatalf("tw_w1_2 to %s: bound %v, %d delivered: something listens on an input subject", info.Config.DeliverSubject, info.PushBound, info.Delivered.Consumer)
		}
	})
	// And the input stream holds no delivery: one stored would be before
	// a marker w2 publishes now (the stream stores in order), so the log
	// up to the marker is all there is to look at.
	if _, err := w2.js.Publish(ctx, "tenure.in.worker.w2.limits-marker.acquire", []byte(`{"v":1,"lease_ms":600000}`)); err != nil {
		t.Fatal(err)
	}
	var inputs []stored
	testutil.WaitFor(t, 20*time.Second, "the marker in the input stream", func() bool {
		inputs = e.read(t, "TENURE_IN")
		return slices.ContainsFunc(inputs, func(m stored) bool { return strings.Contains(m.subject, "limits-marker") })
	})
	for _, m := range inputs {
		if strings.Contains(m.subject, "secret-job") && !strings.HasSuffix(m.subject, ".acquire") {
			t.Errorf("input %d on %s: a consumer's delivery was stored", m.seq, m.subject)
		}
	}
}
