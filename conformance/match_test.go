package conformance

import (
	"encoding/json"
	"strings"
	"testing"
)

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, value string
		ok             bool
	}{
		{`{"a":1}`, `{"a":1,"b":2}`, true},
		{`{"a":1}`, `{"a":2}`, false},
		{`{"a":1}`, `{"b":1}`, false},
		{`{"a":null}`, `{"b":1}`, true},
		{`{"a":null}`, `{"a":0}`, false},
		{`{"a":{"b":"x"}}`, `{"a":{"b":"x","c":true}}`, true},
		{`{"a":{"b":"x"}}`, `{"a":"x"}`, false},
		{`["x","y"]`, `["y","z","x"]`, true},
		{`["x","w"]`, `["y","z","x"]`, false},
		{`[{"k":1}]`, `[{"k":2},{"k":1,"j":0}]`, true},
		{`{"a":{"$in":["p","q"]}}`, `{"a":"q"}`, true},
		{`{"a":{"$in":["p","q"]}}`, `{"a":"r"}`, false},
		{`{"a":{"$gte":2}}`, `{"a":2}`, true},
		{`{"a":{"$gt":2}}`, `{"a":2}`, false},
		{`{"a":{"$lt":2}}`, `{"a":1}`, true},
		{`{"a":{"$lte":2}}`, `{"a":"2"}`, false},
		{`{"a":{"$absent":true}}`, `{}`, true},
		{`{"a":{"$absent":true}}`, `{"a":""}`, false},
		{`{"a":{"$len":0}}`, `{"a":[]}`, true},
		{`{"a":{"$len":0}}`, `{"a":[1]}`, false},
		{`{"a":{"$len":0,"x":1}}`, `{"a":{"$len":0,"x":1}}`, true}, // two fields: no operator
		{`true`, `true`, true},
		{`"s"`, `"t"`, false},
	} {
		err := match(decode(t, c.pattern), decode(t, c.value))
		if (err == nil) != c.ok {
			t.Errorf("match(%s, %s) = %v, want ok %v", c.pattern, c.value, err, c.ok)
		}
	}
}

func TestMatchSaysWhere(t *testing.T) {
	err := match(decode(t, `{"job":{"state":"COMPLETED"}}`), decode(t, `{"job":{"state":"ACTIVE"}}`))
	if err == nil || !strings.Contains(err.Error(), `job.state: have ACTIVE, want COMPLETED`) {
		t.Fatalf("err %v", err)
	}
}

func TestSubstitute(t *testing.T) {
	vars := map[string]any{"l": decode(t, `{"lease_id":"L3-x","generation":1,"list":[{"a":"b"}]}`)}
	lookup := func(ref string) (any, error) {
		parts := strings.Split(ref, ".")
		return field(vars[parts[0]], parts[1:])
	}
	v, err := substitute(decode(t, `{"id":"${l.lease_id}","gen":"${l.generation}","tok":"j/${l.lease_id}/${l.generation}","e":"${l.list.0.a}","n":[1,"${l.generation}"]}`), lookup)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(v)
	if want := `{"e":"b","gen":1,"id":"L3-x","n":[1,1],"tok":"j/L3-x/1"}`; string(got) != want {
		t.Fatalf("have %s, want %s", got, want)
	}
	if _, err := substitute("${l.nope}", lookup); err == nil {
		t.Fatal("a reference to no field: no error")
	}
	if _, err := substitute("x ${l.nope}", lookup); err == nil {
		t.Fatal("a reference to no field inside a string: no error")
	}
}

func TestParseToken(t *testing.T) {
	tok, err := parseToken("a-1/L14-dSYwWm3_MZSGUgU89h8wPw/2")
	if err != nil || tok != (token{job: "a-1", leaseSeq: 14, gen: 2}) {
		t.Fatalf("%+v %v", tok, err)
	}
	for _, bad := range []string{"a-1/L14-x", "a-1/X14-y/2", "a-1/L14-y/two", "a/b/c/d"} {
		if _, err := parseToken(bad); err == nil {
			t.Errorf("parseToken(%q): no error", bad)
		}
	}
}

func TestScenariosParse(t *testing.T) {
	scs, err := Scenarios()
	if err != nil {
		t.Fatal(err)
	}
	if len(scs) == 0 {
		t.Fatal("no scenarios")
	}
	for _, bad := range []string{
		`{"steps":[]}`,
		`{"steps":[{"note":"no operation"}]}`,
		`{"steps":[{"await_event":{},"await_decision":{}}]}`,
		`{"steps":[{"await_event":{},"timeout":5}]}`,
		`{"steps":[{"do":"renew","async":true}]}`,
		`{"steps":[{"do":"connect"}],"unknown":1}`,
	} {
		if _, err := ParseScenario("bad", []byte(bad)); err == nil {
			t.Errorf("ParseScenario(%s): no error", bad)
		}
	}
}

// A batch input's elements stand for the single inputs of their jobs, so
// that await_input matches a queue worker's result whether it went alone
// or in a batch (the SDKs send what falls due together as one); other
// inputs have none.
func TestBatchElements(t *testing.T) {
	batch := decode(t, `{"seq":8,"subject":"tenure.in.worker.w1._.result","msg_id":"m","body":{"v":1,"leases":[`+
		`{"job":"q-retry","lease_id":"L4","generation":1,"outcome":"FAILED"},{"job":"q-dead","lease_id":"L5","generation":1,"outcome":"FAILED"}]}}`)
	els := batchElements(batch)
	if len(els) != 2 {
		t.Fatalf("%d elements", len(els))
	}
	p := decode(t, `{"subject":"tenure.in.worker.w1.q-retry.result","body":{"outcome":"FAILED","generation":1}}`)
	if match(p, batch) == nil {
		t.Fatal("the batch itself matches a single input's pattern")
	}
	if err := match(p, els[0]); err != nil {
		t.Fatalf("the element of q-retry: %v", err)
	}
	if match(p, els[1]) == nil {
		t.Fatal("the element of q-dead matches q-retry's pattern")
	}
	if e := els[1].(map[string]any); e["seq"] != 8.0 || e["msg_id"] != "m" || e["batch"] != "tenure.in.worker.w1._.result" {
		t.Fatalf("the element keeps the batch's seq, msg_id and subject: %v", e)
	}
	sub := decode(t, `{"seq":3,"subject":"tenure.in.ops.disp._.submit","body":{"v":1,"jobs":[{"job":"a","queue":"q"}]}}`)
	if els := batchElements(sub); len(els) != 1 || els[0].(map[string]any)["subject"] != "tenure.in.ops.disp.a.submit" {
		t.Fatalf("a batch submit: %v", els)
	}
	for _, v := range []string{
		`{"seq":1,"subject":"tenure.in.worker.w1.q-retry.result","body":{"v":1,"leases":[{"job":"x"}]}}`, // not job _
		`{"seq":1,"subject":"tenure.in.worker.w1._.pull","body":{"v":1,"queue":"q","slots":1}}`,          // no array
		`{"seq":1,"subject":"tenure.in.worker.w1._.result","body":"not json"}`,
	} {
		if els := batchElements(decode(t, v)); len(els) != 0 {
			t.Errorf("%s: %v", v, els)
		}
	}
}
