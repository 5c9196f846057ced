package events

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/maknow/tenure/cron"
)

// This file is the strict decoder of input bodies. It is hand written, makes
// one pass over the bytes, uses neither reflection nor encoding/json, and
// reports the first fault in document order as a *DecodeError.
//
// Order of checks, so that the same bytes always give the same error:
//
//  1. the subject (bad_subject, wrong_role);
//  2. the body size (too_large), before any parsing;
//  3. the body in document order. A key is judged as soon as it is read
//     (unknown_field, case_variant_key, duplicate_key) before its colon and
//     value. A value is first scanned in full (syntax_error, invalid_utf8,
//     control_char, bad_number, null_value, too_deep: such faults inside a
//     value win over the value's type), then its JSON type is checked
//     (wrong_type), then its range or format (bad_token, bad_sequence,
//     bad_duration, bad_value, bad_enum, bad_time, too_large,
//     unsupported_version, identity_mismatch). Data after the closing brace
//     is trailing_data;
//  4. once the whole body is read: required fields (missing_field: "v"
//     first, then the verb's fields in canonical order, then the fields of
//     each lease element in array order; an empty "leases" counts as
//     missing) and then the consistency of a policy (bad_policy), of a
//     submit's backoff_ms and backoff_max_ms (and, revision 8, its run_at
//     and delay_ms, which exclude each other; a unique_for_ms without a
//     unique_key is missing_field), and of a result's permanent with its
//     outcome (bad_value).
//
// Details of 3:
//   - A body that does not start with '{' is not_object when its first byte
//     can start a JSON value (or it is a complete literal true, false or
//     null), and syntax_error otherwise (a byte order mark, for one).
//   - A number token is the longest run of [0-9+-.eE]; anything but
//     -?(0|[1-9][0-9]*) is bad_number, wherever it is.
//   - null is null_value wherever it is, even inside a value that has the
//     wrong type anyway.
//   - A resolve field its action does not use is unknown_field at the later
//     of the field's key and the action's value. An outcome of SUCCESS in a
//     resolve is bad_enum whatever the action (only settle takes one).
//   - A 257th lease is too_large as soon as it starts.
//   - Strings may hold no control character, raw or escaped: U+0000 to
//     U+001F (so no \n or \t either) and U+007F. A submit's payload
//     (revision 4), which is opaque, is the exception: it may hold them
//     escaped (JSON has no raw U+0000 to U+001F, still control_char) and
//     U+007F raw.
//   - Under a revision earlier than the one that adds a verb, a field or a
//     resolve action (fieldSince, Verb.Since, Action.Since), it is what it
//     was then: an unknown verb (bad_subject), an unknown field
//     (unknown_field, never case_variant_key), an unknown name (bad_enum).

// maxBodyDepth is the deepest nesting the decoder scans: the body object is
// depth 1, a batch renew's "leases" array 2, a lease object 3. Values nested
// deeper are only ever scanned to be rejected as wrong_type; past
// maxBodyDepth the scan stops with too_deep, so hostile nesting cannot
// exhaust the stack.
const maxBodyDepth = 8

// bodyField identifies a body key. The order of the constants is the canonical
// order of AppendInputBody and of missing_field checks.
type bodyField uint8

const (
	fNone bodyField = iota
	fV
	fActor
	fJob
	fSentAt
	fAction
	fHolder
	fLeaseID
	fGeneration
	fRenewSeq
	fProgressSeq
	fValue
	fOutcome
	fLeaseMS
	fAckTimeoutMS
	fMinLeaseMS
	fMaxLeaseMS
	fDefaultLeaseMS
	fCancelTimeoutMS
	fMaxLifetimeMS
	fMaxGenerations
	fLeases
	fNote
	fDetail
	fReason
	fRevision
	fLeaseKey
	fInputSeq
	fStateHash
	fRetainMS // revision 3 on
	// revision 4 on: submit (queue, priority, max_attempts, backoff_ms,
	// backoff_max_ms, payload), pull (queue, slots, ttl_ms), result
	// (permanent). Their canonical order is that of PROTOCOL.md §22 and
	// §6.10, not the order of the constants (see AppendInputBody).
	fQueue
	fPriority
	fMaxAttempts
	fBackoffMS
	fBackoffMaxMS
	fPayload
	fSlots
	fTTLMS
	fPermanent
	fJobs // revision 7 on: a batch submit's jobs
	// revision 8 on: submit (run_at, delay_ms).
	fRunAt
	fDelayMS
	fUniqueKey
	fUniqueForMS
	// revision 9 on: submit (concurrency_key), limit (queue,
	// concurrency_key, max_active).
	fConcurrencyKey
	fMaxActive
	fRate
	fPeriodMS
	// revision 10 on: schedule (schedule, op, cron, tz, zone, missed).
	fSchedule
	fScheduleOp
	fCron
	fTZ
	fZone
	fMissed
	bodyFieldCount
)

// bodyFieldSet has a bit per field.
var _ [64 - bodyFieldCount]struct{}

var bodyFieldNames = [bodyFieldCount]string{
	fV:               "v",
	fActor:           "actor",
	fJob:             "job",
	fSentAt:          "sent_at",
	fAction:          "action",
	fHolder:          "holder",
	fLeaseID:         "lease_id",
	fGeneration:      "generation",
	fRenewSeq:        "renew_seq",
	fProgressSeq:     "progress_seq",
	fValue:           "value",
	fOutcome:         "outcome",
	fLeaseMS:         "lease_ms",
	fAckTimeoutMS:    "ack_timeout_ms",
	fMinLeaseMS:      "min_lease_ms",
	fMaxLeaseMS:      "max_lease_ms",
	fDefaultLeaseMS:  "default_lease_ms",
	fCancelTimeoutMS: "cancel_timeout_ms",
	fMaxLifetimeMS:   "max_lifetime_ms",
	fMaxGenerations:  "max_generations",
	fLeases:          "leases",
	fNote:            "note",
	fDetail:          "detail",
	fReason:          "reason",
	fRevision:        "revision",
	fLeaseKey:        "lease_key",
	fInputSeq:        "input_seq",
	fStateHash:       "state_hash",
	fRetainMS:        "retain_ms",
	fQueue:           "queue",
	fPriority:        "priority",
	fMaxAttempts:     "max_attempts",
	fBackoffMS:       "backoff_ms",
	fBackoffMaxMS:    "backoff_max_ms",
	fPayload:         "payload",
	fSlots:           "slots",
	fTTLMS:           "ttl_ms",
	fPermanent:       "permanent",
	fJobs:            "jobs",
	fRunAt:           "run_at",
	fDelayMS:         "delay_ms",
	fUniqueKey:       "unique_key",
	fUniqueForMS:     "unique_for_ms",
	fConcurrencyKey:  "concurrency_key",
	fMaxActive:       "max_active",
	fRate:            "rate",
	fPeriodMS:        "period_ms",
	fSchedule:        "schedule",
	fScheduleOp:      "op",
	fCron:            "cron",
	fTZ:              "tz",
	fZone:            "zone",
	fMissed:          "missed",
}

// fieldSince is the first rules revision that knows field f: under an
// earlier one its key is what it always was there, an unknown field (not
// even a case variant of a known one).
func fieldSince(f bodyField) uint32 {
	switch {
	case f == fRetainMS:
		return Revision3
	case f >= fSchedule:
		return Revision10
	case f >= fConcurrencyKey:
		return Revision9
	case f >= fRunAt:
		return Revision8
	case f == fJobs:
		return Revision7
	case f >= fQueue:
		return Revision4
	}
	return Revision1
}

// lookupBodyField maps a key to its field without allocating (the compiler turns
// a switch on string(b) into comparisons on the bytes).
func lookupBodyField(k []byte) bodyField {
	switch string(k) {
	case "v":
		return fV
	case "actor":
		return fActor
	case "job":
		return fJob
	case "sent_at":
		return fSentAt
	case "action":
		return fAction
	case "holder":
		return fHolder
	case "lease_id":
		return fLeaseID
	case "generation":
		return fGeneration
	case "renew_seq":
		return fRenewSeq
	case "progress_seq":
		return fProgressSeq
	case "value":
		return fValue
	case "outcome":
		return fOutcome
	case "lease_ms":
		return fLeaseMS
	case "ack_timeout_ms":
		return fAckTimeoutMS
	case "min_lease_ms":
		return fMinLeaseMS
	case "max_lease_ms":
		return fMaxLeaseMS
	case "default_lease_ms":
		return fDefaultLeaseMS
	case "cancel_timeout_ms":
		return fCancelTimeoutMS
	case "max_lifetime_ms":
		return fMaxLifetimeMS
	case "max_generations":
		return fMaxGenerations
	case "leases":
		return fLeases
	case "note":
		return fNote
	case "detail":
		return fDetail
	case "reason":
		return fReason
	case "revision":
		return fRevision
	case "lease_key":
		return fLeaseKey
	case "input_seq":
		return fInputSeq
	case "state_hash":
		return fStateHash
	case "retain_ms":
		return fRetainMS
	case "queue":
		return fQueue
	case "priority":
		return fPriority
	case "max_attempts":
		return fMaxAttempts
	case "backoff_ms":
		return fBackoffMS
	case "backoff_max_ms":
		return fBackoffMaxMS
	case "payload":
		return fPayload
	case "slots":
		return fSlots
	case "ttl_ms":
		return fTTLMS
	case "permanent":
		return fPermanent
	case "jobs":
		return fJobs
	case "run_at":
		return fRunAt
	case "delay_ms":
		return fDelayMS
	case "unique_key":
		return fUniqueKey
	case "unique_for_ms":
		return fUniqueForMS
	case "concurrency_key":
		return fConcurrencyKey
	case "max_active":
		return fMaxActive
	case "rate":
		return fRate
	case "period_ms":
		return fPeriodMS
	case "schedule":
		return fSchedule
	case "op":
		return fScheduleOp
	case "cron":
		return fCron
	case "tz":
		return fTZ
	case "zone":
		return fZone
	case "missed":
		return fMissed
	}
	return fNone
}

// bodyFieldSet is a set of fields, one bit each.
type bodyFieldSet uint64

func (s bodyFieldSet) has(f bodyField) bool { return s&(1<<f) != 0 }

func bodyFields(fs ...bodyField) bodyFieldSet {
	var s bodyFieldSet
	for _, f := range fs {
		s |= 1 << f
	}
	return s
}

// bodySchema is the shape of one JSON object: the body of one kind of input, or
// one element of a batch renew's leases.
type bodySchema struct {
	name     string      // for details: "renew", "batch renew", "lease"
	fields   []bodyField // the keys it has, canonical order
	allowed  bodyFieldSet
	required []bodyField // checked once the body is read ("v" comes first)
}

func newBodySchema(name string, required []bodyField, fields ...bodyField) *bodySchema {
	return &bodySchema{name: name, fields: fields, allowed: bodyFields(fields...), required: required}
}

var (
	leaseIDGen   = []bodyField{fLeaseID, fGeneration}
	policyFields = []bodyField{fMinLeaseMS, fMaxLeaseMS, fDefaultLeaseMS, fAckTimeoutMS, fCancelTimeoutMS, fMaxLifetimeMS, fMaxGenerations}
	verbSchemas  = [...]*bodySchema{
		VerbOffer:      newBodySchema("offer", []bodyField{fHolder}, fV, fActor, fJob, fSentAt, fHolder, fLeaseMS, fAckTimeoutMS),
		VerbAcquire:    newBodySchema("acquire", nil, fV, fActor, fJob, fSentAt, fLeaseMS),
		VerbAck:        newBodySchema("ack", leaseIDGen, fV, fActor, fJob, fSentAt, fLeaseID, fGeneration),
		VerbRenew:      newBodySchema("renew", []bodyField{fLeaseID, fGeneration, fRenewSeq}, fV, fActor, fJob, fSentAt, fLeaseID, fGeneration, fRenewSeq, fLeaseMS),
		VerbProgress:   newBodySchema("progress", []bodyField{fLeaseID, fGeneration, fProgressSeq, fValue}, fV, fActor, fJob, fSentAt, fLeaseID, fGeneration, fProgressSeq, fValue, fNote),
		VerbCancel:     newBodySchema("cancel", nil, fV, fActor, fJob, fSentAt, fLeaseID, fGeneration, fReason),
		VerbCancelAck:  newBodySchema("cancel_ack", leaseIDGen, fV, fActor, fJob, fSentAt, fLeaseID, fGeneration),
		VerbResult:     newBodySchema("result", []bodyField{fLeaseID, fGeneration, fOutcome}, fV, fActor, fJob, fSentAt, fLeaseID, fGeneration, fOutcome, fDetail),
		VerbRelease:    newBodySchema("release", leaseIDGen, fV, fActor, fJob, fSentAt, fLeaseID, fGeneration),
		VerbResolve:    newBodySchema("resolve", []bodyField{fAction}, fV, fActor, fJob, fSentAt, fAction, fHolder, fLeaseID, fGeneration, fOutcome, fReason),
		VerbPolicy:     newBodySchema("policy", policyFields, fV, fActor, fJob, fSentAt, fMinLeaseMS, fMaxLeaseMS, fDefaultLeaseMS, fAckTimeoutMS, fCancelTimeoutMS, fMaxLifetimeMS, fMaxGenerations),
		VerbTick:       newBodySchema("tick", nil, fV, fActor, fJob, fSentAt),
		VerbRules:      newBodySchema("rules", []bodyField{fRevision, fLeaseKey}, fV, fActor, fJob, fSentAt, fRevision, fLeaseKey),
		VerbCheckpoint: newBodySchema("checkpoint", []bodyField{fInputSeq, fStateHash}, fV, fActor, fJob, fSentAt, fInputSeq, fStateHash),
		VerbSubmit: newBodySchema("submit", []bodyField{fQueue}, fV, fActor, fJob, fSentAt,
			fQueue, fPriority, fMaxAttempts, fBackoffMS, fBackoffMaxMS, fLeaseMS, fAckTimeoutMS, fPayload),
		VerbPull: newBodySchema("pull", []bodyField{fQueue, fSlots}, fV, fActor, fJob, fSentAt, fQueue, fSlots, fTTLMS),
		// Revision 9 on: what is absent of max_active and rate with
		// period_ms is lifted.
		VerbLimit: newBodySchema("limit", []bodyField{fQueue}, fV, fActor, fJob, fSentAt, fQueue, fConcurrencyKey, fMaxActive, fRate, fPeriodMS),
		// Revision 10 on: what a set needs (cron, queue) is checked once
		// the body is read, since op may come last.
		VerbSchedule: newBodySchema("schedule", []bodyField{fSchedule}, fV, fActor, fJob, fSentAt, fSchedule, fScheduleOp,
			fCron, fTZ, fZone, fMissed, fQueue, fPriority, fMaxAttempts, fBackoffMS, fBackoffMaxMS, fLeaseMS, fAckTimeoutMS,
			fPayload, fConcurrencyKey, fUniqueKey),
	}
	// submit8 is the submit from revision 8 on: run_at or delay_ms.
	submit8 = newBodySchema("submit", []bodyField{fQueue}, fV, fActor, fJob, fSentAt,
		fQueue, fPriority, fMaxAttempts, fBackoffMS, fBackoffMaxMS, fLeaseMS, fAckTimeoutMS, fPayload,
		fRunAt, fDelayMS, fUniqueKey, fUniqueForMS)
	// submit9 is the submit from revision 9 on: concurrency_key.
	submit9 = newBodySchema("submit", []bodyField{fQueue}, fV, fActor, fJob, fSentAt,
		fQueue, fPriority, fMaxAttempts, fBackoffMS, fBackoffMaxMS, fLeaseMS, fAckTimeoutMS, fPayload,
		fRunAt, fDelayMS, fUniqueKey, fUniqueForMS, fConcurrencyKey)
	// result4 is the result from revision 4 on: permanent, optional.
	result4 = newBodySchema("result", []bodyField{fLeaseID, fGeneration, fOutcome}, fV, fActor, fJob, fSentAt, fLeaseID, fGeneration, fOutcome, fDetail, fPermanent)
	// policy3 is the policy from revision 3 on: retain_ms, optional.
	policy3     = newBodySchema("policy", policyFields, fV, fActor, fJob, fSentAt, fMinLeaseMS, fMaxLeaseMS, fDefaultLeaseMS, fAckTimeoutMS, fCancelTimeoutMS, fMaxLifetimeMS, fMaxGenerations, fRetainMS)
	batchSchema = newBodySchema("batch renew", nil, fV, fActor, fJob, fSentAt, fLeases)
	leaseSchema = newBodySchema("lease", nil, fJob, fLeaseID, fGeneration, fRenewSeq, fLeaseMS)

	// Revision 7 on: a batch submit, ack or result (job token NoJob),
	// and the shape of one of its elements, which is the body of the
	// single input of its verb with its job and without v, actor and
	// sent_at. Its required fields are checked once the body is read
	// (the element's job first).
	batchSubmitSchema = newBodySchema("batch submit", nil, fV, fActor, fJob, fSentAt, fJobs)
	batchAckSchema    = newBodySchema("batch ack", nil, fV, fActor, fJob, fSentAt, fLeases)
	batchResultSchema = newBodySchema("batch result", nil, fV, fActor, fJob, fSentAt, fLeases)
	submitItemSchema  = newBodySchema("job", []bodyField{fJob, fQueue}, fJob,
		fQueue, fPriority, fMaxAttempts, fBackoffMS, fBackoffMaxMS, fLeaseMS, fAckTimeoutMS, fPayload)
	ackItemSchema    = newBodySchema("lease", []bodyField{fJob, fLeaseID, fGeneration}, fJob, fLeaseID, fGeneration)
	resultItemSchema = newBodySchema("lease", []bodyField{fJob, fLeaseID, fGeneration, fOutcome}, fJob, fLeaseID, fGeneration, fOutcome, fDetail, fPermanent)

	// Resolve fields that only some actions use, and the ones each uses.
	actionOnly = bodyFields(fHolder, fLeaseID, fGeneration, fOutcome)
	// scheduleSetOnly are the schedule fields only a set takes (revision 10).
	scheduleSetOnly = bodyFields(fCron, fTZ, fZone, fMissed, fQueue, fPriority, fMaxAttempts, fBackoffMS, fBackoffMaxMS,
		fLeaseMS, fAckTimeoutMS, fPayload, fConcurrencyKey, fUniqueKey)
	actionUses = [...]bodyFieldSet{
		ActionAffirm:  bodyFields(fHolder, fLeaseID, fGeneration),
		ActionRevoke:  0,
		ActionSettle:  bodyFields(fOutcome),
		ActionRetry:   0, // revision 4 on
		ActionDiscard: 0, // revision 4 on
	}
	actionRequired = [...][]bodyField{
		ActionAffirm:  {fHolder, fLeaseID, fGeneration},
		ActionSettle:  {fOutcome},
		ActionDiscard: nil,
	}
)

// Byte classes.
var (
	// jsonStrPlain: bytes that stand for themselves inside a string: printable
	// ASCII other than '"' and '\\'. Everything else takes the slow path.
	jsonStrPlain [256]bool
	// jsonNumByte: bytes of a number token. A token is the longest run of these
	// starting at '-', '+' or a digit; anything but -?(0|[1-9][0-9]*) is
	// bad_number.
	jsonNumByte [256]bool
	// tokenByteOK: [A-Za-z0-9_-], the characters of a token (see ValidToken).
	tokenByteOK [256]bool
)

func init() {
	for c := 0x20; c < 0x7f; c++ {
		jsonStrPlain[c] = c != '"' && c != '\\'
	}
	for _, c := range []byte("0123456789+-.eE") {
		jsonNumByte[c] = true
	}
	for c := 0; c < 256; c++ {
		tokenByteOK[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
}

// validTokenBytes is ValidToken on bytes, without a conversion.
func validTokenBytes(b []byte) bool {
	if len(b) == 0 || len(b) > MaxTokenLen || string(b) == NoJob {
		return false
	}
	for _, c := range b {
		if !tokenByteOK[c] {
			return false
		}
	}
	return true
}

// DecodeInput parses subject and body into in, reusing the backing array of
// in.Leases. It first resets *in to zero, then parses the subject with
// ParseInputSubject, then the body (see PROTOCOL.md and the order of checks
// at the top of this file).
//
// On failure it returns a *DecodeError whose Code is the reason and whose
// Field names the offending field ("leases[3].generation" inside a batch).
// in.Role, in.Actor, in.Job and in.Verb are then filled as far as the subject
// parse got, so that the rejection can be addressed; every other field of in
// is zero (in.Leases has length 0).
//
// The strings stored in in never alias body: the caller may reuse body.
// A single renew also fills in.Leases with the one LeaseRef it names, so that
// single and batch renews can be handled alike. A batch submit, ack or
// result (revision 7 on) fills in.Batch, reusing its backing array: one
// Input per element, as DecodeInput would return the single input of the
// batch's verb about the element's job (the batch's identity and sent_at,
// the element's job and fields).
func DecodeInput(subject string, body []byte, in *Input) error {
	return DecodeInputAt(subject, body, CurrentRevision, in)
}

// DecodeInputAt is DecodeInput under rules revision rev: the subject is
// parsed by ParseInputSubjectAt. The fold decodes each input under the
// revision in force.
func DecodeInputAt(subject string, body []byte, rev uint32, in *Input) error {
	resetInput(in, RoleNone, "", "", VerbNone)
	s, err := ParseInputSubjectAt(subject, rev)
	in.Role, in.Actor, in.Job, in.Verb = s.Role, s.Actor, s.Job, s.Verb
	if err != nil {
		return err
	}
	if len(body) > MaxInputBytes {
		return &DecodeError{Code: ReasonTooLarge, Detail: "body of " + strconv.Itoa(len(body)) + " bytes is over " + strconv.Itoa(MaxInputBytes)}
	}
	d := inputDecoder{b: body, in: in, elem: -1, depth: 2, rev: rev}
	switch {
	case s.Verb == VerbRenew && s.Job == NoJob:
		d.sch = batchSchema
	case s.Job == NoJob && s.Verb.Batches(rev): // revision 7 on
		d.sch, d.item = batchSchemas(s.Verb)
	case s.Verb == VerbPolicy && rev >= Revision3:
		d.sch = policy3
	case s.Verb == VerbResult && rev >= Revision4:
		d.sch = result4
	case s.Verb == VerbSubmit && rev >= Revision9:
		d.sch = submit9
	case s.Verb == VerbSubmit && rev >= Revision8:
		d.sch = submit8
	default:
		d.sch = verbSchemas[s.Verb]
	}
	if !d.document() {
		resetInput(in, s.Role, s.Actor, s.Job, s.Verb)
		return d.err()
	}
	return nil
}

// batchSchemas returns the body and element schemas of a batch of verb v
// (revision 7 on: submit, ack, result).
func batchSchemas(v Verb) (body, item *bodySchema) {
	switch v {
	case VerbSubmit:
		return batchSubmitSchema, submitItemSchema
	case VerbAck:
		return batchAckSchema, ackItemSchema
	}
	return batchResultSchema, resultItemSchema
}

// resetInput zeroes in except for the identity given and the capacity of
// Leases and Batch.
func resetInput(in *Input, role Role, actor, job string, verb Verb) {
	leases, batch := in.Leases[:0], in.Batch[:0]
	*in = Input{Role: role, Actor: actor, Job: job, Verb: verb, Leases: leases, Batch: batch}
}

type jsonKind uint8

const (
	kString jsonKind = iota + 1
	kNumber
	kBool
	kObject // scanned and skipped
	kArray  // scanned and skipped
)

var jsonKindNames = [...]string{kString: "a string", kNumber: "a number", kBool: "a boolean", kObject: "an object", kArray: "an array"}

type inputDecoder struct {
	b     []byte
	i     int // next byte to read
	in    *Input
	sch   *bodySchema
	rev   uint32       // the rules revision the input is decoded under
	seen  bodyFieldSet // body keys read so far
	elem  int          // index of the lease element being read; -1 outside
	depth int          // depth a composite value of the current object would have
	ctx   string       // name of the field whose value is being read
	// opaque is set while the string of a payload (revision 4) is
	// scanned: it may hold escaped control characters, and DEL raw.
	opaque bool
	// item is the schema of an element of a batch submit, ack or result
	// (revision 7; nil otherwise), whose elements go to in.Batch; arr is
	// the name of its array ("jobs" or "leases") in error fields;
	// permanent marks the elements whose "permanent" key was read.
	item      *bodySchema
	arr       string
	permanent [MaxBatch / 64]uint64

	sv   []byte // content of the last string scanned (aliases b or buf)
	buf  []byte // scratch for strings with escapes
	nNeg bool   // last number scanned: sign,
	nBig bool   // more than 19 digits (nMag is then meaningless),
	nMag uint64 // magnitude

	// The failure, once there is one.
	code   Reason
	efield string
	eelem  int
	detail string
}

func (d *inputDecoder) fail(code Reason, name, detail string) bool {
	d.code, d.efield, d.eelem, d.detail = code, name, d.elem, detail
	return false
}

// failv fails on the value of the current field.
func (d *inputDecoder) failv(code Reason, detail string) bool { return d.fail(code, d.ctx, detail) }

// syntax fails with syntax_error; the body as a whole is at fault.
func (d *inputDecoder) syntax(detail string) bool {
	d.code, d.efield, d.eelem = ReasonSyntaxError, "", -1
	d.detail = detail + " at offset " + strconv.Itoa(d.i)
	return false
}

func (d *inputDecoder) err() *DecodeError {
	f := d.efield
	if d.eelem >= 0 {
		arr := d.arr
		if arr == "" {
			arr = "leases"
		}
		p := arr + "[" + strconv.Itoa(d.eelem) + "]"
		if f != "" {
			p += "." + f
		}
		f = p
	}
	return &DecodeError{Code: d.code, Field: f, Detail: d.detail}
}

// spaceRun is what ws compares a run of spaces with.
var spaceRun = bytes.Repeat([]byte{' '}, 1024)

func (d *inputDecoder) ws() {
	// perf: a run of spaces a kilobyte, then eight bytes, at a time (a
	// body padded to its limit with spaces is a cheap flood otherwise,
	// under the race detector above all, which instruments every byte read
	// by Go code but not the assembly of bytes.Equal).
	for d.i+len(spaceRun) <= len(d.b) && bytes.Equal(d.b[d.i:d.i+len(spaceRun)], spaceRun) {
		d.i += len(spaceRun)
	}
	for d.i+8 <= len(d.b) && binary.LittleEndian.Uint64(d.b[d.i:]) == 0x2020202020202020 {
		d.i += 8
	}
	for d.i < len(d.b) {
		if c := d.b[d.i]; c > ' ' || c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return
		}
		d.i++
	}
}

func (d *inputDecoder) document() bool {
	d.ws()
	if d.i >= len(d.b) {
		return d.syntax("empty body")
	}
	switch c := d.b[d.i]; {
	case c == '{':
	case c == '[' || c == '"' || c == '-' || c >= '0' && c <= '9':
		return d.fail(ReasonNotObject, "", "the body must be a JSON object")
	case c == 't' || c == 'f' || c == 'n':
		if !d.literal(c) {
			return false
		}
		return d.fail(ReasonNotObject, "", "the body must be a JSON object")
	case c == 0xEF && len(d.b)-d.i >= 3 && d.b[d.i+1] == 0xBB && d.b[d.i+2] == 0xBF:
		return d.syntax("byte order mark")
	default:
		return d.syntax("expected '{'")
	}
	if !d.object() {
		return false
	}
	d.ws()
	if d.i < len(d.b) {
		return d.fail(ReasonTrailingData, "", strconv.Itoa(len(d.b)-d.i)+" bytes after the closing brace")
	}
	return d.finish()
}

// object reads the body object; d.b[d.i] is '{'.
func (d *inputDecoder) object() bool {
	d.i++
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return true
	}
	for {
		f, ok := d.key(d.sch, d.seen)
		if !ok {
			return false
		}
		d.seen |= 1 << f
		d.ctx = bodyFieldNames[f]
		if !d.field(f) {
			return false
		}
		d.ws()
		if done, ok := d.sep('}'); !ok || done {
			return ok
		}
	}
}

// sep reads ',' or close after a member or element.
func (d *inputDecoder) sep(close byte) (done, ok bool) {
	if d.i >= len(d.b) {
		return false, d.syntax("unexpected end of body")
	}
	switch d.b[d.i] {
	case ',':
		d.i++
		d.ws()
		return false, true
	case close:
		d.i++
		return true, true
	}
	return false, d.syntax("expected ',' or '" + string(close) + "'")
}

// key reads a key of an object of bodySchema sch, whose keys seen so far are
// seen, and the colon after it.
func (d *inputDecoder) key(sch *bodySchema, seen bodyFieldSet) (bodyField, bool) {
	if d.i >= len(d.b) {
		return fNone, d.syntax("unexpected end of body")
	}
	if d.b[d.i] != '"' {
		return fNone, d.syntax("expected a string key")
	}
	d.ctx = ""
	if !d.scanString() {
		return fNone, false
	}
	f := lookupBodyField(d.sv)
	if f == fNone || !sch.allowed.has(f) {
		return fNone, d.unknownKey(sch)
	}
	if seen.has(f) {
		return fNone, d.fail(ReasonDuplicateKey, bodyFieldNames[f], "the key appears twice")
	}
	// Only a resolve sets Action, and only once its value is read.
	if a := d.in.Action; a != ActionNone && actionOnly.has(f) && !actionUses[a].has(f) {
		return fNone, d.fail(ReasonUnknownField, bodyFieldNames[f], "not used by action "+a.String())
	}
	d.ws()
	if d.i >= len(d.b) || d.b[d.i] != ':' {
		return fNone, d.syntax("expected ':'")
	}
	d.i++
	d.ws()
	return f, true
}

// unknownKey fails on the key d.sv, which is not a field of sch.
func (d *inputDecoder) unknownKey(sch *bodySchema) bool {
	k := string(d.sv)
	name := errKeyName(k)
	for _, f := range sch.fields {
		if strings.EqualFold(k, bodyFieldNames[f]) {
			return d.fail(ReasonCaseVariantKey, name, "differs only in case from "+strconv.Quote(bodyFieldNames[f]))
		}
	}
	for f := fV; f < bodyFieldCount; f++ {
		if n := bodyFieldNames[f]; fieldSince(f) <= d.rev && k != n && strings.EqualFold(k, n) {
			return d.fail(ReasonCaseVariantKey, name, "differs only in case from "+strconv.Quote(n))
		}
	}
	return d.fail(ReasonUnknownField, name, "not a field of "+sch.name)
}

// errKeyName is k cut to at most MaxTokenLen bytes (on a rune boundary), to be
// used as the Field of an error.
func errKeyName(k string) string {
	if len(k) <= MaxTokenLen {
		return k
	}
	n := MaxTokenLen
	for n > 0 && !utf8.RuneStart(k[n]) {
		n--
	}
	return k[:n] + "..."
}

// field reads the value of body field f.
func (d *inputDecoder) field(f bodyField) bool {
	in := d.in
	ok := true
	switch f {
	case fV:
		if ok = d.integer(); ok && (d.nNeg || d.nBig || d.nMag != Version) {
			return d.failv(ReasonUnsupportedVersion, "this protocol is version "+strconv.Itoa(Version))
		}
	case fActor:
		ok = d.str() && d.identity(in.Actor, "actor")
	case fJob:
		if ok = d.str(); ok && in.Job == NoJob {
			return d.failv(ReasonIdentityMismatch, "the subject names no job")
		}
		ok = ok && d.identity(in.Job, "job")
	case fSentAt:
		in.SentAt, ok = d.sentAt()
	case fAction:
		ok = d.action()
	case fHolder:
		in.Holder, ok = d.token()
	case fLeaseID:
		in.LeaseID, ok = d.token()
	case fGeneration:
		in.Generation, ok = d.seq()
	case fRenewSeq:
		in.RenewSeq, ok = d.seq()
	case fProgressSeq:
		in.ProgressSeq, ok = d.seq()
	case fValue:
		var v uint64
		v, ok = d.bounded(0, MaxProgress, ReasonBadValue)
		in.Value = int64(v)
	case fOutcome:
		ok = d.outcome()
	case fLeaseMS:
		in.LeaseMS, ok = d.duration()
	case fAckTimeoutMS:
		var ms int64
		ms, ok = d.duration()
		if in.Verb == VerbPolicy {
			in.Policy.AckTimeout = ms * 1e6
		} else {
			in.AckTimeoutMS = ms
		}
	case fMinLeaseMS:
		ok = d.policyDuration(&in.Policy.MinLease)
	case fMaxLeaseMS:
		ok = d.policyDuration(&in.Policy.MaxLease)
	case fDefaultLeaseMS:
		ok = d.policyDuration(&in.Policy.DefaultLease)
	case fCancelTimeoutMS:
		ok = d.policyDuration(&in.Policy.CancelTimeout)
	case fMaxLifetimeMS:
		ok = d.policyDuration(&in.Policy.MaxLifetime)
	case fMaxGenerations:
		in.Policy.MaxGenerations, ok = d.bounded(1, MaxGenerations, ReasonBadValue)
	case fRetainMS:
		var ms uint64
		ms, ok = d.bounded(0, MaxRetainMS, ReasonBadValue)
		in.Policy.Retain = int64(ms) * 1e6
	case fLeases, fJobs:
		ok = d.leases()
	case fNote, fDetail, fReason:
		in.Text, ok = d.text()
	case fRevision:
		var v uint64
		v, ok = d.bounded(Revision1, CurrentRevision, ReasonBadValue)
		in.Revision = uint32(v)
	case fLeaseKey:
		ok = d.leaseKey()
	case fInputSeq:
		in.CheckpointSeq, ok = d.seq()
	case fStateHash:
		ok = d.stateHash()
	case fQueue:
		in.Queue, ok = d.token()
	case fPriority:
		var v uint64
		v, ok = d.bounded(0, MaxPriority, ReasonBadValue)
		in.Priority = int64(v)
	case fMaxAttempts:
		in.MaxAttempts, ok = d.bounded(1, MaxAttempts, ReasonBadValue)
	case fBackoffMS:
		in.BackoffMS, ok = d.duration()
	case fBackoffMaxMS:
		in.BackoffMax, ok = d.duration()
	case fPayload:
		ok = d.payload()
	case fSlots:
		in.Slots, ok = d.bounded(0, MaxSlots, ReasonBadValue)
	case fTTLMS:
		// A duration with a lower ceiling: past it is bad_duration too.
		var ms uint64
		ms, ok = d.bounded(MinDurationMS, MaxCapacityTTL, ReasonBadDuration)
		in.TTLMS = int64(ms)
	case fPermanent:
		in.Permanent, ok = d.boolean()
	case fRunAt:
		in.RunAt, ok = d.timeValue()
	case fDelayMS:
		var ms uint64
		ms, ok = d.bounded(MinDurationMS, MaxDelayMS, ReasonBadDuration)
		in.DelayMS = int64(ms)
	case fUniqueKey:
		in.UniqueKey, ok = d.token()
	case fUniqueForMS:
		in.UniqueForMS, ok = d.duration()
	case fConcurrencyKey:
		in.ConcurrencyKey, ok = d.token()
	case fMaxActive:
		in.MaxActive, ok = d.bounded(0, MaxActive, ReasonBadValue)
		in.HasMaxActive = ok
	case fRate:
		in.Rate, ok = d.bounded(1, MaxRate, ReasonBadValue)
	case fPeriodMS:
		in.PeriodMS, ok = d.duration()
	case fSchedule:
		if in.Schedule, ok = d.token(); ok && len(in.Schedule) > MaxScheduleIDLen {
			in.Schedule, ok = "", d.failv(ReasonBadToken, "at most 40 characters: a fired job's id adds its due time")
		}
	case fScheduleOp:
		ok = d.scheduleOp()
	case fCron:
		ok = d.cronExpr()
	case fTZ:
		ok = d.tzRule()
	case fZone:
		ok = d.zoneName()
	case fMissed:
		ok = d.missed()
	}
	return ok
}

// scheduleOp reads a schedule's op (revision 10).
func (d *inputDecoder) scheduleOp() bool {
	if !d.str() {
		return false
	}
	op, ok := ParseScheduleOp(string(d.sv))
	if !ok {
		return d.failv(ReasonBadEnum, "want set, pause, resume or delete")
	}
	d.in.ScheduleOp = op
	return true
}

// missed reads a schedule's missed-fire policy (revision 10).
func (d *inputDecoder) missed() bool {
	if !d.str() {
		return false
	}
	m, ok := ParseMissed(string(d.sv))
	if !ok {
		return d.failv(ReasonBadEnum, "want skip or once")
	}
	d.in.Missed = m
	return true
}

// cronExpr reads a schedule's expression: one cron.Parse accepts.
func (d *inputDecoder) cronExpr() bool {
	if !d.str() {
		return false
	}
	if len(d.sv) > cron.MaxExprLen {
		return d.failv(ReasonTooLarge, strconv.Itoa(len(d.sv))+" bytes, over "+strconv.Itoa(cron.MaxExprLen))
	}
	if _, err := cron.Parse(string(d.sv)); err != nil {
		return d.failv(ReasonBadValue, strings.TrimPrefix(err.Error(), cron.ErrSyntax.Error()+"\n"))
	}
	d.in.Cron = string(d.sv)
	return true
}

// tzRule reads a schedule's zone rule: one cron.ParseZone accepts.
func (d *inputDecoder) tzRule() bool {
	if !d.str() {
		return false
	}
	if len(d.sv) > cron.MaxZoneLen {
		return d.failv(ReasonTooLarge, strconv.Itoa(len(d.sv))+" bytes, over "+strconv.Itoa(cron.MaxZoneLen))
	}
	if _, err := cron.ParseZone(string(d.sv)); err != nil {
		return d.failv(ReasonBadValue, strings.TrimPrefix(err.Error(), cron.ErrZone.Error()+"\n"))
	}
	d.in.TZ = string(d.sv)
	return true
}

// zoneName reads the IANA name a schedule's rule came from: shown only,
// so only its shape is checked (1 to 64 of [A-Za-z0-9_+-/]).
func (d *inputDecoder) zoneName() bool {
	if !d.str() {
		return false
	}
	if len(d.sv) == 0 || len(d.sv) > 64 {
		return d.failv(ReasonBadValue, "want a time zone name of 1 to 64 bytes")
	}
	for _, c := range d.sv {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '+' || c == '-' || c == '/') {
			return d.failv(ReasonBadValue, "want a time zone name of [A-Za-z0-9_+-/]")
		}
	}
	d.in.Zone = string(d.sv)
	return true
}

// payload reads a submit's payload: a string of at most MaxPayloadBytes
// once unescaped. It is opaque, so unlike any other string it may hold
// control characters (escaped: JSON has no raw U+0000..U+001F; DEL may be
// raw). A value of another type is scanned as any other value.
func (d *inputDecoder) payload() bool {
	d.opaque = d.i < len(d.b) && d.b[d.i] == '"'
	ok := d.str()
	d.opaque = false
	if !ok {
		return false
	}
	if len(d.sv) > MaxPayloadBytes {
		return d.failv(ReasonTooLarge, strconv.Itoa(len(d.sv))+" bytes, over "+strconv.Itoa(MaxPayloadBytes))
	}
	d.in.Payload, d.in.HasPayload = string(d.sv), true
	return true
}

// boolean reads a JSON boolean.
func (d *inputDecoder) boolean() (bool, bool) {
	t := d.i < len(d.b) && d.b[d.i] == 't'
	k, ok := d.value()
	if ok && k != kBool {
		return false, d.wrongType(k, "a boolean")
	}
	return t, ok
}

// leaseKey reads a lease key: LeaseKeyLen bytes as unpadded base64url.
func (d *inputDecoder) leaseKey() bool {
	if !d.str() {
		return false
	}
	if len(d.sv) != base64.RawURLEncoding.EncodedLen(LeaseKeyLen) {
		return d.failv(ReasonBadValue, "want "+strconv.Itoa(LeaseKeyLen)+" bytes as unpadded base64url")
	}
	var key [LeaseKeyLen]byte
	if n, err := base64.RawURLEncoding.Strict().Decode(key[:], d.sv); err != nil || n != LeaseKeyLen {
		return d.failv(ReasonBadValue, "want "+strconv.Itoa(LeaseKeyLen)+" bytes as unpadded base64url")
	}
	d.in.LeaseKey = key
	return true
}

// stateHash reads a state hash: StateHashLen bytes as lower-case hex.
func (d *inputDecoder) stateHash() bool {
	if !d.str() {
		return false
	}
	h, ok := ParseStateHash(d.sv)
	if !ok {
		return d.failv(ReasonBadValue, "want "+strconv.Itoa(2*StateHashLen)+" lower-case hexadecimal digits")
	}
	d.in.StateHash = h
	return true
}

// ParseStateHash reads a state hash in its wire form: 64 lower-case
// hexadecimal digits.
func ParseStateHash(b []byte) ([StateHashLen]byte, bool) {
	var h [StateHashLen]byte
	if len(b) != 2*StateHashLen {
		return h, false
	}
	for i := range h {
		hi, ok1 := hexDigit(b[2*i])
		lo, ok2 := hexDigit(b[2*i+1])
		if !ok1 || !ok2 {
			return h, false
		}
		h[i] = hi<<4 | lo
	}
	return h, true
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// value scans the value at d.i. Strings are left in d.sv, numbers in
// d.nNeg/nBig/nMag; objects and arrays are skipped (with the depth limit).
// null fails with null_value.
func (d *inputDecoder) value() (jsonKind, bool) { return d.valueAt(d.depth) }

// valueAt is value where a composite would have the given depth.
func (d *inputDecoder) valueAt(depth int) (jsonKind, bool) {
	if d.i >= len(d.b) {
		return 0, d.syntax("unexpected end of body")
	}
	switch c := d.b[d.i]; {
	case c == '"':
		return kString, d.scanString()
	case c == '-' || c == '+' || c >= '0' && c <= '9':
		return kNumber, d.scanNumber()
	case c == 't' || c == 'f':
		return kBool, d.literal(c)
	case c == 'n':
		if !d.literal(c) {
			return 0, false
		}
		return 0, d.failv(ReasonNullValue, "null is not a value")
	case c == '{':
		return kObject, d.skip(depth)
	case c == '[':
		return kArray, d.skip(depth)
	}
	return 0, d.syntax("unexpected byte " + strconv.Quote(string(d.b[d.i:d.i+1])))
}

// literal reads true, false or null, whichever starts with c.
func (d *inputDecoder) literal(c byte) bool {
	lit := "null"
	switch c {
	case 't':
		lit = "true"
	case 'f':
		lit = "false"
	}
	if len(d.b)-d.i < len(lit) || string(d.b[d.i:d.i+len(lit)]) != lit {
		return d.syntax("invalid literal")
	}
	d.i += len(lit)
	return true
}

// skip scans and skips the object or array at d.i, which has the given depth.
func (d *inputDecoder) skip(depth int) bool {
	if depth > maxBodyDepth {
		return d.failv(ReasonTooDeep, "nested deeper than "+strconv.Itoa(maxBodyDepth))
	}
	close := byte(']')
	obj := d.b[d.i] == '{'
	if obj {
		close = '}'
	}
	d.i++
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == close {
		d.i++
		return true
	}
	for {
		if obj {
			if d.i >= len(d.b) {
				return d.syntax("unexpected end of body")
			}
			if d.b[d.i] != '"' {
				return d.syntax("expected a string key")
			}
			if !d.scanString() {
				return false
			}
			d.ws()
			if d.i >= len(d.b) || d.b[d.i] != ':' {
				return d.syntax("expected ':'")
			}
			d.i++
			d.ws()
		}
		if _, ok := d.valueAt(depth + 1); !ok {
			return false
		}
		d.ws()
		if done, ok := d.sep(close); !ok || done {
			return ok
		}
	}
}

// scanString scans the string at d.i (d.b[d.i] is '"') and leaves its
// content, unescaped, in d.sv.
func (d *inputDecoder) scanString() bool {
	b := d.b
	start := d.i + 1
	i := start
	for {
		for i+8 <= len(b) && plain8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && jsonStrPlain[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			d.sv = b[start:i]
			d.i = i + 1
			return true
		case c == '\\':
			return d.scanEscaped(start, i)
		case c < 0x20 || c == 0x7f && !d.opaque:
			d.i = i
			return d.failv(ReasonControlChar, "raw control character in a string")
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			d.i = i
			return d.failv(ReasonInvalidUtf8, "invalid UTF-8 in a string")
		}
		i += n
	}
	d.i = len(b)
	return d.syntax("unterminated string")
}

// digits8 reports whether the 8 bytes packed in x are all ASCII digits.
func digits8(x uint64) bool {
	const hi, lo = 0xF0F0F0F0F0F0F0F0, 0x0F0F0F0F0F0F0F0F
	return x&hi == 0x3030303030303030 && (x&lo+0x0606060606060606)&hi == 0
}

// plain8 reports whether the 8 bytes packed in x are all jsonStrPlain:
// none is below 0x20, '"', '\\', 0x7f or above.
func plain8(x uint64) bool {
	const lsb, msb = 0x0101010101010101, 0x8080808080808080
	ctl := (x - 0x20*lsb) &^ x
	q := x ^ '"'*lsb
	q = (q - lsb) &^ q
	bs := x ^ '\\'*lsb
	bs = (bs - lsb) &^ bs
	del := x ^ 0x7f*lsb
	del = (del - lsb) &^ del
	return (x|ctl|q|bs|del)&msb == 0
}

// scanEscaped continues scanString from the first backslash, at i, copying
// the unescaped content to d.buf.
func (d *inputDecoder) scanEscaped(start, i int) bool {
	b := d.b
	buf := append(d.buf[:0], b[start:i]...)
	for i < len(b) {
		c := b[i]
		switch {
		case jsonStrPlain[c]:
			buf = append(buf, c)
			i++
			continue
		case c == '"':
			d.buf, d.sv, d.i = buf, buf, i+1
			return true
		case c == 0x7f && d.opaque:
			buf = append(buf, c)
			i++
			continue
		case c < 0x20 || c == 0x7f:
			d.i = i
			return d.failv(ReasonControlChar, "raw control character in a string")
		case c >= 0x80:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				d.i = i
				return d.failv(ReasonInvalidUtf8, "invalid UTF-8 in a string")
			}
			buf = append(buf, b[i:i+n]...)
			i += n
			continue
		}
		// c == '\\'
		d.i = i
		if i+1 >= len(b) {
			return d.syntax("unterminated string")
		}
		switch e := b[i+1]; e {
		case '"', '\\', '/':
			buf = append(buf, e)
			i += 2
		case 'b', 'f', 'n', 'r', 't':
			if !d.opaque {
				return d.failv(ReasonControlChar, "escaped control character in a string")
			}
			buf = append(buf, jsonShortEscapes[e])
			i += 2
		case 'u':
			r, ok := jsonHex4(b, i+2)
			if !ok {
				return d.syntax("invalid \\u escape")
			}
			i += 6
			switch {
			case (r < 0x20 || r == 0x7f) && !d.opaque:
				return d.failv(ReasonControlChar, "escaped control character in a string")
			case r >= 0xDC00 && r < 0xE000:
				return d.failv(ReasonInvalidUtf8, "lone low surrogate")
			case r >= 0xD800 && r < 0xDC00:
				if i+1 >= len(b) || b[i] != '\\' || b[i+1] != 'u' {
					return d.failv(ReasonInvalidUtf8, "lone high surrogate")
				}
				d.i = i
				lo, ok := jsonHex4(b, i+2)
				if !ok {
					return d.syntax("invalid \\u escape")
				}
				if lo < 0xDC00 || lo >= 0xE000 {
					return d.failv(ReasonInvalidUtf8, "high surrogate not followed by a low one")
				}
				i += 6
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return d.syntax("invalid escape")
		}
	}
	d.buf = buf
	d.i = len(b)
	return d.syntax("unterminated string")
}

// jsonShortEscapes maps the letter of an escape \b, \f, \n, \r or \t to
// its control character (only a payload may hold one).
var jsonShortEscapes = [256]byte{'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// jsonHex4 decodes the four hex digits at b[i:].
func jsonHex4(b []byte, i int) (rune, bool) {
	if len(b)-i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// scanNumber scans the number token at d.i into d.nNeg, d.nBig and d.nMag.
//
// The number token is the longest run of jsonNumByte; it must be
// -?(0|[1-9][0-9]*), else bad_number.
func (d *inputDecoder) scanNumber() bool {
	b := d.b
	i := d.i
	neg := b[i] == '-'
	if neg {
		i++
	}
	start := i
	var m uint64
	for i < len(b) && b[i]-'0' <= 9 {
		m = m*10 + uint64(b[i]-'0')
		i++
		if i-start == 20 {
			// perf: past 19 digits the value is only "too big" (nBig);
			// skip the rest eight digits at a time (a body of 64 KiB of
			// digits is a cheap flood otherwise).
			for i+8 <= len(b) && digits8(binary.LittleEndian.Uint64(b[i:])) {
				i += 8
			}
		}
	}
	n := i - start
	switch {
	case n == 0:
		return d.failv(ReasonBadNumber, "not an integer")
	case i < len(b) && jsonNumByte[b[i]]:
		return d.failv(ReasonBadNumber, "not a plain integer (fraction, exponent or sign)")
	case b[start] == '0' && n > 1:
		return d.failv(ReasonBadNumber, "not a plain integer (leading zero)")
	case b[start] == '0' && neg:
		return d.failv(ReasonBadNumber, "-0 is not a plain integer")
	}
	d.i = i
	d.nNeg, d.nBig, d.nMag = neg, n > 19, m
	return true
}

func (d *inputDecoder) wrongType(k jsonKind, want string) bool {
	return d.failv(ReasonWrongType, "want "+want+", got "+jsonKindNames[k])
}

// str scans a string value into d.sv.
func (d *inputDecoder) str() bool {
	k, ok := d.value()
	if ok && k != kString {
		return d.wrongType(k, "a string")
	}
	return ok
}

// integer scans a number value into d.nNeg, d.nBig and d.nMag.
func (d *inputDecoder) integer() bool {
	k, ok := d.value()
	if ok && k != kNumber {
		return d.wrongType(k, "an integer")
	}
	return ok
}

// bounded reads an integer in lo..hi; out of range is code.
func (d *inputDecoder) bounded(lo, hi uint64, code Reason) (uint64, bool) {
	if !d.integer() {
		return 0, false
	}
	if d.nBig || d.nMag > hi || d.nMag < lo || d.nNeg && d.nMag != 0 {
		return 0, d.failv(code, "must be "+strconv.FormatUint(lo, 10)+".."+strconv.FormatUint(hi, 10))
	}
	return d.nMag, true
}

func (d *inputDecoder) seq() (uint64, bool) { return d.bounded(1, MaxSeq, ReasonBadSequence) }

func (d *inputDecoder) duration() (int64, bool) {
	ms, ok := d.bounded(MinDurationMS, MaxDurationMS, ReasonBadDuration)
	return int64(ms), ok
}

// policyDuration reads a duration in milliseconds into *ns in nanoseconds.
func (d *inputDecoder) policyDuration(ns *int64) bool {
	ms, ok := d.duration()
	*ns = ms * 1e6
	return ok
}

func (d *inputDecoder) token() (string, bool) {
	if !d.str() {
		return "", false
	}
	if !validTokenBytes(d.sv) {
		return "", d.failv(ReasonBadToken, "want 1 to 64 characters of [A-Za-z0-9_-], not _")
	}
	return string(d.sv), true
}

func (d *inputDecoder) text() (string, bool) {
	if !d.str() {
		return "", false
	}
	if len(d.sv) > MaxTextLen {
		return "", d.failv(ReasonTooLarge, strconv.Itoa(len(d.sv))+" bytes, over "+strconv.Itoa(MaxTextLen))
	}
	return string(d.sv), true
}

// identity checks the body's actor or job, scanned into d.sv, against the
// subject's.
func (d *inputDecoder) identity(want, what string) bool {
	if string(d.sv) == want {
		return true
	}
	if !validTokenBytes(d.sv) {
		return d.failv(ReasonBadToken, "want 1 to 64 characters of [A-Za-z0-9_-], not _")
	}
	return d.failv(ReasonIdentityMismatch, "the subject names another "+what)
}

var (
	minSentAt = time.Unix(0, -1<<63)
	maxSentAt = time.Unix(0, 1<<63-1)
)

func (d *inputDecoder) sentAt() (int64, bool) { return d.timeValue() }

// timeValue reads an RFC 3339 time with a time zone, from 1678 to the end
// of int64 Unix nanoseconds (sent_at; a submit's run_at, revision 8).
func (d *inputDecoder) timeValue() (int64, bool) {
	if !d.str() {
		return 0, false
	}
	ns, ok := parseRFC3339Common(d.sv)
	if !ok {
		t, err := time.Parse(time.RFC3339Nano, string(d.sv))
		if err != nil {
			return 0, d.failv(ReasonBadTime, "want an RFC 3339 time with a time zone")
		}
		if t.Before(minSentAt) || t.After(maxSentAt) {
			return 0, d.failv(ReasonBadTime, sentAtRange)
		}
		ns = t.UnixNano()
	}
	if ns < minSentAtNs {
		return 0, d.failv(ReasonBadTime, sentAtRange)
	}
	return ns, true
}

// The accepted sent_at range: from 1678-01-01 to the end of int64 Unix
// nanoseconds (2262-04-11T23:47:16.854775807Z).
const sentAtRange = "out of range (1678-01-01T00:00:00Z to 2262-04-11T23:47:16.854775807Z)"

var minSentAtNs = time.Date(1678, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// parseRFC3339Common parses, without allocating, the common form
// YYYY-MM-DDTHH:MM:SS[.F](Z|+HH:MM|-HH:MM), F being 1 to 9 digits, with every
// component in range, into Unix nanoseconds. It reports false for anything
// else, which is then left to time.Parse: it accepts a subset of what
// time.Parse(time.RFC3339Nano) accepts and gives the same instant (FuzzSentAt
// checks both). Instants within a second of the ends of the int64 range are
// also left to time.Parse.
func parseRFC3339Common(b []byte) (int64, bool) {
	if len(b) < 20 || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' {
		return 0, false
	}
	year, ok1 := digits(b[0:4])
	month, ok2 := digits(b[5:7])
	day, ok3 := digits(b[8:10])
	hour, ok4 := digits(b[11:13])
	minute, ok5 := digits(b[14:16])
	sec, ok6 := digits(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 ||
		day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return 0, false
	}
	i, ns := 19, int64(0)
	if b[i] == '.' {
		j := i + 1
		for j < len(b) && j-i <= 9 && b[j] >= '0' && b[j] <= '9' {
			ns = ns*10 + int64(b[j]-'0')
			j++
		}
		n := j - i - 1
		if n == 0 || j < len(b) && b[j] >= '0' && b[j] <= '9' {
			return 0, false
		}
		for ; n < 9; n++ {
			ns *= 10
		}
		i = j
	}
	var offset int64 // seconds east of UTC
	switch z := b[i:]; {
	case len(z) == 1 && z[0] == 'Z':
	case len(z) == 6 && (z[0] == '+' || z[0] == '-') && z[3] == ':':
		hh, ok1 := digits(z[1:3])
		mm, ok2 := digits(z[4:6])
		if !ok1 || !ok2 || hh > 23 || mm > 59 {
			return 0, false
		}
		offset = int64(hh*60+mm) * 60
		if z[0] == '-' {
			offset = -offset
		}
	default:
		return 0, false
	}
	secs := daysFromCivil(year, month, day)*86400 + int64(hour*3600+minute*60+sec) - offset
	const limit = (1<<63 - 1) / 1_000_000_000 // whole seconds representable in ns either way
	if secs >= limit || secs <= -limit {
		return 0, false
	}
	return secs*1e9 + ns, true
}

// daysFromCivil is the number of days from 1970-01-01 to the given date of
// the proleptic Gregorian calendar (H. Hinnant's algorithm).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y
	if era < 0 {
		era -= 399
	}
	era /= 400
	yoe := y - era*400
	mp := (m + 9) % 12 // March is 0
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

// digits is the value of a run of decimal digits.
func digits(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

func (d *inputDecoder) outcome() bool {
	if !d.str() {
		return false
	}
	var o Outcome
	switch string(d.sv) {
	case "SUCCESS":
		o = OutcomeSuccess
	case "FAILED":
		o = OutcomeFailed
	case "CANCELLED":
		o = OutcomeCancelled
	default:
		return d.failv(ReasonBadEnum, "want SUCCESS, FAILED or CANCELLED")
	}
	if d.in.Verb == VerbResolve && o == OutcomeSuccess {
		return d.failv(ReasonBadEnum, "settle takes FAILED or CANCELLED")
	}
	d.in.Outcome = o
	return true
}

func (d *inputDecoder) action() bool {
	if !d.str() {
		return false
	}
	var a Action
	switch string(d.sv) {
	case "affirm":
		a = ActionAffirm
	case "revoke":
		a = ActionRevoke
	case "settle":
		a = ActionSettle
	case "retry":
		a = ActionRetry
	case "discard":
		a = ActionDiscard
	}
	if a == ActionNone || a.Since() > d.rev {
		if d.rev >= Revision4 {
			return d.failv(ReasonBadEnum, "want affirm, revoke, settle, retry or discard")
		}
		return d.failv(ReasonBadEnum, "want affirm, revoke or settle")
	}
	// Fields read before the action that it does not use.
	if bad := d.seen & actionOnly &^ actionUses[a]; bad != 0 {
		for f := fV; f < bodyFieldCount; f++ {
			if bad.has(f) {
				return d.fail(ReasonUnknownField, bodyFieldNames[f], "not used by action "+a.String())
			}
		}
	}
	d.in.Action = a
	return true
}

// leases reads the elements of a batch: a batch renew's leases, and from
// revision 7 on a batch ack's or result's leases or a batch submit's jobs
// (d.item).
func (d *inputDecoder) leases() bool {
	noun := "lease"
	if d.item != nil {
		noun = d.item.name
		d.arr = d.ctx
	}
	if d.i >= len(d.b) || d.b[d.i] != '[' {
		k, ok := d.value()
		if ok {
			return d.wrongType(k, "an array of "+noun+" objects")
		}
		return false
	}
	d.i++
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return true // missing_field once the body is read
	}
	for n := 0; ; n++ {
		if n == MaxBatch && d.i < len(d.b) && startsValue(d.b[d.i]) {
			return d.failv(ReasonTooLarge, "more than "+strconv.Itoa(MaxBatch)+" "+noun+"s")
		}
		d.elem = n
		ctx := d.ctx
		if d.i < len(d.b) && d.b[d.i] == '{' {
			ok := false
			if d.item != nil {
				ok = d.batchItem(n)
			} else {
				ok = d.lease()
			}
			if !ok {
				return false
			}
		} else {
			d.ctx = ""
			k, ok := d.valueAt(3)
			if !ok {
				return false
			}
			return d.wrongType(k, "a "+noun+" object")
		}
		d.elem = -1
		d.ctx = ctx
		d.ws()
		if done, ok := d.sep(']'); !ok || done {
			return ok
		}
	}
}

// startsValue reports whether c can start a JSON value (or a number token).
func startsValue(c byte) bool {
	switch {
	case c == '{' || c == '[' || c == '"' || c == 't' || c == 'f' || c == 'n':
		return true
	case c == '-' || c == '+' || c >= '0' && c <= '9':
		return true
	}
	return false
}

// lease reads one element of leases; d.b[d.i] is '{'.
func (d *inputDecoder) lease() bool {
	in := d.in
	in.Leases = append(in.Leases, LeaseRef{})
	r := &in.Leases[len(in.Leases)-1]
	d.i++
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return true
	}
	d.depth = 4
	ok := d.leaseMembers(r)
	d.depth = 2
	return ok
}

// leaseMembers reads the members of a lease object into r.
func (d *inputDecoder) leaseMembers(r *LeaseRef) bool {
	var seen bodyFieldSet
	for {
		f, ok := d.key(leaseSchema, seen)
		if !ok {
			return false
		}
		seen |= 1 << f
		d.ctx = bodyFieldNames[f]
		switch f {
		case fJob:
			r.Job, ok = d.token()
		case fLeaseID:
			r.LeaseID, ok = d.token()
		case fGeneration:
			r.Generation, ok = d.seq()
		case fRenewSeq:
			r.RenewSeq, ok = d.seq()
		case fLeaseMS:
			r.LeaseMS, ok = d.duration()
		}
		if !ok {
			return false
		}
		d.ws()
		if done, ok := d.sep('}'); !ok || done {
			return ok
		}
	}
}

// batchItem reads element n of a batch submit, ack or result (revision 7)
// into a new element of in.Batch; d.b[d.i] is '{'. Its fields are read as
// those of the single input of the batch's verb, but for its job, a token.
func (d *inputDecoder) batchItem(n int) bool {
	outer := d.in
	outer.Batch = append(outer.Batch, Input{Role: outer.Role, Actor: outer.Actor, Verb: outer.Verb})
	e := &outer.Batch[len(outer.Batch)-1]
	d.i++
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return true
	}
	d.in, d.depth = e, 4
	defer func() { d.in, d.depth = outer, 2 }()
	var seen bodyFieldSet
	for {
		f, ok := d.key(d.item, seen)
		if !ok {
			return false
		}
		seen |= 1 << f
		d.ctx = bodyFieldNames[f]
		switch f {
		case fJob:
			e.Job, ok = d.token()
		case fPermanent:
			d.permanent[n/64] |= 1 << (n % 64)
			ok = d.field(f)
		default:
			ok = d.field(f)
		}
		if !ok {
			return false
		}
		d.ws()
		if done, ok := d.sep('}'); !ok || done {
			return ok
		}
	}
}

// batchRequired checks the required fields of every element of a batch
// submit, ack or result, in array order (an element's field is missing
// when it holds its zero value: none of them may be given as zero).
func (d *inputDecoder) batchRequired() bool {
	in := d.in
	for i := range in.Batch {
		e := &in.Batch[i]
		d.elem = i
		for _, f := range d.item.required {
			var absent bool
			switch f {
			case fJob:
				absent = e.Job == ""
			case fQueue:
				absent = e.Queue == ""
			case fLeaseID:
				absent = e.LeaseID == ""
			case fGeneration:
				absent = e.Generation == 0
			case fOutcome:
				absent = e.Outcome == OutcomeNone
			}
			if absent {
				return d.missing(f, "required")
			}
		}
	}
	d.elem = -1
	return true
}

// submitConsistent checks a submit's backoffs: the cap may not be below
// the first backoff, an absent one standing for its default; the field
// named is the one given.
func (d *inputDecoder) submitConsistent(in *Input) bool {
	lo, hi := in.BackoffMS, in.BackoffMax
	switch {
	case lo == 0 && hi != 0 && hi < DefaultBackoffMS:
		return d.fail(ReasonBadValue, "backoff_max_ms", "below the default backoff_ms ("+strconv.Itoa(DefaultBackoffMS)+")")
	case lo != 0 && hi == 0 && lo > DefaultBackoffMax:
		return d.fail(ReasonBadValue, "backoff_ms", "above the default backoff_max_ms ("+strconv.Itoa(DefaultBackoffMax)+")")
	case lo != 0 && hi != 0 && hi < lo:
		return d.fail(ReasonBadValue, "backoff_max_ms", "below backoff_ms")
	}
	return true
}

// resultConsistent checks a result's permanent (given: its key was read).
func (d *inputDecoder) resultConsistent(in *Input, given bool) bool {
	if given && in.Outcome != OutcomeFailed {
		return d.fail(ReasonBadValue, "permanent", "only a FAILED result takes permanent")
	}
	return true
}

// finishBatch runs the whole-body checks of a batch submit, ack or result
// (revision 7): at least one element, each element's required fields,
// then each element's consistency, in array order; then gives every
// element the batch's sent_at.
func (d *inputDecoder) finishBatch() bool {
	in := d.in
	arr := fLeases
	if in.Verb == VerbSubmit {
		arr = fJobs
	}
	if len(in.Batch) == 0 {
		if d.seen.has(arr) {
			return d.missing(arr, "a batch names at least one "+d.item.name)
		}
		return d.missing(arr, "required")
	}
	if !d.batchRequired() {
		return false
	}
	for i := range in.Batch {
		e := &in.Batch[i]
		d.elem = i
		switch in.Verb {
		case VerbSubmit:
			if !d.submitConsistent(e) {
				return false
			}
		case VerbResult:
			if !d.resultConsistent(e, d.permanent[i/64]&(1<<(i%64)) != 0) {
				return false
			}
		}
		e.SentAt = in.SentAt
	}
	d.elem = -1
	return true
}

func (d *inputDecoder) missing(f bodyField, detail string) bool {
	return d.fail(ReasonMissingField, bodyFieldNames[f], detail)
}

// finish runs the checks that need the whole body.
func (d *inputDecoder) finish() bool {
	in := d.in
	if !d.seen.has(fV) {
		return d.missing(fV, "required")
	}
	for _, f := range d.sch.required {
		if !d.seen.has(f) {
			return d.missing(f, "required")
		}
	}
	if d.item != nil {
		return d.finishBatch()
	}
	switch in.Verb {
	case VerbRenew:
		if in.Job != NoJob {
			in.Leases = append(in.Leases[:0], LeaseRef{Job: in.Job, LeaseID: in.LeaseID, Generation: in.Generation, RenewSeq: in.RenewSeq, LeaseMS: in.LeaseMS})
			break
		}
		if len(in.Leases) == 0 {
			if d.seen.has(fLeases) {
				return d.missing(fLeases, "a batch renew names at least one lease")
			}
			return d.missing(fLeases, "required")
		}
		for i := range in.Leases {
			r := &in.Leases[i]
			d.elem = i
			switch {
			case r.Job == "":
				return d.missing(fJob, "required")
			case r.LeaseID == "":
				return d.missing(fLeaseID, "required")
			case r.Generation == 0:
				return d.missing(fGeneration, "required")
			case r.RenewSeq == 0:
				return d.missing(fRenewSeq, "required")
			}
		}
		d.elem = -1
	case VerbCancel:
		id, gen := d.seen.has(fLeaseID), d.seen.has(fGeneration)
		if id && !gen {
			return d.missing(fGeneration, "lease_id and generation go together")
		}
		if gen && !id {
			return d.missing(fLeaseID, "lease_id and generation go together")
		}
	case VerbResolve:
		for _, f := range actionRequired[in.Action] {
			if !d.seen.has(f) {
				return d.missing(f, "required by action "+in.Action.String())
			}
		}
	case VerbPolicy:
		p := &in.Policy
		switch {
		case p.MinLease > p.DefaultLease:
			return d.fail(ReasonBadPolicy, "default_lease_ms", "below min_lease_ms")
		case p.DefaultLease > p.MaxLease:
			return d.fail(ReasonBadPolicy, "default_lease_ms", "above max_lease_ms")
		case p.MaxLease > p.MaxLifetime:
			return d.fail(ReasonBadPolicy, "max_lease_ms", "above max_lifetime_ms")
		}
	case VerbSubmit:
		if !d.submitConsistent(in) {
			return false
		}
		// Revision 8 on (a batch's elements take none of these fields).
		switch {
		case d.seen.has(fRunAt) && d.seen.has(fDelayMS):
			return d.fail(ReasonBadValue, "delay_ms", "run_at and delay_ms exclude each other")
		case d.seen.has(fUniqueForMS) && !d.seen.has(fUniqueKey):
			return d.missing(fUniqueKey, "unique_for_ms needs a unique_key")
		}
	case VerbResult:
		return d.resultConsistent(in, d.seen.has(fPermanent))
	case VerbSchedule: // revision 10 on
		if in.ScheduleOp == ScheduleSet {
			switch {
			case !d.seen.has(fCron):
				return d.missing(fCron, "a schedule's set needs its expression")
			case !d.seen.has(fQueue):
				return d.missing(fQueue, "a schedule's set needs the queue of its jobs")
			}
			// The template's backoffs, as a submit's: its fires are
			// submits.
			return d.submitConsistent(in)
		}
		if bad := d.seen & scheduleSetOnly; bad != 0 {
			for f := fV; f < bodyFieldCount; f++ {
				if bad.has(f) {
					return d.fail(ReasonUnknownField, bodyFieldNames[f], "not used by op "+in.ScheduleOp.String())
				}
			}
		}
	case VerbLimit: // revision 9 on
		switch {
		case d.seen.has(fMaxActive) && !d.seen.has(fConcurrencyKey):
			return d.missing(fConcurrencyKey, "max_active limits a concurrency key")
		case d.seen.has(fRate) && !d.seen.has(fPeriodMS):
			return d.missing(fPeriodMS, "rate and period_ms go together")
		case d.seen.has(fPeriodMS) && !d.seen.has(fRate):
			return d.missing(fRate, "rate and period_ms go together")
		}
	}
	return true
}
