package worker

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// A worker cannot suppress another worker's input by publishing, first and
// on its own subject, a message with the other's future Nats-Msg-Id (the
// duplicate window is stream-wide). Here the real server runs the
// configuration of `tenure auth init` and every party is its own user: w1
// publishes with Msg-Id X; w2's SDK is then made to send an input with
// Msg-Id X. Its first attempt comes back "duplicate" (with w1's sequence):
// the SDK takes that for a collision, resends under a fresh id, and w2's
// input is stored and decided.
func TestMsgIDCollisionResent(t *testing.T) {
	t.Parallel()
	b, err := auth.Generate(auth.Options{Dir: t.TempDir(), BcryptCost: 4, Actors: []auth.Actor{
		{Name: "coord", Role: auth.RoleCoordinator},
		{Name: "w1", Role: auth.RoleWorker},
		{Name: "w2", Role: auth.RoleWorker},
		{Name: "admin", Role: auth.RoleAdmin},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Write(false); err != nil {
		t.Fatal(err)
	}
	srv := testutil.StartServer(t, testutil.ConfigFile(b.ServerConfigPath()))
	conn := func(name string) (*nats.Conn, jetstream.JetStream) {
		t.Helper()
		c, _ := b.Credential(name)
		nc, err := c.Connect(srv.ClientURL(), nats.Timeout(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return nc, js
	}
	cnc, cjs := conn("coord")
	c, err := coordinator.New(coordinator.Config{ID: "coord", Conn: cnc, LeaderTTL: 600 * time.Millisecond, Genesis: coordinator.GenesisAdmin})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("coordinator: %v", err)
		}
	})
	// The administrator ends the genesis, as tenure genesis does.
	_, ajs := conn("admin")
	gctx, gcancel := context.WithTimeout(ctx, 20*time.Second)
	defer gcancel()
	if _, err := coordinator.EndGenesis(gctx, ajs, streams.Topology{}, nil, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, "coordinator live", func() bool { return c.Stats().Live })

	// w1 (hostile) publishes first with the id w2 will use.
	const stolen = "w2-00000000-0000-4000-8000-000000000000"
	_, w1js := conn("w1")
	m := nats.NewMsg("tenure.in.worker.w1.mid-1.acquire")
	m.Data = []byte(`{"v":1,"lease_ms":60000}`)
	hostile, err := w1js.PublishMsg(context.Background(), m, jetstream.WithMsgID(stolen))
	if err != nil || hostile.Duplicate {
		t.Fatalf("w1 publish: %+v %v", hostile, err)
	}

	var mu sync.Mutex
	var reported []error
	w2nc, _ := conn("w2")
	w2, err := Connect(w2nc, "w2", WithErrorHandler(func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	p := w2.newInput(&events.Input{Job: "mid-2", Verb: events.VerbAcquire, LeaseMS: 60000})
	p.msgID = stolen // the id w1 used first
	d, err := w2.send(context.Background(), p)
	if err != nil {
		t.Fatalf("w2 acquire: %v", err)
	}
	if d.Kind != events.KindGranted || d.Job.ID != "mid-2" || d.Actor != "w2" || d.Cause == hostile.Sequence {
		t.Fatalf("w2's verdict: %s/%s for %s by %s, cause %d (w1's input %d)", d.Kind, d.Reason, d.Job.ID, d.Actor, d.Cause, hostile.Sequence)
	}
	if p.msgID == stolen || !strings.HasPrefix(p.msgID, "w2-") {
		t.Fatalf("resent with Msg-Id %q", p.msgID)
	}
	mu.Lock()
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), stolen) {
		t.Errorf("reported %v, want the collision", reported)
	}
	mu.Unlock()
	// Stored, under w2's subject, with the fresh id.
	s, err := cjs.Stream(context.Background(), "TENURE_IN")
	if err != nil {
		t.Fatal(err)
	}
	in, err := s.GetMsg(context.Background(), d.Cause)
	if err != nil {
		t.Fatal(err)
	}
	if in.Subject != "tenure.in.worker.w2.mid-2.acquire" || in.Header.Get(jetstream.MsgIDHeader) != p.msgID {
		t.Fatalf("input %d: %s, Msg-Id %q", d.Cause, in.Subject, in.Header.Get(jetstream.MsgIDHeader))
	}

	// A retry of an input that went out keeps its id, and the stream's
	// "duplicate" answer is then its own first copy: the idempotent case.
	seq, err := w2.publish(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if seq != d.Cause || p.msgID != in.Header.Get(jetstream.MsgIDHeader) {
		t.Fatalf("retry: input %d with Msg-Id %s, want input %d with the same id", seq, p.msgID, d.Cause)
	}
	mu.Lock()
	if len(reported) != 1 {
		t.Errorf("a retry was reported as a collision: %v", reported[1:])
	}
	mu.Unlock()
}
