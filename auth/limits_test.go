package auth_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/events"
)

// What subject permissions cannot prevent (auth.Limits). These tests pin the
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

	t.Run("stream info lists every decision subject", func(t *testing.T) {
		// The worker needs $JS.API.STREAM.INFO.TENURE_OUT; its request may
		// carry a subjects filter, and the answer counts messages per
		// subject: job ids and decision kinds of other workers (never a
		// body).
		s, err := w1.js.Stream(ctx, "TENURE_OUT")
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter("tenure.out.>"))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Subjects["tenure.out.w2.secret-job.granted"] != 1 {
			t.Fatalf("subjects seen by w1: %v", info.State.Subjects)
		}
	})

	t.Run("pull from a consumer whose name is known", func(t *testing.T) {
		// $JS.API.CONSUMER.MSG.NEXT.TENURE_OUT.<name>: the name is one
		// token, so permissions cannot tie it to the worker. A worker that
		// knows the name of another user's consumer can pull from it.
		if _, err := disp.js.CreateConsumer(ctx, "TENURE_OUT", jetstream.ConsumerConfig{
			Durable: "dashboard", FilterSubject: "tenure.out.>", AckPolicy: jetstream.AckNonePolicy,
		}); err != nil {
			t.Fatal(err)
		}
		// The client's Consumer handle needs CONSUMER.INFO (allowed).
		cons, err := w1.js.Consumer(ctx, "TENURE_OUT", "dashboard")
		if err != nil {
			t.Fatal(err)
		}
		batch, err := cons.Fetch(10, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var seen []string
		for m := range batch.Messages() {
			seen = append(seen, m.Subject())
		}
		if !strings.Contains(strings.Join(seen, " "), "tenure.out.w2.secret-job.granted") {
			t.Fatalf("w1 pulled %v", seen)
		}
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
			Name: "relay1", FilterSubject: "tenure.out.w1.>", DeliverSubject: "tenure.out.w2.secret-job.revoked",
			AckPolicy: jetstream.AckNonePolicy,
		}); err == nil || !strings.Contains(err.Error(), "cycle") {
			t.Fatalf("deliver subject on tenure.out: %v, want the cycle error", err)
		}
		if _, err := w1.js.CreateConsumer(cctx, "TENURE_OUT", jetstream.ConsumerConfig{
			Name: "relay2", FilterSubject: "tenure.out.w1.>", DeliverSubject: "tenure.in.worker.w2.secret-job.release",
			AckPolicy: jetstream.AckNonePolicy,
		}); err != nil {
			t.Fatal(err)
		}
		coord := connect(t, e.b, e.url, "coord")
		sub, err := coord.nc.SubscribeSync("$SRV.STATS.tenure")
		if err != nil {
			t.Fatal(err)
		}
		_ = coord.nc.Flush()
		if _, err := w1.js.CreateConsumer(cctx, "TENURE_OUT", jetstream.ConsumerConfig{
			Name: "relay3", FilterSubject: "tenure.out.w1.>", DeliverSubject: "$SRV.STATS.tenure",
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
	})
	time.Sleep(200 * time.Millisecond) // deliveries, if any, would be stored by now
	e.caughtUp(t)
	for _, m := range e.read(t, "TENURE_IN") {
		if strings.Contains(m.subject, "secret-job") && !strings.HasSuffix(m.subject, ".acquire") {
			t.Errorf("input %d on %s: a consumer's delivery was stored", m.seq, m.subject)
		}
	}
}
