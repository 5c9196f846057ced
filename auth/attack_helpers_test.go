package auth_test

// The harness of the attack suite (attack_test.go): a real embedded
// nats-server running the configuration `tenure auth init` generates, a real
// coordinator connected as "coord", honest participants doing real work
// through the SDKs while an attacker holding nothing but worker w2's
// credentials does what the server lets it do, and the checks that the
// honest side lost nothing.
//
// The checks read only what any deployment has: the streams (as the
// coordinator user, on a connection of the harness's own), the verdicts the
// SDK calls return, the coordinator's public Stats and whether its Run
// returned, and audit.Run. They do not depend on lease id formats, inbox or
// consumer names, or on the honest workers' core subscriptions.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/worker"
)

// attackCast is the cast of the attack suite: the coordinator, a dispatcher,
// the honest workers w1 and w3, and the attacker w2.
var attackCast = []auth.Actor{
	{Name: "coord", Role: auth.RoleCoordinator},
	{Name: "disp", Role: auth.RoleDispatcher},
	{Name: "w1", Role: auth.RoleWorker},
	{Name: "w2", Role: auth.RoleWorker},
	{Name: "w3", Role: auth.RoleWorker},
}

// honestInputFilters match every input an honest actor can publish.
var honestInputFilters = []string{
	events.ActorInputFilter(events.RoleWorker, "w1"),
	events.ActorInputFilter(events.RoleWorker, "w3"),
	events.ActorInputFilter(events.RoleOps, "disp"),
}

const (
	// honestVerdictTimeout bounds every honest SDK call.
	honestVerdictTimeout = 5 * time.Second
	// honestAckTimeout is the ACK window of the dispatcher's offers.
	honestAckTimeout = 5 * time.Second
	// defaultHonestLease is the lease duration of the honest leases.
	defaultHonestLease = 3 * time.Second
)

// logTail keeps the last lines a logger wrote (the coordinator's), to show
// them when a test fails.
type logTail struct {
	mu    sync.Mutex
	lines []string
}

const logTailLines = 40

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if len(l.lines) == logTailLines {
			copy(l.lines, l.lines[1:])
			l.lines = l.lines[:logTailLines-1]
		}
		l.lines = append(l.lines, line)
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// attackEnv is an env with the attack cast, a coordinator that logs into a
// tail, and a connection of the harness's own with the coordinator's
// credentials, for reading the streams.
type attackEnv struct {
	*env
	reader *client  // the harness's reads; never the coordinator's connection
	log    *logTail // the coordinator's log (info and above)
	// noSnapshots: coordinators take no snapshot, so that a restarted one
	// verifies the whole decision stream before it goes live.
	noSnapshots bool
	coord       func(*coordinator.Config) // shapes coordinatorConfig's answer (nil: nothing)
}

// newAttackEnv starts a server with the generated configuration of
// attackCast and a live coordinator.
func newAttackEnv(t *testing.T) *attackEnv {
	t.Helper()
	return newAttackEnvWith(t, false)
}

// newAttackEnvWith is newAttackEnv, with coordinators that take no
// snapshots if noSnapshots.
func newAttackEnvWith(t *testing.T, noSnapshots bool) *attackEnv {
	t.Helper()
	return newAttackEnvOpts(t, attackOpts{noSnapshots: noSnapshots})
}

// attackOpts shape an attack environment.
type attackOpts struct {
	noSnapshots bool
	quotas      *streams.Quotas // the workers' quotas (auth.Options.Quotas); nil: none
	storeLimit  int64           // auth.Options.StoreLimit
	maxStore    int64           // the server's JetStream file store (0: unbounded)
	coord       func(*coordinator.Config)
}

// newAttackEnvOpts is newAttackEnv shaped by o.
func newAttackEnvOpts(t *testing.T, o attackOpts) *attackEnv {
	t.Helper()
	b := generate(t, auth.Options{Actors: attackCast, Quotas: o.quotas, StoreLimit: o.storeLimit})
	srv := testutil.StartServer(t, testutil.ConfigFile(b.ServerConfigPath()), func(c *embedded.Config) { c.MaxStore = o.maxStore })
	e := &attackEnv{env: &env{b: b, srv: srv, url: srv.ClientURL()}, log: &logTail{}, noSnapshots: o.noSnapshots, coord: o.coord}
	e.reader = connect(t, b, e.url, "coord")
	e.startCoordinator(t, e.coordinatorConfig())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("coordinator log (last %d lines):\n%s", logTailLines, e.log)
		}
	})
	return e
}

func (e *attackEnv) coordinatorConfig() coordinator.Config {
	cfg := coordinator.Config{
		LeaderTTL:     3 * time.Second,
		SnapshotEvery: 200, SnapshotInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if e.noSnapshots {
		cfg.SnapshotEvery = -1
	}
	if e.coord != nil {
		e.coord(&cfg)
	}
	return cfg
}

// restartCoordinator stops the coordinator and starts a new one (a new
// connection, a new Coordinator), and reports whether it went live within
// 10 s.
func (e *attackEnv) restartCoordinator(t *testing.T) bool {
	t.Helper()
	e.stop()
	e.launchCoordinator(t, e.coordinatorConfig())
	deadline := time.Now().Add(10 * time.Second)
	for !e.c.Stats().Live {
		if time.Now().After(deadline) {
			t.Errorf("the restarted coordinator is not live after 10 s: %+v", e.c.Stats())
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// stream returns a handle on stream name, read as the coordinator user.
func (e *attackEnv) stream(t testing.TB, name string) jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.reader.js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s
}

// lastSeqs returns the last sequences of the input and decision streams.
func (e *attackEnv) lastSeqs(t testing.TB) (in, out uint64) {
	t.Helper()
	return e.stream(t, "TENURE_IN").CachedInfo().State.LastSeq, e.stream(t, "TENURE_OUT").CachedInfo().State.LastSeq
}

// storedDecision is a decision read back from the decision stream.
type storedDecision struct {
	seq     uint64
	subject string
	d       events.Decision
}

// decisions reads every decision stored (message by message, with no
// consumer: an attacker may have used up the stream's consumers).
func (e *attackEnv) decisions(t testing.TB) []storedDecision {
	t.Helper()
	s := e.stream(t, "TENURE_OUT")
	st := s.CachedInfo().State
	var out []storedDecision
	for seq := st.FirstSeq; st.Msgs > 0 && seq <= st.LastSeq; seq++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err := s.GetMsg(ctx, seq)
		cancel()
		if err != nil {
			t.Fatalf("decision %d: %v", seq, err)
		}
		d, err := events.DecodeDecision(m.Data)
		if err != nil {
			t.Errorf("decision %d on %s does not decode: %v", seq, m.Subject, err)
			continue
		}
		out = append(out, storedDecision{seq: m.Sequence, subject: m.Subject, d: d})
	}
	return out
}

// verdictsByCause indexes the verdicts (the decisions that are not derived)
// by the input that caused them.
func verdictsByCause(ds []storedDecision) map[uint64][]storedDecision {
	m := make(map[uint64][]storedDecision)
	for _, sd := range ds {
		if !sd.d.Kind.Derived() {
			m[sd.d.Cause] = append(m[sd.d.Cause], sd)
		}
	}
	return m
}

// storedInput is an input's sequence and subject.
type storedInput struct {
	seq     uint64
	subject string
}

// inputs returns the stored inputs matching any of filters, in stream
// order, with no consumer (one "next message for subject" get each).
func (e *attackEnv) inputs(t testing.TB, filters ...string) []storedInput {
	t.Helper()
	s := e.stream(t, "TENURE_IN")
	var out []storedInput
	for _, f := range filters {
		for seq := uint64(1); ; {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(f))
			cancel()
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				t.Fatalf("inputs on %s from %d: %v", f, seq, err)
			}
			out = append(out, storedInput{m.Sequence, m.Subject})
			seq = m.Sequence + 1
		}
	}
	return out
}

// checkHonest stops the honest workload and checks that the honest side
// lost nothing: every SDK call of the honest workers and of the dispatcher
// returned its verdict and no lease was lost but by its holder's own
// completion (h.stop), the coordinator is still running, live and never had
// to resynchronise, it has caught up with every stored input, every input of
// an honest actor has its verdict(s) in the decision stream, and the audit
// of the whole log is clean.
func (e *attackEnv) checkHonest(t *testing.T, h *honest) {
	t.Helper()
	h.stop(t)
	e.checkCoordinator(t)
	e.checkVerdicts(t, honestInputFilters...)
	e.checkAudit(t)
}

// checkCoordinator checks that the coordinator's Run has not returned, that
// it is live and was never knocked back to standby (one session, no
// authority lost), and waits (10 s at most) until it has folded every
// stored input and stored every decision.
func (e *attackEnv) checkCoordinator(t *testing.T) {
	t.Helper()
	if done, err := e.run.exited(); done {
		t.Errorf("the coordinator stopped: its Run returned %v", err)
		return
	}
	// Wait for it to catch up, for 10 s at most, or 3 s if it is not live.
	var in, out uint64
	start := time.Now()
	var notLive time.Time
	for ; ; time.Sleep(10 * time.Millisecond) {
		in, out = e.lastSeqs(t)
		st := e.c.Stats()
		if st.Live && st.InputsFolded == in && st.DecisionsStored == out {
			break
		}
		if !st.Live && notLive.IsZero() {
			notLive = time.Now()
		} else if st.Live {
			notLive = time.Time{}
		}
		if time.Since(start) > 10*time.Second || !notLive.IsZero() && time.Since(notLive) > 3*time.Second {
			t.Errorf("the coordinator has not caught up after %v: %+v; the input stream ends at %d, the decision stream at %d",
				time.Since(start).Round(time.Millisecond), st, in, out)
			break
		}
	}
	st := e.c.Stats()
	if !st.Live {
		t.Errorf("the coordinator is not live: %+v", st)
	}
	if st.Sessions != 1 || st.LostAuthority != 0 {
		t.Errorf("the coordinator was knocked out of its live session: %d sessions (want 1), %d appends refused for lost authority (want 0)", st.Sessions, st.LostAuthority)
	}
}

// checkVerdicts checks that every stored input matching filters has at
// least one verdict (a decision that is not derived, whose cause is the
// input).
func (e *attackEnv) checkVerdicts(t *testing.T, filters ...string) {
	t.Helper()
	ins := e.inputs(t, filters...)
	by := verdictsByCause(e.decisions(t))
	var missing, foreign []string
	for _, in := range ins {
		vs := by[in.seq]
		if len(vs) == 0 {
			missing = append(missing, fmt.Sprintf("%d %s", in.seq, in.subject))
		}
		// A verdict names the identity of the input that caused it.
		actor := strings.Split(in.subject, ".")[3]
		for _, v := range vs {
			if v.d.Actor != actor {
				foreign = append(foreign, fmt.Sprintf("input %d on %s: verdict %d %s/%s on %s names the input of %s %s",
					in.seq, in.subject, v.seq, v.d.Kind, v.d.Reason, v.subject, v.d.Role, v.d.Actor))
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d honest inputs have no verdict, e.g.:\n  %s", len(missing), len(ins), strings.Join(first(missing, 10), "\n  "))
	}
	if len(foreign) > 0 {
		t.Errorf("%d verdicts of honest inputs were not derived from them, e.g.:\n  %s", len(foreign), strings.Join(first(foreign, 10), "\n  "))
	}
}

// checkEveryInputDecided checks that every stored input, whoever sent it,
// has a verdict.
func (e *attackEnv) checkEveryInputDecided(t *testing.T) map[uint64][]storedDecision {
	t.Helper()
	in, _ := e.lastSeqs(t)
	by := verdictsByCause(e.decisions(t))
	var missing []uint64
	for seq := uint64(1); seq <= in; seq++ {
		if len(by[seq]) == 0 {
			missing = append(missing, seq)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d stored inputs have no verdict, e.g. %v", len(missing), in, first(missing, 10))
	}
	return by
}

// checkAudit replays the whole log with audit.Run, as the coordinator user,
// and fails unless it is reproduced.
func (e *attackEnv) checkAudit(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	rep, err := audit.Run(ctx, audit.Config{JS: e.reader.js, StallTimeout: 10 * time.Second})
	if err != nil {
		t.Errorf("audit: %v", err)
		return
	}
	if !rep.OK() {
		var b bytes.Buffer
		_ = audit.WriteSummary(&b, rep, 5)
		t.Errorf("audit: the log is not reproduced (%d problems):\n%s", rep.Problems(), b.String())
	}
}

func first[T any](s []T, n int) []T { return s[:min(len(s), n)] }

// honestConfig shapes the honest workload.
type honestConfig struct {
	Lease   time.Duration // duration of every honest lease (default defaultHonestLease)
	Workers []string      // the workers that start at once (default w1 and w3)
	Prefix  string        // of the job ids (default "h"), so that two workloads never share a job
}

// honest is the honest side at work: each worker acquires leases one after
// the other (short leases the SDK renews, a progress report, a successful
// result), and the dispatcher offers jobs to the running workers in turn,
// which accept them and do the same. Every failure is recorded; nothing in
// it calls t from its goroutines.
type honest struct {
	e      *attackEnv
	cfg    honestConfig
	ctx    context.Context // cancelled by stop
	cancel context.CancelFunc
	disp   *ops.Client
	main   sync.WaitGroup // the acquire loops and the dispatcher
	offers sync.WaitGroup // the offer loops, which end when their worker is closed
	ending sync.Map       // worker.FencingToken -> true: leases being completed

	mu        sync.Mutex
	problems  []string
	notes     []string // asynchronous errors the SDK reported (logged, not failures)
	completed map[string]int
	accepted  int // offers accepted and completed
	running   []string
	workers   []*worker.Worker
	offerDone map[string]chan struct{}
	stopped   bool
}

// startHonest starts the honest workload and waits until each of its
// workers has completed a lease and an offer has been accepted and
// completed.
func (e *attackEnv) startHonest(t *testing.T, cfg honestConfig) *honest {
	t.Helper()
	if cfg.Lease == 0 {
		cfg.Lease = defaultHonestLease
	}
	if cfg.Workers == nil {
		cfg.Workers = []string{"w1", "w3"}
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "h"
	}
	h := &honest{e: e, cfg: cfg, completed: map[string]int{}, offerDone: map[string]chan struct{}{}}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	t.Cleanup(h.halt) // whatever happens to the test, nothing outlives it
	d := connect(t, e.b, e.url, "disp")
	var err error
	if h.disp, err = ops.New(d.nc, "disp"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.disp.Close() })
	for _, id := range cfg.Workers {
		if err := h.join(t, id); err != nil {
			t.Fatalf("honest worker %s: %v", id, err)
		}
	}
	h.main.Add(1)
	go h.dispatch()
	if !h.waitProgress(t, 1, 30*time.Second) {
		t.FailNow()
	}
	return h
}

// join connects honest worker id (worker.Connect with its own credentials)
// and starts its loops; an error is recorded as a problem and returned.
func (h *honest) join(t *testing.T, id string) error {
	t.Helper()
	c := connect(t, h.e.b, h.e.url, id)
	w, err := worker.Connect(c.nc, id, worker.WithVerdictTimeout(honestVerdictTimeout),
		worker.WithErrorHandler(func(err error) { h.note("%s: %v", id, err) }))
	if err != nil {
		h.problem("%s: worker.Connect: %v", id, err)
		return err
	}
	h.mu.Lock()
	h.workers = append(h.workers, w)
	h.running = append(h.running, id)
	h.mu.Unlock()
	h.main.Add(1)
	go h.acquireLoop(id, w)
	h.offers.Add(1)
	go h.offerLoop(id, w)
	return nil
}

func (h *honest) problem(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.problems = append(h.problems, fmt.Sprintf(format, args...))
}

func (h *honest) note(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.notes) < 100 {
		h.notes = append(h.notes, fmt.Sprintf(format, args...))
	}
}

func (h *honest) leaseOptions(id string) []worker.LeaseOption {
	return []worker.LeaseOption{
		worker.WithLeaseDuration(h.cfg.Lease),
		worker.WithRenewErrorHandler(func(l *worker.Lease, err error) {
			var v *worker.VerdictError
			if _, ending := h.ending.Load(l.Token()); ending && errors.As(err, &v) && v.Reason == events.ReasonLeaseEnded {
				return // an automatic renewal that crossed the lease's own completion
			}
			h.problem("%s: renewal of %s: %v", id, l.Token(), err)
		}),
	}
}

// pause waits a little after a failed call, or until stop.
func (h *honest) pause() {
	select {
	case <-h.ctx.Done():
	case <-time.After(100 * time.Millisecond):
	}
}

func (h *honest) acquireLoop(id string, w *worker.Worker) {
	defer h.main.Done()
	for i := 0; h.ctx.Err() == nil; i++ {
		job := fmt.Sprintf("%s-%s-%d", h.cfg.Prefix, id, i)
		l, err := w.Acquire(context.Background(), job, h.leaseOptions(id)...)
		if err != nil {
			h.problem("%s: acquire %s: %v", id, job, err)
			h.pause()
			continue
		}
		if h.work(id, l) {
			h.mu.Lock()
			h.completed[id]++
			h.mu.Unlock()
		}
	}
}

func (h *honest) offerLoop(id string, w *worker.Worker) {
	defer h.offers.Done()
	for o := range w.Offers() {
		l, err := o.Accept(context.Background(), h.leaseOptions(id)...)
		ok := false
		if err != nil {
			h.problem("%s: accept the offer of %s: %v", id, o.Job, err)
		} else {
			ok = h.work(id, l)
		}
		h.mu.Lock()
		if ok {
			h.accepted++
		}
		if c := h.offerDone[o.Job]; c != nil {
			close(c)
			delete(h.offerDone, o.Job)
		}
		h.mu.Unlock()
	}
}

// work holds lease l until the SDK has renewed it once, reports progress
// and completes it; it reports whether all of it was accepted and the lease
// ended only by its completion.
func (h *honest) work(id string, l *worker.Lease) bool {
	first := l.Expires()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(3 * h.cfg.Lease)
	for renewed := false; !renewed; {
		select {
		case <-l.Context().Done():
			h.problem("%s: lease %s lost: %v", id, l.Token(), context.Cause(l.Context()))
			return false
		case <-deadline:
			h.problem("%s: lease %s not renewed within %v", id, l.Token(), 3*h.cfg.Lease)
			return false
		case <-tick.C:
			renewed = l.Expires().After(first)
		}
	}
	if err := l.Progress(context.Background(), 50); err != nil {
		h.problem("%s: progress on %s: %v", id, l.Token(), err)
		return false
	}
	h.ending.Store(l.Token(), true)
	if err := l.Complete(context.Background(), events.OutcomeSuccess, ""); err != nil {
		h.problem("%s: complete %s: %v", id, l.Token(), err)
		return false
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, worker.ErrLeaseEnded) {
		h.problem("%s: lease %s ended with %v, not by its completion", id, l.Token(), cause)
		return false
	}
	return true
}

// dispatch offers jobs to the running workers in turn, each once the
// previous one was accepted and completed.
func (h *honest) dispatch() {
	defer h.main.Done()
	for i := 0; h.ctx.Err() == nil; i++ {
		h.mu.Lock()
		holder := h.running[i%len(h.running)]
		job := fmt.Sprintf("%s-offer-%d", h.cfg.Prefix, i)
		done := make(chan struct{})
		h.offerDone[job] = done
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), honestVerdictTimeout)
		d, err := h.disp.Offer(ctx, job, holder, h.cfg.Lease.Milliseconds(), honestAckTimeout.Milliseconds())
		cancel()
		if err == nil && d.Kind != events.KindOffered {
			err = fmt.Errorf("verdict %s/%s", d.Kind, d.Reason)
		}
		if err != nil {
			h.problem("disp: offer %s to %s: %v", job, holder, err)
			h.pause()
			continue
		}
		select {
		case <-done:
		case <-time.After(honestAckTimeout + 3*h.cfg.Lease + 2*honestVerdictTimeout):
			h.problem("disp: offer %s to %s: not accepted and completed", job, holder)
		}
	}
}

// progress returns the leases completed by each running worker and the
// offers accepted and completed.
func (h *honest) progress() (map[string]int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := make(map[string]int, len(h.running))
	for _, id := range h.running {
		m[id] = h.completed[id]
	}
	return m, h.accepted
}

// waitProgress waits until every running worker has completed n more
// leases than now, and n more offers were accepted and completed; it fails
// t and returns false after timeout.
func (h *honest) waitProgress(t *testing.T, n int, timeout time.Duration) bool {
	t.Helper()
	base, baseOffers := h.progress()
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		cur, offers := h.progress()
		ok := offers >= baseOffers+n
		for id, c := range cur {
			ok = ok && c >= base[id]+n
		}
		if ok {
			return true
		}
		if time.Now().After(deadline) {
			t.Errorf("the honest work did not go on: after %v, leases completed %v (before: %v), offers completed %d (before: %d)",
				timeout, cur, base, offers, baseOffers)
			return false
		}
	}
}

// halt stops the workload without checking anything (a test cleanup).
func (h *honest) halt() {
	h.cancel()
	done := make(chan struct{})
	go func() {
		h.main.Wait()
		h.mu.Lock()
		ws := h.workers
		h.mu.Unlock()
		for _, w := range ws {
			_ = w.Close()
		}
		h.offers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
}

// stop stops the workload (the loops finish the lease in hand) and fails t
// if any honest call did not return its verdict, any lease was lost, or the
// workload did not get anywhere.
func (h *honest) stop(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	stopped := h.stopped
	h.stopped = true
	h.mu.Unlock()
	if stopped {
		return
	}
	h.cancel()
	done := make(chan struct{})
	go func() { h.main.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Errorf("the honest workload did not stop within 30 s")
	}
	h.halt()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.notes) > 0 {
		t.Logf("honest SDK errors reported (%d): %s", len(h.notes), strings.Join(first(h.notes, 5), "; "))
	}
	if len(h.problems) > 0 {
		t.Errorf("the honest side lost something: %d problem(s), e.g.:\n  %s", len(h.problems), strings.Join(first(h.problems, 12), "\n  "))
	}
	for _, id := range h.running {
		if h.completed[id] == 0 {
			t.Errorf("honest worker %s completed no lease", id)
		}
	}
	if h.accepted == 0 {
		t.Errorf("no offer was accepted and completed")
	}
	t.Logf("honest work done: leases completed %v, offers accepted and completed %d", h.completed, h.accepted)
}

// attacker is w2: its own connection, with its own credentials, and what
// it can find out.
type attacker struct {
	*client
	e     *attackEnv
	names atomic.Int64
	slot  int // the consumer name pushConsumer used last (its goroutine only)
}

func (e *attackEnv) attacker(t *testing.T) *attacker {
	t.Helper()
	return &attacker{client: connect(t, e.b, e.url, "w2"), e: e}
}

// coordinatorSubs is what the strongest attacker knows, one whose
// prediction of the coordinator's inboxes succeeded: the subjects every
// connection of the coordinator user (but the harness's own) subscribes
// to, read from the server's monitoring in-process.
func (e *attackEnv) coordinatorSubs(t testing.TB) []string {
	t.Helper()
	mine, err := e.reader.nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	cz, err := e.srv.Server().Connz(&server.ConnzOptions{Subscriptions: true, Username: true, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	var subs []string
	for _, c := range cz.Conns {
		if c.AuthorizedUser == "coord" && c.Cid != mine {
			subs = append(subs, c.Subs...)
		}
	}
	return subs
}

// name returns a fresh consumer name.
func (a *attacker) name(prefix string) string {
	return fmt.Sprintf("%s%d", prefix, a.names.Add(1))
}

// publish stores body on w2's own input subject tail (after
// tenure.in.worker.w2.) and returns its input sequence.
func (a *attacker) publish(t testing.TB, tail, body string, opts ...jetstream.PublishOpt) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := a.js.Publish(ctx, "tenure.in.worker.w2."+tail, []byte(body), opts...)
	if err != nil {
		t.Fatalf("w2 publish %s: %v", tail, err)
	}
	return ack.Sequence
}

// inflate makes w2 the addressee of n decisions with a single input (a batch
// renew of n leases of jobs that do not exist: one verdict each), so that
// its decisions' sequences run ahead of the input stream's.
func (a *attacker) inflate(t testing.TB, n int) uint64 {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"v":1,"leases":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"job":"nothing-%d","lease_id":"L1","generation":1,"renew_seq":1}`, i)
	}
	b.WriteString(`]}`)
	return a.publish(t, "_.renew", b.String())
}

// pushConsumer creates, on TENURE_OUT, a push consumer of w2's own
// decisions delivering to deliver, from w2's latest decision (from the
// first at or after decision from, if from is not 0). w2 may create
// consumers filtered to tenure.out.w2.>; their deliver subject is in the
// request body, which permissions do not see.
func (a *attacker) pushConsumer(ctx context.Context, deliver string, from uint64) error {
	// Only its own consumer names reach the decision stream (the last is
	// kept for verdict): made anew under the next one each time.
	a.slot = (a.slot + 1) % (events.WorkerConsumers - 1)
	name := events.WorkerConsumerName("w2", a.slot)
	_ = a.js.DeleteConsumer(ctx, "TENURE_OUT", name)
	cfg := jetstream.ConsumerConfig{
		Name: name, FilterSubject: events.AddresseeFilter("w2"),
		DeliverSubject: deliver, DeliverPolicy: jetstream.DeliverLastPolicy,
		AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute, MemoryStorage: true,
	}
	if from != 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	_, err := a.js.CreateConsumer(ctx, "TENURE_OUT", cfg)
	return err
}

// pubAckTo publishes one of w2's own inputs with reply subject reply: the
// input stream's PubAck goes there.
func (a *attacker) pubAckTo(reply string) error {
	return a.nc.PublishMsg(&nats.Msg{Subject: "tenure.in.worker.w2.decoy.progress", Reply: reply,
		Data: []byte(`{"v":1,"lease_id":"L1","generation":1,"progress_seq":1,"value":1}`)})
}

// apiReplyTo sends JetStream API requests w2 may make with reply subject
// reply: the API's answers (a stream info, an error) go there.
func (a *attacker) apiReplyTo(reply string) error {
	return errors.Join(
		a.nc.PublishRequest("$JS.API.STREAM.INFO.TENURE_OUT", reply, nil),
		a.nc.PublishRequest("$JS.API.CONSUMER.INFO.TENURE_OUT.nothing", reply, nil),
	)
}

// awaitDecisions reads the decision stream as it grows until done says the
// decisions read so far (all of them, in stream order) are enough, or
// timeout; it returns them and whether done said so.
func (e *attackEnv) awaitDecisions(t testing.TB, timeout time.Duration, done func([]storedDecision) bool) ([]storedDecision, bool) {
	t.Helper()
	s := e.stream(t, "TENURE_OUT")
	var seen []storedDecision
	next := uint64(1)
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		info, err := s.Info(ctx)
		cancel()
		if err != nil {
			t.Fatalf("decision stream info: %v", err)
		}
		for ; next <= info.State.LastSeq; next++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			m, err := s.GetMsg(ctx, next)
			cancel()
			if err != nil {
				t.Fatalf("decision %d: %v", next, err)
			}
			d, err := events.DecodeDecision(m.Data)
			if err != nil {
				t.Fatalf("decision %d on %s does not decode: %v", next, m.Subject, err)
			}
			seen = append(seen, storedDecision{seq: m.Sequence, subject: m.Subject, d: d})
		}
		if done(seen) {
			return seen, true
		}
		if time.Now().After(deadline) {
			return seen, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitVerdicts waits until each input of seqs has a verdict and returns
// the verdicts by cause (those found, after timeout).
func (e *attackEnv) awaitVerdicts(t testing.TB, timeout time.Duration, seqs ...uint64) map[uint64][]storedDecision {
	t.Helper()
	var by map[uint64][]storedDecision
	e.awaitDecisions(t, timeout, func(ds []storedDecision) bool {
		by = verdictsByCause(ds)
		for _, s := range seqs {
			if len(by[s]) == 0 {
				return false
			}
		}
		return true
	})
	return by
}

// verdict publishes body on w2's subject tail and returns its verdict, read
// as w2 reads its own decisions (a JetStream consumer filtered to
// tenure.out.w2.>, created before the publish with deliver policy new: a
// worker has no stream info).
func (a *attacker) verdict(t testing.TB, tail, body string) events.Decision {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	// Its own consumer, under the one of its names it keeps for this (a
	// worker may use no other names); made anew from the stream's end.
	name := events.WorkerConsumerName("w2", events.WorkerConsumers-1)
	_ = a.js.DeleteConsumer(ctx, "TENURE_OUT", name)
	cons, err := a.js.CreateConsumer(ctx, "TENURE_OUT", jetstream.ConsumerConfig{
		Name: name, FilterSubject: events.AddresseeFilter("w2"), AckPolicy: jetstream.AckNonePolicy,
		DeliverPolicy: jetstream.DeliverNewPolicy, InactiveThreshold: time.Minute,
	})
	if err != nil {
		t.Fatalf("w2 reading its decisions: %v", err)
	}
	seq := a.publish(t, tail, body)
	for {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("w2: the verdict of its input %d on %s: %v", seq, tail, err)
		}
		d, err := events.DecodeDecision(m.Data())
		if err != nil {
			t.Fatalf("w2: decision on %s: %v", m.Subject(), err)
		}
		if d.Cause == seq && !d.Kind.Derived() {
			return d
		}
	}
}

// coordinatorID is what w2 is told of the coordinator's id (it cannot list
// the decision subjects itself: TestAttackDecisionSubjectsEnumerated; the
// strongest attacker knows it anyway): the addressee of the default
// policy's verdict (or of a tick's), as the decision stream's info lists
// it to the harness.
func (a *attacker) coordinatorID(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := a.e.stream(t, "TENURE_OUT")
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("tenure.out.*._.*"))
	if err != nil {
		t.Fatalf("w2 reading the decision subjects: %v", err)
	}
	for subject := range info.State.Subjects {
		if tok := strings.Split(subject, "."); len(tok) == 5 && (tok[4] == "ticked" || tok[4] == "policy_set") {
			return tok[2]
		}
	}
	t.Fatalf("w2 found no coordinator in %v", info.State.Subjects)
	return ""
}

// aimLoop runs for d (or until the coordinator's Run returns): every few
// milliseconds it lists the coordinator's subscriptions and calls aim once
// for each subject it has not aimed at yet among those keep selects. It
// returns how many subjects it aimed at.
func (e *attackEnv) aimLoop(t *testing.T, d time.Duration, keep func(sub string) bool, aim func(sub string)) int {
	t.Helper()
	aimed := map[string]bool{}
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		if done, _ := e.run.exited(); done {
			break
		}
		for _, sub := range e.coordinatorSubs(t) {
			if !aimed[sub] && keep(sub) {
				aimed[sub] = true
				aim(sub)
			}
		}
		time.Sleep(2 * time.Millisecond) // pacing of the polls
	}
	return len(aimed)
}

// coordinatorInbox reports whether sub is a literal subject under the
// coordinator's inbox prefix: what a consumer's deliveries or a reply can
// be sent to as it is.
func coordinatorInbox(sub string) bool {
	return strings.HasPrefix(sub, auth.InboxPrefix("coord")+".") && !strings.ContainsAny(sub, "*>")
}

// hogConsumers creates n consumers on TENURE_OUT filtered to w2's own
// decisions (ephemeral pull consumers the server keeps for an hour of
// inactivity), 32 requests at a time, and returns how many were created and
// the errors of the others, counted by description.
func (a *attacker) hogConsumers(n int) (int, map[string]int) {
	var mu sync.Mutex
	made, errs := 0, map[string]int{}
	// Every way a worker could ask: its own consumer names first, then made
	// up ones, through the plain JetStream API and under its account's
	// worker API prefix; many at once, since refused requests get no answer
	// (a permissions violation) and wait for their timeout.
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	for i := range n {
		name := a.name("hog")
		if i < events.WorkerConsumers {
			name = events.WorkerConsumerName("w2", i)
		}
		api := "$JS.API."
		if i%2 == 0 || i < events.WorkerConsumers {
			api = streams.Topology{}.WorkerAPIPrefix() + "."
		}
		subject := api + "CONSUMER.CREATE.TENURE_OUT." + name + "." + events.AddresseeFilter("w2")
		body := fmt.Sprintf(`{"stream_name":"TENURE_OUT","action":"create","config":{"name":%q,"filter_subject":%q,`+
			`"deliver_policy":"new","ack_policy":"none","inactive_threshold":%d,"mem_storage":true,"num_replicas":1}}`,
			name, events.AddresseeFilter("w2"), time.Hour.Nanoseconds())
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			resp, err := a.nc.Request(subject, []byte(body), 2*time.Second)
			var r struct {
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs[err.Error()]++
			case json.Unmarshal(resp.Data, &r) != nil:
				errs["bad answer: "+string(resp.Data)]++
			case r.Error != nil:
				errs[r.Error.Description]++
			default:
				made++
			}
		}()
	}
	wg.Wait()
	return made, errs
}

// floodResult is the outcome of one publish of a flood.
type floodResult struct {
	seq uint64 // the input sequence it was stored as (0: not stored)
	err error  // why not
}

// flood publishes n bodies of size bytes on w2's own input subjects
// (tenure.in.worker.w2.<prefix>-<i>.progress), asynchronously, as fast as
// the client lets it (at most 512 awaiting their PubAck), and returns each
// publish's outcome; a publish the stream never answers fails after 30 s.
func (a *attacker) flood(t testing.TB, prefix string, n, size int) []floodResult {
	t.Helper()
	js, err := jetstream.New(a.nc, jetstream.WithPublishAsyncMaxPending(512), jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"v":1,"lease_id":"L1","generation":1,"progress_seq":1,"value":1}`)
	body = append(body, bytes.Repeat([]byte(" "), size-len(body))...)
	futures := make([]jetstream.PubAckFuture, n)
	out := make([]floodResult, n)
	for i := range n {
		f, err := js.PublishAsync(fmt.Sprintf("tenure.in.worker.w2.%s-%d.progress", prefix, i), body)
		if err != nil {
			out[i].err = err
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			out[i].seq = ack.Sequence
		case err := <-f.Err():
			out[i].err = err
		}
	}
	return out
}
