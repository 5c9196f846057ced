package chaos

import (
	"strings"

	"github.com/maknow/tenure/events"
)

// badInput is one malformed or hostile input of the hostile worker's
// bad-input attack. The catalogue is a representative subset of the
// coordinator's (coordinator/hostile_test.go, hostileCatalogue, a test file
// of another package), adapted to what a worker holding nothing but its own
// credentials can send: its own subjects, with the job of another worker in
// the job position and a guessed lease id; and, to be refused by the
// server, the subjects of other actors and roles.
//
// In Subject and Body, $SELF is the hostile worker's id, $JOB a job of
// another worker (or one that does not exist), $OTHER another worker's id,
// $COORD a coordinator's, $LEASE a guessed lease id.
type badInput struct {
	Cat, Name string
	Subject   string // the whole subject
	Body      string
	// Pad pads the body with spaces to this many bytes; -1: to the largest
	// message the server accepts from the worker (its max_payload, less
	// the headers).
	Pad int
	// Kind and Reason are the one verdict the input must get whatever
	// $JOB's state: it is refused before the fold looks at any job
	// (catalogueTest checks this against every kind of job). Kind 0: the
	// verdict depends on the job; it must only not be accepted (the
	// hostile checks).
	Kind   events.Kind
	Reason events.Reason
	// Refused: the server must refuse to store it (another actor's or
	// role's subject: a permissions violation).
	Refused bool
}

// catalogue returns the hostile worker's bad inputs.
func catalogue() []badInput {
	var cs []badInput
	own := func(tail string) string { return "tenure.in.worker.$SELF." + tail }
	rej := func(cat, name, subject, body string, reason events.Reason) *badInput {
		cs = append(cs, badInput{Cat: cat, Name: name, Subject: subject, Body: body, Kind: events.KindRejected, Reason: reason})
		return &cs[len(cs)-1]
	}
	judged := func(cat, name, subject, body string) *badInput {
		cs = append(cs, badInput{Cat: cat, Name: name, Subject: subject, Body: body})
		return &cs[len(cs)-1]
	}
	refused := func(cat, name, subject, body string) {
		cs = append(cs, badInput{Cat: cat, Name: name, Subject: subject, Body: body, Refused: true})
	}
	renew := own("$JOB.renew")
	progress := own("$JOB.progress")
	batch := own("_.renew")
	const claim = `{"v":1,"lease_id":"$LEASE","generation":1,"renew_seq":1}`
	note := func(n string) string {
		return `{"v":1,"lease_id":"$LEASE","generation":1,"progress_seq":1,"value":5,"note":"` + n + `"}`
	}
	long := func(c string, n int) string { return strings.Repeat(c, n) }

	// size (the largest the server accepts, the largest the protocol does)
	rej("size", "body-65537-bytes", renew, claim, events.ReasonTooLarge).Pad = events.MaxInputBytes + 1
	rej("size", "body-max-payload", renew, claim, events.ReasonTooLarge).Pad = -1
	judged("size", "body-exactly-65536-bytes-decodes", renew, claim).Pad = events.MaxInputBytes
	rej("size", "note-257-bytes", progress, note(long("n", 257)), events.ReasonTooLarge)
	rej("size", "lease-id-65-chars", renew, `{"v":1,"lease_id":"`+long("L", 65)+`","generation":1,"renew_seq":1}`, events.ReasonBadToken)
	rej("size", "subject-job-65-chars", own(long("j", 65)+".renew"), claim, events.ReasonBadSubject)
	{
		var b strings.Builder
		b.WriteString(`{"v":1,"leases":[`)
		for i := range events.MaxBatch + 1 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"job":"$JOB","lease_id":"$LEASE","generation":1,"renew_seq":1}`)
		}
		b.WriteString(`]}`)
		rej("size", "batch-257-leases", batch, b.String(), events.ReasonTooLarge)
	}
	// nesting, duplicate and case-variant keys, unknown fields, nulls, types
	rej("nesting", "generation-8-nested-arrays", renew, `{"v":1,"lease_id":"$LEASE","generation":[[[[[[[[1]]]]]]]],"renew_seq":1}`, events.ReasonTooDeep)
	rej("nesting", "generation-65000-open-brackets", renew, `{"v":1,"generation":`+long("[", 65000), events.ReasonTooDeep)
	rej("nesting", "body-65000-open-braces", renew, long("{", 65000), events.ReasonSyntaxError)
	rej("duplicate", "v-twice-escaped-u0076", renew, `{"v":1,"\u0076":1,"lease_id":"$LEASE","generation":1,"renew_seq":1}`, events.ReasonDuplicateKey)
	rej("duplicate", "generation-twice-other-value", renew, `{"v":1,"lease_id":"$LEASE","generation":2,"renew_seq":1,"generation":1}`, events.ReasonDuplicateKey)
	rej("case", "key-Lease_ID", renew, `{"v":1,"Lease_ID":"$LEASE","generation":1,"renew_seq":1}`, events.ReasonCaseVariantKey)
	rej("case", "key-lease_id-with-long-s-U017F", renew, `{"v":1,"lea\u017fe_id":"$LEASE","generation":1,"renew_seq":1}`, events.ReasonCaseVariantKey)
	rej("unknown", "holder-in-renew", renew, `{"v":1,"lease_id":"$LEASE","generation":1,"renew_seq":1,"holder":"$SELF"}`, events.ReasonUnknownField)
	rej("unknown", "holder-in-batch-element", batch, `{"v":1,"leases":[{"job":"$JOB","holder":"$OTHER"}]}`, events.ReasonUnknownField)
	rej("null", "generation", renew, `{"v":1,"lease_id":"$LEASE","generation":null}`, events.ReasonNullValue)
	rej("null", "batch-element", batch, `{"v":1,"leases":[null]}`, events.ReasonNullValue)
	rej("type", "generation-string", renew, `{"v":1,"lease_id":"$LEASE","generation":"1","renew_seq":1}`, events.ReasonWrongType)
	rej("type", "outcome-number", own("$JOB.result"), `{"v":1,"lease_id":"$LEASE","generation":1,"outcome":1}`, events.ReasonWrongType)
	// numbers, durations, text
	rej("integer", "2^64", renew, `{"v":1,"lease_id":"$LEASE","generation":18446744073709551616,"renew_seq":1}`, events.ReasonBadSequence)
	rej("integer", "exponent-1e3", renew, `{"v":1,"lease_id":"$LEASE","generation":1e3,"renew_seq":1}`, events.ReasonBadNumber)
	rej("integer", "progress-value-101", progress, `{"v":1,"lease_id":"$LEASE","generation":1,"progress_seq":1,"value":101}`, events.ReasonBadValue)
	rej("duration", "acquire-negative", own("$JOB.acquire"), `{"v":1,"lease_ms":-1}`, events.ReasonBadDuration)
	rej("duration", "acquire-huge", own("$JOB.acquire"), `{"v":1,"lease_ms":1`+long("0", 30)+`}`, events.ReasonBadDuration)
	rej("utf8", "raw-0xff", progress, note("ab\xffcd"), events.ReasonInvalidUtf8)
	rej("utf8", "escaped-lone-high-surrogate", progress, note(`\ud800`), events.ReasonInvalidUtf8)
	rej("control", "raw-NUL", progress, note("a\x00b"), events.ReasonControlChar)
	rej("control", "escaped-newline", progress, note(`a\nb`), events.ReasonControlChar)
	rej("injection", "lease_id-wildcard", renew, `{"v":1,"lease_id":"L1.>","generation":1,"renew_seq":1}`, events.ReasonBadToken)
	rej("injection", "batch-job-wildcard", batch, `{"v":1,"leases":[{"job":"$JOB.*","lease_id":"$LEASE","generation":1,"renew_seq":1}]}`, events.ReasonBadToken)
	rej("trailing", "second-object", renew, claim+claim, events.ReasonTrailingData)
	rej("body", "empty", renew, "", events.ReasonSyntaxError)
	rej("body", "top-level-array", renew, `[`+claim+`]`, events.ReasonNotObject)
	rej("body", "byte-order-mark", renew, "\xef\xbb\xbf"+claim, events.ReasonSyntaxError)
	rej("version", "v-2", own("$JOB.ack"), `{"v":2,"lease_id":"$LEASE","generation":1}`, events.ReasonUnsupportedVersion)
	rej("version", "v-missing", own("$JOB.ack"), `{"lease_id":"$LEASE","generation":1}`, events.ReasonMissingField)
	rej("missing", "renew-without-renew_seq", renew, `{"v":1,"lease_id":"$LEASE","generation":1}`, events.ReasonMissingField)
	rej("missing", "result-without-outcome", own("$JOB.result"), `{"v":1,"lease_id":"$LEASE","generation":1}`, events.ReasonMissingField)
	rej("enum", "outcome-lower-case", own("$JOB.result"), `{"v":1,"lease_id":"$LEASE","generation":1,"outcome":"success"}`, events.ReasonBadEnum)
	rej("time", "sent_at-february-30", renew, `{"v":1,"sent_at":"2026-02-30T00:00:00Z"}`, events.ReasonBadTime)
	// malformed subjects on its own subjects: too many and too few tokens
	rej("subject", "too-many-tokens", own("$JOB.x.y.renew"), claim, events.ReasonBadSubject)
	rej("subject", "seven-tokens", own("$JOB.renew.extra"), claim, events.ReasonBadSubject)
	rej("subject", "too-few-tokens", own("$JOB"), claim, events.ReasonBadSubject)
	rej("subject", "unknown-verb", own("$JOB.steal"), claim, events.ReasonBadSubject)
	rej("subject", "upper-case-verb", own("$JOB.Renew"), claim, events.ReasonBadSubject)
	rej("subject", "acquire-without-job", own("_.acquire"), `{"v":1}`, events.ReasonBadSubject)
	rej("subject", "progress-without-job", own("_.progress"), `{"v":1,"lease_id":"$LEASE","generation":1,"progress_seq":1,"value":1}`, events.ReasonBadSubject)
	rej("subject", "batch-ack-with-single-body", own("_.ack"), `{"v":1,"lease_id":"$LEASE","generation":1}`, events.ReasonUnknownField) // rules revision 7: a batch
	// wrong roles: the verbs of dispatchers, operators and coordinators on
	// its own subjects
	rej("role", "worker-offer", own("$JOB.offer"), `{"v":1,"holder":"$SELF"}`, events.ReasonWrongRole)
	rej("role", "worker-cancel", own("$JOB.cancel"), `{"v":1}`, events.ReasonWrongRole)
	rej("role", "worker-resolve", own("$JOB.resolve"), `{"v":1,"action":"revoke"}`, events.ReasonWrongRole)
	rej("role", "worker-tick", own("_.tick"), `{"v":1}`, events.ReasonWrongRole)
	rej("role", "worker-policy", own("_.policy"), `{"v":1,"min_lease_ms":1,"max_lease_ms":2592000000,"default_lease_ms":2592000000,"ack_timeout_ms":1,"cancel_timeout_ms":1,"max_lifetime_ms":2592000000,"max_generations":1048576}`, events.ReasonWrongRole)
	// identity claims in the body
	rej("identity", "body-actor-other-worker", renew, `{"v":1,"actor":"$OTHER","lease_id":"$LEASE","generation":1,"renew_seq":1}`, events.ReasonIdentityMismatch)
	rej("identity", "body-job-other-job", renew, `{"v":1,"job":"$JOB-x","lease_id":"$LEASE","generation":1,"renew_seq":1}`, events.ReasonIdentityMismatch)
	rej("identity", "body-job-in-batch", batch, `{"v":1,"job":"$JOB","leases":[{"job":"$JOB","lease_id":"$LEASE","generation":1,"renew_seq":1}]}`, events.ReasonIdentityMismatch)
	rej("identity", "body-actor-on-acquire", own("$JOB.acquire"), `{"v":1,"actor":"$OTHER"}`, events.ReasonIdentityMismatch)
	// claims of another worker's lease under a guessed id (the lease-guess
	// attack sends many more)
	judged("protocol", "renew-guessed-lease", renew, claim)
	judged("protocol", "result-guessed-lease", own("$JOB.result"), `{"v":1,"lease_id":"$LEASE","generation":1,"outcome":"SUCCESS"}`)
	judged("protocol", "release-guessed-lease", own("$JOB.release"), `{"v":1,"lease_id":"$LEASE","generation":1}`)
	judged("protocol", "cancel_ack-guessed-lease", own("$JOB.cancel_ack"), `{"v":1,"lease_id":"$LEASE","generation":1}`)
	judged("protocol", "ack-guessed-lease", own("$JOB.ack"), `{"v":1,"lease_id":"$LEASE","generation":1}`)
	// speaking for others: refused by the server, never stored
	refused("refused", "other-worker", "tenure.in.worker.$OTHER.$JOB.release", `{"v":1,"lease_id":"$LEASE","generation":1}`)
	refused("refused", "ops-role", "tenure.in.ops.$SELF.$JOB.cancel", `{"v":1}`)
	refused("refused", "dispatcher", "tenure.in.ops.disp.$JOB.cancel", `{"v":1}`)
	refused("refused", "coordinator-tick", "tenure.in.coord.$COORD._.tick", `{"v":1}`)
	refused("refused", "coordinator-policy", "tenure.in.coord.$COORD._.policy", `{"v":1,"min_lease_ms":1,"max_lease_ms":2592000000,"default_lease_ms":2592000000,"ack_timeout_ms":1,"cancel_timeout_ms":1,"max_lifetime_ms":2592000000,"max_generations":1048576}`)
	refused("refused", "four-tokens", "tenure.in.worker.$SELF", claim)
	refused("refused", "decision-subject", "tenure.out.$OTHER.$JOB.completed", `{"v":1}`)
	return cs
}

// expand replaces the placeholders of s.
func (b badInput) expand(s string, self, job, other, coord, lease string) string {
	return strings.NewReplacer("$SELF", self, "$JOB", job, "$OTHER", other, "$COORD", coord, "$LEASE", lease).Replace(s)
}
