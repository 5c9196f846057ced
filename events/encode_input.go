package events

import (
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"time"
)

// AppendInputBody appends the canonical JSON body of in to dst and returns
// the extended slice. The body is one flat object: "v":1 first, then
// "sent_at" (RFC 3339, UTC) when in.SentAt is not zero, then the fields the
// verb uses in this order:
//
//	offer       holder, lease_ms, ack_timeout_ms
//	acquire     lease_ms
//	ack         lease_id, generation
//	renew       lease_id, generation, renew_seq, lease_ms
//	batch renew leases: [{job, lease_id, generation, renew_seq, lease_ms}, ...]  (in.Job is NoJob)
//	progress    lease_id, generation, progress_seq, value, note
//	cancel      lease_id, generation, reason
//	cancel_ack  lease_id, generation
//	result      lease_id, generation, outcome, detail, permanent (revision 4; only when true)
//	release     lease_id, generation
//	resolve     action, holder, lease_id, generation (affirm), outcome (settle), reason
//	            (retry and discard, revision 4: action, reason)
//	policy      min_lease_ms, max_lease_ms, default_lease_ms, ack_timeout_ms,
//	            cancel_timeout_ms, max_lifetime_ms, max_generations,
//	            retain_ms (revision 3; only when not zero)
//	tick        (nothing)
//	rules       revision, lease_key
//	checkpoint  input_seq, state_hash
//	submit      queue, priority, max_attempts, backoff_ms, backoff_max_ms,
//	            lease_ms, ack_timeout_ms, payload (revision 4),
//	            run_at, delay_ms, unique_key, unique_for_ms (revision 8;
//	            not in a batch's elements), concurrency_key (revision 9;
//	            not in a batch's elements)
//	pull        queue, slots, ttl_ms (revision 4)
//	limit       queue, concurrency_key, max_active (only when
//	            in.HasMaxActive), rate, period_ms (revision 9)
//	schedule    schedule, op (only when not set), and for a set: cron, tz,
//	            zone, missed (only when once), then the job template as a
//	            submit's fields, concurrency_key, unique_key (revision 10)
//
// and, from revision 7 on, the batches (in.Job is NoJob, the elements in
// in.Batch, each written as the body of its single input with its job
// first and without v and sent_at):
//
//	batch submit jobs: [{job, queue, priority, ...}, ...]
//	batch ack    leases: [{job, lease_id, generation}, ...]
//	batch result leases: [{job, lease_id, generation, outcome, detail, permanent}, ...]
//
// Required fields are always written (a pull's slots even when 0); optional
// ones (lease_ms, ack_timeout_ms, the texts, a cancel's lease_id and
// generation, a submit's priority, max_attempts and backoffs, a pull's
// ttl_ms) only when not zero, and a payload exactly when in.HasPayload (an
// empty payload is a payload). The body never repeats the actor or job: identity is the subject's.
// Policy durations are written in milliseconds (in.Policy holds nanoseconds).
//
// AppendInputBody does not validate in: an Input that DecodeInput would not
// produce gives a body that DecodeInput rejects.
func AppendInputBody(dst []byte, in *Input) []byte {
	dst = append(dst, `{"v":1`...)
	if in.SentAt != 0 {
		dst = append(dst, `,"sent_at":"`...)
		dst = time.Unix(0, in.SentAt).UTC().AppendFormat(dst, time.RFC3339Nano)
		dst = append(dst, '"')
	}
	if in.Job == NoJob && (in.Verb == VerbSubmit || in.Verb == VerbAck || in.Verb == VerbResult) {
		return append(appendBatch(dst, in), '}')
	}
	switch in.Verb {
	case VerbOffer:
		dst = appendStrField(dst, "holder", in.Holder)
		dst = appendOptIntField(dst, "lease_ms", in.LeaseMS)
		dst = appendOptIntField(dst, "ack_timeout_ms", in.AckTimeoutMS)
	case VerbAcquire:
		dst = appendOptIntField(dst, "lease_ms", in.LeaseMS)
	case VerbAck, VerbCancelAck, VerbRelease:
		dst = appendLease(dst, in.LeaseID, in.Generation)
	case VerbRenew:
		if in.Job == NoJob {
			dst = append(dst, `,"leases":[`...)
			for i := range in.Leases {
				r := &in.Leases[i]
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, `{"job":`...)
				dst = appendJSONString(dst, r.Job)
				dst = appendLease(dst, r.LeaseID, r.Generation)
				dst = appendUintField(dst, "renew_seq", r.RenewSeq)
				dst = appendOptIntField(dst, "lease_ms", r.LeaseMS)
				dst = append(dst, '}')
			}
			dst = append(dst, ']')
			break
		}
		dst = appendLease(dst, in.LeaseID, in.Generation)
		dst = appendUintField(dst, "renew_seq", in.RenewSeq)
		dst = appendOptIntField(dst, "lease_ms", in.LeaseMS)
	case VerbProgress:
		dst = appendLease(dst, in.LeaseID, in.Generation)
		dst = appendUintField(dst, "progress_seq", in.ProgressSeq)
		dst = append(dst, `,"value":`...)
		dst = strconv.AppendInt(dst, in.Value, 10)
		dst = appendOptStrField(dst, "note", in.Text)
	case VerbCancel:
		if in.LeaseID != "" || in.Generation != 0 {
			dst = appendLease(dst, in.LeaseID, in.Generation)
		}
		dst = appendOptStrField(dst, "reason", in.Text)
	case VerbResult:
		dst = appendResultFields(dst, in)
	case VerbResolve:
		dst = appendStrField(dst, "action", in.Action.String())
		switch in.Action {
		case ActionAffirm:
			dst = appendStrField(dst, "holder", in.Holder)
			dst = appendLease(dst, in.LeaseID, in.Generation)
		case ActionSettle:
			dst = appendStrField(dst, "outcome", in.Outcome.String())
		}
		dst = appendOptStrField(dst, "reason", in.Text)
	case VerbPolicy:
		const ms = 1e6
		p := &in.Policy
		dst = appendIntField(dst, "min_lease_ms", p.MinLease/ms)
		dst = appendIntField(dst, "max_lease_ms", p.MaxLease/ms)
		dst = appendIntField(dst, "default_lease_ms", p.DefaultLease/ms)
		dst = appendIntField(dst, "ack_timeout_ms", p.AckTimeout/ms)
		dst = appendIntField(dst, "cancel_timeout_ms", p.CancelTimeout/ms)
		dst = appendIntField(dst, "max_lifetime_ms", p.MaxLifetime/ms)
		dst = appendUintField(dst, "max_generations", p.MaxGenerations)
		if p.Retain != 0 { // revision 3 on: a log of an earlier revision rejects it
			dst = appendIntField(dst, "retain_ms", p.Retain/ms)
		}
	case VerbRules:
		dst = appendUintField(dst, "revision", uint64(in.Revision))
		dst = appendKey(dst, "lease_key")
		dst = append(dst, '"')
		dst = base64.RawURLEncoding.AppendEncode(dst, in.LeaseKey[:])
		dst = append(dst, '"')
	case VerbCheckpoint:
		dst = appendUintField(dst, "input_seq", in.CheckpointSeq)
		dst = appendKey(dst, "state_hash")
		dst = append(dst, '"')
		dst = hex.AppendEncode(dst, in.StateHash[:])
		dst = append(dst, '"')
	case VerbSubmit:
		dst = appendSubmitFields(dst, in)
		if in.RunAt != 0 { // revision 8 on
			dst = appendKey(dst, "run_at")
			dst = append(dst, '"')
			dst = AppendTime(dst, in.RunAt)
			dst = append(dst, '"')
		}
		dst = appendOptIntField(dst, "delay_ms", in.DelayMS)
		dst = appendOptStrField(dst, "unique_key", in.UniqueKey)
		dst = appendOptIntField(dst, "unique_for_ms", in.UniqueForMS)
		dst = appendOptStrField(dst, "concurrency_key", in.ConcurrencyKey) // revision 9 on
	case VerbLimit:
		dst = appendStrField(dst, "queue", in.Queue)
		dst = appendOptStrField(dst, "concurrency_key", in.ConcurrencyKey)
		if in.HasMaxActive {
			dst = appendUintField(dst, "max_active", in.MaxActive)
		}
		if in.Rate != 0 {
			dst = appendUintField(dst, "rate", in.Rate)
		}
		dst = appendOptIntField(dst, "period_ms", in.PeriodMS)
	case VerbSchedule:
		dst = appendStrField(dst, "schedule", in.Schedule)
		if in.ScheduleOp != ScheduleSet {
			dst = appendStrField(dst, "op", in.ScheduleOp.String())
			break
		}
		dst = appendStrField(dst, "cron", in.Cron)
		dst = appendOptStrField(dst, "tz", in.TZ)
		dst = appendOptStrField(dst, "zone", in.Zone)
		if in.Missed != MissedSkip {
			dst = appendStrField(dst, "missed", in.Missed.String())
		}
		dst = appendSubmitFields(dst, in)
		dst = appendOptStrField(dst, "concurrency_key", in.ConcurrencyKey)
		dst = appendOptStrField(dst, "unique_key", in.UniqueKey)
	case VerbPull:
		dst = appendStrField(dst, "queue", in.Queue)
		dst = appendUintField(dst, "slots", in.Slots)
		dst = appendOptIntField(dst, "ttl_ms", in.TTLMS)
	}
	return append(dst, '}')
}

// appendBatch appends the array of a batch submit, ack or result
// (revision 7).
func appendBatch(dst []byte, in *Input) []byte {
	if in.Verb == VerbSubmit {
		dst = append(dst, `,"jobs":[`...)
	} else {
		dst = append(dst, `,"leases":[`...)
	}
	for i := range in.Batch {
		e := &in.Batch[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"job":`...)
		dst = appendJSONString(dst, e.Job)
		switch in.Verb {
		case VerbSubmit:
			dst = appendSubmitFields(dst, e)
		case VerbAck:
			dst = appendLease(dst, e.LeaseID, e.Generation)
		case VerbResult:
			dst = appendResultFields(dst, e)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// appendSubmitFields appends the fields of a submit after its first.
func appendSubmitFields(dst []byte, in *Input) []byte {
	dst = appendStrField(dst, "queue", in.Queue)
	dst = appendOptIntField(dst, "priority", in.Priority)
	if in.MaxAttempts != 0 {
		dst = appendUintField(dst, "max_attempts", in.MaxAttempts)
	}
	dst = appendOptIntField(dst, "backoff_ms", in.BackoffMS)
	dst = appendOptIntField(dst, "backoff_max_ms", in.BackoffMax)
	dst = appendOptIntField(dst, "lease_ms", in.LeaseMS)
	dst = appendOptIntField(dst, "ack_timeout_ms", in.AckTimeoutMS)
	if in.HasPayload {
		dst = appendStrField(dst, "payload", in.Payload)
	}
	return dst
}

// appendResultFields appends the fields of a result after its first.
func appendResultFields(dst []byte, in *Input) []byte {
	dst = appendLease(dst, in.LeaseID, in.Generation)
	dst = appendStrField(dst, "outcome", in.Outcome.String())
	dst = appendOptStrField(dst, "detail", in.Text)
	if in.Permanent { // revision 4 on
		dst = append(appendKey(dst, "permanent"), "true"...)
	}
	return dst
}

// appendKey appends ,"name": (names need no escaping).
func appendKey(dst []byte, name string) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	return append(dst, '"', ':')
}

func appendLease(dst []byte, id string, gen uint64) []byte {
	dst = appendStrField(dst, "lease_id", id)
	return appendUintField(dst, "generation", gen)
}

func appendStrField(dst []byte, name, s string) []byte {
	return appendJSONString(appendKey(dst, name), s)
}

func appendOptStrField(dst []byte, name, s string) []byte {
	if s == "" {
		return dst
	}
	return appendStrField(dst, name, s)
}

func appendUintField(dst []byte, name string, v uint64) []byte {
	return strconv.AppendUint(appendKey(dst, name), v, 10)
}

func appendIntField(dst []byte, name string, v int64) []byte {
	return strconv.AppendInt(appendKey(dst, name), v, 10)
}

func appendOptIntField(dst []byte, name string, v int64) []byte {
	if v == 0 {
		return dst
	}
	return appendIntField(dst, name, v)
}

// appendJSONString appends s as a JSON string. '"' and '\\' are escaped, as
// are control characters (as \u00XX, which DecodeInput rejects except in a
// payload); every other byte, even invalid UTF-8, is copied as is.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c != 0x7f {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
