package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/maknow/tenure/events"
)

// Subjects used by the cases.
var (
	sOffer     = events.InputSubject(events.RoleOps, "disp-1", "job-1", events.VerbOffer)
	sAcquire   = events.InputSubject(events.RoleWorker, "w-7", "job-1", events.VerbAcquire)
	sAck       = events.InputSubject(events.RoleWorker, "w-7", "job-1", events.VerbAck)
	sRenew     = events.InputSubject(events.RoleWorker, "w-7", "job-1", events.VerbRenew)
	sBatch     = events.InputSubject(events.RoleWorker, "w-7", events.NoJob, events.VerbRenew)
	sProgress  = events.InputSubject(events.RoleWorker, "w-7", "job-1", events.VerbProgress)
	sCancel    = events.InputSubject(events.RoleOps, "disp-1", "job-1", events.VerbCancel)
	sCancelAck = events.InputSubject(events.RoleWorker, "w-7", "job-1", events.VerbCancelAck)
	sResult    = events.InputSubject(events.RoleWorker, "w-7", "job-1", events.VerbResult)
	sRelease   = events.InputSubject(events.RoleWorker, "w-7", "job-1", events.VerbRelease)
	sResolve   = events.InputSubject(events.RoleOps, "disp-1", "job-1", events.VerbResolve)
	sPolicy    = events.InputSubject(events.RoleOps, "disp-1", events.NoJob, events.VerbPolicy)
	sPolicyC   = events.InputSubject(events.RoleCoord, "coord-1", events.NoJob, events.VerbPolicy)
	sTick      = events.InputSubject(events.RoleCoord, "coord-1", events.NoJob, events.VerbTick)
	sSubmit    = events.InputSubject(events.RoleOps, "disp-1", "job-1", events.VerbSubmit)
	sPull      = events.InputSubject(events.RoleWorker, "w-7", events.NoJob, events.VerbPull)
)

// Identities of those subjects, the start of every want Input.
var (
	idOps    = events.Input{Role: events.RoleOps, Actor: "disp-1", Job: "job-1"}
	idWorker = events.Input{Role: events.RoleWorker, Actor: "w-7", Job: "job-1"}
	idBatch  = events.Input{Role: events.RoleWorker, Actor: "w-7", Job: events.NoJob, Verb: events.VerbRenew}
	idPolicy = events.Input{Role: events.RoleOps, Actor: "disp-1", Job: events.NoJob, Verb: events.VerbPolicy}
	idTick   = events.Input{Role: events.RoleCoord, Actor: "coord-1", Job: events.NoJob, Verb: events.VerbTick}
	idPull   = events.Input{Role: events.RoleWorker, Actor: "w-7", Job: events.NoJob, Verb: events.VerbPull}
)

func with(id events.Input, verb events.Verb, f func(*events.Input)) *events.Input {
	in := id
	if verb != events.VerbNone {
		in.Verb = verb
	}
	if f != nil {
		f(&in)
	}
	return &in
}

func unixNano(s string) int64 {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UnixNano()
}

const ms = int64(time.Millisecond)

// batchBody is a batch renew of n leases j0..j(n-1).
func batchBody(n int) string {
	var b strings.Builder
	b.WriteString(`{"v":1,"leases":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"job":"j%d","lease_id":"L%d","generation":1,"renew_seq":%d}`, i, i, i+1)
	}
	b.WriteString("]}")
	return b.String()
}

func batchWant(n int) *events.Input {
	in := idBatch
	for i := 0; i < n; i++ {
		in.Leases = append(in.Leases, events.LeaseRef{Job: fmt.Sprintf("j%d", i), LeaseID: fmt.Sprintf("L%d", i), Generation: 1, RenewSeq: uint64(i + 1)})
	}
	return &in
}

// nest is n '[' then n ']'.
func nest(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// padTo pads a tick body with spaces to exactly n bytes.
func padTo(n int) string {
	const b = `{"v":1}`
	return b + strings.Repeat(" ", n-len(b))
}

const (
	policyOK = `"min_lease_ms":100,"max_lease_ms":3600000,"default_lease_ms":30000,"ack_timeout_ms":30000,"cancel_timeout_ms":60000,"max_lifetime_ms":86400000,"max_generations":1000`
	renewOK  = `"lease_id":"L-1","generation":2,"renew_seq":5`
	leaseOK  = `{"job":"a","lease_id":"L-1","generation":1,"renew_seq":1}`
)

type decodeCase struct {
	name    string
	subject string
	body    string
	code    events.Reason // "" for a valid input
	field   string        // Field of the error
	want    *events.Input // the decoded input of a valid case
}

var validCases = []decodeCase{
	{name: "offer_full", subject: sOffer,
		body: `{"v":1,"actor":"disp-1","job":"job-1","sent_at":"2025-03-01T12:00:00.5+01:00","holder":"w-7","lease_ms":30000,"ack_timeout_ms":5000}`,
		want: with(idOps, events.VerbOffer, func(in *events.Input) {
			in.SentAt = unixNano("2025-03-01T11:00:00.5Z")
			in.Holder, in.LeaseMS, in.AckTimeoutMS = "w-7", 30000, 5000
		})},
	{name: "offer_minimal", subject: sOffer, body: `{"v":1,"holder":"w-7"}`,
		want: with(idOps, events.VerbOffer, func(in *events.Input) { in.Holder = "w-7" })},
	{name: "acquire_minimal", subject: sAcquire, body: `{"v":1}`, want: with(idWorker, events.VerbAcquire, nil)},
	{name: "acquire_max_lease_v_last", subject: sAcquire, body: `{"lease_ms":2592000000,"v":1}`,
		want: with(idWorker, events.VerbAcquire, func(in *events.Input) { in.LeaseMS = events.MaxDurationMS })},
	{name: "acquire_min_lease", subject: sAcquire, body: `{"v":1,"lease_ms":1}`,
		want: with(idWorker, events.VerbAcquire, func(in *events.Input) { in.LeaseMS = 1 })},
	{name: "ack", subject: sAck, body: `{"v":1,"lease_id":"L-1","generation":1}`,
		want: with(idWorker, events.VerbAck, func(in *events.Input) { in.LeaseID, in.Generation = "L-1", 1 })},
	{name: "ack_whitespace_everywhere", subject: sAck, body: " \t\r\n{ \"v\" : 1 ,\n\t\"lease_id\" :\"L-1\"\r,\"generation\":\t1 } \r\n\t ",
		want: with(idWorker, events.VerbAck, func(in *events.Input) { in.LeaseID, in.Generation = "L-1", 1 })},
	{name: "ack_escaped_keys_and_token", subject: sAck, body: `{"\u0076":1,"lease_\u0069d":"\u004c-1","generation":1}`,
		want: with(idWorker, events.VerbAck, func(in *events.Input) { in.LeaseID, in.Generation = "L-1", 1 })},
	{name: "ack_max_generation", subject: sAck, body: `{"v":1,"lease_id":"L-1","generation":9007199254740991}`,
		want: with(idWorker, events.VerbAck, func(in *events.Input) { in.LeaseID, in.Generation = "L-1", events.MaxSeq })},
	{name: "ack_identity_repeated", subject: sAck, body: `{"v":1,"actor":"w-7","job":"job-1","lease_id":"L-1","generation":1}`,
		want: with(idWorker, events.VerbAck, func(in *events.Input) { in.LeaseID, in.Generation = "L-1", 1 })},
	{name: "renew_single", subject: sRenew,
		body: `{"v":1,"sent_at":"2025-03-01T11:00:00Z","lease_id":"L-1","generation":2,"renew_seq":5,"lease_ms":60000}`,
		want: with(idWorker, events.VerbRenew, func(in *events.Input) {
			in.SentAt = unixNano("2025-03-01T11:00:00Z")
			in.LeaseID, in.Generation, in.RenewSeq, in.LeaseMS = "L-1", 2, 5, 60000
			in.Leases = []events.LeaseRef{{Job: "job-1", LeaseID: "L-1", Generation: 2, RenewSeq: 5, LeaseMS: 60000}}
		})},
	{name: "renew_single_minimal", subject: sRenew, body: `{"v":1,` + renewOK + `}`,
		want: with(idWorker, events.VerbRenew, func(in *events.Input) {
			in.LeaseID, in.Generation, in.RenewSeq = "L-1", 2, 5
			in.Leases = []events.LeaseRef{{Job: "job-1", LeaseID: "L-1", Generation: 2, RenewSeq: 5}}
		})},
	{name: "renew_batch", subject: sBatch,
		body: `{"v":1,"actor":"w-7","leases":[{"job":"a","lease_id":"L-1","generation":1,"renew_seq":1},` +
			`{ "lease_ms" : 1500 , "renew_seq":3,"generation":9007199254740991,"lease_id":"L-2","job":"b"}]}`,
		want: with(idBatch, events.VerbNone, func(in *events.Input) {
			in.Leases = []events.LeaseRef{
				{Job: "a", LeaseID: "L-1", Generation: 1, RenewSeq: 1},
				{Job: "b", LeaseID: "L-2", Generation: events.MaxSeq, RenewSeq: 3, LeaseMS: 1500},
			}
		})},
	{name: "renew_batch_max", subject: sBatch, body: batchBody(events.MaxBatch), want: batchWant(events.MaxBatch)},
	{name: "progress_zero_with_note", subject: sProgress,
		body: `{"v":1,"lease_id":"L-1","generation":1,"progress_seq":4,"value":0,"note":"50% \"done\" \u00e9\ud83d\ude00 caf\u00E9\/x 日本 \\"}`,
		want: with(idWorker, events.VerbProgress, func(in *events.Input) {
			in.LeaseID, in.Generation, in.ProgressSeq, in.Value = "L-1", 1, 4, 0
			in.Text = "50% \"done\" é😀 café/x 日本 \\"
		})},
	{name: "progress_hundred", subject: sProgress, body: `{"v":1,"lease_id":"L-1","generation":1,"progress_seq":9007199254740991,"value":100}`,
		want: with(idWorker, events.VerbProgress, func(in *events.Input) {
			in.LeaseID, in.Generation, in.ProgressSeq, in.Value = "L-1", 1, events.MaxSeq, 100
		})},
	{name: "cancel_bare", subject: sCancel, body: `{"v":1}`, want: with(idOps, events.VerbCancel, nil)},
	{name: "cancel_lease_reason", subject: sCancel, body: `{"v":1,"lease_id":"L-1","generation":2,"reason":"operator asked"}`,
		want: with(idOps, events.VerbCancel, func(in *events.Input) { in.LeaseID, in.Generation, in.Text = "L-1", 2, "operator asked" })},
	{name: "cancel_reason_max_len", subject: sCancel, body: `{"v":1,"reason":"` + strings.Repeat("é", events.MaxTextLen/2) + `"}`,
		want: with(idOps, events.VerbCancel, func(in *events.Input) { in.Text = strings.Repeat("é", events.MaxTextLen/2) })},
	{name: "cancel_ack", subject: sCancelAck, body: `{"v":1,"lease_id":"L-1","generation":2}`,
		want: with(idWorker, events.VerbCancelAck, func(in *events.Input) { in.LeaseID, in.Generation = "L-1", 2 })},
	{name: "result_success", subject: sResult, body: `{"v":1,"lease_id":"L-1","generation":2,"outcome":"SUCCESS"}`,
		want: with(idWorker, events.VerbResult, func(in *events.Input) {
			in.LeaseID, in.Generation, in.Outcome = "L-1", 2, events.OutcomeSuccess
		})},
	{name: "result_failed_detail", subject: sResult, body: `{"v":1,"lease_id":"L-1","generation":2,"outcome":"FAILED","detail":"exit 3 \ufffd"}`,
		want: with(idWorker, events.VerbResult, func(in *events.Input) {
			in.LeaseID, in.Generation, in.Outcome, in.Text = "L-1", 2, events.OutcomeFailed, "exit 3 \ufffd"
		})},
	{name: "result_cancelled", subject: sResult, body: `{"outcome":"CANCELLED","generation":2,"lease_id":"L-1","v":1}`,
		want: with(idWorker, events.VerbResult, func(in *events.Input) {
			in.LeaseID, in.Generation, in.Outcome = "L-1", 2, events.OutcomeCancelled
		})},
	{name: "release", subject: sRelease, body: `{"v":1,"lease_id":"L-1","generation":2}`,
		want: with(idWorker, events.VerbRelease, func(in *events.Input) { in.LeaseID, in.Generation = "L-1", 2 })},
	{name: "resolve_affirm", subject: sResolve, body: `{"v":1,"action":"affirm","holder":"w-7","lease_id":"L-1","generation":3,"reason":"w-7 is right"}`,
		want: with(idOps, events.VerbResolve, func(in *events.Input) {
			in.Action, in.Holder, in.LeaseID, in.Generation, in.Text = events.ActionAffirm, "w-7", "L-1", 3, "w-7 is right"
		})},
	{name: "resolve_affirm_action_last", subject: sResolve, body: `{"v":1,"holder":"w-7","lease_id":"L-1","generation":3,"action":"affirm"}`,
		want: with(idOps, events.VerbResolve, func(in *events.Input) {
			in.Action, in.Holder, in.LeaseID, in.Generation = events.ActionAffirm, "w-7", "L-1", 3
		})},
	{name: "resolve_revoke", subject: sResolve, body: `{"v":1,"action":"revoke","reason":"stuck"}`,
		want: with(idOps, events.VerbResolve, func(in *events.Input) { in.Action, in.Text = events.ActionRevoke, "stuck" })},
	{name: "resolve_settle_failed", subject: sResolve, body: `{"v":1,"action":"settle","outcome":"FAILED"}`,
		want: with(idOps, events.VerbResolve, func(in *events.Input) { in.Action, in.Outcome = events.ActionSettle, events.OutcomeFailed })},
	{name: "resolve_settle_cancelled", subject: sResolve, body: `{"v":1,"outcome":"CANCELLED","action":"settle"}`,
		want: with(idOps, events.VerbResolve, func(in *events.Input) { in.Action, in.Outcome = events.ActionSettle, events.OutcomeCancelled })},
	{name: "policy_default", subject: sPolicy, body: `{"v":1,` + policyOK + `}`,
		want: with(idPolicy, events.VerbNone, func(in *events.Input) { in.Policy = events.DefaultPolicy() })},
	{name: "policy_coord_boundaries", subject: sPolicyC,
		body: `{"v":1,"min_lease_ms":2592000000,"max_lease_ms":2592000000,"default_lease_ms":2592000000,"ack_timeout_ms":1,"cancel_timeout_ms":1,"max_lifetime_ms":2592000000,"max_generations":1048576}`,
		want: with(events.Input{Role: events.RoleCoord, Actor: "coord-1", Job: events.NoJob}, events.VerbPolicy, func(in *events.Input) {
			const max = events.MaxDurationMS * ms
			in.Policy = events.Policy{MinLease: max, MaxLease: max, DefaultLease: max, AckTimeout: ms, CancelTimeout: ms, MaxLifetime: max, MaxGenerations: events.MaxGenerations}
		})},
	{name: "tick", subject: sTick, body: `{"v":1,"sent_at":"2025-03-01T11:00:00.123456789Z"}`,
		want: with(idTick, events.VerbNone, func(in *events.Input) { in.SentAt = unixNano("2025-03-01T11:00:00.123456789Z") })},
	{name: "tick_with_actor", subject: sTick, body: `{"actor":"coord-1","v":1}`, want: with(idTick, events.VerbNone, nil)},
	{name: "tick_sent_at_before_1970", subject: sTick, body: `{"v":1,"sent_at":"1969-12-31T23:59:59-00:30"}`,
		want: with(idTick, events.VerbNone, func(in *events.Input) { in.SentAt = unixNano("1970-01-01T00:29:59Z") })},
	{name: "tick_sent_at_epoch", subject: sTick, body: `{"v":1,"sent_at":"1970-01-01T00:00:00Z"}`, want: with(idTick, events.VerbNone, nil)},
	{name: "tick_body_at_size_limit", subject: sTick, body: padTo(events.MaxInputBytes), want: with(idTick, events.VerbNone, nil)},

	// Revision 4: queues.
	{name: "submit_minimal", subject: sSubmit, body: `{"v":1,"queue":"q-1"}`,
		want: with(idOps, events.VerbSubmit, func(in *events.Input) { in.Queue = "q-1" })},
	{name: "submit_full", subject: sSubmit,
		body: `{"v":1,"actor":"disp-1","job":"job-1","sent_at":"2025-03-01T11:00:00Z","queue":"emails","priority":9,"max_attempts":1000,"backoff_ms":500,"backoff_max_ms":500,"lease_ms":60000,"ack_timeout_ms":5000,"payload":"{\"to\":\"a@b.example\"}"}`,
		want: with(idOps, events.VerbSubmit, func(in *events.Input) {
			in.SentAt = unixNano("2025-03-01T11:00:00Z")
			in.Queue, in.Priority, in.MaxAttempts, in.BackoffMS, in.BackoffMax = "emails", events.MaxPriority, events.MaxAttempts, 500, 500
			in.LeaseMS, in.AckTimeoutMS = 60000, 5000
			in.Payload, in.HasPayload = `{"to":"a@b.example"}`, true
		})},
	{name: "submit_any_order", subject: sSubmit, body: `{"payload":"p","max_attempts":1,"queue":"q","v":1,"priority":0}`,
		want: with(idOps, events.VerbSubmit, func(in *events.Input) {
			in.Queue, in.MaxAttempts, in.Payload, in.HasPayload = "q", 1, "p", true
		})},
	{name: "submit_payload_empty", subject: sSubmit, body: `{"v":1,"queue":"q","payload":""}`,
		want: with(idOps, events.VerbSubmit, func(in *events.Input) { in.Queue, in.HasPayload = "q", true })},
	{name: "submit_payload_control_chars", subject: sSubmit, body: `{"v":1,"queue":"q","payload":"a\n\t\r\b\f\u0000\u001F\u007f\"\\\/"}`,
		want: with(idOps, events.VerbSubmit, func(in *events.Input) {
			in.Queue, in.Payload, in.HasPayload = "q", "a\n\t\r\b\f\x00\x1f\x7f\"\\/", true
		})},
	{name: "submit_payload_raw_del", subject: sSubmit, body: "{\"v\":1,\"queue\":\"q\",\"payload\":\"a\x7fb\"}",
		want: with(idOps, events.VerbSubmit, func(in *events.Input) { in.Queue, in.Payload, in.HasPayload = "q", "a\x7fb", true })},
	{name: "submit_payload_non_ascii", subject: sSubmit, body: `{"v":1,"queue":"q","payload":"é😀\ud83d\ude00 日本\u00e9\u2028"}`,
		want: with(idOps, events.VerbSubmit, func(in *events.Input) { in.Queue, in.Payload, in.HasPayload = "q", "é😀😀 日本é\u2028", true })},
	{name: "submit_payload_max", subject: sSubmit, body: `{"v":1,"queue":"q","payload":"` + strings.Repeat(`\u00e9`, events.MaxPayloadBytes/2) + `"}`,
		want: with(idOps, events.VerbSubmit, func(in *events.Input) {
			in.Queue, in.Payload, in.HasPayload = "q", strings.Repeat("é", events.MaxPayloadBytes/2), true
		})},
	{name: "submit_backoff_at_default_max", subject: sSubmit, body: `{"v":1,"queue":"q","backoff_ms":3600000}`,
		want: with(idOps, events.VerbSubmit, func(in *events.Input) { in.Queue, in.BackoffMS = "q", events.DefaultBackoffMax })},
	{name: "submit_backoff_max_at_default_backoff", subject: sSubmit, body: `{"v":1,"queue":"q","backoff_max_ms":1000}`,
		want: with(idOps, events.VerbSubmit, func(in *events.Input) { in.Queue, in.BackoffMax = "q", events.DefaultBackoffMS })},
	{name: "submit_backoff_max_30_days", subject: sSubmit, body: `{"v":1,"queue":"q","backoff_ms":2592000000,"backoff_max_ms":2592000000}`,
		want: with(idOps, events.VerbSubmit, func(in *events.Input) {
			in.Queue, in.BackoffMS, in.BackoffMax = "q", events.MaxDurationMS, events.MaxDurationMS
		})},
	// Revision 8: scheduled submits.
	{name: "submit_run_at", subject: sSubmit, body: `{"v":1,"queue":"q","run_at":"2026-05-01T03:00:00+02:00"}`,
		want: with(idOps, events.VerbSubmit, func(in *events.Input) { in.Queue, in.RunAt = "q", 1777597200*int64(time.Second) })},
	{name: "submit_delay_max", subject: sSubmit, body: `{"v":1,"queue":"q","delay_ms":31622400000}`,
		want: with(idOps, events.VerbSubmit, func(in *events.Input) { in.Queue, in.DelayMS = "q", events.MaxDelayMS })},
	// Revision 8: unique keys.
	{name: "submit_unique_key", subject: sSubmit, body: `{"v":1,"queue":"q","unique_key":"user-42"}`,
		want: with(idOps, events.VerbSubmit, func(in *events.Input) { in.Queue, in.UniqueKey = "q", "user-42" })},
	{name: "submit_unique_for_max", subject: sSubmit, body: `{"v":1,"queue":"q","unique_for_ms":2592000000,"unique_key":"k"}`,
		want: with(idOps, events.VerbSubmit, func(in *events.Input) {
			in.Queue, in.UniqueKey, in.UniqueForMS = "q", "k", events.MaxDurationMS
		})},
	{name: "pull", subject: sPull, body: `{"v":1,"actor":"w-7","queue":"emails","slots":4,"ttl_ms":600000}`,
		want: with(idPull, events.VerbNone, func(in *events.Input) { in.Queue, in.Slots, in.TTLMS = "emails", 4, events.MaxCapacityTTL })},
	{name: "pull_withdraw", subject: sPull, body: `{"slots":0,"queue":"emails","v":1}`,
		want: with(idPull, events.VerbNone, func(in *events.Input) { in.Queue = "emails" })},
	{name: "pull_max_slots_min_ttl", subject: sPull, body: `{"v":1,"queue":"q","slots":256,"ttl_ms":1}`,
		want: with(idPull, events.VerbNone, func(in *events.Input) { in.Queue, in.Slots, in.TTLMS = "q", events.MaxSlots, 1 })},
	{name: "result_failed_permanent", subject: sResult, body: `{"v":1,"lease_id":"L-1","generation":2,"outcome":"FAILED","detail":"bad input","permanent":true}`,
		want: with(idWorker, events.VerbResult, func(in *events.Input) {
			in.LeaseID, in.Generation, in.Outcome, in.Text, in.Permanent = "L-1", 2, events.OutcomeFailed, "bad input", true
		})},
	{name: "result_permanent_before_outcome", subject: sResult, body: `{"permanent":true,"v":1,"lease_id":"L-1","generation":2,"outcome":"FAILED"}`,
		want: with(idWorker, events.VerbResult, func(in *events.Input) {
			in.LeaseID, in.Generation, in.Outcome, in.Permanent = "L-1", 2, events.OutcomeFailed, true
		})},
	{name: "result_failed_permanent_false", subject: sResult, body: `{"v":1,"lease_id":"L-1","generation":2,"outcome":"FAILED","permanent":false}`,
		want: with(idWorker, events.VerbResult, func(in *events.Input) { in.LeaseID, in.Generation, in.Outcome = "L-1", 2, events.OutcomeFailed })},
	{name: "resolve_retry", subject: sResolve, body: `{"v":1,"action":"retry","reason":"fixed the template"}`,
		want: with(idOps, events.VerbResolve, func(in *events.Input) { in.Action, in.Text = events.ActionRetry, "fixed the template" })},
	{name: "resolve_discard", subject: sResolve, body: `{"reason":"obsolete","action":"discard","v":1}`,
		want: with(idOps, events.VerbResolve, func(in *events.Input) { in.Action, in.Text = events.ActionDiscard, "obsolete" })},
}

var errorCases = []decodeCase{
	// Subject.
	{name: "bad_subject_verb", subject: "tenure.in.worker.w-7.job-1.bogus", body: `{"v":1}`, code: events.ReasonBadSubject, field: "verb"},
	{name: "bad_subject_prefix", subject: "tenure.out.worker.w-7.job-1.ack", body: `{"v":1}`, code: events.ReasonBadSubject},
	{name: "bad_subject_too_many_tokens", subject: sAck + ".x", body: `{"v":1}`, code: events.ReasonBadSubject},
	{name: "bad_subject_progress_without_job", subject: "tenure.in.worker.w-7._.progress", body: `{"v":1}`, code: events.ReasonBadSubject, field: "job"}, // (an ack without a job is a batch ack from revision 7 on: batch_test.go)
	{name: "bad_subject_tick_with_job", subject: "tenure.in.coord.coord-1.job-1.tick", body: `{"v":1}`, code: events.ReasonBadSubject, field: "job"},
	{name: "bad_subject_beats_body", subject: "tenure.in.worker.w 7.job-1.ack", body: `not json`, code: events.ReasonBadSubject, field: "actor"},
	{name: "wrong_role_ops_renew", subject: "tenure.in.ops.disp-1.job-1.renew", body: `{"v":1}`, code: events.ReasonWrongRole},
	{name: "wrong_role_worker_policy", subject: "tenure.in.worker.w-7._.policy", body: `{"v":1,` + policyOK + `}`, code: events.ReasonWrongRole},

	// Size.
	{name: "too_large_body", subject: sTick, body: padTo(events.MaxInputBytes + 1), code: events.ReasonTooLarge},
	{name: "too_large_body_beats_syntax", subject: sTick, body: strings.Repeat("x", events.MaxInputBytes+1), code: events.ReasonTooLarge},

	// Syntax.
	{name: "syntax_empty", subject: sTick, body: ``, code: events.ReasonSyntaxError},
	{name: "syntax_whitespace_only", subject: sTick, body: " \t\r\n ", code: events.ReasonSyntaxError},
	{name: "syntax_bom", subject: sTick, body: "\xef\xbb\xbf{\"v\":1}", code: events.ReasonSyntaxError},
	{name: "syntax_trailing_comma", subject: sTick, body: `{"v":1,}`, code: events.ReasonSyntaxError},
	{name: "syntax_leading_comma", subject: sTick, body: `{,"v":1}`, code: events.ReasonSyntaxError},
	{name: "syntax_unterminated_object", subject: sTick, body: `{"v":1`, code: events.ReasonSyntaxError},
	{name: "syntax_open_brace_only", subject: sTick, body: `{`, code: events.ReasonSyntaxError},
	{name: "syntax_unterminated_string", subject: sCancel, body: `{"v":1,"reason":"abc`, code: events.ReasonSyntaxError},
	{name: "syntax_unterminated_key", subject: sCancel, body: `{"v`, code: events.ReasonSyntaxError},
	{name: "syntax_single_quotes", subject: sTick, body: `{'v':1}`, code: events.ReasonSyntaxError},
	{name: "syntax_bare_key", subject: sTick, body: `{v:1}`, code: events.ReasonSyntaxError},
	{name: "syntax_missing_colon", subject: sTick, body: `{"v" 1}`, code: events.ReasonSyntaxError},
	{name: "syntax_missing_value", subject: sTick, body: `{"v":}`, code: events.ReasonSyntaxError},
	{name: "syntax_missing_comma", subject: sAck, body: `{"v":1 "lease_id":"L-1"}`, code: events.ReasonSyntaxError},
	{name: "syntax_bad_escape", subject: sCancel, body: `{"v":1,"reason":"a\x"}`, code: events.ReasonSyntaxError},
	{name: "syntax_bad_unicode_escape", subject: sCancel, body: `{"v":1,"reason":"\u12G4"}`, code: events.ReasonSyntaxError},
	{name: "syntax_short_unicode_escape", subject: sCancel, body: `{"v":1,"reason":"\u12"}`, code: events.ReasonSyntaxError},
	{name: "syntax_form_feed_whitespace", subject: sTick, body: "{\f\"v\":1}", code: events.ReasonSyntaxError},
	{name: "syntax_nbsp_whitespace", subject: sTick, body: "{\u00a0\"v\":1}", code: events.ReasonSyntaxError},
	{name: "syntax_truncated_literal", subject: sCancel, body: `{"v":1,"reason":nul}`, code: events.ReasonSyntaxError},
	{name: "syntax_bare_word_value", subject: sCancel, body: `{"v":1,"reason":abc}`, code: events.ReasonSyntaxError},
	{name: "syntax_comment", subject: sTick, body: `{"v":1 /* c */}`, code: events.ReasonSyntaxError},
	{name: "syntax_number_then_garbage", subject: sTick, body: `{"v":1x}`, code: events.ReasonSyntaxError},
	{name: "syntax_infinity", subject: sTick, body: `{"v":Infinity}`, code: events.ReasonSyntaxError},
	{name: "syntax_leading_dot", subject: sTick, body: `{"v":.5}`, code: events.ReasonSyntaxError},
	{name: "syntax_top_level_garbage", subject: sTick, body: `x`, code: events.ReasonSyntaxError},
	{name: "syntax_top_level_close_brace", subject: sTick, body: `}`, code: events.ReasonSyntaxError},
	{name: "syntax_top_level_truncated_true", subject: sTick, body: `tru`, code: events.ReasonSyntaxError},
	{name: "syntax_inside_skipped_value", subject: sCancel, body: `{"v":1,"reason":[1,2}`, code: events.ReasonSyntaxError},
	{name: "syntax_nul_byte_between_tokens", subject: sTick, body: "{\"v\":1\x00}", code: events.ReasonSyntaxError},
	{name: "syntax_truncated_after_leases_colon", subject: sBatch, body: `{"leases":`, code: events.ReasonSyntaxError}, // fuzz crasher fd4769d89571d89b
	{name: "syntax_truncated_in_leases", subject: sBatch, body: `{"v":1,"leases":[`, code: events.ReasonSyntaxError},
	{name: "syntax_truncated_in_lease", subject: sBatch, body: `{"v":1,"leases":[{"job":`, code: events.ReasonSyntaxError},
	{name: "syntax_truncated_after_colon", subject: sAck, body: `{"v":1,"lease_id": `, code: events.ReasonSyntaxError},
	{name: "syntax_beats_missing_field", subject: sAck, body: `{"v":1,"lease_id":"L-1"`, code: events.ReasonSyntaxError},

	// Not an object.
	{name: "not_object_array", subject: sTick, body: `[{"v":1}]`, code: events.ReasonNotObject},
	{name: "not_object_string", subject: sTick, body: `"v"`, code: events.ReasonNotObject},
	{name: "not_object_number", subject: sTick, body: ` 1`, code: events.ReasonNotObject},
	{name: "not_object_negative", subject: sTick, body: `-1`, code: events.ReasonNotObject},
	{name: "not_object_null", subject: sTick, body: `null`, code: events.ReasonNotObject},
	{name: "not_object_true", subject: sTick, body: `true`, code: events.ReasonNotObject},
	{name: "not_object_false", subject: sTick, body: `false`, code: events.ReasonNotObject},

	// Unknown fields.
	{name: "unknown_field", subject: sTick, body: `{"v":1,"foo":1}`, code: events.ReasonUnknownField, field: "foo"},
	{name: "unknown_field_beats_bad_version", subject: sTick, body: `{"foo":1,"v":2}`, code: events.ReasonUnknownField, field: "foo"},
	{name: "unknown_field_before_its_value", subject: sTick, body: `{"v":1,"foo":[[[`, code: events.ReasonUnknownField, field: "foo"},
	{name: "unknown_field_empty_key", subject: sTick, body: `{"":1}`, code: events.ReasonUnknownField},
	{name: "unknown_field_long_key_truncated", subject: sTick, body: `{"` + strings.Repeat("k", 100) + `":1}`, code: events.ReasonUnknownField, field: strings.Repeat("k", 64) + "..."},
	{name: "unknown_field_other_verbs_field", subject: sRenew, body: `{"v":1,"holder":"w-7"}`, code: events.ReasonUnknownField, field: "holder"},
	{name: "unknown_field_policy_field_in_tick", subject: sTick, body: `{"v":1,"max_lease_ms":1}`, code: events.ReasonUnknownField, field: "max_lease_ms"},
	{name: "unknown_field_leases_in_single_renew", subject: sRenew, body: `{"v":1,"leases":[` + leaseOK + `]}`, code: events.ReasonUnknownField, field: "leases"},
	{name: "unknown_field_leases_in_ack", subject: sAck, body: `{"v":1,"leases":[]}`, code: events.ReasonUnknownField, field: "leases"},
	{name: "unknown_field_lease_id_in_batch", subject: sBatch, body: `{"v":1,"lease_id":"L-1","leases":[` + leaseOK + `]}`, code: events.ReasonUnknownField, field: "lease_id"},
	{name: "unknown_field_lease_ms_in_batch", subject: sBatch, body: `{"v":1,"leases":[` + leaseOK + `],"lease_ms":100}`, code: events.ReasonUnknownField, field: "lease_ms"},
	{name: "unknown_field_in_lease", subject: sBatch, body: `{"v":1,"leases":[` + leaseOK + `,{"job":"b","extra":1}]}`, code: events.ReasonUnknownField, field: "leases[1].extra"},
	{name: "unknown_field_v_in_lease", subject: sBatch, body: `{"v":1,"leases":[{"v":1}]}`, code: events.ReasonUnknownField, field: "leases[0].v"},
	{name: "unknown_field_text_of_other_verb", subject: sProgress, body: `{"v":1,"reason":"x"}`, code: events.ReasonUnknownField, field: "reason"},
	{name: "unknown_field_revoke_holder_after_action", subject: sResolve, body: `{"v":1,"action":"revoke","holder":"w-7"}`, code: events.ReasonUnknownField, field: "holder"},
	{name: "unknown_field_revoke_holder_before_action", subject: sResolve, body: `{"v":1,"holder":"w-7","action":"revoke"}`, code: events.ReasonUnknownField, field: "holder"},
	{name: "unknown_field_affirm_outcome_before_action", subject: sResolve, body: `{"v":1,"outcome":"FAILED","action":"affirm"}`, code: events.ReasonUnknownField, field: "outcome"},
	{name: "unknown_field_settle_lease_id", subject: sResolve, body: `{"v":1,"action":"settle","outcome":"FAILED","lease_id":"L-1"}`, code: events.ReasonUnknownField, field: "lease_id"},
	{name: "unknown_field_sub_action_checked_at_key", subject: sResolve, body: `{"v":1,"action":"revoke","generation":0}`, code: events.ReasonUnknownField, field: "generation"},

	// Duplicate keys.
	{name: "duplicate_key", subject: sTick, body: `{"v":1,"v":1}`, code: events.ReasonDuplicateKey, field: "v"},
	{name: "duplicate_key_escaped", subject: sTick, body: `{"v":1,"\u0076":1}`, code: events.ReasonDuplicateKey, field: "v"},
	{name: "duplicate_key_beats_bad_value", subject: sTick, body: `{"v":1,"v":2}`, code: events.ReasonDuplicateKey, field: "v"},
	{name: "duplicate_key_text", subject: sCancel, body: `{"v":1,"reason":"a","reason":"b"}`, code: events.ReasonDuplicateKey, field: "reason"},
	{name: "duplicate_key_in_lease", subject: sBatch, body: `{"v":1,"leases":[{"job":"a","job":"a"}]}`, code: events.ReasonDuplicateKey, field: "leases[0].job"},
	{name: "duplicate_key_leases", subject: sBatch, body: `{"v":1,"leases":[` + leaseOK + `],"leases":[` + leaseOK + `]}`, code: events.ReasonDuplicateKey, field: "leases"},
	{name: "duplicate_key_action", subject: sResolve, body: `{"v":1,"action":"revoke","action":"revoke"}`, code: events.ReasonDuplicateKey, field: "action"},

	// Case variants.
	{name: "case_variant_key", subject: sTick, body: `{"V":1}`, code: events.ReasonCaseVariantKey, field: "V"},
	{name: "case_variant_key_of_verb_field", subject: sAck, body: `{"v":1,"Lease_ID":"L-1","generation":1}`, code: events.ReasonCaseVariantKey, field: "Lease_ID"},
	{name: "case_variant_key_of_other_verbs_field", subject: sRenew, body: `{"v":1,"HOLDER":"w-7"}`, code: events.ReasonCaseVariantKey, field: "HOLDER"},
	{name: "case_variant_key_unicode_fold", subject: sAcquire, body: `{"v":1,"lease_m` + "\u017f" + `":5}`, code: events.ReasonCaseVariantKey, field: "lease_m\u017f"},
	{name: "case_variant_key_kelvin_escaped", subject: sOffer, body: `{"v":1,"ac\u212a_timeout_ms":1}`, code: events.ReasonCaseVariantKey, field: "ac\u212a_timeout_ms"},
	{name: "case_variant_key_in_lease", subject: sBatch, body: `{"v":1,"leases":[{"Job":"a"}]}`, code: events.ReasonCaseVariantKey, field: "leases[0].Job"},

	// UTF-8.
	{name: "invalid_utf8_value", subject: sCancel, body: "{\"v\":1,\"reason\":\"a\xffb\"}", code: events.ReasonInvalidUtf8, field: "reason"},
	{name: "invalid_utf8_key", subject: sCancel, body: "{\"v\":1,\"\xff\":1}", code: events.ReasonInvalidUtf8},
	{name: "invalid_utf8_key_in_lease", subject: sBatch, body: "{\"v\":1,\"leases\":[{\"\xc3\":1}]}", code: events.ReasonInvalidUtf8, field: "leases[0]"},
	{name: "invalid_utf8_overlong", subject: sCancel, body: "{\"v\":1,\"reason\":\"\xc0\xaf\"}", code: events.ReasonInvalidUtf8, field: "reason"},
	{name: "invalid_utf8_encoded_surrogate", subject: sCancel, body: "{\"v\":1,\"reason\":\"\xed\xa0\x80\"}", code: events.ReasonInvalidUtf8, field: "reason"},
	{name: "invalid_utf8_truncated_sequence", subject: sCancel, body: "{\"v\":1,\"reason\":\"\xe6\x97\"}", code: events.ReasonInvalidUtf8, field: "reason"},
	{name: "control_char_escape_before_invalid_utf8", subject: sCancel, body: "{\"v\":1,\"reason\":\"\\n\xff\"}", code: events.ReasonControlChar, field: "reason"},
	{name: "invalid_utf8_escaped_then_raw", subject: sCancel, body: "{\"v\":1,\"reason\":\"\\/\xff\"}", code: events.ReasonInvalidUtf8, field: "reason"},
	{name: "invalid_utf8_lone_high_surrogate", subject: sCancel, body: `{"v":1,"reason":"\ud800"}`, code: events.ReasonInvalidUtf8, field: "reason"},
	{name: "invalid_utf8_lone_low_surrogate", subject: sCancel, body: `{"v":1,"reason":"\udc00"}`, code: events.ReasonInvalidUtf8, field: "reason"},
	{name: "invalid_utf8_high_then_bmp", subject: sCancel, body: `{"v":1,"reason":"\ud800\u0041"}`, code: events.ReasonInvalidUtf8, field: "reason"},
	{name: "invalid_utf8_high_then_high", subject: sCancel, body: `{"v":1,"reason":"\ud800\ud800"}`, code: events.ReasonInvalidUtf8, field: "reason"},
	{name: "invalid_utf8_reversed_pair", subject: sCancel, body: `{"v":1,"reason":"\ude00\ud83d"}`, code: events.ReasonInvalidUtf8, field: "reason"},
	{name: "invalid_utf8_in_token_beats_wrong_type", subject: sAck, body: "{\"v\":1,\"generation\":\"\xff\"}", code: events.ReasonInvalidUtf8, field: "generation"},
	{name: "invalid_utf8_inside_skipped_value", subject: sCancel, body: "{\"v\":1,\"reason\":[\"\xff\"]}", code: events.ReasonInvalidUtf8, field: "reason"},

	// Control characters.
	{name: "control_char_raw", subject: sCancel, body: "{\"v\":1,\"reason\":\"a\x01\"}", code: events.ReasonControlChar, field: "reason"},
	{name: "control_char_raw_tab", subject: sCancel, body: "{\"v\":1,\"reason\":\"a\tb\"}", code: events.ReasonControlChar, field: "reason"},
	{name: "control_char_raw_newline", subject: sCancel, body: "{\"v\":1,\"reason\":\"a\nb\"}", code: events.ReasonControlChar, field: "reason"},
	{name: "control_char_raw_del", subject: sCancel, body: "{\"v\":1,\"reason\":\"a\x7fb\"}", code: events.ReasonControlChar, field: "reason"},
	{name: "control_char_escaped_n", subject: sCancel, body: `{"v":1,"reason":"a\nb"}`, code: events.ReasonControlChar, field: "reason"},
	{name: "control_char_escaped_t", subject: sCancel, body: `{"v":1,"reason":"a\tb"}`, code: events.ReasonControlChar, field: "reason"},
	{name: "control_char_escaped_nul", subject: sCancel, body: `{"v":1,"reason":"\u0000"}`, code: events.ReasonControlChar, field: "reason"},
	{name: "control_char_escaped_1f", subject: sCancel, body: `{"v":1,"reason":"\u001F"}`, code: events.ReasonControlChar, field: "reason"},
	{name: "control_char_escaped_del", subject: sCancel, body: `{"v":1,"reason":"\u007f"}`, code: events.ReasonControlChar, field: "reason"},
	{name: "control_char_in_key", subject: sCancel, body: `{"v\u0000":1}`, code: events.ReasonControlChar},
	{name: "control_char_in_token", subject: sAck, body: `{"v":1,"lease_id":"L\r1","generation":1}`, code: events.ReasonControlChar, field: "lease_id"},

	// Trailing data.
	{name: "trailing_data", subject: sTick, body: `{"v":1}x`, code: events.ReasonTrailingData},
	{name: "trailing_data_second_object", subject: sTick, body: `{"v":1} {"v":1}`, code: events.ReasonTrailingData},
	{name: "trailing_data_close_brace", subject: sTick, body: `{"v":1}}`, code: events.ReasonTrailingData},
	{name: "trailing_data_nul", subject: sTick, body: "{\"v\":1}\n\x00", code: events.ReasonTrailingData},
	{name: "trailing_data_beats_missing_field", subject: sTick, body: `{}x`, code: events.ReasonTrailingData},

	// Missing fields (checked once the body is read).
	{name: "missing_field_v", subject: sTick, body: `{}`, code: events.ReasonMissingField, field: "v"},
	{name: "missing_field_v_first", subject: sAck, body: `{"generation":1}`, code: events.ReasonMissingField, field: "v"},
	{name: "missing_field_lease_id", subject: sAck, body: `{"v":1,"generation":1}`, code: events.ReasonMissingField, field: "lease_id"},
	{name: "missing_field_generation", subject: sRelease, body: `{"v":1,"lease_id":"L-1"}`, code: events.ReasonMissingField, field: "generation"},
	{name: "missing_field_renew_seq", subject: sRenew, body: `{"v":1,"lease_id":"L-1","generation":1}`, code: events.ReasonMissingField, field: "renew_seq"},
	{name: "missing_field_progress_value", subject: sProgress, body: `{"v":1,"lease_id":"L-1","generation":1,"progress_seq":1}`, code: events.ReasonMissingField, field: "value"},
	{name: "missing_field_progress_seq", subject: sProgress, body: `{"v":1,"lease_id":"L-1","generation":1,"value":1}`, code: events.ReasonMissingField, field: "progress_seq"},
	{name: "missing_field_holder", subject: sOffer, body: `{"v":1,"lease_ms":100}`, code: events.ReasonMissingField, field: "holder"},
	{name: "missing_field_outcome", subject: sResult, body: `{"v":1,"lease_id":"L-1","generation":1}`, code: events.ReasonMissingField, field: "outcome"},
	{name: "missing_field_cancel_generation", subject: sCancel, body: `{"v":1,"lease_id":"L-1"}`, code: events.ReasonMissingField, field: "generation"},
	{name: "missing_field_cancel_lease_id", subject: sCancel, body: `{"v":1,"generation":1}`, code: events.ReasonMissingField, field: "lease_id"},
	{name: "missing_field_resolve_action", subject: sResolve, body: `{"v":1,"reason":"x"}`, code: events.ReasonMissingField, field: "action"},
	{name: "missing_field_resolve_action_with_holder", subject: sResolve, body: `{"v":1,"holder":"w-7"}`, code: events.ReasonMissingField, field: "action"},
	{name: "missing_field_affirm_holder", subject: sResolve, body: `{"v":1,"action":"affirm","lease_id":"L-1","generation":1}`, code: events.ReasonMissingField, field: "holder"},
	{name: "missing_field_affirm_generation", subject: sResolve, body: `{"v":1,"lease_id":"L-1","holder":"w-7","action":"affirm"}`, code: events.ReasonMissingField, field: "generation"},
	{name: "missing_field_settle_outcome", subject: sResolve, body: `{"v":1,"action":"settle"}`, code: events.ReasonMissingField, field: "outcome"},
	{name: "missing_field_policy_max_generations", subject: sPolicy, body: `{"v":1,"min_lease_ms":100,"max_lease_ms":3600000,"default_lease_ms":30000,"ack_timeout_ms":30000,"cancel_timeout_ms":60000,"max_lifetime_ms":86400000}`, code: events.ReasonMissingField, field: "max_generations"},
	{name: "missing_field_policy_first_in_order", subject: sPolicy, body: `{"v":1,"max_generations":1}`, code: events.ReasonMissingField, field: "min_lease_ms"},
	{name: "missing_field_batch_leases", subject: sBatch, body: `{"v":1}`, code: events.ReasonMissingField, field: "leases"},
	{name: "missing_field_batch_empty_leases", subject: sBatch, body: `{"v":1,"leases":[ ]}`, code: events.ReasonMissingField, field: "leases"},
	{name: "missing_field_batch_element_renew_seq", subject: sBatch, body: `{"v":1,"leases":[` + leaseOK + `,{"job":"b","lease_id":"L-2","generation":1}]}`, code: events.ReasonMissingField, field: "leases[1].renew_seq"},
	{name: "missing_field_batch_empty_element", subject: sBatch, body: `{"v":1,"leases":[{}]}`, code: events.ReasonMissingField, field: "leases[0].job"},
	{name: "missing_field_v_before_lease_elements", subject: sBatch, body: `{"leases":[{}]}`, code: events.ReasonMissingField, field: "v"},

	// Wrong types.
	{name: "wrong_type_string_for_integer", subject: sTick, body: `{"v":"1"}`, code: events.ReasonWrongType, field: "v"},
	{name: "wrong_type_integer_for_token", subject: sAck, body: `{"v":1,"lease_id":1,"generation":1}`, code: events.ReasonWrongType, field: "lease_id"},
	{name: "wrong_type_true", subject: sTick, body: `{"v":true}`, code: events.ReasonWrongType, field: "v"},
	{name: "wrong_type_false_for_text", subject: sCancel, body: `{"v":1,"reason":false}`, code: events.ReasonWrongType, field: "reason"},
	{name: "wrong_type_object", subject: sAck, body: `{"v":1,"lease_id":{"id":"L-1"},"generation":1}`, code: events.ReasonWrongType, field: "lease_id"},
	{name: "wrong_type_array", subject: sAck, body: `{"v":1,"lease_id":"L-1","generation":[1]}`, code: events.ReasonWrongType, field: "generation"},
	{name: "wrong_type_empty_array", subject: sTick, body: `{"v":[]}`, code: events.ReasonWrongType, field: "v"},
	{name: "wrong_type_nested_at_depth_limit", subject: sCancel, body: `{"v":1,"reason":` + nest(7) + `}`, code: events.ReasonWrongType, field: "reason"},
	{name: "wrong_type_sent_at_number", subject: sTick, body: `{"v":1,"sent_at":1700000000}`, code: events.ReasonWrongType, field: "sent_at"},
	{name: "wrong_type_actor_number", subject: sTick, body: `{"v":1,"actor":7}`, code: events.ReasonWrongType, field: "actor"},
	{name: "wrong_type_leases_object", subject: sBatch, body: `{"v":1,"leases":` + leaseOK + `}`, code: events.ReasonWrongType, field: "leases"},
	{name: "wrong_type_leases_string", subject: sBatch, body: `{"v":1,"leases":"a"}`, code: events.ReasonWrongType, field: "leases"},
	{name: "wrong_type_lease_element_number", subject: sBatch, body: `{"v":1,"leases":[` + leaseOK + `,1]}`, code: events.ReasonWrongType, field: "leases[1]"},
	{name: "wrong_type_lease_element_nested_at_depth_limit", subject: sBatch, body: `{"v":1,"leases":[` + nest(6) + `]}`, code: events.ReasonWrongType, field: "leases[0]"},
	{name: "wrong_type_lease_element_array", subject: sBatch, body: `{"v":1,"leases":[[` + leaseOK + `]]}`, code: events.ReasonWrongType, field: "leases[0]"},
	{name: "wrong_type_lease_nested_value", subject: sBatch, body: `{"v":1,"leases":[{"job":["a"]}]}`, code: events.ReasonWrongType, field: "leases[0].job"},
	{name: "wrong_type_lease_nested_at_depth_limit", subject: sBatch, body: `{"v":1,"leases":[{"generation":` + nest(5) + `}]}`, code: events.ReasonWrongType, field: "leases[0].generation"},

	// null.
	{name: "null_value", subject: sTick, body: `{"v":null}`, code: events.ReasonNullValue, field: "v"},
	{name: "null_value_text", subject: sCancel, body: `{"v":1,"reason":null}`, code: events.ReasonNullValue, field: "reason"},
	{name: "null_value_leases", subject: sBatch, body: `{"v":1,"leases":null}`, code: events.ReasonNullValue, field: "leases"},
	{name: "null_value_lease_element", subject: sBatch, body: `{"v":1,"leases":[null]}`, code: events.ReasonNullValue, field: "leases[0]"},
	{name: "null_value_lease_field", subject: sBatch, body: `{"v":1,"leases":[{"generation":null}]}`, code: events.ReasonNullValue, field: "leases[0].generation"},
	{name: "null_value_inside_skipped_value", subject: sCancel, body: `{"v":1,"reason":{"a":null}}`, code: events.ReasonNullValue, field: "reason"},

	// Numbers.
	{name: "bad_number_fraction", subject: sTick, body: `{"v":1.0}`, code: events.ReasonBadNumber, field: "v"},
	{name: "bad_number_exponent", subject: sTick, body: `{"v":1e0}`, code: events.ReasonBadNumber, field: "v"},
	{name: "bad_number_exponent_upper_signed", subject: sTick, body: `{"v":10E-1}`, code: events.ReasonBadNumber, field: "v"},
	{name: "bad_number_leading_zero", subject: sTick, body: `{"v":01}`, code: events.ReasonBadNumber, field: "v"},
	{name: "bad_number_minus_zero", subject: sAck, body: `{"v":1,"lease_id":"L-1","generation":-0}`, code: events.ReasonBadNumber, field: "generation"},
	{name: "bad_number_plus", subject: sTick, body: `{"v":+1}`, code: events.ReasonBadNumber, field: "v"},
	{name: "bad_number_minus_alone", subject: sTick, body: `{"v":-}`, code: events.ReasonBadNumber, field: "v"},
	{name: "bad_number_trailing_dot", subject: sTick, body: `{"v":1.}`, code: events.ReasonBadNumber, field: "v"},
	{name: "bad_number_double_minus", subject: sTick, body: `{"v":--1}`, code: events.ReasonBadNumber, field: "v"},
	{name: "bad_number_zeros", subject: sAck, body: `{"v":1,"lease_id":"L-1","generation":00}`, code: events.ReasonBadNumber, field: "generation"},
	{name: "bad_number_huge_fraction", subject: sAcquire, body: `{"v":1,"lease_ms":1000.5}`, code: events.ReasonBadNumber, field: "lease_ms"},
	{name: "bad_number_beats_wrong_type", subject: sCancel, body: `{"v":1,"reason":1.5}`, code: events.ReasonBadNumber, field: "reason"},
	{name: "bad_number_inside_skipped_value", subject: sCancel, body: `{"v":1,"reason":[1.5]}`, code: events.ReasonBadNumber, field: "reason"},

	// Durations.
	{name: "bad_duration_zero", subject: sAcquire, body: `{"v":1,"lease_ms":0}`, code: events.ReasonBadDuration, field: "lease_ms"},
	{name: "bad_duration_negative", subject: sAcquire, body: `{"v":1,"lease_ms":-1000}`, code: events.ReasonBadDuration, field: "lease_ms"},
	{name: "bad_duration_over_30_days", subject: sAcquire, body: `{"v":1,"lease_ms":2592000001}`, code: events.ReasonBadDuration, field: "lease_ms"},
	{name: "bad_duration_40_digits", subject: sAcquire, body: `{"v":1,"lease_ms":` + strings.Repeat("9", 40) + `}`, code: events.ReasonBadDuration, field: "lease_ms"},
	{name: "bad_duration_40_digits_negative", subject: sAcquire, body: `{"v":1,"lease_ms":-` + strings.Repeat("9", 40) + `}`, code: events.ReasonBadDuration, field: "lease_ms"},
	{name: "bad_duration_ack_timeout", subject: sOffer, body: `{"v":1,"holder":"w-7","ack_timeout_ms":0}`, code: events.ReasonBadDuration, field: "ack_timeout_ms"},
	{name: "bad_duration_in_lease", subject: sBatch, body: `{"v":1,"leases":[{"lease_ms":0}]}`, code: events.ReasonBadDuration, field: "leases[0].lease_ms"},
	{name: "bad_duration_policy", subject: sPolicy, body: `{"v":1,"min_lease_ms":0}`, code: events.ReasonBadDuration, field: "min_lease_ms"},
	{name: "bad_duration_uint64_wrap", subject: sAcquire, body: `{"v":1,"lease_ms":18446744073709551617}`, code: events.ReasonBadDuration, field: "lease_ms"},

	// Sequences.
	{name: "bad_sequence_zero", subject: sAck, body: `{"v":1,"lease_id":"L-1","generation":0}`, code: events.ReasonBadSequence, field: "generation"},
	{name: "bad_sequence_negative", subject: sAck, body: `{"v":1,"lease_id":"L-1","generation":-1}`, code: events.ReasonBadSequence, field: "generation"},
	{name: "bad_sequence_2_pow_53", subject: sAck, body: `{"v":1,"lease_id":"L-1","generation":9007199254740992}`, code: events.ReasonBadSequence, field: "generation"},
	{name: "bad_sequence_19_digits", subject: sAck, body: `{"v":1,"lease_id":"L-1","generation":9999999999999999999}`, code: events.ReasonBadSequence, field: "generation"},
	{name: "bad_sequence_2_pow_64", subject: sAck, body: `{"v":1,"lease_id":"L-1","generation":18446744073709551616}`, code: events.ReasonBadSequence, field: "generation"},
	{name: "bad_sequence_40_digits", subject: sRenew, body: `{"v":1,"lease_id":"L-1","generation":1,"renew_seq":` + strings.Repeat("1", 40) + `}`, code: events.ReasonBadSequence, field: "renew_seq"},
	{name: "bad_sequence_progress_seq", subject: sProgress, body: `{"v":1,"progress_seq":0}`, code: events.ReasonBadSequence, field: "progress_seq"},
	{name: "bad_sequence_in_lease", subject: sBatch, body: `{"v":1,"leases":[` + leaseOK + `,{"renew_seq":0}]}`, code: events.ReasonBadSequence, field: "leases[1].renew_seq"},

	// Values.
	{name: "bad_value_progress_101", subject: sProgress, body: `{"v":1,"value":101}`, code: events.ReasonBadValue, field: "value"},
	{name: "bad_value_progress_negative", subject: sProgress, body: `{"v":1,"value":-1}`, code: events.ReasonBadValue, field: "value"},
	{name: "bad_value_progress_40_digits", subject: sProgress, body: `{"v":1,"value":` + strings.Repeat("5", 40) + `}`, code: events.ReasonBadValue, field: "value"},
	{name: "bad_value_max_generations_zero", subject: sPolicy, body: `{"v":1,"max_generations":0}`, code: events.ReasonBadValue, field: "max_generations"},
	{name: "bad_value_max_generations_over", subject: sPolicy, body: `{"v":1,"max_generations":1048577}`, code: events.ReasonBadValue, field: "max_generations"},

	// Tokens.
	{name: "bad_token_empty", subject: sAck, body: `{"v":1,"lease_id":"","generation":1}`, code: events.ReasonBadToken, field: "lease_id"},
	{name: "bad_token_reserved", subject: sAck, body: `{"v":1,"lease_id":"_","generation":1}`, code: events.ReasonBadToken, field: "lease_id"},
	{name: "bad_token_space", subject: sAck, body: `{"v":1,"lease_id":"L 1","generation":1}`, code: events.ReasonBadToken, field: "lease_id"},
	{name: "bad_token_dot", subject: sOffer, body: `{"v":1,"holder":"w.7"}`, code: events.ReasonBadToken, field: "holder"},
	{name: "bad_token_too_long", subject: sAck, body: `{"v":1,"lease_id":"` + strings.Repeat("L", 65) + `","generation":1}`, code: events.ReasonBadToken, field: "lease_id"},
	{name: "bad_token_non_ascii", subject: sAck, body: `{"v":1,"lease_id":"Lé","generation":1}`, code: events.ReasonBadToken, field: "lease_id"},
	{name: "bad_token_actor", subject: sTick, body: `{"v":1,"actor":"coord 1"}`, code: events.ReasonBadToken, field: "actor"},
	{name: "bad_token_lease_job", subject: sBatch, body: `{"v":1,"leases":[{"job":"a/b"}]}`, code: events.ReasonBadToken, field: "leases[0].job"},

	// Enums.
	{name: "bad_enum_outcome_case", subject: sResult, body: `{"v":1,"outcome":"success"}`, code: events.ReasonBadEnum, field: "outcome"},
	{name: "bad_enum_outcome_unknown", subject: sResult, body: `{"v":1,"outcome":"SUCCEEDED"}`, code: events.ReasonBadEnum, field: "outcome"},
	{name: "bad_enum_action_case", subject: sResolve, body: `{"v":1,"action":"Affirm"}`, code: events.ReasonBadEnum, field: "action"},
	{name: "bad_enum_settle_success", subject: sResolve, body: `{"v":1,"action":"settle","outcome":"SUCCESS"}`, code: events.ReasonBadEnum, field: "outcome"},
	{name: "bad_enum_resolve_success_before_action", subject: sResolve, body: `{"v":1,"outcome":"SUCCESS","action":"settle"}`, code: events.ReasonBadEnum, field: "outcome"},

	// Times.
	{name: "bad_time_no_zone", subject: sTick, body: `{"v":1,"sent_at":"2025-03-01T11:00:00"}`, code: events.ReasonBadTime, field: "sent_at"},
	{name: "bad_time_space_separator", subject: sTick, body: `{"v":1,"sent_at":"2025-03-01 11:00:00Z"}`, code: events.ReasonBadTime, field: "sent_at"},
	{name: "bad_time_date_only", subject: sTick, body: `{"v":1,"sent_at":"2025-03-01"}`, code: events.ReasonBadTime, field: "sent_at"},
	{name: "bad_time_february_30", subject: sTick, body: `{"v":1,"sent_at":"2025-02-30T11:00:00Z"}`, code: events.ReasonBadTime, field: "sent_at"},
	{name: "bad_time_year_9999", subject: sTick, body: `{"v":1,"sent_at":"9999-01-01T00:00:00Z"}`, code: events.ReasonBadTime, field: "sent_at"},
	{name: "bad_time_year_1", subject: sTick, body: `{"v":1,"sent_at":"0001-01-01T00:00:00Z"}`, code: events.ReasonBadTime, field: "sent_at"},
	{name: "bad_time_empty", subject: sTick, body: `{"v":1,"sent_at":""}`, code: events.ReasonBadTime, field: "sent_at"},

	// Texts, batches.
	{name: "too_large_text", subject: sCancel, body: `{"v":1,"reason":"` + strings.Repeat("a", events.MaxTextLen+1) + `"}`, code: events.ReasonTooLarge, field: "reason"},
	{name: "too_large_text_multibyte", subject: sProgress, body: `{"v":1,"note":"` + strings.Repeat("é", events.MaxTextLen/2) + `a"}`, code: events.ReasonTooLarge, field: "note"},
	{name: "too_large_text_escaped", subject: sResult, body: `{"v":1,"detail":"` + strings.Repeat(`\u00e9`, events.MaxTextLen/2+1) + `"}`, code: events.ReasonTooLarge, field: "detail"},
	{name: "too_large_batch_null_element", subject: sBatch, body: strings.Replace(batchBody(events.MaxBatch), "]}", ",null]}", 1), code: events.ReasonTooLarge, field: "leases"},
	{name: "syntax_trailing_comma_after_max_batch", subject: sBatch, body: strings.Replace(batchBody(events.MaxBatch), "]}", ",]}", 1), code: events.ReasonSyntaxError},
	{name: "too_large_batch", subject: sBatch, body: batchBody(events.MaxBatch + 1), code: events.ReasonTooLarge, field: "leases"},

	// Depth.
	{name: "too_deep", subject: sCancel, body: `{"v":1,"reason":` + nest(8) + `}`, code: events.ReasonTooDeep, field: "reason"},
	{name: "too_deep_hostile", subject: sCancel, body: `{"v":1,"reason":` + strings.Repeat("[", 60000), code: events.ReasonTooDeep, field: "reason"},
	{name: "too_deep_objects", subject: sCancel, body: `{"v":1,"reason":` + strings.Repeat(`{"a":`, 8) + `1` + strings.Repeat("}", 8) + `}`, code: events.ReasonTooDeep, field: "reason"},
	{name: "too_deep_in_lease", subject: sBatch, body: `{"v":1,"leases":[{"job":` + nest(6) + `}]}`, code: events.ReasonTooDeep, field: "leases[0].job"},
	{name: "too_deep_lease_element", subject: sBatch, body: `{"v":1,"leases":[` + nest(7) + `]}`, code: events.ReasonTooDeep, field: "leases[0]"},

	// Version.
	{name: "unsupported_version_2", subject: sTick, body: `{"v":2}`, code: events.ReasonUnsupportedVersion, field: "v"},
	{name: "unsupported_version_0", subject: sTick, body: `{"v":0}`, code: events.ReasonUnsupportedVersion, field: "v"},
	{name: "unsupported_version_negative", subject: sTick, body: `{"v":-1}`, code: events.ReasonUnsupportedVersion, field: "v"},
	{name: "unsupported_version_40_digits", subject: sTick, body: `{"v":` + strings.Repeat("1", 40) + `}`, code: events.ReasonUnsupportedVersion, field: "v"},
	{name: "unsupported_version_wraps_to_1", subject: sTick, body: `{"v":18446744073709551617}`, code: events.ReasonUnsupportedVersion, field: "v"},
	{name: "unsupported_version_beats_later_fields", subject: sAck, body: `{"v":2,"lease_id":"?","generation":0}`, code: events.ReasonUnsupportedVersion, field: "v"},

	// Identity.
	{name: "identity_mismatch_actor", subject: sAcquire, body: `{"v":1,"actor":"w-8"}`, code: events.ReasonIdentityMismatch, field: "actor"},
	{name: "identity_mismatch_actor_case", subject: sAcquire, body: `{"v":1,"actor":"W-7"}`, code: events.ReasonIdentityMismatch, field: "actor"},
	{name: "identity_mismatch_job", subject: sAcquire, body: `{"v":1,"job":"job-2"}`, code: events.ReasonIdentityMismatch, field: "job"},
	{name: "identity_mismatch_job_on_tick", subject: sTick, body: `{"v":1,"job":"job-1"}`, code: events.ReasonIdentityMismatch, field: "job"},
	{name: "identity_mismatch_no_job_on_tick", subject: sTick, body: `{"v":1,"job":"_"}`, code: events.ReasonIdentityMismatch, field: "job"},
	{name: "identity_mismatch_job_on_batch", subject: sBatch, body: `{"v":1,"job":"a","leases":[` + leaseOK + `]}`, code: events.ReasonIdentityMismatch, field: "job"},
	{name: "identity_mismatch_job_on_policy", subject: sPolicy, body: `{"v":1,"job":"bad token"}`, code: events.ReasonIdentityMismatch, field: "job"},

	// Policy consistency.
	{name: "bad_policy_min_above_default", subject: sPolicy, body: `{"v":1,` + strings.Replace(policyOK, `"min_lease_ms":100`, `"min_lease_ms":30001`, 1) + `}`, code: events.ReasonBadPolicy, field: "default_lease_ms"},
	{name: "bad_policy_default_above_max", subject: sPolicy, body: `{"v":1,` + strings.Replace(policyOK, `"default_lease_ms":30000`, `"default_lease_ms":3600001`, 1) + `}`, code: events.ReasonBadPolicy, field: "default_lease_ms"},
	{name: "bad_policy_max_above_lifetime", subject: sPolicy, body: `{"v":1,` + strings.Replace(policyOK, `"max_lifetime_ms":86400000`, `"max_lifetime_ms":3599999`, 1) + `}`, code: events.ReasonBadPolicy, field: "max_lease_ms"},

	// Revision 4: submit.
	{name: "bad_subject_cancel_without_job", subject: "tenure.in.ops.disp-1._.cancel", body: `{"v":1}`, code: events.ReasonBadSubject, field: "job"}, // (a submit without a job is a batch submit from revision 7 on)
	{name: "wrong_role_worker_submit", subject: "tenure.in.worker.w-7.job-1.submit", body: `{"v":1,"queue":"q"}`, code: events.ReasonWrongRole},
	{name: "missing_field_submit_queue", subject: sSubmit, body: `{"v":1,"priority":1}`, code: events.ReasonMissingField, field: "queue"},
	{name: "missing_field_submit_v_first", subject: sSubmit, body: `{"priority":1}`, code: events.ReasonMissingField, field: "v"},
	{name: "bad_token_queue", subject: sSubmit, body: `{"v":1,"queue":"a.b"}`, code: events.ReasonBadToken, field: "queue"},
	{name: "bad_token_queue_reserved", subject: sSubmit, body: `{"v":1,"queue":"_"}`, code: events.ReasonBadToken, field: "queue"},
	{name: "wrong_type_queue", subject: sSubmit, body: `{"v":1,"queue":7}`, code: events.ReasonWrongType, field: "queue"},
	{name: "bad_value_priority_10", subject: sSubmit, body: `{"v":1,"queue":"q","priority":10}`, code: events.ReasonBadValue, field: "priority"},
	{name: "bad_value_priority_negative", subject: sSubmit, body: `{"v":1,"queue":"q","priority":-1}`, code: events.ReasonBadValue, field: "priority"},
	{name: "bad_number_priority_fraction", subject: sSubmit, body: `{"v":1,"queue":"q","priority":1.5}`, code: events.ReasonBadNumber, field: "priority"},
	{name: "bad_value_max_attempts_zero", subject: sSubmit, body: `{"v":1,"queue":"q","max_attempts":0}`, code: events.ReasonBadValue, field: "max_attempts"},
	{name: "bad_value_max_attempts_1001", subject: sSubmit, body: `{"v":1,"queue":"q","max_attempts":1001}`, code: events.ReasonBadValue, field: "max_attempts"},
	{name: "bad_duration_backoff_zero", subject: sSubmit, body: `{"v":1,"queue":"q","backoff_ms":0}`, code: events.ReasonBadDuration, field: "backoff_ms"},
	{name: "bad_duration_backoff_max_over_30_days", subject: sSubmit, body: `{"v":1,"queue":"q","backoff_max_ms":2592000001}`, code: events.ReasonBadDuration, field: "backoff_max_ms"},
	{name: "bad_duration_submit_lease", subject: sSubmit, body: `{"v":1,"queue":"q","lease_ms":0}`, code: events.ReasonBadDuration, field: "lease_ms"},
	{name: "bad_duration_submit_ack_timeout", subject: sSubmit, body: `{"v":1,"queue":"q","ack_timeout_ms":-5}`, code: events.ReasonBadDuration, field: "ack_timeout_ms"},
	{name: "bad_value_backoff_max_below_backoff", subject: sSubmit, body: `{"v":1,"queue":"q","backoff_max_ms":1999,"backoff_ms":2000}`, code: events.ReasonBadValue, field: "backoff_max_ms"},
	{name: "bad_value_backoff_max_below_default_backoff", subject: sSubmit, body: `{"v":1,"queue":"q","backoff_max_ms":999}`, code: events.ReasonBadValue, field: "backoff_max_ms"},
	{name: "bad_value_backoff_above_default_max", subject: sSubmit, body: `{"v":1,"queue":"q","backoff_ms":3600001}`, code: events.ReasonBadValue, field: "backoff_ms"},
	{name: "missing_field_beats_backoffs", subject: sSubmit, body: `{"v":1,"backoff_ms":2000,"backoff_max_ms":1000}`, code: events.ReasonMissingField, field: "queue"},
	{name: "bad_value_in_body_beats_backoffs", subject: sSubmit, body: `{"v":1,"queue":"q","backoff_ms":2000,"backoff_max_ms":1000,"priority":10}`, code: events.ReasonBadValue, field: "priority"},
	{name: "too_large_payload", subject: sSubmit, body: `{"v":1,"queue":"q","payload":"` + strings.Repeat("a", events.MaxPayloadBytes+1) + `"}`, code: events.ReasonTooLarge, field: "payload"},
	{name: "too_large_payload_unescaped", subject: sSubmit, body: `{"v":1,"queue":"q","payload":"` + strings.Repeat(`\u00e9`, events.MaxPayloadBytes/2) + `\n"}`, code: events.ReasonTooLarge, field: "payload"},
	{name: "control_char_payload_raw", subject: sSubmit, body: "{\"v\":1,\"queue\":\"q\",\"payload\":\"a\x01\"}", code: events.ReasonControlChar, field: "payload"},
	{name: "control_char_payload_raw_after_escape", subject: sSubmit, body: "{\"v\":1,\"queue\":\"q\",\"payload\":\"\\n\nb\"}", code: events.ReasonControlChar, field: "payload"},
	{name: "control_char_payload_inside_other_type", subject: sSubmit, body: `{"v":1,"queue":"q","payload":["\n"]}`, code: events.ReasonControlChar, field: "payload"},
	{name: "control_char_queue_escaped", subject: sSubmit, body: `{"v":1,"queue":"q\n"}`, code: events.ReasonControlChar, field: "queue"},
	{name: "invalid_utf8_payload", subject: sSubmit, body: "{\"v\":1,\"queue\":\"q\",\"payload\":\"\\n\xff\"}", code: events.ReasonInvalidUtf8, field: "payload"},
	{name: "invalid_utf8_payload_lone_surrogate", subject: sSubmit, body: `{"v":1,"queue":"q","payload":"\u0000\udc00"}`, code: events.ReasonInvalidUtf8, field: "payload"},
	{name: "syntax_payload_bad_escape", subject: sSubmit, body: `{"v":1,"queue":"q","payload":"\a"}`, code: events.ReasonSyntaxError},
	{name: "wrong_type_payload", subject: sSubmit, body: `{"v":1,"queue":"q","payload":{"to":"a"}}`, code: events.ReasonWrongType, field: "payload"},
	{name: "null_value_payload", subject: sSubmit, body: `{"v":1,"queue":"q","payload":null}`, code: events.ReasonNullValue, field: "payload"},
	{name: "unknown_field_slots_in_submit", subject: sSubmit, body: `{"v":1,"queue":"q","slots":1}`, code: events.ReasonUnknownField, field: "slots"},
	{name: "unknown_field_holder_in_submit", subject: sSubmit, body: `{"v":1,"queue":"q","holder":"w-7"}`, code: events.ReasonUnknownField, field: "holder"},
	{name: "case_variant_key_queue", subject: sSubmit, body: `{"v":1,"Queue":"q"}`, code: events.ReasonCaseVariantKey, field: "Queue"},
	{name: "case_variant_key_payload_in_offer", subject: sOffer, body: `{"v":1,"holder":"w-7","PAYLOAD":"x"}`, code: events.ReasonCaseVariantKey, field: "PAYLOAD"},
	{name: "unknown_field_queue_in_offer", subject: sOffer, body: `{"v":1,"holder":"w-7","queue":"q"}`, code: events.ReasonUnknownField, field: "queue"},
	{name: "duplicate_key_payload", subject: sSubmit, body: `{"v":1,"queue":"q","payload":"a","payload":"a"}`, code: events.ReasonDuplicateKey, field: "payload"},
	{name: "identity_mismatch_actor_on_submit", subject: sSubmit, body: `{"v":1,"actor":"disp-2","queue":"q"}`, code: events.ReasonIdentityMismatch, field: "actor"},
	{name: "identity_mismatch_job_on_submit", subject: sSubmit, body: `{"v":1,"job":"job-2","queue":"q"}`, code: events.ReasonIdentityMismatch, field: "job"},
	// Revision 8: scheduled submits.
	{name: "bad_value_submit_run_at_and_delay", subject: sSubmit, body: `{"v":1,"queue":"q","delay_ms":5,"run_at":"2026-05-01T03:00:00Z"}`, code: events.ReasonBadValue, field: "delay_ms"},
	{name: "bad_duration_submit_delay_zero", subject: sSubmit, body: `{"v":1,"queue":"q","delay_ms":0}`, code: events.ReasonBadDuration, field: "delay_ms"},
	{name: "bad_duration_submit_delay_long", subject: sSubmit, body: `{"v":1,"queue":"q","delay_ms":31622400001}`, code: events.ReasonBadDuration, field: "delay_ms"},
	{name: "bad_time_submit_run_at", subject: sSubmit, body: `{"v":1,"queue":"q","run_at":"tomorrow"}`, code: events.ReasonBadTime, field: "run_at"},
	{name: "wrong_type_submit_run_at", subject: sSubmit, body: `{"v":1,"queue":"q","run_at":1777597200}`, code: events.ReasonWrongType, field: "run_at"},
	// Revision 8: unique keys.
	{name: "missing_field_submit_unique_for_alone", subject: sSubmit, body: `{"v":1,"queue":"q","unique_for_ms":1000}`, code: events.ReasonMissingField, field: "unique_key"},
	{name: "bad_token_submit_unique_key_none", subject: sSubmit, body: `{"v":1,"queue":"q","unique_key":"_"}`, code: events.ReasonBadToken, field: "unique_key"},
	{name: "bad_token_submit_unique_key_empty", subject: sSubmit, body: `{"v":1,"queue":"q","unique_key":""}`, code: events.ReasonBadToken, field: "unique_key"},
	{name: "bad_token_submit_unique_key_dot", subject: sSubmit, body: `{"v":1,"queue":"q","unique_key":"user.42"}`, code: events.ReasonBadToken, field: "unique_key"},
	{name: "bad_token_submit_unique_key_long", subject: sSubmit, body: `{"v":1,"queue":"q","unique_key":"` + strings.Repeat("k", events.MaxTokenLen+1) + `"}`, code: events.ReasonBadToken, field: "unique_key"},
	{name: "wrong_type_submit_unique_key", subject: sSubmit, body: `{"v":1,"queue":"q","unique_key":42}`, code: events.ReasonWrongType, field: "unique_key"},
	{name: "bad_duration_submit_unique_for_zero", subject: sSubmit, body: `{"v":1,"queue":"q","unique_key":"k","unique_for_ms":0}`, code: events.ReasonBadDuration, field: "unique_for_ms"},
	{name: "bad_duration_submit_unique_for_long", subject: sSubmit, body: `{"v":1,"queue":"q","unique_key":"k","unique_for_ms":2592000001}`, code: events.ReasonBadDuration, field: "unique_for_ms"},
	{name: "duplicate_key_unique_key", subject: sSubmit, body: `{"v":1,"queue":"q","unique_key":"a","unique_key":"a"}`, code: events.ReasonDuplicateKey, field: "unique_key"},

	// Revision 4: pull.
	{name: "bad_subject_pull_with_job", subject: "tenure.in.worker.w-7.job-1.pull", body: `{"v":1,"queue":"q","slots":1}`, code: events.ReasonBadSubject, field: "job"},
	{name: "wrong_role_ops_pull", subject: "tenure.in.ops.disp-1._.pull", body: `{"v":1,"queue":"q","slots":1}`, code: events.ReasonWrongRole},
	{name: "missing_field_pull_queue", subject: sPull, body: `{"v":1,"slots":1}`, code: events.ReasonMissingField, field: "queue"},
	{name: "missing_field_pull_slots", subject: sPull, body: `{"v":1,"queue":"q","ttl_ms":1000}`, code: events.ReasonMissingField, field: "slots"},
	{name: "bad_value_slots_257", subject: sPull, body: `{"v":1,"queue":"q","slots":257}`, code: events.ReasonBadValue, field: "slots"},
	{name: "bad_value_slots_negative", subject: sPull, body: `{"v":1,"queue":"q","slots":-1}`, code: events.ReasonBadValue, field: "slots"},
	{name: "wrong_type_slots", subject: sPull, body: `{"v":1,"queue":"q","slots":"4"}`, code: events.ReasonWrongType, field: "slots"},
	{name: "bad_duration_ttl_zero", subject: sPull, body: `{"v":1,"queue":"q","slots":1,"ttl_ms":0}`, code: events.ReasonBadDuration, field: "ttl_ms"},
	{name: "bad_duration_ttl_over_ten_minutes", subject: sPull, body: `{"v":1,"queue":"q","slots":1,"ttl_ms":600001}`, code: events.ReasonBadDuration, field: "ttl_ms"},
	{name: "unknown_field_payload_in_pull", subject: sPull, body: `{"v":1,"queue":"q","slots":1,"payload":"x"}`, code: events.ReasonUnknownField, field: "payload"},
	{name: "unknown_field_ttl_in_renew", subject: sRenew, body: `{"v":1,` + renewOK + `,"ttl_ms":5000}`, code: events.ReasonUnknownField, field: "ttl_ms"},
	{name: "identity_mismatch_job_on_pull", subject: sPull, body: `{"v":1,"job":"job-1","queue":"q","slots":1}`, code: events.ReasonIdentityMismatch, field: "job"},
	{name: "identity_mismatch_actor_on_pull", subject: sPull, body: `{"v":1,"actor":"w-8","queue":"q","slots":1}`, code: events.ReasonIdentityMismatch, field: "actor"},

	// Revision 4: a result's permanent.
	{name: "bad_value_permanent_success", subject: sResult, body: `{"v":1,"lease_id":"L-1","generation":2,"outcome":"SUCCESS","permanent":true}`, code: events.ReasonBadValue, field: "permanent"},
	{name: "bad_value_permanent_false_cancelled", subject: sResult, body: `{"v":1,"permanent":false,"lease_id":"L-1","generation":2,"outcome":"CANCELLED"}`, code: events.ReasonBadValue, field: "permanent"},
	{name: "missing_field_beats_permanent", subject: sResult, body: `{"v":1,"lease_id":"L-1","generation":2,"permanent":true}`, code: events.ReasonMissingField, field: "outcome"},
	{name: "bad_token_beats_permanent", subject: sResult, body: `{"v":1,"outcome":"SUCCESS","permanent":true,"lease_id":"L 1","generation":2}`, code: events.ReasonBadToken, field: "lease_id"},
	{name: "wrong_type_permanent_string", subject: sResult, body: `{"v":1,"permanent":"true"}`, code: events.ReasonWrongType, field: "permanent"},
	{name: "wrong_type_permanent_number", subject: sResult, body: `{"v":1,"permanent":1}`, code: events.ReasonWrongType, field: "permanent"},
	{name: "null_value_permanent", subject: sResult, body: `{"v":1,"permanent":null}`, code: events.ReasonNullValue, field: "permanent"},
	{name: "syntax_permanent_truncated", subject: sResult, body: `{"v":1,"permanent":tru}`, code: events.ReasonSyntaxError},
	{name: "unknown_field_permanent_in_release", subject: sRelease, body: `{"v":1,"lease_id":"L-1","generation":2,"permanent":true}`, code: events.ReasonUnknownField, field: "permanent"},

	// Revision 4: resolve retry and discard take no lease fields.
	{name: "unknown_field_retry_holder", subject: sResolve, body: `{"v":1,"action":"retry","holder":"w-7"}`, code: events.ReasonUnknownField, field: "holder"},
	{name: "unknown_field_discard_outcome_before_action", subject: sResolve, body: `{"v":1,"outcome":"FAILED","action":"discard"}`, code: events.ReasonUnknownField, field: "outcome"},
	{name: "unknown_field_retry_generation_before_action", subject: sResolve, body: `{"v":1,"lease_id":"L-1","generation":1,"action":"retry"}`, code: events.ReasonUnknownField, field: "lease_id"},
	{name: "unknown_field_discard_lease_id", subject: sResolve, body: `{"v":1,"action":"discard","lease_id":"L-1"}`, code: events.ReasonUnknownField, field: "lease_id"},
	{name: "bad_enum_action_retry_case", subject: sResolve, body: `{"v":1,"action":"Retry"}`, code: events.ReasonBadEnum, field: "action"},
	{name: "bad_enum_retry_success_before_action", subject: sResolve, body: `{"v":1,"outcome":"SUCCESS","action":"retry"}`, code: events.ReasonBadEnum, field: "outcome"},
}

// sentinels maps every decode reason to its sentinel.
var sentinels = map[events.Reason]error{
	events.ReasonBadSubject:         events.ErrBadSubject,
	events.ReasonWrongRole:          events.ErrWrongRole,
	events.ReasonSyntaxError:        events.ErrSyntax,
	events.ReasonNotObject:          events.ErrNotObject,
	events.ReasonUnknownField:       events.ErrUnknownField,
	events.ReasonDuplicateKey:       events.ErrDuplicateKey,
	events.ReasonCaseVariantKey:     events.ErrCaseVariantKey,
	events.ReasonInvalidUtf8:        events.ErrInvalidUTF8,
	events.ReasonControlChar:        events.ErrControlChar,
	events.ReasonTrailingData:       events.ErrTrailingData,
	events.ReasonMissingField:       events.ErrMissingField,
	events.ReasonWrongType:          events.ErrWrongType,
	events.ReasonNullValue:          events.ErrNullValue,
	events.ReasonBadNumber:          events.ErrBadNumber,
	events.ReasonBadDuration:        events.ErrBadDuration,
	events.ReasonBadSequence:        events.ErrBadSequence,
	events.ReasonBadValue:           events.ErrBadValue,
	events.ReasonBadToken:           events.ErrBadToken,
	events.ReasonBadEnum:            events.ErrBadEnum,
	events.ReasonBadTime:            events.ErrBadTime,
	events.ReasonTooLarge:           events.ErrTooLarge,
	events.ReasonTooDeep:            events.ErrTooDeep,
	events.ReasonUnsupportedVersion: events.ErrUnsupportedVersion,
	events.ReasonIdentityMismatch:   events.ErrIdentityMismatch,
	events.ReasonBadPolicy:          events.ErrBadPolicy,
}

// sameInput compares two Inputs, a nil and an empty Leases alike.
func sameInput(a, b *events.Input) bool {
	x, y := *a, *b
	if len(x.Leases) == 0 && len(y.Leases) == 0 {
		x.Leases, y.Leases = nil, nil
	}
	if len(x.Batch) == 0 && len(y.Batch) == 0 {
		x.Batch, y.Batch = nil, nil
	}
	return reflect.DeepEqual(x, y)
}

func TestDecodeInputValid(t *testing.T) {
	for _, c := range validCases {
		t.Run(c.name, func(t *testing.T) {
			var in events.Input
			if err := events.DecodeInput(c.subject, []byte(c.body), &in); err != nil {
				t.Fatalf("DecodeInput: %v", err)
			}
			if !sameInput(&in, c.want) {
				t.Fatalf("decoded\n%+v\nwant\n%+v", in, *c.want)
			}
		})
	}
}

func TestDecodeInputErrors(t *testing.T) {
	for _, c := range errorCases {
		t.Run(c.name, func(t *testing.T) {
			in := events.Input{Holder: "stale", Text: "stale", Leases: make([]events.LeaseRef, 2, 4)}
			err := events.DecodeInput(c.subject, []byte(c.body), &in)
			if err == nil {
				t.Fatalf("no error; decoded %+v", in)
			}
			sentinel, ok := sentinels[c.code]
			if !ok {
				t.Fatalf("no sentinel for %q", c.code)
			}
			if !errors.Is(err, sentinel) {
				t.Fatalf("error %v, want %s", err, c.code)
			}
			var de *events.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %T is not a *DecodeError", err)
			}
			if de.Field != c.field {
				t.Errorf("Field %q, want %q (%v)", de.Field, c.field, err)
			}
			if de.Detail == "" {
				t.Errorf("no Detail: %v", err)
			}
			// The identity is filled as far as the subject parse got; the rest is zero.
			s, _ := events.ParseInputSubject(c.subject)
			want := events.Input{Role: s.Role, Actor: s.Actor, Job: s.Job, Verb: s.Verb}
			if !sameInput(&in, &want) || cap(in.Leases) < 4 {
				t.Errorf("after the error in is %+v (cap(Leases) %d), want %+v", in, cap(in.Leases), want)
			}
		})
	}
}

// Every decode reason has at least one case, and every case name is unique.
func TestDecodeCasesCoverEveryReason(t *testing.T) {
	seen := map[string]bool{}
	covered := map[events.Reason]bool{}
	for _, c := range append(append([]decodeCase{}, validCases...), errorCases...) {
		if seen[c.name] {
			t.Errorf("duplicate case name %q", c.name)
		}
		seen[c.name] = true
		covered[c.code] = true
		if c.code != "" && !c.code.Known() {
			t.Errorf("%s: unknown reason %q", c.name, c.code)
		}
	}
	for r := range sentinels {
		if !covered[r] {
			t.Errorf("no case for %s", r)
		}
	}
}

func TestDecodeInputDeterministic(t *testing.T) {
	for _, c := range errorCases {
		var a, b events.Input
		e1 := events.DecodeInput(c.subject, []byte(c.body), &a)
		e2 := events.DecodeInput(c.subject, []byte(c.body), &b)
		if e1.Error() != e2.Error() {
			t.Errorf("%s: %v then %v", c.name, e1, e2)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, c := range validCases {
		t.Run(c.name, func(t *testing.T) {
			body := events.AppendInputBody(nil, c.want)
			var in events.Input
			if err := events.DecodeInput(c.subject, body, &in); err != nil {
				t.Fatalf("DecodeInput(%s): %v", body, err)
			}
			if !sameInput(&in, c.want) {
				t.Fatalf("round trip of %s\n%+v\nwant\n%+v", body, in, *c.want)
			}
			if again := events.AppendInputBody(nil, &in); !bytes.Equal(again, body) {
				t.Fatalf("not canonical:\n%s\n%s", body, again)
			}
			if !json.Valid(body) {
				t.Fatalf("AppendInputBody wrote invalid JSON: %s", body)
			}
		})
	}
}

func TestAppendInputBodyCanonical(t *testing.T) {
	byName := map[string]*events.Input{}
	for _, c := range validCases {
		byName[c.name] = c.want
	}
	for name, want := range map[string]string{
		"offer_full":                    `{"v":1,"sent_at":"2025-03-01T11:00:00.5Z","holder":"w-7","lease_ms":30000,"ack_timeout_ms":5000}`,
		"acquire_minimal":               `{"v":1}`,
		"renew_single":                  `{"v":1,"sent_at":"2025-03-01T11:00:00Z","lease_id":"L-1","generation":2,"renew_seq":5,"lease_ms":60000}`,
		"renew_batch":                   `{"v":1,"leases":[{"job":"a","lease_id":"L-1","generation":1,"renew_seq":1},{"job":"b","lease_id":"L-2","generation":9007199254740991,"renew_seq":3,"lease_ms":1500}]}`,
		"progress_zero_with_note":       `{"v":1,"lease_id":"L-1","generation":1,"progress_seq":4,"value":0,"note":"50% \"done\" é😀 café/x 日本 \\"}`,
		"cancel_bare":                   `{"v":1}`,
		"cancel_lease_reason":           `{"v":1,"lease_id":"L-1","generation":2,"reason":"operator asked"}`,
		"result_cancelled":              `{"v":1,"lease_id":"L-1","generation":2,"outcome":"CANCELLED"}`,
		"resolve_affirm":                `{"v":1,"action":"affirm","holder":"w-7","lease_id":"L-1","generation":3,"reason":"w-7 is right"}`,
		"resolve_settle_cancelled":      `{"v":1,"action":"settle","outcome":"CANCELLED"}`,
		"resolve_revoke":                `{"v":1,"action":"revoke","reason":"stuck"}`,
		"policy_default":                `{"v":1,` + policyOK + `}`,
		"tick_sent_at_before_1970":      `{"v":1,"sent_at":"1970-01-01T00:29:59Z"}`,
		"submit_minimal":                `{"v":1,"queue":"q-1"}`,
		"submit_full":                   `{"v":1,"sent_at":"2025-03-01T11:00:00Z","queue":"emails","priority":9,"max_attempts":1000,"backoff_ms":500,"backoff_max_ms":500,"lease_ms":60000,"ack_timeout_ms":5000,"payload":"{\"to\":\"a@b.example\"}"}`,
		"submit_any_order":              `{"v":1,"queue":"q","max_attempts":1,"payload":"p"}`,
		"submit_payload_empty":          `{"v":1,"queue":"q","payload":""}`,
		"submit_payload_control_chars":  `{"v":1,"queue":"q","payload":"a\u000a\u0009\u000d\u0008\u000c\u0000\u001f\u007f\"\\/"}`,
		"submit_payload_non_ascii":      `{"v":1,"queue":"q","payload":"é😀😀 日本é "}`,
		"pull":                          `{"v":1,"queue":"emails","slots":4,"ttl_ms":600000}`,
		"pull_withdraw":                 `{"v":1,"queue":"emails","slots":0}`,
		"result_failed_permanent":       `{"v":1,"lease_id":"L-1","generation":2,"outcome":"FAILED","detail":"bad input","permanent":true}`,
		"result_failed_permanent_false": `{"v":1,"lease_id":"L-1","generation":2,"outcome":"FAILED"}`,
		"resolve_retry":                 `{"v":1,"action":"retry","reason":"fixed the template"}`,
		"resolve_discard":               `{"v":1,"action":"discard","reason":"obsolete"}`,
		"submit_run_at":                 `{"v":1,"queue":"q","run_at":"2026-05-01T01:00:00Z"}`,
		"submit_delay_max":              `{"v":1,"queue":"q","delay_ms":31622400000}`,
		"submit_unique_key":             `{"v":1,"queue":"q","unique_key":"user-42"}`,
		"submit_unique_for_max":         `{"v":1,"queue":"q","unique_key":"k","unique_for_ms":2592000000}`,
	} {
		in, ok := byName[name]
		if !ok {
			t.Fatalf("no case %s", name)
		}
		if got := string(events.AppendInputBody(nil, in)); got != want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
	// Appends; escapes control characters (which DecodeInput then rejects).
	in := events.Input{Verb: events.VerbCancel, Text: "a\"\\\n\x7f"}
	if got, want := string(events.AppendInputBody([]byte("x"), &in)), `x{"v":1,"reason":"a\"\\\u000a\u007f"}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestDecodeInputReusesLeases(t *testing.T) {
	in := events.Input{Leases: make([]events.LeaseRef, 0, 300)}
	p := &in.Leases[:1][0]
	if err := events.DecodeInput(sBatch, []byte(batchBody(events.MaxBatch)), &in); err != nil {
		t.Fatal(err)
	}
	if len(in.Leases) != events.MaxBatch || &in.Leases[0] != p {
		t.Fatalf("leases not decoded into the given array: len %d", len(in.Leases))
	}
	if err := events.DecodeInput(sRenew, []byte(`{"v":1,`+renewOK+`}`), &in); err != nil {
		t.Fatal(err)
	}
	if len(in.Leases) != 1 || &in.Leases[0] != p || in.Leases[0] != (events.LeaseRef{Job: "job-1", LeaseID: "L-1", Generation: 2, RenewSeq: 5}) {
		t.Fatalf("single renew leases %+v", in.Leases)
	}
	if err := events.DecodeInput(sTick, []byte(`{"v":1}`), &in); err != nil {
		t.Fatal(err)
	}
	if want := *with(idTick, events.VerbNone, nil); !sameInput(&in, &want) || cap(in.Leases) != 300 {
		t.Fatalf("tick after renew: %+v", in)
	}
	// A batch element starts from zero even where the array held a lease.
	in.Leases = append(in.Leases[:0], events.LeaseRef{Job: "old", LeaseID: "old", Generation: 9, RenewSeq: 9, LeaseMS: 9})
	err := events.DecodeInput(sBatch, []byte(`{"v":1,"leases":[{"job":"a","lease_id":"L-1","generation":1}]}`), &in)
	if !errors.Is(err, events.ErrMissingField) {
		t.Fatalf("err %v, want missing renew_seq", err)
	}
}

func TestDecodeInputSubjectErrorKeepsPartialIdentity(t *testing.T) {
	var in events.Input
	err := events.DecodeInput("tenure.in.ops.disp-1.job-1.renew", []byte(`{"v":1}`), &in)
	if !errors.Is(err, events.ErrWrongRole) {
		t.Fatalf("err %v", err)
	}
	if in.Role != events.RoleOps || in.Actor != "disp-1" || in.Job != "job-1" || in.Verb != events.VerbRenew {
		t.Fatalf("identity not kept: %+v", in)
	}
	err = events.DecodeInput("garbage", []byte(`{"v":1}`), &in)
	if !errors.Is(err, events.ErrBadSubject) || !sameInput(&in, &events.Input{}) {
		t.Fatalf("err %v, in %+v", err, in)
	}
}

func TestDecodeInputDoesNotAliasBody(t *testing.T) {
	body := []byte(`{"v":1,"lease_id":"L-1","generation":2,"outcome":"FAILED","detail":"d\u00e9tail"}`)
	var in events.Input
	if err := events.DecodeInput(sResult, body, &in); err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'x'
	}
	if in.LeaseID != "L-1" || in.Text != "détail" {
		t.Fatalf("decoded strings alias the body: %+v", in)
	}
}

const renewBody = `{"v":1,"sent_at":"2025-03-01T11:00:00.123456789Z","lease_id":"lease-0001","generation":3,"renew_seq":17,"lease_ms":30000}`

func TestDecodeRenewAllocs(t *testing.T) {
	var in events.Input
	body := []byte(renewBody)
	allocs := testing.AllocsPerRun(1000, func() {
		if err := events.DecodeInput(sRenew, body, &in); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 3 {
		t.Fatalf("%.1f allocations per renew, want at most 3", allocs)
	}
}

// encoding/json accepts every one of these bodies (into a struct with the
// renew fields); DecodeInput rejects each with its own reason.
func TestEncodingJSONWouldAccept(t *testing.T) {
	type renew struct {
		V          int    `json:"v"`
		LeaseID    string `json:"lease_id"`
		Generation uint64 `json:"generation"`
		RenewSeq   uint64 `json:"renew_seq"`
	}
	for _, c := range []struct {
		body string
		err  error
	}{
		{`{"v":1,"lease_id":"L-1","generation":1,"renew_seq":1,"generation":2}`, events.ErrDuplicateKey},
		{`{"v":1,"LEASE_ID":"L-1","generation":1,"renew_seq":1}`, events.ErrCaseVariantKey},
		{`{"v":1,"lease_id":"L-1","generation":1,"renew_seq":1,"extra":true}`, events.ErrUnknownField},
		{"{\"v\":1,\"lease_id\":\"L\xff1\",\"generation\":1,\"renew_seq\":1}", events.ErrInvalidUTF8},
		{`{"v":1,"lease_id":"L\ud8001","generation":1,"renew_seq":1}`, events.ErrInvalidUTF8},
		{`{"v":1,"lease_id":"L\u00001","generation":1,"renew_seq":1}`, events.ErrControlChar},
		{`{"v":1,"lease_id":"L-1","generation":1,"renew_seq":null}`, events.ErrNullValue},
		{`{"v":1,"lease_id":"L-1","generation":1}`, events.ErrMissingField},
		{`{"v":1,"lease_id":"L-1","generation":0,"renew_seq":1}`, events.ErrBadSequence},
		{`{"v":1,"lease_id":"L-1","generation":9007199254740993,"renew_seq":1}`, events.ErrBadSequence},
	} {
		var r renew
		if err := json.Unmarshal([]byte(c.body), &r); err != nil {
			t.Errorf("encoding/json rejected %s: %v", c.body, err)
		}
		var in events.Input
		if err := events.DecodeInput(sRenew, []byte(c.body), &in); !errors.Is(err, c.err) {
			t.Errorf("DecodeInput(%s) = %v, want %v", c.body, err, c.err)
		}
	}
}

func BenchmarkDecodeRenew(b *testing.B) {
	var in events.Input
	body := []byte(renewBody)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := events.DecodeInput(sRenew, body, &in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRenewNoSentAt(b *testing.B) {
	var in events.Input
	body := []byte(`{"v":1,"lease_id":"lease-0001","generation":3,"renew_seq":17,"lease_ms":30000}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := events.DecodeInput(sRenew, body, &in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeBatch64(b *testing.B) {
	var in events.Input
	body := []byte(batchBody(64))
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := events.DecodeInput(sBatch, body, &in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRejectUnknownField(b *testing.B) {
	var in events.Input
	body := []byte(`{"v":1,"lease_id":"lease-0001","generation":3,"renew_seq":17,"bogus":1}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := events.DecodeInput(sRenew, body, &in); err == nil {
			b.Fatal("accepted")
		}
	}
}

func BenchmarkAppendInputBodyRenew(b *testing.B) {
	var in events.Input
	if err := events.DecodeInput(sRenew, []byte(renewBody), &in); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = events.AppendInputBody(buf[:0], &in)
	}
}

// BenchmarkParseInputSubject is the part of BenchmarkDecodeRenew spent on the subject.
func BenchmarkParseInputSubject(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := events.ParseInputSubject(sRenew); err != nil {
			b.Fatal(err)
		}
	}
}

// retain_ms (revision 3): 0 and events.MaxRetainMS are accepted, past it is
// bad_value, and under revisions 1 and 2 it is not a field at all.
func TestRetainLimits(t *testing.T) {
	body := func(v string) []byte {
		return []byte(`{"v":1,"min_lease_ms":100,"max_lease_ms":3600000,"default_lease_ms":30000,"ack_timeout_ms":30000,"cancel_timeout_ms":60000,"max_lifetime_ms":86400000,"max_generations":1000,"retain_ms":` + v + `}`)
	}
	const subj = "tenure.in.ops.admin._.policy"
	for _, c := range []struct {
		rev    uint32
		v      string
		want   int64
		reason events.Reason
	}{
		{events.Revision3, "0", 0, ""},
		{events.Revision3, strconv.FormatInt(events.MaxRetainMS, 10), events.MaxRetainMS * 1e6, ""},
		{events.Revision3, strconv.FormatInt(events.MaxRetainMS+1, 10), 0, events.ReasonBadValue},
		{events.Revision3, "-1", 0, events.ReasonBadValue},
		{events.Revision3, "18446744073709551616", 0, events.ReasonBadValue},
		{events.Revision2, "1000", 0, events.ReasonUnknownField},
		{events.Revision1, "1000", 0, events.ReasonUnknownField},
	} {
		var in events.Input
		err := events.DecodeInputAt(subj, body(c.v), c.rev, &in)
		var de *events.DecodeError
		switch {
		case c.reason == "" && (err != nil || in.Policy.Retain != c.want):
			t.Errorf("revision %d, retain_ms %s: %v, retain %d, want %d", c.rev, c.v, err, in.Policy.Retain, c.want)
		case c.reason != "" && (!errors.As(err, &de) || de.Code != c.reason):
			t.Errorf("revision %d, retain_ms %s: %v, want %s", c.rev, c.v, err, c.reason)
		}
	}
}

// Revision 4's verbs, fields and resolve actions are gated by the revision
// DecodeInputAt is given, as those of revisions 2 and 3 are: under an
// earlier revision a new verb is an unknown verb (bad_subject), a new field
// an unknown field (never a case variant), a new action an unknown name
// (bad_enum).
func TestRevision4Gating(t *testing.T) {
	const resultOK = `"lease_id":"L-1","generation":2,"outcome":"FAILED"`
	for _, c := range []struct {
		name    string
		subject string
		body    string
		rev     uint32 // the first revision the input is valid in, or 0 for none
		before  events.Reason
		field   string // Field of the error before rev
		after   events.Reason
	}{
		{"submit", sSubmit, `{"v":1,"queue":"q"}`, events.Revision4, events.ReasonBadSubject, "verb", ""},
		{"pull", sPull, `{"v":1,"queue":"q","slots":1}`, events.Revision4, events.ReasonBadSubject, "verb", ""},
		{"pull_with_job", "tenure.in.worker.w-7.job-1.pull", `{"v":1}`, 0, events.ReasonBadSubject, "verb", events.ReasonBadSubject},
		{"permanent", sResult, `{"v":1,` + resultOK + `,"permanent":true}`, events.Revision4, events.ReasonUnknownField, "permanent", ""},
		{"permanent_case_variant", sResult, `{"v":1,` + resultOK + `,"Permanent":true}`, 0, events.ReasonUnknownField, "Permanent", events.ReasonCaseVariantKey},
		{"queue_case_variant_in_offer", sOffer, `{"v":1,"holder":"w-7","QUEUE":"q"}`, 0, events.ReasonUnknownField, "QUEUE", events.ReasonCaseVariantKey},
		{"ttl_ms_in_renew", sRenew, `{"v":1,` + renewOK + `,"ttl_ms":5000}`, 0, events.ReasonUnknownField, "ttl_ms", events.ReasonUnknownField},
		{"ttl_ms_case_variant_in_renew", sRenew, `{"v":1,` + renewOK + `,"TTL_ms":5000}`, 0, events.ReasonUnknownField, "TTL_ms", events.ReasonCaseVariantKey},
		{"resolve_retry", sResolve, `{"v":1,"action":"retry"}`, events.Revision4, events.ReasonBadEnum, "action", ""},
		{"resolve_discard", sResolve, `{"v":1,"action":"discard","reason":"x"}`, events.Revision4, events.ReasonBadEnum, "action", ""},
		{"resolve_retry_holder", sResolve, `{"v":1,"holder":"w-7","action":"retry"}`, 0, events.ReasonBadEnum, "action", events.ReasonUnknownField},
	} {
		for rev := uint32(events.Revision1); rev <= events.CurrentRevision; rev++ {
			var in events.Input
			err := events.DecodeInputAt(c.subject, []byte(c.body), rev, &in)
			want, field := c.before, c.field
			if c.rev != 0 && rev >= c.rev {
				want = ""
			} else if rev >= events.Revision4 {
				want = c.after
				if want == events.ReasonBadSubject {
					field = "job"
				}
				if c.name == "resolve_retry_holder" {
					field = "holder"
				}
			}
			var de *events.DecodeError
			switch {
			case want == "" && err != nil:
				t.Errorf("%s under revision %d: %v", c.name, rev, err)
			case want != "" && (!errors.As(err, &de) || de.Code != want || de.Field != field):
				t.Errorf("%s under revision %d: %v, want %s on %q", c.name, rev, err, want, field)
			}
		}
	}
}

// The payload is opaque: any valid UTF-8 string of at most MaxPayloadBytes
// round-trips through AppendInputBody and DecodeInput, control characters
// included, and an empty one is still a payload.
func FuzzSubmitPayload(f *testing.F) {
	for _, s := range []string{"", "x", "a\nb\tc\x00\x1f\x7f", `{"to":"a@b","n":[1,2]}`, "é😀 日本", "\u2028\u2029", "\\\"/",
		strings.Repeat("é", events.MaxPayloadBytes/2), strings.Repeat("a", events.MaxPayloadBytes+1), "\xff", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in := events.Input{Role: events.RoleOps, Actor: "disp-1", Job: "job-1", Verb: events.VerbSubmit, Queue: "q", Payload: s, HasPayload: true}
		body := events.AppendInputBody(nil, &in)
		var got events.Input
		err := events.DecodeInput(sSubmit, body, &got)
		switch {
		case !utf8.ValidString(s):
			if !errors.Is(err, events.ErrInvalidUTF8) {
				t.Fatalf("payload %q: %v, want invalid_utf8", s, err)
			}
		case len(s) > events.MaxPayloadBytes:
			if !errors.Is(err, events.ErrTooLarge) {
				t.Fatalf("payload of %d bytes: %v, want too_large", len(s), err)
			}
		case err != nil:
			t.Fatalf("payload %q in %s: %v", s, body, err)
		case !sameInput(&got, &in):
			t.Fatalf("payload %q in %s: decoded %q", s, body, got.Payload)
		}
		if !json.Valid(body) && utf8.ValidString(s) {
			t.Fatalf("AppendInputBody wrote invalid JSON: %s", body)
		}
	})
}

// TestRevision8Gating: the fields of rules revision 8 are unknown fields
// under an earlier revision (never case variants), known from revision 8
// on.
func TestRevision8Gating(t *testing.T) {
	for _, c := range []struct {
		name, subject, body, field string
	}{
		{"run_at", sSubmit, `{"v":1,"queue":"q","run_at":"2026-05-01T03:00:00Z"}`, "run_at"},
		{"delay_ms", sSubmit, `{"v":1,"queue":"q","delay_ms":1000}`, "delay_ms"},
		{"run_at_case_variant", sSubmit, `{"v":1,"queue":"q","Run_At":"2026-05-01T03:00:00Z"}`, "Run_At"},
		{"unique_key", sSubmit, `{"v":1,"queue":"q","unique_key":"k"}`, "unique_key"},
		{"unique_for_ms", sSubmit, `{"v":1,"queue":"q","unique_for_ms":1000,"unique_key":"k"}`, "unique_for_ms"},
	} {
		for rev := uint32(events.Revision1); rev <= events.CurrentRevision; rev++ {
			var in events.Input
			err := events.DecodeInputAt(c.subject, []byte(c.body), rev, &in)
			var de *events.DecodeError
			switch {
			case rev < events.Revision4:
				if !errors.As(err, &de) || de.Code != events.ReasonBadSubject {
					t.Errorf("%s under revision %d: %v, want bad_subject (no submit yet)", c.name, rev, err)
				}
			case rev < events.Revision8:
				if !errors.As(err, &de) || de.Code != events.ReasonUnknownField || de.Field != c.field {
					t.Errorf("%s under revision %d: %v, want unknown_field on %q", c.name, rev, err, c.field)
				}
			case c.name == "run_at_case_variant":
				if !errors.As(err, &de) || de.Code != events.ReasonCaseVariantKey {
					t.Errorf("%s under revision %d: %v, want case_variant_key", c.name, rev, err)
				}
			case err != nil:
				t.Errorf("%s under revision %d: %v", c.name, rev, err)
			}
		}
	}
}

// TestRevision9Gating: the fields of rules revision 9 are unknown fields
// under an earlier revision, and the limit verb an unknown verb
// (bad_subject); from revision 9 on they decode, max_active from 0 to
// events.MaxActive, a rate from 1 to events.MaxRate per a duration, and
// are unknown on another verb or on a batch submit's element.
func TestRevision9Gating(t *testing.T) {
	const sLimit = "tenure.in.ops.admin._.limit"
	for rev := uint32(events.Revision4); rev <= events.CurrentRevision; rev++ {
		var in events.Input
		err := events.DecodeInputAt(sSubmit, []byte(`{"v":1,"queue":"q","concurrency_key":"acct-1"}`), rev, &in)
		var de *events.DecodeError
		switch {
		case rev < events.Revision9:
			if !errors.As(err, &de) || de.Code != events.ReasonUnknownField || de.Field != "concurrency_key" {
				t.Errorf("submit under revision %d: %v, want unknown_field on concurrency_key", rev, err)
			}
		case err != nil || in.ConcurrencyKey != "acct-1":
			t.Errorf("submit under revision %d: %v %+v", rev, err, in)
		}
		err = events.DecodeInputAt(sLimit, []byte(`{"v":1,"queue":"q","concurrency_key":"acct-1","max_active":0}`), rev, &in)
		switch {
		case rev < events.Revision9:
			if !errors.As(err, &de) || de.Code != events.ReasonBadSubject {
				t.Errorf("limit under revision %d: %v, want bad_subject", rev, err)
			}
		case err != nil || !in.HasMaxActive || in.MaxActive != 0 || in.Queue != "q" || in.ConcurrencyKey != "acct-1":
			t.Errorf("limit under revision %d: %v %+v", rev, err, in)
		}
	}
	for _, c := range []struct {
		name, subject, body string
		code                events.Reason
		field               string
	}{
		{"max", sLimit, `{"v":1,"queue":"q","concurrency_key":"k","max_active":1000000}`, "", ""},
		{"lift", sLimit, `{"v":1,"queue":"q","concurrency_key":"k"}`, "", ""},
		{"over", sLimit, `{"v":1,"queue":"q","concurrency_key":"k","max_active":1000001}`, events.ReasonBadValue, "max_active"},
		{"negative", sLimit, `{"v":1,"queue":"q","concurrency_key":"k","max_active":-1}`, events.ReasonBadValue, "max_active"},
		{"overflow", sLimit, `{"v":1,"queue":"q","concurrency_key":"k","max_active":99999999999999999999999}`, events.ReasonBadValue, "max_active"},
		{"fraction", sLimit, `{"v":1,"queue":"q","concurrency_key":"k","max_active":1.5}`, events.ReasonBadNumber, "max_active"},
		{"string", sLimit, `{"v":1,"queue":"q","concurrency_key":"k","max_active":"1"}`, events.ReasonWrongType, "max_active"},
		{"max_active_without_key", sLimit, `{"v":1,"queue":"q","max_active":1}`, events.ReasonMissingField, "concurrency_key"},
		{"no_queue", sLimit, `{"v":1,"concurrency_key":"k","max_active":1}`, events.ReasonMissingField, "queue"},
		{"key_too_long", sLimit, `{"v":1,"queue":"q","concurrency_key":"` + strings.Repeat("k", 65) + `"}`, events.ReasonBadToken, "concurrency_key"},
		{"key_64", sSubmit, `{"v":1,"queue":"q","concurrency_key":"` + strings.Repeat("k", 64) + `"}`, "", ""},
		{"key_dot", sSubmit, `{"v":1,"queue":"q","concurrency_key":"a.b"}`, events.ReasonBadToken, "concurrency_key"},
		{"key_underscore_alone", sSubmit, `{"v":1,"queue":"q","concurrency_key":"_"}`, events.ReasonBadToken, "concurrency_key"},
		{"key_empty", sSubmit, `{"v":1,"queue":"q","concurrency_key":""}`, events.ReasonBadToken, "concurrency_key"},
		{"max_active_on_submit", sSubmit, `{"v":1,"queue":"q","max_active":1}`, events.ReasonUnknownField, "max_active"},
		{"key_on_pull", sPull, `{"v":1,"queue":"q","slots":1,"concurrency_key":"k"}`, events.ReasonUnknownField, "concurrency_key"},
		{"key_in_batch", "tenure.in.ops.disp-1._.submit", `{"v":1,"jobs":[{"job":"a","queue":"q","concurrency_key":"k"}]}`, events.ReasonUnknownField, "jobs[0].concurrency_key"},
		{"queue_rate", sLimit, `{"v":1,"queue":"q","rate":1000000,"period_ms":1}`, "", ""},
		{"key_rate_and_max", sLimit, `{"v":1,"queue":"q","concurrency_key":"k","max_active":0,"rate":1,"period_ms":2592000000}`, "", ""},
		{"lift_queue", sLimit, `{"v":1,"queue":"q"}`, "", ""},
		{"rate_zero", sLimit, `{"v":1,"queue":"q","rate":0,"period_ms":1000}`, events.ReasonBadValue, "rate"},
		{"rate_over", sLimit, `{"v":1,"queue":"q","rate":1000001,"period_ms":1000}`, events.ReasonBadValue, "rate"},
		{"rate_negative", sLimit, `{"v":1,"queue":"q","rate":-1,"period_ms":1000}`, events.ReasonBadValue, "rate"},
		{"period_zero", sLimit, `{"v":1,"queue":"q","rate":1,"period_ms":0}`, events.ReasonBadDuration, "period_ms"},
		{"period_over", sLimit, `{"v":1,"queue":"q","rate":1,"period_ms":2592000001}`, events.ReasonBadDuration, "period_ms"},
		{"period_overflow", sLimit, `{"v":1,"queue":"q","rate":1,"period_ms":9223372036854775808}`, events.ReasonBadDuration, "period_ms"},
		{"rate_alone", sLimit, `{"v":1,"queue":"q","rate":1}`, events.ReasonMissingField, "period_ms"},
		{"period_alone", sLimit, `{"v":1,"queue":"q","period_ms":1}`, events.ReasonMissingField, "rate"},
		{"rate_on_submit", sSubmit, `{"v":1,"queue":"q","rate":1,"period_ms":1}`, events.ReasonUnknownField, "rate"},
		{"limit_with_job", "tenure.in.ops.admin.j1.limit", `{"v":1,"queue":"q","concurrency_key":"k"}`, events.ReasonBadSubject, "job"},
		{"limit_by_worker", "tenure.in.worker.w1._.limit", `{"v":1,"queue":"q","concurrency_key":"k"}`, events.ReasonWrongRole, ""},
	} {
		var in events.Input
		err := events.DecodeInput(c.subject, []byte(c.body), &in)
		var de *events.DecodeError
		switch {
		case c.code == "":
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
		case !errors.As(err, &de) || de.Code != c.code || de.Field != c.field:
			t.Errorf("%s: %v, want %s on %q", c.name, err, c.code, c.field)
		}
	}
}
