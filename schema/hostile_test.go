package schema

import (
	"fmt"
	"strings"
	"testing"

	"github.com/maknow/tenure/events"
)

// hostileCase is a malformed input of the catalogue of
// coordinator/hostile_test.go (TestHostileInputs), copied here with its
// subject, body and reason: the cases whose reason is a schema matter,
// and the boundary cases the decoder accepts. The catalogue's lease id
// placeholders ($ACT, ...) are replaced by lease ids of the right shape
// (the verdicts that depend on them are the fold's, not the decoder's).
// Left out: the subjects (bad_subject, wrong_role), duplicate keys,
// invalid UTF-8, identities, bad policies, the durations out of policy,
// and the cases whose fault is a decoder-only rule (an integer written
// 1.0, 1e3, 1E+0 or -0 where 0 is in range; a text or payload over its
// limit in bytes only; a body over 65,536 bytes of valid JSON;
// backoff_max_ms below a given backoff_ms; sent_at one nanosecond past
// int64): decoderOnlyRules has one of each.
type hostileCase struct {
	cat, name string
	subject   string
	body      string
	reason    events.Reason // "": the decoder accepts it
}

func hostileCases() []hostileCase {
	const act = "L3-0FMQ6F4uKWTSoQx6pHrB5g" // stands for $ACT
	inSubject := func(role, actor, job, verb string) string {
		return events.InputPrefix + "." + role + "." + actor + "." + job + "." + verb
	}
	var cs []hostileCase
	rej := func(cat, name, subject, body string, reason events.Reason) {
		cs = append(cs, hostileCase{cat, name, subject, strings.ReplaceAll(body, "$ACT", act), reason})
	}
	ok := func(cat, name, subject, body string) { rej(cat, name, subject, body, "") }
	w1 := func(job, verb string) string { return inSubject("worker", "w-1", job, verb) }
	ops := func(job, verb string) string { return inSubject("ops", "disp", job, verb) }
	batch := w1(events.NoJob, "renew")
	const renew = `{"v":1,"lease_id":"$ACT","generation":2,"renew_seq":1}`
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
	rej("size", "body-100000-byte-note", pAct, progress(long('a', 100000)), events.ReasonTooLarge)
	ok("size", "body-exactly-65536-bytes-decodes", rAct, pad(renewFixed, events.MaxInputBytes))
	rej("size", "note-257-bytes", pAct, progress(long('n', 257)), events.ReasonTooLarge)
	ok("size", "note-256-bytes-decodes", pAct, progress(long('n', 256)))
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
	ok("size", "lease-id-64-chars-decodes", rAct, `{"v":1,"lease_id":"`+long('L', 64)+`","generation":1,"renew_seq":1}`)
	ok("size", "subject-job-64-chars-decodes", w1(long('j', 64), "ack"), `{"v":1,"lease_id":"L1","generation":1}`)
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

	// --- nulls ---
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
	rej("integer", "minus-zero", rAct, gen("-0"), events.ReasonBadNumber) // -0 is 0, below a sequence's 1
	rej("integer", "zero", rAct, gen("0"), events.ReasonBadSequence)
	rej("integer", "minus-one", rAct, gen("-1"), events.ReasonBadSequence)
	rej("integer", "leading-zero", rAct, gen("01"), events.ReasonBadNumber)
	rej("integer", "plus-one", rAct, gen("+1"), events.ReasonBadNumber)
	rej("integer", "lone-minus", rAct, gen("-"), events.ReasonBadNumber)
	rej("integer", "2^53", rAct, gen("9007199254740992"), events.ReasonBadSequence)
	ok("integer", "2^53-1-decodes", rAct, gen("9007199254740991"))
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
	rej("duration", "acquire-30-days-plus-1ms", w1("dur-x", "acquire"), acq("2592000001"), events.ReasonBadDuration)
	rej("duration", "acquire-huge", w1("dur-x", "acquire"), acq("1"+long('0', 30)), events.ReasonBadDuration)
	rej("duration", "acquire-fraction", w1("dur-x", "acquire"), acq("1.5"), events.ReasonBadNumber)
	rej("duration", "acquire-minus-zero", w1("dur-x", "acquire"), acq("-0"), events.ReasonBadNumber) // 0, below a duration's 1
	rej("duration", "offer-ack_timeout-zero", ops("dur-x", "offer"), `{"v":1,"holder":"w-1","ack_timeout_ms":0}`, events.ReasonBadDuration)
	rej("duration", "batch-lease_ms-negative", batch, `{"v":1,"leases":[{"job":"tr-0","lease_id":"L1","generation":1,"renew_seq":1,"lease_ms":-5}]}`, events.ReasonBadDuration)
	rej("duration", "policy-cancel_timeout-30-days-plus-1ms", polSubj, policy("100", "3600000", "30000", "30000", "2592000001", "86400000", "1000"), events.ReasonBadDuration)

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
	for _, h := range []struct{ name, holder string }{
		{"holder-w1.x", "w1.x"}, {"holder-w1-space-x", "w1 x"}, {"holder-star", "*"}, {"holder-gt", ">"},
		{"holder-empty", ""}, {"holder-reserved-underscore", "_"}, {"holder-escaped-dot", `w1\u002ex`},
		{"holder-decision-subject", "tenure.out.w-1.>"}, {"holder-non-ascii", "wé"},
	} {
		rej("injection", h.name, ops("inj", "offer"), offer(h.holder), events.ReasonBadToken)
	}
	rej("injection", "lease_id-wildcard", rAct, `{"v":1,"lease_id":"L1.>","generation":2,"renew_seq":1}`, events.ReasonBadToken)
	rej("injection", "batch-job-wildcard", batch, `{"v":1,"leases":[{"job":"tr-0.*","lease_id":"L1","generation":1,"renew_seq":1}]}`, events.ReasonBadToken)
	rej("injection", "body-actor-with-dot", rAct, `{"v":1,"actor":"w-1.x"}`, events.ReasonBadToken)
	rej("injection", "body-actor-reserved-underscore", rAct, `{"v":1,"actor":"_"}`, events.ReasonBadToken)
	rej("injection", "body-job-star", rAct, `{"v":1,"job":"*"}`, events.ReasonBadToken)
	rej("injection", "resolve-affirm-holder-gt", ops("fx-victim", "resolve"), `{"v":1,"action":"affirm","holder":">","lease_id":"$ACT","generation":1}`, events.ReasonBadToken)

	// --- trailing data ---
	rej("trailing", "second-object", rAct, renew+renew, events.ReasonTrailingData)
	rej("trailing", "garbage", rAct, renew+" xyz", events.ReasonTrailingData)
	rej("trailing", "NUL", rAct, renew+"\x00", events.ReasonTrailingData)
	rej("trailing", "extra-close-brace", rAct, renew+"}", events.ReasonTrailingData)
	rej("trailing", "comma-before-close", rAct, `{"v":1,"lease_id":"$ACT","generation":2,"renew_seq":1,}`, events.ReasonSyntaxError)

	// --- empty, whitespace, BOM, top-level non-objects, broken JSON ---
	for _, b := range []struct {
		name, body string
		reason     events.Reason
	}{
		{"empty", "", events.ReasonSyntaxError}, {"whitespace", " \t\r\n ", events.ReasonSyntaxError},
		{"byte-order-mark", "\xef\xbb\xbf" + renew, events.ReasonSyntaxError}, {"top-level-array", `[` + renew + `]`, events.ReasonNotObject},
		{"top-level-string", `"renew"`, events.ReasonNotObject}, {"top-level-number", `1`, events.ReasonNotObject},
		{"top-level-negative-number", `-1`, events.ReasonNotObject}, {"top-level-true", `true`, events.ReasonNotObject},
		{"top-level-null", `null`, events.ReasonNotObject}, {"truncated-literal-nul", `nul`, events.ReasonSyntaxError},
		{"lone-open-brace", `{`, events.ReasonSyntaxError}, {"single-quotes", `{'v':1}`, events.ReasonSyntaxError},
		{"unquoted-key", `{v:1}`, events.ReasonSyntaxError}, {"comment", `{/*c*/"v":1}`, events.ReasonSyntaxError},
		{"cut-short", `{"v":1,"lease_id":"$ACT"`, events.ReasonSyntaxError},
	} {
		rej("body", b.name, rAct, b.body, b.reason)
	}
	rej("body", "invalid-escape", pAct, progress(`\x41`), events.ReasonSyntaxError)

	// --- version ---
	ack := w1("fx-active", "ack")
	rej("version", "v-0", ack, `{"v":0,"lease_id":"$ACT","generation":2}`, events.ReasonUnsupportedVersion)
	rej("version", "v-2", ack, `{"v":2,"lease_id":"$ACT","generation":2}`, events.ReasonUnsupportedVersion)
	rej("version", "v-minus-1", ack, `{"v":-1,"lease_id":"$ACT","generation":2}`, events.ReasonUnsupportedVersion)
	rej("version", "v-string-1", ack, `{"v":"1","lease_id":"$ACT","generation":2}`, events.ReasonWrongType)
	rej("version", "v-missing", ack, `{"lease_id":"$ACT","generation":2}`, events.ReasonMissingField)
	rej("version", "v-missing-empty-object", ack, `{}`, events.ReasonMissingField)

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
	rej("missing", "resolve-affirm-without-holder", ops("fx-victim", "resolve"), `{"v":1,"action":"affirm","lease_id":"$ACT","generation":1}`, events.ReasonMissingField)
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
	ok("edge", "note-256-bytes-after-unescaping-decodes", pAct, progress(strings.Repeat(`\u00e9`, 128)))
	ok("edge", "valid-surrogate-pair-decodes", pAct, progress(`\ud83d\ude00`))
	rej("edge", "unknown-key-long-multibyte", rAct, `{"v":1,"a`+strings.Repeat("é", 100)+`":1}`, events.ReasonUnknownField)
	rej("edge", "unknown-key-with-quote-and-backslash", rAct, `{"v":1,"a\"b\\c":1}`, events.ReasonUnknownField)
	rej("edge", "key-V-escaped-u0056", rAct, `{"\u0056":1}`, events.ReasonCaseVariantKey)
	rej("edge", "form-feed-between-tokens", rAct, "{\"v\":1,\f\"lease_id\":\"L1\"}", events.ReasonSyntaxError)
	rej("edge", "no-break-space-between-tokens", rAct, "{\"v\":1,\u00a0\"lease_id\":\"L1\"}", events.ReasonSyntaxError)
	rej("edge", "number-1-2", rAct, gen("1-2"), events.ReasonBadNumber)
	rej("edge", "number-minus-leading-zero", rAct, gen("-01"), events.ReasonBadNumber)
	rej("edge", "number-trailing-dot", rAct, gen("1."), events.ReasonBadNumber)
	rej("edge", "number-leading-dot", rAct, gen(".5"), events.ReasonSyntaxError)
	rej("edge", "sent_at-before-1678", rAct, `{"v":1,"sent_at":"1677-12-31T23:59:59Z"}`, events.ReasonBadTime)
	rej("edge", "batch-subject-with-single-renew-body", batch, `{"v":1,"lease_id":"$ACT","generation":1,"renew_seq":1}`, events.ReasonUnknownField)
	rej("edge", "batch-element-job-reserved-underscore", batch, `{"v":1,"leases":[`+lease("_")+`]}`, events.ReasonBadToken)
	rej("edge", "cancel-generation-without-lease_id", ops("fx-active", "cancel"), `{"v":1,"generation":1}`, events.ReasonMissingField)
	rej("edge", "resolve-outcome-before-action-revoke", ops("fx-done", "resolve"), `{"v":1,"outcome":"FAILED","action":"revoke"}`, events.ReasonUnknownField)

	// --- queues (rules revision 4) ---
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
	rej("queue", "submit-backoff-31-days", sub, `{"v":1,"queue":"q","backoff_ms":2678400000}`, events.ReasonBadDuration)
	rej("queue", "submit-payload-4097", sub, `{"v":1,"queue":"q","payload":"`+strings.Repeat("x", 4097)+`"}`, events.ReasonTooLarge)
	rej("queue", "submit-payload-not-string", sub, `{"v":1,"queue":"q","payload":{"a":1}}`, events.ReasonWrongType)
	rej("queue", "pull-slots-257", pull, `{"v":1,"queue":"q","slots":257}`, events.ReasonBadValue)
	rej("queue", "pull-slots-negative", pull, `{"v":1,"queue":"q","slots":-1}`, events.ReasonBadValue)
	rej("queue", "pull-no-slots", pull, `{"v":1,"queue":"q"}`, events.ReasonMissingField)
	rej("queue", "pull-ttl-over-10-minutes", pull, `{"v":1,"queue":"q","slots":1,"ttl_ms":600001}`, events.ReasonBadDuration)
	rej("queue", "pull-unknown-field", pull, `{"v":1,"queue":"q","slots":1,"priority":9}`, events.ReasonUnknownField)
	rej("queue", "retry-with-lease-fields", ops("fx-queued", "resolve"), `{"v":1,"action":"retry","generation":1}`, events.ReasonUnknownField)
	rej("queue", "result-permanent-success", w1("fx-active", "result"), `{"v":1,"lease_id":"$ACT","generation":1,"outcome":"SUCCESS","permanent":true}`, events.ReasonBadValue)
	rej("queue", "result-permanent-not-bool", w1("fx-active", "result"), `{"v":1,"lease_id":"$ACT","generation":1,"outcome":"FAILED","permanent":1}`, events.ReasonWrongType)
	return cs
}

// Each hostile case gets the catalogue's reason from the decoder, and the
// schema agrees: it rejects every one whose reason is a schema matter and
// accepts the boundary cases the decoder accepts.
func TestHostileCatalogue(t *testing.T) {
	a := newAgreement(t, nil)
	names := map[string]bool{}
	for _, c := range hostileCases() {
		name := c.cat + "/" + c.name
		if names[name] {
			t.Fatalf("%s twice", name)
		}
		names[name] = true
		if r := a.check(name, c.subject, []byte(c.body)); r != c.reason {
			t.Errorf("%s: the decoder says %q, the catalogue %q", name, r, c.reason)
		}
		if c.reason != "" && reasonCoverage[c.reason].c == decoderOnly {
			t.Errorf("%s: reason %s is decoder-only: not a case of this table", name, c.reason)
		}
	}
	if len(names) < 200 {
		t.Errorf("only %d cases", len(names))
	}
	a.done()
}
