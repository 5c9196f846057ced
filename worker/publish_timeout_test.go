package worker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

// One publish attempt of a lease's input is bounded by half the time left
// before the lease's local deadline, never below MinPublishTimeout nor
// above Options.PublishTimeout.
func TestPublishTimeout(t *testing.T) {
	now := time.Unix(1767225600, 0)
	for _, c := range []struct {
		name     string
		base     time.Duration
		deadline time.Time
		want     time.Duration
	}{
		{"no lease", 2 * time.Second, time.Time{}, 2 * time.Second},
		{"long lease", 2 * time.Second, now.Add(30 * time.Second), 2 * time.Second},
		{"just above the base", 2 * time.Second, now.Add(4*time.Second + time.Millisecond), 2 * time.Second},
		{"short lease: half of what is left", 2 * time.Second, now.Add(400 * time.Millisecond), 200 * time.Millisecond},
		{"nearly over: the floor", 2 * time.Second, now.Add(150 * time.Millisecond), MinPublishTimeout},
		{"past the deadline: the floor", 2 * time.Second, now.Add(-time.Second), MinPublishTimeout},
		{"a base below the floor wins", 50 * time.Millisecond, now.Add(400 * time.Millisecond), 50 * time.Millisecond},
	} {
		if got := publishTimeout(c.base, c.deadline, now); got != c.want {
			t.Errorf("%s: publishTimeout(%v, now%+v) = %v, want %v", c.name, c.base, c.deadline.Sub(now), got, c.want)
		}
	}
}

// The inputs of a lease carry its local deadline to the publisher: its
// operations, and its renewals (the deadline as it was when the renewal was
// decided).
func TestLeaseInputsCarryTheirDeadline(t *testing.T) {
	e := newEnv(t)
	w := e.worker("w1")
	ctx := context.Background()
	renewed := make(chan time.Time, 1)
	// The renew loop may call the hook before acquireEventually has
	// returned the lease to this goroutine: hand it over atomically.
	var held atomic.Pointer[Lease]
	l := acquireEventually(t, w, "j1", WithLeaseDuration(3*time.Second), withBeforeRenew(func() {
		if l := held.Load(); l != nil {
			select {
			case renewed <- l.Expires():
			default:
			}
		}
	}))
	held.Store(l)
	if p := l.input(&events.Input{Job: "j1", Verb: events.VerbProgress}); !p.deadline.Equal(l.Expires()) {
		t.Fatalf("progress input: deadline %v, want the lease's %v", p.deadline, l.Expires())
	}
	var before time.Time
	select {
	case before = <-renewed:
	case <-time.After(5 * time.Second):
		t.Fatal("no automatic renewal")
	}
	testutil.WaitFor(t, 5*time.Second, "the renewal's verdict", func() bool { return l.Expires().After(before) })
	l.renewMu.Lock()
	got := l.req.deadline
	l.renewMu.Unlock()
	if !got.Equal(before) {
		t.Fatalf("renewal handed over with deadline %v, want the lease's %v at the time", got, before)
	}
	if err := l.Complete(ctx, events.OutcomeSuccess, ""); err != nil {
		t.Fatal(err)
	}
}

// An offer's ACK and decline carry its ACK deadline on the local clock (the
// time the offer was read plus what was left of the ACK window), which
// bounds their publish attempts as a lease's deadline does.
func TestOfferInputsCarryTheAckDeadline(t *testing.T) {
	e := newEnv(t)
	w := e.worker("w1")
	ctx := context.Background()
	for _, accept := range []bool{true, false} {
		job := "j-accept"
		if !accept {
			job = "j-decline"
		}
		t0 := time.Now()
		e.ops(job, events.Input{Verb: events.VerbOffer, Holder: "w1"})
		var o Offer
		select {
		case o = <-w.Offers():
		case <-time.After(5 * time.Second):
			t.Fatal("no offer")
		}
		t1 := time.Now()
		window := time.Duration(o.Decision.Job.AckDeadline - o.Decision.At)
		if window <= 0 {
			t.Fatalf("offer without an ACK window: %+v", o.Decision.Job)
		}
		if o.localDeadline.Before(t0.Add(window)) || o.localDeadline.After(t1.Add(window)) {
			t.Fatalf("local ACK deadline %v not within [%v, %v]", o.localDeadline, t0.Add(window), t1.Add(window))
		}
		var p *input
		if accept {
			l, err := o.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			p = o.ack
		} else {
			if err := o.Decline(ctx); err != nil {
				t.Fatal(err)
			}
			p = o.decl
		}
		if !p.deadline.Equal(o.localDeadline) {
			t.Errorf("accept=%v: input deadline %v, want the offer's %v", accept, p.deadline, o.localDeadline)
		}
	}
}
