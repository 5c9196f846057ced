// Package sim is Tenure's deterministic simulator (issue "Deterministic
// simulation"): real coordinators (package coordinator, on the port of
// coordinator.Backend) and simulated workers, operators and a fenced
// resource, all in one synctest bubble over a model of JetStream
// (internal/jsmodel) whose network carries every request and reply in an
// order, and with faults, that one seed chooses: lost, late, duplicated
// and reordered replies, publishes whose outcome is unknown, readers that
// stall, coordinators crashed and restarted or cut off (a network
// partition, or a process paused with its appends in flight), so that two
// of them believe they lead at once.
//
// Each seed draws its own run (swarm testing): how many coordinators and
// workers, which features (renewals, progress, cancellations, snapshots,
// queues with their dispatcher, workers running worker.Run and operator:
// queue.go) and which faults at which rates. At the end, with the faults
// stopped and the workers done, the oracles judge the run:
//
//   - the checks of a chaos run over the final streams (internal/chaos:
//     the decision stream is exactly the fold of the input stream, the
//     decision chain holds, no generation has two holders, no input a
//     client was acknowledged is missing, none stored that nobody sent),
//     which is tenure audit's replay;
//   - no effect accepted by the fenced resource outside its lease's
//     authority by the stored clock, nor after a later generation began;
//   - every input a worker was acknowledged has its verdict;
//   - the queue rules, read from each job's submit (queuecheck.go): no
//     offer before run_at, nor before a counted attempt's least backoff,
//     no attempt past max_attempts, no unique key held twice;
//   - every SDK call the simulator made was told what the stored verdict
//     of its own input says (calls.go: the wrong-waiter oracle);
//   - liveness: every job ends within a bound once the faults stop, every
//     queue job submitted included.
//
// "Sometimes" assertions (Net.Touch, Report.Seen) show each fault and each
// rare path was reached, in the coverage table a run of many seeds
// prints. The tenure binary never links this package: it runs under `go
// test ./internal/sim` (make sim).
package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/chaos"
	"github.com/maknow/tenure/internal/jsmodel"
	"github.com/maknow/tenure/streams"
)

// Plan is one run, drawn from its seed.
type Plan struct {
	Seed         uint64
	Coordinators int
	Workers      int           // bare workers (the protocol by hand, as a nats CLI user speaks it)
	SDKWorkers   int           // workers of the Go SDK
	Jobs         int           // the jobs the workers compete for
	Lease        time.Duration // the workers' lease duration
	LeaderTTL    time.Duration
	SnapshotEach int // coordinator.Config.SnapshotEvery (-1: none)
	Progress     bool
	Boundary     bool          // workers sometimes renew at the very instant their lease expires
	Cancels      bool          // an operator cancels jobs now and then
	Crashes      float64       // per second of the fault phase, the chance a coordinator is killed
	Cuts         float64       // per second, the chance an actor is cut off (partition, pause)
	CutFor       time.Duration // how long at most
	Faults       jsmodel.Faults
	Lost         LostPlan // crashes of the server's machine, unsynced tails lost (lost.go)
	// Backlog, when not 0, is how many inputs are stored while every
	// coordinator is down, half way through the fault phase; the stored
	// snapshot is then spoiled and read slowly, so that the restarted
	// coordinators' readers fill their buffers past its anchor before
	// they refuse it (a restart on a long backlog past a refused
	// snapshot: the hang coordinator/reader.go fixed).
	Backlog int
	// The queue workload (queue.go), in the seeds that draw it (Queues
	// above 0): its queues, workers (worker.Run), the jobs the
	// dispatcher submits, which features it uses, the operator's, and
	// the handlers' mix.
	Queues       int
	QueueWorkers int
	QueueJobs    int
	Batches      bool          // some submits are batch submits (revision 7)
	Scheduled    bool          // some jobs name run_at or delay_ms (revision 8)
	Unique       bool          // some jobs name a unique key (revision 8)
	QueueOps     bool          // the operator cancels and revokes queue jobs
	Policies     bool          // the operator changes the policy
	Fail         float64       // the chance an attempt fails (retried)
	Permanent    float64       // fails for good
	Panic        float64       // panics
	Hang         float64       // hangs past its lease (its process paused)
	Slow         float64       // works long
	Trace        bool          // keep the net's trace (Report.Trace)
	Duration     time.Duration // the fault phase
	Drain        time.Duration // the quiet end: every job must end within it
}

// Draw returns seed's plan: every choice of the run follows from it.
func Draw(seed uint64) Plan {
	r := rand.New(rand.NewPCG(seed, 0x5151))
	on := func(p float64) bool { return r.Float64() < p }
	rate := func(p, max float64) float64 {
		if !on(p) {
			return 0
		}
		return r.Float64() * max
	}
	p := Plan{
		Seed:         seed,
		Coordinators: 1 + r.IntN(3),
		Workers:      r.IntN(3),
		SDKWorkers:   r.IntN(3),
		Jobs:         1 + r.IntN(4),
		Lease:        time.Duration(600+r.IntN(2400)) * time.Millisecond,
		LeaderTTL:    time.Duration(600+r.IntN(1400)) * time.Millisecond,
		SnapshotEach: []int{-1, 5, 40}[r.IntN(3)],
		Progress:     on(0.7),
		Boundary:     on(0.4),
		Cancels:      on(0.3),
		Crashes:      rate(0.5, 0.3),
		Cuts:         rate(0.5, 0.3),
		CutFor:       time.Duration(100+r.IntN(3000)) * time.Millisecond,
		Duration:     time.Duration(5+r.IntN(15)) * time.Second,
	}
	if p.Workers+p.SDKWorkers == 0 {
		p.SDKWorkers = 1
	}
	p.Drain = 4*p.Lease + 4*p.LeaderTTL + p.CutFor + 10*time.Second
	p.Faults = jsmodel.Faults{
		Latency:       time.Duration(r.IntN(20)) * time.Millisecond,
		Spike:         rate(0.5, 0.05),
		SpikeDelay:    time.Duration(100+r.IntN(1500)) * time.Millisecond,
		LoseRequest:   rate(0.4, 0.03),
		LoseReply:     rate(0.4, 0.03),
		DupReply:      rate(0.4, 0.05),
		Reorder:       rate(0.4, 0.05),
		ReaderStall:   rate(0.4, 0.02),
		StallDelay:    time.Duration(500+r.IntN(2000)) * time.Millisecond,
		Instant:       rate(0.5, 0.5),
		StaleSnapshot: rate(0.3, 0.5),
	}
	p.Lost = drawLost(seed)
	// From a generator of its own too: one seed in sixty with snapshots.
	if b := rand.New(rand.NewPCG(seed, 0xbac)); p.SnapshotEach > 0 && b.Float64() < 1.0/60 {
		p.Backlog = 4500 + b.IntN(1500)
	}
	// The queue workload, from a generator of its own: the draws above
	// are those of the seeds before it.
	q := rand.New(rand.NewPCG(seed, 0x7175e))
	if q.Float64() < 0.5 {
		qrate := func(p, max float64) float64 {
			if q.Float64() >= p {
				return 0
			}
			return q.Float64() * max
		}
		p.Queues = 1 + q.IntN(2)
		p.QueueWorkers = 1 + q.IntN(3)
		p.QueueJobs = 2 + q.IntN(12)
		p.Batches = q.Float64() < 0.5
		p.Scheduled = q.Float64() < 0.5
		p.Unique = q.Float64() < 0.5
		p.QueueOps = q.Float64() < 0.5
		p.Policies = q.Float64() < 0.4
		p.Fail = qrate(0.6, 0.4)
		p.Permanent = qrate(0.3, 0.15)
		p.Panic = qrate(0.2, 0.1)
		p.Hang = qrate(0.4, 0.2)
		p.Slow = qrate(0.4, 0.2)
		p.Drain += 30 * time.Second
		if p.Backlog > 0 {
			// A coordinator that catches up on a backlog decides offers
			// at their inputs' stored times, long past: their ACK windows
			// have passed when the offers reach the workers, and each
			// missed ACK is a strike (PROTOCOL.md §22.8), so every worker
			// of a queue may be held for the longest hold, 300 s, when
			// the faults stop (seed 540 of the first long run; TESTING.md,
			// "Not done yet"). The quiet end waits it out: the jobs must
			// still run once the holds end.
			p.Drain += 5*time.Minute + 30*time.Second
		}
	}
	return p
}

func (p Plan) String() string {
	queues := "no queues"
	if p.Queues > 0 {
		queues = fmt.Sprintf("%d queues, %d queue workers, %d queue jobs, batches %v, scheduled %v, unique keys %v, queue operator %v, policy changes %v, handlers fail %.2f, permanently %.2f, panic %.2f, hang %.2f, slow %.2f",
			p.Queues, p.QueueWorkers, p.QueueJobs, p.Batches, p.Scheduled, p.Unique, p.QueueOps, p.Policies, p.Fail, p.Permanent, p.Panic, p.Hang, p.Slow)
	}
	return fmt.Sprintf("seed %d: %d coordinators, %d bare and %d SDK workers, %d jobs, lease %v, leader TTL %v, snapshots %d, progress %v, boundary renewals %v, cancels %v, %s, crashes %.2f/s, cuts %.2f/s (up to %v), faults %+v, lost tails %v, backlog %d, %v then %v quiet",
		p.Seed, p.Coordinators, p.Workers, p.SDKWorkers, p.Jobs, p.Lease, p.LeaderTTL, p.SnapshotEach, p.Progress, p.Boundary, p.Cancels, queues, p.Crashes, p.Cuts, p.CutFor, p.Faults, p.Lost, p.Backlog, p.Duration, p.Drain)
}

// Report is what a run found.
type Report struct {
	Plan      Plan
	Findings  []string       // the oracles' findings (none: the run is clean)
	Faults    map[string]int // faults injected, by kind
	Seen      map[string]int // rare paths reached, by name
	Inputs    int
	Decisions int
	Effects   int
	SimTime   time.Duration
	Trace     []string // with Plan.Trace: every operation the net applied
	// Digest is a hash of every stored input's and decision's subject,
	// body and stored time: two runs of one seed must have the same.
	Digest string
	Log    []string // the coordinators' warnings and errors, for a failing run
}

// OK reports whether the oracles found nothing.
func (r *Report) OK() bool { return len(r.Findings) == 0 }

func (r *Report) finding(format string, args ...any) {
	if len(r.Findings) < 50 {
		r.Findings = append(r.Findings, fmt.Sprintf(format, args...))
	}
}

// Run runs plan p. It must run in a synctest bubble (synctest.Test): the
// simulated clock is the bubble's.
func Run(p Plan) *Report {
	rep := &Report{Plan: p}
	top := streams.Topology{}
	model := jsmodel.NewModel(top.InputConfig(), top.DecisionConfig(), p.LeaderTTL)
	net := jsmodel.NewNet(model, p.Faults, p.Seed)
	if p.Trace {
		net.Trace = &rep.Trace
	}
	lt := newLostTails(p, net)
	rng := rand.New(rand.NewPCG(p.Seed, 0xc0de))
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &logSink{}
	key := [events.LeaseKeyLen]byte{}
	for i := range key {
		key[i] = byte(p.Seed >> (8 * (i % 8)))
	}

	// The network's loop: one operation at a time, once every actor has
	// done what the last one let it do.
	netDone := make(chan struct{})
	go func() {
		defer close(netDone)
		for ctx.Err() == nil {
			settle()
			if !net.Step() {
				net.Wait(ctx)
			}
		}
	}()

	// The coordinators, restarted after a crash.
	type coord struct {
		id     string
		c      *coordinator.Coordinator
		cancel context.CancelFunc
		done   chan struct{}
	}
	// What a coordinator went through, counted when it stops.
	noteStats := func(c *coordinator.Coordinator) {
		st := c.Stats()
		if st.Sessions > 1 {
			net.Touch("coordinator resynchronised")
		}
		if st.LostAuthority > 0 {
			net.Touch("append fenced: another writer")
		}
		if st.SnapshotsRefused > 0 {
			net.Touch("snapshot refused")
		}
		if st.SnapshotSeq > 0 {
			net.Touch("snapshot stored or restored")
		}
		if st.Dropped > 0 {
			net.Touch("reply dropped: not for a unit in flight")
		}
	}
	coords := make([]*coord, p.Coordinators)
	var runErrs struct {
		sync.Mutex
		errs     []string
		refusals []error
	}
	startCoord := func(i int) {
		id := fmt.Sprintf("c%d", i+1)
		c, err := coordinator.New(coordinator.Config{ID: id, Backend: net.Backend(id, top), LeaderTTL: p.LeaderTTL,
			SnapshotEvery: p.SnapshotEach, SnapshotInterval: 2300*time.Millisecond + 7, LeaseKey: &key,
			Logger: slog.New(logs.handler(id))})
		if err != nil {
			panic(err)
		}
		cctx, ccancel := context.WithCancel(ctx)
		co := &coord{id: id, c: c, cancel: ccancel, done: make(chan struct{})}
		go func() {
			defer close(co.done)
			if err := c.Run(cctx); err != nil {
				// Run returns only when it refuses to go on (a
				// divergence, a gap): the model's streams are never
				// tampered with, so that is a finding.
				logs.add(id + ": run: " + err.Error())
				runErrs.Lock()
				runErrs.errs = append(runErrs.errs, id+" refused to go on: "+err.Error())
				runErrs.refusals = append(runErrs.refusals, err)
				runErrs.Unlock()
			}
		}()
		coords[i] = co
	}
	for i := range coords {
		startCoord(i)
	}

	// backlog is Plan.Backlog's outage: every coordinator stopped
	// (killed), p.Backlog inputs stored meanwhile, the stored snapshot
	// spoiled and its reads slowed for 3 s, every coordinator started
	// again.
	var floodLog journal
	var unslowed chan struct{} // the backlog's: closed once the snapshot's reads are fast again
	backlog := func() {
		for _, c := range coords {
			c.cancel()
			<-c.done
			noteStats(c.c)
		}
		fl := net.Client("flood")
		body := []byte(`{"v":1,"lease_ms":60000}`)
		for k := range p.Backlog {
			subj := events.InputSubject(events.RoleWorker, "flood", fmt.Sprintf("f%d", k%64), events.VerbAcquire)
			id := fmt.Sprintf("flood-%d", k)
			floodLog.record(true, subj, id, body, "", 0)
			if seq, err := fl.Publish(ctx, subj, body, id); err == nil { // (a loss is one input fewer)
				floodLog.record(false, subj, id, body, top.InputStream(), seq)
			}
		}
		if net.SpoilSnapshot() {
			net.Touch("backlog: restart past a spoiled snapshot")
		}
		for i, c := range coords {
			net.Slow(c.id+">obj", 3*time.Second)
			startCoord(i)
		}
		net.Touch("backlog: coordinators restarted on a backlog")
		// Owned by the run: it ends by its timer or with the run, before
		// the bubble's main goroutine returns (a run shorter than 10 s
		// after the restart deadlocked the bubble: seed 7050).
		unslowed = make(chan struct{})
		go func() {
			defer close(unslowed)
			t := time.NewTimer(10 * time.Second)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			for _, c := range coords {
				net.Slow(c.id+">obj", 0)
			}
		}()
	}

	// The fenced resource and the workers.
	res := &resource{}
	jv := newView(net)
	jobs := make([]string, p.Jobs)
	for i := range jobs {
		jobs[i] = fmt.Sprintf("j%d", i+1)
	}
	var wg sync.WaitGroup
	stopWork := make(chan struct{})
	workers := make([]*bareWorker, p.Workers)
	for i := range workers {
		w := newWorker(fmt.Sprintf("w%d", i+1), net, p, res, rng.Uint64())
		workers[i] = w
		wg.Go(func() { w.run(ctx, jobs, stopWork) })
	}
	sdks := make([]*sdkWorker, p.SDKWorkers)
	for i := range sdks {
		w := newSDKWorker(fmt.Sprintf("s%d", i+1), net, p, res, rng.Uint64())
		sdks[i] = w
		wg.Go(func() { w.run(ctx, jobs, stopWork) })
	}
	// The queue workload: its dispatcher stops with the faults, its
	// workers and operator once every job has ended (or the drain's end).
	var qr *queueRun
	var qwg sync.WaitGroup
	stopQueue := make(chan struct{})
	if p.Queues > 0 {
		qr = newQueueRun(p, net, jv, res, stopWork)
		wg.Go(func() { qr.dispatch(ctx, stopWork) })
		qwg.Go(func() { qr.operate(ctx, stopQueue) })
		for _, w := range qr.workers {
			qwg.Go(func() { w.run(ctx, stopQueue) })
		}
	}
	var opLog []chaos.Entry
	var opMu sync.Mutex
	if p.Cancels {
		op := net.Client("ops1")
		opRng := rand.New(rand.NewPCG(rng.Uint64(), 1))
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stopWork:
					return
				case <-time.After(time.Duration(500+opRng.IntN(3000)) * time.Millisecond):
				}
				job := jobs[opRng.IntN(len(jobs))]
				subj := events.InputSubject(events.RoleOps, "ops1", job, events.VerbCancel)
				body := []byte(`{"v":1,"reason":"sim"}`)
				id := fmt.Sprintf("ops1-%d", n)
				opMu.Lock()
				opLog = append(opLog, chaos.Entry{Kind: chaos.EntrySent, At: time.Now().UnixNano(), Subject: subj, MsgID: id, BodySHA: chaos.BodySHA(body), Len: len(body)})
				opMu.Unlock()
				if seq, err := op.Publish(ctx, subj, body, id); err == nil {
					opMu.Lock()
					opLog = append(opLog, chaos.Entry{Kind: chaos.EntryAck, At: time.Now().UnixNano(), Subject: subj, MsgID: id, BodySHA: chaos.BodySHA(body), Len: len(body), Stream: top.InputStream(), Seq: seq})
					opMu.Unlock()
				}
			}
		})
	}

	// The fault phase: coordinators killed and restarted, actors cut off.
	faultRng := rand.New(rand.NewPCG(rng.Uint64(), 2))
	actors := []string{}
	for _, c := range coords {
		actors = append(actors, c.id)
	}
	for _, w := range workers {
		actors = append(actors, w.id)
	}
	for _, w := range sdks {
		actors = append(actors, w.id)
	}
	if qr != nil {
		for _, w := range qr.workers {
			actors = append(actors, w.id)
		}
	}
	for t := time.Duration(0); t < p.Duration; t += 100 * time.Millisecond {
		time.Sleep(100 * time.Millisecond)
		if p.Backlog > 0 && t == p.Duration/200*100 { // (half way, on the 100 ms grid)
			backlog()
		}
		if faultRng.Float64() < p.Crashes/10 {
			i := faultRng.IntN(len(coords))
			coords[i].cancel()
			<-coords[i].done
			noteStats(coords[i].c)
			net.Touch("coordinator crashed")
			d := time.Duration(faultRng.IntN(2000)) * time.Millisecond
			time.Sleep(d)
			startCoord(i)
		}
		if faultRng.Float64() < p.Cuts/10 {
			a := actors[faultRng.IntN(len(actors))]
			net.Cut(a, time.Now().Add(time.Duration(faultRng.Int64N(int64(p.CutFor)+1))))
		}
		lt.tick()
	}

	// The quiet end: no more faults; the workers finish and stop.
	net.Stop()
	quietFrom := time.Now()
	close(stopWork)
	wg.Wait()
	// Every job must end within Drain of the faults' end. A worker's
	// input still in flight (published before its worker stopped, not
	// stored yet) may yet grant a job again: the quiet end waits for it
	// too (seed 94232 of b50e0aa's simulator: j1 was granted after the
	// wait had judged every job ended).
	deadline := quietFrom.Add(p.Drain)
	isCoord := func(actor string) bool {
		return slices.ContainsFunc(coords, func(c *coord) bool { return c.id == actor })
	}
	for !(allEnded(jv, jobs) && net.Publishing(isCoord) == 0 && allDecided(net) && (qr == nil || qr.idle() && qr.ended())) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	close(stopQueue)
	qwg.Wait()
	if qr != nil {
		qr.close()
	}
	// Let the coordinators store what they have folded, then stop them.
	time.Sleep(2 * p.LeaderTTL)
	for _, c := range coords {
		c.cancel()
		<-c.done
		noteStats(c.c)
	}
	cancel()
	if unslowed != nil {
		<-unslowed
	}
	<-netDone
	rep.SimTime = time.Since(start)

	// The oracles.
	net.Lock()
	l := logOf(model)
	net.Unlock()
	rep.Inputs, rep.Decisions = len(l.Inputs), len(l.Decisions)
	rep.Digest = digest(l)
	var entries []chaos.Entry
	for _, w := range workers {
		entries = append(entries, w.journal...)
	}
	for _, w := range sdks {
		entries = append(entries, w.journal...)
	}
	entries = append(entries, opLog...)
	entries = append(entries, floodLog.all()...)
	if qr != nil {
		entries = append(entries, qr.disp.j.all()...)
		entries = append(entries, qr.ops.j.all()...)
		for _, w := range qr.workers {
			entries = append(entries, w.j.all()...)
		}
	}
	ids := make([]string, len(coords))
	for i, c := range coords {
		ids[i] = c.id
	}
	// Inputs the server acknowledged then lost in a crash are its loss
	// (lost.go): no verdict is owed to them.
	entries, excused := lt.excuse(entries)
	if n := lt.excuseEffects(res); n > 0 {
		net.Touch("effects under a grant the server lost")
	}
	r := chaos.Check(l, &chaos.Clients{Entries: entries, Coordinators: ids})
	lt.classify(l)
	if lt.broken {
		// A crash lost inputs whose decisions were kept: the log no
		// longer folds, and the coordinators must refuse it.
		lt.judgeBroken(rep, runErrs.refusals, 2*p.LeaderTTL+3*time.Second)
		for _, f := range []chaos.Findings{r.Phantom} {
			for _, s := range f.Items {
				rep.finding("%s", s)
			}
		}
	} else {
		for _, f := range []chaos.Findings{r.Lost, r.Phantom, r.DoubleHolders, r.StaleEffects, r.Gaps} {
			for _, s := range f.Items {
				rep.finding("%s", s)
			}
		}
		for _, s := range chaos.Liveness(r, "j", deadline.UnixNano()).Items {
			rep.finding("liveness: %s", s)
		}
		var reached func(worker string, seq uint64, storedAt int64, t time.Time) bool
		if qr != nil {
			reached = func(worker string, seq uint64, storedAt int64, t time.Time) bool {
				for _, w := range qr.workers {
					if w.id == worker {
						return w.reached(seq, storedAt, t)
					}
				}
				return true // not a queue worker: nothing is excused
			}
		}
		checkEffects(rep, net, l, res, reached)
		checkRules(rep, l)
		checkVerdicts(rep, l, entries, excused)
		v := indexVerdicts(l)
		for _, w := range sdks {
			if w.calls != nil {
				checkCalls(rep, net, v, w.calls, excused)
			}
		}
		if qr != nil {
			checkQueues(rep, net, l)
			checkOpsCalls(rep, net, l, qr.disp, excused)
			checkOpsCalls(rep, net, l, qr.ops, excused)
			for _, w := range qr.workers {
				if w.calls != nil {
					checkCalls(rep, net, v, w.calls, excused)
				}
			}
			for _, f := range qr.findings {
				rep.finding("%s", f)
			}
		}
		for i, e := range runErrs.errs {
			if !lt.refusalExcused(runErrs.refusals[i]) {
				rep.finding("%s", e)
			}
		}
	}
	if len(lt.crashes) > 0 && !rep.OK() {
		rep.finding("(crashes: %s)", lt.describe())
	}
	leaders := map[string]bool{}
	for _, m := range l.Decisions {
		if d, err := events.DecodeDecision(m.Data); err == nil {
			switch d.Kind {
			case events.KindExpired, events.KindStale, events.KindLate, events.KindDuplicate, events.KindLostAuthority, events.KindCancelRequested, events.KindUnresolved:
				net.Touch("decision " + d.Kind.String())
			}
			if d.Verb == events.VerbTick {
				leaders[d.Actor] = true
			}
		}
	}
	if len(leaders) > 1 {
		net.Touch("ticks by more than one coordinator")
	}
	for _, w := range workers {
		for _, f := range w.findings {
			rep.finding("%s: %s", w.id, f)
		}
	}
	for _, w := range sdks {
		for _, f := range w.findings {
			rep.finding("%s: %s", w.id, f)
		}
	}
	rep.Effects = len(res.accepted)
	net.Lock()
	rep.Faults, rep.Seen = maps(net.Counts), maps(net.Seen)
	net.Unlock()
	if !rep.OK() {
		rep.Log = logs.lines()
	}
	return rep
}

// digest hashes the streams' subjects, bodies and stored times (not their
// headers: the coordinators' own inputs carry random Msg-Ids).
func digest(l *chaos.Log) string {
	h := sha256.New()
	for _, ms := range [][]chaos.Message{l.Inputs, l.Decisions} {
		for _, m := range ms {
			fmt.Fprintf(h, "%d %d %s %q\n", m.Seq, m.Time, m.Subject, m.Data)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func maps(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// view is every job's last projection in the decision stream, each
// decision decoded once (the drain's loop and the operator look often).
type view struct {
	net  *jsmodel.Net
	mu   sync.Mutex
	next int                   // decisions read
	jobs map[string]events.Job // by id; a retired job leaves it
	live bool                  // a rules input was folded
	// folded is the greatest input sequence with a decision; opsLast the
	// last input the queue workload's dispatcher and operator stored
	// (their prefixes opsPrefixes): the view holds what they asked for
	// once folded reaches it.
	folded, opsLast uint64
	nextIn          int
	opsPrefixes     []string
}

func newView(net *jsmodel.Net) *view { return &view{net: net, jobs: map[string]events.Job{}} }

// update reads the decisions stored since the last call.
func (v *view) update() {
	v.net.Lock()
	msgs := v.net.Model().Out.Msgs
	if len(msgs) < v.next { // (a stream that lost its tail: read it again)
		v.next, v.live = 0, false
		clear(v.jobs)
	}
	fresh := slices.Clone(msgs[v.next:])
	v.next = len(msgs)
	ins := v.net.Model().In.Msgs
	for _, m := range ins[min(v.nextIn, len(ins)):] {
		for _, p := range v.opsPrefixes {
			if strings.HasPrefix(m.Subject, p) {
				v.opsLast = max(v.opsLast, m.Seq)
			}
		}
	}
	v.nextIn = len(ins)
	v.net.Unlock()
	for i := range fresh {
		d, err := events.DecodeDecision(fresh[i].Data)
		if err != nil {
			continue
		}
		v.folded = max(v.folded, d.Cause)
		switch {
		case d.Kind == events.KindRulesSet:
			v.live = true
		case d.Job.ID == events.NoJob || d.Job.ID == "":
		case d.Kind == events.KindRetired:
			delete(v.jobs, d.Job.ID)
		default:
			v.jobs[d.Job.ID] = d.Job
		}
	}
}

// state returns job's last state (StateNone: none, or retired).
func (v *view) state(job string) events.State {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.update()
	return v.jobs[job].State
}

// queueJobs returns every queue job's last projection, by id, and
// whether every input of the queue workload's dispatcher and operator
// stored so far was folded.
func (v *view) queueJobs() (map[string]events.Job, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.update()
	out := map[string]events.Job{}
	for id, j := range v.jobs {
		if j.Queue != "" {
			out[id] = j
		}
	}
	return out, v.folded >= v.opsLast
}

// isLive reports whether the log has moved to the current rules revision.
func (v *view) isLive() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.update()
	return v.live
}

// allEnded reports whether every job's last decision left it ended (or it
// never had a lease).
func allEnded(v *view, jobs []string) bool {
	for _, j := range jobs {
		if v.state(j).Live() {
			return false
		}
	}
	return true
}

// logOf is the model's streams as the chaos checks read them.
func logOf(m *jsmodel.Model) *chaos.Log {
	conv := func(s *jsmodel.Stream) []chaos.Message {
		out := make([]chaos.Message, len(s.Msgs))
		for i, m := range s.Msgs {
			out[i] = chaos.Message{Seq: m.Seq, Time: m.Time.UnixNano(), Subject: m.Subject, Data: m.Data, Header: m.Header}
		}
		return out
	}
	return &chaos.Log{Inputs: conv(m.In), Decisions: conv(m.Out), InputLast: m.In.Last(), DecisionLast: m.Out.Last()}
}

// logSink keeps the coordinators' warnings and errors.
type logSink struct {
	mu  sync.Mutex
	buf []string
}

func (s *logSink) add(line string) {
	s.mu.Lock()
	if len(s.buf) < 400 {
		s.buf = append(s.buf, line)
	}
	s.mu.Unlock()
}

func (s *logSink) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.buf)
}

func (s *logSink) handler(id string) slog.Handler {
	return &sinkHandler{s: s, id: id}
}

type sinkHandler struct {
	s     *logSink
	id    string
	attrs []slog.Attr
}

func (h *sinkHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h *sinkHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &sinkHandler{s: h.s, id: h.id, attrs: append(slices.Clone(h.attrs), as...)}
}
func (h *sinkHandler) WithGroup(string) slog.Handler { return h }
func (h *sinkHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s %s", r.Time.Format("15:04:05.000"), h.id, r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.s.add(b.String())
	return nil
}

// Coverage sums the faults and rare paths of many reports, sorted.
func Coverage(reps []*Report, w io.Writer) {
	faults, seen := map[string]int{}, map[string]int{}
	var sim time.Duration
	var inputs, decisions, effects, queues, lost, backlog, failed int
	for _, r := range reps {
		sim += r.SimTime
		inputs, decisions, effects = inputs+r.Inputs, decisions+r.Decisions, effects+r.Effects
		if r.Plan.Queues > 0 {
			queues++
		}
		if r.Plan.Lost.Rate > 0 {
			lost++
		}
		if r.Plan.Backlog > 0 {
			backlog++
		}
		if !r.OK() {
			failed++
		}
	}
	fmt.Fprintf(w, "%d seeds (%d failed): %.1f simulated hours; %d inputs, %d decisions, %d effects; %d with queues, %d with crashes that lose tails, %d with a backlog restart\n",
		len(reps), failed, sim.Hours(), inputs, decisions, effects, queues, lost, backlog)
	for _, r := range reps {
		for k, v := range r.Faults {
			faults[k] += v
		}
		for k, v := range r.Seen {
			seen[k] += v
		}
	}
	print := func(title string, m map[string]int) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(w, "%s:\n", title)
		for _, k := range keys {
			fmt.Fprintf(w, "  %-32s %d\n", k, m[k])
		}
	}
	print("faults injected", faults)
	print("paths reached", seen)
}
