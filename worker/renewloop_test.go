package worker

// The renew loop, in testing/synctest bubbles, against an in-memory
// coordinator (fakeCoord) in place of JetStream.
//
// Why not the embedded nats-server, as the other SDK tests use: a bubble's
// clock moves only when every goroutine in it is durably blocked, and a
// goroutine waiting on a socket (the server's, the client's reader) never
// is, so a bubble holding the server never lets time pass and synctest.Wait
// never returns; a server outside the bubble is outside its clock, so its
// stored timestamps and the client's timeouts would not be the bubble's.
// The renew loop's contract with the rest of the SDK is one small seam, the
// publisher (PublishMsg), behind which the fake answers as a coordinator
// would: it stores the input, gives a PubAck, and hands the verdict to the
// worker's decision dispatch, all in the bubble. The loop's timing is then
// exact (the bubble's clock is deterministic), so the tests assert the
// instants of renewals and of the loss of authority, not "soon enough". The
// wire and the real coordinator are covered by the tests against the
// embedded server (renew_test.go, worker_test.go).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/streams"
)

// fakeCoord is an in-memory coordinator behind the worker's publisher: it
// grants acquires for dur, renews (or refuses to answer, or fails the
// publish) as its mode says, answers pulls with capacity_set (or not, in
// mode noVerdicts), and records the renewals and pulls it was sent.
type fakeCoord struct {
	t   testing.TB
	w   *Worker
	clk clock.Clock // its own clock: the "stored timestamp" of each input
	dur time.Duration

	mu     sync.Mutex
	seq    uint64
	mode   fakeMode
	renews []renewSeen
	pulls  []pullSeen
	// Run's offers (a test injects them with offerJob): holdAcks answers
	// no ACK; loseZeroPulls is how many of the next pulls of 0 slots get
	// no verdict; log is every ACK, release and pull in order ("pull 0
	// lost", "release j2").
	holdAcks      bool
	loseZeroPulls int
	log           []string
}

// pullSeen is one pull the fake coordinator was sent.
type pullSeen struct {
	at    time.Time // on the fake's clock
	queue string
	slots uint64
	ttl   time.Duration
}

type fakeMode int

const (
	answer       fakeMode = iota // store and answer every input
	failPub                      // fail every publish (a non-retryable error)
	noVerdicts                   // store renewals, answer none of them
	rejectPulls                  // refuse every pull (rejected/bad_value)
	unknownPulls                 // refuse every pull as a log below revision 4 does (rejected/bad_subject, no verb)
)

type renewSeen struct {
	at       time.Time // on the fake's clock
	renewSeq uint64
}

var errPub = errors.New("fake publish failure")

func (f *fakeCoord) setMode(m fakeMode) { f.mu.Lock(); f.mode = m; f.mu.Unlock() }

func (f *fakeCoord) seen() []renewSeen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]renewSeen(nil), f.renews...)
}

// Follow is never called: fakeWorker starts no decision reader.
func (f *fakeCoord) Follow(context.Context, follow.Config, func(follow.Msg)) Follower {
	panic("fakeCoord.Follow")
}

func (f *fakeCoord) Publish(_ context.Context, msg *nats.Msg, _, _ string) (*jetstream.PubAck, error) {
	var in events.Input
	if err := events.DecodeInput(msg.Subject, msg.Data, &in); err != nil {
		f.t.Errorf("fake coordinator: undecodable input %s: %v", msg.Subject, err)
		return nil, err
	}
	now := f.clk.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if in.Verb == events.VerbRenew {
		if f.mode == failPub {
			f.renews = append(f.renews, renewSeen{now, in.RenewSeq})
			return nil, errPub
		}
	}
	f.seq++
	d := events.Decision{
		Cause: f.seq, Of: 1, At: now.UnixNano(),
		Role: events.RoleWorker, Actor: in.Actor, Verb: in.Verb, Addressee: in.Actor,
		Job: events.Job{
			ID: in.Job, LeaseID: "lease-1", Generation: 1, Holder: in.Actor, State: events.StateActive,
			Duration: int64(f.dur), ExpiresAt: now.Add(f.dur).UnixNano(), RenewSeq: in.RenewSeq,
		},
	}
	switch in.Verb {
	case events.VerbPull:
		f.pulls = append(f.pulls, pullSeen{now, in.Queue, in.Slots, time.Duration(in.TTLMS) * time.Millisecond})
		if in.Slots == 0 && f.loseZeroPulls > 0 {
			f.loseZeroPulls--
			f.log = append(f.log, "pull 0 lost")
			return &jetstream.PubAck{Stream: "TENURE_IN", Sequence: f.seq}, nil
		}
		f.log = append(f.log, fmt.Sprintf("pull %d", in.Slots))
		if f.mode == noVerdicts {
			return &jetstream.PubAck{Stream: "TENURE_IN", Sequence: f.seq}, nil
		}
		d.Kind, d.Reason, d.Job = events.KindCapacitySet, events.ReasonOk, events.Job{ID: events.NoJob}
		d.Capacity = &events.Capacity{Queue: in.Queue, Slots: in.Slots, Until: now.Add(time.Duration(in.TTLMS) * time.Millisecond).UnixNano()}
		if f.mode == rejectPulls {
			d.Kind, d.Reason, d.Capacity = events.KindRejected, events.ReasonBadValue, nil
		}
		if f.mode == unknownPulls {
			d.Kind, d.Reason, d.Capacity, d.Verb = events.KindRejected, events.ReasonBadSubject, nil, events.VerbNone
		}
	case events.VerbAck:
		f.log = append(f.log, "ack "+in.Job)
		if f.holdAcks {
			return &jetstream.PubAck{Stream: "TENURE_IN", Sequence: f.seq}, nil
		}
		d.Kind, d.Job.LeaseID, d.Job.Queue = events.KindAcked, in.LeaseID, "q"
	case events.VerbRelease:
		f.log = append(f.log, "release "+in.Job)
		d.Kind, d.Job.LeaseID, d.Job.State, d.Job.Queue = events.KindReleased, in.LeaseID, events.StateQueued, "q"
	case events.VerbAcquire:
		d.Kind = events.KindGranted
	case events.VerbRenew:
		f.renews = append(f.renews, renewSeen{now, in.RenewSeq})
		if f.mode == noVerdicts {
			return &jetstream.PubAck{Stream: "TENURE_IN", Sequence: f.seq}, nil
		}
		d.Kind, d.Job.RenewAt = events.KindRenewed, now.UnixNano()
	default:
		f.t.Errorf("fake coordinator: unexpected verb %v", in.Verb)
	}
	go f.w.dispatch(d) // the verdict arrives on the decision stream, after the PubAck
	return &jetstream.PubAck{Stream: "TENURE_IN", Sequence: f.seq}, nil
}

// offerJob delivers the queue's offer of job on queue q to the worker,
// with an ACK window of ack.
func (f *fakeCoord) offerJob(job string, ack time.Duration) {
	now := f.clk.Now()
	f.mu.Lock()
	f.seq++
	seq := f.seq
	f.mu.Unlock()
	f.w.dispatch(events.Decision{
		Cause: seq, Of: 1, At: now.UnixNano(), Kind: events.KindAssigned,
		Role: events.RoleWorker, Actor: f.w.id, Addressee: f.w.id,
		Job: events.Job{
			ID: job, LeaseID: "lease-" + job, Generation: 1, Holder: f.w.id, State: events.StateOffered, Queue: "q",
			Duration: int64(f.dur), AckDeadline: now.Add(ack).UnixNano(),
		},
	})
}

func (f *fakeCoord) logged() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.log...)
}

// fakeWorker is a Worker publishing to a fakeCoord granting leases of dur,
// with the options opts (a clock among them, or none: the real clock,
// which is the bubble's). Close it before the bubble ends.
func fakeWorker(t *testing.T, dur time.Duration, opts ...Option) (*Worker, *fakeCoord) {
	t.Helper()
	o := Options{
		StreamPrefix: DefaultStreamPrefix, VerdictTimeout: DefaultVerdictTimeout,
		PublishTimeout: DefaultPublishTimeout, OfferBuffer: DefaultOfferBuffer,
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	f := &fakeCoord{t: t, dur: dur, clk: clock.OrReal(o.Clock)}
	w := newWorker("w1", o, f, streams.Topology{Prefix: o.StreamPrefix}.Partitions(0))
	f.w = w
	w.run()
	return w, f
}

// TestRenewLoopAtFraction: automatic renewals leave every RenewFraction of
// the lease duration, each with the next renew_seq, and each accepted
// renewal moves the local deadline to its publish time plus the duration.
func TestRenewLoopAtFraction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, f := fakeWorker(t, 4*time.Second)
		defer w.Close()
		start := time.Now()
		l, err := w.Acquire(context.Background(), "job-1", WithLeaseDuration(4*time.Second), WithRenewFraction(0.25))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := l.Expires(), start.Add(4*time.Second); !got.Equal(want) {
			t.Fatalf("Expires = %v, want %v", got, want)
		}
		time.Sleep(5*time.Second + 500*time.Millisecond)
		synctest.Wait()
		got := f.seen()
		if len(got) != 5 {
			t.Fatalf("%d renewals in 5.5 s of a 4 s lease renewed every 1 s, want 5: %v", len(got), got)
		}
		for i, r := range got {
			if want := start.Add(time.Duration(i+1) * time.Second); !r.at.Equal(want) || r.renewSeq != uint64(i+1) {
				t.Errorf("renewal %d: renew_seq %d at +%v, want renew_seq %d at +%v", i, r.renewSeq, r.at.Sub(start), i+1, want.Sub(start))
			}
		}
		if got, want := l.Expires(), start.Add(5*time.Second+4*time.Second); !got.Equal(want) {
			t.Errorf("Expires = +%v, want +%v (the last renewal's publish time plus the duration)", got.Sub(start), want.Sub(start))
		}
		if err := l.Context().Err(); err != nil {
			t.Fatalf("lease context done while renewed: %v", context.Cause(l.Context()))
		}
	})
}

// TestRenewLoopBackoffOnFailure: a renewal whose verdict is not learned (a
// failed publish) is retried after a quarter of the interval, and never
// later than half of what is left before the local deadline, with the same
// renew_seq; when the deadline passes with the verdict still unknown, the
// lease's context is cancelled at that instant, with a cause matching
// ErrExpired and ErrNoVerdict, and the renewal errors reach
// RenewErrorHandler.
func TestRenewLoopBackoffOnFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, f := fakeWorker(t, 3*time.Second)
		defer w.Close()
		var mu sync.Mutex
		var handled []error
		start := time.Now()
		l, err := w.Acquire(context.Background(), "job-1", WithLeaseDuration(3*time.Second),
			WithRenewErrorHandler(func(_ *Lease, err error) { mu.Lock(); handled = append(handled, err); mu.Unlock() }))
		if err != nil {
			t.Fatal(err)
		}
		f.setMode(failPub)
		lostAt := make(chan time.Time, 1)
		go func() { <-l.Context().Done(); lostAt <- time.Now() }()
		at := <-lostAt
		if want := start.Add(3 * time.Second); !at.Equal(want) || !l.Expires().Equal(want) {
			t.Fatalf("authority lost at +%v (Expires +%v), want at the local deadline +3s", at.Sub(start), l.Expires().Sub(start))
		}
		cause := context.Cause(l.Context())
		if !errors.Is(cause, ErrExpired) || !errors.Is(cause, ErrNoVerdict) || !errors.Is(cause, ErrLostAuthority) {
			t.Fatalf("cause %v, want ErrExpired, ErrNoVerdict and ErrLostAuthority", cause)
		}
		synctest.Wait()
		// Interval 1 s (a third of 3 s); then retries every 250 ms (a
		// quarter), until half the time left is shorter: 2.75 s (0.25 s
		// left, next 125 ms), 2.875 s, ... halving towards the deadline.
		want := []time.Duration{1000, 1250, 1500, 1750, 2000, 2250, 2500, 2750, 2875}
		got := f.seen()
		if len(got) < len(want) {
			t.Fatalf("%d renewal attempts, want at least %d: %v", len(got), len(want), got)
		}
		for i, r := range got {
			if r.renewSeq != 1 {
				t.Errorf("attempt %d: renew_seq %d, want 1 (the same renewal, resent)", i, r.renewSeq)
			}
			if d := r.at.Sub(start); i < len(want) && d != want[i]*time.Millisecond {
				t.Errorf("attempt %d at +%v, want +%v", i, d, want[i]*time.Millisecond)
			}
			if !r.at.Before(start.Add(3 * time.Second)) {
				t.Errorf("attempt %d at +%v: at or after the local deadline", i, r.at.Sub(start))
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(handled) == 0 {
			t.Fatal("no renewal error reached RenewErrorHandler")
		}
		for _, err := range handled {
			if !errors.Is(err, ErrNoVerdict) || !errors.Is(err, errPub) {
				t.Fatalf("renewal error %v, want ErrNoVerdict wrapping the publish failure", err)
			}
		}
	})
}

// TestRenewLoopDeadlineWhileAwaiting: a renewal stored but never answered
// leaves the loop waiting for its verdict (up to VerdictTimeout, longer
// than the lease); the local deadline still cancels the lease's context at
// its instant, with ErrExpired and ErrNoVerdict, and the loop exits.
func TestRenewLoopDeadlineWhileAwaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, f := fakeWorker(t, 3*time.Second)
		defer w.Close()
		start := time.Now()
		l, err := w.Acquire(context.Background(), "job-1", WithLeaseDuration(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		f.setMode(noVerdicts)
		<-l.Context().Done()
		if got := time.Since(start); got != 3*time.Second {
			t.Fatalf("authority lost at +%v, want at the local deadline +3s", got)
		}
		cause := context.Cause(l.Context())
		if !errors.Is(cause, ErrExpired) || !errors.Is(cause, ErrNoVerdict) || !errors.Is(cause, ErrLostAuthority) {
			t.Fatalf("cause %v, want ErrExpired, ErrNoVerdict and ErrLostAuthority", cause)
		}
		if got := f.seen(); len(got) != 1 || !got[0].at.Equal(start.Add(time.Second)) {
			t.Fatalf("renewals %v, want one at +1s (its verdict awaited since)", got)
		}
		// The loop exits once the renewal in flight gives up (VerdictTimeout).
		select {
		case <-l.loopDone:
		case <-time.After(DefaultVerdictTimeout + time.Second):
			t.Fatal("renew loop still running after its renewal's verdict timeout")
		}
	})
}

// TestRenewLoopInjectedClock: with WithClock, the renew loop and the local
// deadline follow that clock, not package time's. In the bubble the real
// clock moves when the test sleeps; the fake moves only by Advance.
func TestRenewLoopInjectedClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		w, f := fakeWorker(t, 3*time.Second, WithClock(fc))
		defer w.Close()
		start := fc.Now()
		l, err := w.Acquire(context.Background(), "job-1", WithLeaseDuration(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := l.Expires(), start.Add(3*time.Second); !got.Equal(want) {
			t.Fatalf("Expires = %v, want %v (on the injected clock)", got, want)
		}
		time.Sleep(time.Minute) // package time's clock: nothing is due on it
		synctest.Wait()
		if got := f.seen(); len(got) != 0 || l.Context().Err() != nil {
			t.Fatalf("after a minute of package time's clock: renewals %v, context %v; want none, alive", got, context.Cause(l.Context()))
		}
		fc.Advance(time.Second)
		synctest.Wait()
		if got := f.seen(); len(got) != 1 || !got[0].at.Equal(start.Add(time.Second)) {
			t.Fatalf("after Advance(1s): renewals %v, want one at %v", got, start.Add(time.Second))
		}
		if got, want := l.Expires(), start.Add(4*time.Second); !got.Equal(want) {
			t.Fatalf("Expires = %v, want %v", got, want)
		}
		// No more renewals answered: the deadline passes on the fake clock.
		f.setMode(noVerdicts)
		fc.Advance(time.Second)
		synctest.Wait()
		if l.Context().Err() != nil {
			t.Fatalf("context done before the local deadline: %v", context.Cause(l.Context()))
		}
		fc.Advance(2 * time.Second)
		synctest.Wait()
		if cause := context.Cause(l.Context()); !errors.Is(cause, ErrExpired) || !errors.Is(cause, ErrNoVerdict) {
			t.Fatalf("cause %v at the local deadline, want ErrExpired and ErrNoVerdict", cause)
		}
	})
}

func (f *fakeCoord) pullsSeen() []pullSeen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]pullSeen(nil), f.pulls...)
}

func (p pullSeen) String() string {
	return fmt.Sprintf("%s:%d(ttl %v)@%s", p.queue, p.slots, p.ttl, p.at.Format("15:04:05.000"))
}

func (r renewSeen) String() string {
	return fmt.Sprintf("#%d@%s", r.renewSeq, r.at.Format("15:04:05.000"))
}
