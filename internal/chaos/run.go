package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// Config configures a chaos run.
type Config struct {
	Tenure     string // the tenure binary: coordinators (tenure serve) and workers (tenure chaos worker)
	NatsServer string // the nats-server binary
	Dir        string // run directory: stores, logs, journals (must exist; locked for the run, streams.LockDir)
	Seed       uint64

	// Schedules of the single-server environment.
	CoordinatorKills int // coordinators SIGKILLed at random points and restarted
	WorkerStops      int // a worker holding leases SIGSTOPped for longer than its lease, then SIGCONTed
	ServerKills      int // the nats-server SIGKILLed and restarted on its store
	// ClusterRounds of the 3-node cluster environment, each: the leaders of
	// the streams stepped down, then every node SIGKILLed and restarted,
	// one at a time. 0: no cluster.
	ClusterRounds int

	// Lease is the lease duration the workers ask for; ClusterLease in the
	// cluster, where a coordinator's failover takes about its leader TTL
	// (1s) after a stream leader change, so leases must be longer for the
	// jobs to end within two of them.
	Lease, ClusterLease time.Duration
	Workers             int // worker processes per environment
	Hostile             int // hostile worker processes per environment (tenure chaos hostile)
	// Attacks are the attack types the hostile workers make (nil: all of
	// AttackTypes), e.g. to measure what one of them costs.
	Attacks []string
	Jobs    int // jobs per batch (one batch per schedule)
	// QueueJobs are the jobs the dispatcher submits to the workers' queue
	// (ChaosQueue) per schedule.
	QueueJobs int

	Out io.Writer // the report
}

// Profiles: "short" is what CI runs (a few minutes on two cores), "long"
// what `make chaos` runs.
var Profiles = map[string]Config{
	"short": {CoordinatorKills: 50, WorkerStops: 1, ServerKills: 1, ClusterRounds: 1,
		Lease: 600 * time.Millisecond, ClusterLease: 2 * time.Second, Workers: 3, Hostile: 1, Jobs: 24, QueueJobs: 24},
	"long": {CoordinatorKills: 200, WorkerStops: 6, ServerKills: 6, ClusterRounds: 3,
		Lease: 800 * time.Millisecond, ClusterLease: 2 * time.Second, Workers: 4, Hostile: 1, Jobs: 32, QueueJobs: 48},
}

// Schedule kinds.
const (
	SchedCoordinatorKill = "coordinator-kill"
	SchedWorkerStop      = "worker-stop"
	SchedServerKill      = "server-kill"
	SchedStepDown        = "cluster-stepdown"
	SchedNodeKill        = "cluster-node-kill"
)

// Run runs the schedules, checks after each one, and writes the report.
// The error is for a run that could not be carried out; a run whose checks
// fail returns a Report whose OK is false.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	for _, b := range []string{cfg.Tenure, cfg.NatsServer} {
		if _, err := exec.LookPath(b); err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
	}
	// One run per directory: a second one would start servers on the
	// stores of the first.
	lock, err := streams.LockDir(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	defer lock.Close()
	rng := newLockedRand(cfg.Seed)
	rep := newReport(&cfg)
	fmt.Fprintf(cfg.Out, "chaos: seed %d, lease %v (cluster %v), %d workers, run directory %s\n", cfg.Seed, cfg.Lease, cfg.ClusterLease, cfg.Workers, cfg.Dir)

	var plan []string
	for range cfg.CoordinatorKills {
		plan = append(plan, SchedCoordinatorKill)
	}
	for range cfg.WorkerStops {
		plan = append(plan, SchedWorkerStop)
	}
	for range cfg.ServerKills {
		plan = append(plan, SchedServerKill)
	}
	shuffled := make([]string, len(plan))
	for i, j := range rng.Perm(len(plan)) {
		shuffled[i] = plan[j]
	}
	var cplan []string
	for range cfg.ClusterRounds {
		cplan = append(cplan, SchedStepDown, SchedNodeKill+"-leader", SchedNodeKill, SchedNodeKill)
	}
	rep.total = len(shuffled) + len(cplan)
	if len(shuffled) > 0 {
		if err := runEnv(ctx, &cfg, rep, rng, "single", "s", 1, shuffled); err != nil {
			return rep, err
		}
	}
	if len(cplan) > 0 {
		if err := runEnv(ctx, &cfg, rep, rng, "cluster", "c", 3, cplan); err != nil {
			return rep, err
		}
	}
	rep.Elapsed = time.Since(rep.start)
	rep.write(cfg.Out)
	return rep, nil
}

// runEnv starts an environment, runs its schedules with a check after
// each, then the final check.
func runEnv(ctx context.Context, cfg *Config, rep *Report, rng *lockedRand, name, tag string, nodes int, plan []string) error {
	t0 := time.Now()
	e, err := startEnv(ctx, cfg, rep, rng, name, tag, nodes)
	if e != nil {
		defer e.close()
	}
	if err != nil {
		return err
	}
	if nodes > 1 {
		if err := e.waitStreams(ctx, 2*time.Minute); err != nil {
			return err
		}
	}
	fmt.Fprintf(cfg.Out, "%s: %d nats-server(s) %s, coordinators %s, %d workers, ready in %v\n",
		name, nodes, e.urls, strings.Join(e.ids, " "), cfg.Workers, time.Since(t0).Round(time.Millisecond))
	// Every attack type in the environment's rounds, one per schedule:
	// a whole deck of them at least.
	e.minAttacks = (len(e.er.Attacks) + len(plan) - 1) / max(len(plan), 1)
	time.Sleep(e.lease) // let the workers get going
	for _, kind := range plan {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := e.schedule(ctx, kind); err != nil {
			return err
		}
	}
	// Faults are over: give the workers nothing more to do, let the last
	// batch end, stop them so that their journals are complete, and check
	// everything once more.
	e.lastBatch(time.Now().UnixNano())
	time.Sleep(2*e.lease + 200*time.Millisecond)
	if err := e.queueDrained(ctx, 30*time.Second); err != nil {
		rep.problem(err.Error())
	}
	e.stopWorkers()
	if err := e.waitCaughtUp(ctx, 30*time.Second); err != nil {
		rep.problem(err.Error())
	}
	c, err := e.check(ctx, true, true)
	if err != nil {
		return err
	}
	e.er.Final = c
	e.er.AttackRounds = e.round
	e.er.noteRound(c)
	e.er.AuditCLI = e.auditCLI(ctx)
	e.er.readCoordinatorLogs(e.dir, e.ids)
	for _, p := range slices.Concat(e.coords, e.workers, e.hostiles) {
		e.er.Exits = append(e.er.Exits, p.exits()...)
	}
	if e.board != nil {
		e.er.Exits = append(e.er.Exits, e.board.exits()...)
	}
	for _, s := range e.servers {
		e.er.Exits = append(e.er.Exits, s.p.exits()...)
	}
	fmt.Fprintf(cfg.Out, "%s: final check %s (%d inputs, %d decisions)\n", name, verdictWord(c.OK()), len(c.Log.Inputs), len(c.Log.Decisions))
	return nil
}

// auditCLI runs `tenure audit` against the environment, as an operator would.
func (e *env) auditCLI(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	args := append([]string{"audit", "--nats-url", e.urls, "--progress", "none"}, e.auth.adminFlags()...)
	out, err := exec.CommandContext(ctx, e.cfg.Tenure, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tenure audit: %w\n%s", err, out)
	}
	return nil
}

// schedule runs one schedule: its faults, the healing, two lease durations
// for the batch's jobs to end, then the checks.
func (e *env) schedule(ctx context.Context, kind string) error {
	t0 := time.Now()
	rep := e.rep
	rep.Schedules++
	if strings.HasPrefix(kind, SchedNodeKill) {
		rep.ByKind[SchedNodeKill]++
	} else {
		rep.ByKind[kind]++
	}
	e.openRound() // the hostile workers attack while the faults are injected
	desc, err := e.inject(ctx, kind)
	if err != nil {
		return fmt.Errorf("chaos: %s %s: %w", e.name, kind, err)
	}
	if err := e.heal(ctx); err != nil {
		return fmt.Errorf("chaos: %s %s: heal: %w", e.name, kind, err)
	}
	e.awaitRound(ctx)
	if kind == SchedServerKill {
		// A coordinator may still report itself live from before the kill
		// while it replaces the consumers the killed server lost: the
		// faults end, for the liveness bound, once it decides again (it
		// has folded every input stored since the restart).
		if err := e.waitCaughtUp(ctx, 30*time.Second); err != nil {
			rep.problem(err.Error())
		}
	}
	stop := time.Now()
	e.nextBatch(stop.UnixNano())
	time.Sleep(time.Until(stop.Add(2*e.lease + 100*time.Millisecond)))
	if err := e.waitCaughtUp(ctx, 30*time.Second); err != nil {
		rep.problem(err.Error())
	}
	// Only a killed server can lose stored messages: read everything again
	// after it (and in the cluster); otherwise what was appended.
	c, err := e.check(ctx, false, kind == SchedServerKill || len(e.servers) > 1)
	if err != nil {
		return err
	}
	e.er.noteRound(c)
	// The checks cover the whole log each time: a finding stays. List the
	// new ones under the schedule after which they appeared.
	var fresh []string
	for _, f := range findingLines(c) {
		if !e.seen[f] {
			e.seen[f] = true
			fresh = append(fresh, f)
		}
	}
	verdict := verdictWord(c.OK())
	if len(fresh) > 0 {
		verdict = "FAIL (new findings)"
		rep.failed = append(rep.failed, fmt.Sprintf("schedule %d (%s %s)", rep.Schedules, e.name, kind))
	}
	fmt.Fprintf(e.cfg.Out, "[%3d/%d] %-8s %-22s %-60s %s in=%d out=%d (%v)\n", rep.Schedules, rep.total, e.name, kind, desc,
		verdict, len(c.Log.Inputs), len(c.Log.Decisions), time.Since(t0).Round(10*time.Millisecond))
	for _, f := range fresh {
		fmt.Fprintf(e.cfg.Out, "    %s\n", f)
	}
	return nil
}

func verdictWord(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAIL"
}

// inject applies one schedule's faults and describes them.
func (e *env) inject(ctx context.Context, kind string) (string, error) {
	L := e.lease
	rng := e.rng
	rep := e.rep
	var desc []string
	switch {
	case kind == SchedCoordinatorKill:
		for range 1 + rng.IntN(2) {
			time.Sleep(rng.between(50*time.Millisecond, 600*time.Millisecond))
			var victims []int
			switch r := rng.Float64(); {
			case r < 0.15:
				victims = []int{0, 1}
			case r < 0.75:
				if i := e.liveCoordinator(); i >= 0 {
					victims = []int{i}
					break
				}
				fallthrough
			default:
				victims = []int{rng.IntN(len(e.coords))}
			}
			var names []string
			for _, i := range victims {
				c := e.coords[i]
				if !c.running() {
					continue
				}
				c.kill()
				rep.fault("coordinator SIGKILL")
				names = append(names, e.ids[i])
			}
			down := rng.between(0, 400*time.Millisecond)
			time.Sleep(down)
			for _, i := range victims {
				if err := e.coords[i].start(); err != nil {
					return "", err
				}
				rep.fault("coordinator restart")
			}
			desc = append(desc, fmt.Sprintf("kill %s %v", strings.Join(names, "+"), down.Round(time.Millisecond)))
		}

	case kind == SchedWorkerStop:
		// A worker that holds a lease, stopped for longer than the lease.
		var w int
		var held []events.Job
		deadline := time.Now().Add(5 * time.Second)
		for w = -1; w < 0 && time.Now().Before(deadline); {
			l, err := ReadLog(ctx, e.js, e.cache)
			if err != nil {
				return "", err
			}
			jobs := e.currentJobs()
			byHolder := make(map[string][]events.Job)
			for id, j := range leases(l) {
				for _, cur := range jobs {
					if id == cur {
						byHolder[j.Holder] = append(byHolder[j.Holder], j)
					}
				}
			}
			for _, i := range rng.Perm(len(e.workers)) {
				if hs := byHolder[fmt.Sprintf("w%d", i+1)]; len(hs) > 0 {
					w, held = i, hs
					break
				}
			}
			if w < 0 {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if w < 0 {
			w = rng.IntN(len(e.workers))
		}
		id := fmt.Sprintf("w%d", w+1)
		d := 2*L + rng.between(0, L)
		at := time.Now()
		rep.fault("worker SIGSTOP")
		if err := sigstop(e.workers[w], d); err != nil {
			return "", err
		}
		rep.fault("worker SIGCONT")
		var hs []string
		for _, j := range held {
			hs = append(hs, fmt.Sprintf("%s g%d", j.ID, j.Generation))
		}
		e.er.Stops = append(e.er.Stops, stopped{worker: id, at: at, d: d, held: held})
		desc = append(desc, fmt.Sprintf("SIGSTOP %s %v holding [%s]", id, d.Round(time.Millisecond), strings.Join(hs, ", ")))

	case kind == SchedServerKill:
		time.Sleep(rng.between(100*time.Millisecond, 600*time.Millisecond))
		s := e.servers[0]
		s.p.kill()
		rep.fault("nats-server SIGKILL")
		down := rng.between(200*time.Millisecond, 1500*time.Millisecond)
		time.Sleep(down)
		if err := s.p.start(); err != nil {
			return "", err
		}
		rep.fault("nats-server restart")
		desc = append(desc, fmt.Sprintf("kill -9 %s, down %v", s.name, down.Round(time.Millisecond)))

	case kind == SchedStepDown:
		top := streams.Topology{}
		names := []string{top.InputStream(), top.DecisionStream(), "KV_" + top.LeaderBucket()}
		before := make(map[string]string)
		order := rng.Perm(len(names))
		for _, i := range order {
			time.Sleep(rng.between(200*time.Millisecond, 700*time.Millisecond))
			before[names[i]], _ = e.streamLeader(ctx, names[i])
			if err := e.stepDown(names[i]); err != nil {
				rep.problem(fmt.Sprintf("%s: stepdown of %s refused: %v", e.name, names[i], err))
				continue
			}
			rep.fault("stream leader stepdown")
		}
		if err := e.waitStreams(ctx, time.Minute); err != nil {
			return "", err
		}
		for _, i := range order {
			after, _ := e.streamLeader(ctx, names[i])
			desc = append(desc, fmt.Sprintf("%s %s->%s", names[i], before[names[i]], after))
		}

	case strings.HasPrefix(kind, SchedNodeKill):
		// The node leading the decision stream first, then the others.
		i := -1
		if kind == SchedNodeKill+"-leader" {
			leader, _ := e.streamLeader(ctx, streams.Topology{}.DecisionStream())
			for k, s := range e.servers {
				if s.name == leader {
					i = k
				}
			}
		}
		if i < 0 {
			i = e.nextNodeToKill()
		}
		s := e.servers[i]
		e.er.killed = append(e.er.killed, i)
		time.Sleep(rng.between(100*time.Millisecond, 500*time.Millisecond))
		s.p.kill()
		rep.fault("cluster node SIGKILL")
		down := rng.between(time.Second, 2*time.Second)
		time.Sleep(down)
		if err := s.p.start(); err != nil {
			return "", err
		}
		rep.fault("cluster node restart")
		t := time.Now()
		if err := waitServer(ctx, url(s.port), 90*time.Second, e.auth.adminOption()); err != nil {
			return "", err
		}
		up := time.Since(t)
		if err := e.waitStreams(ctx, 2*time.Minute); err != nil {
			return "", err
		}
		desc = append(desc, fmt.Sprintf("kill -9 %s, down %v, up %v, replicas current %v", s.name,
			down.Round(time.Millisecond), up.Round(time.Millisecond), time.Since(t).Round(time.Millisecond)))
	default:
		return "", errors.New("unknown schedule")
	}
	return strings.Join(desc, "; "), nil
}

// nextNodeToKill picks the node killed least often in this round.
func (e *env) nextNodeToKill() int {
	n := len(e.er.killed) % len(e.servers)
	round := e.er.killed[len(e.er.killed)-n:]
	for _, i := range e.rng.Perm(len(e.servers)) {
		found := false
		for _, k := range round {
			found = found || k == i
		}
		if !found {
			return i
		}
	}
	return e.rng.IntN(len(e.servers))
}
