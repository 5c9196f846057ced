package coordinator_test

// The live loop's timers on an injected clock (Config.Clock).
//
// These tests run against the embedded nats-server, not in a
// testing/synctest bubble: a bubble's clock advances only when every
// goroutine in it is durably blocked, and the server's and the client's
// goroutines wait on sockets and files, which never counts as durably
// blocked, so in a bubble holding the server time stands still for ever
// (tried: a JetStream publish works, the first time.Sleep never returns).
// Instead the coordinator runs on a clock.Fake while the server keeps real
// time. Each test arms a timer far beyond anything the test could wait for
// in real time (a minute), advances the fake clock past it, and waits,
// with a deadline of a few seconds, for what the timer does: it would time
// out if the timer were on package time's clock.

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

// longTTL is the LeaderTTL of the tests whose subject is not the
// leadership: no renewal or leadership expiry falls due on the fake clock
// while they advance it by a minute or so.
const longTTL = 10 * time.Minute

func withClock(c clock.Clock) func(*coordinator.Config) {
	return func(cfg *coordinator.Config) { cfg.Clock = c }
}

// clockServer is newServer without the streams: the coordinator creates
// them with its own LeaderTTL (the leadership bucket's TTL, on real time).
func clockServer(t *testing.T) (*embedded.Server, jetstream.JetStream) {
	t.Helper()
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	return srv, js
}

// ticks counts the tick inputs in msgs.
func ticks(msgs []msg) int {
	n := 0
	for _, m := range msgs {
		if strings.HasSuffix(m.subject, "."+events.VerbTick.String()) {
			n++
		}
	}
	return n
}

// The tick timer is armed on the coordinator's clock for the earliest
// deadline: once the fake clock passes a lease's expiry, the coordinator
// appends a tick (which the fold, judging by the tick's stored time, finds
// early: nothing expires).
func TestClockTickTimer(t *testing.T) {
	srv, js := clockServer(t)
	fc := clock.NewFake(time.Now())
	r := startCoordinator(t, srv.ClientURL(), "c1", withClock(fc), func(c *coordinator.Config) { c.LeaderTTL, c.SnapshotEvery = longTTL, -1 })
	testutil.WaitFor(t, 10*time.Second, "c1 live", func() bool { return r.c.Stats().Live })
	seq := publish(t, js, events.RoleWorker, "w1", "j1", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	g := decisionsFor(t, js, seq)[0]
	if g.Kind != events.KindGranted {
		t.Fatalf("acquire: %v, want granted", g.Kind)
	}
	waitCaughtUp(t, js, r) // no append in flight: the overdue ticker would fire too
	if n := ticks(readStream(t, js, "TENURE_IN")); n != 0 {
		t.Fatalf("%d ticks before the fake clock moved", n)
	}
	fc.Set(time.Unix(0, g.Job.ExpiresAt).Add(coordinator.DefaultTickSlack))
	testutil.WaitFor(t, 10*time.Second, "a tick once the fake clock passed the lease's expiry", func() bool {
		return ticks(readStream(t, js, "TENURE_IN")) > 0
	})
}

// The snapshot ticker and SnapshotInterval are on the coordinator's clock:
// inputs folded, no snapshot until the fake clock passes the interval.
func TestClockSnapshotInterval(t *testing.T) {
	srv, js := clockServer(t)
	fc := clock.NewFake(time.Now())
	r := startCoordinator(t, srv.ClientURL(), "c1", withClock(fc), func(c *coordinator.Config) {
		c.LeaderTTL, c.SnapshotEvery, c.SnapshotInterval = longTTL, 1_000_000, time.Minute
	})
	testutil.WaitFor(t, 10*time.Second, "c1 live", func() bool { return r.c.Stats().Live })
	seq := publish(t, js, events.RoleWorker, "w1", "j1", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	decisionsFor(t, js, seq)
	waitCaughtUp(t, js, r)
	if st := r.c.Stats(); st.SnapshotSeq != 0 {
		t.Fatalf("a snapshot of input %d before the fake clock moved", st.SnapshotSeq)
	}
	// To the interval and no further (an append in flight while the clock
	// moves on would be overdue): the ticker's last tick, or the one the
	// loop has not taken yet, is taken once the clock is there.
	fc.Advance(time.Minute)
	testutil.WaitFor(t, 10*time.Second, "a snapshot once the fake clock passed SnapshotInterval", func() bool {
		return r.c.Stats().SnapshotSeq >= seq
	})
}

// The head ticker is on the coordinator's clock: no head until the fake
// clock passes HeadInterval.
func TestClockHeadTicker(t *testing.T) {
	srv, js := clockServer(t)
	fc := clock.NewFake(time.Now())
	kp, _ := headKey(t)
	r := startCoordinator(t, srv.ClientURL(), "c1", withClock(fc), func(c *coordinator.Config) {
		c.LeaderTTL, c.SnapshotEvery, c.HeadSigner, c.HeadInterval = longTTL, -1, kp, time.Minute
	})
	testutil.WaitFor(t, 10*time.Second, "c1 live", func() bool { return r.c.Stats().Live })
	seq := publish(t, js, events.RoleWorker, "w1", "j1", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	decisionsFor(t, js, seq)
	waitCaughtUp(t, js, r)
	if h := r.c.Stats().Head; h != nil {
		t.Fatalf("a head (decision %d) before the fake clock moved", h.Seq)
	}
	fc.Advance(time.Minute)
	testutil.WaitFor(t, 10*time.Second, "a head once the fake clock passed HeadInterval", func() bool {
		return r.c.Stats().Head != nil
	})
}
