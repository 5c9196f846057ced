package drain

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/coordinator/coordtest"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/chaos"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// WorkerEnv, set, makes a test binary a drain worker process: its value
// is the WorkerConfig as JSON. A package whose tests call Run dispatches
// on it in its TestMain (WorkerMain).
const WorkerEnv = "TENURE_DRAIN_WORKER"

// WorkerMain runs the drain worker process whose configuration is in
// $WorkerEnv and returns its exit status; hooks, if not nil, gives the
// worker's Hooks (its effect) for that configuration, and a function to
// call when it ends.
func WorkerMain(hooks func(WorkerConfig) (Hooks, func(), error)) int {
	var cfg WorkerConfig
	if err := json.Unmarshal([]byte(os.Getenv(WorkerEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "drain worker:", err)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var h Hooks
	if hooks != nil {
		var done func()
		var err error
		if h, done, err = hooks(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "drain worker:", err)
			return 1
		}
		if done != nil {
			defer done()
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := RunWorkerWith(ctx, cfg, h); err != nil {
		fmt.Fprintln(os.Stderr, "drain worker:", err)
		return 1
	}
	return 0
}

// The drain's parameters.
const (
	queue        = "drain"
	storeSubject = "drain.store"
	workers      = 3
	concurrency  = 8
	lease        = 2 * time.Second // each attempt's lease
	ackTimeout   = 1500 * time.Millisecond
	capacityTTL  = 3 * time.Second
	pauseFor     = 3 * lease // the SIGSTOP: longer than a lease and a capacity announcement
	failRate     = 0.15
	maxWork      = 8 * time.Millisecond
	maxAttempts  = 100 // never spent: a job that goes DEAD is a finding
	// paused is the worker SIGSTOPped: a careless one (WorkerConfig), whose
	// handlers, longer, are nearly all at work when it stops, and write
	// when it resumes, after their jobs' next attempts wrote.
	paused = 1
)

// proc is one worker process of the drain, killed, paused and restarted
// by the test.
type proc struct {
	t    *testing.T
	id   string
	cfg  WorkerConfig
	log  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	errs []string // exits other than the test's SIGKILLs
}

func (p *proc) start() {
	p.t.Helper()
	js, err := json.Marshal(p.cfg)
	if err != nil {
		p.t.Fatal(err)
	}
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), WorkerEnv+"="+string(js))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		p.t.Fatal(err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); err != nil && !(ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL) {
			p.mu.Lock()
			p.errs = append(p.errs, fmt.Sprintf("%s exited: %v", p.id, err))
			p.mu.Unlock()
		}
		close(done)
	}()
}

func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.cmd.Process.Signal(sig)
}

// stop sends sig and waits for the process to exit.
func (p *proc) stop(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.t.Errorf("%s did not exit after %v; killing it", p.id, sig)
		_ = cmd.Process.Kill()
		<-done
	}
}

// progress counts the queue's jobs that have ended, from a core
// subscription to the decisions (the checks read the streams).
type progress struct {
	mu     sync.Mutex
	ended  map[string]bool
	ch     chan struct{}      // closed and replaced when a job ends
	active map[string]holding // job -> the worker that holds it ACTIVE, since when
}

// holding is a job held ACTIVE: by whom, since when (as the decision was
// read).
type holding struct {
	worker string
	since  time.Time
}

func watchProgress(t *testing.T, nc *nats.Conn) *progress {
	p := &progress{ended: make(map[string]bool), ch: make(chan struct{}), active: make(map[string]holding)}
	sub, err := nc.Subscribe(events.DecisionPrefix+".>", func(m *nats.Msg) {
		d, err := events.DecodeDecision(m.Data)
		if err != nil || d.Job.Queue != queue {
			return
		}
		p.mu.Lock()
		if d.Job.State == events.StateActive {
			if h, ok := p.active[d.Job.ID]; !ok || h.worker != d.Job.Holder {
				p.active[d.Job.ID] = holding{d.Job.Holder, time.Now()}
			}
		} else {
			delete(p.active, d.Job.ID)
		}
		p.mu.Unlock()
		switch d.Job.State { // not FAILED: a failed attempt is retried
		case events.StateCompleted, events.StateDead, events.StateCancelled:
		default:
			return
		}
		p.mu.Lock()
		if !p.ended[d.Job.ID] {
			p.ended[d.Job.ID] = true
			close(p.ch)
			p.ch = make(chan struct{})
		}
		p.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	return p
}

// holds reports how many jobs worker holds ACTIVE, as the decisions
// read so far say, and how many of them it took within the last within.
func (p *progress) holds(worker string, within time.Duration) (n, fresh int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.active {
		if h.worker == worker {
			n++
			if time.Since(h.since) < within {
				fresh++
			}
		}
	}
	return n, fresh
}

func (p *progress) count() (int, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ended), p.ch
}

// fault is one fault of the schedule, made once the given fraction of the
// jobs has ended.
type fault struct {
	at     float64
	kind   string // "kill" or "pause"
	worker int
}

// Size is the size of a drain: $TENURE_DRAIN_JOBS, or 1000 (200 with
// -short).
func Size(t testing.TB) int {
	if s := os.Getenv("TENURE_DRAIN_JOBS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("TENURE_DRAIN_JOBS=%q: want a positive number", s)
		}
		return n
	}
	if testing.Short() {
		return 200
	}
	return 1000
}

// Options configure Run.
type Options struct {
	Jobs int // jobs submitted
	// Dir keeps the journals and the workers' logs (default: a temporary
	// directory of the test).
	Dir string
	// Extra is handed to every worker (WorkerConfig.Extra): what its
	// Hooks need (a database to connect to).
	Extra map[string]string
	// Store serves the drain's NATS Store, which the default effect
	// writes to (Outcome.Writes).
	Store bool
	// CarelessWork is the most each attempt of the paused (careless)
	// worker works before its effect (default 400 ms;
	// $TENURE_DRAIN_CARELESS_WORK overrides it, for runs to be compared):
	// longer, more of its attempts are in their handlers, rather than
	// being accepted or bound, when it is paused.
	CarelessWork time.Duration
	// StaleSeen reports whether the resource has refused a stale write
	// (with Store, the NATS Store's refusals are looked at without it).
	// Once the paused worker is resumed, Run waits up to staleWait for it
	// before stopping the workers: the careless worker's handlers write
	// when it runs again, which a loaded machine may schedule late (a
	// stress run stopped it before they did: no stale write refused).
	StaleSeen func() bool
}

// freshHold: the pause waits for the careless worker to hold a job it
// took less than this ago (its handler, working up to carelessWork, is
// then most likely still at work).
const freshHold = 50 * time.Millisecond

// staleWait bounds Run's wait for a stale write after the pause.
const staleWait = 20 * time.Second

// carelessWork is the paused worker's MaxWork: $TENURE_DRAIN_CARELESS_WORK,
// o.CarelessWork, or 50 times the others'.
func carelessWork(t testing.TB, o Options) time.Duration {
	if s := os.Getenv("TENURE_DRAIN_CARELESS_WORK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("TENURE_DRAIN_CARELESS_WORK=%q: want a positive duration", s)
		}
		return d
	}
	if o.CarelessWork > 0 {
		return o.CarelessWork
	}
	return 50 * maxWork
}

// Outcome is what a drain did, read back once every job ended.
type Outcome struct {
	Jobs      []string
	Decisions []events.Decision // the decision stream, in order
	Inputs    int
	Writes    []Write // the Store's, with Options.Store
	Elapsed   time.Duration
	Kills     int
	Pauses    int
}

// Run is the drain: three worker processes (this test binary again, with
// WorkerEnv set: the caller's TestMain calls WorkerMain) running
// worker.Run on one queue, with handlers that fail at random (retryably),
// SIGKILLed one at a time and restarted, one of them SIGSTOPped for
// longer than its leases and resumed, drain o.Jobs jobs. Run fails t if
// they do not all end in time, or chaos.Check finds anything in the log
// and the clients' journals; it returns what the drain did, for the
// caller's checks of the effects.
func Run(t *testing.T, o Options) *Outcome {
	t.Helper()
	n := o.Jobs
	dir := o.Dir
	if dir == "" {
		dir = t.TempDir()
	}
	if keep := os.Getenv("TENURE_DRAIN_KEEP"); keep != "" { // the journals and the workers' logs, for a look after
		dir = keep
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	srv := testutil.StartServer(t)
	admin, js := testutil.Connect(t, srv.ClientURL())
	cnc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cnc.Close) // after the coordinator has stopped
	// The default leadership lifetime (3 s): the drain's faults are the
	// workers'; with 600 ms, on two cores loaded by another suite, the
	// only coordinator's renewals came late.
	g := coordtest.RunGroup(t, coordinator.Config{ID: "c1", Conn: cnc, LeaderTTL: coordinator.DefaultLeaderTTL}, 0, 15*time.Second)

	var store Store
	if o.Store {
		if _, err := store.Serve(admin, storeSubject); err != nil {
			t.Fatal(err)
		}
	}
	prog := watchProgress(t, admin)
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}

	procs := make([]*proc, workers)
	for i := range procs {
		id := fmt.Sprintf("w%d", i+1)
		procs[i] = &proc{t: t, id: id, log: filepath.Join(dir, id+".log"), cfg: WorkerConfig{
			URL: srv.ClientURL(), ID: id, Queue: queue, Journal: filepath.Join(dir, id+".jsonl"), Store: storeSubject,
			Concurrency: concurrency, CapacityTTL: capacityTTL, FailRate: failRate, MaxWork: maxWork, Seed: uint64(i + 1),
			ReportErrors: os.Getenv("TENURE_DRAIN_KEEP") != "", Extra: o.Extra,
		}}
		if i == paused {
			procs[i].cfg.Careless, procs[i].cfg.MaxWork = true, carelessWork(t, o)
		}
		procs[i].start()
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.stop(syscall.SIGKILL)
		}
		if t.Failed() {
			for _, p := range procs {
				if b, err := os.ReadFile(p.log); err == nil {
					lines := strings.Split(strings.TrimSpace(string(b)), "\n")
					t.Logf("%s's log, last lines:\n%s", p.id, strings.Join(lines[max(0, len(lines)-15):], "\n"))
				}
			}
		}
	})

	start := time.Now()
	jobs := submit(t, srv.ClientURL(), filepath.Join(dir, "op1.jsonl"), n)
	t.Logf("%d jobs submitted in %v", n, time.Since(start).Round(time.Millisecond))

	// The pause comes near the end, so that the next attempts of the
	// paused worker's jobs (retried behind the queued jobs, by ready_at)
	// have written before it resumes; a large drain has one more, early,
	// whose jobs are retried after it resumed.
	schedule := []fault{{0.15, "kill", 0}, {0.35, "kill", 2}, {0.60, "kill", 0}, {0.80, "kill", 2}, {0.85, "pause", paused}}
	if n >= 5000 {
		schedule = append(schedule, fault{0.30, "pause", paused})
		sort.Slice(schedule, func(a, b int) bool { return schedule[a].at < schedule[b].at })
	}
	var faults sync.WaitGroup
	kills, pauses := 0, 0
	deadline := time.After(time.Minute + time.Duration(n)*20*time.Millisecond)
	for {
		done, ch := prog.count()
		for len(schedule) > 0 && float64(done) >= schedule[0].at*float64(n) {
			f := schedule[0]
			schedule = schedule[1:]
			p := procs[f.worker]
			switch f.kind {
			case "kill":
				kills++
				p.stop(syscall.SIGKILL)
				dropConsumers(t, js, p.id) // the dead process's consumers would hold its names for 30 s
				time.Sleep(100 * time.Millisecond)
				p.start()
			case "pause":
				// Paused while it holds leases it took a moment ago, so
				// that its handlers are still working (up to
				// carelessWork) and write after losing them: the stale
				// writes the drain must see refused. Paused at the
				// chosen moment alone, a loaded machine found its
				// handlers done and their results in flight (a drain
				// with no stale write refused, twice under a stress
				// run's load).
				for wait := time.Now().Add(10 * time.Second); time.Now().Before(wait); {
					if _, fresh := prog.holds(p.id, freshHold); fresh > 0 {
						break
					}
					time.Sleep(2 * time.Millisecond)
				}
				n, fresh := prog.holds(p.id, freshHold)
				t.Logf("%s holds %d jobs when paused, %d of them taken within %v", p.id, n, fresh, freshHold)
				pauses++
				p.signal(syscall.SIGSTOP)
				faults.Go(func() {
					time.Sleep(pauseFor)
					p.signal(syscall.SIGCONT)
				})
			}
			t.Logf("%v: %s %s after %d of %d jobs ended", time.Since(start).Round(time.Millisecond), f.kind, p.id, done, n)
		}
		if done == n {
			break
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%d of %d jobs ended after %v", done, n, time.Since(start).Round(time.Second))
		}
	}
	drained := time.Since(start)
	faults.Wait()
	seen := o.StaleSeen
	if seen == nil && o.Store {
		seen = func() bool {
			return slices.ContainsFunc(store.Writes(), func(w Write) bool { return !w.Accepted })
		}
	}
	if seen != nil && pauses > 0 {
		until := time.Now().Add(staleWait)
		for !seen() && time.Now().Before(until) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, p := range procs {
		p.stop(syscall.SIGTERM) // Run withdraws its capacity and returns
	}
	for _, p := range procs {
		for _, e := range p.errs {
			t.Error(e)
		}
	}

	// Check the streams once the coordinator has folded every input.
	ctx := context.Background()
	testutil.WaitFor(t, 15*time.Second, "the coordinator to catch up", func() bool {
		in, err1 := js.Stream(ctx, "TENURE_IN")
		out, err2 := js.Stream(ctx, "TENURE_OUT")
		if err1 != nil || err2 != nil {
			return false
		}
		st := g.Stats()[0]
		return st.InputsFolded == in.CachedInfo().State.LastSeq && st.DecisionsStored == out.CachedInfo().State.LastSeq
	})
	lg, err := chaos.ReadLog(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := chaos.NewJournals(dir).Read()
	if err != nil {
		t.Fatal(err)
	}
	cr := chaos.Check(lg, &chaos.Clients{Entries: entries, Coordinators: []string{"c1"}})
	for name, f := range map[string]chaos.Findings{"lost": cr.Lost, "phantom": cr.Phantom, "double holders": cr.DoubleHolders,
		"stale effects": cr.StaleEffects, "gaps": cr.Gaps} {
		if f.Count > 0 {
			t.Errorf("chaos.Check: %d %s: %s", f.Count, name, strings.Join(f.Items, "\n  "))
		}
	}
	ds := make([]events.Decision, 0, len(lg.Decisions))
	for _, m := range lg.Decisions {
		d, err := events.DecodeDecision(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	out := &Outcome{Jobs: jobs, Decisions: ds, Inputs: len(lg.Inputs), Elapsed: drained, Kills: kills, Pauses: pauses}
	if o.Store {
		out.Writes = store.Writes()
	}
	return out
}

// submit submits n jobs to the queue, as operator op1 on a journaled
// connection (each submit with a Msg-Id), and returns their ids.
func submit(t *testing.T, url, journal string, n int) []string {
	t.Helper()
	j, err := chaos.OpenJournal(journal)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	tap := chaos.NewTap(j)
	nc, err := nats.Connect(url, tap.Option())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]string, n)
	var acks []jetstream.PubAckFuture
	for i := range jobs {
		jobs[i] = fmt.Sprintf("d%05d", i)
		in := events.Input{Role: events.RoleOps, Actor: "op1", Job: jobs[i], Verb: events.VerbSubmit, Queue: queue,
			MaxAttempts: maxAttempts, BackoffMS: 10, BackoffMax: 200, LeaseMS: lease.Milliseconds(), AckTimeoutMS: ackTimeout.Milliseconds(),
			Payload: "job " + strconv.Itoa(i), HasPayload: true}
		f, err := js.PublishAsync(events.InputSubject(events.RoleOps, "op1", jobs[i], events.VerbSubmit), events.AppendInputBody(nil, &in),
			jetstream.WithMsgID("op1-submit-"+jobs[i]))
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, f)
		if len(acks) == 256 || i == n-1 {
			for _, f := range acks {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					t.Fatalf("submit %s: %v", f.Msg().Subject, err)
				case <-time.After(30 * time.Second):
					t.Fatalf("submit %s: no PubAck", f.Msg().Subject)
				}
			}
			acks = acks[:0]
		}
	}
	if err := tap.Err(); err != nil {
		t.Fatal(err)
	}
	return jobs
}

// dropConsumers deletes the decision consumers of worker id (a killed
// process's), so that its next process finds their names free.
func dropConsumers(t *testing.T, js jetstream.JetStream, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, streams.Topology{}.DecisionStream())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range events.WorkerConsumerNames(id) {
		_ = s.DeleteConsumer(ctx, name) // not found: not in use
	}
}
