package audit

import (
	"strconv"
	"strings"

	"github.com/maknow/tenure/events"
)

// diffDecision lists the fields in which stored decision s differs from
// derived decision dd (whose canonical body is body): headers, subject, and
// every field of the decoded body. The subject is compared with part's
// (its partition token last, in a partitioned deployment).
func diffDecision(s *StoredDecision, k *skey, dd *events.Decision, body []byte, part events.Partition) []FieldDiff {
	var out []FieldDiff
	add := func(field, stored, derived string) {
		if stored != derived {
			out = append(out, FieldDiff{Field: field, Stored: stored, Derived: derived})
		}
	}
	add("header "+events.HeaderCause, s.Cause, strconv.FormatUint(dd.Cause, 10))
	add("header "+events.HeaderIndex, s.Index, strconv.Itoa(int(dd.N))+"/"+strconv.Itoa(int(dd.Of)))
	add("subject", s.Subject, part.DecisionSubject(dd))
	sd, err := events.DecodeDecision(s.Body)
	if err != nil {
		out = append(out, FieldDiff{Field: "body", Stored: "undecodable: " + err.Error(), Derived: string(body)})
		return out
	}
	before := len(out)
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	add("cause", u(sd.Cause), u(dd.Cause))
	add("n", u(uint64(sd.N)), u(uint64(dd.N)))
	add("of", u(uint64(sd.Of)), u(uint64(dd.Of)))
	add("at", events.FormatTime(sd.At), events.FormatTime(dd.At))
	add("kind", sd.Kind.String(), dd.Kind.String())
	add("reason", string(sd.Reason), string(dd.Reason))
	add("detail", sd.Detail, dd.Detail)
	add("input.role", sd.Role.String(), dd.Role.String())
	add("input.actor", sd.Actor, dd.Actor)
	add("input.verb", sd.Verb.String(), dd.Verb.String())
	add("addressee", sd.Addressee, dd.Addressee)
	for _, f := range jobFields {
		add("job."+f.name, f.get(&sd.Job), f.get(&dd.Job))
	}
	policy := func(p *events.Policy) string {
		if p == nil {
			return ""
		}
		return string(events.AppendPolicy(nil, p))
	}
	add("policy", policy(sd.Policy), policy(dd.Policy))
	if len(out) == before && string(s.Body) != string(body) {
		out = append(out, FieldDiff{Field: "body", Stored: "same fields, not the canonical encoding", Derived: "canonical"})
	}
	return out
}

var jobFields = []struct {
	name string
	get  func(*events.Job) string
}{
	{"id", func(j *events.Job) string { return j.ID }},
	{"lease_id", func(j *events.Job) string { return j.LeaseID }},
	{"generation", func(j *events.Job) string { return strconv.FormatUint(j.Generation, 10) }},
	{"holder", func(j *events.Job) string { return j.Holder }},
	{"state", func(j *events.Job) string { return j.State.String() }},
	{"ack_state", func(j *events.Job) string { return j.AckState.String() }},
	{"result", func(j *events.Job) string { return j.Result.String() }},
	{"lease_ms", func(j *events.Job) string { return strconv.FormatInt(j.Duration/1e6, 10) }},
	{"issued_at", func(j *events.Job) string { return events.FormatTime(j.IssuedAt) }},
	{"expires_at", func(j *events.Job) string { return events.FormatTime(j.ExpiresAt) }},
	{"ack_deadline", func(j *events.Job) string { return events.FormatTime(j.AckDeadline) }},
	{"acked_at", func(j *events.Job) string { return events.FormatTime(j.AckedAt) }},
	{"renew_seq", func(j *events.Job) string { return strconv.FormatUint(j.RenewSeq, 10) }},
	{"renew_at", func(j *events.Job) string { return events.FormatTime(j.RenewAt) }},
	{"progress_seq", func(j *events.Job) string { return strconv.FormatUint(j.ProgressSeq, 10) }},
	{"progress_value", func(j *events.Job) string { return strconv.FormatInt(j.ProgressValue, 10) }},
	{"progress_at", func(j *events.Job) string { return events.FormatTime(j.ProgressAt) }},
	{"cancel_requested", func(j *events.Job) string { return strconv.FormatBool(j.CancelReq) }},
	{"cancel_acked", func(j *events.Job) string { return strconv.FormatBool(j.CancelAck) }},
	{"cancel_at", func(j *events.Job) string { return events.FormatTime(j.CancelAt) }},
	{"cancel_by", func(j *events.Job) string { return events.FormatTime(j.CancelBy) }},
	{"ended_at", func(j *events.Job) string { return events.FormatTime(j.EndedAt) }},
	{"lease_expired", func(j *events.Job) string { return strconv.FormatBool(j.LeaseExpired) }},
	{"conflict", func(j *events.Job) string { return strconv.FormatBool(j.Conflict) }},
	{"conflict_with", func(j *events.Job) string { return j.ConflictWith }},
	{"stale", func(j *events.Job) string { return strconv.FormatUint(uint64(j.Stale), 10) }},
	{"late", func(j *events.Job) string { return strconv.FormatUint(uint64(j.Late), 10) }},
	{"late_progress", func(j *events.Job) string { return strconv.FormatUint(uint64(j.LateProgress), 10) }},
	{"duplicates", func(j *events.Job) string { return strconv.FormatUint(uint64(j.Duplicates), 10) }},
	{"conflicts", func(j *events.Job) string { return strconv.FormatUint(uint64(j.Conflicts), 10) }},
}

// subjectIn reports whether s is the subject of d in the partition whose
// decision subjects end in suffix (".<k>"; "" when unpartitioned):
// events.Partition.DecisionSubject, without building it.
func subjectIn(s, suffix string, d *events.Decision) bool {
	if suffix != "" {
		if !strings.HasSuffix(s, suffix) {
			return false
		}
		s = s[:len(s)-len(suffix)]
	}
	return subjectIs(s, d)
}
