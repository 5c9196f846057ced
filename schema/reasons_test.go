package schema

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/maknow/tenure/events"
)

// coverage is how far the schemas reach for one of the decoder's reasons.
type coverage uint8

const (
	// covered: the schemas reject every body the decoder rejects with
	// this reason (as the first fault it finds).
	covered coverage = iota + 1
	// partly: the schemas reject such a body unless its fault is one of
	// the decoder-only rules (decoderOnlyRules); the tests that meet one
	// list it as an exception, with the rule.
	partly
	// decoderOnly: no schema can tell (the subject, a key twice, UTF-8,
	// a comparison of two values).
	decoderOnly
)

// reasonCoverage is, for each reason the decoder gives, how the schemas
// model it. The reasons the decoder never gives are the fold's (a body
// the decoder accepts satisfies its schema).
var reasonCoverage = map[events.Reason]struct {
	c   coverage
	how string
}{
	events.ReasonSyntaxError:        {covered, "not one JSON document: no instance to validate"},
	events.ReasonTrailingData:       {covered, "not one JSON document: no instance to validate"},
	events.ReasonNotObject:          {covered, "type object"},
	events.ReasonUnknownField:       {covered, "additionalProperties false; a resolve's action forbids the fields it does not use (if/then)"},
	events.ReasonCaseVariantKey:     {covered, "additionalProperties false: a case variant is an unknown name to a schema (which cannot say it is a case variant)"},
	events.ReasonMissingField:       {covered, "required; dependentRequired (cancel); minItems (batch); a resolve's action (if/then)"},
	events.ReasonWrongType:          {covered, "type"},
	events.ReasonNullValue:          {covered, "no property admits null"},
	events.ReasonBadDuration:        {covered, "minimum and maximum"},
	events.ReasonBadSequence:        {covered, "minimum and maximum"},
	events.ReasonBadToken:           {covered, "pattern"},
	events.ReasonBadEnum:            {covered, "enum"},
	events.ReasonUnsupportedVersion: {covered, "const 1"},
	events.ReasonTooDeep:            {covered, "every value nested that deep is of a wrong type"},
	events.ReasonControlChar:        {covered, "a pattern on texts (escaped ones); raw ones are not JSON; a key is an unknown name"},
	events.ReasonBadNumber:          {partly, "type integer rejects fractions, and the other forms are not JSON; an integer written 1.0, 1e3 or -0 is decoder-only"},
	events.ReasonBadValue:           {partly, "ranges, patterns, permanent with FAILED, the backoffs against their defaults; backoff_max_ms below a given backoff_ms is decoder-only"},
	events.ReasonTooLarge:           {partly, "maxItems, and maxLength in characters; the limits in bytes and the body's size are decoder-only"},
	events.ReasonBadTime:            {partly, "pattern (the form, the years 1678 to 2262) and format date-time (the calendar); the range's ends within those years are decoder-only"},
	events.ReasonDuplicateKey:       {decoderOnly, "a JSON parser keeps one of the values"},
	events.ReasonInvalidUtf8:        {decoderOnly, "a JSON parser replaces it with U+FFFD"},
	events.ReasonIdentityMismatch:   {decoderOnly, "the subject is no part of the body"},
	events.ReasonBadPolicy:          {decoderOnly, "a comparison of two values"},
	events.ReasonBadSubject:         {decoderOnly, "the subject is no part of the body"},
	events.ReasonWrongRole:          {decoderOnly, "the subject is no part of the body"},
	events.ReasonWrongPartition:     {decoderOnly, "the subject is no part of the body (the fold's partition check)"},
}

// decoderOnlyRule is one rule only the decoder checks: a body that
// satisfies its schema and that the decoder rejects.
type decoderOnlyRule struct {
	name    string
	subject string // the input's subject
	uri     string // the schema it satisfies ("": the one InputURI names)
	body    string
	reason  events.Reason
}

func decoderOnlyRules() []decoderOnlyRule {
	w := func(job, verb string) string { return "tenure.in.worker.w1." + job + "." + verb }
	o := func(job, verb string) string { return "tenure.in.ops.disp." + job + "." + verb }
	note := func(n string) string {
		return `{"v":1,"lease_id":"L1","generation":1,"progress_seq":1,"value":5,"note":"` + n + `"}`
	}
	renew := `{"v":1,"lease_id":"L1","generation":1,"renew_seq":1}`
	policy := func(def string) string {
		return `{"v":1,"min_lease_ms":100,"max_lease_ms":3600000,"default_lease_ms":` + def +
			`,"ack_timeout_ms":30000,"cancel_timeout_ms":60000,"max_lifetime_ms":86400000,"max_generations":1000}`
	}
	return []decoderOnlyRule{
		{"a key twice", w("j", "ack"), "", `{"v":1,"lease_id":"L1","generation":1,"generation":2}`, events.ReasonDuplicateKey},
		{"a key twice, once escaped", w("j", "ack"), "", `{"v":1,"lease_id":"L1","generation":1,"gener\u0061tion":1}`, events.ReasonDuplicateKey},
		{"invalid UTF-8", w("j", "progress"), "", note("ab\xffcd"), events.ReasonInvalidUtf8},
		{"an escaped lone surrogate", w("j", "progress"), "", note(`\ud800`), events.ReasonInvalidUtf8},
		{"an integer written with a fraction", w("j", "ack"), "", `{"v":1,"lease_id":"L1","generation":1.0}`, events.ReasonBadNumber},
		{"an integer written with an exponent", w("j", "ack"), "", `{"v":1,"lease_id":"L1","generation":1e3}`, events.ReasonBadNumber},
		{"v written 1.0", w("j", "ack"), "", `{"v":1.0,"lease_id":"L1","generation":1}`, events.ReasonBadNumber},
		{"minus zero", w("j", "progress"), "", `{"v":1,"lease_id":"L1","generation":1,"progress_seq":1,"value":-0}`, events.ReasonBadNumber},
		{"a note of 129 characters, 258 bytes", w("j", "progress"), "", note(strings.Repeat("é", 129)), events.ReasonTooLarge},
		{"a note of 130 escaped characters, 260 bytes", w("j", "progress"), "", note(strings.Repeat(`\u00e9`, 130)), events.ReasonTooLarge},
		{"a payload of 2049 characters, 4098 bytes", o("j", "submit"), "", `{"v":1,"queue":"q","payload":"` + strings.Repeat("é", 2049) + `"}`, events.ReasonTooLarge},
		{"a body over 65536 bytes", w("j", "renew"), "", renew + strings.Repeat(" ", events.MaxInputBytes+1-len(renew)), events.ReasonTooLarge},
		{"a body's actor other than the subject's", w("j", "renew"), "", `{"v":1,"actor":"w2","lease_id":"L1","generation":1,"renew_seq":1}`, events.ReasonIdentityMismatch},
		{"a body's job other than the subject's", w("j", "renew"), "", `{"v":1,"job":"k","lease_id":"L1","generation":1,"renew_seq":1}`, events.ReasonIdentityMismatch},
		{"a policy's default lease above its maximum", "tenure.in.ops.disp._.policy", "", policy("7200000"), events.ReasonBadPolicy},
		{"a policy's default lease below its minimum", "tenure.in.ops.disp._.policy", "", policy("50"), events.ReasonBadPolicy},
		{"backoff_max_ms below a given backoff_ms", o("j", "submit"), "", `{"v":1,"queue":"q","backoff_ms":60000,"backoff_max_ms":1000}`, events.ReasonBadValue},
		{"sent_at before 1678-01-01T00:00:00Z in 1678", w("j", "acquire"), "", `{"v":1,"sent_at":"1678-01-01T00:00:00+01:00"}`, events.ReasonBadTime},
		{"sent_at after the end of int64 nanoseconds in 2262", w("j", "acquire"), "", `{"v":1,"sent_at":"2262-04-11T23:47:16.854775808Z"}`, events.ReasonBadTime},
		{"a role that may not publish the verb", w("j", "offer"), BaseURI + "input/offer.json", `{"v":1,"holder":"w2"}`, events.ReasonWrongRole},
		{"a job-less verb with a job token", w("j", "pull"), BaseURI + "input/pull.json", `{"v":1,"queue":"q","slots":1}`, events.ReasonBadSubject},
		{"a batch body on a single renew's subject (renew.json as a whole accepts both)", w("j", "renew"), BaseURI + "input/renew.json",
			`{"v":1,"leases":[{"job":"j","lease_id":"L1","generation":1,"renew_seq":1}]}`, events.ReasonUnknownField},
	}
}

// Every decoder-only rule: the decoder rejects the body with its reason,
// the schema accepts it; and every reason the decoder gives is classified.
func TestDecoderOnlyRules(t *testing.T) {
	s := loadSchemas(t)
	for _, r := range decoderOnlyRules() {
		if got := decodeReason(r.subject, []byte(r.body)); got != r.reason {
			t.Errorf("%s: the decoder says %q, want %s", r.name, got, r.reason)
		}
		uri := r.uri
		if uri == "" {
			var err error
			if uri, err = InputURI(r.subject); err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
		}
		if err := s.validate(t, uri, []byte(r.body)); err != nil {
			t.Errorf("%s: the schema rejects it: %s", r.name, short(err))
		}
	}
	// Every reason the decoder gives (package events has a sentinel for
	// each) has its class.
	for _, e := range []*events.DecodeError{events.ErrBadSubject, events.ErrWrongRole, events.ErrSyntax, events.ErrNotObject,
		events.ErrUnknownField, events.ErrDuplicateKey, events.ErrCaseVariantKey, events.ErrInvalidUTF8, events.ErrControlChar,
		events.ErrTrailingData, events.ErrMissingField, events.ErrWrongType, events.ErrNullValue, events.ErrBadNumber,
		events.ErrBadDuration, events.ErrBadSequence, events.ErrBadValue, events.ErrBadToken, events.ErrBadEnum, events.ErrBadTime,
		events.ErrTooLarge, events.ErrTooDeep, events.ErrUnsupportedVersion, events.ErrIdentityMismatch, events.ErrBadPolicy} {
		if _, ok := reasonCoverage[e.Code]; !ok {
			t.Errorf("decode reason %s has no coverage class", e.Code)
		}
	}
}

// The sent_at forms the decoder accepts although PROTOCOL.md §5 asks for
// RFC 3339, which the schemas follow: the decoder falls back to Go's
// time.Parse, which takes a comma before the fraction and offsets up to
// 24:00 and minutes up to 60. Reported, not fixed here (the decoder is not
// this package's); when the decoder rejects one, drop it from the list.
var sentAtDisagreements = []string{
	"2026-03-01T12:00:05,25Z",
	"2026-03-01T12:00:05+24:00",
	"2026-03-01T12:00:05+00:60",
}

func TestSentAtDisagreements(t *testing.T) {
	s := loadSchemas(t)
	const subject = "tenure.in.worker.w1.j.acquire"
	for _, at := range sentAtDisagreements {
		body := []byte(`{"v":1,"sent_at":"` + at + `"}`)
		if r := decodeReason(subject, body); r != "" {
			t.Errorf("sent_at %s: the decoder now rejects it (%s): drop it from sentAtDisagreements", at, r)
		}
		if err := s.validateInput(t, subject, body); err == nil {
			t.Errorf("sent_at %s: the schema accepts it; RFC 3339 does not", at)
		}
	}
}

// lenientURI is the schema a body on subject is meant for, even when the
// subject is rejected (a wrong role, a job token where the verb takes
// none): the verb is the subject's last token, and a renew (from rules
// revision 7 on a submit, an ack, a result) is a batch when its job
// token, the fifth, is _. "" when the verb is none of the
// protocol's.
func lenientURI(subject string) string {
	tok := strings.Split(subject, ".")
	v, ok := events.ParseVerb(tok[len(tok)-1])
	if !ok {
		return ""
	}
	u := BaseURI + InputPath(v)
	if v.Batches(events.CurrentRevision) {
		if len(tok) == 6 && tok[4] == events.NoJob {
			return u + "#/$defs/batch"
		}
		return u + "#/$defs/single"
	}
	return u
}

// repairSubject is a valid subject for the body of an input on subject
// (whose verb is one of the protocol's): the role of the verb, the actor
// token if valid, the job token if valid and the verb takes one (or a
// renew's _), else w1 and job-1.
func repairSubject(subject string) string {
	tok := strings.Split(subject, ".")
	v, _ := events.ParseVerb(tok[len(tok)-1])
	actor, job := "w1", "job-1"
	if len(tok) > 3 && events.ValidToken(tok[3]) {
		actor = tok[3]
	}
	if len(tok) == 6 && (events.ValidToken(tok[4]) || tok[4] == events.NoJob && v.Batches(events.CurrentRevision)) {
		job = tok[4]
	}
	return subjectFor(v, actor, job, job == events.NoJob)
}

// agreement checks the schemas against the decoder on many bodies, each
// under a name, with a list of exceptions (name: why the schema's verdict
// is not the one its reason's class asks for). A body the decoder accepts
// must satisfy its schema. One it rejects must be rejected by the schema
// when its reason is covered, or partly covered and the body is no
// exception; it must satisfy the schema when its reason is decoder-only
// (the body having no other fault) or it is an exception. Every exception
// must be used.
type agreement struct {
	t          *testing.T
	s          *schemas
	exceptions map[string]string
	used       map[string]bool
	counts     map[string]int // by outcome, for the log
}

func newAgreement(t *testing.T, exceptions map[string]string) *agreement {
	return &agreement{t: t, s: loadSchemas(t), exceptions: exceptions, used: map[string]bool{}, counts: map[string]int{}}
}

// check judges body on subject; it returns the decoder's reason.
func (a *agreement) check(name, subject string, body []byte) events.Reason {
	t := a.t
	t.Helper()
	r := decodeReason(subject, body)
	uri := lenientURI(subject)
	if uri == "" {
		if r != events.ReasonBadSubject {
			t.Errorf("%s: no schema for %s, and the decoder says %q", name, subject, r)
		}
		a.counts["no schema (unknown verb)"]++
		return r
	}
	if r == events.ReasonBadSubject || r == events.ReasonWrongRole {
		// The subject is the decoder's matter alone: judge the body on a
		// subject its verb may have.
		a.counts["subject rejected, body judged on a valid subject"]++
		r = decodeReason(repairSubject(subject), body)
	}
	err := a.s.validate(t, uri, body)
	why, exception := a.exceptions[name]
	if exception {
		a.used[name] = true
	}
	cov := reasonCoverage[r]
	switch {
	case r == "":
		a.counts["accepted by both"]++
		if err != nil {
			t.Errorf("%s: the decoder accepts %s on %s, the schema rejects it: %s", name, quote(body), subject, short(err))
		}
		if exception {
			t.Errorf("%s: listed as an exception (%s), but the decoder accepts it", name, why)
		}
	case cov.c == 0:
		t.Errorf("%s: reason %q has no coverage class", name, r)
	case cov.c == covered && exception:
		t.Errorf("%s: listed as an exception (%s), but its reason %s is covered by the schemas", name, why, r)
	case cov.c == covered || cov.c == partly && !exception:
		if errors.Is(err, errNotJSON) {
			a.counts["rejected by both (not one JSON document)"]++
		} else {
			a.counts["rejected by both"]++
		}
		if err == nil {
			t.Errorf("%s: the decoder rejects %s on %s (%s: %s), the schema accepts it", name, quote(body), subject, r, cov.how)
		}
	default: // decoder-only, or an exception of a partly covered reason
		a.counts["rejected by the decoder only"]++
		if err != nil {
			t.Errorf("%s: the decoder rejects %s on %s (%s, which only it checks), and so does the schema: %s", name, quote(body), subject, r, short(err))
		}
	}
	return r
}

// done fails on the exceptions never met, and logs the counts.
func (a *agreement) done() {
	a.t.Helper()
	for name, why := range a.exceptions {
		if !a.used[name] {
			a.t.Errorf("exception %s (%s) was not met", name, why)
		}
	}
	a.t.Logf("%v", a.counts)
}

// quote is body for a failure message, cut to a readable length.
func quote(body []byte) string {
	if len(body) > 200 {
		return fmt.Sprintf("%q... (%d bytes)", body[:200], len(body))
	}
	return fmt.Sprintf("%q", body)
}

// The patterns of the lease key and of a lease id's tag are exactly the
// strict unpadded base64url encodings of 32 and 16 bytes: every last
// character, against the decoder for the key, against encoding/base64
// for the tag.
func TestBase64URLPatterns(t *testing.T) {
	s := loadSchemas(t)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	const subject = "tenure.in.coord.c1._.rules"
	granted := func(leaseID string) []byte {
		return []byte(`{"v":1,"cause":3,"n":0,"of":1,"at":"2026-01-01T00:00:00Z","kind":"granted","accepted":true,"reason":"ok",` +
			`"input":{"role":"worker","actor":"w1","verb":"acquire"},"addressee":"w1","job":{"id":"j","lease_id":"` + leaseID +
			`","generation":1,"holder":"w1","state":"ACTIVE","ack_state":"ACQUIRED","lease_ms":1000,"renew_seq":0,"progress_seq":0,` +
			`"progress_value":0,"cancel_requested":false,"cancel_acked":false,"lease_expired":false,"conflict":false,` +
			`"stale":0,"late":0,"late_progress":0,"duplicates":0,"conflicts":0}}`)
	}
	for _, c := range alphabet {
		key := strings.Repeat("A", 42) + string(c)
		body := []byte(`{"v":1,"revision":4,"lease_key":"` + key + `"}`)
		decoded := decodeReason(subject, body) == ""
		if valid := s.validateInput(t, subject, body) == nil; valid != decoded {
			t.Errorf("lease key ending in %c: the schema says valid %v, the decoder %v", c, valid, decoded)
		}
		tag := strings.Repeat("A", 21) + string(c)
		_, err := base64.RawURLEncoding.Strict().DecodeString(tag)
		if valid := s.validate(t, BaseURI+DecisionPath, granted("L3-"+tag)) == nil; valid != (err == nil) {
			t.Errorf("lease id tag ending in %c: the schema says valid %v, strict base64url %v", c, valid, err == nil)
		}
	}
}
