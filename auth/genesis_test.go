package auth_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// Under tenure auth init's permissions, a brand-new deployment before its
// coordinator goes live: the input stream exists (made by the coordinator
// user, as Coordinator.Run does) in genesis. A worker's own input finds no
// stream and is not stored; the genesis subjects (rules and policy of the
// coordinator role) are refused to a worker and a dispatcher by their
// permissions; then the coordinator, with its own credential, stores its
// rules and policy, the administrator widens the stream (tenure genesis),
// the coordinator goes live, and the worker's input is stored after them.
func TestGenesisUnderPermissions(t *testing.T) {
	t.Parallel()
	b := generate(t, auth.Options{})
	srv := testutil.StartServer(t, testutil.ConfigFile(b.ServerConfigPath()))
	e := &env{b: b, srv: srv, url: srv.ClientURL()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	coord := connect(t, b, e.url, "coord")
	if _, err := streams.Ensure(ctx, coord.js, streams.Topology{}, 600*time.Millisecond); err != nil {
		t.Fatalf("Ensure as the coordinator: %v", err)
	}
	w1 := connect(t, b, e.url, "w1")
	const acquire = "tenure.in.worker.w1.gen-1.acquire"
	if _, err := w1.js.Publish(ctx, acquire, []byte(`{"v":1,"lease_ms":60000}`)); !errors.Is(streams.Classify(err), streams.ErrNoResponders) {
		t.Fatalf("w1's acquire in genesis: %v, want no responders", err)
	}
	refused(t, w1, "w1", "tenure.in.coord.w1._.rules", "tenure.in.coord.w1._.policy", "tenure.in.coord.coord._.rules")
	disp := connect(t, b, e.url, "disp")
	refused(t, disp, "disp", "tenure.in.coord.disp._.rules", "tenure.in.coord.disp._.policy")
	e.coord = coord // e.read's connection until the coordinator runs
	if got := e.read(t, "TENURE_IN"); len(got) != 0 {
		t.Fatalf("the input stream in genesis holds %d inputs", len(got))
	}

	e.startCoordinator(t, coordinator.Config{})
	ack, err := w1.js.Publish(ctx, acquire, []byte(`{"v":1,"lease_ms":60000}`))
	if err != nil {
		t.Fatalf("w1's acquire after genesis: %v", err)
	}
	in := e.read(t, "TENURE_IN")
	if ack.Sequence != 3 || len(in) < 3 || in[0].subject != "tenure.in.coord.coord._.rules" || in[1].subject != "tenure.in.coord.coord._.policy" ||
		!strings.HasPrefix(in[2].subject, "tenure.in.worker.w1.") {
		t.Fatalf("w1's acquire stored as input %d; the log: %v", ack.Sequence, in)
	}
	coord.noViolations(t, "coord")
}

// Under tenure auth init's permissions the coordinator's credential may not
// update its log's streams: an update that would trim the input stream
// (max_msgs 100, discard old) or limit it is refused by the server (a
// permissions violation; the request is never answered), and the streams
// keep their configuration. (Before, the coordinator had
// $JS.API.STREAM.UPDATE on the input stream for the end of genesis, and
// such an update trimmed the log to its last 100 inputs.)
func TestCoordinatorCannotUpdateItsStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, auth.Options{})
	w1 := connect(t, e.b, e.url, "w1")
	ctx := context.Background()
	for i := range 5 {
		if _, err := w1.js.Publish(ctx, fmt.Sprintf("tenure.in.worker.w1.lock-%d.acquire", i), []byte(`{"v":1,"lease_ms":60000}`)); err != nil {
			t.Fatal(err)
		}
	}
	e.caughtUp(t)
	c := connect(t, e.b, e.url, "coord")
	for _, name := range []string{"TENURE_IN", "TENURE_OUT"} {
		s, err := c.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		before := s.CachedInfo()
		for _, change := range []func(*jetstream.StreamConfig){
			func(cfg *jetstream.StreamConfig) { cfg.MaxMsgs, cfg.Discard = 2, jetstream.DiscardOld },
			func(cfg *jetstream.StreamConfig) { cfg.MaxMsgs = 10 },
		} {
			cfg := before.Config
			change(&cfg)
			uctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := c.js.UpdateStream(uctx, cfg)
			cancel()
			if err == nil {
				t.Fatalf("the coordinator's credential updated %s (max_msgs %d, discard %v)", name, cfg.MaxMsgs, cfg.Discard)
			}
			c.errs.expectViolation(t, "the coordinator's update of "+name, "$JS.API.STREAM.UPDATE."+name)
		}
		after, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if after.Config.MaxMsgs != -1 || after.Config.Discard != jetstream.DiscardNew || after.State.Msgs < before.State.Msgs || after.State.FirstSeq != 1 {
			t.Fatalf("%s changed: max_msgs %d, discard %v, %d messages (were %d)", name, after.Config.MaxMsgs, after.Config.Discard, after.State.Msgs, before.State.Msgs)
		}
	}
	if st := e.c.Stats(); !st.Live {
		t.Fatalf("coordinator: %+v", st)
	}
}

// An update of the input stream made behind the live coordinator's back
// (here by the administrator's credential, the one that may: max_msgs 100,
// discard old, which trims the log) turns the coordinator refused at once,
// without a restart: status refused with the mismatch and the remedy, Run
// returns the stream change, and nothing more is appended. (Before, the
// live coordinator noticed nothing; only its next start refused.)
func TestStreamChangedBehindTheLiveCoordinator(t *testing.T) {
	t.Parallel()
	e := newEnv(t, auth.Options{})
	w1 := connect(t, e.b, e.url, "w1")
	ctx := context.Background()
	for i := range 3 {
		if _, err := w1.js.Publish(ctx, fmt.Sprintf("tenure.in.worker.w1.trim-%d.acquire", i), []byte(`{"v":1,"lease_ms":60000}`)); err != nil {
			t.Fatal(err)
		}
	}
	e.caughtUp(t)
	admin := connect(t, e.b, e.url, "admin")
	s, err := admin.js.Stream(ctx, "TENURE_IN")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgs, cfg.Discard = 100, jetstream.DiscardOld
	if _, err := admin.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("the administrator's update: %v", err)
	}
	admin.noViolations(t, "admin")
	select {
	case <-e.run.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the live coordinator went on after its input stream was limited: %+v", e.c.Stats())
	}
	var mismatch *streams.ConfigMismatchError
	if !errors.Is(e.run.err, coordinator.ErrStreamChanged) || !errors.As(e.run.err, &mismatch) || mismatch.Field != "MaxMsgs" {
		t.Fatalf("Run returned %v, want ErrStreamChanged (MaxMsgs)", e.run.err)
	}
	e.run.err = nil // expected: for the cleanup's stop
	st := e.c.Stats()
	if st.State != coordinator.StateRefused || !strings.Contains(st.Reason, "MaxMsgs") || !strings.Contains(st.Reason, coordinator.Remedy(mismatch)) {
		t.Fatalf("coordinator state %s, reason %q; want refused with the mismatch and the remedy", st.State, st.Reason)
	}
	out := len(e.read(t, "TENURE_OUT"))
	if _, err := w1.js.Publish(ctx, "tenure.in.worker.w1.trim-after.acquire", []byte(`{"v":1,"lease_ms":60000}`)); err != nil {
		t.Fatal(err)
	}
	// Nothing to wait on for a decision that must not come: a bounded look.
	time.Sleep(200 * time.Millisecond)
	if n := len(e.read(t, "TENURE_OUT")); n != out {
		t.Fatalf("the refused coordinator appended %d decisions", n-out)
	}
}

// A coordinator whose own widening is denied (GenesisSelf under tenure
// auth init's permissions, as a program embedding it with that credential
// runs it) says so: standby, with the command to run and the permission it
// lacks in its reason, and goes live once the administrator has widened the
// stream, without a restart.
func TestGenesisDeniedThenByTheAdministrator(t *testing.T) {
	t.Parallel()
	b := generate(t, auth.Options{})
	srv := testutil.StartServer(t, testutil.ConfigFile(b.ServerConfigPath()))
	e := &env{b: b, srv: srv, url: srv.ClientURL()}
	coord := connect(t, b, e.url, "coord")
	c, err := coordinator.New(coordinator.Config{ID: "coord", Conn: coord.nc, LeaderTTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("coordinator: %v", err)
		}
	}()
	var st coordinator.Stats
	testutil.WaitFor(t, 30*time.Second, "the coordinator saying its widening was denied", func() bool {
		st = c.Stats()
		return st.State == coordinator.StateStandby && strings.Contains(st.Reason, "tenure genesis") &&
			strings.Contains(st.Reason, "$JS.API.STREAM.UPDATE.TENURE_IN")
	})
	coord.errs.expectViolation(t, "the coordinator's own widening", "$JS.API.STREAM.UPDATE.TENURE_IN")
	endGenesis(t, b, e.url, streams.Topology{})
	testutil.WaitFor(t, 20*time.Second, "coordinator live", func() bool { return c.Stats().Live })
}
