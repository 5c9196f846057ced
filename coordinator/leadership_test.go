package coordinator_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

// A leadership renewal in flight does not stop the live loop: while the
// renewer waits on its KV update, inputs are folded and their decisions
// appended, and no turn of the loop lasts as long as the renewal. Before
// the renewal left the loop, the loop waited for it (up to a third of the
// TTL).
func TestSlowRenewalDoesNotStallTheLoop(t *testing.T) {
	const hold = 500 * time.Millisecond // the renewal's duration (its timeout is TTL/3, after the hold)
	srv, _, js := newServer(t)
	pm := &pauses{}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r := startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) {
		c.Metrics = pm
		c.LeaderTTL = 3 * time.Second
		coordinator.SetRenewHook(c, func(ctx context.Context) {
			once.Do(func() {
				close(entered)
				select {
				case <-release:
				case <-ctx.Done():
				}
			})
		})
	})
	testutil.WaitFor(t, 10*time.Second, "live", func() bool { return r.c.Stats().Live })
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal started")
	}
	start := time.Now()
	pm.take()
	// The renewal is in flight: inputs get their decisions all the same.
	var seqs []uint64
	for i := range 20 {
		seqs = append(seqs, publish(t, js, events.RoleWorker, "w1", fmt.Sprintf("j%d", i), events.VerbAcquire, `{"v":1,"lease_ms":600000}`))
	}
	// (The renewal lasts until released: waiting here on a loop stuck with
	// it times out.)
	testutil.WaitFor(t, 10*time.Second, "the decisions of inputs published while a renewal is in flight", func() bool {
		return r.c.Stats().InputsFolded >= seqs[len(seqs)-1]
	})
	time.Sleep(time.Until(start.Add(hold))) // the renewal lasts at least hold
	close(release)
	pauseMax, turns := pm.take()
	t.Logf("renewal in flight for %v: %d turns of the loop, the longest %v", time.Since(start).Round(time.Millisecond), turns, pauseMax)
	if turns == 0 || pauseMax >= hold {
		t.Fatalf("while a renewal was in flight for %v: %d turns, the longest %v; want turns, all shorter than the renewal", hold, turns, pauseMax)
	}
	// The renewal then succeeds: still live, in the same session.
	seq := publish(t, js, events.RoleWorker, "w1", "after", events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
	if v := verdict(decisionsFor(t, js, seq)); v.Kind != events.KindGranted {
		t.Fatalf("input after the renewal: %+v, want granted", v)
	}
	if st := r.c.Stats(); !st.Live || st.Sessions != 1 {
		t.Fatalf("after a slow renewal: live %v, %d sessions (%s); want live in its first session", st.Live, st.Sessions, st.Reason)
	}
	checkChain(t, js)
}

// resyncs records the errors a coordinator resynchronises after, with when
// it logged them.
type resyncs struct {
	mu   sync.Mutex
	errs []string
	at   []time.Time
}

func (h *resyncs) Enabled(context.Context, slog.Level) bool { return true }
func (h *resyncs) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *resyncs) WithGroup(string) slog.Handler            { return h }
func (h *resyncs) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "resynchronising" {
		return nil
	}
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			h.mu.Lock()
			h.errs, h.at = append(h.errs, a.Value.String()), append(h.at, time.Now())
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

func (h *resyncs) first() (string, time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.errs) == 0 {
		return "", time.Time{}, false
	}
	return h.errs[0], h.at[0], true
}

// When renewals stop succeeding without failing (the renewer is stuck on
// its KV call), the loop leaves live by itself before the leadership could
// have expired: within the TTL of the start of the last renewal that
// succeeded, with the error of a lost renewal. It then takes leadership
// back and carries on. Before the renewal left the loop, a stuck renewal
// stuck the loop.
func TestStuckRenewalLeavesLive(t *testing.T) {
	const ttl = 1800 * time.Millisecond
	srv, _, js := newServer(t)
	log := &resyncs{}
	var mu sync.Mutex
	var calls []time.Time // when each renewal started
	stuck := make(chan struct{})
	r := startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) {
		c.LeaderTTL = ttl
		c.Logger = slog.New(log)
		coordinator.SetRenewHook(c, func(ctx context.Context) {
			mu.Lock()
			calls = append(calls, time.Now())
			n := len(calls)
			mu.Unlock()
			if n == 3 { // two renewals succeed, the third never returns
				close(stuck)
				<-ctx.Done()
			}
		})
	})
	testutil.WaitFor(t, 10*time.Second, "live", func() bool { return r.c.Stats().Live })
	select {
	case <-stuck:
	case <-time.After(10 * time.Second):
		t.Fatal("no third renewal")
	}
	var err string
	var left time.Time
	testutil.WaitFor(t, 10*time.Second, "the coordinator to leave live", func() bool {
		var ok bool
		err, left, ok = log.first()
		return ok
	})
	mu.Lock()
	lastOK := calls[1] // the start of the last renewal that succeeded (a little after it)
	mu.Unlock()
	t.Logf("left live %v after the start of the last renewal that succeeded (TTL %v): %s", left.Sub(lastOK).Round(time.Millisecond), ttl, err)
	if !strings.HasPrefix(err, "coordinator: leadership lost: ") {
		t.Fatalf("left live after %q, want a lost leadership", err)
	}
	if left.After(lastOK.Add(ttl)) {
		t.Fatalf("left live %v after the last renewal that succeeded started, past the TTL (%v)", left.Sub(lastOK), ttl)
	}
	// It takes leadership back (it released the entry) and decides again.
	seq := publish(t, js, events.RoleWorker, "w1", "after", events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
	if v := verdict(decisionsFor(t, js, seq)); v.Kind != events.KindGranted {
		t.Fatalf("input after taking leadership back: %+v, want granted", v)
	}
	if st := r.c.Stats(); st.Sessions < 2 {
		t.Fatalf("%d sessions, want a second one after leaving live", st.Sessions)
	}
	checkChain(t, js)
}

// A renewal whose update was applied but whose reply never came (a
// timeout under load) is not a lost leadership: the next renewal, refused
// for a wrong revision, reads the entry back, finds it names this
// coordinator at a later revision, and holds that revision. Before, any
// failed update ended the live session ("leadership lost"), and under an
// expiry storm on loaded cores a late KV reply did (issue 29). An entry
// that names another coordinator, or is gone, is a lost leadership.
func TestRenewalOfAnUnansweredUpdate(t *testing.T) {
	_, _, js := newServer(t)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "TEST_LEADER", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	held, err := kv.Create(ctx, coordinator.LeaderKey, []byte("c1"))
	if err != nil {
		t.Fatal(err)
	}
	// c1's update applied, its reply lost: the entry moved on without c1
	// knowing.
	applied, err := kv.Update(ctx, coordinator.LeaderKey, []byte("c1"), held)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := coordinator.RenewOnce(ctx, kv, "c1", held)
	if err != nil || rev != applied {
		t.Fatalf("renewal after an unanswered update: revision %d, %v; want %d held", rev, err, applied)
	}
	// And it renews on from there.
	next, err := coordinator.RenewOnce(ctx, kv, "c1", rev)
	if err != nil || next <= rev {
		t.Fatalf("the next renewal: revision %d, %v", next, err)
	}
	// Another coordinator took the entry: lost.
	taken, err := kv.Update(ctx, coordinator.LeaderKey, []byte("c2"), next)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coordinator.RenewOnce(ctx, kv, "c1", next); err == nil || !strings.Contains(err.Error(), `names "c2"`) {
		t.Fatalf("renewal of an entry c2 took: %v, want lost", err)
	}
	// Gone: lost.
	if err := kv.Delete(ctx, coordinator.LeaderKey, jetstream.LastRevision(taken)); err != nil {
		t.Fatal(err)
	}
	if _, err := coordinator.RenewOnce(ctx, kv, "c1", taken); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("renewal of a deleted entry: %v, want lost", err)
	}
}
