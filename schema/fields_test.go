package schema

import (
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"slices"
	"testing"

	"github.com/maknow/tenure/events"
)

// inputVerbs are the verbs that have an input schema, in their order.
func inputVerbs() []events.Verb {
	var vs []events.Verb
	for v := events.VerbOffer; v.String() != "?"; v++ {
		vs = append(vs, v)
	}
	return vs
}

// roleOf is a role that may publish v (ops for a policy).
func roleOf(v events.Verb) events.Role {
	for _, r := range []events.Role{events.RoleWorker, events.RoleOps, events.RoleCoord} {
		if v.Allowed(r) {
			return r
		}
	}
	panic("no role may publish " + v.String())
}

// subjectFor is a subject for a body of verb v: the body's actor and job
// when it names them (else w1 and job-1), job _ for a job-less verb and
// for a batch.
func subjectFor(v events.Verb, actor, job string, batch bool) string {
	if actor == "" {
		actor = "w1"
	}
	if job == "" {
		job = "job-1"
	}
	if v.JobLess() || batch {
		job = events.NoJob
	}
	return events.InputSubject(roleOf(v), actor, job, v)
}

// schemaDoc is a schema file as plain JSON.
type schemaDoc map[string]any

func readSchemaDoc(t *testing.T, path string) schemaDoc {
	t.Helper()
	data, err := fs.ReadFile(Files(), path)
	if err != nil {
		t.Fatal(err)
	}
	var d schemaDoc
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

// object is the object schema at the given keys of d ($defs, name, ...).
func (d schemaDoc) object(keys ...string) schemaDoc {
	var v any = map[string]any(d)
	for _, k := range keys {
		v = v.(map[string]any)[k]
	}
	return v.(map[string]any)
}

func (d schemaDoc) propertyNames() []string {
	p, _ := d["properties"].(map[string]any)
	return slices.Sorted(maps.Keys(p))
}

// The shapes an input schema describes: one per verb, two of a verb that
// batches (batchVerbs).
type inputShape struct {
	verb  events.Verb
	batch bool
	obj   schemaDoc // the object schema (with properties)
	uri   string
}

func inputShapes(t *testing.T) []inputShape {
	var out []inputShape
	for _, v := range inputVerbs() {
		d := readSchemaDoc(t, InputPath(v))
		u := BaseURI + InputPath(v)
		if slices.Contains(batchVerbs, v) {
			out = append(out,
				inputShape{v, false, d.object("$defs", "single"), u + "#/$defs/single"},
				inputShape{v, true, d.object("$defs", "batch"), u + "#/$defs/batch"})
			continue
		}
		out = append(out, inputShape{v, false, d, u})
	}
	return out
}

// decodeReason is the decoder's verdict on body: "" when it accepts it.
func decodeReason(subject string, body []byte) events.Reason {
	var in events.Input
	err := events.DecodeInput(subject, body, &in)
	if err == nil {
		return ""
	}
	var de *events.DecodeError
	if !errors.As(err, &de) {
		return "?"
	}
	return de.Code
}

// Every example a schema file gives is valid against it and accepted by
// the decoder (on a subject of the example's actor and job).
func TestSchemaExamples(t *testing.T) {
	s := loadSchemas(t)
	for _, v := range inputVerbs() {
		d := readSchemaDoc(t, InputPath(v))
		exs, _ := d["examples"].([]any)
		if len(exs) == 0 {
			t.Errorf("%s: no examples", InputPath(v))
		}
		for i, ex := range exs {
			m := ex.(map[string]any)
			actor, _ := m["actor"].(string)
			job, _ := m["job"].(string)
			_, batch := m["leases"]
			if _, jobs := m["jobs"]; jobs {
				batch = true
			}
			subject := subjectFor(v, actor, job, batch)
			body, _ := json.Marshal(ex)
			if err := s.validateInput(t, subject, body); err != nil {
				t.Errorf("%s: example %d %s: %s", InputPath(v), i, body, short(err))
			}
			if r := decodeReason(subject, body); r != "" {
				t.Errorf("%s: example %d %s on %s: the decoder rejects it: %s", InputPath(v), i, body, subject, r)
			}
		}
	}
}

// The fields of each input schema are exactly the keys the decoder knows
// for that verb. The decoder is probed with each name the schemas use
// (and a few they do not), its value {} (a wrong type for every field):
// a known key gets wrong_type, an unknown one unknown_field. Job-less
// verbs are the exception the schemas state: the decoder knows the key
// job there, only to reject every value of it (identity_mismatch), and
// the schemas have no job property.
func TestFieldsAgreeWithDecoder(t *testing.T) {
	shapes := inputShapes(t)
	names := map[string]bool{"lease": true, "jobs": true, "id": true, "leases[0]": true}
	for _, sh := range shapes {
		for _, n := range sh.obj.propertyNames() {
			names[n] = true
		}
	}
	elems := map[events.Verb]schemaDoc{} // the element of each batch
	for _, v := range batchVerbs {
		el := "lease"
		if v == events.VerbSubmit {
			el = "item"
		}
		elems[v] = readSchemaDoc(t, InputPath(v)).object("$defs", el)
		for _, n := range elems[v].propertyNames() {
			names[n] = true
		}
	}
	for _, sh := range shapes {
		subject := subjectFor(sh.verb, "", "", sh.batch)
		schemaHas := map[string]bool{}
		for _, n := range sh.obj.propertyNames() {
			schemaHas[n] = true
		}
		for n := range names {
			body, _ := json.Marshal(map[string]any{n: map[string]any{}})
			r := decodeReason(subject, body)
			decoderHas := r == events.ReasonWrongType
			if r != events.ReasonWrongType && r != events.ReasonUnknownField {
				t.Errorf("%s: probe %s: %s, want wrong_type or unknown_field", subject, body, r)
			}
			if n == "job" && (sh.verb.JobLess() || sh.batch) {
				if !decoderHas || schemaHas[n] {
					t.Errorf("%s: job: the decoder knows it %v, the schema %v; want true, false", subject, decoderHas, schemaHas[n])
				}
				if r := decodeReason(subject, []byte(`{"v":1,"job":"job-1"}`)); r != events.ReasonIdentityMismatch {
					t.Errorf("%s: a body naming a job: %s, want identity_mismatch", subject, r)
				}
				continue
			}
			if decoderHas != schemaHas[n] {
				t.Errorf("%s: field %q: the decoder knows it %v, the schema %v", sh.uri, n, decoderHas, schemaHas[n])
			}
		}
	}
	// The elements of each batch.
	for v, el := range elems {
		schemaHas := map[string]bool{}
		for _, n := range el.propertyNames() {
			schemaHas[n] = true
		}
		batch := subjectFor(v, "", "", true)
		for n := range names {
			body, _ := json.Marshal(map[string]any{"v": 1, arrayOf(v): []any{map[string]any{n: map[string]any{}}}})
			r := decodeReason(batch, body)
			if (r == events.ReasonWrongType) != schemaHas[n] {
				t.Errorf("batch %s element field %q: decoder %s, in the schema %v", v, n, r, schemaHas[n])
			}
		}
	}
}

// arrayOf is the key of a batch's array: jobs for a batch submit, leases
// for the others.
func arrayOf(v events.Verb) string {
	if v == events.VerbSubmit {
		return "jobs"
	}
	return "leases"
}

// The required fields agree: removing a field from a full body makes the
// decoder report missing_field exactly when the schema rejects the body.
func TestRequiredAgreeWithDecoder(t *testing.T) {
	s := loadSchemas(t)
	key := "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"
	hash := "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	lease := map[string]any{"lease_id": "L4-VtMXdln5kaM9lMFIGT0FJA", "generation": 1}
	with := func(m map[string]any, kv ...any) map[string]any {
		out := maps.Clone(m)
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	common := map[string]any{"v": 1, "actor": "w1", "sent_at": "2026-03-01T12:00:05Z"}
	full := []struct {
		verb  events.Verb
		batch bool
		body  map[string]any
	}{
		{events.VerbOffer, false, with(common, "holder", "w2", "lease_ms", 1000, "ack_timeout_ms", 1000)},
		{events.VerbAcquire, false, with(common, "lease_ms", 1000)},
		{events.VerbAck, false, with(common, "lease_id", "L1", "generation", 1)},
		{events.VerbAck, true, with(common, "leases", []any{with(lease, "job", "j")})},
		{events.VerbRenew, false, with(common, "lease_id", "L1", "generation", 1, "renew_seq", 1, "lease_ms", 1000)},
		{events.VerbRenew, true, with(common, "leases", []any{with(lease, "job", "j", "renew_seq", 1, "lease_ms", 1000)})},
		{events.VerbProgress, false, with(common, "lease_id", "L1", "generation", 1, "progress_seq", 1, "value", 5, "note", "n")},
		{events.VerbCancel, false, with(common, "lease_id", "L1", "generation", 1, "reason", "r")},
		{events.VerbCancelAck, false, with(common, "lease_id", "L1", "generation", 1)},
		{events.VerbResult, false, with(common, "lease_id", "L1", "generation", 1, "outcome", "FAILED", "detail", "d", "permanent", false)},
		{events.VerbResult, true, with(common, "leases", []any{with(lease, "job", "j", "outcome", "FAILED", "detail", "d", "permanent", false)})},
		{events.VerbRelease, false, with(common, "lease_id", "L1", "generation", 1)},
		{events.VerbResolve, false, with(common, "action", "affirm", "holder", "w2", "lease_id", "L1", "generation", 1, "reason", "r")},
		{events.VerbResolve, false, with(common, "action", "settle", "outcome", "CANCELLED", "reason", "r")},
		{events.VerbResolve, false, with(common, "action", "revoke", "reason", "r")},
		{events.VerbResolve, false, with(common, "action", "retry", "reason", "r")},
		{events.VerbResolve, false, with(common, "action", "discard", "reason", "r")},
		{events.VerbPolicy, false, with(common, "min_lease_ms", 100, "max_lease_ms", 3600000, "default_lease_ms", 30000,
			"ack_timeout_ms", 30000, "cancel_timeout_ms", 60000, "max_lifetime_ms", 86400000, "max_generations", 1000, "retain_ms", 0)},
		{events.VerbTick, false, common},
		{events.VerbRules, false, with(common, "revision", 4, "lease_key", key)},
		{events.VerbCheckpoint, false, with(common, "input_seq", 2, "state_hash", hash)},
		{events.VerbSubmit, false, with(common, "queue", "q", "priority", 1, "max_attempts", 2, "backoff_ms", 2000,
			"backoff_max_ms", 4000, "lease_ms", 1000, "ack_timeout_ms", 1000, "payload", "p", "concurrency_key", "k")},
		{events.VerbSubmit, true, with(common, "jobs", []any{map[string]any{"job": "j", "queue": "q", "priority": 1, "max_attempts": 2, "backoff_ms": 2000,
			"backoff_max_ms": 4000, "lease_ms": 1000, "ack_timeout_ms": 1000, "payload": "p"}})},
		{events.VerbPull, false, with(common, "queue", "q", "slots", 1, "ttl_ms", 1000)},
		{events.VerbLimit, false, with(common, "queue", "q", "concurrency_key", "k", "max_active", 2, "rate", 10, "period_ms", 1000)},
		{events.VerbSchedule, false, with(common, "schedule", "s", "op", "set", "cron", "@hourly", "tz", "UTC0", "zone", "Etc/UTC", "missed", "once",
			"queue", "q", "priority", 1, "max_attempts", 2, "backoff_ms", 1000, "backoff_max_ms", 2000, "lease_ms", 1000, "ack_timeout_ms", 500,
			"payload", "p", "concurrency_key", "k", "unique_key", "u")},
	}
	covered := map[string]bool{}
	for _, f := range full {
		subject := subjectFor(f.verb, "w1", "", f.batch)
		uri, _ := InputURI(subject)
		covered[uri] = true
		body, _ := json.Marshal(f.body)
		if err := s.validate(t, uri, body); err != nil {
			t.Errorf("%s: full body %s: %s", uri, body, short(err))
		}
		if r := decodeReason(subject, body); r != "" {
			t.Errorf("%s: full body %s: decoder %s", subject, body, r)
		}
		for k := range f.body {
			less := maps.Clone(f.body)
			delete(less, k)
			b, _ := json.Marshal(less)
			r := decodeReason(subject, b)
			err := s.validate(t, uri, b)
			if (r == events.ReasonMissingField) != (err != nil) || r != "" && r != events.ReasonMissingField {
				t.Errorf("%s: without %s: decoder %q, schema %s", uri, k, r, short(err))
			}
		}
		if f.batch {
			arr := arrayOf(f.verb)
			for k := range f.body[arr].([]any)[0].(map[string]any) {
				el := maps.Clone(f.body[arr].([]any)[0].(map[string]any))
				delete(el, k)
				b, _ := json.Marshal(with(f.body, arr, []any{el}))
				r := decodeReason(subject, b)
				err := s.validate(t, uri, b)
				if (r == events.ReasonMissingField) != (err != nil) || r != "" && r != events.ReasonMissingField {
					t.Errorf("%s: element without %s: decoder %q, schema %s", uri, k, r, short(err))
				}
			}
		}
	}
	for _, sh := range inputShapes(t) {
		if !covered[sh.uri] {
			t.Errorf("%s: no full body", sh.uri)
		}
	}
}
