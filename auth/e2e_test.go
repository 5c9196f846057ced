package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/worker"
)

// The whole protocol works under the generated configuration, with no
// permissions violation on any connection: a dispatcher offers, workers
// acquire, accept, renew (automatically and explicitly), report progress
// and complete through the SDK; the coordinator writes snapshots, and a
// restarted coordinator restores one and carries on.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		opts auth.Options
	}{
		{"passwords", auth.Options{}},
		{"nkeys", auth.Options{NKeys: true}},
		{"tls", auth.Options{TLS: true, TLSVerify: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			endToEnd(t, mode.opts)
		})
	}
}

func endToEnd(t *testing.T, opts auth.Options) {
	e := newEnv(t, opts)
	ctx := context.Background()
	w1c := connect(t, e.b, e.url, "w1")
	w1, err := worker.Connect(w1c.nc, "w1", worker.WithErrorHandler(func(err error) { sdkError(t, "w1", err) }))
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	// A lease of 3 s renewed every 0.9 s: with 900 ms (every 270 ms), on
	// two cores loaded by another suite, a renewal's verdict came after
	// the lease's local deadline.
	l, err := w1.Acquire(ctx, "e2e-1", worker.WithLeaseDuration(3*time.Second), worker.WithRenewFraction(0.3))
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	first := l.Expires()
	// Automatic renewals keep the lease past its first expiry.
	time.Sleep(4 * time.Second)
	if l.Context().Err() != nil {
		t.Fatalf("lease lost: %v", context.Cause(l.Context()))
	}
	if !l.Expires().After(first) {
		t.Fatalf("lease not renewed: expires %v, first %v", l.Expires(), first)
	}
	if err := l.Progress(ctx, 50); err != nil {
		t.Fatalf("progress: %v", err)
	}
	if err := l.Complete(ctx, events.OutcomeSuccess, "done"); err != nil {
		t.Fatalf("complete: %v", err)
	}

	// A dispatcher offers a job to w2, which accepts it.
	dc := connect(t, e.b, e.url, "disp")
	d, err := ops.New(dc.nc, "disp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	w2c := connect(t, e.b, e.url, "w2")
	w2, err := worker.Connect(w2c.nc, "w2", worker.WithErrorHandler(func(err error) { sdkError(t, "w2", err) }))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if _, err := d.Offer(ctx, "e2e-2", "w2", 60000, 0); err != nil {
		t.Fatalf("offer: %v", err)
	}
	var o worker.Offer
	select {
	case o = <-w2.Offers():
	case <-time.After(10 * time.Second):
		t.Fatal("w2: no offer")
	}
	l2, err := o.Accept(ctx)
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	e.caughtUp(t)

	// Restart: the new coordinator restores the snapshot (object store read
	// under the coordinator's permissions) and goes live.
	testutil.WaitFor(t, 10*time.Second, "a snapshot", func() bool { return e.c.Stats().SnapshotSeq > 0 })
	e.stop()
	e.startCoordinator(t, coordinator.Config{SnapshotEvery: 3, SnapshotInterval: 50 * time.Millisecond})
	if e.c.Stats().SnapshotSeq == 0 {
		t.Errorf("restarted coordinator did not restore the snapshot")
	}
	l3, err := w1.Acquire(ctx, "e2e-3", worker.WithLeaseDuration(time.Minute))
	if err != nil {
		t.Fatalf("acquire after restart: %v", err)
	}
	if err := l3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	e.caughtUp(t)
	if err := w1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
	// noViolations flushes each connection: no wait for a late -ERR.
	for who, c := range map[string]*client{"coordinator": e.coord, "w1": w1c, "w2": w2c, "disp": dc} {
		c.noViolations(t, who)
	}
}

// A standby coordinator with its own user takes over when the live one
// stops, and appends ticks (expiries) under its own identity.
func TestStandbyCoordinator(t *testing.T) {
	t.Parallel()
	e := newEnv(t, auth.Options{Actors: append([]auth.Actor{{Name: "coord2", Role: auth.RoleCoordinator}}, actors...)})
	c2c := connect(t, e.b, e.url, "coord2")
	c2, err := coordinator.New(coordinator.Config{ID: "coord2", Conn: c2c.nc, LeaderTTL: 600 * time.Millisecond, SnapshotEvery: 2, SnapshotInterval: 50 * time.Millisecond,
		Genesis: coordinator.GenesisAdmin})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c2.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("coord2: %v", err)
		}
	}()
	w1 := connect(t, e.b, e.url, "w1")
	if _, err := w1.js.Publish(ctx, "tenure.in.worker.w1.sb-1.acquire", []byte(`{"v":1,"lease_ms":60000}`)); err != nil {
		t.Fatal(err)
	}
	e.caughtUp(t)
	e.stop()
	testutil.WaitFor(t, 20*time.Second, "coord2 live", func() bool { return c2.Stats().Live })
	if _, err := w1.js.Publish(ctx, "tenure.in.worker.w1.sb-2.acquire", []byte(`{"v":1,"lease_ms":300}`)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, "coord2's tick", func() bool {
		in, err := c2c.js.Stream(ctx, "TENURE_IN")
		if err != nil {
			return false
		}
		m, err := in.GetLastMsgForSubject(ctx, "tenure.in.coord.coord2._.tick")
		return err == nil && m != nil
	})
	c2c.noViolations(t, "coord2")
	e.coord.noViolations(t, "coord")
}
