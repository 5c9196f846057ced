package projector

import (
	"fmt"
	"iter"
	"maps"

	"github.com/maknow/tenure/events"
)

// RebuildHash returns the StateHash of the state that a sequence of stored
// decisions describes, without folding any input: the auditor's second
// opinion on the fold's StateHash. rules, when not nil, becomes the rules in
// force (decisions carry the revision, on rules_set, but never the lease
// key, which is in the input stream).
//
// The state starts from base (a Snapshot; nil for the empty state with the
// default policy). Every job projection jobs yields replaces the job of the
// same id, the later one winning if an id comes twice; a projection of
// generation 0 names a job that does not exist, and removes the job of that
// id if there is one (give one for a retired job); lastSeq and now become the last input sequence
// and the time; policy, when not nil, becomes the policy in force. Since a
// decision carries the whole projection of its job after the decision, the
// jobs of the decisions an input stream caused, with the cause and time of
// the last one and the policy of the last policy_set one, give the same hash
// as the fold of that input stream.
//
// From revision 4 on the state also holds the standing capacity
// announcements: each announcement caps yields replaces the one of its
// worker and queue (give the capacity_set decisions: worker the addressee,
// seq the cause), slots 0 removing it; those whose until is at or before
// now are not standing, and are left out.
//
// From revision 5 on it also holds the workers' standings: each standing
// standings yields replaces the one of its worker and queue (give the
// latest decision that carried each: worker its addressee, At its time);
// those forgotten by now, or equal to a new worker's, are left out. A
// projection with fields withheld (events.Job.Withheld) takes them from
// the job's projection before it (events.Job.Reveal): give jobs revealed
// from the decisions before them, as a reader of the whole stream can.
//
// From revision 9 on it also holds the limits (of concurrency keys, and
// of queues' rates) and their buckets: limits, when not nil, yields every
// limit in force, replacing the base's (a Rebuilder follows them from
// limit_set decisions, and the buckets from the offers, assigned,
// starting from its Seed).
//
// From revision 10 on it also holds the schedules: scheds, when not nil,
// yields every schedule defined (each as its latest schedule_set decision
// defined it, with the next due time its latest decision announced),
// replacing the base's.
func RebuildHash(base []byte, lastSeq uint64, now int64, policy *events.Policy, rules *Rules, jobs iter.Seq[events.Job], caps iter.Seq[Capacity], standings iter.Seq[Standing], limits iter.Seq[Limit], scheds iter.Seq[events.Schedule]) ([32]byte, error) {
	q := New()
	if base != nil {
		if err := q.Restore(base); err != nil {
			return [32]byte{}, err
		}
	}
	q.lastSeq, q.now = lastSeq, now
	if policy != nil {
		q.policy = *policy
	}
	if rules != nil {
		q.setRules(rules.Revision, rules.LeaseKey)
	}
	for j := range jobs {
		if !j.Exists() {
			delete(q.jobs, j.ID) // a job that does not exist (any more: retired)
			continue
		}
		if cur, ok := q.jobs[j.ID]; ok {
			if !j.Reveal(&cur.Job) {
				return [32]byte{}, fmt.Errorf("projector: rebuild: job %s: a projection with its lease id withheld, not of the generation before it", j.ID)
			}
			cur.Job = j
			continue
		}
		if j.Withheld {
			return [32]byte{}, fmt.Errorf("projector: rebuild: job %s: a projection with its lease id withheld, and none before it", j.ID)
		}
		q.jobs[j.ID] = &job{Job: j, heapIdx: -1}
	}
	if caps != nil {
		for c := range caps {
			qu := q.queueOf(c.Queue)
			if c.Slots == 0 {
				delete(qu.caps, c.Worker)
				continue
			}
			qu.caps[c.Worker] = &capacity{slots: c.Slots, until: c.Until, seq: c.Seq}
		}
	}
	if standings != nil {
		for st := range standings {
			key := standingKey{st.Queue, st.Worker}
			if q.standings == nil {
				q.standings = map[standingKey]*standing{}
			}
			q.standings[key] = &standing{window: st.Window, strikes: st.Strikes, heldUntil: st.HeldUntil, touchedAt: st.At}
		}
	}
	if limits != nil {
		for _, qu := range q.queues {
			for _, l := range qu.limits {
				q.unlimit(qu, l)
			}
		}
		for l := range limits {
			kl := q.queueOf(l.Queue).limit(l.ConcurrencyKey)
			q.nLimits++
			kl.capped, kl.max = l.HasMaxActive, l.MaxActive
			if l.Rate != 0 {
				q.setRate(kl, &bucket{rate: l.Rate, period: l.PeriodMS * 1e6, tat: l.TAT})
			}
		}
	}
	if scheds != nil {
		q.scheds, q.schedDue = nil, nil
		for def := range scheds {
			s, err := schedOf(def)
			if err != nil {
				return [32]byte{}, fmt.Errorf("projector: rebuild: schedule %s: %w", def.ID, err)
			}
			if q.scheds == nil {
				q.scheds = map[string]*sched{}
			}
			q.scheds[def.ID] = s
			q.schedArm(s)
		}
	}
	return q.StateHash(), nil
}

// Rules are the rules revision in force and its lease key.
type Rules struct {
	Revision uint32
	LeaseKey [events.LeaseKeyLen]byte
}

// Rules returns the rules in force. The lease key is the secret lease ids
// are derived from: whoever can read the input stream has it anyway.
func (p *Projector) Rules() Rules { return Rules{p.rev, p.leaseKey} }

// Rebuilder collects, from decisions given in stream order, what
// RebuildHash takes: each job's latest projection (withheld fields
// revealed from the one before, events.Job.Reveal; a retired job gone),
// each worker's latest announcement and standing on each queue, the
// latest policy, and the cause and time of the last decision. The zero
// value is ready to use.
type Rebuilder struct {
	jobs      map[string]events.Job
	caps      map[[2]string]Capacity
	standings map[[2]string]Standing
	policy    *events.Policy
	limits    map[[2]string]*Limit        // the limits in force, by queue and key, with their buckets (revision 9)
	scheds    map[string]*events.Schedule // the schedules, by id (revision 10): nil until one is seen or seeded
	cause     uint64
	at        int64
}

// From sets the cause and time Hash takes when no decision follows (those
// of the state a base holds).
func (r *Rebuilder) From(cause uint64, at int64) { r.cause, r.at = cause, at }

// Seed is From with the sequence and time of p, the state a base holds,
// and takes its limits and their buckets (revision 9), which decisions
// alone do not carry: the buckets go on from there, offer by offer.
func (r *Rebuilder) Seed(p *Projector) {
	r.From(p.LastSeq(), p.Now())
	for _, l := range p.Limits() {
		if r.limits == nil {
			r.limits = map[[2]string]*Limit{}
		}
		r.limits[[2]string{l.Queue, l.ConcurrencyKey}] = &l
	}
	for _, s := range p.Schedules() {
		r.schedule(s.Schedule)
	}
}

// schedule takes a schedule's definition.
func (r *Rebuilder) schedule(def events.Schedule) {
	if r.scheds == nil {
		r.scheds = map[string]*events.Schedule{}
	}
	r.scheds[def.ID] = &def
}

// Add takes the next decision.
func (r *Rebuilder) Add(d *events.Decision) {
	if r.jobs == nil {
		r.jobs = map[string]events.Job{}
		r.caps = map[[2]string]Capacity{}
		r.standings = map[[2]string]Standing{}
	}
	switch {
	case d.Kind == events.KindRetired:
		r.jobs[d.Job.ID] = events.Job{ID: d.Job.ID} // generation 0: gone
	case d.Job.ID != events.NoJob && d.Job.Exists():
		j := d.Job
		if prev, ok := r.jobs[j.ID]; ok {
			j.Reveal(&prev) // else RebuildHash reveals it from the base, or says it cannot
		}
		r.jobs[j.ID] = j
	case (d.Kind == events.KindCapacitySet || d.Kind == events.KindWithdrawn) && d.Capacity != nil:
		r.caps[[2]string{d.Capacity.Queue, d.Addressee}] = Capacity{Worker: d.Addressee, Capacity: *d.Capacity, Seq: d.Cause}
	}
	if s := d.Standing; s != nil {
		r.standings[[2]string{s.Queue, d.Addressee}] = Standing{Worker: d.Addressee, Standing: *s, At: d.At}
	}
	switch {
	case d.Kind == events.KindLimitSet && d.Limit != nil:
		if r.limits == nil {
			r.limits = map[[2]string]*Limit{}
		}
		k := [2]string{d.Limit.Queue, d.Limit.ConcurrencyKey}
		l := &Limit{Limit: *d.Limit}
		if cur := r.limits[k]; cur != nil && cur.Rate == l.Rate && cur.PeriodMS == l.PeriodMS {
			l.TAT = cur.TAT // the same rate keeps its bucket
		}
		if !l.HasMaxActive && l.Rate == 0 {
			delete(r.limits, k)
		} else {
			r.limits[k] = l
		}
	case d.Kind == events.KindAssigned && len(r.limits) != 0:
		// The offer spent a token of its queue's rate and of its key's.
		r.take(d.Job.Queue, "", d.At)
		if d.Job.ConcurrencyKey != "" {
			r.take(d.Job.Queue, d.Job.ConcurrencyKey, d.At)
		}
	}
	if sc := d.Schedule; sc != nil { // revision 10
		switch cur := r.scheds[sc.ID]; {
		case d.Kind == events.KindScheduleSet:
			r.schedule(*sc)
		case d.Kind == events.KindScheduleDeleted:
			delete(r.scheds, sc.ID)
		case cur != nil && d.Verb == events.VerbTick && (d.Kind == events.KindFired || d.Kind == events.KindScheduleMissed):
			cur.Next = sc.Next // what a tick's decisions announce
		}
	}
	if d.Kind == events.KindPolicySet && d.Policy != nil {
		p := *d.Policy
		r.policy = &p
	}
	r.cause, r.at = d.Cause, d.At
}

// take spends a token of the bucket of queue's limit of key at at, if
// it has a rate, as the fold's offer did.
func (r *Rebuilder) take(queue, key string, at int64) {
	if l := r.limits[[2]string{queue, key}]; l != nil && l.Rate != 0 {
		b := bucket{rate: l.Rate, period: l.PeriodMS * 1e6, tat: l.TAT}
		b.take(at)
		l.TAT = b.tat
	}
}

// Job is the latest projection of job id taken (ok false if none, or
// retired).
func (r *Rebuilder) Job(id string) (events.Job, bool) {
	j, ok := r.jobs[id]
	return j, ok && j.Exists()
}

// Hash is RebuildHash of what was taken, from base (a Snapshot; nil for the
// empty state) with rules (nil: base's), at the last decision's cause and
// time.
func (r *Rebuilder) Hash(base []byte, rules *Rules) ([32]byte, error) {
	var limits iter.Seq[Limit]
	if r.limits != nil {
		limits = func(yield func(Limit) bool) {
			for _, l := range r.limits {
				if !yield(*l) {
					return
				}
			}
		}
	}
	var scheds iter.Seq[events.Schedule]
	if r.scheds != nil {
		scheds = func(yield func(events.Schedule) bool) {
			for _, s := range r.scheds {
				if !yield(*s) {
					return
				}
			}
		}
	}
	return RebuildHash(base, r.cause, r.at, r.policy, rules, maps.Values(r.jobs), maps.Values(r.caps), maps.Values(r.standings), limits, scheds)
}
