package projector

import (
	"iter"

	"github.com/maknow/tenure/events"
)

// RebuildHash returns the StateHash of the state that a sequence of stored
// decisions describes, without folding any input: the auditor's second
// opinion on the fold's StateHash.
//
// The state starts from base (a Snapshot; nil for the empty state with the
// default policy). Every job projection jobs yields replaces the job of the
// same id, the later one winning if an id comes twice (projections of
// generation 0, which name a job that does not exist, are skipped); lastSeq and now become the last input sequence
// and the time; policy, when not nil, becomes the policy in force. Since a
// decision carries the whole projection of its job after the decision, the
// jobs of the decisions an input stream caused, with the cause and time of
// the last one and the policy of the last policy_set one, give the same hash
// as the fold of that input stream.
func RebuildHash(base []byte, lastSeq uint64, now int64, policy *events.Policy, jobs iter.Seq[events.Job]) ([32]byte, error) {
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
	for j := range jobs {
		if j.Generation == 0 {
			continue
		}
		if cur, ok := q.jobs[j.ID]; ok {
			cur.Job = j
			continue
		}
		q.jobs[j.ID] = &job{Job: j, heapIdx: -1}
	}
	return q.StateHash(), nil
}
