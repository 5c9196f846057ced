package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// (a) An operator's cancel request cancels the lease context at once (well
// within one renewal interval), with cause ErrCancelRequested, and stops the
// renewals.
func TestAuthorityLossCancelRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("w1")
	ctx := context.Background()
	const dur = 3 * time.Second
	l, err := w.Acquire(ctx, "j1", WithLeaseDuration(dur))
	if err != nil {
		t.Fatal(err)
	}
	interval := time.Duration(float64(dur) * DefaultRenewFraction)
	start := time.Now()
	e.ops("j1", events.Input{Verb: events.VerbCancel, Text: "operator says stop"})
	waitDone(t, l.Context().Done(), interval, "the lease context to be cancelled within one renewal interval")
	t.Logf("context cancelled %v after the cancel request", time.Since(start))
	waitDone(t, l.CancelRequested(), time.Second, "CancelRequested")
	cause := context.Cause(l.Context())
	var ve *VerdictError
	if !errors.Is(cause, ErrCancelRequested) || !errors.As(cause, &ve) || ve.Kind != events.KindCancelRequested {
		t.Fatalf("cause %v: want the cancel_requested decision (ErrCancelRequested)", cause)
	}
	waitDone(t, l.loopDone, 5*time.Second, "the renew loop to exit")
}

// (a) With the coordinator gone no verdict comes back: the local
// conservative deadline cancels the context (ErrExpired, ErrNoVerdict), and
// that deadline is never later than the coordinator's expiry.
func TestAuthorityLossNoVerdict(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("w1", WithVerdictTimeout(2*time.Second))
	const dur = 600 * time.Millisecond
	renewErrs := make(chan error, 16)
	l, err := w.Acquire(context.Background(), "j1", WithLeaseDuration(dur),
		WithRenewErrorHandler(func(_ *Lease, err error) {
			select {
			case renewErrs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	// One accepted renewal first.
	granted := l.Expires()
	testutil.WaitFor(t, 5*time.Second, "an accepted renewal", func() bool { return l.Expires().After(granted) })
	e.coord.stop()
	waitDone(t, l.Context().Done(), 5*time.Second, "the local deadline to cancel the context")
	doneAt := time.Now()
	cause := context.Cause(l.Context())
	if !errors.Is(cause, ErrExpired) || !errors.Is(cause, ErrNoVerdict) {
		t.Fatalf("cause %v: want ErrExpired and ErrNoVerdict", cause)
	}
	local := l.Expires()
	if doneAt.Before(local) {
		t.Fatalf("context cancelled at %v, before the local deadline %v", doneAt, local)
	}
	// How soon after the deadline it was cancelled is the timer's and the
	// OS scheduler's: TestRenewLoopInjectedClock holds the deadline's timer
	// to the instant, on a fake clock in a bubble (here, on two loaded
	// cores, a bound of one renewal interval failed: 701 ms late).
	t.Logf("context cancelled %v after the local deadline", doneAt.Sub(local))
	// The coordinator's view: the last accepted renewal's expires_at.
	var last events.Decision
	for _, d := range e.decisions("j1") {
		if d.Kind == events.KindRenewed || d.Kind == events.KindGranted {
			last = d
		}
	}
	server := time.Unix(0, last.Job.ExpiresAt)
	if local.After(server) {
		t.Fatalf("local deadline %v is after the coordinator's expiry %v", local, server)
	}
	t.Logf("local deadline %v before the coordinator's expiry", server.Sub(local))
	waitDone(t, l.loopDone, 10*time.Second, "the renew loop to exit")
	select {
	case err := <-renewErrs:
		if !errors.Is(err, ErrNoVerdict) {
			t.Fatalf("renew error %v: want ErrNoVerdict", err)
		}
	default:
		t.Fatal("the unanswered renewal was not reported")
	}
}

// (a) An operator's revocation (resolve revoke) cancels the context with a
// verdict matching ErrLostAuthority.
func TestAuthorityLossRevoked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("w1")
	l, err := w.Acquire(context.Background(), "j1", WithLeaseDuration(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e.ops("j1", events.Input{Verb: events.VerbResolve, Action: events.ActionRevoke, Text: "drain node"})
	waitDone(t, l.Context().Done(), time.Second, "the lease context to be cancelled")
	cause := context.Cause(l.Context())
	var ve *VerdictError
	if !errors.Is(cause, ErrLostAuthority) || !errors.As(cause, &ve) || ve.Reason != events.ReasonLeaseRevoked {
		t.Fatalf("cause %v: want lease_revoked (ErrLostAuthority)", cause)
	}
	waitDone(t, l.loopDone, 5*time.Second, "the renew loop to exit")
}

// (b) Seed 004: worker A is paused between its authority check and its
// renewal; its lease expires and B is granted generation 2. A's context was
// cancelled by its local deadline before B could be granted, and when A
// resumes its stale renewal is refused with lost authority (stale
// generation), without touching B's lease; a Fence refuses A's token.
func TestPausedWorkerLosesAuthority(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wa, wb := e.worker("wa"), e.worker("wb")
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	renewErrs := make(chan error, 4)
	la, err := wa.Acquire(context.Background(), "sched", WithLeaseDuration(300*time.Millisecond),
		withBeforeRenew(func() { once.Do(func() { close(paused); <-resume }) }),
		WithRenewErrorHandler(func(_ *Lease, err error) { renewErrs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	var fence Fence
	if err := fence.Admit(la.Token()); err != nil {
		t.Fatal(err)
	}
	waitDone(t, paused, 5*time.Second, "A's renew loop to pause")
	waitDone(t, la.Context().Done(), 5*time.Second, "A's local deadline")
	if cause := context.Cause(la.Context()); !errors.Is(cause, ErrExpired) {
		t.Fatalf("A's cause %v: want ErrExpired", cause)
	}

	lb := acquireEventually(t, wb, "sched", WithLeaseDuration(5*time.Second))
	if lb.Token().Generation != 2 || la.Token().Generation != 1 {
		t.Fatalf("generations A %d, B %d", la.Token().Generation, lb.Token().Generation)
	}
	if la.Context().Err() == nil {
		t.Fatal("A still believes it holds the lease while B holds it")
	}
	close(resume)
	var err2 error
	select {
	case err2 = <-renewErrs:
	case <-time.After(10 * time.Second):
		t.Fatal("A's resumed renewal got no verdict")
	}
	var ve *VerdictError
	if !errors.Is(err2, ErrLostAuthority) || !errors.Is(err2, ErrStaleGeneration) || !errors.As(err2, &ve) {
		t.Fatalf("A's renewal: %v: want lost authority, stale generation", err2)
	}
	if ve.Kind != events.KindLostAuthority || ve.Decision.Job.Generation != 2 || ve.Decision.Job.Holder != "wb" {
		t.Fatalf("verdict %s/%s, job generation %d holder %s", ve.Kind, ve.Reason, ve.Decision.Job.Generation, ve.Decision.Job.Holder)
	}
	waitDone(t, la.loopDone, 5*time.Second, "A's renew loop to exit")

	// B is untouched: still live, and no renewal of generation 1 was
	// accepted after B's grant.
	if lb.Context().Err() != nil {
		t.Fatalf("B lost its lease: %v", context.Cause(lb.Context()))
	}
	granted := false
	for _, d := range e.decisions("sched") {
		if d.Kind == events.KindGranted && d.Job.Generation == 2 {
			granted = true
		}
		if granted && d.Kind == events.KindRenewed && d.Actor == "wa" {
			t.Fatalf("a renewal of A was accepted after B's grant: %+v", d)
		}
	}
	// The guarded resource refuses A's token once it has seen B's.
	if err := fence.Admit(lb.Token()); err != nil {
		t.Fatal(err)
	}
	if err := fence.Admit(la.Token()); !errors.Is(err, ErrStaleGeneration) {
		t.Fatalf("fence admitted A's stale token: %v", err)
	}
}

// (c) Two workers acquire the same job at once: exactly one is granted, the
// other gets ErrLeaseHeld naming the winner.
func TestAcquireCompetition(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ws := []*Worker{e.worker("w1"), e.worker("w2")}
	for round := range 3 {
		job := fmt.Sprintf("job%d", round)
		var wg sync.WaitGroup
		leases := make([]*Lease, len(ws))
		errs := make([]error, len(ws))
		start := make(chan struct{})
		for i, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				leases[i], errs[i] = w.Acquire(context.Background(), job, WithLeaseDuration(5*time.Second))
			}()
		}
		close(start)
		wg.Wait()
		winner, loser := 0, 1
		if errs[0] != nil {
			winner, loser = 1, 0
		}
		if errs[winner] != nil || leases[winner] == nil {
			t.Fatalf("%s: no winner: %v, %v", job, errs[0], errs[1])
		}
		var ve *VerdictError
		if !errors.Is(errs[loser], ErrLeaseHeld) || !errors.Is(errs[loser], ErrRejected) || !errors.As(errs[loser], &ve) {
			t.Fatalf("%s: loser: %v: want ErrLeaseHeld", job, errs[loser])
		}
		if ve.Decision.Job.Holder != ws[winner].ID() || ve.Decision.Job.Generation != leases[winner].Token().Generation {
			t.Fatalf("%s: lease_held names %s gen %d, winner %s gen %d", job, ve.Decision.Job.Holder,
				ve.Decision.Job.Generation, ws[winner].ID(), leases[winner].Token().Generation)
		}
		if err := leases[winner].Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if cause := context.Cause(leases[winner].Context()); !errors.Is(cause, ErrLeaseEnded) {
			t.Fatalf("cause after release: %v", cause)
		}
	}
}

// (d) Cancellation reaches the worker and is reconciled: cancel request,
// cancel ACK, terminal result CANCELLED.
func TestCancellationReconciles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("w1")
	ctx := context.Background()
	l, err := w.Acquire(ctx, "j1", WithLeaseDuration(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Progress(ctx, 10); err != nil {
		t.Fatal(err)
	}
	e.ops("j1", events.Input{Verb: events.VerbCancel})
	waitDone(t, l.CancelRequested(), 5*time.Second, "CancelRequested")
	<-l.Context().Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrCancelRequested) {
		t.Fatalf("cause %v: want ErrCancelRequested", cause)
	}
	// Work claims after the request are refused.
	if err := l.Progress(ctx, 20); !errors.Is(err, ErrCancelRequested) || !errors.Is(err, ErrLate) {
		t.Fatalf("progress after cancel: %v", err)
	}
	if err := l.Complete(ctx, events.OutcomeSuccess, ""); !errors.Is(err, ErrCancelRequested) || !errors.Is(err, ErrRejected) {
		t.Fatalf("SUCCESS after cancel: %v", err)
	}
	if err := l.AckCancel(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, events.OutcomeCancelled, "stopped on request"); err != nil {
		t.Fatal(err)
	}
	waitDone(t, l.loopDone, 5*time.Second, "the renew loop to exit")
	var kinds []events.Kind
	for _, d := range e.decisions("j1") {
		kinds = append(kinds, d.Kind)
	}
	want := []events.Kind{events.KindGranted, events.KindProgressed, events.KindCancelRequested,
		events.KindLate, events.KindRejected, events.KindCancelAcked, events.KindCompleted}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("decisions %v, want %v", kinds, want)
	}
	last := e.decisions("j1")[len(want)-1]
	if last.Job.State != events.StateCancelled || last.Job.Result != events.OutcomeCancelled || !last.Job.CancelAck {
		t.Fatalf("final job %+v", last.Job)
	}
}

// (e) A retried publish (same Msg-Id) is stored once and judged once.
func TestRetriedPublishNotDoubleCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("w1")
	ctx := context.Background()
	l, err := w.Acquire(ctx, "j1", WithLeaseDuration(30*time.Second)) // no automatic renewal during the test
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.renewSeq++
	p := w.newInput(&events.Input{Job: "j1", Verb: events.VerbRenew, LeaseID: l.token.LeaseID,
		Generation: l.token.Generation, RenewSeq: l.renewSeq})
	l.mu.Unlock()
	seq1, err := w.publish(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	seq2, err := w.publish(ctx, p) // the retry after a lost PubAck
	if err != nil {
		t.Fatal(err)
	}
	if seq1 != seq2 {
		t.Fatalf("retry stored as a new input: %d, then %d", seq1, seq2)
	}
	d, err := w.await(ctx, seq1, events.VerbRenew, "j1")
	if err != nil || d.Kind != events.KindRenewed {
		t.Fatalf("verdict %s/%s, %v", d.Kind, d.Reason, err)
	}
	e.caughtUp()
	stored := 0
	for _, m := range e.readStream("TENURE_IN") {
		if m.header.Get("Nats-Msg-Id") == p.msgID {
			stored++
		}
	}
	verdicts := 0
	for _, d := range e.decisions("j1") {
		if d.Cause == seq1 {
			verdicts++
		}
	}
	if stored != 1 || verdicts != 1 {
		t.Fatalf("%d inputs stored, %d verdicts: want 1 and 1", stored, verdicts)
	}
	if want := "w1-"; p.msgID[:len(want)] != want || len(p.msgID) != len(want)+36 {
		t.Fatalf("Msg-Id %q is not namespaced <id>-<uuid>", p.msgID)
	}
}

// (f) Offer, Accept, Progress, Complete(SUCCESS); and a declined offer.
func TestOfferAcceptProgressComplete(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("w1")
	ctx := context.Background()
	e.ops("j1", events.Input{Verb: events.VerbOffer, Holder: "w1", LeaseMS: 2000})
	var o Offer
	select {
	case o = <-w.Offers():
	case <-time.After(5 * time.Second):
		t.Fatal("no offer")
	}
	if o.Job != "j1" || o.Generation != 1 || o.Duration != 2*time.Second {
		t.Fatalf("offer %+v", o)
	}
	l, err := o.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() != o.Token() || l.Token().String() != "j1/"+o.LeaseID+"/1" {
		t.Fatalf("token %s, offer %s", l.Token(), o.Token())
	}
	if tok, err := ParseFencingToken(l.Token().String()); err != nil || tok != l.Token() {
		t.Fatalf("parse %s: %v %v", l.Token(), tok, err)
	}
	for _, v := range []int{30, 60, 100} {
		if err := l.Progress(ctx, v); err != nil {
			t.Fatalf("progress %d: %v", v, err)
		}
	}
	if err := l.Complete(ctx, events.OutcomeSuccess, "all done"); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLeaseEnded) {
		t.Fatalf("cause after complete: %v", cause)
	}
	waitDone(t, l.loopDone, 5*time.Second, "the renew loop to exit")
	// Completing twice is reported, not hidden.
	if err := l.Complete(ctx, events.OutcomeSuccess, "all done"); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("second complete: %v", err)
	}
	ds := e.decisions("j1")
	final := ds[len(ds)-2]
	if final.Kind != events.KindCompleted || final.Job.ProgressSeq != 3 || final.Job.ProgressValue != 100 ||
		final.Job.State != events.StateCompleted {
		t.Fatalf("final %s %+v", final.Kind, final.Job)
	}

	e.ops("j2", events.Input{Verb: events.VerbOffer, Holder: "w1"})
	o2 := <-w.Offers()
	if err := o2.Decline(ctx); err != nil {
		t.Fatal(err)
	}
	if ds := e.decisions("j2"); ds[len(ds)-1].Job.AckState != events.AckDeclined {
		t.Fatalf("declined offer: %+v", ds[len(ds)-1].Job)
	}
	if _, err := o2.Accept(ctx); !errors.Is(err, ErrLostAuthority) {
		t.Fatalf("accept after decline: %v", err)
	}
}

// Close cancels every lease (ErrClosed), stops the goroutines the worker
// started and closes Offers; calls after Close fail with ErrClosed.
func TestClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("w1")
	ctx := context.Background()
	var ls []*Lease
	for _, job := range []string{"a", "b"} {
		l, err := w.Acquire(ctx, job, WithLeaseDuration(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		select {
		case <-l.loopDone:
		default:
			t.Fatal("renew loop still running after Close")
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, ErrClosed) {
			t.Fatalf("cause %v", cause)
		}
	}
	if _, ok := <-w.Offers(); ok {
		t.Fatal("Offers not closed")
	}
	if _, err := w.Acquire(ctx, "c"); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after close: %v", err)
	}
	if err := ls[0].Progress(ctx, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("progress after close: %v", err)
	}
}

func TestVerdictErrorMapping(t *testing.T) {
	all := []error{ErrLostAuthority, ErrStaleGeneration, ErrExpired, ErrConflict, ErrRejected, ErrDuplicate,
		ErrLate, ErrLeaseHeld, ErrCancelRequested, ErrNoVerdict, ErrLeaseEnded, ErrClosed}
	for _, tc := range []struct {
		kind   events.Kind
		reason events.Reason
		want   []error
	}{
		{events.KindStale, events.ReasonStaleGeneration, []error{ErrStaleGeneration, ErrLostAuthority}},
		{events.KindLostAuthority, events.ReasonRenewAfterExpiry, []error{ErrLostAuthority, ErrExpired}},
		{events.KindLostAuthority, events.ReasonLeaseExpired, []error{ErrLostAuthority, ErrExpired}},
		{events.KindLostAuthority, events.ReasonCancelRequested, []error{ErrLostAuthority, ErrCancelRequested}},
		{events.KindLostAuthority, events.ReasonStaleGeneration, []error{ErrLostAuthority, ErrStaleGeneration}},
		{events.KindLostAuthority, events.ReasonHolderMismatch, []error{ErrLostAuthority}},
		{events.KindLostAuthority, events.ReasonLeaseEnded, []error{ErrLostAuthority}},
		{events.KindConflict, events.ReasonOwnershipConflict, []error{ErrConflict, ErrLostAuthority}},
		{events.KindConflict, events.ReasonConflictPending, []error{ErrConflict, ErrLostAuthority}},
		{events.KindRejected, events.ReasonLeaseHeld, []error{ErrRejected, ErrLeaseHeld}},
		{events.KindRejected, events.ReasonCancelRequested, []error{ErrRejected, ErrCancelRequested}},
		{events.KindRejected, events.ReasonSuccessAfterCancel, []error{ErrRejected, ErrCancelRequested}},
		{events.KindRejected, events.ReasonJobClosed, []error{ErrRejected}},
		{events.KindDuplicate, events.ReasonDuplicateRenew, []error{ErrDuplicate}},
		{events.KindLate, events.ReasonAckAfterDeadline, []error{ErrLate, ErrExpired, ErrLostAuthority}},
		{events.KindLate, events.ReasonProgressAfterExpiry, []error{ErrLate, ErrExpired, ErrLostAuthority}},
		{events.KindLate, events.ReasonResultAfterExpiry, []error{ErrLate, ErrExpired, ErrLostAuthority}},
		{events.KindLate, events.ReasonReleaseAfterExpiry, []error{ErrLate, ErrExpired, ErrLostAuthority}},
		{events.KindLate, events.ReasonCancelAckAfterExpiry, []error{ErrLate, ErrExpired, ErrLostAuthority}},
		{events.KindLate, events.ReasonProgressAfterCancel, []error{ErrLate, ErrCancelRequested}},
		{events.KindLate, events.ReasonCancelTimeout, []error{ErrLate, ErrCancelRequested, ErrLostAuthority}},
		{events.KindLate, events.ReasonLeaseEnded, []error{ErrLate, ErrLostAuthority}},
		{events.KindLate, events.ReasonLateRenew, []error{ErrLate}},
		{events.KindLate, events.ReasonLateProgress, []error{ErrLate}},
		{events.KindExpired, events.ReasonLeaseExpired, []error{ErrExpired, ErrLostAuthority}},
		{events.KindAckMissed, events.ReasonAckDeadlinePassed, []error{ErrExpired, ErrLostAuthority}},
		{events.KindUnresolved, events.ReasonExpiredCancelUnreconciled, []error{ErrLostAuthority, ErrCancelRequested, ErrExpired}},
		{events.KindUnresolved, events.ReasonCancelTimeout, []error{ErrLostAuthority, ErrCancelRequested}},
		{events.KindCancelRequested, events.ReasonOfferWithdrawn, []error{ErrCancelRequested, ErrLostAuthority}},
		{events.KindCancelRequested, events.ReasonOk, []error{ErrCancelRequested}},
		{events.KindResolved, events.ReasonLeaseRevoked, []error{ErrLostAuthority}},
		{events.KindResolved, events.ReasonSettled, []error{ErrLostAuthority}},
		{events.KindResolved, events.ReasonConflictAffirmed, nil},
	} {
		var err error = verdictError(events.Decision{Kind: tc.kind, Reason: tc.reason, Job: events.Job{ID: "j"}})
		wrapped := fmt.Errorf("op: %w", err)
		for _, s := range all {
			want := false
			for _, w := range tc.want {
				want = want || w == s
			}
			if got := errors.Is(wrapped, s); got != want {
				t.Errorf("%s/%s: errors.Is(%v) = %v, want %v", tc.kind, tc.reason, s, got, want)
			}
		}
		var ve *VerdictError
		if !errors.As(wrapped, &ve) || ve.Kind != tc.kind || ve.Reason != tc.reason {
			t.Errorf("%s/%s: errors.As: %v", tc.kind, tc.reason, ve)
		}
	}
	// Accepted verdicts are not errors.
	for _, k := range events.Kinds() {
		if k.Accepted() && errOf(events.Decision{Kind: k}) != nil {
			t.Errorf("accepted %s is an error", k)
		}
	}
}

func TestFence(t *testing.T) {
	var f Fence
	tok := func(job string, gen uint64) FencingToken {
		return FencingToken{Job: job, LeaseID: "L1", Generation: gen}
	}
	for _, tc := range []struct {
		tok   FencingToken
		stale bool
	}{
		{tok("a", 1), false}, {tok("a", 1), false}, {tok("a", 3), false}, {tok("a", 2), true},
		{tok("b", 1), false}, {tok("a", 3), false}, {tok("a", 1), true},
	} {
		err := f.Admit(tc.tok)
		if got := errors.Is(err, ErrStaleGeneration); got != tc.stale || (err != nil) != tc.stale {
			t.Fatalf("Admit(%s) = %v, want stale %v", tc.tok, err, tc.stale)
		}
	}
	if f.Highest("a") != 3 || f.Highest("b") != 1 || f.Highest("c") != 0 {
		t.Fatalf("highest a %d b %d", f.Highest("a"), f.Highest("b"))
	}
	// Concurrent admits: the highest generation always wins.
	var g Fence
	var wg sync.WaitGroup
	for i := 1; i <= 50; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = g.Admit(tok("x", uint64(i))) }()
	}
	wg.Wait()
	if g.Highest("x") != 50 {
		t.Fatalf("highest %d after concurrent admits", g.Highest("x"))
	}
	for _, s := range []string{"", "a/b", "a/b/0", "a/b/x", "a.b/L/1", "a/b/1/2"} {
		if _, err := ParseFencingToken(s); err == nil {
			t.Errorf("ParseFencingToken(%q) accepted", s)
		}
	}
}

// A verdict can overtake its PubAck, and a cancel request can overtake the
// registration of the lease it is about: both are kept until claimed.
func TestDecisionsBeforeTheirReceiver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("w1")
	const seq = 1 << 40
	w.dispatch(events.Decision{Cause: seq, Kind: events.KindRenewed, Role: events.RoleWorker, Actor: "w1", Verb: events.VerbRenew, Job: events.Job{ID: "x"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if d, err := w.await(ctx, seq, events.VerbRenew, "x"); err != nil || d.Cause != seq {
		t.Fatalf("stashed verdict: %v %v", d, err)
	}

	job := events.Job{ID: "y", LeaseID: "L7", Generation: 1, Holder: "w1", State: events.StateActive, Duration: int64(time.Minute)}
	w.dispatch(events.Decision{Cause: seq + 1, Kind: events.KindCancelRequested, Reason: events.ReasonOk, Role: events.RoleOps,
		Actor: "op1", Addressee: "w1", Job: job})
	now := time.Now()
	granted := job
	granted.ExpiresAt = now.Add(time.Minute).UnixNano()
	l, err := w.newLease(events.Decision{Cause: seq, Kind: events.KindGranted, At: now.UnixNano(), Job: granted}, now, LeaseOptions{RenewFraction: DefaultRenewFraction})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, l.CancelRequested(), time.Second, "the stashed cancel request")
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrCancelRequested) {
		t.Fatalf("cause %v", cause)
	}
	waitDone(t, l.loopDone, time.Second, "the renew loop to exit")
}

// The decision consumer survives a reconnect without a gap: a cancel request
// stored while the worker is disconnected still reaches it, and the lease
// stays renewed throughout.
func TestReconnectNoGap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w, nc := e.workerConn("w1")
	l, err := w.Acquire(context.Background(), "j1", WithLeaseDuration(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cid, err := nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Server().DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	e.ops("j1", events.Input{Verb: events.VerbCancel})
	waitDone(t, l.CancelRequested(), 10*time.Second, "the cancel request stored during the disconnection")
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrCancelRequested) {
		t.Fatalf("cause %v: want ErrCancelRequested (the lease must not have lapsed)", cause)
	}
	ctx := context.Background()
	if err := l.AckCancel(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, events.OutcomeFailed, "interrupted"); err != nil {
		t.Fatal(err)
	}
	if nc.Stats().Reconnects == 0 {
		t.Fatal("the connection never reconnected")
	}
}

// A lease whose renew or progress sequence has reached the protocol's
// largest (events.MaxSeq) sends nothing it would have to number past it:
// Progress fails with ErrSequenceExhausted, and a renewal ends the lease's
// authority (its context's cause matches ErrSequenceExhausted and
// ErrLostAuthority); nothing is published.
func TestSequencesExhausted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("w1")
	ctx := context.Background()
	l, err := w.Acquire(ctx, "j1", WithLeaseDuration(30*time.Second)) // no automatic renewal during the test
	if err != nil {
		t.Fatal(err)
	}
	e.caughtUp()
	before := len(e.readStream("TENURE_IN"))
	l.mu.Lock()
	l.progressSeq, l.renewSeq = events.MaxSeq, events.MaxSeq
	l.mu.Unlock()
	if err := l.Progress(ctx, 10); !errors.Is(err, ErrSequenceExhausted) {
		t.Fatalf("Progress past MaxSeq: %v, want ErrSequenceExhausted", err)
	}
	if err := l.Renew(ctx); !errors.Is(err, ErrSequenceExhausted) {
		t.Fatalf("Renew past MaxSeq: %v, want ErrSequenceExhausted", err)
	}
	<-l.Context().Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrSequenceExhausted) || !errors.Is(cause, ErrLostAuthority) {
		t.Fatalf("lease context cause %v", cause)
	}
	if after := len(e.readStream("TENURE_IN")); after != before {
		t.Fatalf("%d inputs published past the limit", after-before)
	}
}

// An input sequence names one input only while the stream keeps it: after
// a server lost its unsynced tail, another input of this worker may be
// stored at the sequence of one whose PubAck came back (the simulator's
// seeds 50926 and 50942). A waiter takes only the verdicts of its own
// input's verb and job (any job for a batch or a pull), or about no job;
// two waiters at one sequence each get their own.
func TestVerdictOfAnotherInputAtItsSequence(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("w1")
	const seq = 1 << 40
	verdict := func(verb events.Verb, job string, kind events.Kind) events.Decision {
		return events.Decision{Cause: seq, Kind: kind, Reason: events.ReasonOk, Role: events.RoleWorker, Actor: "w1",
			Verb: verb, Addressee: "w1", Job: events.Job{ID: job}}
	}
	type got struct {
		ds  []events.Decision
		err error
	}
	wait := func(ctx context.Context, verb events.Verb, job string) chan got {
		c := make(chan got, 1)
		go func() {
			ds, err := w.awaitN(ctx, 0, seq, 1, verb, job)
			c <- got{ds, err}
		}()
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	renew := wait(short, events.VerbRenew, events.NoJob) // the lost input: a batch renew
	pull := wait(ctx, events.VerbPull, events.NoJob)
	result := wait(ctx, events.VerbResult, "j2")
	time.Sleep(50 * time.Millisecond)                                  // (the waiters registered; a verdict before them is stashed and claimed alike)
	w.dispatch(verdict(events.VerbResult, "j1", events.KindCompleted)) // same verb, another job: nobody's here
	w.dispatch(verdict(events.VerbResult, "j2", events.KindCompleted))
	w.dispatch(verdict(events.VerbPull, events.NoJob, events.KindCapacitySet))
	if g := <-result; g.err != nil || g.ds[0].Job.ID != "j2" || g.ds[0].Verb != events.VerbResult {
		t.Fatalf("the result of j2 got %v, %v", g.ds, g.err)
	}
	if g := <-pull; g.err != nil || g.ds[0].Kind != events.KindCapacitySet {
		t.Fatalf("the pull got %v, %v", g.ds, g.err)
	}
	if g := <-renew; !errors.Is(g.err, ErrNoVerdict) || len(g.ds) != 0 {
		t.Fatalf("the lost renewal got %v, %v; want no verdict", g.ds, g.err)
	}
	// The verdict of j1's result waits, stashed, for its own caller.
	if d, err := w.await(ctx, seq, events.VerbResult, "j1"); err != nil || d.Job.ID != "j1" {
		t.Fatalf("the result of j1: %v, %v", d, err)
	}
	// A verdict with no verb (a verb the log's rules do not know: a pull
	// sent to a log below revision 4) is the waiting input's own.
	bad := verdict(events.VerbNone, events.NoJob, events.KindRejected)
	bad.Cause, bad.Reason = seq+1, events.ReasonBadSubject
	w.dispatch(bad)
	if d, err := w.await(ctx, seq+1, events.VerbPull, events.NoJob); err != nil || d.Reason != events.ReasonBadSubject {
		t.Fatalf("the pull's bad_subject: %v, %v", d, err)
	}
}
