package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// env is one embedded server with Tenure's topology and a live coordinator.
type env struct {
	t     *testing.T
	srv   *embedded.Server
	js    jetstream.JetStream
	coord *running
}

// newEnv starts a real embedded nats-server, creates the topology and runs a
// real coordinator until it is live (as coordinator/helpers_test.go does).
func newEnv(t *testing.T) *env {
	t.Helper()
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	if _, err := streams.Ensure(context.Background(), js, streams.Topology{}, 600*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, srv: srv, js: js}
	e.coord = startCoordinator(t, srv.ClientURL(), "c1")
	testutil.WaitFor(t, 10*time.Second, "coordinator live", func() bool { return e.coord.c.Stats().Live })
	return e
}

// worker connects a worker with its own NATS connection; both are closed in
// t.Cleanup.
func (e *env) worker(id string, opts ...Option) *Worker {
	e.t.Helper()
	w, _ := e.workerConn(id, opts...)
	return w
}

func (e *env) workerConn(id string, opts ...Option) (*Worker, *nats.Conn) {
	e.t.Helper()
	nc, err := nats.Connect(e.srv.ClientURL(), nats.MaxReconnects(-1), nats.Name(id), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	w, err := Connect(nc, id, opts...)
	if err != nil {
		nc.Close()
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if err := w.Close(); err != nil {
			e.t.Error(err)
		}
		nc.Close()
	})
	return w, nc
}

// ops publishes an operator input and returns its sequence.
func (e *env) ops(job string, in events.Input) uint64 {
	e.t.Helper()
	in.Role, in.Actor, in.Job = events.RoleOps, "op1", job
	ack, err := e.js.Publish(context.Background(), events.InputSubject(events.RoleOps, "op1", job, in.Verb), events.AppendInputBody(nil, &in))
	if err != nil {
		e.t.Fatalf("publish %s: %v", in.Verb, err)
	}
	return ack.Sequence
}

// msg is one stored message.
type msg struct {
	seq     uint64
	subject string
	data    []byte
	header  nats.Header
}

func (e *env) readStream(name string) []msg {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, name)
	if err != nil {
		e.t.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []msg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			e.t.Fatalf("get %s #%d: %v", name, seq, err)
		}
		out = append(out, msg{seq: m.Sequence, subject: m.Subject, data: m.Data, header: m.Header})
	}
	return out
}

// decisions returns every stored decision about job, in order.
func (e *env) decisions(job string) []events.Decision {
	e.t.Helper()
	var out []events.Decision
	for _, m := range e.readStream("TENURE_OUT") {
		d, err := events.DecodeDecision(m.data)
		if err != nil {
			e.t.Fatal(err)
		}
		if d.Job.ID == job {
			out = append(out, d)
		}
	}
	return out
}

// caughtUp waits until the coordinator has folded every stored input and
// stored every decision it derived.
func (e *env) caughtUp() {
	e.t.Helper()
	ctx := context.Background()
	testutil.WaitFor(e.t, 10*time.Second, "coordinator to catch up", func() bool {
		in, err1 := e.js.Stream(ctx, "TENURE_IN")
		out, err2 := e.js.Stream(ctx, "TENURE_OUT")
		if err1 != nil || err2 != nil {
			return false
		}
		st := e.coord.c.Stats()
		return st.InputsFolded == in.CachedInfo().State.LastSeq && st.DecisionsStored == out.CachedInfo().State.LastSeq
	})
}

// running is a coordinator run by a test.
type running struct {
	c    *coordinator.Coordinator
	stop func()
}

func startCoordinator(t *testing.T, url, id string) *running {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.New(coordinator.Config{ID: id, Conn: nc, LeaderTTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	r := &running{c: c}
	var stopped bool
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("coordinator %s: %v", id, err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("coordinator %s did not stop", id)
		}
		nc.Close()
	}
	t.Cleanup(r.stop)
	return r
}

// waitDone waits for ch to be closed.
func waitDone(t testing.TB, ch <-chan struct{}, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(timeout):
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// acquireEventually retries Acquire while the job's lease is held.
func acquireEventually(t testing.TB, w *Worker, job string, opts ...LeaseOption) *Lease {
	t.Helper()
	var l *Lease
	testutil.WaitFor(t, 10*time.Second, "the lease of "+job+" acquired", func() bool {
		var err error
		l, err = w.Acquire(context.Background(), job, opts...)
		if err != nil && !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("acquire %s: %v", job, err)
		}
		return err == nil
	})
	return l
}

func withBeforeRenew(h func()) LeaseOption {
	return func(o *LeaseOptions) error { o.beforeRenew = h; return nil }
}
