package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// lockedRand is a seeded source shared by goroutines.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newLockedRand(seed uint64) *lockedRand {
	return &lockedRand{r: rand.New(rand.NewPCG(seed, 0xc4a05))}
}

func (l *lockedRand) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}

func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

func (l *lockedRand) Uint64() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Uint64()
}

func (l *lockedRand) Perm(n int) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Perm(n)
}

// between returns a duration in [lo, hi].
func (l *lockedRand) between(lo, hi time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return lo + time.Duration(l.r.Int64N(int64(hi-lo)+1))
}

// natsServer is one nats-server process with its own store.
type natsServer struct {
	p           *proc
	name        string
	port, route int
}

// batch is one batch of jobs: the work of one schedule.
type batch struct {
	n        int
	prefix   string
	jobs     []string
	deadline int64 // Unix ns: its jobs must have ended by then (0: still running)
}

// env is one system under test: nats-server processes, coordinator
// processes, worker processes and the orchestrator's dispatcher, with
// their stores, logs and journals in one directory.
type env struct {
	name    string // "single" or "cluster"
	lease   time.Duration
	tag     string // job id prefix
	dir     string
	cfg     *Config
	rng     *lockedRand
	rep     *Report
	er      *EnvReport
	servers []*natsServer
	locks   []*streams.DirLock // of the servers' stores
	urls    string
	coords  []*proc
	ids     []string
	board   *proc    // the web board (tenure ui)
	boards  []string // its URL, http://127.0.0.1:port
	workers []*proc
	// The hostile workers (tenure chaos hostile), their ids and control
	// file, and the round of attacks last opened.
	hostiles   []*proc
	hostileIDs []string
	hostileCtl string
	round      int
	minAttacks int        // per round: enough for every attack type to come up in the environment's schedules
	auth       *envAuth   // the generated credentials and server configuration
	nc         *nats.Conn // the orchestrator's own connection: reads, status, stepdowns
	js         jetstream.JetStream
	opsNC      *nats.Conn
	opsJ       *Journal
	control    string

	mu      sync.Mutex
	batches []*batch
	// The queue jobs: every one submitted or to be, and those the
	// dispatcher has still to submit (queueRound).
	queueJobs, queuePending []string

	seen     map[string]bool // findings already reported
	cache    *Log            // the log read by the last check
	journals *Journals

	dispStop context.CancelFunc
	dispDone chan struct{}
}

// startEnv starts nodes nats-servers (a cluster when more than one), two
// coordinators, cfg.Workers workers and the dispatcher.
func startEnv(ctx context.Context, cfg *Config, rep *Report, rng *lockedRand, name, tag string, nodes int) (*env, error) {
	dir := filepath.Join(cfg.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	e := &env{name: name, tag: tag, dir: dir, cfg: cfg, rng: rng, rep: rep, control: filepath.Join(dir, "control.json"), lease: cfg.Lease, seen: make(map[string]bool),
		journals: NewJournals(dir)}
	if nodes > 1 && cfg.ClusterLease > 0 {
		e.lease = cfg.ClusterLease
	}
	e.er = &EnvReport{Name: name, Lease: e.lease}
	rep.Envs = append(rep.Envs, e.er)
	// A client and a route port per node, and the web board's.
	ports, err := freePorts(2*nodes + 1)
	if err != nil {
		return e, err
	}
	boardPort := ports[2*nodes]
	var urls, routes []string
	for i := range nodes {
		urls = append(urls, url(ports[2*i]))
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(ports[2*i+1]))
	}
	e.urls = strings.Join(urls, ",")
	actors := []auth.Actor{{Name: "c1", Role: auth.RoleCoordinator}, {Name: "c2", Role: auth.RoleCoordinator}, {Name: "disp", Role: auth.RoleDispatcher},
		{Name: boardActor, Role: auth.RoleOperator}}
	for i := range cfg.Workers {
		actors = append(actors, auth.Actor{Name: fmt.Sprintf("w%d", i+1), Role: auth.RoleWorker})
	}
	for i := range cfg.Hostile {
		e.hostileIDs = append(e.hostileIDs, fmt.Sprintf("h%d", i+1))
		actors = append(actors, auth.Actor{Name: e.hostileIDs[i], Role: auth.RoleWorker})
	}
	e.er.Hostiles = len(e.hostileIDs)
	e.er.Attacks = cfg.Attacks
	if e.er.Attacks == nil {
		e.er.Attacks = AttackTypes
	}
	if e.auth, err = newEnvAuth(dir, e.urls, actors); err != nil {
		return e, err
	}
	// Every store is locked before any server starts, and each server
	// shares its store's lock (file descriptor 3) while it runs.
	for i := range nodes {
		l, err := streams.LockDir(filepath.Join(dir, fmt.Sprintf("n%d-store", i+1)))
		if err != nil {
			return e, fmt.Errorf("chaos: %w", err)
		}
		e.locks = append(e.locks, l)
	}
	for i := range nodes {
		s := &natsServer{name: fmt.Sprintf("n%d", i+1), port: ports[2*i], route: ports[2*i+1]}
		conf := filepath.Join(dir, s.name+".conf")
		text := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n  sync_interval: always\n}\n",
			s.name, s.port, e.locks[i].Dir())
		if nodes > 1 {
			text += fmt.Sprintf("cluster {\n  name: chaos\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n", s.route, strings.Join(routes, ", "))
		}
		text += "\n" + e.auth.accounts
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return e, err
		}
		s.p = &proc{name: name + "/" + s.name, path: cfg.NatsServer, args: func() []string { return []string{"-c", conf} },
			logPath: filepath.Join(dir, s.name+".log"), files: []*os.File{e.locks[i].File()}}
		e.servers = append(e.servers, s)
		if err := s.p.start(); err != nil {
			return e, err
		}
	}
	for _, s := range e.servers {
		if err := waitServer(ctx, url(s.port), 90*time.Second, e.auth.adminOption()); err != nil {
			return e, fmt.Errorf("chaos: %s/%s: %w", name, s.name, err)
		}
	}
	e.nc, err = nats.Connect(e.urls, e.auth.adminOption(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.Name("chaos-orchestrator"))
	if err != nil {
		return e, err
	}
	if e.js, err = jetstream.New(e.nc); err != nil {
		return e, err
	}
	replicas := 1
	if nodes > 1 {
		replicas = 3
	}
	for i := range 2 {
		id := fmt.Sprintf("c%d", i+1)
		e.ids = append(e.ids, id)
		c := &proc{name: name + "/" + id, path: cfg.Tenure, restart: true, logPath: filepath.Join(dir, id+".log"),
			args: func() []string {
				// Snapshots every few inputs or never, so that restarts go
				// through both paths.
				every := []string{"-1", "300", "2000"}[rng.IntN(3)]
				return []string{"serve", "--id", id, "--leader-ttl", leaderTTL.String(),
					"--replicas", strconv.Itoa(replicas), "--snapshot-every", every, "--snapshot-interval", "2s",
					"--log-format", "json", "--nats-url", e.urls, "--credential", e.auth.credentialPath(id)}
			}}
		e.coords = append(e.coords, c)
		if err := c.start(); err != nil {
			return e, err
		}
		if i == 0 { // the first one creates the topology; the administrator ends its genesis
			if err := e.endGenesis(ctx); err != nil {
				return e, err
			}
			if _, err := e.waitLive(ctx, 60*time.Second); err != nil {
				return e, err
			}
		}
	}
	if _, err := e.waitLive(ctx, 60*time.Second); err != nil {
		return e, err
	}
	if err := e.startBoard(ctx, boardPort); err != nil {
		return e, err
	}
	e.nextBatch(0)
	for i := range cfg.Workers {
		id := fmt.Sprintf("w%d", i+1)
		seed := rng.Uint64()
		w := &proc{name: name + "/" + id, path: cfg.Tenure, restart: true, logPath: filepath.Join(dir, id+".log"),
			args: func() []string {
				return []string{"chaos", "worker", "--nats-url", e.urls, "--credential", e.auth.credentialPath(id), "--id", id, "--journal", journalPath(dir, id),
					"--control", e.control, "--lease", e.lease.String(), "--seed", strconv.FormatUint(seed, 10), "--queue", ChaosQueue}
			}}
		e.workers = append(e.workers, w)
		if err := w.start(); err != nil {
			return e, err
		}
	}
	e.hostileCtl = filepath.Join(dir, "hostile.json")
	for _, id := range e.hostileIDs {
		seed := rng.Uint64()
		h := &proc{name: name + "/" + id, path: cfg.Tenure, restart: true, logPath: filepath.Join(dir, id+".log"),
			args: func() []string {
				return []string{"chaos", "hostile", "--credential", e.auth.credentialPath(id), "--id", id, "--journal", journalPath(dir, id),
					"--control", e.hostileCtl, "--records", recordsPath(dir, id), "--lease", e.lease.String(), "--seed", strconv.FormatUint(seed, 10),
					"--attacks", strings.Join(e.er.Attacks, ","), "--boards", strings.Join(e.boards, ",")}
			}}
		e.hostiles = append(e.hostiles, h)
		if err := h.start(); err != nil {
			return e, err
		}
	}
	if err := e.startDispatcher(); err != nil {
		return e, err
	}
	return e, nil
}

// boardActor is the ops user of the web board's actions.
const boardActor = "board"

// startBoard starts the web board (tenure ui) on 127.0.0.1:port, reading
// the streams as the orchestrator and publishing operator actions as the
// board's ops user, as tenure auth init's summary says, and waits until it
// answers. Its tokens are made in the run directory and nobody in the run
// holds them: the hostile worker attacks the board without. It is a
// process of its own, never a fault's target, so that a coordinator's
// restart does no more than before (the board reads the whole decision
// stream when it starts).
func (e *env) startBoard(ctx context.Context, port int) error {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	e.board = &proc{name: e.name + "/board", path: e.cfg.Tenure, restart: true, logPath: filepath.Join(e.dir, "board.log"),
		args: func() []string {
			return append([]string{"ui", "--nats-url", e.urls, "--http", addr, "--ui-token-dir", filepath.Join(e.dir, "board"),
				"--ui-actions", "--ui-credential", e.auth.credentialPath(boardActor), "--log-format", "json"}, e.auth.adminFlags()...)
		}}
	if err := e.board.start(); err != nil {
		return err
	}
	e.boards = []string{"http://" + addr}
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(e.boards[0] + "/healthz")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("chaos: %s: the web board on %s does not answer: %v", e.name, addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// recordsPath is the attack records file of hostile worker id in dir.
func recordsPath(dir, id string) string { return filepath.Join(dir, "attacks-"+id+".ndjson") }

// openRound opens the next round of the hostile workers' attacks: they
// start them at random points of the next window.
func (e *env) openRound() {
	queue := e.queueRound()
	if len(e.hostiles) == 0 {
		return
	}
	e.round++
	window := max(1500*time.Millisecond, e.lease+500*time.Millisecond)
	ctl := HostileControl{Round: e.round, Until: time.Now().Add(window).UnixNano(), MinAttacks: e.minAttacks,
		Coordinators: e.ids, Workers: workerIDs(len(e.workers)), Jobs: e.currentJobs(), Queue: ChaosQueue, QueueJobs: queue}
	if err := writeJSON(e.hostileCtl, ctl); err != nil {
		e.rep.problem(fmt.Sprintf("%s: hostile control file: %v", e.name, err))
	}
}

// ChaosQueue is the queue the honest workers serve (worker.Run) and the
// dispatcher submits to, and the hostile workers' queue modes attack.
const ChaosQueue = "chaos-q"

// queueRound makes the queue jobs of the next schedule, cfg.QueueJobs of
// them, for the dispatcher to submit while the faults are injected and
// the hostile workers attack, and returns them.
func (e *env) queueRound() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var jobs []string
	for i := range e.cfg.QueueJobs {
		jobs = append(jobs, fmt.Sprintf("%s-q%d-j%d", e.tag, e.rep.Schedules, i))
	}
	e.queueJobs = append(e.queueJobs, jobs...)
	e.queuePending = append(e.queuePending, jobs...)
	return jobs
}

// nextQueueJobs takes up to n of the queue jobs still to submit.
func (e *env) nextQueueJobs(n int) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	n = min(n, len(e.queuePending))
	out := slices.Clone(e.queuePending[:n])
	e.queuePending = e.queuePending[n:]
	return out
}

// queueDrained waits (at most timeout) until every queue job submitted has
// ended (COMPLETED, DEAD or FAILED, as the decision stream says), so that
// the final check may require each to have completed.
func (e *env) queueDrained(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	end := make(map[string]events.State)
	from := 0
	for {
		e.mu.Lock()
		want, pending := slices.Clone(e.queueJobs), len(e.queuePending)
		e.mu.Unlock()
		l, err := ReadLog(ctx, e.js, e.cache)
		if err == nil {
			e.cache = l
			for ; from < len(l.Decisions); from++ {
				d, err := events.DecodeDecision(l.Decisions[from].Data)
				if err == nil && d.Job.Queue != "" {
					end[d.Job.ID] = d.Job.State
				}
			}
		}
		open := 0
		for _, id := range want {
			if st := end[id]; st != events.StateCompleted && st != events.StateDead && st != events.StateFailed {
				open++
			}
		}
		if open == 0 && pending == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("chaos: %s: %d of %d queue jobs not ended after %v", e.name, open, len(want), timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// workerIDs are the ids of n honest workers, w1 to w<n> (as startEnv names
// them).
func workerIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("w%d", i+1)
	}
	return ids
}

// awaitRound waits until every hostile worker has finished the round's
// attacks (20 s at most, then a note), so that the faults and the attacks
// are over when the liveness clock starts.
func (e *env) awaitRound(ctx context.Context) {
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range e.hostileIDs {
		for {
			var d HostileDone
			if readJSON(recordsPath(e.dir, id)+".done", &d) == nil && d.Round >= e.round {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				e.rep.problem(fmt.Sprintf("%s: hostile worker %s had not finished round %d after 20 s", e.name, id, e.round))
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// waitServer waits until the server at u answers JetStream requests (on a
// connection with the options opts).
func waitServer(ctx context.Context, u string, timeout time.Duration, opts ...nats.Option) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		nc, err := nats.Connect(u, append([]nats.Option{nats.Timeout(time.Second), nats.NoReconnect()}, opts...)...)
		if err == nil {
			js, _ := jetstream.New(nc)
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = js.AccountInfo(c)
			cancel()
			nc.Close()
			if err == nil {
				return nil
			}
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%w: %s: %v", errNotReady, u, last)
}

// status asks coordinator id for its status.
func (e *env) status(id string, timeout time.Duration) (live bool, ok bool) {
	m, err := e.nc.Request("tenure.status."+id, nil, timeout)
	if err != nil {
		return false, false
	}
	var st struct {
		Live bool `json:"live"`
	}
	if json.Unmarshal(m.Data, &st) != nil {
		return false, false
	}
	return st.Live, true
}

// liveCoordinator returns the index of the live coordinator, -1 if none
// answers as live.
func (e *env) liveCoordinator() int {
	for i, id := range e.ids {
		if live, _ := e.status(id, 300*time.Millisecond); live {
			return i
		}
	}
	return -1
}

// waitLive waits until a coordinator says it is live.
func (e *env) waitLive(ctx context.Context, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if i := e.liveCoordinator(); i >= 0 {
			return e.ids[i], nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", fmt.Errorf("chaos: %s: no coordinator live after %v (%s)", e.name, timeout, e.whyNotLive())
}

// whyNotLive says what each coordinator answers about its state, then
// makes each one that is running write its goroutines to its log (SIGQUIT:
// the Go runtime's dump, and the process exits): a coordinator stuck
// without a word must say where.
func (e *env) whyNotLive() string {
	var says []string
	for i, id := range e.ids {
		m, err := e.nc.Request("tenure.status."+id, nil, 2*time.Second)
		var st struct {
			State    string `json:"state"`
			Reason   string `json:"reason"`
			Folded   uint64 `json:"inputs_folded"`
			Stored   uint64 `json:"decisions_stored"`
			Sessions uint64 `json:"sessions"`
		}
		switch {
		case err != nil:
			says = append(says, fmt.Sprintf("%s: no status: %v", id, err))
		case json.Unmarshal(m.Data, &st) != nil:
			says = append(says, fmt.Sprintf("%s: status %q", id, m.Data))
		default:
			says = append(says, fmt.Sprintf("%s: %s (%s; inputs folded %d, decisions stored %d, session %d)",
				id, st.State, st.Reason, st.Folded, st.Stored, st.Sessions))
		}
		if i < len(e.coords) && e.coords[i].running() {
			_ = e.coords[i].signal(syscall.SIGQUIT)
			says[len(says)-1] += " (goroutines dumped to its log)"
		}
	}
	return strings.Join(says, "; ")
}

// heal starts whatever is not running and waits for a live coordinator:
// the faults have stopped.
func (e *env) heal(ctx context.Context) error {
	for _, s := range e.servers {
		if !s.p.running() {
			if err := s.p.start(); err != nil {
				return err
			}
			e.rep.fault("nats-server restart")
		}
	}
	for _, s := range e.servers {
		if err := waitServer(ctx, url(s.port), 90*time.Second, e.auth.adminOption()); err != nil {
			return err
		}
	}
	for _, c := range e.coords {
		if err := c.start(); err != nil {
			return err
		}
	}
	for _, w := range slices.Concat(e.workers, e.hostiles) {
		if err := w.start(); err != nil {
			return err
		}
	}
	_, err := e.waitLive(ctx, 90*time.Second)
	return err
}

// leaderTTL is the coordinators' leadership TTL.
const leaderTTL = time.Second

// livenessBound is how long after the faults stop a batch's jobs may take
// to end: two lease durations (a lease granted just before, and its
// expiry's tick), and the leadership TTL, which a standby must wait out
// when the leader was killed at the very end (under load, the killed
// coordinator's restart takes longer than that; a bound of two leases
// alone failed on a loaded machine with every job ended 1.7 s after it).
func (e *env) livenessBound() time.Duration { return 2*e.lease + leaderTTL }

// nextBatch ends the current batch (its jobs must end by stop +
// livenessBound; stop 0: none is running) and hands the workers the next
// one.
func (e *env) nextBatch(stop int64) {
	e.mu.Lock()
	if n := len(e.batches); n > 0 && stop != 0 {
		e.batches[n-1].deadline = stop + int64(e.livenessBound())
	}
	b := &batch{n: len(e.batches) + 1}
	b.prefix = fmt.Sprintf("%s-b%d-", e.tag, b.n)
	for i := range e.cfg.Jobs {
		b.jobs = append(b.jobs, fmt.Sprintf("%sj%d", b.prefix, i))
	}
	e.batches = append(e.batches, b)
	e.mu.Unlock()
	if err := WriteControl(e.control, Control{Batch: b.n, Jobs: b.jobs}); err != nil {
		e.rep.problem(fmt.Sprintf("%s: control file: %v", e.name, err))
	}
}

// lastBatch ends the current batch and gives the workers nothing more to do.
func (e *env) lastBatch(stop int64) {
	e.mu.Lock()
	if n := len(e.batches); n > 0 {
		e.batches[n-1].deadline = stop + int64(e.livenessBound())
	}
	n := len(e.batches) + 1
	e.mu.Unlock()
	if err := WriteControl(e.control, Control{Batch: n}); err != nil {
		e.rep.problem(fmt.Sprintf("%s: control file: %v", e.name, err))
	}
}

func (e *env) currentJobs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.batches[len(e.batches)-1]
	if b.deadline != 0 {
		return nil
	}
	return b.jobs
}

// startDispatcher starts the orchestrator's dispatcher, an operator on a
// journaled connection: it offers jobs of the current batch to workers and
// now and then cancels one (most often one it has just offered). It
// publishes as any client would, with a Nats-Msg-Id and the same id on
// retries, and does not wait for verdicts (the checks read them from the
// decision stream), so it leaves no consumer behind on the servers.
func (e *env) startDispatcher() error {
	j, err := OpenJournal(journalPath(e.dir, "disp"))
	if err != nil {
		return err
	}
	e.opsJ = j
	e.opsNC, _, err = connectCredential(e.auth.credentialPath("disp"), e.urls, NewTap(j).Option(), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.Name("chaos-dispatcher"))
	if err != nil {
		return err
	}
	js, err := jetstream.New(e.opsNC)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.dispStop, e.dispDone = cancel, make(chan struct{})
	L := e.lease
	publish := func(in *events.Input, id string) error {
		msg := nats.NewMsg(events.InputSubject(in.Role, in.Actor, in.Job, in.Verb))
		msg.Data = events.AppendInputBody(nil, in)
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		defer pcancel()
		return retry(pctx, func() error {
			actx, acancel := context.WithTimeout(pctx, 500*time.Millisecond)
			defer acancel()
			_, err := js.PublishMsg(actx, msg, jetstream.WithMsgID(id))
			return err
		})
	}
	secret := fmt.Sprintf("%016x", e.rng.Uint64())
	go func() {
		defer close(e.dispDone)
		var offered []string
		next := time.Now()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(40 * time.Millisecond):
			}
			// The queue jobs of the schedule, two at a time: the queue has
			// work while the faults are injected and the hostile workers
			// attack. Each has a budget of 8 attempts (only an expiry of an
			// ACKed lease spends one: the faults' and the queue-expire
			// mode's; on a loaded machine three honest expiries of one job
			// came in one run), short backoffs, and a payload nobody but
			// the worker it is offered to may learn. A submit that found
			// no stream for 3 s is sent again later, the same message
			// (its Msg-Id and body): a duplicate, if the first was stored.
			for _, job := range e.nextQueueJobs(2) {
				in := events.Input{Role: events.RoleOps, Actor: "disp", Job: job, Verb: events.VerbSubmit, Queue: ChaosQueue,
					MaxAttempts: 8, BackoffMS: 100, BackoffMax: 1000, LeaseMS: L.Milliseconds(), AckTimeoutMS: L.Milliseconds() / 2,
					Payload: "secret-" + secret + "-" + job, HasPayload: true}
				if err := publish(&in, "disp-submit-"+secret+"-"+job); err != nil && ctx.Err() == nil {
					e.mu.Lock()
					e.queuePending = append(e.queuePending, job)
					e.mu.Unlock()
				}
			}
			if time.Now().Before(next) {
				continue
			}
			next = time.Now().Add(e.rng.between(150*time.Millisecond, 450*time.Millisecond))
			jobs := e.currentJobs()
			if len(jobs) == 0 {
				continue
			}
			in := events.Input{Role: events.RoleOps, Actor: "disp", Job: jobs[e.rng.IntN(len(jobs))]}
			if e.rng.Float64() < 0.85 {
				in.Verb, in.Holder = events.VerbOffer, fmt.Sprintf("w%d", 1+e.rng.IntN(e.cfg.Workers))
				in.LeaseMS, in.AckTimeoutMS = L.Milliseconds(), L.Milliseconds()/2
				offered = append(offered[max(0, len(offered)-7):], in.Job)
			} else {
				in.Verb, in.Text = events.VerbCancel, "chaos"
				if len(offered) > 0 && e.rng.IntN(2) == 0 && slices.Contains(jobs, offered[len(offered)-1]) {
					in.Job, offered = offered[len(offered)-1], offered[:len(offered)-1]
				}
			}
			_ = publish(&in, fmt.Sprintf("disp-%d-%d", e.rng.Uint64(), n))
		}
	}()
	return nil
}

// waitCaughtUp waits until every input stored now has its decisions.
func (e *env) waitCaughtUp(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var want uint64
	for ctx.Err() == nil {
		if want == 0 {
			if in, err := e.js.Stream(ctx, streams.Topology{}.InputStream()); err == nil {
				if info, err := in.Info(ctx); err == nil {
					want = info.State.LastSeq
				}
			}
		}
		if want != 0 {
			if out, err := e.js.Stream(ctx, streams.Topology{}.DecisionStream()); err == nil {
				if info, err := out.Info(ctx); err == nil && info.State.LastSeq > 0 {
					if m, err := out.GetMsg(ctx, info.State.LastSeq); err == nil {
						cause, _ := strconv.ParseUint(m.Header.Get(events.HeaderCause), 10, 64)
						n, of, _ := strings.Cut(m.Header.Get(events.HeaderIndex), "/")
						if cause > want || cause == want && incremented(n) == of {
							return nil
						}
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("chaos: %s: the coordinator did not catch up with input %d within %v", e.name, want, timeout)
}

func incremented(n string) string {
	v, _ := strconv.Atoi(n)
	return strconv.Itoa(v + 1)
}

// sourcingGrace is how long an input its intake stream acknowledged may
// take to reach the input stream before a check counts it lost.
const sourcingGrace = 10 * time.Second

// check reads the streams and the journals and runs every check, the
// audit and the liveness check of the batches that have ended. With full,
// the streams are read again from their first message; otherwise only what
// was appended since the last check (see ReadLog).
func (e *env) check(ctx context.Context, final, full bool) (*Check1, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// Right after a fault, the orchestrator's connection may be on a node
	// that is still catching up: retry what fails for a while.
	prev := e.cache
	if full {
		prev = nil
	}
	var l *Log
	var t0 int64
	err := retry(cctx, func() (err error) {
		t0 = time.Now().UnixNano()
		l, err = ReadLog(cctx, e.js, prev)
		return err
	})
	if err != nil {
		return nil, err
	}
	e.cache = l
	entries, err := e.journals.Read()
	if err != nil {
		return nil, err
	}
	recs, err := ReadAttackRecords(e.dir)
	if err != nil {
		return nil, err
	}
	c := &Clients{Entries: entries, Coordinators: e.ids, Hostile: e.hostileIDs, Attacks: recs, Drained: final}
	if !final {
		c.AckedBefore, c.SourcedBefore = t0, t0-int64(sourcingGrace)
	}
	out := &Check1{Result: Check(l, c), Log: l}
	// An input its intake stream acknowledged reaches the input stream
	// when the server sources it: under load, seconds later. The final
	// check reads the streams again while only that can explain a lost
	// input, for up to sourcingGrace (an input truly lost stays lost).
	for end := time.Now().Add(sourcingGrace); final && out.Result.Lost.Count > 0 && time.Now().Before(end) && cctx.Err() == nil; {
		time.Sleep(time.Second)
		if l2, err := ReadLog(cctx, e.js, l); err == nil {
			l = l2
			e.cache = l
			out = &Check1{Result: Check(l, c), Log: l}
		}
	}
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	out.AuditErr = retry(actx, func() (err error) {
		out.Audit, err = audit.Run(actx, audit.Config{JS: e.js})
		return err
	})
	acancel()
	e.mu.Lock()
	for _, b := range e.batches {
		if b.deadline == 0 {
			continue
		}
		f := Liveness(out.Result, b.prefix, b.deadline)
		if f.Count > 0 {
			from, to := longestPause(l, b.deadline-int64(e.livenessBound())-int64(5*time.Second), b.deadline)
			f.Items = append(f.Items, fmt.Sprintf("(diagnostic, not counted) around the faults' end, no decision was stored from %s to %s",
				events.FormatTime(from), events.FormatTime(to)))
		}
		out.Liveness.Count += f.Count
		for _, it := range f.Items {
			if len(out.Liveness.Items) < MaxListed {
				out.Liveness.Items = append(out.Liveness.Items, it)
			}
		}
		out.Jobs += countPrefix(out.Result, b.prefix)
	}
	e.mu.Unlock()
	return out, nil
}

func countPrefix(r *Result, prefix string) int {
	n := 0
	for id := range r.Jobs {
		if strings.HasPrefix(id, prefix) {
			n++
		}
	}
	return n
}

// Check1 is the outcome of one round of checks of an environment.
type Check1 struct {
	Result   *Result
	Audit    *audit.Report // nil if the audit could not run
	AuditErr error         // why it could not run
	Liveness Findings
	Jobs     int // jobs of the ended batches
	Log      *Log
}

// AuditOK reports whether the audit ran and reproduced everything.
func (c *Check1) AuditOK() bool { return c.AuditErr == nil && c.Audit != nil && c.Audit.OK() }

// OK reports whether every check of the round passed.
func (c *Check1) OK() bool { return c.Result.OK() && c.AuditOK() && c.Liveness.Count == 0 }

// close stops everything the environment started.
func (e *env) close() {
	if e.dispStop != nil {
		e.dispStop()
		<-e.dispDone
	}
	for _, w := range slices.Concat(e.workers, e.hostiles) {
		w.close()
	}
	if e.opsNC != nil {
		e.opsNC.Close()
	}
	if e.opsJ != nil {
		e.opsJ.Close()
	}
	if e.board != nil {
		e.board.close()
	}
	for _, c := range e.coords {
		c.close()
	}
	if e.nc != nil {
		e.nc.Close()
	}
	for _, s := range e.servers {
		s.p.close()
	}
	for _, l := range e.locks {
		_ = l.Close()
	}
}

// stopWorkers stops the dispatcher, the workers and the hostile workers
// (SIGTERM), so that the journals are complete.
func (e *env) stopWorkers() {
	if e.dispStop != nil {
		e.dispStop()
		<-e.dispDone
		e.dispStop = nil
	}
	for _, w := range slices.Concat(e.workers, e.hostiles) {
		w.close()
	}
}

// leases returns the live, ACKed or acquired leases of the decision
// stream, by job: holder and generation.
func leases(l *Log) map[string]events.Job {
	out := make(map[string]events.Job)
	for i := range l.Decisions {
		d, err := events.DecodeDecision(l.Decisions[i].Data)
		if err != nil || d.Job.ID == events.NoJob {
			continue
		}
		if d.Job.State == events.StateActive {
			out[d.Job.ID] = d.Job
		} else {
			delete(out, d.Job.ID)
		}
	}
	return out
}

// stepDown asks the leader of stream to step down.
func (e *env) stepDown(stream string) error {
	m, err := e.nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 10*time.Second)
	if err != nil {
		return err
	}
	var resp struct {
		Success bool `json:"success"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return err
	}
	if !resp.Success {
		if resp.Error != nil {
			return errors.New(resp.Error.Description)
		}
		return errors.New("stepdown refused")
	}
	return nil
}

// streamLeader returns the server leading stream and whether all its
// replicas are current.
func (e *env) streamLeader(ctx context.Context, stream string) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, stream)
	if err != nil {
		return "", false
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return "", false
	}
	current := len(info.Cluster.Replicas) == len(e.servers)-1
	for _, r := range info.Cluster.Replicas {
		current = current && r.Current && !r.Offline
	}
	return info.Cluster.Leader, current
}

// waitStreams waits until every stream of the topology has a leader and
// all its replicas are current.
func (e *env) waitStreams(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	top := streams.Topology{}
	names := []string{top.InputStream(), top.DecisionStream(), "KV_" + top.LeaderBucket(), "OBJ_" + top.SnapshotBucket()}
	for _, n := range names {
		for {
			leader, current := e.streamLeader(ctx, n)
			if leader != "" && current {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("chaos: %s: stream %s not healthy after %v (leader %q)", e.name, n, timeout, leader)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// sigstop stops process p for d, then resumes it.
func sigstop(p *proc, d time.Duration) error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	time.Sleep(d)
	return p.signal(syscall.SIGCONT)
}

// longestPause returns the longest interval between consecutive decisions
// stored (stored timestamps) that overlaps [from, to].
func longestPause(l *Log, from, to int64) (int64, int64) {
	var best [2]int64
	prev := int64(0)
	for i := range l.Decisions {
		t := l.Decisions[i].Time
		if prev != 0 && t > from && prev < to && t-prev > best[1]-best[0] {
			best = [2]int64{prev, t}
		}
		prev = t
	}
	return best[0], best[1]
}

// retry calls op until it succeeds or ctx ends (then the last error).
func retry(ctx context.Context, op func() error) error {
	for {
		err := op()
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}
