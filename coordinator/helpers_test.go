package coordinator_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// msg is one stored message, as read back for checking.
type msg struct {
	seq     uint64
	time    int64
	subject string
	data    []byte
	header  nats.Header
}

// readStream reads every message of a stream, in order, with direct gets.
func readStream(t testing.TB, js jetstream.JetStream, name string) []msg {
	t.Helper()
	out, _ := readStreamFrom(t, js, name, 0)
	return out
}

// readStreamFrom returns the messages of stream name from sequence from (0:
// its first) to its last, and the sequence after them (from, if there were
// none).
func readStreamFrom(t testing.TB, js jetstream.JetStream, name string, from uint64) ([]msg, uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	st := s.CachedInfo().State
	if from == 0 {
		from = st.FirstSeq
	}
	var out []msg
	for ; from <= st.LastSeq && st.Msgs > 0; from++ {
		m, err := s.GetMsg(ctx, from)
		if err != nil {
			t.Fatalf("get %s #%d: %v", name, from, err)
		}
		out = append(out, msg{seq: m.Sequence, time: m.Time.UnixNano(), subject: m.Subject, data: m.Data, header: m.Header})
	}
	return out, from
}

// foldStoredIn folds stored inputs of one partition (the zero Partition:
// unpartitioned) with a fresh projector and returns the decisions as
// (subject, body) pairs.
func foldStoredIn(t testing.TB, part events.Partition, inputs []msg) []msg {
	t.Helper()
	p := projector.NewPartition(part)
	var out []msg
	for _, in := range inputs {
		ds, err := p.Step(events.Raw{Seq: in.seq, Time: in.time, Subject: in.subject, Body: in.data})
		if err != nil {
			t.Fatal(err)
		}
		for i := range ds {
			out = append(out, msg{subject: part.DecisionSubject(&ds[i]), data: events.AppendDecision(nil, &ds[i])})
		}
	}
	return out
}

// checkChain requires the decision stream to be exactly the fold of the
// input stream: same count, same subjects, byte-identical bodies, headers
// naming the right cause, no gap and no duplicate.
func checkChain(t testing.TB, js jetstream.JetStream) (inputs, decisions []msg) {
	t.Helper()
	return checkChainOf(t, js, streams.Topology{})
}

// checkChainOf is checkChain for the streams of topology topo.
func checkChainOf(t testing.TB, js jetstream.JetStream, topo streams.Topology) (inputs, decisions []msg) {
	t.Helper()
	// A live coordinator may append a tick (and its decisions) between the
	// two reads: read until the input stream did not move meanwhile and the
	// decisions of every input read are stored.
	var want []msg
	testutil.WaitFor(t, 10*time.Second, "the decisions of every input read", func() bool {
		inputs = readStream(t, js, topo.InputStream())
		decisions = readStream(t, js, topo.DecisionStream())
		again := readStream(t, js, topo.InputStream())
		want = foldStoredIn(t, topo.Partition, inputs)
		return len(again) == len(inputs) && len(decisions) >= len(want)
	})
	checkFold(t, inputs, decisions, want)
	return inputs, decisions
}

// checkFold requires decisions to be exactly want, the fold of inputs.
func checkFold(t testing.TB, inputs, decisions, want []msg) {
	t.Helper()
	if len(decisions) != len(want) {
		for i := range max(len(decisions), len(want)) {
			var g, w string
			if i < len(decisions) {
				g = string(decisions[i].data)
			}
			if i < len(want) {
				w = string(want[i].data)
			}
			if g != w {
				t.Logf("first difference at decision %d:\n got %s\nwant %s", i+1, g, w)
				break
			}
		}
		t.Fatalf("decision stream holds %d decisions, the fold of %d inputs gives %d", len(decisions), len(inputs), len(want))
	}
	var chain events.Chain
	for i := range want {
		d := decisions[i]
		if d.seq != uint64(i+1) {
			t.Fatalf("decision %d has sequence %d: gap", i+1, d.seq)
		}
		if d.subject != want[i].subject || !bytes.Equal(d.data, want[i].data) {
			t.Fatalf("decision %d differs from the fold:\n got %s %s\nwant %s %s", i+1, d.subject, d.data, want[i].subject, want[i].data)
		}
		dd, err := events.DecodeDecision(d.data)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.header.Get(events.HeaderCause); got != fmt.Sprint(dd.Cause) {
			t.Fatalf("decision %d: cause header %q, body says %d", i+1, got, dd.Cause)
		}
		// Its chain value commits to it and every decision before it.
		chain = events.NextChain(chain, d.seq, dd.Cause, dd.N, dd.Of, d.subject, d.data)
		if got := d.header.Get(events.HeaderChain); got != chain.String() {
			t.Fatalf("decision %d: chain header %q, want %s", i+1, got, chain)
		}
	}
}

// startCoordinator runs a coordinator on its own connection until the
// returned stop function is called (graceful) or kill (abrupt: the
// connection is closed under it, as if the process died).
type running struct {
	c    *coordinator.Coordinator
	nc   *nats.Conn
	stop func()
	kill func()
	done chan error
}

func startCoordinator(t testing.TB, url, id string, mod ...func(*coordinator.Config)) *running {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	cfg := coordinator.Config{ID: id, Conn: nc, LeaderTTL: 600 * time.Millisecond, Logger: testLogger()}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, nc: nc, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	var stopped bool
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("coordinator %s: %v", id, err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("coordinator %s did not stop", id)
		}
		nc.Close()
	}
	r.kill = func() {
		if stopped {
			return
		}
		stopped = true
		nc.Close()
		cancel()
		<-r.done
	}
	t.Cleanup(r.stop)
	return r
}

func testLogger() *slog.Logger {
	if os.Getenv("TENURE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// waitDecision waits (10 s at most) for a stored decision that match
// accepts, and returns the first one.
func waitDecision(t testing.TB, js jetstream.JetStream, what string, match func(events.Decision) bool) events.Decision {
	t.Helper()
	var found events.Decision
	testutil.WaitFor(t, 10*time.Second, what, func() bool {
		for _, m := range readStream(t, js, "TENURE_OUT") {
			if d, err := events.DecodeDecision(m.data); err == nil && match(d) {
				found = d
				return true
			}
		}
		return false
	})
	return found
}

// waitCaughtUp waits until coordinator r has folded every stored input and
// the decision stream has every decision it derived.
func waitCaughtUp(t testing.TB, js jetstream.JetStream, r *running) {
	t.Helper()
	ctx := context.Background()
	testutil.WaitFor(t, 20*time.Second, "coordinator to catch up", func() bool {
		in, err1 := js.Stream(ctx, "TENURE_IN")
		out, err2 := js.Stream(ctx, "TENURE_OUT")
		if err1 != nil || err2 != nil {
			return false
		}
		ii, err1 := in.Info(ctx)
		oi, err2 := out.Info(ctx)
		if err1 != nil || err2 != nil {
			return false
		}
		st := r.c.Stats()
		return st.Live && st.InputsFolded == ii.State.LastSeq && st.DecisionsStored == oi.State.LastSeq
	})
}

// publish stores one input and returns its sequence.
func publish(t testing.TB, js jetstream.JetStream, role events.Role, actor, job string, verb events.Verb, body string) uint64 {
	t.Helper()
	// Until its coordinator first goes live, a deployment's input stream
	// takes the rules only (genesis, PROTOCOL.md §1.1): a worker's input
	// meets no stream. Tests publish right after starting a coordinator,
	// which on two loaded cores took more than the client's default
	// retries (two, 250 ms apart) to open it: retried for up to 30 s.
	ack, err := js.Publish(context.Background(), events.InputSubject(role, actor, job, verb), []byte(body),
		jetstream.WithRetryAttempts(120), jetstream.WithRetryWait(250*time.Millisecond))
	if err != nil {
		t.Fatalf("publish %s: %v", verb, err)
	}
	return ack.Sequence
}

// decisionFor waits for the verdicts of input seq on the decision stream.
func decisionsFor(t testing.TB, js jetstream.JetStream, seq uint64) []events.Decision {
	t.Helper()
	var out []events.Decision
	// 30 s: it waits for the decisions, never longer than they take, and on
	// two loaded cores 500 inputs' decisions took more than 10 s (issue 34).
	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("decisions of input %d", seq), func() bool {
		out = out[:0]
		for _, m := range readStream(t, js, "TENURE_OUT") {
			d, err := events.DecodeDecision(m.data)
			if err != nil {
				t.Fatal(err)
			}
			if d.Cause == seq {
				out = append(out, d)
			}
		}
		return len(out) > 0 && int(out[0].Of) == len(out)
	})
	return out
}

func verdict(ds []events.Decision) events.Decision {
	for _, d := range ds {
		if !d.Kind.Derived() {
			return d
		}
	}
	return events.Decision{}
}

// newServer starts a server and creates the topology as Ensure does: the
// input stream in genesis, taking only coordinators' rules and policy
// inputs until a coordinator goes live.
func newServer(t testing.TB) (*embedded.Server, *nats.Conn, jetstream.JetStream) {
	srv := testutil.StartServer(t)
	nc, js := testutil.Connect(t, srv.ClientURL())
	if _, err := streams.Ensure(context.Background(), js, streams.Topology{}, 600*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	return srv, nc, js
}

// newOpenServer is newServer with the input stream's genesis ended at once
// (streams.EndGenesis), for tests that write a log by hand before any
// coordinator runs, or that play a deployment made before genesis existed.
func newOpenServer(t testing.TB) (*embedded.Server, *nats.Conn, jetstream.JetStream) {
	srv, nc, js := newServer(t)
	if _, err := streams.EndGenesis(context.Background(), js, streams.Topology{}); err != nil {
		t.Fatal(err)
	}
	return srv, nc, js
}
