package events_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/maknow/tenure/events"
)

// Rules revision 7: a submit, an ack and a result may carry many jobs
// under the job token "_" (PROTOCOL.md §6.3, §6.10, §22.1).

var (
	sSubmitBatch = events.InputSubject(events.RoleOps, "disp-1", events.NoJob, events.VerbSubmit)
	sAckBatch    = events.InputSubject(events.RoleWorker, "w-7", events.NoJob, events.VerbAck)
	sResultBatch = events.InputSubject(events.RoleWorker, "w-7", events.NoJob, events.VerbResult)
)

// item is one element of a batch with the batch's identity.
func item(role events.Role, actor string, verb events.Verb, f func(*events.Input)) events.Input {
	in := events.Input{Role: role, Actor: actor, Verb: verb}
	f(&in)
	return in
}

func batchOf(role events.Role, actor string, verb events.Verb, items ...events.Input) *events.Input {
	return &events.Input{Role: role, Actor: actor, Job: events.NoJob, Verb: verb, Batch: items}
}

var batchValidCases = []struct {
	name, subject, body string
	want                *events.Input
}{
	{"submit_batch", sSubmitBatch,
		`{"v":1,"jobs":[{"job":"a","queue":"q"},{"job":"b","queue":"r","priority":9,"max_attempts":5,"backoff_ms":10,"backoff_max_ms":20,"lease_ms":3000,"ack_timeout_ms":400,"payload":"x\u000ay"},{"job":"c","queue":"q","payload":""}]}`,
		batchOf(events.RoleOps, "disp-1", events.VerbSubmit,
			item(events.RoleOps, "disp-1", events.VerbSubmit, func(in *events.Input) { in.Job, in.Queue = "a", "q" }),
			item(events.RoleOps, "disp-1", events.VerbSubmit, func(in *events.Input) {
				in.Job, in.Queue, in.Priority, in.MaxAttempts, in.BackoffMS, in.BackoffMax = "b", "r", 9, 5, 10, 20
				in.LeaseMS, in.AckTimeoutMS, in.Payload, in.HasPayload = 3000, 400, "x\ny", true
			}),
			item(events.RoleOps, "disp-1", events.VerbSubmit, func(in *events.Input) { in.Job, in.Queue, in.HasPayload = "c", "q", true }))},
	{"ack_batch", sAckBatch,
		`{"v":1,"sent_at":"2025-03-01T11:00:00Z","leases":[{"job":"a","lease_id":"L-1","generation":1},{"job":"b","lease_id":"L-2","generation":9007199254740991}]}`,
		func() *events.Input {
			in := batchOf(events.RoleWorker, "w-7", events.VerbAck,
				item(events.RoleWorker, "w-7", events.VerbAck, func(in *events.Input) { in.Job, in.LeaseID, in.Generation = "a", "L-1", 1 }),
				item(events.RoleWorker, "w-7", events.VerbAck, func(in *events.Input) { in.Job, in.LeaseID, in.Generation = "b", "L-2", events.MaxSeq }))
			in.SentAt = unixNano("2025-03-01T11:00:00Z")
			for i := range in.Batch {
				in.Batch[i].SentAt = in.SentAt
			}
			return in
		}()},
	{"result_batch", sResultBatch,
		`{"v":1,"leases":[{"job":"a","lease_id":"L-1","generation":1,"outcome":"SUCCESS"},{"job":"b","lease_id":"L-2","generation":2,"outcome":"FAILED","detail":"boom","permanent":true},{"job":"c","lease_id":"L-3","generation":3,"outcome":"CANCELLED"}]}`,
		batchOf(events.RoleWorker, "w-7", events.VerbResult,
			item(events.RoleWorker, "w-7", events.VerbResult, func(in *events.Input) {
				in.Job, in.LeaseID, in.Generation, in.Outcome = "a", "L-1", 1, events.OutcomeSuccess
			}),
			item(events.RoleWorker, "w-7", events.VerbResult, func(in *events.Input) {
				in.Job, in.LeaseID, in.Generation, in.Outcome, in.Text, in.Permanent = "b", "L-2", 2, events.OutcomeFailed, "boom", true
			}),
			item(events.RoleWorker, "w-7", events.VerbResult, func(in *events.Input) {
				in.Job, in.LeaseID, in.Generation, in.Outcome = "c", "L-3", 3, events.OutcomeCancelled
			}))},
	{"submit_batch_max", sSubmitBatch, submitBatchBody(events.MaxBatch), submitBatchWant(events.MaxBatch)},
}

// submitBatchBody is a batch submit of n jobs j0..j(n-1) to queue q.
func submitBatchBody(n int) string {
	var b strings.Builder
	b.WriteString(`{"v":1,"jobs":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"job":"j%d","queue":"q"}`, i)
	}
	b.WriteString("]}")
	return b.String()
}

func submitBatchWant(n int) *events.Input {
	in := batchOf(events.RoleOps, "disp-1", events.VerbSubmit)
	for i := range n {
		in.Batch = append(in.Batch, item(events.RoleOps, "disp-1", events.VerbSubmit, func(e *events.Input) { e.Job, e.Queue = fmt.Sprintf("j%d", i), "q" }))
	}
	return in
}

func TestDecodeBatchValid(t *testing.T) {
	for _, c := range batchValidCases {
		t.Run(c.name, func(t *testing.T) {
			var in events.Input
			if err := events.DecodeInput(c.subject, []byte(c.body), &in); err != nil {
				t.Fatalf("DecodeInput: %v", err)
			}
			if !sameInput(&in, c.want) {
				t.Fatalf("decoded\n%+v\nwant\n%+v", in, *c.want)
			}
			// Canonical: the encoder writes the same input back, and it
			// decodes to the same.
			body := events.AppendInputBody(nil, c.want)
			var again events.Input
			if err := events.DecodeInput(c.subject, body, &again); err != nil {
				t.Fatalf("DecodeInput(%s): %v", body, err)
			}
			if !sameInput(&again, c.want) {
				t.Fatalf("round trip of %s\n%+v", body, again)
			}
			if c.name != "ack_batch" && !bytes.Equal(body, []byte(c.body)) {
				t.Errorf("AppendInputBody\n%s\nwant\n%s", body, c.body)
			}
		})
	}
}

const (
	subOK    = `{"job":"a","queue":"q"}`
	ackOK    = `{"job":"a","lease_id":"L-1","generation":1}`
	resultOK = `{"job":"a","lease_id":"L-1","generation":1,"outcome":"SUCCESS"}`
)

var batchErrorCases = []struct {
	name, subject, body string
	code                events.Reason
	field               string
}{
	{"missing_jobs", sSubmitBatch, `{"v":1}`, events.ReasonMissingField, "jobs"},
	{"empty_jobs", sSubmitBatch, `{"v":1,"jobs":[]}`, events.ReasonMissingField, "jobs"},
	{"missing_leases_ack", sAckBatch, `{"v":1}`, events.ReasonMissingField, "leases"},
	{"empty_leases_result", sResultBatch, `{"v":1,"leases":[ ]}`, events.ReasonMissingField, "leases"},
	{"submit_element_queue_missing", sSubmitBatch, `{"v":1,"jobs":[` + subOK + `,{"job":"b"}]}`, events.ReasonMissingField, "jobs[1].queue"},
	{"submit_element_job_missing", sSubmitBatch, `{"v":1,"jobs":[{"queue":"q"}]}`, events.ReasonMissingField, "jobs[0].job"},
	{"submit_empty_element", sSubmitBatch, `{"v":1,"jobs":[{}]}`, events.ReasonMissingField, "jobs[0].job"},
	{"ack_element_generation_missing", sAckBatch, `{"v":1,"leases":[` + ackOK + `,{"job":"b","lease_id":"L-2"}]}`, events.ReasonMissingField, "leases[1].generation"},
	{"result_element_outcome_missing", sResultBatch, `{"v":1,"leases":[{"job":"a","lease_id":"L-1","generation":1}]}`, events.ReasonMissingField, "leases[0].outcome"},
	{"missing_v_before_elements", sAckBatch, `{"leases":[{}]}`, events.ReasonMissingField, "v"},
	// Missing fields of every element come before any element's consistency.
	{"missing_before_consistency", sSubmitBatch, `{"v":1,"jobs":[{"job":"a","queue":"q","backoff_ms":10,"backoff_max_ms":5},{"job":"b"}]}`, events.ReasonMissingField, "jobs[1].queue"},
	{"submit_element_backoff", sSubmitBatch, `{"v":1,"jobs":[` + subOK + `,{"job":"b","queue":"q","backoff_ms":10,"backoff_max_ms":5}]}`, events.ReasonBadValue, "jobs[1].backoff_max_ms"},
	{"result_element_permanent_success", sResultBatch, `{"v":1,"leases":[{"job":"a","lease_id":"L-1","generation":1,"outcome":"SUCCESS","permanent":false}]}`, events.ReasonBadValue, "leases[0].permanent"},
	{"result_element_permanent_unseen_in_other", sResultBatch, `{"v":1,"leases":[{"job":"a","lease_id":"L-1","generation":1,"outcome":"FAILED","permanent":false},` + resultOK + `]}`, "", ""},
	{"unknown_field_in_job", sSubmitBatch, `{"v":1,"jobs":[{"job":"a","queue":"q","slots":1}]}`, events.ReasonUnknownField, "jobs[0].slots"},
	{"unknown_field_v_in_job", sSubmitBatch, `{"v":1,"jobs":[{"v":1}]}`, events.ReasonUnknownField, "jobs[0].v"},
	{"unknown_field_renew_seq_in_ack", sAckBatch, `{"v":1,"leases":[{"job":"a","renew_seq":1}]}`, events.ReasonUnknownField, "leases[0].renew_seq"},
	{"unknown_field_queue_in_batch", sSubmitBatch, `{"v":1,"queue":"q","jobs":[` + subOK + `]}`, events.ReasonUnknownField, "queue"},
	{"unknown_field_leases_in_submit", sSubmitBatch, `{"v":1,"leases":[` + ackOK + `]}`, events.ReasonUnknownField, "leases"},
	{"unknown_field_jobs_in_ack", sAckBatch, `{"v":1,"jobs":[` + subOK + `]}`, events.ReasonUnknownField, "jobs"},
	{"unknown_field_jobs_in_single_submit", sSubmit, `{"v":1,"queue":"q","jobs":[]}`, events.ReasonUnknownField, "jobs"},
	{"case_variant_in_job", sSubmitBatch, `{"v":1,"jobs":[{"Queue":"q"}]}`, events.ReasonCaseVariantKey, "jobs[0].Queue"},
	{"case_variant_jobs", sSubmitBatch, `{"v":1,"JOBS":[]}`, events.ReasonCaseVariantKey, "JOBS"},
	{"duplicate_key_in_lease", sResultBatch, `{"v":1,"leases":[{"job":"a","job":"a"}]}`, events.ReasonDuplicateKey, "leases[0].job"},
	{"bad_token_job", sSubmitBatch, `{"v":1,"jobs":[{"job":"_","queue":"q"}]}`, events.ReasonBadToken, "jobs[0].job"},
	{"bad_value_priority", sSubmitBatch, `{"v":1,"jobs":[{"job":"a","queue":"q","priority":10}]}`, events.ReasonBadValue, "jobs[0].priority"},
	{"bad_enum_outcome", sResultBatch, `{"v":1,"leases":[{"job":"a","outcome":"DONE"}]}`, events.ReasonBadEnum, "leases[0].outcome"},
	{"too_large_payload", sSubmitBatch, `{"v":1,"jobs":[{"job":"a","queue":"q","payload":"` + strings.Repeat("x", events.MaxPayloadBytes+1) + `"}]}`, events.ReasonTooLarge, "jobs[0].payload"},
	{"too_large_batch", sSubmitBatch, submitBatchBody(events.MaxBatch + 1), events.ReasonTooLarge, "jobs"},
	{"wrong_type_jobs", sSubmitBatch, `{"v":1,"jobs":{}}`, events.ReasonWrongType, "jobs"},
	{"wrong_type_element", sAckBatch, `{"v":1,"leases":[` + ackOK + `,"b"]}`, events.ReasonWrongType, "leases[1]"},
	{"null_element", sSubmitBatch, `{"v":1,"jobs":[null]}`, events.ReasonNullValue, "jobs[0]"},
	{"control_char_in_detail", sResultBatch, `{"v":1,"leases":[{"job":"a","detail":"a\nb"}]}`, events.ReasonControlChar, "leases[0].detail"},
	{"identity_job_on_batch", sAckBatch, `{"v":1,"job":"a","leases":[` + ackOK + `]}`, events.ReasonIdentityMismatch, "job"},
	{"too_deep_in_job", sSubmitBatch, `{"v":1,"jobs":[{"queue":` + nest(6) + `}]}`, events.ReasonTooDeep, "jobs[0].queue"},
	{"syntax_truncated", sSubmitBatch, `{"v":1,"jobs":[{"job":`, events.ReasonSyntaxError, ""},
	// The verbs that batch nothing still need a job.
	{"release_batch", events.InputSubject(events.RoleWorker, "w-7", events.NoJob, events.VerbRelease), `{"v":1}`, events.ReasonBadSubject, "job"},
	{"offer_batch", events.InputSubject(events.RoleOps, "disp-1", events.NoJob, events.VerbOffer), `{"v":1}`, events.ReasonBadSubject, "job"},
}

func TestDecodeBatchErrors(t *testing.T) {
	for _, c := range batchErrorCases {
		t.Run(c.name, func(t *testing.T) {
			in := events.Input{Batch: make([]events.Input, 3, 8)}
			err := events.DecodeInput(c.subject, []byte(c.body), &in)
			if c.code == "" {
				if err != nil {
					t.Fatalf("DecodeInput: %v", err)
				}
				return
			}
			var de *events.DecodeError
			if !errors.As(err, &de) || de.Code != c.code || de.Field != c.field {
				t.Fatalf("%v (%#v), want %s on %q", err, de, c.code, c.field)
			}
			if len(in.Batch) != 0 || cap(in.Batch) < 8 {
				t.Errorf("after the error Batch has %d elements (cap %d), want none and the array kept", len(in.Batch), cap(in.Batch))
			}
		})
	}
}

// Under revisions 1 to 6 a batch submit, ack or result is what it always
// was: a subject whose verb needs a job (bad_subject on "job"); from 7 on
// it is decoded. The field "jobs" is unknown before 7 (not even a case
// variant of anything).
func TestRevision7Gating(t *testing.T) {
	for _, c := range batchValidCases {
		for rev := uint32(events.Revision1); rev <= events.CurrentRevision; rev++ {
			var in events.Input
			err := events.DecodeInputAt(c.subject, []byte(c.body), rev, &in)
			var de *events.DecodeError
			switch {
			case rev >= events.Revision7 && err != nil:
				t.Errorf("%s under revision %d: %v", c.name, rev, err)
			case rev < events.Revision7 && rev >= events.Revision4 && (!errors.As(err, &de) || de.Code != events.ReasonBadSubject || de.Field != "job"):
				t.Errorf("%s under revision %d: %v, want bad_subject on job", c.name, rev, err)
			case rev < events.Revision7 && err == nil:
				t.Errorf("%s under revision %d: decoded", c.name, rev)
			}
		}
	}
	for rev := uint32(events.Revision4); rev < events.Revision7; rev++ {
		var in events.Input
		err := events.DecodeInputAt(sSubmit, []byte(`{"v":1,"queue":"q","Jobs":1}`), rev, &in)
		var de *events.DecodeError
		if !errors.As(err, &de) || de.Code != events.ReasonUnknownField || de.Field != "Jobs" {
			t.Errorf("Jobs under revision %d: %v, want unknown_field", rev, err)
		}
	}
}

// A batch decoded into an Input reuses its Batch array, and an element
// starts from zero whatever the array held.
func TestDecodeBatchReuses(t *testing.T) {
	var in events.Input
	if err := events.DecodeInput(sSubmitBatch, []byte(submitBatchBody(events.MaxBatch)), &in); err != nil {
		t.Fatal(err)
	}
	p := &in.Batch[0]
	in.Batch[0].Payload, in.Batch[0].HasPayload = "old", true
	if err := events.DecodeInput(sSubmitBatch, []byte(`{"v":1,"jobs":[{"job":"x","queue":"q"}]}`), &in); err != nil {
		t.Fatal(err)
	}
	if &in.Batch[0] != p || in.Batch[0].HasPayload || in.Batch[0].Job != "x" {
		t.Fatalf("Batch[0] %+v, reused %v", in.Batch[0], &in.Batch[0] == p)
	}
}

// TestBatchTakesNoFlowFields: the elements of a batch submit take none of
// the fields of rules revision 8 (run_at, delay_ms, unique_key,
// unique_for_ms), under revision 7 as under 8: an unknown field of the
// element; under 8 a single submit takes them and a batch is decoded as
// under 7.
func TestBatchTakesNoFlowFields(t *testing.T) {
	for _, field := range []string{`"run_at":"2026-05-01T03:00:00Z"`, `"delay_ms":1000`, `"unique_key":"k"`, `"unique_for_ms":1000`} {
		name := strings.Trim(strings.SplitN(field, ":", 2)[0], `"`)
		body := `{"v":1,"jobs":[{"job":"a","queue":"q"},{"job":"b","queue":"q",` + field + `}]}`
		for _, rev := range []uint32{events.Revision7, events.Revision8} {
			var in events.Input
			err := events.DecodeInputAt(sSubmitBatch, []byte(body), rev, &in)
			var de *events.DecodeError
			if !errors.As(err, &de) || de.Code != events.ReasonUnknownField || !strings.HasSuffix(de.Field, name) {
				t.Errorf("%s in a batch under revision %d: %v, want unknown_field on it", name, rev, err)
			}
		}
	}
	var in events.Input
	if err := events.DecodeInputAt(sSubmit, []byte(`{"v":1,"queue":"q","delay_ms":1000,"unique_key":"k","unique_for_ms":1000}`), events.Revision8, &in); err != nil || in.DelayMS != 1000 || in.UniqueKey != "k" {
		t.Errorf("a single submit under revision 8: %v %+v", err, in)
	}
	if err := events.DecodeInputAt(sSubmitBatch, []byte(submitBatchBody(3)), events.Revision8, &in); err != nil || len(in.Batch) != 3 {
		t.Errorf("a batch submit under revision 8: %v", err)
	}
}
