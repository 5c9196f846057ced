package projector

import (
	"iter"

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
func RebuildHash(base []byte, lastSeq uint64, now int64, policy *events.Policy, rules *Rules, jobs iter.Seq[events.Job], caps iter.Seq[Capacity]) ([32]byte, error) {
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
			cur.Job = j
			continue
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
