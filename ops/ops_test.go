package ops_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/testutil"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// startTenure runs a real embedded server and coordinator for the test.
func startTenure(t *testing.T) *ops.Client {
	t.Helper()
	srv := testutil.StartServer(t)
	nc, _ := testutil.Connect(t, srv.ClientURL())
	c, err := coordinator.New(coordinator.Config{ID: "c1", Conn: nc, LeaderTTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); !c.Stats().Live; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("coordinator not live")
		}
	}
	onc, _ := testutil.Connect(t, srv.ClientURL())
	cl, err := ops.New(onc, "disp")
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func TestOperatorVerdicts(t *testing.T) {
	c := startTenure(t)
	ctx := context.Background()

	d, err := c.Offer(ctx, "j1", "w1", 5000, 1000)
	if err != nil || d.Kind != events.KindOffered || d.Job.Holder != "w1" || d.Job.AckDeadline == 0 {
		t.Fatalf("offer: %v %+v", err, d)
	}
	// A second offer while the first is pending is refused, with the reason.
	_, err = c.Offer(ctx, "j1", "w2", 0, 0)
	var rej *ops.RejectedError
	if !errors.As(err, &rej) || !errors.Is(err, ops.ErrRejected) || rej.Decision.Reason != events.ReasonLeaseHeld {
		t.Fatalf("second offer: %v", err)
	}
	// Cancelling the pending offer withdraws it.
	d, err = c.Cancel(ctx, "j1", "", 0, "changed my mind")
	if err != nil || d.Kind != events.KindCancelRequested || d.Reason != events.ReasonOfferWithdrawn || d.Job.State != events.StateCancelled {
		t.Fatalf("cancel: %v %+v", err, d)
	}
	// Nothing to resolve on a cancelled job.
	if _, err = c.Revoke(ctx, "j1", ""); !errors.As(err, &rej) || rej.Decision.Reason != events.ReasonNothingToResolve {
		t.Fatalf("revoke: %v", err)
	}
	// A new policy is in force for later inputs.
	p := events.DefaultPolicy()
	p.MaxLease = 10 * int64(time.Second)
	p.DefaultLease = 5 * int64(time.Second)
	if d, err = c.SetPolicy(ctx, p); err != nil || d.Kind != events.KindPolicySet || d.Policy == nil || d.Policy.MaxLease != p.MaxLease {
		t.Fatalf("policy: %v %+v", err, d)
	}
	if _, err = c.Offer(ctx, "j2", "w1", 20000, 0); !errors.As(err, &rej) || rej.Decision.Reason != events.ReasonDurationOutOfPolicy {
		t.Fatalf("offer over the new max: %v", err)
	}
}

// Without a coordinator no verdict comes: ErrNoVerdict, not a hang.
func TestNoVerdictWithoutCoordinator(t *testing.T) {
	srv := testutil.StartServer(t)
	nc, _ := testutil.Connect(t, srv.ClientURL())
	// The streams exist (as after a coordinator ran once), nobody folds.
	c0, err := coordinator.New(coordinator.Config{ID: "c0", Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c0.Run(ctx) }()
	for !c0.Stats().Live {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	c, err := ops.New(nc, "disp")
	if err != nil {
		t.Fatal(err)
	}
	tctx, tcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer tcancel()
	if _, err := c.Offer(tctx, "j1", "w1", 0, 0); !errors.Is(err, ops.ErrNoVerdict) {
		t.Fatalf("offer with no coordinator: %v", err)
	}
}
