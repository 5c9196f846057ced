package modelcheck

import (
	"fmt"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/leasemodel"
	"github.com/maknow/tenure/projector"
)

// The rules (doc.go). Each finding names one of them and, in Check, which
// of its checks failed: Run reports the first (shortest) finding of each
// check.
const (
	RuleOneHolder   = "one-holder"
	RuleGeneration  = "generation"
	RuleExpiry      = "expiry"
	RuleRenew       = "renew"
	RuleProgress    = "progress"
	RuleAck         = "ack"
	RuleResult      = "result"
	RuleStale       = "stale"
	RuleConflict    = "conflict"
	RuleCancel      = "cancel"
	RuleVerdict     = "verdict"
	RuleTime        = "time"
	RuleState       = "state"
	RuleQueue       = "queue"
	RuleDeterminism = "determinism"
	// RuleConcurrency (revision 9): no job of a limited concurrency key is
	// offered while as many of the key's jobs as its limit are live, and a
	// limit revokes nothing.
	RuleConcurrency = "concurrency"
	// RuleReference: the verdict accepts exactly when the reference model
	// (internal/leasemodel, the property tests' model) says the operation
	// may be accepted, judged against the same projection.
	RuleReference = "reference"
)

// finding is one broken check of a transition.
type finding struct {
	rule, check, detail string
}

// before is what the judge needs of a state, read before the input.
type before struct {
	now     int64
	pol     events.Policy
	rev     uint32
	jobs    []events.Job // by scope job index
	present []bool
	caps    map[string]projector.Capacity // the scope queue's standing announcements, by worker
	stand   map[string]events.Standing    // the scope queue's standings, by worker
}

func (c *checker) before(p *projector.Projector) *before {
	b := &before{now: p.Now(), pol: p.Policy(), rev: p.Revision(), jobs: make([]events.Job, len(c.s.Jobs)),
		present: make([]bool, len(c.s.Jobs)), caps: map[string]projector.Capacity{}, stand: map[string]events.Standing{}}
	for i, id := range c.s.Jobs {
		b.jobs[i], b.present[i] = p.Job(id)
	}
	for _, cp := range p.Capacities() {
		if cp.Queue == c.s.Queue {
			b.caps[cp.Worker] = cp
		}
	}
	for _, st := range p.Standings() {
		if st.Queue == c.s.Queue {
			b.stand[st.Worker] = st.Standing
		}
	}
	return b
}

// op is one lease operation of an input: the job it names and, for the
// verbs that name a lease, the claim.
type op struct {
	job      string
	lease    string
	gen      uint64
	renewSeq uint64
	leaseMS  int64
	// elem is the element of a batch ack or result (revision 7) the
	// operation is: the input its verdict is judged as.
	elem *events.Input
}

// opsOf lists the lease operations of in, in order: one per input, but a
// batch renew, and from revision 7 a batch ack or result, which have one
// per element.
func opsOf(in *events.Input) []op {
	if in.Verb == events.VerbRenew && in.Job == events.NoJob {
		out := make([]op, len(in.Leases))
		for i, r := range in.Leases {
			out[i] = op{job: r.Job, lease: r.LeaseID, gen: r.Generation, renewSeq: r.RenewSeq, leaseMS: r.LeaseMS}
		}
		return out
	}
	if in.Job == events.NoJob && len(in.Batch) > 0 {
		out := make([]op, len(in.Batch))
		for i := range in.Batch {
			e := &in.Batch[i]
			out[i] = op{job: e.Job, lease: e.LeaseID, gen: e.Generation, leaseMS: e.LeaseMS, elem: e}
		}
		return out
	}
	return []op{{job: in.Job, lease: in.LeaseID, gen: in.Generation, renewSeq: in.RenewSeq, leaseMS: in.LeaseMS}}
}

// judge checks one transition: input in (stored as raw) stepped from the
// state b describes gave decisions ds and left post. w is the workers'
// knowledge before the input; judge updates it to theirs after.
type judge struct {
	c     *checker
	b     *before
	in    *events.Input
	raw   events.Raw
	now   int64
	pol   events.Policy // the policy in force at the decision being judged
	w     *world
	sh    map[string]events.Job // the projections the decisions so far describe
	held  map[string]int        // live leases of the scope queue's jobs, by holder
	caps  map[string]projector.Capacity
	stand map[string]events.Standing
	out   []finding
}

func (g *judge) fail(rule, check, format string, args ...any) {
	g.out = append(g.out, finding{rule, check, fmt.Sprintf(format, args...)})
}

func (c *checker) judge(b *before, w *world, in *events.Input, raw events.Raw, ds []events.Decision, post *projector.Projector) []finding {
	g := &judge{c: c, b: b, in: in, raw: raw, now: max(b.now, raw.Time), pol: b.pol, w: w,
		sh: map[string]events.Job{}, held: map[string]int{}, caps: map[string]projector.Capacity{}, stand: map[string]events.Standing{}}
	for i, id := range c.s.Jobs {
		if b.present[i] {
			j := b.jobs[i]
			g.sh[id] = j
			if j.Queue != "" && j.State.Live() {
				g.held[j.Holder]++
			}
		}
	}
	for k, v := range b.caps {
		g.caps[k] = v
	}
	for k, v := range b.stand {
		g.stand[k] = v
	}

	// time: the input's time is max(the fold's, its stored time).
	if post.Now() != g.now {
		g.fail(RuleTime, "clamp", "the fold's time after input %d is %s, want max(%s, stored %s)", raw.Seq, rel(post.Now()), rel(b.now), rel(raw.Time))
	}
	ops := opsOf(in)
	k := 0
	for i := range ds {
		d := &ds[i]
		if d.Cause != raw.Seq || d.At != g.now || d.N != uint32(i) || d.Of != uint32(len(ds)) {
			g.fail(RuleVerdict, "names-input", "decision %d names cause %d at %s (%d of %d), want input %d at %s (%d of %d)",
				i, d.Cause, rel(d.At), d.N, d.Of, raw.Seq, rel(g.now), i, len(ds))
		}
		if d.Role != in.Role || d.Actor != in.Actor || d.Verb != in.Verb {
			g.fail(RuleVerdict, "identity", "decision %d names %s/%s %s, the input's subject %s", i, d.Role, d.Actor, d.Verb, raw.Subject)
		}
		switch {
		case d.Kind.Derived():
			g.derived(d)
		case k >= len(ops):
			g.fail(RuleVerdict, "one-verdict", "input %d (%s) has more verdicts than its %d lease operations: %s", raw.Seq, in.Verb, len(ops), kr(d))
		default:
			if e := ops[k].elem; e != nil {
				g.in = e // judged as the single input it is
			}
			g.verdict(d, &ops[k])
			g.in = in
			k++
		}
		if d.Standing != nil && d.Standing.Queue == c.s.Queue {
			g.stand[d.Addressee] = *d.Standing
		}
	}
	if k < len(ops) {
		g.fail(RuleVerdict, "one-verdict", "input %d (%s) has %d verdicts for %d lease operations", raw.Seq, in.Verb, k, len(ops))
	}

	if c.s.ConcurrencyKey != "" {
		g.concurrency(ds, post)
	}

	// state: the decisions describe the fold's state; expiry: no live
	// lease outlives its deadline once the input's time is applied.
	for i, id := range c.s.Jobs {
		j, ok := post.Job(id)
		s, had := g.sh[id]
		switch {
		case ok != had:
			g.fail(RuleState, "describe", "job %s is in the projection: %v; the decisions say %v", id, ok, had)
		case ok && j != s:
			g.fail(RuleState, "describe", "job %s is\n  %s\nthe decisions say\n  %s", id, describeJob(&j), describeJob(&s))
		}
		if a := g.w.jobs[i].auth; a.until > g.now && (!ok || j.State != events.StateActive || j.LeaseID != a.lease.id || a.until > j.ExpiresAt) {
			g.fail(RuleOneHolder, "authority-outlives-lease", "%s's authority over job %s (g%d) runs until %s, but the lease is %s g%d until %s",
				a.lease.holder, id, a.lease.gen, rel(a.until), j.State, j.Generation, rel(j.ExpiresAt))
		}
		if !ok {
			continue
		}
		switch {
		case j.State == events.StateActive && j.ExpiresAt <= g.now:
			g.fail(RuleExpiry, "live-past-expiry", "job %s's lease g%d is ACTIVE at %s, past its expires_at %s", id, j.Generation, rel(g.now), rel(j.ExpiresAt))
		case j.State == events.StateActive && j.CancelReq && j.CancelBy <= g.now:
			g.fail(RuleCancel, "live-past-cancel-by", "job %s's lease g%d is ACTIVE at %s, past its cancel_by %s", id, j.Generation, rel(g.now), rel(j.CancelBy))
		case j.State == events.StateOffered && j.AckDeadline <= g.now:
			g.fail(RuleAck, "offered-past-deadline", "job %s's lease g%d is OFFERED at %s, past its ack_deadline %s", id, j.Generation, rel(g.now), rel(j.AckDeadline))
		}
	}
	return g.out
}

// concurrency checks RuleConcurrency on the scope's key: after an input
// that offered a job of the key under a limit, at most the limit of its
// jobs are live; after any other, no more than before.
func (g *judge) concurrency(ds []events.Decision, post *projector.Projector) {
	key := g.c.s.ConcurrencyKey
	var limit *projector.Limit
	for _, l := range post.Limits() {
		if l.Queue == g.c.s.Queue && l.ConcurrencyKey == key && l.HasMaxActive {
			limit = &l
		}
	}
	if limit == nil {
		return
	}
	before, after := 0, 0
	for i, id := range g.c.s.Jobs {
		if g.b.present[i] && g.b.jobs[i].ConcurrencyKey == key && g.b.jobs[i].State.Live() {
			before++
		}
		if j, ok := post.Job(id); ok && j.ConcurrencyKey == key && j.State.Live() {
			after++
		}
	}
	offered := false
	for i := range ds {
		offered = offered || ds[i].Kind == events.KindAssigned && ds[i].Job.ConcurrencyKey == key
	}
	switch {
	case offered && uint64(after) > limit.MaxActive:
		g.fail(RuleConcurrency, "offered-over-limit", "%d jobs of concurrency key %s live after an offer, limit %d", after, key, limit.MaxActive)
	case !offered && after > before:
		g.fail(RuleConcurrency, "more-live", "%d jobs of concurrency key %s live, %d before, and none offered", after, key, before)
	}
	if got := post.KeyActive(g.c.s.Queue, key); got != after {
		g.fail(RuleConcurrency, "count", "the fold counts %d live jobs of concurrency key %s, the projections %d", got, key, after)
	}
}

// announce records in the workers' knowledge an announcement of worker
// (slots 0: withdrawn).
func (g *judge) announce(worker string, slots uint64, until int64) {
	i, ok := g.c.workerIdx[worker]
	if !ok {
		return
	}
	if slots == 0 {
		g.w.announced[i] = 0
	} else {
		g.w.announced[i] = max(g.w.announced[i], until)
	}
}

// idx is the scope index of job id, -1 if it is not one of the scope's.
func (g *judge) idx(id string) int {
	if i, ok := g.c.jobIdx[id]; ok {
		return i
	}
	return -1
}

// project returns the projection d carries (withheld fields revealed) and
// the one before it.
func (g *judge) project(d *events.Decision) (prev events.Job, had bool, jb events.Job) {
	prev, had = g.sh[d.Job.ID]
	jb = d.Job
	if jb.Withheld && (!had || !jb.Reveal(&prev)) {
		g.fail(RuleState, "withheld", "%s withholds fields the previous projection does not reveal", kr(d))
	}
	if had && !jb.Exists() {
		g.fail(RuleState, "describe", "%s about job %s carries no projection", kr(d), d.Job.ID)
	}
	return prev, had, jb
}

// commit records jb as job id's projection after d, and the checks every
// decision about a job gets.
func (g *judge) commit(d *events.Decision, prev events.Job, had bool, jb events.Job) {
	id := d.Job.ID
	i := g.idx(id)
	if i < 0 {
		g.fail(RuleState, "job", "%s is about job %s, not one of the scope's", kr(d), id)
		return
	}
	if d.Kind == events.KindRetired {
		delete(g.sh, id)
		return
	}
	if !jb.Exists() {
		return // about a job that is not in the projection
	}
	sameGen := had && prev.Generation == jb.Generation && prev.Exists()
	if had && jb.Generation < prev.Generation {
		g.fail(RuleGeneration, "never-back", "%s: job %s's generation went back from %d to %d", kr(d), id, prev.Generation, jb.Generation)
	}
	if sameGen && jb.LeaseID != prev.LeaseID {
		g.fail(RuleGeneration, "lease-id", "%s: generation %d of job %s changed its lease id", kr(d), jb.Generation, id)
	}
	if jb.Generation > prev.Generation && d.Kind != events.KindOffered && d.Kind != events.KindGranted && d.Kind != events.KindAssigned {
		g.fail(RuleGeneration, "new-lease", "%s: job %s went to generation %d without an offer, acquire or queue offer", kr(d), id, jb.Generation)
	}
	if sameGen {
		if jb.ProgressSeq < prev.ProgressSeq {
			g.fail(RuleProgress, "never-back", "%s: job %s's progress went back from %d to %d", kr(d), id, prev.ProgressSeq, jb.ProgressSeq)
		}
		if jb.RenewSeq < prev.RenewSeq {
			g.fail(RuleRenew, "never-back", "%s: job %s's renew sequence went back from %d to %d", kr(d), id, prev.RenewSeq, jb.RenewSeq)
		}
		if jb.RenewSeq != prev.RenewSeq && d.Kind != events.KindRenewed {
			g.fail(RuleRenew, "only-renewal", "%s changed job %s's renew sequence", kr(d), id)
		}
		if prev.State == events.StateActive && jb.State == events.StateActive && jb.ExpiresAt != prev.ExpiresAt &&
			d.Kind != events.KindRenewed {
			g.fail(RuleExpiry, "only-renewal", "%s moved job %s's expires_at from %s to %s", kr(d), id, rel(prev.ExpiresAt), rel(jb.ExpiresAt))
		}
		if prev.Conflict && !jb.Conflict && d.Kind != events.KindResolved {
			g.fail(RuleConflict, "only-resolve", "%s cleared job %s's ownership conflict", kr(d), id)
		}
		if !prev.Conflict && jb.Conflict && !(d.Kind == events.KindConflict && d.Reason == events.ReasonOwnershipConflict) {
			g.fail(RuleConflict, "only-claim", "%s set an ownership conflict on job %s", kr(d), id)
		}
		if prev.State == events.StateUnresolved && jb.State != events.StateUnresolved && !(d.Kind == events.KindResolved && d.Reason == events.ReasonSettled) {
			g.fail(RuleCancel, "unresolved-until-settled", "%s took job %s out of UNRESOLVED", kr(d), id)
		}
		if prev.CancelReq && prev.State == events.StateActive && jb.State != events.StateActive {
			switch {
			case d.Kind == events.KindCompleted && jb.Result != events.OutcomeSuccess,
				d.Kind == events.KindUnresolved,
				d.Kind == events.KindResolved && d.Reason == events.ReasonLeaseRevoked:
			default:
				g.fail(RuleCancel, "reconciliation", "%s ended job %s's lease (cancel requested) as %s", kr(d), id, jb.State)
			}
		}
	}
	if had && prev.Conflict && d.Kind.Accepted() && d.Role == events.RoleWorker {
		g.fail(RuleConflict, "blocks", "%s accepted while job %s has a pending ownership conflict", kr(d), id)
	}
	g.authority(i, d, prev, had, jb)
	if jb.Queue == g.c.s.Queue && jb.Queue != "" && had && prev.State.Live() && (!jb.State.Live() || jb.Generation != prev.Generation) {
		g.held[prev.Holder]--
	}
	g.sh[id] = jb
}

// authority follows the authority of job i's holder through decision d.
func (g *judge) authority(i int, d *events.Decision, prev events.Job, had bool, jb events.Job) {
	a := &g.w.jobs[i].auth
	if a.until > 0 && had && a.lease.id == prev.LeaseID && (jb.LeaseID != prev.LeaseID || jb.State != events.StateActive) {
		end := jb.EndedAt
		if end == 0 || end > g.now {
			end = g.now
		}
		a.until = min(a.until, end)
	}
	switch d.Kind {
	case events.KindGranted, events.KindAcked, events.KindRenewed:
		if jb.State != events.StateActive {
			return
		}
		if a.until > g.now && a.lease.id != jb.LeaseID {
			g.fail(RuleOneHolder, "one-holder", "%s gives %s authority over job %s (g%d) at %s while %s (g%d) holds it until %s",
				kr(d), jb.Holder, jb.ID, jb.Generation, rel(g.now), a.lease.holder, a.lease.gen, rel(a.until))
		}
		*a = promise{lease: lease{id: jb.LeaseID, gen: jb.Generation, holder: jb.Holder}, until: jb.ExpiresAt}
	}
}

// issued records a new lease of job i in the workers' knowledge, after
// the checks every new lease gets.
func (g *judge) issued(d *events.Decision, prev events.Job, had bool, jb events.Job, holder string) {
	id := jb.ID
	i := g.idx(id)
	if i < 0 {
		return
	}
	jw := &g.w.jobs[i]
	if had && prev.Exists() {
		switch {
		case prev.Conflict:
			g.fail(RuleConflict, "blocks", "%s: a new lease of job %s while an ownership conflict is pending", kr(d), id)
		case prev.State.Live():
			g.fail(RuleOneHolder, "lease-held", "%s: a new lease of job %s while g%d is %s", kr(d), id, prev.Generation, prev.State)
		case prev.State == events.StateUnresolved:
			g.fail(RuleCancel, "unresolved-blocks", "%s: a new lease of UNRESOLVED job %s", kr(d), id)
		case (prev.State == events.StateCompleted || prev.State == events.StateCancelled) && prev.Queue == "":
			g.fail(RuleResult, "closed", "%s: a new lease of job %s, closed %s", kr(d), id, prev.State)
		}
	}
	wantGen := uint64(1)
	if had {
		wantGen = prev.Generation + 1
	}
	if jb.Generation != wantGen {
		g.fail(RuleGeneration, "next", "%s: job %s's new lease is generation %d, want %d", kr(d), id, jb.Generation, wantGen)
	}
	if jb.Queue == "" && jb.Generation > g.pol.MaxGenerations {
		g.fail(RuleGeneration, "max-generations", "%s: job %s's generation %d passes the policy's max_generations %d", kr(d), id, jb.Generation, g.pol.MaxGenerations)
	}
	if jb.LeaseID == "" || jb.LeaseID == jw.last.id || jb.LeaseID == jw.prev.id || jb.LeaseID == madeUpID {
		g.fail(RuleGeneration, "fresh-id", "%s: job %s's new lease has the id %q, issued before", kr(d), id, jb.LeaseID)
	}
	if jb.Holder != holder || jb.IssuedAt != g.now || jb.RenewSeq != 0 || jb.ProgressSeq != 0 || jb.CancelReq || jb.CancelAck ||
		jb.Result != events.OutcomeNone || jb.Conflict || jb.LeaseExpired || jb.EndedAt != 0 {
		g.fail(RuleGeneration, "fresh-lease", "%s: job %s's new lease is not fresh: %s", kr(d), id, describeJob(&jb))
	}
	jw.prev, jw.last = jw.last, lease{id: jb.LeaseID, gen: jb.Generation, holder: jb.Holder}
}

// capped is t + dur bounded by the lease's lifetime.
func (g *judge) capped(issued, dur int64) (int64, events.Reason) {
	exp, limit := g.now+dur, issued+g.pol.MaxLifetime
	if exp > limit {
		return limit, events.ReasonCappedByLifetime
	}
	return exp, events.ReasonOk
}

// claimed reports whether the claim o, sent by the input's actor, names
// prev's lease exactly.
func (g *judge) claimed(o *op, prev events.Job) bool {
	return o.lease == prev.LeaseID && o.gen == prev.Generation && g.in.Actor == prev.Holder
}

// verdict checks decision d, the verdict of lease operation o.
func (g *judge) verdict(d *events.Decision, o *op) {
	in := g.in
	if d.Job.ID != o.job {
		g.fail(RuleVerdict, "job", "the verdict of an operation on job %s is about job %s: %s", o.job, d.Job.ID, kr(d))
	}
	if d.Job.ID == events.NoJob {
		switch d.Kind {
		case events.KindPolicySet:
			if in.Verb != events.VerbPolicy {
				g.fail(RuleVerdict, "kind", "%s answers a %s", kr(d), in.Verb)
			}
			g.pol = in.Policy
		case events.KindCapacitySet:
			if in.Verb != events.VerbPull || d.Capacity == nil {
				g.fail(RuleVerdict, "kind", "%s answers a %s", kr(d), in.Verb)
				return
			}
			if d.Capacity.Slots == 0 {
				delete(g.caps, d.Addressee)
			} else {
				g.caps[d.Addressee] = projector.Capacity{Worker: d.Addressee, Capacity: *d.Capacity, Seq: d.Cause}
			}
			g.announce(d.Addressee, d.Capacity.Slots, d.Capacity.Until)
		case events.KindTicked:
			if in.Verb != events.VerbTick {
				g.fail(RuleVerdict, "kind", "%s answers a %s", kr(d), in.Verb)
			}
		case events.KindLimitSet:
			if l := d.Limit; in.Verb != events.VerbLimit || l == nil || l.Queue != in.Queue || l.ConcurrencyKey != in.ConcurrencyKey ||
				l.HasMaxActive != in.HasMaxActive || l.MaxActive != in.MaxActive || l.Rate != in.Rate || l.PeriodMS != in.PeriodMS {
				g.fail(RuleVerdict, "kind", "%s answers a %s (%+v)", kr(d), in.Verb, in)
			}
		default:
			if d.Kind.Accepted() {
				g.fail(RuleVerdict, "kind", "%s accepted without a job", kr(d))
			}
		}
		return
	}
	prev, had, jb := g.project(d)
	g.reference(d, o, prev, had)
	if !d.Kind.Accepted() {
		g.unchanged(d, o, prev, had, jb)
		g.commit(d, prev, had, jb)
		return
	}
	if verbOf[d.Kind] != in.Verb {
		g.fail(RuleVerdict, "kind", "%s answers a %s", kr(d), in.Verb)
		g.commit(d, prev, had, jb)
		return
	}
	live := func(check string) bool { // the claim's lease has authority now
		switch {
		case !had || !g.claimed(o, prev):
			return false
		case prev.State != events.StateActive:
			return false
		case g.now >= prev.ExpiresAt:
			g.fail(RuleExpiry, check, "%s accepted at %s, at or after job %s's expires_at %s", kr(d), rel(g.now), prev.ID, rel(prev.ExpiresAt))
		}
		return true
	}
	switch d.Kind {
	case events.KindGranted:
		dur := g.pol.DefaultLease
		if in.LeaseMS != 0 {
			dur = in.LeaseMS * ms
		}
		exp, reason := g.capped(g.now, dur)
		if jb.State != events.StateActive || jb.AckState != events.AckAcquired || jb.ExpiresAt != exp || d.Reason != reason || jb.Duration != dur {
			g.fail(RuleExpiry, "granted", "%s: want ACTIVE/ACQUIRED, duration %d ms, expires_at %s (%s)", kr(d), dur/ms, rel(exp), reason)
		}
		g.issued(d, prev, had, jb, in.Actor)
	case events.KindOffered:
		ack := g.pol.AckTimeout
		if in.AckTimeoutMS != 0 {
			ack = in.AckTimeoutMS * ms
		}
		if jb.State != events.StateOffered || jb.AckState != events.AckPending || jb.AckDeadline != g.now+ack || jb.ExpiresAt != 0 {
			g.fail(RuleAck, "offered", "%s: want OFFERED/PENDING, ack_deadline %s, no expires_at", kr(d), rel(g.now+ack))
		}
		g.issued(d, prev, had, jb, in.Holder)
	case events.KindAcked:
		switch {
		case !had || !g.claimed(o, prev):
			g.fail(RuleAck, "claim", "%s accepted an ACK of %s g%d from %s; the lease is %s g%d of %s", kr(d), o.lease, o.gen, in.Actor, prev.LeaseID, prev.Generation, prev.Holder)
		case prev.State != events.StateOffered:
			g.fail(RuleAck, "missed-ack", "%s accepted an ACK of job %s's lease g%d in state %s (ack %s): a missed ACK counted as an ACK", kr(d), prev.ID, prev.Generation, prev.State, prev.AckState)
		case g.now >= prev.AckDeadline:
			g.fail(RuleAck, "missed-ack", "%s accepted an ACK at %s, at or after the ack_deadline %s", kr(d), rel(g.now), rel(prev.AckDeadline))
		}
		exp, reason := g.capped(prev.IssuedAt, prev.Duration)
		if jb.State != events.StateActive || jb.AckState != events.AckAcked || jb.Result != events.OutcomeNone {
			g.fail(RuleAck, "not-completion", "%s left job %s %s/%s result %s, want ACTIVE/ACKED and no result", kr(d), jb.ID, jb.State, jb.AckState, jb.Result)
		}
		if jb.ExpiresAt != exp || d.Reason != reason {
			g.fail(RuleExpiry, "acked", "%s: expires_at %s (%s), want %s (%s)", kr(d), rel(jb.ExpiresAt), d.Reason, rel(exp), reason)
		}
	case events.KindRenewed:
		if !had || !g.claimed(o, prev) {
			g.fail(RuleRenew, "binds", "%s accepted a renewal of %s g%d from %s; the lease is %s g%d of %s", kr(d), o.lease, o.gen, in.Actor, prev.LeaseID, prev.Generation, prev.Holder)
			break
		}
		if prev.State != events.StateActive {
			g.fail(RuleRenew, "active", "%s renewed job %s's lease in state %s", kr(d), prev.ID, prev.State)
			break
		}
		live("renew-at-expiry")
		if prev.CancelReq {
			g.fail(RuleCancel, "no-renewal", "%s renewed job %s's lease after a cancel request", kr(d), prev.ID)
		}
		if o.renewSeq <= prev.RenewSeq || jb.RenewSeq != o.renewSeq {
			g.fail(RuleRenew, "sequence", "%s accepted renew_seq %d after %d, and recorded %d", kr(d), o.renewSeq, prev.RenewSeq, jb.RenewSeq)
		}
		dur := min(max(prev.Duration, g.pol.MinLease), g.pol.MaxLease)
		if o.leaseMS != 0 {
			dur = o.leaseMS * ms
		}
		exp, reason := g.capped(prev.IssuedAt, dur)
		if jb.ExpiresAt != exp || d.Reason != reason || jb.State != events.StateActive || jb.Duration != dur {
			g.fail(RuleRenew, "extends", "%s: expires_at %s (%s) duration %d ms, want %s (%s) from the renewal's time, duration %d ms",
				kr(d), rel(jb.ExpiresAt), d.Reason, jb.Duration/ms, rel(exp), reason, dur/ms)
		}
	case events.KindProgressed:
		if !live("progress-at-expiry") {
			g.fail(RuleProgress, "binds", "%s accepted progress of %s g%d from %s; the lease is %s g%d of %s, %s", kr(d), o.lease, o.gen, in.Actor, prev.LeaseID, prev.Generation, prev.Holder, prev.State)
			break
		}
		if prev.CancelReq {
			g.fail(RuleCancel, "no-progress", "%s accepted progress after a cancel request", kr(d))
		}
		if in.ProgressSeq <= prev.ProgressSeq || jb.ProgressSeq != in.ProgressSeq || jb.ProgressValue != in.Value {
			g.fail(RuleProgress, "forward", "%s accepted progress_seq %d after %d", kr(d), in.ProgressSeq, prev.ProgressSeq)
		}
		if jb.ExpiresAt != prev.ExpiresAt || jb.RenewSeq != prev.RenewSeq || jb.Duration != prev.Duration {
			g.fail(RuleProgress, "never-renews", "%s moved job %s's expires_at from %s to %s", kr(d), jb.ID, rel(prev.ExpiresAt), rel(jb.ExpiresAt))
		}
	case events.KindCancelRequested:
		switch {
		case !had:
			g.fail(RuleCancel, "no-job", "%s on a job not in the projection", kr(d))
		case o.gen != 0 && (o.gen != prev.Generation || o.lease != prev.LeaseID):
			g.fail(RuleStale, "cancel-names", "%s accepted a cancel naming %s g%d; the lease is %s g%d", kr(d), o.lease, o.gen, prev.LeaseID, prev.Generation)
		case prev.State == events.StateOffered:
			if jb.State != events.StateCancelled || jb.AckState != events.AckWithdrawn || jb.Result != events.OutcomeCancelled {
				g.fail(RuleCancel, "withdraw", "%s left the withdrawn offer %s/%s result %s", kr(d), jb.State, jb.AckState, jb.Result)
			}
		case prev.State == events.StateActive && !prev.CancelReq:
			if jb.State != events.StateActive || !jb.CancelReq || jb.CancelBy != g.now+g.pol.CancelTimeout || jb.ExpiresAt != prev.ExpiresAt || jb.Result != events.OutcomeNone {
				g.fail(RuleCancel, "request", "%s: a cancel request must leave the lease ACTIVE with cancel_by %s; it is %s cancel_by %s", kr(d), rel(g.now+g.pol.CancelTimeout), jb.State, rel(jb.CancelBy))
			}
		case prev.State == events.StateQueued:
			if jb.State != events.StateCancelled {
				g.fail(RuleCancel, "dequeue", "%s left the cancelled queued job %s", kr(d), jb.State)
			}
		default:
			g.fail(RuleCancel, "request", "%s accepted on job %s in state %s (cancel requested %v)", kr(d), prev.ID, prev.State, prev.CancelReq)
		}
	case events.KindCancelAcked:
		if !live("cancel-ack-at-expiry") || !prev.CancelReq || prev.CancelAck {
			g.fail(RuleCancel, "ack", "%s accepted a cancel ACK of %s g%d from %s; the lease is %s g%d of %s, %s, cancel requested %v, acked %v",
				kr(d), o.lease, o.gen, in.Actor, prev.LeaseID, prev.Generation, prev.Holder, prev.State, prev.CancelReq, prev.CancelAck)
			break
		}
		if jb.State != events.StateActive || !jb.CancelAck || jb.ExpiresAt != prev.ExpiresAt {
			g.fail(RuleCancel, "ack-proves-nothing", "%s left job %s %s: a cancel ACK ends nothing", kr(d), jb.ID, jb.State)
		}
	case events.KindCompleted:
		if !live("result-at-expiry") {
			g.fail(RuleResult, "binds", "%s accepted a result of %s g%d from %s; the lease is %s g%d of %s, %s",
				kr(d), o.lease, o.gen, in.Actor, prev.LeaseID, prev.Generation, prev.Holder, prev.State)
			break
		}
		if prev.Result != events.OutcomeNone {
			g.fail(RuleResult, "one", "%s: a second terminal result of job %s's lease g%d", kr(d), prev.ID, prev.Generation)
		}
		if prev.CancelReq && (in.Outcome == events.OutcomeSuccess || g.now >= prev.CancelBy) {
			g.fail(RuleCancel, "reconcile", "%s accepted %s at %s after a cancel request (cancel_by %s)", kr(d), in.Outcome, rel(g.now), rel(prev.CancelBy))
		}
		if jb.AckState != events.AckAcked && jb.AckState != events.AckAcquired {
			g.fail(RuleAck, "result-after-ack", "%s: a result of a lease never ACKed (%s)", kr(d), jb.AckState)
		}
		if jb.Result != in.Outcome || jb.EndedAt != g.now || jb.State.Live() {
			g.fail(RuleResult, "records", "%s: result %s ended at %s in state %s, want %s ended at %s", kr(d), jb.Result, rel(jb.EndedAt), jb.State, in.Outcome, rel(g.now))
		}
	case events.KindReleased:
		switch {
		case !had || !g.claimed(o, prev) || !prev.State.Live():
			g.fail(RuleStale, "release", "%s accepted a release of %s g%d from %s; the lease is %s g%d of %s, %s",
				kr(d), o.lease, o.gen, in.Actor, prev.LeaseID, prev.Generation, prev.Holder, prev.State)
		case prev.CancelReq:
			g.fail(RuleCancel, "no-release", "%s accepted a release after a cancel request", kr(d))
		case prev.State == events.StateActive && g.now >= prev.ExpiresAt:
			g.fail(RuleExpiry, "release-at-expiry", "%s accepted at %s, at or after expires_at %s", kr(d), rel(g.now), rel(prev.ExpiresAt))
		case prev.State == events.StateOffered && g.now >= prev.AckDeadline:
			g.fail(RuleAck, "decline-after-deadline", "%s accepted at %s, at or after ack_deadline %s", kr(d), rel(g.now), rel(prev.AckDeadline))
		}
		if jb.State != events.StateReleased || jb.EndedAt != g.now {
			g.fail(RuleStale, "release", "%s left job %s %s ended at %s", kr(d), jb.ID, jb.State, rel(jb.EndedAt))
		}
	case events.KindResolved:
		g.resolved(d, prev, had, jb)
	case events.KindSubmitted:
		if had || jb.State != events.StateQueued || jb.Queue != in.Queue || jb.Generation != 0 {
			g.fail(RuleQueue, "submit", "%s: want a new QUEUED job of queue %s", kr(d), in.Queue)
		}
	default:
		g.fail(RuleVerdict, "kind", "%s answers a %s", kr(d), in.Verb)
	}
	g.commit(d, prev, had, jb)
}

// reference asks the reference model whether lease operation o may be
// accepted, the job being prev (had: in the projection) at the input's
// time, and fails when verdict d says otherwise. Queue jobs, resolves and
// the queue's verbs are not the model's.
func (g *judge) reference(d *events.Decision, o *op, prev events.Job, had bool) {
	in := g.in
	if !leasemodel.Modelled(in.Verb) || in.Verb == events.VerbTick || in.Verb == events.VerbPolicy || prev.Queue != "" {
		return
	}
	m := leasemodel.New(g.pol)
	m.Now = g.b.now
	m.Jobs[o.job] = leasemodel.FromProjection(prev, had)
	m.Advance(g.now)
	one := *in
	if in.Verb == events.VerbRenew {
		one.Job, one.Leases = o.job, []events.LeaseRef{{Job: o.job, LeaseID: o.lease, Generation: o.gen, RenewSeq: o.renewSeq, LeaseMS: o.leaseMS}}
	}
	if want := m.Expect(&one)[0]; want != d.Kind.Accepted() {
		g.fail(RuleReference, "accepts", "%s: the reference model says accepted=%v for %s's %s of job %s (%s g%d), judged against %s",
			kr(d), want, in.Actor, in.Verb, o.job, o.lease, o.gen, describeJob(&prev))
	}
}

// verbOf is the verb each accepted verdict about a job answers.
var verbOf = map[events.Kind]events.Verb{
	events.KindOffered: events.VerbOffer, events.KindGranted: events.VerbAcquire, events.KindAcked: events.VerbAck,
	events.KindRenewed: events.VerbRenew, events.KindProgressed: events.VerbProgress, events.KindCancelRequested: events.VerbCancel,
	events.KindCancelAcked: events.VerbCancelAck, events.KindCompleted: events.VerbResult, events.KindReleased: events.VerbRelease,
	events.KindResolved: events.VerbResolve, events.KindSubmitted: events.VerbSubmit,
}

// resolved checks an operator's resolve.
func (g *judge) resolved(d *events.Decision, prev events.Job, had bool, jb events.Job) {
	in := g.in
	if !had {
		g.fail(RuleConflict, "resolve", "%s on a job not in the projection", kr(d))
		return
	}
	ok := true
	switch d.Reason {
	case events.ReasonConflictAffirmed:
		ok = in.Action == events.ActionAffirm && prev.Conflict && prev.State.Live() && in.Holder == prev.Holder &&
			in.LeaseID == prev.LeaseID && in.Generation == prev.Generation && !jb.Conflict && jb.State == prev.State
	case events.ReasonLeaseRevoked:
		ok = in.Action == events.ActionRevoke && prev.State.Live() && jb.State == events.StateRevoked && !jb.Conflict && jb.EndedAt == g.now
	case events.ReasonConflictCleared:
		ok = in.Action == events.ActionRevoke && prev.Conflict && !prev.State.Live() && !jb.Conflict
	case events.ReasonSettled:
		ok = in.Action == events.ActionSettle && prev.State == events.StateUnresolved && jb.Result == in.Outcome &&
			(in.Outcome == events.OutcomeFailed && jb.State == events.StateFailed || in.Outcome == events.OutcomeCancelled && jb.State == events.StateCancelled)
	case events.ReasonRetried:
		ok = in.Action == events.ActionRetry && prev.State == events.StateDead && jb.State == events.StateQueued && jb.Attempt == 0
	case events.ReasonDiscarded:
		ok = in.Action == events.ActionDiscard && prev.State == events.StateDead
	default:
		ok = false
	}
	if !ok {
		g.fail(RuleConflict, "resolve", "%s (%s) on job %s %s conflict=%v, left it %s conflict=%v", kr(d), in.Action, prev.ID, prev.State, prev.Conflict, jb.State, jb.Conflict)
	}
}

// unchanged checks a verdict that did not accept its operation: the lease
// is as it was, but for its evidence counters (each up by at most one)
// and, on an ownership conflict, the conflict's mark.
func (g *judge) unchanged(d *events.Decision, o *op, prev events.Job, had bool, jb events.Job) {
	if !had {
		if jb.Exists() {
			g.fail(RuleStale, "creates", "%s created job %s", kr(d), jb.ID)
		}
		return
	}
	conflict := d.Kind == events.KindConflict && d.Reason == events.ReasonOwnershipConflict
	if conflict && !(prev.State.Live() && o.lease == prev.LeaseID && o.gen == prev.Generation && g.in.Actor != prev.Holder) {
		g.fail(RuleConflict, "only-claim", "%s: %s's claim of %s g%d is no claim of job %s's live lease %s g%d of %s (%s)",
			kr(d), g.in.Actor, o.lease, o.gen, prev.ID, prev.LeaseID, prev.Generation, prev.Holder, prev.State)
	}
	a, b := prev, jb
	for _, c := range []struct {
		name string
		x, y *uint64
	}{{"stale", &a.Stale, &b.Stale}, {"late", &a.Late, &b.Late}, {"late_progress", &a.LateProgress, &b.LateProgress},
		{"duplicates", &a.Duplicates, &b.Duplicates}, {"conflicts", &a.Conflicts, &b.Conflicts}} {
		if *c.y < *c.x || *c.y > *c.x+1 {
			g.fail(RuleStale, "counters", "%s moved job %s's %s from %d to %d", kr(d), jb.ID, c.name, *c.x, *c.y)
		}
		*c.x, *c.y = 0, 0
	}
	if conflict {
		a.Conflict, a.ConflictWith, b.Conflict, b.ConflictWith = false, "", false, ""
	}
	if a != b {
		g.fail(RuleStale, "no-mutation", "%s (not accepted) changed job %s:\n  before %s\n  after  %s", kr(d), jb.ID, describeJob(&prev), describeJob(&jb))
	}
}

// derived checks a decision fired by time or following from the queue's rules.
func (g *judge) derived(d *events.Decision) {
	switch d.Kind {
	case events.KindWithdrawn:
		if d.Capacity == nil || d.Capacity.Slots != 0 || d.Job.ID != events.NoJob {
			g.fail(RuleQueue, "withdrawn", "%s: want a job-less withdrawal", kr(d))
		}
		delete(g.caps, d.Addressee)
		g.announce(d.Addressee, 0, 0)
		return
	case events.KindExpired, events.KindAckMissed, events.KindUnresolved, events.KindRetired,
		events.KindRequeued, events.KindDead, events.KindAssigned:
	default:
		g.fail(RuleVerdict, "derived", "%s: an unknown derived kind", kr(d))
		return
	}
	prev, had, jb := g.project(d)
	if !had {
		g.fail(RuleState, "derived", "%s about a job not in the projection", kr(d))
		g.commit(d, prev, had, jb)
		return
	}
	id := prev.ID
	same := jb.Generation == prev.Generation && jb.LeaseID == prev.LeaseID && jb.Holder == prev.Holder
	switch d.Kind {
	case events.KindExpired:
		switch {
		case prev.State != events.StateActive || !same:
			g.fail(RuleExpiry, "expired", "%s: job %s's lease was %s g%d, now g%d", kr(d), id, prev.State, prev.Generation, jb.Generation)
		case prev.CancelReq:
			g.fail(RuleCancel, "reconciliation", "%s: job %s's lease with a cancel request expired without reconciliation (want unresolved)", kr(d), id)
		case prev.ExpiresAt > g.now:
			g.fail(RuleExpiry, "early", "%s at %s, before expires_at %s", kr(d), rel(g.now), rel(prev.ExpiresAt))
		case jb.State != events.StateExpired || jb.EndedAt != prev.ExpiresAt || !jb.LeaseExpired:
			g.fail(RuleExpiry, "ends-at-expiry", "%s: job %s is %s ended at %s, want EXPIRED ended at expires_at %s", kr(d), id, jb.State, rel(jb.EndedAt), rel(prev.ExpiresAt))
		}
	case events.KindAckMissed:
		switch {
		case prev.State != events.StateOffered || !same:
			g.fail(RuleAck, "ack-missed", "%s: job %s's lease was %s", kr(d), id, prev.State)
		case prev.AckDeadline > g.now:
			g.fail(RuleAck, "early", "%s at %s, before ack_deadline %s", kr(d), rel(g.now), rel(prev.AckDeadline))
		case jb.State != events.StateAckMissed || jb.AckState != events.AckMissed || jb.EndedAt != prev.AckDeadline:
			g.fail(RuleAck, "ack-missed", "%s: job %s is %s/%s ended at %s, want ACK_MISSED/MISSED ended at %s", kr(d), id, jb.State, jb.AckState, rel(jb.EndedAt), rel(prev.AckDeadline))
		}
	case events.KindUnresolved:
		dl := prev.ExpiresAt
		reason := events.ReasonExpiredCancelUnreconciled
		if prev.CancelBy < prev.ExpiresAt {
			dl, reason = prev.CancelBy, events.ReasonCancelTimeout
		}
		switch {
		case prev.State != events.StateActive || !prev.CancelReq || !same:
			g.fail(RuleCancel, "unresolved", "%s: job %s was %s, cancel requested %v", kr(d), id, prev.State, prev.CancelReq)
		case dl > g.now:
			g.fail(RuleCancel, "early", "%s at %s, before its deadline %s", kr(d), rel(g.now), rel(dl))
		case jb.State != events.StateUnresolved || jb.EndedAt != dl || d.Reason != reason || jb.LeaseExpired != (reason == events.ReasonExpiredCancelUnreconciled):
			g.fail(RuleCancel, "bounded", "%s: job %s is %s ended at %s, want UNRESOLVED (%s) ended at %s", kr(d), id, jb.State, rel(jb.EndedAt), reason, rel(dl))
		}
	case events.KindRetired:
		ok := false
		switch d.Reason {
		case events.ReasonRetentionPassed:
			ok = g.pol.Retain > 0 && !prev.State.Live() && prev.State != events.StateUnresolved && prev.State != events.StateQueued &&
				!prev.Conflict && prev.EndedAt+g.pol.Retain <= g.now
		case events.ReasonDiscarded:
			ok = prev.State == events.StateDead && g.in.Verb == events.VerbResolve && g.in.Action == events.ActionDiscard
		}
		if !ok {
			g.fail(RuleState, "retired", "%s: job %s %s ended at %s, conflict %v, retention %d ms", kr(d), id, prev.State, rel(prev.EndedAt), prev.Conflict, g.pol.Retain/ms)
		}
	case events.KindRequeued:
		counted := true
		switch d.Reason {
		case events.ReasonAckDeadlinePassed, events.ReasonOfferDeclined, events.ReasonReleased:
			counted = false
		}
		want := prev.Attempt
		if !counted {
			want--
		}
		switch {
		case prev.Queue == "" || prev.State.Live() || !same:
			g.fail(RuleQueue, "requeued", "%s: job %s was %s", kr(d), id, prev.State)
		case g.b.rev >= events.Revision5 && prev.CancelReq:
			g.fail(RuleQueue, "cancelled", "%s: job %s's cancel was accepted, and it goes back to its queue", kr(d), id)
		case jb.State != events.StateQueued || jb.Attempt != want || jb.ReadyAt < prev.EndedAt:
			g.fail(RuleQueue, "attempts", "%s (%s): job %s is %s attempt %d ready at %s, want QUEUED attempt %d (counted: %v) ready from %s",
				kr(d), d.Reason, id, jb.State, jb.Attempt, rel(jb.ReadyAt), want, counted, rel(prev.EndedAt))
		}
	case events.KindDead:
		switch d.Reason {
		case events.ReasonAckDeadlinePassed, events.ReasonOfferDeclined, events.ReasonReleased:
			g.fail(RuleQueue, "refusal-not-attempt", "%s: job %s ended DEAD by %s, which spends no attempt", kr(d), id, d.Reason)
		case events.ReasonMaxGenerations:
		default:
			if jb.Attempt < jb.MaxAttempts || jb.State != events.StateDead || !same {
				g.fail(RuleQueue, "attempts", "%s: job %s DEAD after %d of %d attempts", kr(d), id, jb.Attempt, jb.MaxAttempts)
			}
		}
	case events.KindAssigned:
		c, ok := g.caps[jb.Holder]
		st, kept := g.stand[jb.Holder]
		if !kept {
			st = events.Standing{Window: events.InitialWindow}
		}
		switch {
		case prev.State != events.StateQueued || prev.Conflict || prev.ReadyAt > g.now:
			g.fail(RuleQueue, "offer-ready", "%s: job %s was %s conflict=%v ready at %s", kr(d), id, prev.State, prev.Conflict, rel(prev.ReadyAt))
		case g.b.rev >= events.Revision5 && prev.CancelReq:
			g.fail(RuleQueue, "cancelled", "%s: job %s's cancel was accepted, and it is offered again", kr(d), id)
		case !ok || c.Until <= g.now || uint64(g.held[jb.Holder]) >= c.Slots:
			g.fail(RuleQueue, "offer-slot", "%s: offered to %s, holding %d, whose announcement is %+v (standing %v)", kr(d), jb.Holder, g.held[jb.Holder], c.Capacity, ok)
		case g.b.rev >= events.Revision5 && (st.HeldUntil > g.now || uint64(g.held[jb.Holder]) >= st.Window):
			g.fail(RuleQueue, "offer-standing", "%s: offered to %s, holding %d, with standing %+v", kr(d), jb.Holder, g.held[jb.Holder], st)
		case jb.State != events.StateOffered || jb.Attempt != prev.Attempt+1 || jb.AckDeadline <= g.now:
			g.fail(RuleQueue, "offer", "%s: job %s is %s attempt %d ack_deadline %s", kr(d), id, jb.State, jb.Attempt, rel(jb.AckDeadline))
		}
		g.issued(d, prev, had, jb, jb.Holder)
		g.held[jb.Holder]++
	}
	g.commit(d, prev, had, jb)
}
