package coordinator_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// Every golden scenario of the fold, driven end to end: its raw inputs are
// published to the input stream of a real embedded server, a coordinator
// folds them, and the decision stream must be byte-identical to the fold of
// the stored inputs (ticks the coordinator appended included).
func TestGoldenScenariosEndToEnd(t *testing.T) {
	files, err := filepath.Glob("../projector/testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			srv, _, js := newOpenServer(t) // a log written by hand
			var n uint64
			// Collect the inputs with the golden harness's own parser.
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				if d.Cmd == "in" {
					raw, err := testutil.ScenarioInput(d, n+1)
					if err != nil {
						t.Fatal(err)
					}
					n++
					if _, err := js.Publish(context.Background(), raw.Subject, raw.Body); err != nil {
						t.Fatalf("publish: %v", err)
					}
				}
				return d.Expected // the fold's expectations are checked by projector's TestGolden
			})
			r := startCoordinator(t, srv.ClientURL(), "c1")
			waitCaughtUp(t, js, r)
			inputs, decisions := checkChain(t, js)
			if uint64(len(inputs)) < n || len(decisions) < len(inputs) {
				t.Fatalf("%d inputs stored of %d published, %d decisions", len(inputs), n, len(decisions))
			}
		})
	}
}

func TestMain(m *testing.M) {
	os.Exit(m.Run())
}

// With no inputs at all, an active lease still expires: the coordinator
// appends a tick whose stored timestamp fires the deadline.
func TestExpiryThroughTick(t *testing.T) {
	srv, _, js := newServer(t)
	r := startCoordinator(t, srv.ClientURL(), "c1")
	seq := publish(t, js, events.RoleWorker, "w1", "j1", events.VerbAcquire, `{"v":1,"lease_ms":200}`)
	if v := verdict(decisionsFor(t, js, seq)); v.Kind != events.KindGranted {
		t.Fatalf("acquire: %s/%s", v.Kind, v.Reason)
	}
	expired := waitDecision(t, js, "an expiry", func(d events.Decision) bool { return d.Kind == events.KindExpired && d.Job.ID == "j1" })
	if expired.Verb != events.VerbTick || expired.Role != events.RoleCoord {
		t.Fatalf("expiry caused by %s/%s, want a coordinator tick", expired.Role, expired.Verb)
	}
	if expired.At < expired.Job.ExpiresAt {
		t.Fatalf("expired at %d before the deadline %d", expired.At, expired.Job.ExpiresAt)
	}
	waitCaughtUp(t, js, r)
	checkChain(t, js)
}

// A finished job is retired once the policy's retention passes, by a tick
// the coordinator appends for it (rules revision 3 on; a coordinator moves
// its log to the current revision), and its id is free again.
func TestRetirementThroughTick(t *testing.T) {
	srv, _, js := newServer(t)
	r := startCoordinator(t, srv.ClientURL(), "c1")
	waitDecision(t, js, "the log at the current revision", func(d events.Decision) bool {
		return d.Kind == events.KindRulesSet && d.Revision == events.CurrentRevision
	})
	pol := publish(t, js, events.RoleOps, "admin", events.NoJob, events.VerbPolicy,
		`{"v":1,"min_lease_ms":100,"max_lease_ms":60000,"default_lease_ms":5000,"ack_timeout_ms":2000,"cancel_timeout_ms":3000,"max_lifetime_ms":600000,"max_generations":100,"retain_ms":300}`)
	if v := verdict(decisionsFor(t, js, pol)); v.Kind != events.KindPolicySet || v.Policy == nil || v.Policy.Retain != 300*1e6 {
		t.Fatalf("policy: %s/%s %+v", v.Kind, v.Reason, v.Policy)
	}
	seq := publish(t, js, events.RoleWorker, "w1", "j1", events.VerbAcquire, `{"v":1}`)
	g := verdict(decisionsFor(t, js, seq))
	if g.Kind != events.KindGranted {
		t.Fatalf("acquire: %s/%s", g.Kind, g.Reason)
	}
	seq = publish(t, js, events.RoleWorker, "w1", "j1", events.VerbResult,
		fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":1,"outcome":"SUCCESS"}`, g.Job.LeaseID))
	done := verdict(decisionsFor(t, js, seq))
	if done.Kind != events.KindCompleted {
		t.Fatalf("result: %s/%s", done.Kind, done.Reason)
	}
	retired := waitDecision(t, js, "the retirement", func(d events.Decision) bool { return d.Kind == events.KindRetired && d.Job.ID == "j1" })
	if retired.Verb != events.VerbTick || retired.Role != events.RoleCoord || retired.Reason != events.ReasonRetentionPassed {
		t.Fatalf("retirement: %s/%s caused by %s/%s, want retention_passed by a coordinator tick", retired.Kind, retired.Reason, retired.Role, retired.Verb)
	}
	if retired.At < done.Job.EndedAt+300*1e6 || retired.Job.State != events.StateCompleted || retired.Job.LeaseID != g.Job.LeaseID {
		t.Fatalf("retired at %d (ended %d) with %+v", retired.At, done.Job.EndedAt, retired.Job)
	}
	// COMPLETED took no new lease (job_closed); retired, the id starts again.
	seq = publish(t, js, events.RoleWorker, "w2", "j1", events.VerbAcquire, `{"v":1}`)
	again := verdict(decisionsFor(t, js, seq))
	if again.Kind != events.KindGranted || again.Job.Generation != 1 || again.Job.LeaseID == g.Job.LeaseID {
		t.Fatalf("acquire after retirement: %s/%s g%d %s", again.Kind, again.Reason, again.Job.Generation, again.Job.LeaseID)
	}
	waitCaughtUp(t, js, r)
	checkChain(t, js)
}

// A renewal stored on time while the coordinator was down is accepted after
// restart; one stored after the deadline is refused, whatever the wall clock
// says when the fold runs.
func TestRenewalJudgedByStoredTime(t *testing.T) {
	srv, _, js := newServer(t)
	r := startCoordinator(t, srv.ClientURL(), "c1")
	a := publish(t, js, events.RoleWorker, "w1", "on-time", events.VerbAcquire, `{"v":1,"lease_ms":400}`)
	b := publish(t, js, events.RoleWorker, "w1", "too-late", events.VerbAcquire, `{"v":1,"lease_ms":400}`)
	va, vb := verdict(decisionsFor(t, js, a)), verdict(decisionsFor(t, js, b))
	r.stop()

	// The coordinator is down. One renewal is stored at once, well before
	// the deadline; the other after its lease ran out.
	onTime := publish(t, js, events.RoleWorker, "w1", "on-time", events.VerbRenew,
		fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":1,"renew_seq":1}`, va.Job.LeaseID))
	time.Sleep(time.Until(time.Unix(0, vb.Job.ExpiresAt)) + 50*time.Millisecond)
	late := publish(t, js, events.RoleWorker, "w1", "too-late", events.VerbRenew,
		fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":1,"renew_seq":1}`, vb.Job.LeaseID))
	// Both leases' deadlines are long past on the wall clock at restart.
	time.Sleep(200 * time.Millisecond)

	r = startCoordinator(t, srv.ClientURL(), "c1")
	if v := verdict(decisionsFor(t, js, onTime)); v.Kind != events.KindRenewed {
		t.Fatalf("renewal stored on time: %s/%s, want renewed", v.Kind, v.Reason)
	}
	ds := decisionsFor(t, js, late)
	if v := verdict(ds); v.Kind != events.KindLostAuthority || v.Reason != events.ReasonRenewAfterExpiry {
		t.Fatalf("renewal stored late: %s/%s, want lost_authority/renew_after_expiry", v.Kind, v.Reason)
	}
	if ds[0].Kind != events.KindExpired || ds[0].Job.ID != "too-late" {
		t.Fatalf("the late renewal's input should first fire the expiry, got %s", ds[0].Kind)
	}
	waitCaughtUp(t, js, r)
	checkChain(t, js)
}

// Restarting the embedded server on the same data directory loses nothing
// that was acknowledged, and the coordinator carries on.
func TestEmbeddedServerRestart(t *testing.T) {
	dir := t.TempDir()
	srv := testutil.StartServerIn(t, dir, testutil.SyncAlways())
	url := srv.ClientURL()
	_, js := testutil.Connect(t, url)
	r := startCoordinator(t, url, "c1")
	var seqs []uint64
	for i := range 20 {
		seqs = append(seqs, publish(t, js, events.RoleWorker, "w1", fmt.Sprintf("j%d", i), events.VerbAcquire, `{"v":1,"lease_ms":60000}`))
	}
	waitCaughtUp(t, js, r)
	before := len(readStream(t, js, "TENURE_OUT"))
	r.kill()
	srv.Shutdown()

	srv = testutil.StartServerIn(t, dir, testutil.SyncAlways())
	_, js = testutil.Connect(t, srv.ClientURL())
	in := readStream(t, js, "TENURE_IN")
	if got := in[len(in)-1].seq; got < seqs[len(seqs)-1] {
		t.Fatalf("input stream ends at %d after restart, %d was acknowledged", got, seqs[len(seqs)-1])
	}
	if after := len(readStream(t, js, "TENURE_OUT")); after < before {
		t.Fatalf("decision stream shrank from %d to %d", before, after)
	}
	r = startCoordinator(t, srv.ClientURL(), "c1")
	// j0's lease, as its grant named it before the restart.
	lease := verdict(decisionsFor(t, js, seqs[0])).Job.LeaseID
	seq := publish(t, js, events.RoleWorker, "w1", "j0", events.VerbRenew, fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":1,"renew_seq":1}`, lease))
	if v := verdict(decisionsFor(t, js, seq)); v.Kind != events.KindRenewed {
		t.Fatalf("renewal after server restart: %s/%s", v.Kind, v.Reason)
	}
	waitCaughtUp(t, js, r)
	checkChain(t, js)
}

// Two coordinators started together: exactly one goes live; the other
// stands by with a warm projection and takes over, with no gap, when the
// first dies.
func TestTwoCoordinatorsTakeover(t *testing.T) {
	srv, _, js := newServer(t)
	a := startCoordinator(t, srv.ClientURL(), "ca")
	b := startCoordinator(t, srv.ClientURL(), "cb")
	testutil.WaitFor(t, 10*time.Second, "one live coordinator", func() bool { return a.c.Stats().Live || b.c.Stats().Live })
	live, standby := a, b
	if b.c.Stats().Live {
		live, standby = b, a
	}
	for i := range 30 {
		publish(t, js, events.RoleWorker, "w1", fmt.Sprintf("j%d", i%5), events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	}
	waitCaughtUp(t, js, live)
	if standby.c.Stats().Live {
		t.Fatal("both coordinators are live")
	}
	// The standby follows: its projection is warm.
	testutil.WaitFor(t, 10*time.Second, "standby to follow", func() bool {
		return standby.c.Stats().InputsFolded == live.c.Stats().InputsFolded
	})
	live.kill()
	for i := range 30 {
		publish(t, js, events.RoleWorker, "w2", fmt.Sprintf("k%d", i%5), events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	}
	waitCaughtUp(t, js, standby)
	checkChain(t, js)
}

// Two coordinators that both believe they are live (the leadership entry
// vanished under the first, as after a long pause): the decision stream's
// expected-sequence check lets exactly one append; the other's append fails
// with lost authority and it stands by. Nothing is duplicated.
func TestFenceStopsSecondWriter(t *testing.T) {
	srv, _, js := newServer(t)
	a := startCoordinator(t, srv.ClientURL(), "ca", func(c *coordinator.Config) { c.LeaderTTL = 30 * time.Second })
	testutil.WaitFor(t, 10*time.Second, "ca live", func() bool { return a.c.Stats().Live })
	publish(t, js, events.RoleWorker, "w1", "j0", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	waitCaughtUp(t, js, a)
	// The entry disappears (a's renewal is 10 s away): b takes leadership.
	kv, err := js.KeyValue(context.Background(), "TENURE_LEADER")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(context.Background(), "leader"); err != nil {
		t.Fatal(err)
	}
	b := startCoordinator(t, srv.ClientURL(), "cb", func(c *coordinator.Config) { c.LeaderTTL = 30 * time.Second })
	testutil.WaitFor(t, 10*time.Second, "cb live", func() bool { return b.c.Stats().Live })
	// Both are live now; each input is folded by both, appended by one.
	for i := range 20 {
		publish(t, js, events.RoleWorker, "w1", fmt.Sprintf("j%d", i+1), events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	}
	testutil.WaitFor(t, 10*time.Second, "a writer to lose authority", func() bool {
		return a.c.Stats().LostAuthority+b.c.Stats().LostAuthority > 0
	})
	// Whoever holds authority now carries on; the other stands by.
	testutil.WaitFor(t, 20*time.Second, "exactly one live coordinator", func() bool { return a.c.Stats().Live != b.c.Stats().Live })
	seq := publish(t, js, events.RoleWorker, "w1", "after", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	if v := verdict(decisionsFor(t, js, seq)); v.Kind != events.KindGranted {
		t.Fatalf("after the fence: %s/%s", v.Kind, v.Reason)
	}
	// The one live may still hand over: a that kept authority at the fence
	// loses the leadership entry (b's since the purge) at its next renewal,
	// and b takes it back. Whichever is live in the end has caught up.
	ctx := context.Background()
	testutil.WaitFor(t, 60*time.Second, "the live coordinator to catch up", func() bool {
		ii, err1 := js.Stream(ctx, "TENURE_IN")
		oi, err2 := js.Stream(ctx, "TENURE_OUT")
		if err1 != nil || err2 != nil {
			return false
		}
		for _, r := range []*running{a, b} {
			st := r.c.Stats()
			if st.Live && st.InputsFolded == ii.CachedInfo().State.LastSeq && st.DecisionsStored == oi.CachedInfo().State.LastSeq {
				return true
			}
		}
		return false
	})
	checkChain(t, js)
}

// Crash safety: the coordinator is killed (its connection cut, as if the
// process died) at 50 random points, between and during appends and during
// snapshots, while inputs keep arriving, and restarted each time. The
// decision stream must equal an uninterrupted fold of the same inputs.
func TestCrashAtRandomPoints(t *testing.T) {
	srv, _, js := newServer(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	snapEvery := func(c *coordinator.Config) { c.SnapshotEvery = 7; c.LeaderTTL = 5 * time.Second }

	// A workload in the background: acquires, renewals, progress, results,
	// some of them stale or duplicated.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The workload learns lease ids as a worker does, from the granted
	// decisions (they are unguessable); until it knows one, it names a
	// lease that does not exist.
	var idMu sync.Mutex
	leaseIDs := map[string]string{}
	granted, err := js.OrderedConsumer(ctx, "TENURE_OUT", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"tenure.out.w1.*.granted"}})
	if err != nil {
		t.Fatal(err)
	}
	gcc, err := granted.Consume(func(m jetstream.Msg) {
		if d, err := events.DecodeDecision(m.Data()); err == nil {
			idMu.Lock()
			leaseIDs[d.Job.ID] = d.Job.LeaseID
			idMu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer gcc.Stop()
	leaseOf := func(job string) string {
		idMu.Lock()
		defer idMu.Unlock()
		if id, ok := leaseIDs[job]; ok {
			return id
		}
		return "L0"
	}
	var count atomic.Int64 // inputs stored so far
	produced := make(chan int, 1)
	go func() {
		defer func() { produced <- int(count.Load()) }()
		for i := 0; ctx.Err() == nil; i++ {
			job := fmt.Sprintf("j%d", i%8)
			var verb events.Verb
			var body string
			switch i % 4 {
			case 0:
				verb, body = events.VerbAcquire, `{"v":1,"lease_ms":300}`
			case 1, 2:
				verb, body = events.VerbRenew, fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":1,"renew_seq":%d}`, leaseOf(job), i)
			case 3:
				verb, body = events.VerbProgress, fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":1,"progress_seq":%d,"value":5}`, leaseOf(job), i)
			}
			// Until the first coordinator ends the input stream's genesis
			// (on two loaded cores, after the client's two retries), an
			// input meets no stream: published again.
			if _, err := js.Publish(ctx, events.InputSubject(events.RoleWorker, "w1", job, verb), []byte(body),
				jetstream.WithRetryAttempts(120), jetstream.WithRetryWait(250*time.Millisecond)); err != nil {
				return
			}
			count.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()
	r := startCoordinator(t, srv.ClientURL(), "c1", snapEvery)
	for i := range 50 {
		// At least four inputs between two kills, however slowly the
		// loaded machine lets the workload publish (a stress run's
		// failure: "only 155 inputs produced" in 50 kills' time).
		want := int64(4 * (i + 1))
		testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("%d inputs before kill %d", want, i+1), func() bool { return count.Load() >= want })
		time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
		r.kill()
		if i%10 == 9 {
			time.Sleep(100 * time.Millisecond) // let some inputs pile up
		}
		r = startCoordinator(t, srv.ClientURL(), "c1", snapEvery)
	}
	cancel()
	if n := <-produced; n < 200 {
		t.Fatalf("only %d inputs produced", n)
	}
	waitCaughtUp(t, js, r)
	inputs, decisions := checkChain(t, js)
	t.Logf("%d inputs, %d decisions, 50 kills", len(inputs), len(decisions))
}

// A server that restarts may have lost its unsynced tail (a file store
// with a sync interval): the live coordinator's readers may hold inputs
// read before the crash. After its connection is established again, on a
// stream of one replica, it reads the streams again (a new session), and
// carries on: inputs stored after the restart get their verdicts. Found by
// the simulator with lost tails (seed 188); the model's side of it is
// TestSimLostTailsFound.
func TestServerRestartReadsAgain(t *testing.T) {
	dir := t.TempDir()
	srv := testutil.StartServerIn(t, dir)
	port := srv.Port()
	_, js := testutil.Connect(t, srv.ClientURL())
	r := startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) { c.LeaderTTL = 3 * time.Second })
	for i := range 5 {
		publish(t, js, events.RoleWorker, "w1", fmt.Sprintf("j%d", i), events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	}
	waitCaughtUp(t, js, r)
	before := r.c.Stats().Sessions
	srv.Shutdown()
	srv = testutil.StartServerIn(t, dir, testutil.Port(port))
	_, js = testutil.Connect(t, srv.ClientURL())
	testutil.WaitFor(t, 20*time.Second, "the coordinator to reconnect", r.nc.IsConnected)
	testutil.WaitFor(t, 20*time.Second, "a new session after the reconnection", func() bool { return r.c.Stats().Sessions > before })
	seq := publish(t, js, events.RoleWorker, "w1", "j9", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	if v := verdict(decisionsFor(t, js, seq)); v.Kind != events.KindGranted {
		t.Fatalf("acquire after the server's restart: %s/%s", v.Kind, v.Reason)
	}
	waitCaughtUp(t, js, r)
	checkChain(t, js)
}
