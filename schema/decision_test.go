package schema

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/maknow/tenure/events"
)

// reasonTableAdditions are the (kind, reason) pairs the fold emits that the
// table of PROTOCOL.md §12 does not list in its "kinds" column (none: the
// test fails if the table and the schema part).
var reasonTableAdditions = map[string][]string{}

// protocolReasonsByKind reads the table of PROTOCOL.md §12: the reasons
// each decision kind comes with.
func protocolReasonsByKind(t *testing.T) map[string][]string {
	t.Helper()
	data, err := readFileString(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	var accepted []string
	for _, k := range events.Kinds() {
		if k.Accepted() {
			accepted = append(accepted, k.String())
		}
	}
	names := regexp.MustCompile("`([a-z_]+)`")
	out := map[string][]string{}
	in := false
	for _, l := range strings.Split(data, "\n") {
		if strings.HasPrefix(l, "## ") {
			in = strings.Contains(l, "Reason codes")
			continue
		}
		if !in || !strings.HasPrefix(l, "| `") {
			continue
		}
		cells := strings.Split(l, "|")
		reason := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var kinds []string
		for _, part := range strings.Split(cells[2], ";") { // "every accepted kind except `x`; `y`"
			if rest, ok := strings.CutPrefix(strings.TrimSpace(part), "every accepted kind except"); ok {
				except := names.FindAllStringSubmatch(rest, -1)
				for _, k := range accepted {
					if !slices.ContainsFunc(except, func(m []string) bool { return m[1] == k }) {
						kinds = append(kinds, k)
					}
				}
				continue
			}
			for _, m := range names.FindAllStringSubmatch(part, -1) {
				kinds = append(kinds, m[1])
			}
		}
		for _, k := range kinds {
			out[k] = append(out[k], reason)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no table of reason codes", protocolDoc)
	}
	return out
}

func readFileString(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// The decision schema's closed sets are the implementation's, and its
// rules per kind are PROTOCOL.md's: accepted as Kind.Accepted says, the
// reasons of the table of §12 (and reasonTableAdditions).
func TestDecisionKindsAndReasons(t *testing.T) {
	d := readSchemaDoc(t, DecisionPath)
	enum := func(keys ...string) []string {
		var out []string
		for _, v := range d.object(keys...)["enum"].([]any) {
			out = append(out, v.(string))
		}
		return out
	}
	var kinds, reasons []string
	for _, k := range events.Kinds() {
		kinds = append(kinds, k.String())
	}
	for _, r := range events.Reasons() {
		reasons = append(reasons, string(r.Reason))
	}
	if got := enum("$defs", "kind"); !slices.Equal(got, kinds) {
		t.Errorf("kinds: the schema has\n %v\nthe implementation\n %v", got, kinds)
	}
	if got := enum("$defs", "reason"); !slices.Equal(got, reasons) {
		t.Errorf("reasons: the schema has\n %v\nthe implementation\n %v", got, reasons)
	}
	want := protocolReasonsByKind(t)
	for k, rs := range reasonTableAdditions {
		for _, r := range rs {
			if slices.Contains(want[k], r) {
				t.Errorf("PROTOCOL.md §12 now lists %s/%s: drop it from reasonTableAdditions", k, r)
			}
			want[k] = append(want[k], r)
		}
	}
	seen := map[string]bool{}
	for _, c := range d["allOf"].([]any) {
		rule := schemaDoc(c.(map[string]any))
		k := rule.object("if", "properties", "kind")["const"].(string)
		seen[k] = true
		then := rule.object("then", "properties")
		kind, _ := events.ParseKind(k)
		if acc := then["accepted"].(map[string]any)["const"]; acc != kind.Accepted() {
			t.Errorf("%s: accepted %v in the schema", k, acc)
		}
		var got []string
		for _, r := range then["reason"].(map[string]any)["enum"].([]any) {
			got = append(got, r.(string))
		}
		if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want[k]))) {
			t.Errorf("%s: the schema allows the reasons\n %v\nPROTOCOL.md §12\n %v", k, got, want[k])
		}
	}
	for _, k := range kinds {
		if !seen[k] {
			t.Errorf("%s: no rule in the decision schema", k)
		}
	}
}

// The decision schema rejects what no decision is: each mutation of a
// valid decision.
func TestDecisionRejects(t *testing.T) {
	s := loadSchemas(t)
	const granted = `{"v":1,"cause":3,"n":0,"of":1,"at":"2026-11-29T19:26:16.88109061Z","kind":"granted","accepted":true,"reason":"ok","input":{"role":"worker","actor":"w1","verb":"acquire"},"addressee":"w1","job":{"id":"report-42","lease_id":"L3-0FMQ6F4uKWTSoQx6pHrB5g","generation":1,"holder":"w1","state":"ACTIVE","ack_state":"ACQUIRED","lease_ms":60000,"issued_at":"2026-11-29T19:26:16.88109061Z","expires_at":"2026-11-29T19:27:16.88109061Z","renew_seq":0,"progress_seq":0,"progress_value":0,"cancel_requested":false,"cancel_acked":false,"lease_expired":false,"conflict":false,"stale":0,"late":0,"late_progress":0,"duplicates":0,"conflicts":0}}`
	const capacity = `{"v":1,"cause":9,"n":0,"of":1,"at":"2026-01-01T00:00:05Z","kind":"capacity_set","accepted":true,"reason":"ok","input":{"role":"worker","actor":"w1","verb":"pull"},"addressee":"w1","job":{"id":"_","state":"NONE"},"capacity":{"queue":"emails","slots":1,"until":"2026-01-01T00:01:05Z"}}`
	const queued = `{"v":1,"cause":3,"n":0,"of":1,"at":"2026-01-01T00:00:01Z","kind":"submitted","accepted":true,"reason":"ok","input":{"role":"ops","actor":"d1","verb":"submit"},"addressee":"d1","job":{"id":"job-1","lease_id":"","generation":0,"holder":"","state":"QUEUED","ack_state":"NONE","lease_ms":0,"renew_seq":0,"progress_seq":0,"progress_value":0,"cancel_requested":false,"cancel_acked":false,"lease_expired":false,"conflict":false,"stale":0,"late":0,"late_progress":0,"duplicates":0,"conflicts":0,"queue":"emails","submitter":"d1","priority":0,"turn":0,"attempt":0,"max_attempts":3,"backoff_ms":1000,"backoff_max_ms":3600000,"submitted_at":"2026-01-01T00:00:01Z","submit_seq":3,"ready_at":"2026-01-01T00:00:01Z","payload":"p"}}`
	for _, valid := range []string{granted, capacity, queued} {
		if err := s.validate(t, BaseURI+DecisionPath, []byte(valid)); err != nil {
			t.Fatalf("%s: %s", valid, short(err))
		}
	}
	// set returns doc with the value at the dotted path replaced (nil:
	// deleted).
	set := func(doc, path string, v any) string {
		var m map[string]any
		if err := json.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		keys := strings.Split(path, ".")
		o := m
		for _, k := range keys[:len(keys)-1] {
			o = o[k].(map[string]any)
		}
		if v == nil {
			delete(o, keys[len(keys)-1])
		} else {
			o[keys[len(keys)-1]] = v
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	none := map[string]any{"id": "report-42", "state": "NONE"}
	cases := map[string]string{
		"v 2":                             set(granted, "v", 2),
		"cause 0":                         set(granted, "cause", 0),
		"of 0":                            set(granted, "of", 0),
		"an unknown kind":                 set(granted, "kind", "stolen"),
		"an unknown reason":               set(granted, "reason", "because"),
		"granted, not accepted":           set(granted, "accepted", false),
		"granted for a reason of another": set(granted, "reason", "lease_expired"),
		"rejected, accepted":              set(set(granted, "kind", "rejected"), "reason", "bad_token"),
		"an unknown field":                set(granted, "extra", 1),
		"detail empty":                    set(granted, "detail", ""),
		"at with a trailing zero":         set(granted, "at", "2026-11-29T19:26:16.8810906100Z"),
		"at not in UTC":                   set(granted, "at", "2026-11-29T20:26:16.88109061+01:00"),
		"at on February 30":               set(granted, "at", "2026-02-30T19:26:16Z"),
		"input role unknown":              set(granted, "input.role", "admin"),
		"input verb unknown":              set(granted, "input.verb", "steal"),
		"input actor empty":               set(granted, "input.actor", ""),
		"addressee not a token":           set(granted, "addressee", "w 1"),
		"a policy on a granted":           set(granted, "policy", map[string]any{"min_lease_ms": 1, "max_lease_ms": 1, "default_lease_ms": 1, "ack_timeout_ms": 1, "cancel_timeout_ms": 1, "max_lifetime_ms": 1, "max_generations": 1}),
		"rules on a granted":              set(granted, "rules", map[string]any{"revision": 4}),
		"granted about no job":            set(granted, "job", none),
		"job: lease id L0":                set(granted, "job.lease_id", "L0"),
		"job: lease id of 21 tag chars":   set(granted, "job.lease_id", "L3-0FMQ6F4uKWTSoQx6pHrB5"),
		"job: lease id, tag's last bits":  set(granted, "job.lease_id", "L3-0FMQ6F4uKWTSoQx6pHrB5h"),
		"job: generation 0, no queue":     set(granted, "job.generation", 0),
		"job: holder empty, no queue":     set(granted, "job.holder", ""),
		"job: state NONE in full":         set(granted, "job.state", "NONE"),
		"job: QUEUED without a queue":     set(granted, "job.state", "QUEUED"),
		"job: state lower case":           set(granted, "job.state", "active"),
		"job: progress 101":               set(granted, "job.progress_value", 101),
		"job: a counter negative":         set(granted, "job.stale", -1),
		"job: conflicts missing":          set(granted, "job.conflicts", nil),
		"job: a queue field, no queue":    set(granted, "job.attempt", 1),
		"job: queue without its fields":   set(granted, "job.queue", "emails"),
		"queue job: submit_seq missing":   set(queued, "job.submit_seq", nil),
		"queue job: priority 10":          set(queued, "job.priority", 10),
		"queue job: payload not a string": set(queued, "job.payload", 1),
		"queue job: last_reason ok":       set(queued, "job.last_reason", "ok"),
		"capacity_set without capacity":   set(capacity, "capacity", nil),
		"capacity_set about a job":        set(capacity, "job", map[string]any{"id": "job-1", "state": "NONE"}),
		"capacity: slots 257":             set(capacity, "capacity.slots", 257),
		"capacity: until missing":         set(capacity, "capacity.until", nil),
		"withdrawn with slots":            set(set(set(capacity, "kind", "withdrawn"), "accepted", false), "reason", "ack_deadline_passed"),
		"capacity on a ticked":            set(set(capacity, "kind", "ticked"), "input.verb", "tick"),
	}
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		if err := s.validate(t, BaseURI+DecisionPath, []byte(cases[name])); err == nil {
			t.Errorf("%s: the schema accepts %s", name, cases[name])
		}
	}
	// The withdrawn decision as the fold writes it (slots 0, no until) is valid.
	w := set(set(set(set(capacity, "kind", "withdrawn"), "accepted", false), "reason", "ack_deadline_passed"), "capacity.slots", 0)
	w = set(w, "capacity.until", nil)
	if err := s.validate(t, BaseURI+DecisionPath, []byte(w)); err != nil {
		t.Errorf("withdrawn: %s", short(err))
	}
	// With slots 0 no announcement stands: no until.
	if err := s.validate(t, BaseURI+DecisionPath, []byte(set(w, "capacity.until", "1970-01-01T00:00:00Z"))); err == nil {
		t.Error("withdrawn: the schema accepts an until with slots 0")
	}
}
