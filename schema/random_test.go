package schema

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/maknow/tenure/events"
)

// Random inputs of every verb, built as events.Input values and encoded by
// events.AppendInputBody, the way Tenure's own clients write their bodies.
// Most are valid; a few numbers are drawn just outside their range, a few
// texts and payloads are over their limit in bytes or characters, a few
// policies and backoffs out of order. For each one, the decoder and the
// schema agree: a body the decoder accepts satisfies its verb's schema;
// one it rejects for a schema matter is invalid; one whose only faults are
// decoder-only rules is valid.
func TestRandomInputs(t *testing.T) {
	s := loadSchemas(t)
	for _, v := range inputVerbs() {
		for _, batch := range []bool{false, true} {
			if batch && !v.Batches(events.CurrentRevision) {
				continue
			}
			name := v.String()
			if batch {
				name = "batch_" + v.String()
			}
			t.Run(name, func(t *testing.T) {
				accepted, rejected := 0, 0
				rapid.Check(t, func(rt *rapid.T) {
					in := genInput(rt, v, batch)
					subject := events.InputSubject(in.Role, in.Actor, in.Job, in.Verb)
					body := events.AppendInputBody(nil, &in)
					r := decodeReason(subject, body)
					err := s.validateInput(rt, subject, body)
					// A fault only the decoder sees hides the others: judge
					// the body without it.
					onlyDecoder := false
					if fixed, ok := withoutDecoderOnlyFaults(in); ok && r != "" {
						if r = decodeReason(subject, events.AppendInputBody(nil, &fixed)); r == "" {
							onlyDecoder = true
						}
					}
					cov := reasonCoverage[r]
					switch {
					case onlyDecoder:
						rejected++
						if err != nil {
							rt.Fatalf("the decoder rejects %s on %s only for decoder-only rules, the schema too: %s", quote(body), subject, short(err))
						}
					case r == "":
						accepted++
						if err != nil {
							rt.Fatalf("the decoder accepts %s on %s, the schema rejects it: %s", body, subject, short(err))
						}
					case cov.c == covered || cov.c == partly:
						rejected++
						if err == nil {
							rt.Fatalf("the decoder rejects %s on %s (%s), the schema accepts it", quote(body), subject, r)
						}
					case cov.c == 0:
						rt.Fatalf("%s on %s: reason %q has no coverage class", quote(body), subject, r)
					default:
						rejected++
						if err != nil {
							rt.Fatalf("the decoder rejects %s on %s (%s, which only it checks), the schema too: %s", quote(body), subject, r, short(err))
						}
					}
				})
				if accepted == 0 {
					t.Errorf("no input accepted by the decoder")
				}
				t.Logf("%d accepted, %d rejected by the decoder", accepted, rejected)
			})
		}
	}
}

// withoutDecoderOnlyFaults returns in without the faults only the decoder
// sees (decoderOnlyRules), and whether it had any: a text or payload
// within its limit in characters but over it in bytes (made ASCII), a
// submit's backoff_max_ms below its given backoff_ms (raised to it).
func withoutDecoderOnlyFaults(in events.Input) (events.Input, bool) {
	ascii := func(s *string, limit int) bool {
		if n := utf8.RuneCountInString(*s); len(*s) > limit && n <= limit {
			*s = strings.Repeat("x", n)
			return true
		}
		return false
	}
	fixed := ascii(&in.Text, events.MaxTextLen)
	fixed = ascii(&in.Payload, events.MaxPayloadBytes) || fixed
	if (in.Verb == events.VerbSubmit || in.Verb == events.VerbSchedule) && in.BackoffMS != 0 && in.BackoffMax != 0 && in.BackoffMax < in.BackoffMS {
		in.BackoffMax, fixed = in.BackoffMS, true
	}
	if len(in.Batch) > 0 { // the elements of a batch (revision 7)
		in.Batch = slices.Clone(in.Batch)
		for i := range in.Batch {
			e, f := withoutDecoderOnlyFaults(in.Batch[i])
			in.Batch[i], fixed = e, f || fixed
		}
	}
	return in, fixed
}

// Generators. Numbers come mostly from their range, sometimes from its
// edges, rarely from just outside it.

func genToken(t *rapid.T, label string) string {
	return rapid.OneOf(
		rapid.SampledFrom([]string{"w1", "a", "-", "_x", "a_b", "Z9", "0123456789012345678901234567890123456789012345678901234567890123"}),
		rapid.StringMatching(`[A-Za-z0-9_-]{2,64}`),
	).Draw(t, label)
}

// genUint draws from lo..hi, its edges, or (rarely) just outside.
func genUint(t *rapid.T, label string, lo, hi uint64) uint64 {
	choices := []uint64{lo, hi, lo + 1, hi - 1}
	if rapid.IntRange(0, 19).Draw(t, label+"-out") == 0 {
		out := []uint64{hi + 1, math.MaxUint64}
		if lo > 0 {
			out = append(out, lo-1)
		}
		return rapid.SampledFrom(out).Draw(t, label)
	}
	return rapid.OneOf(rapid.SampledFrom(choices), rapid.Uint64Range(lo, hi)).Draw(t, label)
}

func genSeq(t *rapid.T, label string) uint64 { return genUint(t, label, 1, events.MaxSeq) }

// genMS draws a duration in ms (an int64 field of events.Input; a value
// beyond int64 stays at its largest).
func genMS(t *rapid.T, label string, hi uint64) int64 {
	return int64(min(genUint(t, label, events.MinDurationMS, hi), math.MaxInt64))
}

// genOptMS is genMS or 0 (absent).
func genOptMS(t *rapid.T, label string, hi uint64) int64 {
	if rapid.Bool().Draw(t, label+"-set") {
		return genMS(t, label, hi)
	}
	return 0
}

// genText draws a text: no control character, usually within 256 bytes,
// sometimes over it in bytes or in characters.
func genText(t *rapid.T, label string) string {
	r := rapid.Rune().Filter(func(r rune) bool { return r >= 0x20 && r != 0x7f })
	switch rapid.IntRange(0, 9).Draw(t, label+"-size") {
	case 0:
		return rapid.StringOfN(r, 200, 300, -1).Draw(t, label)
	default:
		return rapid.StringOfN(r, 0, 256, events.MaxTextLen).Draw(t, label)
	}
}

// genPayload draws a payload: any valid UTF-8, control characters
// included, usually within 4096 bytes.
func genPayload(t *rapid.T, label string) string {
	r := rapid.Rune()
	if rapid.IntRange(0, 9).Draw(t, label+"-size") == 0 {
		return rapid.StringOfN(r, 4000, 4200, -1).Draw(t, label)
	}
	return rapid.StringOfN(r, 0, 64, events.MaxPayloadBytes).Draw(t, label)
}

func genInput(t *rapid.T, v events.Verb, batch bool) events.Input {
	in := events.Input{Verb: v, Role: roleOf(v), Actor: genToken(t, "actor"), Job: events.NoJob}
	if !v.JobLess() && !batch {
		in.Job = genToken(t, "job")
	}
	if rapid.Bool().Draw(t, "sent_at-set") {
		// From 1678-01-01 to the end of int64 nanoseconds.
		lo := time.Date(1678, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
		in.SentAt = rapid.OneOf(rapid.SampledFrom([]int64{lo, math.MaxInt64, 1}), rapid.Int64Range(lo, math.MaxInt64)).Draw(t, "sent_at")
	}
	lease := func() {
		in.LeaseID = genToken(t, "lease_id")
		in.Generation = genSeq(t, "generation")
	}
	switch v {
	case events.VerbOffer:
		in.Holder = genToken(t, "holder")
		in.LeaseMS = genOptMS(t, "lease_ms", events.MaxDurationMS)
		in.AckTimeoutMS = genOptMS(t, "ack_timeout_ms", events.MaxDurationMS)
	case events.VerbAcquire:
		in.LeaseMS = genOptMS(t, "lease_ms", events.MaxDurationMS)
	case events.VerbAck, events.VerbResult, events.VerbSubmit:
		if !batch {
			genFields(t, &in, lease)
			break
		}
		// Revision 7: the elements of a batch, each an input of the verb.
		n := rapid.OneOf(rapid.IntRange(1, 8), rapid.SampledFrom([]int{events.MaxBatch, events.MaxBatch + 1})).Draw(t, "elements")
		for i := range n {
			e := events.Input{Verb: v, Role: in.Role, Actor: in.Actor, Job: "j1", LeaseID: "L1", Generation: 1, Queue: "q", Outcome: events.OutcomeSuccess}
			if i < 8 {
				e = events.Input{Verb: v, Role: in.Role, Actor: in.Actor, Job: genToken(t, "element-job")}
				genFields(t, &e, func() {
					e.LeaseID = genToken(t, "element-lease_id")
					e.Generation = genSeq(t, "element-generation")
				})
			}
			in.Batch = append(in.Batch, e)
		}
	case events.VerbCancelAck, events.VerbRelease:
		lease()
	case events.VerbRenew:
		if !batch {
			lease()
			in.RenewSeq = genSeq(t, "renew_seq")
			in.LeaseMS = genOptMS(t, "lease_ms", events.MaxDurationMS)
			break
		}
		n := rapid.OneOf(rapid.IntRange(1, 8), rapid.SampledFrom([]int{events.MaxBatch, events.MaxBatch + 1})).Draw(t, "leases")
		for i := range n {
			r := events.LeaseRef{Job: "j1", LeaseID: "L1", Generation: 1, RenewSeq: 1}
			if i < 8 {
				r = events.LeaseRef{Job: genToken(t, "lease-job"), LeaseID: genToken(t, "lease-id"), Generation: genSeq(t, "lease-generation"),
					RenewSeq: genSeq(t, "lease-renew_seq"), LeaseMS: genOptMS(t, "lease-lease_ms", events.MaxDurationMS)}
			}
			in.Leases = append(in.Leases, r)
		}
	case events.VerbProgress:
		lease()
		in.ProgressSeq = genSeq(t, "progress_seq")
		in.Value = int64(min(genUint(t, "value", 0, events.MaxProgress), math.MaxInt64))
		if rapid.Bool().Draw(t, "note-set") {
			in.Text = genText(t, "note")
		}
	case events.VerbCancel:
		if rapid.Bool().Draw(t, "lease-set") {
			lease()
		}
		if rapid.Bool().Draw(t, "reason-set") {
			in.Text = genText(t, "reason")
		}
	case events.VerbResolve:
		in.Action = rapid.SampledFrom([]events.Action{events.ActionAffirm, events.ActionRevoke, events.ActionSettle, events.ActionRetry, events.ActionDiscard}).Draw(t, "action")
		switch in.Action {
		case events.ActionAffirm:
			in.Holder = genToken(t, "holder")
			lease()
		case events.ActionSettle:
			in.Outcome = rapid.SampledFrom([]events.Outcome{events.OutcomeFailed, events.OutcomeCancelled}).Draw(t, "outcome")
		}
		if rapid.Bool().Draw(t, "reason-set") {
			in.Text = genText(t, "reason")
		}
	case events.VerbPolicy:
		// min <= default <= max <= lifetime, or (rarely) not.
		ds := make([]int64, 4)
		for i := range ds {
			ds[i] = genMS(t, "policy-duration", events.MaxDurationMS)
		}
		if rapid.IntRange(0, 9).Draw(t, "ordered") != 0 {
			sortInt64s(ds)
		}
		const ms = int64(time.Millisecond)
		in.Policy = events.Policy{MinLease: ds[0] * ms, DefaultLease: ds[1] * ms, MaxLease: ds[2] * ms, MaxLifetime: ds[3] * ms,
			AckTimeout: genMS(t, "ack_timeout_ms", events.MaxDurationMS) * ms, CancelTimeout: genMS(t, "cancel_timeout_ms", events.MaxDurationMS) * ms,
			MaxGenerations: genUint(t, "max_generations", 1, events.MaxGenerations)}
		if rapid.Bool().Draw(t, "retain-set") {
			in.Policy.Retain = int64(rapid.Uint64Range(1, events.MaxRetainMS).Draw(t, "retain_ms")) * ms
		}
	case events.VerbRules:
		in.Revision = uint32(min(genUint(t, "revision", 1, events.CurrentRevision), math.MaxUint32))
		copy(in.LeaseKey[:], rapid.SliceOfN(rapid.Byte(), events.LeaseKeyLen, events.LeaseKeyLen).Draw(t, "lease_key"))
	case events.VerbCheckpoint:
		in.CheckpointSeq = genSeq(t, "input_seq")
		copy(in.StateHash[:], rapid.SliceOfN(rapid.Byte(), events.StateHashLen, events.StateHashLen).Draw(t, "state_hash"))
	case events.VerbPull:
		in.Queue = genToken(t, "queue")
		in.Slots = genUint(t, "slots", 0, events.MaxSlots)
		in.TTLMS = genOptMS(t, "ttl_ms", events.MaxCapacityTTL)
	case events.VerbLimit:
		in.Queue = genToken(t, "queue")
		if rapid.Bool().Draw(t, "concurrency_key-set") {
			in.ConcurrencyKey = genToken(t, "concurrency_key")
			if rapid.Bool().Draw(t, "max_active-set") {
				in.MaxActive, in.HasMaxActive = genUint(t, "max_active", 0, events.MaxActive), true
			}
		}
		if rapid.Bool().Draw(t, "rate-set") {
			in.Rate = genUint(t, "rate", 1, events.MaxRate)
			in.PeriodMS = genMS(t, "period_ms", events.MaxDurationMS)
		}
	case events.VerbSchedule:
		in.Schedule = genToken(t, "schedule") // (over 40 characters: bad_token, and the schema's maxLength)
		in.ScheduleOp = rapid.SampledFrom([]events.ScheduleOp{events.ScheduleSet, events.SchedulePause, events.ScheduleResume, events.ScheduleDelete}).Draw(t, "op")
		if in.ScheduleOp != events.ScheduleSet {
			break
		}
		// Expressions and rules the decoder accepts: what else it refuses
		// of them (package cron's judgement) the schema does not check.
		in.Cron = rapid.SampledFrom([]string{"* * * * *", "30 2 * * 1-5", "@hourly", "@every 90s", "0 0 29 2 *", "*/15 9-17 * JAN-MAR mon"}).Draw(t, "cron")
		if rapid.Bool().Draw(t, "tz-set") {
			in.TZ = rapid.SampledFrom([]string{"UTC0", "CET-1CEST,M3.5.0,M10.5.0/3", "<+0530>-5:30", "EST5EDT,M3.2.0,M11.1.0"}).Draw(t, "tz")
		}
		if rapid.Bool().Draw(t, "zone-set") {
			in.Zone = rapid.SampledFrom([]string{"Europe/Berlin", "Etc/GMT+5", "America/Argentina/Buenos_Aires"}).Draw(t, "zone")
		}
		in.Missed = events.Missed(rapid.IntRange(0, 1).Draw(t, "missed"))
		in.Verb = events.VerbSubmit // the template's fields are a single submit's
		genFields(t, &in, nil)
		in.Verb = events.VerbSchedule
		if rapid.Bool().Draw(t, "concurrency_key-set") {
			in.ConcurrencyKey = genToken(t, "concurrency_key")
		}
		if rapid.Bool().Draw(t, "unique_key-set") {
			in.UniqueKey = genToken(t, "unique_key")
		}
	}
	return in
}

// genFields draws the fields of an ack, a result or a submit (single, or
// an element of a batch), lease drawing a lease id and generation.
func genFields(t *rapid.T, in *events.Input, lease func()) {
	switch in.Verb {
	case events.VerbAck:
		lease()
	case events.VerbResult:
		lease()
		in.Outcome = rapid.SampledFrom([]events.Outcome{events.OutcomeSuccess, events.OutcomeFailed, events.OutcomeCancelled}).Draw(t, "outcome")
		in.Permanent = in.Outcome == events.OutcomeFailed && rapid.Bool().Draw(t, "permanent")
		if rapid.Bool().Draw(t, "detail-set") {
			in.Text = genText(t, "detail")
		}
	case events.VerbSubmit:
		in.Queue = genToken(t, "queue")
		if rapid.Bool().Draw(t, "priority-set") {
			in.Priority = int64(min(genUint(t, "priority", 1, events.MaxPriority), math.MaxInt64))
		}
		if rapid.Bool().Draw(t, "max_attempts-set") {
			in.MaxAttempts = genUint(t, "max_attempts", 1, events.MaxAttempts)
		}
		in.BackoffMS = genOptMS(t, "backoff_ms", events.MaxDurationMS)
		in.BackoffMax = genOptMS(t, "backoff_max_ms", events.MaxDurationMS)
		in.LeaseMS = genOptMS(t, "lease_ms", events.MaxDurationMS)
		in.AckTimeoutMS = genOptMS(t, "ack_timeout_ms", events.MaxDurationMS)
		if in.HasPayload = rapid.Bool().Draw(t, "payload-set"); in.HasPayload {
			in.Payload = genPayload(t, "payload")
		}
	}
}

func sortInt64s(s []int64) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
