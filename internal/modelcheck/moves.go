package modelcheck

import (
	"slices"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
)

// maxJobs bounds a scope's jobs (the world is a fixed-size value, copied
// with each state).
const maxJobs = 3

// Actors of the inputs that are not the scope's workers.
const (
	opActor    = "op"  // the operator (and dispatcher of offers)
	dispatcher = "d1"  // the dispatcher that submits to the queue
	coordActor = "c1"  // the coordinator: rules, policy of the setup, ticks
	madeUpID   = "Lx9" // a lease id no input ever issued (issued ids are L<seq>-<tag>)
)

// lease is a lease as the workers know it.
type lease struct {
	id     string
	gen    uint64
	holder string
}

// promise is the authority the checker holds a job's holder to: the lease
// of the last verdict that granted or extended it, until its expires_at,
// cut short when the lease ended.
type promise struct {
	lease lease
	until int64
}

// jobWorld is what the workers know of one job besides its projection.
type jobWorld struct {
	last, prev lease // the newest lease issued for the job id, and the one before it
	auth       promise
}

// maxWorkers bounds a scope's workers.
const maxWorkers = 3

// world is what the checker knows besides the projector's state. It is a
// value: a state's world is copied into each of its successors.
type world struct {
	jobs [maxJobs]jobWorld
	// announced is, by scope worker, the latest until the worker was told
	// an announcement of its stands (capacity_set), since it last
	// withdrew one or had one withdrawn: what it announced, which the
	// projector may still hold after a later, shorter announcement (a
	// state's identity keeps it while it is ahead).
	announced [maxWorkers]int64
}

// old is the lease a worker names as an older one: the lease issued before
// the current one, or the last one issued when the job has no lease now
// (retired).
func (jw *jobWorld) old(cur string) lease {
	if cur != "" && jw.last.id == cur {
		return jw.prev
	}
	return jw.last
}

// move is one input the checker may append, with its stored time.
type move struct {
	in events.Input
	at int64
}

// raw is the stored input of m as input seq.
func (m *move) raw(seq uint64) events.Raw {
	return events.Raw{Seq: seq, Time: m.at, Subject: events.InputSubject(m.in.Role, m.in.Actor, m.in.Job, m.in.Verb),
		Body: events.AppendInputBody(nil, &m.in)}
}

// claimKind is which lease a worker names.
type claimKind uint8

const (
	claimCur    claimKind = iota // the current lease: id and generation
	claimOld                     // the lease issued before it
	claimFuture                  // the current id with the next generation
	claimWrong                   // an id never issued, with the current generation
)

var claimNames = [...]string{claimCur: "cur", claimOld: "old", claimFuture: "future", claimWrong: "wrong"}

type claim struct {
	kind claimKind
	id   string
	gen  uint64
}

// claims are the leases a worker may name for job j (exists: it is in the
// projection).
func claims(j events.Job, exists bool, jw *jobWorld) []claim {
	var out []claim
	if exists && j.Generation > 0 {
		out = append(out, claim{claimCur, j.LeaseID, j.Generation})
	}
	cur := ""
	if exists {
		cur = j.LeaseID
	}
	if o := jw.old(cur); o.id != "" {
		out = append(out, claim{claimOld, o.id, o.gen})
	}
	if exists && j.Generation > 0 {
		out = append(out, claim{claimFuture, j.LeaseID, j.Generation + 1})
		out = append(out, claim{claimWrong, madeUpID, j.Generation})
	} else {
		out = append(out, claim{claimWrong, madeUpID, 1})
	}
	return out
}

// deadlines appends the pending deadlines of job j (after now) to ds.
func (c *checker) deadlines(ds []int64, j events.Job, pol *events.Policy, now int64) []int64 {
	add := func(t int64) {
		if t > now {
			ds = append(ds, t)
		}
	}
	switch j.State {
	case events.StateOffered:
		add(j.AckDeadline)
	case events.StateActive:
		add(j.ExpiresAt)
		if j.CancelReq {
			add(j.CancelBy)
		}
	case events.StateQueued:
		add(j.ReadyAt)
	}
	if pol.Retain > 0 && j.Exists() && !j.State.Live() && j.State != events.StateQueued && j.State != events.StateUnresolved && !j.Conflict {
		add(j.EndedAt + pol.Retain)
	}
	return ds
}

// times turns deadlines into the stored times an input may take: the
// fold's time, (with Scope.Past) one before it, then for each deadline
// the instant before it and the deadline itself (and, with after, the
// instant after it), sorted, each once.
func (c *checker) times(now int64, ds []int64, after bool) []int64 {
	var ts []int64
	for _, d := range ds {
		if d-1 > now {
			ts = append(ts, d-1)
		}
		ts = append(ts, d)
		if after {
			ts = append(ts, d+1)
		}
	}
	slices.Sort(ts)
	ts = slices.Compact(ts)
	head := []int64{now}
	if c.s.Past {
		head = append(head, now-ms)
	}
	return append(head, ts...)
}

// moves lists the inputs the scope allows in the state of p, with the
// workers' knowledge w, in a fixed order.
func (c *checker) moves(p *projector.Projector, w *world) []move {
	now := p.Now()
	pol := p.Policy()
	nowOnly := []int64{now}
	var out []move
	add := func(in events.Input, ts []int64) {
		for _, t := range ts {
			out = append(out, move{in: in, at: t})
		}
	}
	worker := func(actor, job string, verb events.Verb) events.Input {
		return events.Input{Role: events.RoleWorker, Actor: actor, Job: job, Verb: verb}
	}
	ops := func(job string, verb events.Verb) events.Input {
		return events.Input{Role: events.RoleOps, Actor: opActor, Job: job, Verb: verb}
	}
	wv, ov := c.s.WorkerVerbs, c.s.Ops

	var all []int64 // every pending deadline, for ticks
	var batch []events.LeaseRef
	var batchTimes []int64
	var acks, results []events.Input // revision 7: the elements of a batch ack and a batch result
	for i, id := range c.s.Jobs {
		j, exists := p.Job(id)
		jw := &w.jobs[i]
		ds := c.deadlines(nil, j, &pol, now)
		all = append(all, ds...)
		jt := c.times(now, ds, false)
		cls := claims(j, exists, jw)
		// Sequences are varied only on an ACTIVE lease: on any other the
		// verdict does not read them (and a state's identity leaves them
		// out, doc.go).
		active := exists && j.State == events.StateActive
		if exists && j.Generation > 0 {
			next := uint64(1)
			if active {
				next = j.RenewSeq + 1
			}
			batch = append(batch, events.LeaseRef{Job: id, LeaseID: j.LeaseID, Generation: j.Generation, RenewSeq: next})
			batchTimes = append(batchTimes, jt...)
			acks = append(acks, events.Input{Job: id, LeaseID: j.LeaseID, Generation: j.Generation})
			results = append(results, events.Input{Job: id, LeaseID: j.LeaseID, Generation: j.Generation, Outcome: events.OutcomeSuccess})
		}
		for _, wk := range c.s.Workers {
			if has(wv, "acquire") {
				add(worker(wk, id, events.VerbAcquire), jt)
			}
			for _, cl := range cls {
				if !has(c.s.Claims, claimNames[cl.kind]) {
					continue
				}
				ts := nowOnly
				if cl.kind == claimCur {
					ts = jt
				}
				named := func(verb events.Verb) events.Input {
					in := worker(wk, id, verb)
					in.LeaseID, in.Generation = cl.id, cl.gen
					return in
				}
				if has(wv, "ack") {
					add(named(events.VerbAck), ts)
				}
				if has(wv, "renew") {
					in := named(events.VerbRenew)
					if cl.kind != claimCur || !active {
						in.RenewSeq = 1
						add(in, ts)
					} else {
						in.RenewSeq = j.RenewSeq + 1 // the next
						add(in, ts)
						if j.RenewSeq >= 1 { // the same again
							in.RenewSeq = j.RenewSeq
							add(in, nowOnly)
						}
						if j.RenewSeq >= 2 { // an older one, late
							in.RenewSeq = j.RenewSeq - 1
							add(in, nowOnly)
						}
					}
				}
				if has(wv, "progress") {
					in := named(events.VerbProgress)
					if cl.kind != claimCur || !active {
						in.ProgressSeq, in.Value = 1, 0
						add(in, ts)
					} else {
						in.ProgressSeq, in.Value = j.ProgressSeq+1, int64(j.ProgressSeq+1)*37%101
						add(in, ts)
						if j.ProgressSeq >= 1 {
							in.ProgressSeq, in.Value = j.ProgressSeq, j.ProgressValue // the same again
							add(in, nowOnly)
							in.Value = (j.ProgressValue + 1) % 101 // the same sequence, another value
							add(in, nowOnly)
						}
						if j.ProgressSeq >= 2 {
							in.ProgressSeq, in.Value = j.ProgressSeq-1, 0 // an older one, late
							add(in, nowOnly)
						}
					}
				}
				if has(wv, "cancel_ack") {
					add(named(events.VerbCancelAck), ts)
				}
				if has(wv, "result") {
					outcomes := []events.Outcome{events.OutcomeSuccess, events.OutcomeFailed, events.OutcomeCancelled}
					if cl.kind == claimFuture || cl.kind == claimWrong {
						outcomes = outcomes[:1]
					}
					for _, o := range outcomes {
						in := named(events.VerbResult)
						in.Outcome = o
						add(in, ts)
					}
				}
				if has(wv, "release") {
					add(named(events.VerbRelease), ts)
				}
			}
		}
		if has(ov, "offer") {
			for _, wk := range c.s.Workers {
				in := ops(id, events.VerbOffer)
				in.Holder = wk
				add(in, jt)
			}
		}
		if has(ov, "cancel") {
			add(ops(id, events.VerbCancel), jt)
			if o := jw.old(j.LeaseID); exists && o.id != "" {
				in := ops(id, events.VerbCancel)
				in.LeaseID, in.Generation = o.id, o.gen
				add(in, nowOnly)
			}
		}
		if has(ov, "affirm") && exists && j.Generation > 0 {
			in := ops(id, events.VerbResolve)
			in.Action, in.LeaseID, in.Generation = events.ActionAffirm, j.LeaseID, j.Generation
			for _, wk := range c.s.Workers { // the holder, or another (affirm_mismatch)
				in.Holder = wk
				add(in, nowOnly)
			}
		}
		if has(ov, "revoke") {
			in := ops(id, events.VerbResolve)
			in.Action = events.ActionRevoke
			add(in, jt)
		}
		if has(ov, "settle") {
			for _, o := range []events.Outcome{events.OutcomeFailed, events.OutcomeCancelled} {
				in := ops(id, events.VerbResolve)
				in.Action, in.Outcome = events.ActionSettle, o
				add(in, nowOnly)
			}
		}
		if c.s.Queue != "" {
			if has(ov, "retry") {
				in := ops(id, events.VerbResolve)
				in.Action = events.ActionRetry
				add(in, nowOnly)
			}
			if has(ov, "discard") {
				in := ops(id, events.VerbResolve)
				in.Action = events.ActionDiscard
				add(in, nowOnly)
			}
			if has(ov, "submit") {
				in := events.Input{Role: events.RoleOps, Actor: dispatcher, Job: id, Verb: events.VerbSubmit,
					Queue: c.s.Queue, MaxAttempts: c.s.MaxAttempts, BackoffMS: c.s.BackoffMS, BackoffMax: c.s.BackoffMaxMS,
					ConcurrencyKey: c.s.ConcurrencyKey}
				add(in, nowOnly)
			}
		}
	}
	if len(c.s.Jobs) > 1 && len(batch) > 0 && has(wv, "batch") {
		slices.Sort(batchTimes)
		batchTimes = slices.Compact(batchTimes)
		for _, wk := range c.s.Workers {
			in := worker(wk, events.NoJob, events.VerbRenew)
			in.Leases = batch
			add(in, batchTimes)
			if p.Revision() >= events.Revision7 {
				// The current lease of every job, ACKed, then completed,
				// in one input each.
				for _, b := range []struct {
					verb  events.Verb
					items []events.Input
				}{{events.VerbAck, acks}, {events.VerbResult, results}} {
					in := worker(wk, events.NoJob, b.verb)
					in.Batch = make([]events.Input, len(b.items))
					for i, e := range b.items {
						e.Role, e.Actor, e.Verb = events.RoleWorker, wk, b.verb
						in.Batch[i] = e
					}
					add(in, batchTimes)
				}
			}
		}
	}
	if c.s.Queue != "" && has(wv, "pull") {
		for _, wk := range c.s.Workers {
			for _, ttl := range c.s.PullTTLs {
				in := worker(wk, events.NoJob, events.VerbPull)
				in.Queue, in.Slots, in.TTLMS = c.s.Queue, 1, ttl
				add(in, nowOnly)
			}
			in := worker(wk, events.NoJob, events.VerbPull)
			in.Queue = c.s.Queue // slots 0: withdrawn
			add(in, nowOnly)
		}
	}
	if c.s.ConcurrencyKey != "" && has(ov, "limit") {
		// The operator sets the key's limit to each of MaxActive, or lifts it.
		for i := 0; i <= len(c.s.MaxActive); i++ {
			in := ops(events.NoJob, events.VerbLimit)
			in.Queue, in.ConcurrencyKey = c.s.Queue, c.s.ConcurrencyKey
			if i < len(c.s.MaxActive) {
				in.MaxActive, in.HasMaxActive = c.s.MaxActive[i], true
			}
			add(in, nowOnly)
		}
	}
	if c.s.AltPolicy != nil && has(ov, "policy") {
		for _, pol := range []events.Policy{*c.s.AltPolicy, c.s.Policy} {
			in := ops(events.NoJob, events.VerbPolicy)
			in.Policy = pol
			add(in, nowOnly)
		}
	}
	// Ticks: just before, at and just after every pending deadline, those
	// of the queue's announcements and of the workers' standings included.
	for _, cp := range p.Capacities() {
		if cp.Until > now {
			all = append(all, cp.Until)
		}
	}
	for _, st := range p.Standings() {
		if st.HeldUntil > now {
			all = append(all, st.HeldUntil)
		}
		all = append(all, st.At+events.StandingMemoryMS*ms)
	}
	tick := events.Input{Role: events.RoleCoord, Actor: coordActor, Job: events.NoJob, Verb: events.VerbTick}
	for _, t := range c.times(now, all, true) {
		if t != now { // a tick at the fold's time changes nothing
			add(tick, []int64{t})
		}
	}
	return out
}
