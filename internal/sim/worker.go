package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/chaos"
	"github.com/maknow/tenure/internal/jsmodel"
	"github.com/maknow/tenure/streams"
)

// settle waits until every other goroutine of the bubble is blocked.
func settle() { synctest.Wait() }

// bareWorker is a simulated worker that speaks the protocol by hand (as a
// bare NATS client or the nats CLI would): it does what the Go SDK does for its
// leases (acquire, renew at a third of the lease, progress, results, a
// cancellation answered), holds a lease's authority until the expires_at
// of its last accepted verdict, and writes effects to the fenced resource
// only while it holds it. It journals every input it sends and every
// PubAck it reads, as the chaos workers do.
type bareWorker struct {
	id       string
	c        *jsmodel.Client
	p        Plan
	rng      *rand.Rand
	res      *resource
	journal  []chaos.Entry
	findings []string

	mu      sync.Mutex
	waiters map[uint64]chan events.Decision // by the cause of the verdict awaited
	stash   map[uint64][]events.Decision    // verdicts not awaited yet, by cause
	leases  map[string]*lease
	n       int // inputs sent
}

type lease struct {
	job, id    string
	gen        uint64
	expires    time.Time // of the last accepted verdict
	renewSeq   uint64
	progSeq    uint64
	steps      int // effects written
	cancelAsk  bool
	renewAfter time.Time
}

func newWorker(id string, net *jsmodel.Net, p Plan, res *resource, seed uint64) *bareWorker {
	return &bareWorker{id: id, c: net.Client(id), p: p, rng: rand.New(rand.NewPCG(seed, 3)), res: res,
		waiters: map[uint64]chan events.Decision{}, stash: map[uint64][]events.Decision{}, leases: map[string]*lease{}}
}

// feed takes the decisions addressed to the worker.
func (w *bareWorker) feed(m coordinator.Stored) {
	d, err := events.DecodeDecision(m.Data)
	if err != nil {
		w.mu.Lock()
		w.findings = append(w.findings, fmt.Sprintf("decision %d does not decode: %v", m.Seq, err))
		w.mu.Unlock()
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if d.Kind.Derived() {
		// Time's decisions about its leases.
		if l := w.leases[d.Job.ID]; l != nil && l.gen == d.Job.Generation && !d.Job.State.Live() {
			delete(w.leases, d.Job.ID)
		}
		return
	}
	if d.Kind == events.KindCancelRequested {
		if l := w.leases[d.Job.ID]; l != nil && l.gen == d.Job.Generation {
			l.cancelAsk = true
		}
	}
	cause := d.Cause
	if ch, ok := w.waiters[cause]; ok {
		delete(w.waiters, cause)
		ch <- d
		return
	}
	w.stash[cause] = append(w.stash[cause], d)
}

// send publishes one input (retried under its Msg-Id while the outcome is
// unknown, as the SDK does) and waits for its verdict; ok is false when
// no verdict came (the outcome is unknown: a lease it concerns is given
// up, as the SDK does when no verdict comes before the lease would end).
func (w *bareWorker) send(ctx context.Context, job string, verb events.Verb, in events.Input, until time.Time) (events.Decision, bool) {
	in.Role, in.Actor, in.Job, in.Verb = events.RoleWorker, w.id, job, verb
	body := events.AppendInputBody(nil, &in)
	subj := events.InputSubject(events.RoleWorker, w.id, job, verb)
	w.n++
	id := fmt.Sprintf("%s-%d", w.id, w.n)
	sha := chaos.BodySHA(body)
	w.journal = append(w.journal, chaos.Entry{Kind: chaos.EntrySent, At: time.Now().UnixNano(), Subject: subj, MsgID: id, BodySHA: sha, Len: len(body)})
	var seq uint64
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		if !time.Now().Before(until) || ctx.Err() != nil {
			return events.Decision{}, false
		}
		pctx, cancel := context.WithDeadline(ctx, until)
		s, err := w.c.Publish(pctx, subj, body, id)
		cancel()
		if err == nil {
			seq = s
			break
		}
		if !errors.Is(err, jsmodel.ErrNotStored) {
			w.findings = append(w.findings, fmt.Sprintf("publish %s: %v", subj, err))
			return events.Decision{}, false
		}
		time.Sleep(wait) // again, under the same Msg-Id, as the SDK does
	}
	w.journal = append(w.journal, chaos.Entry{Kind: chaos.EntryAck, At: time.Now().UnixNano(), Subject: subj, MsgID: id, BodySHA: sha, Len: len(body),
		Stream: streams.Topology{}.InputStream(), Seq: seq})
	w.mu.Lock()
	if ds := w.stash[seq]; len(ds) > 0 {
		d := ds[0]
		delete(w.stash, seq)
		w.mu.Unlock()
		return d, true
	}
	ch := make(chan events.Decision, 1)
	w.waiters[seq] = ch
	w.mu.Unlock()
	t := time.NewTimer(max(time.Until(until), time.Millisecond))
	defer t.Stop()
	select {
	case d := <-ch:
		return d, true
	case <-t.C:
	case <-ctx.Done():
	}
	w.mu.Lock()
	delete(w.waiters, seq)
	w.mu.Unlock()
	return events.Decision{}, false
}

// run works until stop, then ends the leases it holds.
func (w *bareWorker) run(ctx context.Context, jobs []string, stop <-chan struct{}) {
	feed := w.c.Decisions(ctx, 1, events.DecisionPrefix+"."+w.id+".", w.feed)
	defer feed.Stop()
	leaseMS := w.p.Lease.Milliseconds()
	for {
		stopping := false
		select {
		case <-stop:
			stopping = true
		default:
			select {
			case <-stop:
				stopping = true
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(20+w.rng.IntN(200)) * time.Millisecond):
			}
		}
		now := time.Now()
		w.mu.Lock()
		var held []*lease
		for _, l := range w.leases {
			held = append(held, l)
		}
		w.mu.Unlock()
		// (a stable order: the map's is not)
		sortLeases(held)
		for _, l := range held {
			if !now.Before(l.expires) {
				w.drop(l)
				continue
			}
			switch {
			case stopping || l.cancelAsk || l.steps >= 3+w.rng.IntN(4):
				w.finish(ctx, l, stopping)
			case w.p.Boundary && w.rng.IntN(8) == 0:
				// A renewal sent the very instant the lease expires: it
				// is too late (renew_after_expiry), however fast it is
				// stored; a fold that took it would extend a lease whose
				// authority had ended.
				time.Sleep(time.Until(l.expires))
				l.renewSeq++
				d, ok := w.send(ctx, l.job, events.VerbRenew, events.Input{LeaseID: l.id, Generation: l.gen, RenewSeq: l.renewSeq}, l.expires.Add(w.p.Lease))
				if ok && d.Kind == events.KindRenewed {
					w.accept(l, d, ok) // (a finding of checkRules)
				} else {
					w.drop(l)
				}
			case !now.Before(l.renewAfter):
				l.renewSeq++
				d, ok := w.send(ctx, l.job, events.VerbRenew, events.Input{LeaseID: l.id, Generation: l.gen, RenewSeq: l.renewSeq}, l.expires)
				w.accept(l, d, ok)
			case w.p.Progress && w.rng.IntN(3) == 0:
				l.progSeq++
				d, ok := w.send(ctx, l.job, events.VerbProgress, events.Input{LeaseID: l.id, Generation: l.gen, ProgressSeq: l.progSeq, Value: int64(l.progSeq)}, l.expires)
				if ok && d.Kind != events.KindProgressed && d.Kind != events.KindLate {
					w.drop(l)
				}
			default:
				// An effect, while the lease is held by the stored clock.
				if time.Now().Before(l.expires) {
					w.res.write(l.job, l.gen, w.id, time.Now())
					l.steps++
				}
			}
		}
		if stopping {
			return
		}
		w.mu.Lock()
		n := len(w.leases)
		w.mu.Unlock()
		if n < 2 && w.rng.IntN(2) == 0 {
			job := jobs[w.rng.IntN(len(jobs))]
			w.mu.Lock()
			_, mine := w.leases[job]
			w.mu.Unlock()
			if !mine {
				d, ok := w.send(ctx, job, events.VerbAcquire, events.Input{LeaseMS: leaseMS}, time.Now().Add(w.p.Lease))
				if ok && d.Kind == events.KindGranted && d.Job.Holder == w.id {
					l := &lease{job: job, id: d.Job.LeaseID, gen: d.Job.Generation}
					w.accept(l, d, true)
					w.mu.Lock()
					w.leases[job] = l
					w.mu.Unlock()
				}
			}
		}
	}
}

// accept applies a verdict that names the lease's new expiry; anything
// else (or none) ends the worker's hold on it.
func (w *bareWorker) accept(l *lease, d events.Decision, ok bool) {
	switch {
	case ok && (d.Kind == events.KindGranted || d.Kind == events.KindRenewed) && d.Job.Holder == w.id && d.Job.Generation == l.gen:
		l.expires = time.Unix(0, d.Job.ExpiresAt)
		l.renewAfter = time.Now().Add(time.Until(l.expires) / 3)
	default:
		w.drop(l)
	}
}

func (w *bareWorker) drop(l *lease) {
	w.mu.Lock()
	if w.leases[l.job] == l {
		delete(w.leases, l.job)
	}
	w.mu.Unlock()
	l.expires = time.Time{}
}

// finish ends a lease: a cancellation acknowledged then reconciled as
// CANCELLED, or a SUCCESS result.
func (w *bareWorker) finish(ctx context.Context, l *lease, stopping bool) {
	if l.cancelAsk {
		if _, ok := w.send(ctx, l.job, events.VerbCancelAck, events.Input{LeaseID: l.id, Generation: l.gen}, l.expires); !ok {
			w.drop(l)
			return
		}
		w.send(ctx, l.job, events.VerbResult, events.Input{LeaseID: l.id, Generation: l.gen, Outcome: events.OutcomeCancelled}, l.expires)
	} else {
		w.send(ctx, l.job, events.VerbResult, events.Input{LeaseID: l.id, Generation: l.gen, Outcome: events.OutcomeSuccess}, l.expires)
	}
	w.drop(l)
}

func sortLeases(ls []*lease) {
	for i := 1; i < len(ls); i++ {
		for j := i; j > 0 && strings.Compare(ls[j].job, ls[j-1].job) < 0; j-- {
			ls[j], ls[j-1] = ls[j-1], ls[j]
		}
	}
}

// resource is the fenced resource the workers' effects go to: it accepts
// an effect of a job's generation only if no later generation of the job
// wrote before (the fencing token).
type resource struct {
	mu       sync.Mutex
	maxGen   map[string]uint64
	accepted []effect
	refused  int
}

type effect struct {
	job    string
	gen    uint64
	worker string
	at     time.Time
}

func (r *resource) write(job string, gen uint64, worker string, at time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.maxGen == nil {
		r.maxGen = map[string]uint64{}
	}
	if gen < r.maxGen[job] {
		r.refused++
		return false
	}
	r.maxGen[job] = gen
	r.accepted = append(r.accepted, effect{job: job, gen: gen, worker: worker, at: at})
	return true
}

// checkEffects: every effect the resource accepted was written while its
// generation held the job's authority by the stored clock: its holder
// made so by a decision stored before it, no later generation of the job
// begun before it, and before the expires_at of the last accepted verdict
// of its lease stored before it.
//
// One exception, which PROTOCOL.md's resolve revoke states: an operator's
// revoke ends a lease at once, and its holder learns it from the decision
// (the SDK then cancels the handler's context); an effect its holder
// wrote after the revoke but before that decision reached it (a process
// paused, a decision in flight) is stale by the log, and only a fence
// that admitted a newer generation refuses it (the resource here refuses
// a write below the highest generation written). reached (nil: none
// excused) tells whether a decision had reached a worker by a time.
func checkEffects(rep *Report, net *jsmodel.Net, l *chaos.Log, res *resource, reached func(worker string, seq uint64, storedAt int64, t time.Time) bool) {
	type gen struct {
		holder  string
		from    int64  // the stored time of its first decision
		revoked uint64 // the decision (stream sequence) of an operator's revoke of it, 0 if none
		revAt   int64  // its stored time
		expires []struct{ at, until int64 }
	}
	gens := map[string]map[uint64]*gen{}
	for _, m := range l.Decisions {
		d, err := events.DecodeDecision(m.Data)
		if err != nil || d.Job.ID == events.NoJob || d.Job.Generation == 0 {
			continue
		}
		byGen := gens[d.Job.ID]
		if byGen == nil {
			byGen = map[uint64]*gen{}
			gens[d.Job.ID] = byGen
		}
		g := byGen[d.Job.Generation]
		if g == nil {
			g = &gen{holder: d.Job.Holder, from: m.Time}
			byGen[d.Job.Generation] = g
		}
		if d.Kind == events.KindGranted || d.Kind == events.KindAcked || d.Kind == events.KindRenewed {
			g.expires = append(g.expires, struct{ at, until int64 }{m.Time, d.Job.ExpiresAt})
		}
		if d.Kind == events.KindResolved && d.Reason == events.ReasonLeaseRevoked && g.revoked == 0 && m.Time >= g.from {
			g.revoked, g.revAt = m.Seq, m.Time
		}
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	for _, e := range res.accepted {
		t := e.at.UnixNano()
		g := gens[e.job][e.gen]
		if g == nil || g.holder != e.worker || g.from > t {
			rep.finding("effect of %s on %s generation %d at %s: no decision made it the holder before", e.worker, e.job, e.gen, e.at.Format(time.RFC3339Nano))
			continue
		}
		for ng, later := range gens[e.job] {
			if ng > e.gen && later.from <= t {
				if g.revoked != 0 && reached != nil && !reached(e.worker, g.revoked, g.revAt, e.at) {
					net.Touch("effect after a revoke, before the revoke reached its holder")
					continue
				}
				rep.finding("effect of %s on %s generation %d at %s: generation %d began before, at %s", e.worker, e.job, e.gen, e.at.Format(time.RFC3339Nano), ng, time.Unix(0, later.from).Format(time.RFC3339Nano))
			}
		}
		var until int64
		for _, x := range g.expires {
			if x.at <= t {
				until = x.until
			}
		}
		if t >= until {
			rep.finding("effect of %s on %s generation %d at %s: its lease had expired at %s by the last verdict stored before it", e.worker, e.job, e.gen, e.at.Format(time.RFC3339Nano), time.Unix(0, until).Format(time.RFC3339Nano))
		}
	}
}

// checkRules checks rules of the seeds on the decision log, independent of
// the fold that made it (a fold that broke them would reproduce its own
// decisions): a renewal is accepted only when stored before its lease's
// expires_at (seed 000 §6, seed 004), and a job's generation never goes
// back (until it is retired: its id is then free again).
func checkRules(rep *Report, l *chaos.Log) {
	type key struct {
		job string
		gen uint64
	}
	expires := map[key]int64{}
	gens := map[string]uint64{}
	for _, m := range l.Decisions {
		d, err := events.DecodeDecision(m.Data)
		if err != nil || d.Job.ID == events.NoJob {
			continue
		}
		if d.Kind == events.KindRetired {
			delete(gens, d.Job.ID) // its id is free again: a new job starts at generation 0
			continue
		}
		if g := gens[d.Job.ID]; d.Job.Generation < g {
			rep.finding("decision %d: job %s generation %d after generation %d", m.Seq, d.Job.ID, d.Job.Generation, g)
		}
		gens[d.Job.ID] = max(gens[d.Job.ID], d.Job.Generation)
		k := key{d.Job.ID, d.Job.Generation}
		if d.Kind == events.KindRenewed {
			if prev, ok := expires[k]; ok && d.At >= prev {
				rep.finding("decision %d: a renewal of %s generation %d accepted at %d, at or after its lease's expires_at %d", m.Seq, d.Job.ID, d.Job.Generation, d.At, prev)
			}
		}
		if d.Job.ExpiresAt != 0 && d.Kind.Accepted() {
			expires[k] = d.Job.ExpiresAt
		}
	}
}
