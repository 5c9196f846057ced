// Package leasemodel is the obviously-correct reference model of the lease
// rules: the minimum a reader of the seeds (seed 000 §3–14, seed 004)
// needs to say whether each lease operation of an input may be accepted.
// It knows offers, acquires, ACKs, renewals, progress, results, releases,
// cancellation and its ACK, ticks and policies; not queues, retention or
// operators' resolves. The fold's property tests (projector) run it beside
// the fold on random schedules, and the exhaustive check
// (internal/modelcheck) asks it about every lease operation of every
// transition, seeded with the projection the operation is judged against.
// It is test tooling: no binary links it.
package leasemodel

import "github.com/maknow/tenure/events"

// Model is the reference state: the time, the policy and the jobs.
type Model struct {
	Now  int64
	Pol  events.Policy
	Jobs map[string]*Job
}

// Job is what the model keeps of one job: its current lease and the flags
// that decide what may be accepted.
type Job struct {
	Gen      uint64
	Lease    string
	Holder   string
	Offered  bool // OFFERED, waiting for ACK
	Active   bool // has authority (until Exp)
	AckBy    int64
	Exp      int64
	Dur      int64 // the lease's duration
	Issued   int64
	RenewSeq uint64
	ProgSeq  uint64
	Cancel   bool
	CancelAk bool
	CancelBy int64
	Blocked  bool // conflict or unresolved: no new lease
	Closed   bool // SUCCESS or CANCELLED
}

// New returns a model with no jobs under policy pol.
func New(pol events.Policy) *Model {
	return &Model{Pol: pol, Jobs: map[string]*Job{}}
}

// FromProjection is the model's job for the fold's projection j (exists:
// j is in the projection): what an operation on it is judged against.
func FromProjection(j events.Job, exists bool) *Job {
	if !exists {
		return &Job{}
	}
	return &Job{
		Gen: j.Generation, Lease: j.LeaseID, Holder: j.Holder,
		Offered: j.State == events.StateOffered, Active: j.State == events.StateActive,
		AckBy: j.AckDeadline, Exp: j.ExpiresAt, Dur: j.Duration, Issued: j.IssuedAt,
		RenewSeq: j.RenewSeq, ProgSeq: j.ProgressSeq,
		Cancel: j.CancelReq, CancelAk: j.CancelAck, CancelBy: j.CancelBy,
		Blocked: j.Conflict || j.State == events.StateUnresolved,
		Closed:  j.State == events.StateCompleted || j.State == events.StateCancelled,
	}
}

// Modelled reports whether the model knows verb v.
func Modelled(v events.Verb) bool {
	switch v {
	case events.VerbOffer, events.VerbAcquire, events.VerbAck, events.VerbRenew, events.VerbProgress,
		events.VerbResult, events.VerbRelease, events.VerbCancel, events.VerbCancelAck, events.VerbTick, events.VerbPolicy:
		return true
	}
	return false
}

// Advance applies time: deadlines at or before t end the lease.
func (m *Model) Advance(t int64) {
	if t > m.Now {
		m.Now = t
	}
	for _, j := range m.Jobs {
		if j.Offered && j.AckBy <= m.Now {
			j.Offered = false
		}
		if j.Active && j.Cancel && min(j.Exp, j.CancelBy) <= m.Now {
			j.Active = false
			j.Blocked = true // unresolved
		}
		if j.Active && j.Exp <= m.Now {
			j.Active = false
		}
	}
}

func (m *Model) job(id string) *Job {
	if m.Jobs[id] == nil {
		m.Jobs[id] = &Job{}
	}
	return m.Jobs[id]
}

// claimOK: the claim names the live lease of its holder. Another holder
// claiming the live generation blocks the job (ownership conflict).
func (j *Job) claimOK(holder, lease string, gen uint64) bool {
	if gen == j.Gen && lease == j.Lease && holder != j.Holder && (j.Offered || j.Active) {
		j.Blocked = true
	}
	return !j.Blocked && gen == j.Gen && lease == j.Lease && holder == j.Holder
}

// extend is the expiry of a lease of j extended by dur now, bounded by its
// lifetime.
func (m *Model) extend(j *Job, dur int64) int64 {
	return min(m.Now+dur, j.Issued+m.Pol.MaxLifetime)
}

// Expect returns whether each lease operation of in should be accepted, in
// order, and applies those that are. It panics on a verb the model does not
// know (Modelled).
func (m *Model) Expect(in *events.Input) []bool {
	const ms = int64(1e6)
	switch in.Verb {
	case events.VerbOffer, events.VerbAcquire:
		j := m.job(in.Job)
		ok := !j.Blocked && !j.Closed && !j.Offered && !j.Active && j.Gen < m.Pol.MaxGenerations &&
			(in.LeaseMS == 0 || in.LeaseMS*ms >= m.Pol.MinLease && in.LeaseMS*ms <= m.Pol.MaxLease)
		if ok {
			j.Gen++
			j.Lease = "" // set by the caller from the decision (Issued)
			j.RenewSeq, j.ProgSeq, j.Cancel, j.CancelAk = 0, 0, false, false
			j.Dur, j.Issued = m.Pol.DefaultLease, m.Now
			if in.LeaseMS != 0 {
				j.Dur = in.LeaseMS * ms
			}
			if in.Verb == events.VerbOffer {
				ack := m.Pol.AckTimeout
				if in.AckTimeoutMS != 0 {
					ack = in.AckTimeoutMS * ms
				}
				j.Holder, j.Offered, j.AckBy = in.Holder, true, m.Now+ack
			} else {
				j.Holder, j.Active, j.Exp = in.Actor, true, m.extend(j, j.Dur)
			}
		}
		return []bool{ok}
	case events.VerbAck:
		j := m.job(in.Job)
		ok := j.claimOK(in.Actor, in.LeaseID, in.Generation) && j.Offered
		if ok {
			j.Offered, j.Active = false, true
			j.Exp = m.extend(j, j.Dur)
		}
		return []bool{ok}
	case events.VerbRenew:
		leases := in.Leases
		if len(leases) == 0 {
			leases = []events.LeaseRef{{Job: in.Job, LeaseID: in.LeaseID, Generation: in.Generation, RenewSeq: in.RenewSeq, LeaseMS: in.LeaseMS}}
		}
		out := make([]bool, len(leases))
		for i, r := range leases {
			j := m.job(r.Job)
			dur := min(max(j.Dur, m.Pol.MinLease), m.Pol.MaxLease)
			if r.LeaseMS != 0 {
				dur = r.LeaseMS * ms
			}
			ok := j.claimOK(in.Actor, r.LeaseID, r.Generation) && j.Active && !j.Cancel && r.RenewSeq > j.RenewSeq &&
				dur >= m.Pol.MinLease && dur <= m.Pol.MaxLease
			if ok {
				j.RenewSeq, j.Dur = r.RenewSeq, dur
				j.Exp = m.extend(j, dur)
			}
			out[i] = ok
		}
		return out
	case events.VerbProgress:
		j := m.job(in.Job)
		ok := j.claimOK(in.Actor, in.LeaseID, in.Generation) && j.Active && !j.Cancel && in.ProgressSeq > j.ProgSeq
		if ok {
			j.ProgSeq = in.ProgressSeq
		}
		return []bool{ok}
	case events.VerbResult:
		j := m.job(in.Job)
		ok := j.claimOK(in.Actor, in.LeaseID, in.Generation) && j.Active && !(j.Cancel && in.Outcome == events.OutcomeSuccess)
		if ok {
			j.Active = false
			j.Closed = in.Outcome != events.OutcomeFailed
		}
		return []bool{ok}
	case events.VerbRelease:
		j := m.job(in.Job)
		ok := j.claimOK(in.Actor, in.LeaseID, in.Generation) && (j.Active || j.Offered) && !j.Cancel
		if ok {
			j.Active, j.Offered = false, false
		}
		return []bool{ok}
	case events.VerbCancel:
		j := m.job(in.Job)
		if in.Generation != 0 && (in.Generation != j.Gen || in.LeaseID != j.Lease) {
			return []bool{false} // names a lease that is not the current one
		}
		switch {
		case j.Offered:
			j.Offered, j.Closed = false, true
			return []bool{true}
		case j.Active && !j.Cancel:
			j.Cancel, j.CancelBy = true, m.Now+m.Pol.CancelTimeout
			return []bool{true}
		}
		return []bool{false}
	case events.VerbCancelAck:
		j := m.job(in.Job)
		ok := j.claimOK(in.Actor, in.LeaseID, in.Generation) && j.Active && j.Cancel && !j.CancelAk
		if ok {
			j.CancelAk = true
		}
		return []bool{ok}
	case events.VerbTick:
		return []bool{true}
	case events.VerbPolicy:
		m.Pol = in.Policy
		return []bool{true}
	}
	panic("leasemodel: unmodelled verb " + in.Verb.String())
}

// Issued records the id of the lease an accepted offer or acquire of job
// created (the fold's decision names it).
func (m *Model) Issued(job, lease string) { m.job(job).Lease = lease }
