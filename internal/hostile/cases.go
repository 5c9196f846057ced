package hostile

import (
	"fmt"
	"strings"

	"github.com/maknow/tenure/events"
)

// Case is one malformed or hostile input of the corpus: a raw subject and
// a raw body, to be published as they are, with what the decoder says of
// it alone and the one verdict it gets from a coordinator in the setting
// of coordinator TestHostileInputs (Fixtures, the default policy, rules
// revision 5).
type Case struct {
	Cat  string // category, for summaries and failure messages
	Name string // unique within the corpus
	// Subject and Body, as published. Body may hold the placeholders $ACT,
	// $OLD, $NEW, $DONE, $OFFER and $VICT: the lease ids of the fixture
	// jobs (Fixtures.Expand).
	Subject, Body string
	// Decode is the reason the decoder rejects the input with, alone
	// (events.DecodeInput), "" when it decodes: its verdict is then the
	// fold's.
	Decode events.Reason
	// DecoderOnly says that Decode is a fault no JSON Schema can see (a
	// limit in bytes of a text whose characters are within it, an integer
	// written 1.0, a body over 65,536 bytes of valid JSON ...; see
	// schema's decoderOnlyRules): the schema tests leave the case out. The
	// reasons that no schema can see at all (a subject, a key twice,
	// invalid UTF-8 ...) are not marked: the schema tests know them.
	DecoderOnly bool
	// Kind and Reason are the verdict (rejected/Decode for a decode
	// failure).
	Kind   events.Kind
	Reason events.Reason
	// Job is the job the verdict must be filed under: the subject's job
	// token when it is a valid token, else events.NoJob; set explicitly
	// where the verdict concerns another job (a batch renew element).
	Job string
	// Change is the legitimate change of that job's projection (protocol
	// misuse on a real job that counts stale/late/duplicate/conflicting
	// messages); nil means the projection must be unchanged.
	Change func(*events.Job)
	// Bug, when set, documents a known defect: the case keeps the verdict
	// it SHOULD get and fails until the defect is fixed.
	Bug string
}

// Fixtures are the lease ids of the real jobs the protocol-misuse cases aim
// at (coordinator TestHostileInputs makes them before the corpus):
type Fixtures struct {
	Active string // fx-active: w-1, generation 1, ACTIVE (acquired)
	Old    string // fx-gen2: w-1, generation 1, RELEASED (superseded)
	New    string // fx-gen2: w-1, generation 2, ACTIVE (acquired)
	Done   string // fx-done: w-1, generation 1, COMPLETED/SUCCESS
	Offer  string // fx-offer: offered to w-3, generation 1, not ACKed
	Victim string // fx-victim: w-1, generation 1, ACTIVE; w-2 will claim it
}

// Expand replaces the placeholders of body with the fixtures' lease ids.
func (f Fixtures) Expand(body string) []byte {
	return []byte(strings.NewReplacer(
		"$ACT", f.Active, "$OLD", f.Old, "$NEW", f.New,
		"$DONE", f.Done, "$OFFER", f.Offer, "$VICT", f.Victim,
	).Replace(body))
}

// Shaped are fixtures of lease ids of the right shape (rules revision 2 on),
// for a decoder or schema that judges a body alone.
var Shaped = Fixtures{
	Active: "L3-0FMQ6F4uKWTSoQx6pHrB5g", Old: "L4-0FMQ6F4uKWTSoQx6pHrB5g", New: "L6-0FMQ6F4uKWTSoQx6pHrB5g",
	Done: "L7-0FMQ6F4uKWTSoQx6pHrB5g", Offer: "L9-0FMQ6F4uKWTSoQx6pHrB5g", Victim: "L10-0FMQ6F4uKWTSoQx6pHrB5g",
}

// decodeReasons are the reasons the decoder gives (the rest are the fold's).
var decodeReasons = map[events.Reason]bool{
	events.ReasonBadSubject: true, events.ReasonWrongRole: true, events.ReasonSyntaxError: true,
	events.ReasonNotObject: true, events.ReasonUnknownField: true, events.ReasonDuplicateKey: true,
	events.ReasonCaseVariantKey: true, events.ReasonInvalidUtf8: true, events.ReasonControlChar: true,
	events.ReasonTrailingData: true, events.ReasonMissingField: true, events.ReasonWrongType: true,
	events.ReasonNullValue: true, events.ReasonBadNumber: true, events.ReasonBadDuration: true,
	events.ReasonBadSequence: true, events.ReasonBadValue: true, events.ReasonBadToken: true,
	events.ReasonBadEnum: true, events.ReasonBadTime: true, events.ReasonTooLarge: true,
	events.ReasonTooDeep: true, events.ReasonUnsupportedVersion: true, events.ReasonIdentityMismatch: true,
	events.ReasonBadPolicy: true,
}

func inSubject(role, actor, job, verb string) string {
	return events.InputPrefix + "." + role + "." + actor + "." + job + "." + verb
}

// subjectJob is the job a rejection of subject is filed under: the job
// token if the subject has six tokens and it is a valid token, else _.
func subjectJob(subject string) string {
	tok := strings.Split(subject, ".")
	if len(tok) == 6 && events.ValidToken(tok[4]) {
		return tok[4]
	}
	return events.NoJob
}

// Cases is the corpus, in publication order (the order matters only for
// the conflict cases at the end).
func Cases() []Case {
	var cs []Case
	add := func(cat, name, subject, body string, kind events.Kind, reason events.Reason, change func(*events.Job)) *Case {
		c := Case{Cat: cat, Name: name, Subject: subject, Body: body, Kind: kind, Reason: reason,
			Job: subjectJob(subject), Change: change}
		if kind == events.KindRejected && decodeReasons[reason] {
			c.Decode = reason
		}
		cs = append(cs, c)
		return &cs[len(cs)-1]
	}
	rej := func(cat, name, subject, body string, reason events.Reason) *Case {
		return add(cat, name, subject, body, events.KindRejected, reason, nil)
	}
	w1 := func(job, verb string) string { return inSubject("worker", "w-1", job, verb) }
	w2 := func(job, verb string) string { return inSubject("worker", "w-2", job, verb) }
	w3 := func(job, verb string) string { return inSubject("worker", "w-3", job, verb) }
	ops := func(job, verb string) string { return inSubject("ops", "disp", job, verb) }
	batch := w1(events.NoJob, "renew")

	// Counter changes that protocol misuse on a real job legitimately makes.
	stale := func(j *events.Job) { j.Stale++ }
	lateProgress := func(j *events.Job) { j.Late++; j.LateProgress++ }
	duplicate := func(j *events.Job) { j.Duplicates++ }
	claimedBy := func(holder string) func(*events.Job) {
		return func(j *events.Job) {
			j.Conflicts++
			if !j.Conflict {
				j.Conflict, j.ConflictWith = true, holder
			}
		}
	}

	// Most decode cases are renewals of fx-active (or of a traffic job)
	// naming generation 2, a future generation: should one of them decode
	// by mistake it gets lost_authority/future_generation and changes
	// nothing, so it cannot disturb the cases after it.
	const renew = `{"v":1,"lease_id":"$ACT","generation":2,"renew_seq":1}`
	// Length-sensitive bodies hold no placeholder (expanding one changes the
	// length); generation 2 is judged before the lease id.
	const renewFixed = `{"v":1,"lease_id":"L999999","generation":2,"renew_seq":1}`
	rAct := w1("fx-active", "renew")
	pAct := w1("fx-active", "progress")
	progress := func(note string) string {
		return `{"v":1,"lease_id":"$ACT","generation":2,"progress_seq":1,"value":5,"note":"` + note + `"}`
	}
	pad := func(body string, n int) string { return body + strings.Repeat(" ", n-len(body)) }
	nest := func(open, close string, n int, inner string) string {
		return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
	}
	lease := func(job string) string {
		return `{"job":"` + job + `","lease_id":"L1","generation":1,"renew_seq":1}`
	}
	long := func(c byte, n int) string { return strings.Repeat(string(c), n) }

	// --- size ---
	rej("size", "body-65537-bytes", rAct, pad(renewFixed, events.MaxInputBytes+1), events.ReasonTooLarge).DecoderOnly = true
	rej("size", "body-100000-byte-note", pAct, progress(long('a', 100000)), events.ReasonTooLarge)
	add("size", "body-exactly-65536-bytes-decodes", rAct, pad(renewFixed, events.MaxInputBytes),
		events.KindLostAuthority, events.ReasonFutureGeneration, nil)
	rej("size", "note-257-bytes", pAct, progress(long('n', 257)), events.ReasonTooLarge)
	add("size", "note-256-bytes-decodes", pAct, progress(long('n', 256)),
		events.KindLostAuthority, events.ReasonFutureGeneration, nil)
	rej("size", "note-258-bytes-of-129-e-acute", pAct, progress(strings.Repeat("é", 129)), events.ReasonTooLarge).DecoderOnly = true
	rej("size", "note-260-bytes-after-unescaping", pAct, progress(strings.Repeat(`\u00e9`, 130)), events.ReasonTooLarge).DecoderOnly = true
	rej("size", "result-detail-257-bytes", w1("fx-active", "result"),
		`{"v":1,"lease_id":"$ACT","generation":2,"outcome":"FAILED","detail":"`+long('d', 257)+`"}`, events.ReasonTooLarge)
	rej("size", "cancel-reason-257-bytes", ops("fx-active", "cancel"),
		`{"v":1,"lease_id":"$ACT","generation":2,"reason":"`+long('r', 257)+`"}`, events.ReasonTooLarge)
	rej("size", "resolve-reason-257-bytes", ops("fx-done", "resolve"),
		`{"v":1,"action":"revoke","reason":"`+long('r', 257)+`"}`, events.ReasonTooLarge)
	{
		var b strings.Builder
		b.WriteString(`{"v":1,"leases":[`)
		for i := range events.MaxBatch + 1 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(lease(fmt.Sprintf("tr-%d", i%8)))
		}
		b.WriteString(`]}`)
		rej("size", "batch-257-leases", batch, b.String(), events.ReasonTooLarge)
	}
	rej("size", "lease-id-65-chars", rAct, `{"v":1,"lease_id":"`+long('L', 65)+`","generation":1,"renew_seq":1}`, events.ReasonBadToken)
	add("size", "lease-id-64-chars-decodes", rAct, `{"v":1,"lease_id":"`+long('L', 64)+`","generation":1,"renew_seq":1}`,
		events.KindLostAuthority, events.ReasonNoSuchLease, nil)
	rej("size", "subject-actor-65-chars", inSubject("worker", long('w', 65), "fx-active", "renew"), renew, events.ReasonBadSubject)
	rej("size", "subject-job-65-chars", w1(long('j', 65), "acquire"), `{"v":1}`, events.ReasonBadSubject)
	add("size", "subject-job-64-chars-decodes", w1(long('j', 64), "ack"), `{"v":1,"lease_id":"L1","generation":1}`,
		events.KindLostAuthority, events.ReasonNoSuchJob, nil)
	rej("size", "holder-65-chars", ops("inj", "offer"), `{"v":1,"holder":"`+long('h', 65)+`"}`, events.ReasonBadToken)
	rej("size", "key-1000-chars", rAct, `{"v":1,"`+long('k', 1000)+`":1}`, events.ReasonUnknownField)

	// --- nesting ---
	rej("nesting", "generation-7-nested-arrays", rAct,
		`{"v":1,"lease_id":"$ACT","generation":`+nest("[", "]", 7, "1")+`,"renew_seq":1}`, events.ReasonWrongType)
	rej("nesting", "generation-8-nested-arrays", rAct,
		`{"v":1,"lease_id":"$ACT","generation":`+nest("[", "]", 8, "1")+`,"renew_seq":1}`, events.ReasonTooDeep)
	rej("nesting", "generation-8-nested-objects", rAct,
		`{"v":1,"lease_id":"$ACT","generation":`+nest(`{"a":`, "}", 8, "1")+`,"renew_seq":1}`, events.ReasonTooDeep)
	rej("nesting", "generation-65000-open-brackets", rAct, `{"v":1,"generation":`+long('[', 65000), events.ReasonTooDeep)
	rej("nesting", "generation-12000-nested-objects", rAct, `{"v":1,"generation":`+strings.Repeat(`{"a":`, 12000), events.ReasonTooDeep)
	rej("nesting", "body-100000-open-brackets", rAct, long('[', 100000), events.ReasonTooLarge)
	rej("nesting", "body-65000-open-brackets", rAct, long('[', 65000), events.ReasonNotObject)
	rej("nesting", "body-65000-open-braces", rAct, long('{', 65000), events.ReasonSyntaxError)
	rej("nesting", "batch-lease-generation-6-nested-arrays", batch,
		`{"v":1,"leases":[{"job":"tr-0","lease_id":"L1","generation":`+nest("[", "]", 6, "1")+`,"renew_seq":1}]}`, events.ReasonTooDeep)
	rej("nesting", "batch-element-6-nested-arrays", batch, `{"v":1,"leases":[`+nest("[", "]", 6, "1")+`]}`, events.ReasonWrongType)
	rej("nesting", "batch-element-7-nested-arrays", batch, `{"v":1,"leases":[`+nest("[", "]", 7, "1")+`]}`, events.ReasonTooDeep)
	rej("nesting", "unknown-key-before-deep-value", rAct, `{"v":1,"x":`+long('[', 5000), events.ReasonUnknownField)
	rej("nesting", "unclosed-arrays", rAct, `{"v":1,"lease_id":"$ACT","generation":[[[`, events.ReasonSyntaxError)

	// --- duplicate keys ---
	rej("duplicate", "v-twice", rAct, `{"v":1,"v":1,"lease_id":"$ACT","generation":2,"renew_seq":1}`, events.ReasonDuplicateKey)
	rej("duplicate", "v-twice-escaped-u0076", rAct, `{"v":1,"\u0076":1,"lease_id":"$ACT","generation":2,"renew_seq":1}`, events.ReasonDuplicateKey)
	rej("duplicate", "lease_id-twice-escaped-u005f", rAct, `{"v":1,"lease_id":"$ACT","lease\u005fid":"$ACT","generation":2,"renew_seq":1}`, events.ReasonDuplicateKey)
	rej("duplicate", "generation-twice-other-value", rAct, `{"v":1,"lease_id":"$ACT","generation":2,"renew_seq":1,"generation":1}`, events.ReasonDuplicateKey)
	rej("duplicate", "key-twice-in-batch-element", batch,
		`{"v":1,"leases":[{"job":"tr-0","job":"tr-1","lease_id":"L1","generation":1,"renew_seq":1}]}`, events.ReasonDuplicateKey)
	rej("duplicate", "leases-twice", batch, `{"v":1,"leases":[`+lease("tr-0")+`],"leases":[`+lease("tr-1")+`]}`, events.ReasonDuplicateKey)

	// --- case-variant keys ---
	rej("case", "key-V", rAct, `{"V":1,"lease_id":"$ACT","generation":2,"renew_seq":1}`, events.ReasonCaseVariantKey)
	rej("case", "key-Lease_ID", rAct, `{"v":1,"Lease_ID":"$ACT","generation":2,"renew_seq":1}`, events.ReasonCaseVariantKey)
	rej("case", "key-GENERATION", rAct, `{"v":1,"lease_id":"$ACT","GENERATION":2,"renew_seq":1}`, events.ReasonCaseVariantKey)
	rej("case", "key-Holder-of-another-kind", rAct, `{"v":1,"Holder":"w-1"}`, events.ReasonCaseVariantKey)
	rej("case", "key-Job-in-batch-element", batch, `{"v":1,"leases":[{"Job":"tr-0","lease_id":"L1","generation":1,"renew_seq":1}]}`, events.ReasonCaseVariantKey)
	rej("case", "key-lease_id-with-long-s-U017F", rAct, `{"v":1,"lea\u017fe_id":"$ACT","generation":2,"renew_seq":1}`, events.ReasonCaseVariantKey)

	// --- unknown fields ---
	rej("unknown", "field-foo", rAct, `{"v":1,"lease_id":"$ACT","generation":2,"renew_seq":1,"foo":1}`, events.ReasonUnknownField)
	rej("unknown", "holder-in-renew", rAct, `{"v":1,"lease_id":"$ACT","generation":2,"renew_seq":1,"holder":"w-1"}`, events.ReasonUnknownField)
	rej("unknown", "empty-key", rAct, `{"v":1,"":1}`, events.ReasonUnknownField)
	rej("unknown", "key-with-trailing-space", rAct, `{"v ":1}`, events.ReasonUnknownField)
	rej("unknown", "leases-in-single-renew", rAct, `{"v":1,"leases":[`+lease("fx-active")+`]}`, events.ReasonUnknownField)
	rej("unknown", "lease_ms-in-ack", w1("fx-active", "ack"), `{"v":1,"lease_id":"$ACT","generation":2,"lease_ms":1000}`, events.ReasonUnknownField)
	rej("unknown", "holder-in-resolve-revoke", ops("fx-done", "resolve"), `{"v":1,"action":"revoke","holder":"w-1"}`, events.ReasonUnknownField)
	rej("unknown", "holder-before-action-settle", ops("fx-done", "resolve"), `{"v":1,"holder":"w-1","action":"settle","outcome":"FAILED"}`, events.ReasonUnknownField)
	rej("unknown", "holder-in-batch-element", batch, `{"v":1,"leases":[{"job":"tr-0","holder":"w-1"}]}`, events.ReasonUnknownField)
	rej("unknown", "field-in-tick", inSubject("coord", "c-x", events.NoJob, "tick"), `{"v":1,"x":1}`, events.ReasonUnknownField)

	// --- nulls, one per kind of field (on a traffic job's renew subject where the verb allows) ---
	rTr := w1("tr-3", "renew")
	rej("null", "v", rTr, `{"v":null}`, events.ReasonNullValue)
	rej("null", "actor", rTr, `{"v":1,"actor":null}`, events.ReasonNullValue)
	rej("null", "job", rTr, `{"v":1,"job":null}`, events.ReasonNullValue)
	rej("null", "sent_at", rTr, `{"v":1,"sent_at":null}`, events.ReasonNullValue)
	rej("null", "lease_id-token", rTr, `{"v":1,"lease_id":null}`, events.ReasonNullValue)
	rej("null", "generation-sequence", rTr, `{"v":1,"lease_id":"$ACT","generation":null}`, events.ReasonNullValue)
	rej("null", "renew_seq", rTr, `{"v":1,"renew_seq":null}`, events.ReasonNullValue)
	rej("null", "lease_ms-duration", rTr, `{"v":1,"lease_ms":null}`, events.ReasonNullValue)
	rej("null", "note-text", w1("tr-3", "progress"), `{"v":1,"note":null}`, events.ReasonNullValue)
	rej("null", "value-percent", w1("tr-3", "progress"), `{"v":1,"value":null}`, events.ReasonNullValue)
	rej("null", "outcome-enum", w1("tr-3", "result"), `{"v":1,"outcome":null}`, events.ReasonNullValue)
	rej("null", "holder", ops("inj", "offer"), `{"v":1,"holder":null}`, events.ReasonNullValue)
	rej("null", "action-enum", ops("fx-done", "resolve"), `{"v":1,"action":null}`, events.ReasonNullValue)
	rej("null", "leases-array", batch, `{"v":1,"leases":null}`, events.ReasonNullValue)
	rej("null", "batch-element", batch, `{"v":1,"leases":[null]}`, events.ReasonNullValue)
	rej("null", "inside-wrongly-typed-value", rTr, `{"v":1,"generation":[null]}`, events.ReasonNullValue)
	rej("null", "max_generations-policy", inSubject("ops", "disp", events.NoJob, "policy"), `{"v":1,"max_generations":null}`, events.ReasonNullValue)

	// --- type confusion ---
	rej("type", "generation-string", rAct, `{"v":1,"lease_id":"$ACT","generation":"1","renew_seq":1}`, events.ReasonWrongType)
	rej("type", "lease_id-number", rAct, `{"v":1,"lease_id":1,"generation":2,"renew_seq":1}`, events.ReasonWrongType)
	rej("type", "lease_id-bool", rAct, `{"v":1,"lease_id":true,"generation":2,"renew_seq":1}`, events.ReasonWrongType)
	rej("type", "renew_seq-array", rAct, `{"v":1,"lease_id":"$ACT","generation":2,"renew_seq":[1]}`, events.ReasonWrongType)
	rej("type", "generation-object", rAct, `{"v":1,"lease_id":"$ACT","generation":{},"renew_seq":1}`, events.ReasonWrongType)
	rej("type", "v-string", rAct, `{"v":"1","lease_id":"$ACT","generation":2,"renew_seq":1}`, events.ReasonWrongType)
	rej("type", "outcome-number", w1("fx-active", "result"), `{"v":1,"lease_id":"$ACT","generation":2,"outcome":1}`, events.ReasonWrongType)
	rej("type", "value-bool", pAct, `{"v":1,"lease_id":"$ACT","generation":2,"progress_seq":1,"value":false}`, events.ReasonWrongType)
	rej("type", "note-number", pAct, `{"v":1,"note":5}`, events.ReasonWrongType)
	rej("type", "sent_at-number", rAct, `{"v":1,"sent_at":1700000000}`, events.ReasonWrongType)
	rej("type", "actor-number", rAct, `{"v":1,"actor":1}`, events.ReasonWrongType)
	rej("type", "holder-array", ops("inj", "offer"), `{"v":1,"holder":["w-1"]}`, events.ReasonWrongType)
	rej("type", "leases-object", batch, `{"v":1,"leases":{}}`, events.ReasonWrongType)
	rej("type", "leases-string", batch, `{"v":1,"leases":"tr-0"}`, events.ReasonWrongType)
	rej("type", "leases-number-element", batch, `{"v":1,"leases":[1]}`, events.ReasonWrongType)
	rej("type", "batch-generation-string", batch, `{"v":1,"leases":[{"job":"tr-0","lease_id":"L1","generation":"1","renew_seq":1}]}`, events.ReasonWrongType)

	// --- integer edge cases (generation of a renewal, unless named) ---
	gen := func(g string) string { return `{"v":1,"lease_id":"$ACT","generation":` + g + `,"renew_seq":1}` }
	rej("integer", "minus-zero", rAct, gen("-0"), events.ReasonBadNumber)
	rej("integer", "zero", rAct, gen("0"), events.ReasonBadSequence)
	rej("integer", "minus-one", rAct, gen("-1"), events.ReasonBadSequence)
	rej("integer", "one-point-zero", rAct, gen("1.0"), events.ReasonBadNumber).DecoderOnly = true
	rej("integer", "exponent-1e3", rAct, gen("1e3"), events.ReasonBadNumber).DecoderOnly = true
	rej("integer", "exponent-1E+0", rAct, gen("1E+0"), events.ReasonBadNumber).DecoderOnly = true
	rej("integer", "leading-zero", rAct, gen("01"), events.ReasonBadNumber)
	rej("integer", "plus-one", rAct, gen("+1"), events.ReasonBadNumber)
	rej("integer", "lone-minus", rAct, gen("-"), events.ReasonBadNumber)
	rej("integer", "2^53", rAct, gen("9007199254740992"), events.ReasonBadSequence)
	add("integer", "2^53-1-decodes", rAct, gen("9007199254740991"), events.KindLostAuthority, events.ReasonFutureGeneration, nil)
	rej("integer", "2^63", rAct, gen("9223372036854775808"), events.ReasonBadSequence)
	rej("integer", "2^64", rAct, gen("18446744073709551616"), events.ReasonBadSequence)
	rej("integer", "2^64-renew_seq", rAct, `{"v":1,"lease_id":"$ACT","generation":2,"renew_seq":18446744073709551616}`, events.ReasonBadSequence)
	rej("integer", "40-digits", rAct, gen(long('9', 40)), events.ReasonBadSequence)
	rej("integer", "NaN", rAct, gen("NaN"), events.ReasonSyntaxError)
	rej("integer", "Infinity", rAct, gen("Infinity"), events.ReasonSyntaxError)
	rej("integer", "minus-Infinity", rAct, gen("-Infinity"), events.ReasonBadNumber)
	rej("integer", "digit-separator-1_000", rAct, gen("1_000"), events.ReasonSyntaxError)
	rej("integer", "v-2^64", rAct, `{"v":18446744073709551617}`, events.ReasonUnsupportedVersion)
	rej("integer", "progress-value-101", pAct, `{"v":1,"lease_id":"$ACT","generation":2,"progress_seq":1,"value":101}`, events.ReasonBadValue)
	rej("integer", "progress-value-minus-1", pAct, `{"v":1,"lease_id":"$ACT","generation":2,"progress_seq":1,"value":-1}`, events.ReasonBadValue)
	policy := func(minMS, maxMS, defMS, ackMS, cancelMS, lifeMS, maxGen string) string {
		return `{"v":1,"min_lease_ms":` + minMS + `,"max_lease_ms":` + maxMS + `,"default_lease_ms":` + defMS +
			`,"ack_timeout_ms":` + ackMS + `,"cancel_timeout_ms":` + cancelMS + `,"max_lifetime_ms":` + lifeMS +
			`,"max_generations":` + maxGen + `}`
	}
	polSubj := inSubject("ops", "disp", events.NoJob, "policy")
	rej("integer", "max_generations-0", polSubj, policy("100", "3600000", "30000", "30000", "60000", "86400000", "0"), events.ReasonBadValue)
	rej("integer", "max_generations-2^20+1", polSubj, policy("100", "3600000", "30000", "30000", "60000", "86400000", "1048577"), events.ReasonBadValue)

	// --- durations ---
	acq := func(ms string) string { return `{"v":1,"lease_ms":` + ms + `}` }
	rej("duration", "acquire-negative", w1("dur-x", "acquire"), acq("-1"), events.ReasonBadDuration)
	rej("duration", "acquire-zero", w1("dur-x", "acquire"), acq("0"), events.ReasonBadDuration)
	rej("duration", "acquire-1ms-below-policy", w1("dur-x", "acquire"), acq("1"), events.ReasonDurationOutOfPolicy)
	rej("duration", "acquire-30-days-above-policy", w1("dur-x", "acquire"), acq("2592000000"), events.ReasonDurationOutOfPolicy)
	rej("duration", "acquire-30-days-plus-1ms", w1("dur-x", "acquire"), acq("2592000001"), events.ReasonBadDuration)
	rej("duration", "acquire-huge", w1("dur-x", "acquire"), acq("1"+long('0', 30)), events.ReasonBadDuration)
	rej("duration", "acquire-fraction", w1("dur-x", "acquire"), acq("1.5"), events.ReasonBadNumber)
	rej("duration", "acquire-minus-zero", w1("dur-x", "acquire"), acq("-0"), events.ReasonBadNumber)
	rej("duration", "offer-ack_timeout-zero", ops("dur-x", "offer"), `{"v":1,"holder":"w-1","ack_timeout_ms":0}`, events.ReasonBadDuration)
	rej("duration", "renew-1ms-below-policy", rAct, `{"v":1,"lease_id":"$ACT","generation":1,"renew_seq":9007199254740991,"lease_ms":1}`, events.ReasonDurationOutOfPolicy)
	rej("duration", "batch-lease_ms-negative", batch, `{"v":1,"leases":[{"job":"tr-0","lease_id":"L1","generation":1,"renew_seq":1,"lease_ms":-5}]}`, events.ReasonBadDuration)
	rej("duration", "policy-cancel_timeout-30-days-plus-1ms", polSubj, policy("100", "3600000", "30000", "30000", "2592000001", "86400000", "1000"), events.ReasonBadDuration)
	rej("duration", "policy-default-below-min", polSubj, policy("1000", "3600000", "500", "30000", "60000", "86400000", "1000"), events.ReasonBadPolicy)
	rej("duration", "policy-max-lease-above-lifetime", polSubj, policy("100", "3600000", "30000", "30000", "60000", "1000000", "1000"), events.ReasonBadPolicy)

	// --- invalid UTF-8 (raw bytes and escapes) ---
	rej("utf8", "raw-0xff", pAct, progress("ab\xffcd"), events.ReasonInvalidUtf8)
	rej("utf8", "truncated-multibyte", pAct, progress("ab\xe2\x82"), events.ReasonInvalidUtf8)
	rej("utf8", "truncated-multibyte-at-end-of-body", pAct, `{"v":1,"note":"ab`+"\xe2", events.ReasonInvalidUtf8)
	rej("utf8", "overlong-slash-c0af", pAct, progress("\xc0\xaf"), events.ReasonInvalidUtf8)
	rej("utf8", "overlong-3-byte-e080af", pAct, progress("\xe0\x80\xaf"), events.ReasonInvalidUtf8)
	rej("utf8", "raw-encoded-surrogate-eda080", pAct, progress("\xed\xa0\x80"), events.ReasonInvalidUtf8)
	rej("utf8", "above-U10FFFF", pAct, progress("\xf4\x90\x80\x80"), events.ReasonInvalidUtf8)
	rej("utf8", "escaped-lone-high-surrogate", pAct, progress(`\ud800`), events.ReasonInvalidUtf8)
	rej("utf8", "escaped-lone-low-surrogate", pAct, progress(`\udc00`), events.ReasonInvalidUtf8)
	rej("utf8", "escaped-reversed-surrogates", pAct, progress(`\udc00\ud800`), events.ReasonInvalidUtf8)
	rej("utf8", "escaped-high-then-non-surrogate", pAct, progress(`\ud800\u0041`), events.ReasonInvalidUtf8)
	rej("utf8", "in-a-key", rAct, "{\"v\":1,\"lease_\xffid\":\"x\"}", events.ReasonInvalidUtf8)
	rej("utf8", "in-a-token", rAct, "{\"v\":1,\"lease_id\":\"L\xff\",\"generation\":2,\"renew_seq\":1}", events.ReasonInvalidUtf8)
	rej("utf8", "inside-wrongly-typed-value", rAct, "{\"v\":1,\"generation\":[\"\xff\"]}", events.ReasonInvalidUtf8)

	// --- control characters ---
	rej("control", "raw-NUL", pAct, progress("a\x00b"), events.ReasonControlChar)
	rej("control", "raw-0x1f", pAct, progress("a\x1fb"), events.ReasonControlChar)
	rej("control", "raw-DEL-0x7f", pAct, progress("a\x7fb"), events.ReasonControlChar)
	rej("control", "raw-tab", pAct, progress("a\tb"), events.ReasonControlChar)
	rej("control", "raw-newline-in-token", rAct, "{\"v\":1,\"lease_id\":\"L\n1\",\"generation\":2,\"renew_seq\":1}", events.ReasonControlChar)
	rej("control", "escaped-u0000", pAct, progress(`a\u0000b`), events.ReasonControlChar)
	rej("control", "escaped-u007f", pAct, progress(`a\u007fb`), events.ReasonControlChar)
	rej("control", "escaped-u001F", pAct, progress(`a\u001Fb`), events.ReasonControlChar)
	rej("control", "escaped-newline", pAct, progress(`a\nb`), events.ReasonControlChar)
	rej("control", "escaped-tab", pAct, progress(`a\tb`), events.ReasonControlChar)
	rej("control", "raw-NUL-in-key", rAct, "{\"v\":1,\"lease\x00id\":\"x\"}", events.ReasonControlChar)

	// --- subject injection in ids ---
	offer := func(holder string) string { return `{"v":1,"holder":"` + holder + `"}` }
	rej("injection", "holder-w1.x", ops("inj", "offer"), offer("w1.x"), events.ReasonBadToken)
	rej("injection", "holder-w1-space-x", ops("inj", "offer"), offer("w1 x"), events.ReasonBadToken)
	rej("injection", "holder-star", ops("inj", "offer"), offer("*"), events.ReasonBadToken)
	rej("injection", "holder-gt", ops("inj", "offer"), offer(">"), events.ReasonBadToken)
	rej("injection", "holder-empty", ops("inj", "offer"), offer(""), events.ReasonBadToken)
	rej("injection", "holder-reserved-underscore", ops("inj", "offer"), offer("_"), events.ReasonBadToken)
	rej("injection", "holder-escaped-dot", ops("inj", "offer"), offer(`w1\u002ex`), events.ReasonBadToken)
	rej("injection", "holder-decision-subject", ops("inj", "offer"), offer("tenure.out.w-1.>"), events.ReasonBadToken)
	rej("injection", "holder-non-ascii", ops("inj", "offer"), offer("wé"), events.ReasonBadToken)
	rej("injection", "lease_id-wildcard", rAct, `{"v":1,"lease_id":"L1.>","generation":2,"renew_seq":1}`, events.ReasonBadToken)
	rej("injection", "batch-job-wildcard", batch, `{"v":1,"leases":[{"job":"tr-0.*","lease_id":"L1","generation":1,"renew_seq":1}]}`, events.ReasonBadToken)
	rej("injection", "body-actor-with-dot", rAct, `{"v":1,"actor":"w-1.x"}`, events.ReasonBadToken)
	rej("injection", "body-actor-reserved-underscore", rAct, `{"v":1,"actor":"_"}`, events.ReasonBadToken)
	rej("injection", "body-job-star", rAct, `{"v":1,"job":"*"}`, events.ReasonBadToken)
	rej("injection", "resolve-affirm-holder-gt", ops("fx-victim", "resolve"), `{"v":1,"action":"affirm","holder":">","lease_id":"$VICT","generation":1}`, events.ReasonBadToken)

	// --- bad subjects (all within tenure.in.>) ---
	rej("subject", "too-many-tokens", "tenure.in.worker.a.b.c.d.renew", renew, events.ReasonBadSubject)
	rej("subject", "seven-tokens", rAct+".extra", renew, events.ReasonBadSubject)
	rej("subject", "unknown-role", "tenure.in.nope.x.y.z", `{"v":1}`, events.ReasonBadSubject)
	rej("subject", "too-few-tokens", "tenure.in.worker.w-1.fx-active", renew, events.ReasonBadSubject)
	rej("subject", "unknown-verb", w1("fx-active", "steal"), renew, events.ReasonBadSubject)
	rej("subject", "upper-case-role", inSubject("WORKER", "w-1", "fx-active", "renew"), renew, events.ReasonBadSubject)
	rej("subject", "upper-case-verb", w1("fx-active", "Renew"), renew, events.ReasonBadSubject)
	rej("subject", "role-in-twice", inSubject("in", "w-1", "fx-active", "renew"), renew, events.ReasonBadSubject)
	rej("subject", "reserved-actor-underscore", inSubject("worker", "_", "fx-active", "renew"), renew, events.ReasonBadSubject)
	rej("subject", "actor-with-at-sign", inSubject("worker", "w@1", "fx-active", "renew"), renew, events.ReasonBadSubject)
	rej("subject", "actor-non-ascii", inSubject("worker", "wé", "fx-active", "renew"), renew, events.ReasonBadSubject)
	rej("subject", "actor-invalid-utf8", inSubject("worker", "w\xff", "fx-active", "renew"), renew, events.ReasonBadSubject)
	rej("subject", "acquire-without-job", w1(events.NoJob, "acquire"), `{"v":1}`, events.ReasonBadSubject)
	rej("subject", "tick-with-job", inSubject("coord", "c-x", "fx-active", "tick"), `{"v":1}`, events.ReasonBadSubject)
	rej("subject", "policy-with-job", ops("fx-active", "policy"), policy("100", "3600000", "30000", "30000", "60000", "86400000", "1000"), events.ReasonBadSubject)

	// --- trailing data ---
	rej("trailing", "second-object", rAct, renew+renew, events.ReasonTrailingData)
	rej("trailing", "garbage", rAct, renew+" xyz", events.ReasonTrailingData)
	rej("trailing", "NUL", rAct, renew+"\x00", events.ReasonTrailingData)
	rej("trailing", "extra-close-brace", rAct, renew+"}", events.ReasonTrailingData)
	rej("trailing", "comma-before-close", rAct, `{"v":1,"lease_id":"$ACT","generation":2,"renew_seq":1,}`, events.ReasonSyntaxError)

	// --- empty, whitespace, BOM, top-level non-objects, broken JSON ---
	rej("body", "empty", rAct, "", events.ReasonSyntaxError)
	rej("body", "whitespace", rAct, " \t\r\n ", events.ReasonSyntaxError)
	rej("body", "byte-order-mark", rAct, "\xef\xbb\xbf"+renew, events.ReasonSyntaxError)
	rej("body", "top-level-array", rAct, `[`+renew+`]`, events.ReasonNotObject)
	rej("body", "top-level-string", rAct, `"renew"`, events.ReasonNotObject)
	rej("body", "top-level-number", rAct, `1`, events.ReasonNotObject)
	rej("body", "top-level-negative-number", rAct, `-1`, events.ReasonNotObject)
	rej("body", "top-level-true", rAct, `true`, events.ReasonNotObject)
	rej("body", "top-level-null", rAct, `null`, events.ReasonNotObject)
	rej("body", "truncated-literal-nul", rAct, `nul`, events.ReasonSyntaxError)
	rej("body", "lone-open-brace", rAct, `{`, events.ReasonSyntaxError)
	rej("body", "single-quotes", rAct, `{'v':1}`, events.ReasonSyntaxError)
	rej("body", "unquoted-key", rAct, `{v:1}`, events.ReasonSyntaxError)
	rej("body", "comment", rAct, `{/*c*/"v":1}`, events.ReasonSyntaxError)
	rej("body", "cut-short", rAct, `{"v":1,"lease_id":"$ACT"`, events.ReasonSyntaxError)
	rej("body", "invalid-escape", pAct, progress(`\x41`), events.ReasonSyntaxError)

	// --- version ---
	ack := w1("fx-active", "ack")
	rej("version", "v-0", ack, `{"v":0,"lease_id":"$ACT","generation":2}`, events.ReasonUnsupportedVersion)
	rej("version", "v-2", ack, `{"v":2,"lease_id":"$ACT","generation":2}`, events.ReasonUnsupportedVersion)
	rej("version", "v-minus-1", ack, `{"v":-1,"lease_id":"$ACT","generation":2}`, events.ReasonUnsupportedVersion)
	rej("version", "v-string-1", ack, `{"v":"1","lease_id":"$ACT","generation":2}`, events.ReasonWrongType)
	rej("version", "v-1.0", ack, `{"v":1.0,"lease_id":"$ACT","generation":2}`, events.ReasonBadNumber).DecoderOnly = true
	rej("version", "v-missing", ack, `{"lease_id":"$ACT","generation":2}`, events.ReasonMissingField)
	rej("version", "v-missing-empty-object", ack, `{}`, events.ReasonMissingField)

	// --- wrong role for the verb ---
	rej("role", "worker-offer", w1("fx-active", "offer"), offer("w-1"), events.ReasonWrongRole)
	rej("role", "worker-cancel", w1("fx-active", "cancel"), `{"v":1}`, events.ReasonWrongRole)
	rej("role", "worker-resolve", w1("fx-victim", "resolve"), `{"v":1,"action":"revoke"}`, events.ReasonWrongRole)
	rej("role", "worker-tick", w1(events.NoJob, "tick"), `{"v":1}`, events.ReasonWrongRole)
	rej("role", "worker-policy", w1(events.NoJob, "policy"), policy("1", "2592000000", "2592000000", "1", "1", "2592000000", "1048576"), events.ReasonWrongRole)
	rej("role", "ops-renew", ops("fx-active", "renew"), `{"v":1,"lease_id":"$ACT","generation":1,"renew_seq":1}`, events.ReasonWrongRole)
	rej("role", "ops-ack", ops("fx-offer", "ack"), `{"v":1,"lease_id":"$OFFER","generation":1}`, events.ReasonWrongRole)
	rej("role", "ops-release", ops("fx-active", "release"), `{"v":1,"lease_id":"$ACT","generation":1}`, events.ReasonWrongRole)
	rej("role", "ops-tick", ops(events.NoJob, "tick"), `{"v":1}`, events.ReasonWrongRole)
	rej("role", "coord-acquire", inSubject("coord", "c1", "fx-new", "acquire"), `{"v":1}`, events.ReasonWrongRole)
	rej("role", "coord-offer", inSubject("coord", "c1", "fx-new", "offer"), offer("w-1"), events.ReasonWrongRole)
	rej("role", "coord-batch-renew", inSubject("coord", "c1", events.NoJob, "renew"), `{"v":1,"leases":[`+lease("tr-0")+`]}`, events.ReasonWrongRole)

	// --- identity mismatch ---
	rej("identity", "body-actor-other-worker", rAct, `{"v":1,"actor":"w-2","lease_id":"$ACT","generation":1,"renew_seq":1}`, events.ReasonIdentityMismatch)
	rej("identity", "body-actor-other-case", rAct, `{"v":1,"actor":"W-1","lease_id":"$ACT","generation":1,"renew_seq":1}`, events.ReasonIdentityMismatch)
	rej("identity", "body-job-other-job", rAct, `{"v":1,"job":"tr-0","lease_id":"$ACT","generation":1,"renew_seq":1}`, events.ReasonIdentityMismatch)
	rej("identity", "body-job-in-batch", batch, `{"v":1,"job":"fx-active","leases":[`+lease("fx-active")+`]}`, events.ReasonIdentityMismatch)
	rej("identity", "body-actor-on-acquire", w1("idm", "acquire"), `{"v":1,"actor":"w-2"}`, events.ReasonIdentityMismatch)
	rej("identity", "body-actor-on-offer", ops("idm", "offer"), `{"v":1,"actor":"disp2","holder":"w-1"}`, events.ReasonIdentityMismatch)

	// --- missing fields ---
	rej("missing", "renew-without-renew_seq", rAct, `{"v":1,"lease_id":"$ACT","generation":2}`, events.ReasonMissingField)
	rej("missing", "offer-without-holder", ops("inj", "offer"), `{"v":1,"lease_ms":1000}`, events.ReasonMissingField)
	rej("missing", "batch-without-leases", batch, `{"v":1}`, events.ReasonMissingField)
	rej("missing", "batch-empty-leases", batch, `{"v":1,"leases":[]}`, events.ReasonMissingField)
	rej("missing", "batch-element-empty-object", batch, `{"v":1,"leases":[{}]}`, events.ReasonMissingField)
	rej("missing", "batch-second-element-without-renew_seq", batch,
		`{"v":1,"leases":[`+lease("tr-0")+`,{"job":"tr-1","lease_id":"L1","generation":1}]}`, events.ReasonMissingField)
	rej("missing", "cancel-lease_id-without-generation", ops("fx-active", "cancel"), `{"v":1,"lease_id":"$ACT"}`, events.ReasonMissingField)
	rej("missing", "resolve-without-action", ops("fx-victim", "resolve"), `{"v":1,"reason":"x"}`, events.ReasonMissingField)
	rej("missing", "resolve-affirm-without-holder", ops("fx-victim", "resolve"), `{"v":1,"action":"affirm","lease_id":"$VICT","generation":1}`, events.ReasonMissingField)
	rej("missing", "result-without-outcome", w1("fx-active", "result"), `{"v":1,"lease_id":"$ACT","generation":2}`, events.ReasonMissingField)
	rej("missing", "progress-without-value", pAct, `{"v":1,"lease_id":"$ACT","generation":2,"progress_seq":1}`, events.ReasonMissingField)
	rej("missing", "policy-without-max_generations", polSubj,
		`{"v":1,"min_lease_ms":100,"max_lease_ms":3600000,"default_lease_ms":30000,"ack_timeout_ms":30000,"cancel_timeout_ms":60000,"max_lifetime_ms":86400000}`, events.ReasonMissingField)

	// --- enums and times ---
	res := w1("fx-active", "result")
	rej("enum", "outcome-lower-case", res, `{"v":1,"lease_id":"$ACT","generation":2,"outcome":"success"}`, events.ReasonBadEnum)
	rej("enum", "outcome-unknown", res, `{"v":1,"lease_id":"$ACT","generation":2,"outcome":"DONE"}`, events.ReasonBadEnum)
	rej("enum", "outcome-padded", res, `{"v":1,"lease_id":"$ACT","generation":2,"outcome":" SUCCESS"}`, events.ReasonBadEnum)
	rej("enum", "action-unknown", ops("fx-victim", "resolve"), `{"v":1,"action":"delete"}`, events.ReasonBadEnum)
	rej("enum", "settle-SUCCESS", ops("fx-done", "resolve"), `{"v":1,"action":"settle","outcome":"SUCCESS"}`, events.ReasonBadEnum)
	rej("time", "sent_at-prose", rAct, `{"v":1,"sent_at":"yesterday"}`, events.ReasonBadTime)
	rej("time", "sent_at-february-30", rAct, `{"v":1,"sent_at":"2026-02-30T00:00:00Z"}`, events.ReasonBadTime)
	rej("time", "sent_at-no-zone", rAct, `{"v":1,"sent_at":"2026-03-01T12:00:00"}`, events.ReasonBadTime)
	rej("time", "sent_at-year-9999", rAct, `{"v":1,"sent_at":"9999-01-01T00:00:00Z"}`, events.ReasonBadTime)
	rej("time", "sent_at-empty", rAct, `{"v":1,"sent_at":""}`, events.ReasonBadTime)

	// --- edges where decoders often slip ---
	add("edge", "note-256-bytes-after-unescaping-decodes", pAct, progress(strings.Repeat(`\u00e9`, 128)),
		events.KindLostAuthority, events.ReasonFutureGeneration, nil)
	add("edge", "valid-surrogate-pair-decodes", pAct, progress(`\ud83d\ude00`), events.KindLostAuthority, events.ReasonFutureGeneration, nil)
	rej("edge", "unknown-key-long-multibyte", rAct, `{"v":1,"a`+strings.Repeat("é", 100)+`":1}`, events.ReasonUnknownField)
	rej("edge", "unknown-key-with-quote-and-backslash", rAct, `{"v":1,"a\"b\\c":1}`, events.ReasonUnknownField)
	rej("edge", "key-V-escaped-u0056", rAct, `{"\u0056":1}`, events.ReasonCaseVariantKey)
	rej("edge", "form-feed-between-tokens", rAct, "{\"v\":1,\f\"lease_id\":\"L1\"}", events.ReasonSyntaxError)
	rej("edge", "no-break-space-between-tokens", rAct, "{\"v\":1,\u00a0\"lease_id\":\"L1\"}", events.ReasonSyntaxError)
	rej("edge", "number-1-2", rAct, gen("1-2"), events.ReasonBadNumber)
	rej("edge", "number-minus-leading-zero", rAct, gen("-01"), events.ReasonBadNumber)
	rej("edge", "number-trailing-dot", rAct, gen("1."), events.ReasonBadNumber)
	rej("edge", "number-leading-dot", rAct, gen(".5"), events.ReasonSyntaxError)
	rej("edge", "value-minus-zero", pAct, `{"v":1,"lease_id":"$ACT","generation":2,"progress_seq":1,"value":-0}`, events.ReasonBadNumber).DecoderOnly = true
	// sent_at is accepted from 1678-01-01 to the end of int64 nanoseconds.
	rej("edge", "sent_at-before-1678", rAct, `{"v":1,"sent_at":"1677-12-31T23:59:59Z"}`, events.ReasonBadTime)
	rej("edge", "sent_at-1ns-past-int64", rAct, `{"v":1,"sent_at":"2262-04-11T23:47:16.854775808Z"}`, events.ReasonBadTime)
	rej("edge", "batch-subject-with-single-renew-body", batch, `{"v":1,"lease_id":"$ACT","generation":1,"renew_seq":1}`, events.ReasonUnknownField)
	rej("edge", "batch-element-job-reserved-underscore", batch, `{"v":1,"leases":[`+lease("_")+`]}`, events.ReasonBadToken)
	rej("edge", "batch-element-lease_ms-above-policy", batch, `{"v":1,"leases":[{"job":"fx-active","lease_id":"$ACT","generation":1,"renew_seq":9007199254740991,"lease_ms":2592000000}]}`,
		events.ReasonDurationOutOfPolicy).Job = "fx-active"
	rej("edge", "offer-lease_ms-below-policy", ops("dur-x", "offer"), `{"v":1,"holder":"w-1","lease_ms":1}`, events.ReasonDurationOutOfPolicy)
	rej("edge", "cancel-generation-without-lease_id", ops("fx-active", "cancel"), `{"v":1,"generation":1}`, events.ReasonMissingField)
	rej("edge", "resolve-outcome-before-action-revoke", ops("fx-done", "resolve"), `{"v":1,"outcome":"FAILED","action":"revoke"}`, events.ReasonUnknownField)
	rej("edge", "progress-subject-without-job", w1(events.NoJob, "progress"), `{"v":1,"lease_id":"L1","generation":1,"progress_seq":1,"value":1}`, events.ReasonBadSubject)
	// Rules revision 7: an ack (a result) without a job is a batch, whose
	// body has leases, not a single ack's fields.
	rej("edge", "batch-ack-subject-with-single-body", w1(events.NoJob, "ack"), `{"v":1,"lease_id":"L1","generation":1}`, events.ReasonUnknownField)
	rej("edge", "batch-result-element-without-outcome", w1(events.NoJob, "result"), `{"v":1,"leases":[{"job":"fx-active","lease_id":"$ACT","generation":1}]}`, events.ReasonMissingField)

	// --- protocol misuse: well-formed inputs that claim what they do not hold ---
	// A job that never had a lease.
	add("protocol", "renew-unknown-job", w1("ghost", "renew"), `{"v":1,"lease_id":"L1","generation":1,"renew_seq":1}`, events.KindLostAuthority, events.ReasonNoSuchJob, nil)
	add("protocol", "ack-unknown-job", w1("ghost", "ack"), `{"v":1,"lease_id":"L1","generation":1}`, events.KindLostAuthority, events.ReasonNoSuchJob, nil)
	add("protocol", "progress-unknown-job", w1("ghost", "progress"), `{"v":1,"lease_id":"L1","generation":1,"progress_seq":1,"value":1}`, events.KindLostAuthority, events.ReasonNoSuchJob, nil)
	add("protocol", "result-unknown-job", w1("ghost", "result"), `{"v":1,"lease_id":"L1","generation":1,"outcome":"SUCCESS"}`, events.KindLostAuthority, events.ReasonNoSuchJob, nil)
	add("protocol", "release-unknown-job", w1("ghost", "release"), `{"v":1,"lease_id":"L1","generation":1}`, events.KindLostAuthority, events.ReasonNoSuchJob, nil)
	add("protocol", "cancel_ack-unknown-job", w1("ghost", "cancel_ack"), `{"v":1,"lease_id":"L1","generation":1}`, events.KindLostAuthority, events.ReasonNoSuchJob, nil)
	add("protocol", "batch-renew-unknown-job", batch, `{"v":1,"leases":[`+lease("ghost")+`]}`, events.KindLostAuthority, events.ReasonNoSuchJob, nil).Job = "ghost"
	rej("protocol", "cancel-unknown-job", ops("ghost", "cancel"), `{"v":1,"reason":"no such job"}`, events.ReasonNoSuchJob)
	rej("protocol", "resolve-revoke-unknown-job", ops("ghost", "resolve"), `{"v":1,"action":"revoke"}`, events.ReasonNoSuchJob)
	// Leases never held on a real job (fx-active, w-1, generation 1).
	add("protocol", "renew-lease-never-issued", rAct, `{"v":1,"lease_id":"L999999","generation":1,"renew_seq":1}`, events.KindLostAuthority, events.ReasonNoSuchLease, nil)
	add("protocol", "ack-lease-never-issued", ack, `{"v":1,"lease_id":"L999999","generation":1}`, events.KindLostAuthority, events.ReasonNoSuchLease, nil)
	add("protocol", "progress-lease-never-issued", pAct, `{"v":1,"lease_id":"L999999","generation":1,"progress_seq":1,"value":1}`, events.KindLostAuthority, events.ReasonNoSuchLease, nil)
	add("protocol", "result-lease-never-issued", res, `{"v":1,"lease_id":"L999999","generation":1,"outcome":"SUCCESS"}`, events.KindLostAuthority, events.ReasonNoSuchLease, nil)
	add("protocol", "release-lease-never-issued", w1("fx-active", "release"), `{"v":1,"lease_id":"L999999","generation":1}`, events.KindLostAuthority, events.ReasonNoSuchLease, nil)
	add("protocol", "cancel_ack-lease-never-issued", w1("fx-active", "cancel_ack"), `{"v":1,"lease_id":"L999999","generation":1}`, events.KindLostAuthority, events.ReasonNoSuchLease, nil)
	rej("protocol", "cancel-lease-never-issued", ops("fx-active", "cancel"), `{"v":1,"lease_id":"L999999","generation":1}`, events.ReasonNoSuchLease)
	// Future generations.
	add("protocol", "renew-future-generation", rAct, renew, events.KindLostAuthority, events.ReasonFutureGeneration, nil)
	add("protocol", "progress-future-generation", pAct, progress("x"), events.KindLostAuthority, events.ReasonFutureGeneration, nil)
	add("protocol", "release-future-generation", w1("fx-active", "release"), `{"v":1,"lease_id":"$ACT","generation":2}`, events.KindLostAuthority, events.ReasonFutureGeneration, nil)
	add("protocol", "ack-future-generation-of-offer", w3("fx-offer", "ack"), `{"v":1,"lease_id":"$OFFER","generation":2}`, events.KindLostAuthority, events.ReasonFutureGeneration, nil)
	rej("protocol", "cancel-future-generation", ops("fx-active", "cancel"), `{"v":1,"lease_id":"$ACT","generation":2}`, events.ReasonFutureGeneration)
	// Verb rules on the live, acquired fx-active.
	rej("protocol", "ack-of-acquired-lease", ack, `{"v":1,"lease_id":"$ACT","generation":1}`, events.ReasonNotOffered)
	rej("protocol", "cancel_ack-without-cancel", w1("fx-active", "cancel_ack"), `{"v":1,"lease_id":"$ACT","generation":1}`, events.ReasonNoCancelRequested)
	rej("protocol", "acquire-held-job", w2("fx-active", "acquire"), `{"v":1}`, events.ReasonLeaseHeld)
	rej("protocol", "offer-held-job", ops("fx-active", "offer"), offer("w-2"), events.ReasonLeaseHeld)
	rej("protocol", "resolve-affirm-nothing-to-resolve", ops("fx-active", "resolve"), `{"v":1,"action":"affirm","holder":"w-1","lease_id":"$ACT","generation":1}`, events.ReasonNothingToResolve)
	rej("protocol", "resolve-settle-nothing-to-resolve", ops("fx-active", "resolve"), `{"v":1,"action":"settle","outcome":"FAILED"}`, events.ReasonNothingToResolve)
	// Stale generation: fx-gen2 is at generation 2; each claim of generation 1 is counted.
	add("protocol", "renew-stale-generation", w1("fx-gen2", "renew"), `{"v":1,"lease_id":"$OLD","generation":1,"renew_seq":5}`, events.KindLostAuthority, events.ReasonStaleGeneration, stale)
	add("protocol", "progress-stale-generation", w1("fx-gen2", "progress"), `{"v":1,"lease_id":"$OLD","generation":1,"progress_seq":5,"value":50}`, events.KindStale, events.ReasonStaleGeneration, stale)
	add("protocol", "result-stale-generation", w1("fx-gen2", "result"), `{"v":1,"lease_id":"$OLD","generation":1,"outcome":"SUCCESS"}`, events.KindStale, events.ReasonStaleGeneration, stale)
	add("protocol", "ack-stale-generation", w1("fx-gen2", "ack"), `{"v":1,"lease_id":"$OLD","generation":1}`, events.KindStale, events.ReasonStaleGeneration, stale)
	add("protocol", "release-stale-generation", w1("fx-gen2", "release"), `{"v":1,"lease_id":"$OLD","generation":1}`, events.KindStale, events.ReasonStaleGeneration, stale)
	add("protocol", "cancel-stale-generation", ops("fx-gen2", "cancel"), `{"v":1,"lease_id":"$OLD","generation":1}`, events.KindStale, events.ReasonStaleGeneration, stale)
	add("protocol", "batch-renew-stale-generation", batch, `{"v":1,"leases":[{"job":"fx-gen2","lease_id":"$OLD","generation":1,"renew_seq":6}]}`,
		events.KindLostAuthority, events.ReasonStaleGeneration, stale).Job = "fx-gen2"
	// The ended fx-done (COMPLETED, SUCCESS).
	add("protocol", "renew-completed-lease", w1("fx-done", "renew"), `{"v":1,"lease_id":"$DONE","generation":1,"renew_seq":1}`, events.KindLostAuthority, events.ReasonLeaseEnded, nil)
	add("protocol", "progress-completed-lease", w1("fx-done", "progress"), `{"v":1,"lease_id":"$DONE","generation":1,"progress_seq":1,"value":1}`, events.KindLate, events.ReasonLeaseEnded, lateProgress)
	add("protocol", "result-SUCCESS-again", w1("fx-done", "result"), `{"v":1,"lease_id":"$DONE","generation":1,"outcome":"SUCCESS"}`, events.KindDuplicate, events.ReasonDuplicateResult, duplicate)
	rej("protocol", "result-FAILED-after-SUCCESS", w1("fx-done", "result"), `{"v":1,"lease_id":"$DONE","generation":1,"outcome":"FAILED"}`, events.ReasonResultConflicts)
	add("protocol", "release-completed-lease", w1("fx-done", "release"), `{"v":1,"lease_id":"$DONE","generation":1}`, events.KindLostAuthority, events.ReasonLeaseEnded, nil)
	add("protocol", "cancel_ack-completed-lease", w1("fx-done", "cancel_ack"), `{"v":1,"lease_id":"$DONE","generation":1}`, events.KindLostAuthority, events.ReasonLeaseEnded, nil)
	add("protocol", "other-holder-renews-ended-lease", w2("fx-done", "renew"), `{"v":1,"lease_id":"$DONE","generation":1,"renew_seq":1}`, events.KindLostAuthority, events.ReasonHolderMismatch, nil)
	rej("protocol", "acquire-closed-job", w2("fx-done", "acquire"), `{"v":1}`, events.ReasonJobClosed)
	rej("protocol", "offer-closed-job", ops("fx-done", "offer"), offer("w-2"), events.ReasonJobClosed)
	rej("protocol", "cancel-no-live-lease", ops("fx-done", "cancel"), `{"v":1}`, events.ReasonNoLiveLease)
	rej("protocol", "resolve-revoke-nothing-to-resolve", ops("fx-done", "resolve"), `{"v":1,"action":"revoke"}`, events.ReasonNothingToResolve)
	// The offered, not yet ACKed fx-offer (holder w-3).
	rej("protocol", "renew-before-ack", w3("fx-offer", "renew"), `{"v":1,"lease_id":"$OFFER","generation":1,"renew_seq":1}`, events.ReasonNotAcked)
	rej("protocol", "progress-before-ack", w3("fx-offer", "progress"), `{"v":1,"lease_id":"$OFFER","generation":1,"progress_seq":1,"value":1}`, events.ReasonNotAcked)
	rej("protocol", "result-before-ack", w3("fx-offer", "result"), `{"v":1,"lease_id":"$OFFER","generation":1,"outcome":"SUCCESS"}`, events.ReasonNotAcked)
	rej("protocol", "cancel_ack-before-ack", w3("fx-offer", "cancel_ack"), `{"v":1,"lease_id":"$OFFER","generation":1}`, events.ReasonNotAcked)
	rej("protocol", "acquire-offered-job", w1("fx-offer", "acquire"), `{"v":1}`, events.ReasonLeaseHeld)
	// Another worker claims fx-victim (w-1's live lease): an ownership conflict,
	// counted and recorded; from then on the job is blocked until resolve.
	add("protocol", "batch-renew-of-another-workers-lease", w2(events.NoJob, "renew"),
		`{"v":1,"leases":[{"job":"fx-victim","lease_id":"$VICT","generation":1,"renew_seq":1}]}`,
		events.KindConflict, events.ReasonOwnershipConflict, claimedBy("w-2")).Job = "fx-victim"
	add("protocol", "ack-of-another-workers-lease", w2("fx-victim", "ack"), `{"v":1,"lease_id":"$VICT","generation":1}`,
		events.KindConflict, events.ReasonOwnershipConflict, claimedBy("w-2"))
	add("protocol", "holder-renews-during-conflict", w1("fx-victim", "renew"), `{"v":1,"lease_id":"$VICT","generation":1,"renew_seq":1}`,
		events.KindConflict, events.ReasonConflictPending, nil)
	rej("protocol", "acquire-during-conflict", w1("fx-victim", "acquire"), `{"v":1}`, events.ReasonConflictPending)
	rej("protocol", "resolve-affirm-wrong-holder", ops("fx-victim", "resolve"), `{"v":1,"action":"affirm","holder":"w-2","lease_id":"$VICT","generation":1}`, events.ReasonAffirmMismatch)
	rej("protocol", "resolve-settle-not-unresolved", ops("fx-victim", "resolve"), `{"v":1,"action":"settle","outcome":"CANCELLED"}`, events.ReasonNothingToResolve)

	// Queues (rules revision 4): malformed submits and pulls, wrong roles,
	// and misuse of the QUEUED fx-queued. A pull is never in this
	// catalogue: every well-formed one is accepted (capacity_set).
	pull := w1(events.NoJob, "pull")
	sub := ops("fx-q-new", "submit")
	rej("queue", "submit-no-queue", sub, `{"v":1}`, events.ReasonMissingField)
	rej("queue", "submit-queue-bad-token", sub, `{"v":1,"queue":"a.b"}`, events.ReasonBadToken)
	rej("queue", "submit-queue-reserved", sub, `{"v":1,"queue":"_"}`, events.ReasonBadToken)
	rej("queue", "submit-priority-10", sub, `{"v":1,"queue":"q","priority":10}`, events.ReasonBadValue)
	rej("queue", "submit-priority-negative", sub, `{"v":1,"queue":"q","priority":-1}`, events.ReasonBadValue)
	rej("queue", "submit-max-attempts-0", sub, `{"v":1,"queue":"q","max_attempts":0}`, events.ReasonBadValue)
	rej("queue", "submit-max-attempts-1001", sub, `{"v":1,"queue":"q","max_attempts":1001}`, events.ReasonBadValue)
	rej("queue", "submit-max-attempts-2^64", sub, `{"v":1,"queue":"q","max_attempts":18446744073709551616}`, events.ReasonBadValue)
	rej("queue", "submit-backoff-max-below-backoff", sub, `{"v":1,"queue":"q","backoff_ms":2000,"backoff_max_ms":1000}`, events.ReasonBadValue).DecoderOnly = true
	rej("queue", "submit-backoff-31-days", sub, `{"v":1,"queue":"q","backoff_ms":2678400000}`, events.ReasonBadDuration)
	rej("queue", "submit-payload-4097", sub, `{"v":1,"queue":"q","payload":"`+strings.Repeat("x", 4097)+`"}`, events.ReasonTooLarge)
	rej("queue", "submit-payload-4097-escaped", sub, `{"v":1,"queue":"q","payload":"`+strings.Repeat(`\u00e9`, 2049)+`"}`, events.ReasonTooLarge).DecoderOnly = true
	rej("queue", "submit-payload-lone-surrogate", sub, `{"v":1,"queue":"q","payload":"\ud800"}`, events.ReasonInvalidUtf8)
	rej("queue", "submit-payload-not-string", sub, `{"v":1,"queue":"q","payload":{"a":1}}`, events.ReasonWrongType)
	rej("queue", "submit-lease-out-of-policy", sub, `{"v":1,"queue":"q","lease_ms":50}`, events.ReasonDurationOutOfPolicy)
	rej("queue", "submit-by-worker", w1("fx-q-new", "submit"), `{"v":1,"queue":"q"}`, events.ReasonWrongRole)
	rej("queue", "submit-of-a-leased-job", ops("fx-active", "submit"), `{"v":1,"queue":"q"}`, events.ReasonJobExists)
	rej("queue", "submit-conflicting-body", ops("fx-queued", "submit"), `{"v":1,"queue":"fx-q","payload":"other"}`, events.ReasonSubmitConflicts)
	add("queue", "submit-same-body-again", ops("fx-queued", "submit"), `{"v":1,"queue":"fx-q","payload":"p"}`, events.KindDuplicate, events.ReasonDuplicateSubmit, nil)
	rej("queue", "pull-slots-257", pull, `{"v":1,"queue":"q","slots":257}`, events.ReasonBadValue)
	rej("queue", "pull-slots-negative", pull, `{"v":1,"queue":"q","slots":-1}`, events.ReasonBadValue)
	rej("queue", "pull-no-slots", pull, `{"v":1,"queue":"q"}`, events.ReasonMissingField)
	rej("queue", "pull-ttl-over-10-minutes", pull, `{"v":1,"queue":"q","slots":1,"ttl_ms":600001}`, events.ReasonBadDuration)
	rej("queue", "pull-with-a-job-token", w1("fx-queued", "pull"), `{"v":1,"queue":"fx-q","slots":1}`, events.ReasonBadSubject)
	rej("queue", "pull-by-ops", inSubject("ops", "disp", events.NoJob, "pull"), `{"v":1,"queue":"q","slots":1}`, events.ReasonWrongRole)
	rej("queue", "pull-unknown-field", pull, `{"v":1,"queue":"q","slots":1,"priority":9}`, events.ReasonUnknownField)
	rej("queue", "acquire-queued-job", w1("fx-queued", "acquire"), `{"v":1}`, events.ReasonJobQueued)
	rej("queue", "offer-queued-job", ops("fx-queued", "offer"), `{"v":1,"holder":"w-1"}`, events.ReasonJobQueued)
	add("queue", "ack-of-a-queued-job-never-offered", w1("fx-queued", "ack"), `{"v":1,"lease_id":"L1-AAAAAAAAAAAAAAAAAAAAAA","generation":1}`, events.KindLostAuthority, events.ReasonNoSuchJob, nil)
	rej("queue", "retry-not-dead", ops("fx-queued", "resolve"), `{"v":1,"action":"retry"}`, events.ReasonNothingToResolve)
	rej("queue", "discard-not-dead", ops("fx-queued", "resolve"), `{"v":1,"action":"discard"}`, events.ReasonNothingToResolve)
	rej("queue", "retry-with-lease-fields", ops("fx-queued", "resolve"), `{"v":1,"action":"retry","generation":1}`, events.ReasonUnknownField)
	rej("queue", "result-permanent-success", w1("fx-active", "result"), `{"v":1,"lease_id":"$ACT","generation":1,"outcome":"SUCCESS","permanent":true}`, events.ReasonBadValue)
	rej("queue", "result-permanent-not-bool", w1("fx-active", "result"), `{"v":1,"lease_id":"$ACT","generation":1,"outcome":"FAILED","permanent":1}`, events.ReasonWrongType)
	return cs
}
