package ops_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/receipt"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/worker"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// startTenure runs a real embedded server and coordinator for the test.
func startTenure(t *testing.T) *ops.Client {
	t.Helper()
	cl, _ := startTenureJS(t)
	return cl
}

// startTenureJS is startTenure that also returns a JetStream context on
// the server.
func startTenureJS(t *testing.T) (*ops.Client, jetstream.JetStream) {
	t.Helper()
	srv := startCoordinator(t, streams.Topology{})
	onc, js := testutil.Connect(t, srv.ClientURL())
	cl, err := ops.New(onc, "disp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl, js
}

// startCoordinator starts a server and a live coordinator of topology top
// on it, both stopped with the test.
func startCoordinator(t *testing.T, top streams.Topology) *embedded.Server {
	t.Helper()
	srv := testutil.StartServer(t)
	nc, _ := testutil.Connect(t, srv.ClientURL())
	c, err := coordinator.New(coordinator.Config{ID: "c1", Conn: nc, LeaderTTL: 600 * time.Millisecond, Topology: top})
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
	testutil.WaitFor(t, 10*time.Second, "the coordinator live", func() bool { return c.Stats().Live })
	return srv
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
	// The refusal is the worker SDK's error type and matches its sentinels
	// where they apply, with the message ops always gave.
	var ve *worker.VerdictError
	if !errors.As(err, &ve) || !errors.Is(err, worker.ErrRejected) || !errors.Is(err, worker.ErrLeaseHeld) ||
		errors.Is(err, worker.ErrLostAuthority) || !errors.Is(err, worker.ErrNotAccepted) {
		t.Fatalf("second offer, as a verdict error: %v", err)
	}
	if want := "ops: offer j1: rejected/lease_held"; !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("second offer: %q, want it to start with %q", err, want)
	}
	// Cancelling the pending offer withdraws it.
	d, err = c.Cancel(ctx, "j1", "", 0, "changed my mind")
	if err != nil || d.Kind != events.KindCancelRequested || d.Reason != events.ReasonOfferWithdrawn || d.Job.State != events.StateCancelled {
		t.Fatalf("cancel: %v %+v", err, d)
	}
	// Nothing to resolve on a cancelled job.
	if _, err = c.Revoke(ctx, "j1", ""); !errors.As(err, &rej) || rej.Decision.Reason != events.ReasonNothingToResolve ||
		!errors.Is(err, worker.ErrRejected) {
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
	testutil.WaitFor(t, 10*time.Second, "c0 live", func() bool { return c0.Stats().Live })
	cancel()
	<-done
	c, err := ops.New(nc, "disp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_, js := testutil.Connect(t, srv.ClientURL())
	base := decisionConsumers(t, js)
	tctx, tcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer tcancel()
	// While the offer waits, its consumer is there (so counting them is
	// meaningful); once it gave up, it is gone.
	during := make(chan int, 1)
	go func() {
		time.Sleep(250 * time.Millisecond)
		n, err := countConsumers(js)
		if err != nil {
			n = -1
		}
		during <- n
	}()
	if _, err := c.Offer(tctx, "j1", "w1", 0, 0); !errors.Is(err, ops.ErrNoVerdict) || !errors.Is(err, worker.ErrNoVerdict) ||
		!strings.HasPrefix(err.Error(), "ops: no verdict for input ") {
		t.Fatalf("offer with no coordinator: %v", err)
	}
	if n := <-during; n != base+1 {
		t.Fatalf("%d consumers on the decision stream while waiting for a verdict, want %d", n, base+1)
	}
	requireConsumers(t, js, base, "an offer without a verdict")
}

// decisionConsumers is the number of consumers on the decision stream.
func decisionConsumers(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	n, err := countConsumers(js)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func countConsumers(js jetstream.JetStream) (int, error) {
	ctx := context.Background()
	s, err := js.Stream(ctx, streams.Topology{}.DecisionStream())
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Consumers, nil
}

// requireConsumers waits (briefly: a consumer replaced by a reset of the
// ordered consumer is deleted asynchronously) until the decision stream has
// want consumers. Without the deletion they would stay for the ordered
// consumer's inactivity threshold, minutes.
func requireConsumers(t *testing.T, js jetstream.JetStream, want int, after string) {
	t.Helper()
	testutil.WaitFor(t, 2*time.Second, fmt.Sprintf("%d consumers on the decision stream (the baseline) after %s", want, after), func() bool {
		return decisionConsumers(t, js) == want
	})
}

// An offer, a cancel or a resolve follows the decisions about its job
// with a consumer of its own and deletes it once the verdict is known,
// accepted or not, or when none came. A submit or a policy, whose verdicts
// are all addressed to the client, is read by the client's one decision
// reader, kept until Close.
func TestConsumersDeleted(t *testing.T) {
	c, js := startTenureJS(t)
	ctx := context.Background()
	base := decisionConsumers(t, js)
	steps := []struct {
		name string
		do   func() error
	}{
		{"offer", func() error { _, err := c.Offer(ctx, "j1", "w1", 5000, 1000); return err }},
		{"refused offer", func() error {
			_, err := c.Offer(ctx, "j1", "w2", 0, 0)
			if !errors.Is(err, ops.ErrRejected) {
				return fmt.Errorf("want a refusal, got %v", err)
			}
			return nil
		}},
		{"cancel", func() error { _, err := c.Cancel(ctx, "j1", "", 0, "no"); return err }},
		{"policy", func() error { _, err := c.SetPolicy(ctx, events.DefaultPolicy()); return err }},
		{"offer again", func() error { _, err := c.Offer(ctx, "j2", "w1", 0, 0); return err }},
	}
	for _, op := range steps {
		if err := op.do(); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		want := base
		if op.name == "policy" || op.name == "offer again" {
			want++ // the reader the policy started
		}
		requireConsumers(t, js, want, op.name)
	}
	base++
	// Several at once, from one client.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			if _, err := c.Offer(ctx, fmt.Sprintf("k%d", i), "w1", 0, 0); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent offer: %v", err)
	}
	requireConsumers(t, js, base, "8 concurrent offers")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	requireConsumers(t, js, base-1, "Close")
	if _, err := c.Submit(ctx, "after-close", "q"); !errors.Is(err, ops.ErrClosed) {
		t.Fatalf("submit after Close: %v, want ErrClosed", err)
	}
}

// With receipts on, the client keeps a receipt of its input as stored and
// of its verdict with the chain value stored on it; a sink that fails is
// reported, and the call still returns its verdict.
func TestReceipts(t *testing.T) {
	_, js := startTenureJS(t)
	var got []receipt.Receipt
	var errs []error
	fail := false
	keep := receipt.Func(func(r receipt.Receipt) error {
		if fail {
			return errors.New("disk full")
		}
		got = append(got, r)
		return nil
	})
	cl, err := ops.New(js.Conn(), "disp2", ops.WithReceipts(keep), ops.WithErrorHandler(func(err error) { errs = append(errs, err) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := cl.Offer(ctx, "job-r", "w1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Kind != receipt.KindInput || got[0].Seq != d.Cause || got[1].Kind != receipt.KindDecision || got[1].Cause != d.Cause {
		t.Fatalf("receipts %+v for verdict %+v", got, d)
	}
	in, err := js.Stream(ctx, "TENURE_IN")
	if err != nil {
		t.Fatal(err)
	}
	m, err := in.GetMsg(ctx, got[0].Seq)
	if err != nil || m.Subject != got[0].Subject || receipt.Input("TENURE_IN", m.Sequence, m.Subject, m.Data, "ops disp2") != got[0] {
		t.Fatalf("input receipt %+v, stored %v %v", got[0], m, err)
	}
	out, err := js.Stream(ctx, "TENURE_OUT")
	if err != nil {
		t.Fatal(err)
	}
	dm, err := out.GetMsg(ctx, got[1].Seq)
	if err != nil || got[1].Stream != "TENURE_OUT" || got[1].Chain != dm.Header.Get(events.HeaderChain) || got[1].Chain == "" {
		t.Fatalf("decision receipt %+v, stored %v %v", got[1], dm, err)
	}
	fail = true
	if _, err := cl.Offer(ctx, "job-r2", "w1", 0, 0); err != nil {
		t.Fatal(err)
	}
	if len(errs) != 2 {
		t.Fatalf("errors reported: %v, want the two receipts not kept", errs)
	}
}

// A deployment under another stream prefix: the client reads its verdicts
// from that prefix's decision stream (WithPrefix). Before WithPrefix the
// client always read TENURE_OUT, and every call against such a deployment
// failed (tenure ui --prefix X's operator actions among them).
func TestPrefix(t *testing.T) {
	srv := startCoordinator(t, streams.Topology{Prefix: "ACME"})
	onc, _ := testutil.Connect(t, srv.ClientURL())
	cl, err := ops.New(onc, "disp", ops.WithPrefix("ACME"), ops.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	d, err := cl.Offer(context.Background(), "j1", "w1", 0, 0)
	if err != nil || d.Kind != events.KindOffered {
		t.Fatalf("offer under prefix ACME: %v %s", err, d.Kind)
	}
	def, err := ops.New(onc, "disp", ops.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { def.Close() })
	if _, err := def.Offer(context.Background(), "j2", "w1", 0, 0); err == nil {
		t.Fatal("a client of the default prefix got a verdict from the ACME deployment")
	}
	if _, err := ops.New(onc, "disp", ops.WithPrefix("no.dots")); err == nil {
		t.Fatal("an invalid prefix was accepted")
	}
	// An option with an invalid value fails New, as the worker's do.
	for _, d := range []time.Duration{0, -1} {
		if _, err := ops.New(onc, "disp", ops.WithTimeout(d)); err == nil {
			t.Errorf("WithTimeout(%v) was accepted", d)
		}
	}
}

// A call about a busy job returns as soon as it has its verdict: the
// decisions about the job that follow the verdict may fill the call's
// buffer while it stops following them, and its follower's handler must
// not wait for a reader that is gone. Before the fix, Stop waited for the
// handler, blocked on the full buffer until the call's context ended: a
// call given its verdict returned it only at its deadline (seen here: 10.1
// s with a 10 s timeout; the race needs decisions delivered between the
// verdict and Stop, which a flood of the job's inputs makes likely, not
// certain). A call that returned a verdict must have returned before its
// deadline.
func TestCallReturnsWhileItsJobIsBusy(t *testing.T) {
	c, js := startTenureJS(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() { // w1's acquires of busy: a grant, then a refusal each, all about busy
		for i := 0; ctx.Err() == nil; i++ {
			msg := nats.NewMsg(events.InputSubject(events.RoleWorker, "w1", "busy", events.VerbAcquire))
			msg.Data = []byte(`{"v":1,"lease_ms":60000}`)
			if _, err := js.PublishMsgAsync(msg); err != nil && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			if i%64 == 63 {
				select {
				case <-js.PublishAsyncComplete():
				case <-ctx.Done():
				}
			}
		}
	})
	verdicts := 0
	for range 5 {
		deadline := time.Now().Add(10 * time.Second)
		cctx, ccancel := context.WithDeadline(ctx, deadline)
		d, err := c.Cancel(cctx, "busy", "", 0, "busy") // (its verdict, whatever it is)
		ccancel()
		if d.Kind == events.KindNone {
			continue // no verdict in time: a coordinator behind the flood
		}
		verdicts++
		if !time.Now().Before(deadline) {
			t.Fatalf("the cancel's verdict (%s/%s, %v) was returned at its deadline, not when it came", d.Kind, d.Reason, err)
		}
	}
	t.Logf("%d of 5 cancels learned their verdict", verdicts)
}
