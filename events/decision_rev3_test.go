package events

import (
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"testing"
)

// Decisions of existing logs are compared by their bytes (the auditor, the
// chain, the golden files): a decision without a queue job or a capacity
// (nor, from revision 5, a standing or withheld fields) must encode exactly
// as before revision 4, whatever the queue fields of its Job hold once
// Queue is "" (they are then not part of the projection).
func TestAppendDecisionOutsideQueuesUnchanged(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 20000 {
		d := randomDecision(r)
		d.Job.Queue, d.Capacity, d.Standing, d.Job.Withheld, d.DuplicateOf, d.Schedule = "", nil, nil, false, "", nil
		if got, want := AppendDecision(nil, &d), appendDecisionRev3(nil, &d); string(got) != string(want) {
			t.Fatalf("encoding changed:\n got %s\nwant %s", got, want)
		}
	}
}

// appendDecisionRev3 is AppendDecision as revision 3 left it (commit
// 0ecc210), frozen: the canonical encoding of d: fields in a fixed
// order, zero times and empty strings omitted. The same decision always
// encodes to the same bytes; the auditor compares these bytes.
func appendDecisionRev3(b []byte, d *Decision) []byte {
	b = append(b, `{"v":1,"cause":`...)
	b = strconv.AppendUint(b, d.Cause, 10)
	b = append(b, `,"n":`...)
	b = strconv.AppendUint(b, uint64(d.N), 10)
	b = append(b, `,"of":`...)
	b = strconv.AppendUint(b, uint64(d.Of), 10)
	b = append(b, `,"at":"`...)
	b = AppendTime(b, d.At)
	b = append(b, `","kind":"`...)
	b = append(b, d.Kind.String()...)
	b = append(b, `","accepted":`...)
	b = strconv.AppendBool(b, d.Kind.Accepted())
	b = append(b, `,"reason":"`...)
	b = append(b, d.Reason...)
	b = append(b, '"')
	if d.Detail != "" {
		b = append(b, `,"detail":`...)
		b = appendString(b, d.Detail)
	}
	b = append(b, `,"input":{"role":"`...)
	b = append(b, d.Role.String()...)
	b = append(b, `","actor":"`...)
	b = append(b, d.Actor...)
	b = append(b, `","verb":"`...)
	b = append(b, d.Verb.String()...)
	b = append(b, `"},"addressee":"`...)
	b = append(b, d.Addressee...)
	b = append(b, `","job":`...)
	b = appendJobRev3(b, &d.Job)
	if d.Policy != nil {
		b = append(b, `,"policy":`...)
		b = AppendPolicy(b, d.Policy)
	}
	if d.Revision != 0 {
		b = append(b, `,"rules":{"revision":`...)
		b = strconv.AppendUint(b, uint64(d.Revision), 10)
		b = append(b, '}')
	}
	if c := d.Checkpoint; c != nil {
		b = append(b, `,"checkpoint":{"input_seq":`...)
		b = strconv.AppendUint(b, c.InputSeq, 10)
		b = append(b, `,"state_hash":"`...)
		b = hex.AppendEncode(b, c.StateHash[:])
		b = append(b, `"}`...)
	}
	return append(b, '}')
}

// appendJobRev3 is AppendJob as revision 3 left it, frozen.
func appendJobRev3(b []byte, j *Job) []byte {
	b = append(b, `{"id":"`...)
	b = append(b, j.ID...)
	b = append(b, '"')
	if j.Generation == 0 {
		return append(b, `,"state":"NONE"}`...)
	}
	b = append(b, `,"lease_id":"`...)
	b = append(b, j.LeaseID...)
	b = append(b, `","generation":`...)
	b = strconv.AppendUint(b, j.Generation, 10)
	b = append(b, `,"holder":"`...)
	b = append(b, j.Holder...)
	b = append(b, `","state":"`...)
	b = append(b, j.State.String()...)
	b = append(b, `","ack_state":"`...)
	b = append(b, j.AckState.String()...)
	b = append(b, '"')
	if j.Result != OutcomeNone {
		b = append(b, `,"result":"`...)
		b = append(b, j.Result.String()...)
		b = append(b, '"')
	}
	b = append(b, `,"lease_ms":`...)
	b = strconv.AppendInt(b, j.Duration/1e6, 10)
	b = appendTimeField(b, "issued_at", j.IssuedAt)
	b = appendTimeField(b, "expires_at", j.ExpiresAt)
	b = appendTimeField(b, "ack_deadline", j.AckDeadline)
	b = appendTimeField(b, "acked_at", j.AckedAt)
	b = append(b, `,"renew_seq":`...)
	b = strconv.AppendUint(b, j.RenewSeq, 10)
	b = appendTimeField(b, "renew_at", j.RenewAt)
	b = append(b, `,"progress_seq":`...)
	b = strconv.AppendUint(b, j.ProgressSeq, 10)
	b = append(b, `,"progress_value":`...)
	b = strconv.AppendInt(b, j.ProgressValue, 10)
	b = appendTimeField(b, "progress_at", j.ProgressAt)
	b = append(b, `,"cancel_requested":`...)
	b = strconv.AppendBool(b, j.CancelReq)
	b = append(b, `,"cancel_acked":`...)
	b = strconv.AppendBool(b, j.CancelAck)
	b = appendTimeField(b, "cancel_at", j.CancelAt)
	b = appendTimeField(b, "cancel_by", j.CancelBy)
	b = appendTimeField(b, "ended_at", j.EndedAt)
	b = append(b, `,"lease_expired":`...)
	b = strconv.AppendBool(b, j.LeaseExpired)
	b = append(b, `,"conflict":`...)
	b = strconv.AppendBool(b, j.Conflict)
	if j.ConflictWith != "" {
		b = append(b, `,"conflict_with":"`...)
		b = append(b, j.ConflictWith...)
		b = append(b, '"')
	}
	b = append(b, `,"stale":`...)
	b = strconv.AppendUint(b, uint64(j.Stale), 10)
	b = append(b, `,"late":`...)
	b = strconv.AppendUint(b, uint64(j.Late), 10)
	b = append(b, `,"late_progress":`...)
	b = strconv.AppendUint(b, uint64(j.LateProgress), 10)
	b = append(b, `,"duplicates":`...)
	b = strconv.AppendUint(b, uint64(j.Duplicates), 10)
	b = append(b, `,"conflicts":`...)
	b = strconv.AppendUint(b, uint64(j.Conflicts), 10)
	return append(b, '}')
}
