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
