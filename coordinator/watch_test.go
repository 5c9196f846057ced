package coordinator_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// updateStream changes stream name's configuration with f, as an
// administrator would (nats stream edit): behind the coordinator's back.
func updateStream(t *testing.T, js jetstream.JetStream, name string, f func(*jetstream.StreamConfig)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	f(&cfg)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("update %s: %v", name, err)
	}
}

// refusedBy waits for r's Run to return a stream change, and checks its
// state: refused, with the mismatch and the remedy a start would give.
func refusedBy(t *testing.T, r *running, field string) {
	t.Helper()
	var err error
	select {
	case err = <-r.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the coordinator went on after its stream changed: %+v", r.c.Stats())
	}
	r.done <- nil // for the cleanup's stop
	var mismatch *streams.ConfigMismatchError
	if !errors.Is(err, coordinator.ErrStreamChanged) || !errors.As(err, &mismatch) || mismatch.Field != field {
		t.Fatalf("Run returned %v, want ErrStreamChanged with a %s mismatch", err, field)
	}
	st := r.c.Stats()
	if st.State != coordinator.StateRefused || st.Live || !strings.Contains(st.Reason, mismatch.Error()) ||
		!strings.Contains(st.Reason, coordinator.Remedy(mismatch)) {
		t.Fatalf("state %s (live %v), reason %q; want refused with the mismatch and the remedy %q", st.State, st.Live, st.Reason, coordinator.Remedy(mismatch))
	}
}

// A change of the input or decision stream's configuration made while the
// coordinator is live, one that its start would refuse, makes it refuse at
// once (the stream-updated advisory; the interval is an hour here), without
// a restart: it appends nothing more. (Before the watch, it noticed
// nothing: the trimmed or limited log went on being written, and only its
// next start refused.)
func TestWatchRefusesAStreamChangedWhileLive(t *testing.T) {
	for _, tc := range []struct {
		name, stream, field string
		change              func(*jetstream.StreamConfig)
	}{
		{"input max msgs, discard old", "TENURE_IN", "MaxMsgs", func(c *jetstream.StreamConfig) { c.MaxMsgs, c.Discard = 100, jetstream.DiscardOld }},
		{"input max age", "TENURE_IN", "MaxAge", func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour }},
		{"input narrowed back to genesis", "TENURE_IN", "Subjects", func(c *jetstream.StreamConfig) { c.Subjects = streams.Topology{}.GenesisSubjects() }},
		{"decision max msgs", "TENURE_OUT", "MaxMsgs", func(c *jetstream.StreamConfig) { c.MaxMsgs = 10 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, js := clockServer(t)
			r := startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) { c.StreamCheckInterval = time.Hour })
			testutil.WaitFor(t, 10*time.Second, "c1 live", func() bool { return r.c.Stats().Live })
			seq := publish(t, js, events.RoleWorker, "w1", "j1", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
			decisionsFor(t, js, seq)
			updateStream(t, js, tc.stream, tc.change)
			refusedBy(t, r, tc.field)
		})
	}
}

// The watch's interval is the backstop for a missed advisory: with a watch
// connection that may not receive the advisories (a user of an older
// tenure auth init: the server refuses the subscriptions, and says so only
// asynchronously), a change is found once the coordinator's clock passes
// StreamCheckInterval, and not before. (This test replaced a hook that
// skipped the subscriptions.)
func TestWatchIntervalFindsAMissedChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.conf")
	conf := `accounts {
  TENURE: {
    jetstream: enabled
    users: [
      { user: coord, password: coord-secret }
      { user: watch, password: watch-secret, permissions: { subscribe: { deny: ["$JS.EVENT.ADVISORY.>"] } } }
    ]
  }
}
`
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testutil.StartServer(t, testutil.ConfigFile(path))
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("coord", "coord-secret")
	_, js := testutil.Connect(t, u.String())
	refused := make(chan error, 4)
	watchConn, err := nats.Connect(srv.ClientURL(), nats.UserInfo("watch", "watch-secret"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case refused <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer watchConn.Close()
	fc := clock.NewFake(time.Now())
	r := startCoordinator(t, u.String(), "c1", withClock(fc), func(c *coordinator.Config) {
		c.LeaderTTL, c.SnapshotEvery, c.StreamCheckInterval = longTTL, -1, time.Minute
		c.WatchConn = watchConn
	})
	testutil.WaitFor(t, 10*time.Second, "c1 live", func() bool { return r.c.Stats().Live })
	select {
	case err := <-refused:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("the watch's subscription: %v, want a permissions violation", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not refuse the watch's subscriptions: the test means nothing")
	}
	waitCaughtUp(t, js, r) // no append in flight: the overdue ticker would fire too
	updateStream(t, js, "TENURE_IN", func(c *jetstream.StreamConfig) { c.MaxBytes = 1 << 20 })
	// Nothing to wait on for a check that must not happen: a bounded look.
	time.Sleep(200 * time.Millisecond)
	if st := r.c.Stats(); !st.Live {
		t.Fatalf("c1 out of live before its clock reached the interval: %+v", st)
	}
	fc.Advance(time.Minute)
	refusedBy(t, r, "MaxBytes")
}

// With GenesisAdmin the coordinator stores its rules and policy and then
// waits, holding leadership, for the administrator to widen the input
// stream: standby, the command to run in its reason, no worker input
// stored. EndGenesis (tenure genesis) widens it once the rules and the
// policy are there; the coordinator notices at once, without a restart,
// and goes live; a worker's input then follows the rules and the policy.
// The widening is an allowed change: the watch does not refuse it.
func TestGenesisByTheAdministrator(t *testing.T) {
	srv, js := clockServer(t)
	const command = "tenure genesis --creds-json /auth/admin.creds.json"
	r := startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) {
		c.Genesis, c.GenesisCommand, c.StreamCheckInterval = coordinator.GenesisAdmin, command, time.Hour
	})
	var st coordinator.Stats
	testutil.WaitFor(t, 10*time.Second, "c1 waiting for the end of genesis", func() bool {
		st = r.c.Stats()
		return st.State == coordinator.StateStandby && strings.Contains(st.Reason, command)
	})
	if st.Live || !strings.Contains(st.Reason, "genesis") {
		t.Fatalf("waiting for genesis: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, events.InputSubject(events.RoleWorker, "w1", "j1", events.VerbAcquire), []byte(`{"v":1}`)); !errors.Is(streams.Classify(err), streams.ErrNoResponders) {
		t.Fatalf("a worker's input while the coordinator waits: %v, want no responders", err)
	}
	widened, err := coordinator.EndGenesis(ctx, js, streams.Topology{}, nil, 20*time.Millisecond)
	if err != nil || !widened {
		t.Fatalf("EndGenesis: %v, %v", widened, err)
	}
	testutil.WaitFor(t, 10*time.Second, "c1 live once the administrator widened the stream", func() bool { return r.c.Stats().Live })
	seq := publish(t, js, events.RoleWorker, "w1", "j1", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	if seq != 3 {
		t.Fatalf("the worker's input stored as input %d, want 3", seq)
	}
	checkGenesisLog(t, readStream(t, js, "TENURE_IN"))
	if g := decisionsFor(t, js, seq)[0]; g.Kind != events.KindGranted {
		t.Fatalf("acquire after genesis: %v", g.Kind)
	}
	if widened, err := coordinator.EndGenesis(ctx, js, streams.Topology{}, nil, 20*time.Millisecond); err != nil || widened {
		t.Fatalf("EndGenesis again: %v, %v; want nothing to do", widened, err)
	}
}

// EndGenesis waits for the streams and for the coordinator's rules and
// policy: started before any coordinator, it widens nothing until they are
// stored, and ends once it has widened the stream.
func TestEndGenesisWaitsForTheCoordinator(t *testing.T) {
	srv, js := clockServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type result struct {
		widened bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		w, err := coordinator.EndGenesis(ctx, js, streams.Topology{}, nil, 20*time.Millisecond)
		done <- result{w, err}
	}()
	r := startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) { c.Genesis = coordinator.GenesisAdmin })
	select {
	case res := <-done:
		if res.err != nil || !res.widened {
			t.Fatalf("EndGenesis: %v, %v", res.widened, res.err)
		}
	case <-ctx.Done():
		t.Fatal("EndGenesis did not end")
	}
	testutil.WaitFor(t, 10*time.Second, "c1 live", func() bool { return r.c.Stats().Live })
	checkGenesisLog(t, readStream(t, js, "TENURE_IN"))
}
