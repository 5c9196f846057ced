package conformance

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
)

//go:embed scenarios/*.json
var scenarioFiles embed.FS

// Scenario is one scenario file of scenarios/ (README.md describes the
// format): a worker id, a stream prefix and the steps to play.
type Scenario struct {
	Name         string // the file's name without .json
	Description  string // what it shows, for people
	Worker       string // the adapter's worker id (default w1)
	StreamPrefix string // the deployment's stream prefix (default TENURE)
	// Auth runs the deployment under the configuration tenure auth init
	// writes: the adapter connects with its worker's credential (in an
	// account of its own: the worker API prefix, four consumer names, no
	// stream info), the runner publishes as disp or w2.
	Auth  bool
	Steps []Step
}

// Step is one step of a scenario: its operation (the key that names it,
// e.g. "do" or "await_event") and its fields as written.
type Step struct {
	Op     string
	Fields map[string]any
}

// String is the step as written, on one line, shortened.
func (s Step) String() string {
	b, _ := json.Marshal(s.Fields)
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// ops lists every step operation with the other fields it may have.
// A "do" step's other fields are the command's arguments.
var ops = map[string][]string{
	"do":                 nil, // any: the command's arguments (see reservedDo)
	"await_reply":        {"error", "result", "as", "timeout_ms", "on"},
	"publish":            {"body", "msg_id", "as", "verdict", "duplicate", "timeout_ms"},
	"await_event":        {"as", "since", "timeout_ms", "on"},
	"await_decision":     {"as", "since", "timeout_ms"},
	"await_input":        {"as", "since", "timeout_ms"},
	"expect_projection":  {"match", "timeout_ms"},
	"expect_count":       {"match", "count", "since", "on"},
	"adapter":            {"name"},
	"consumers":          {"count", "as"},
	"expect_order":       {"strict"},
	"expect_newer_token": {},
	"expect_equal":       {},
	"coordinator":        {},
	"sleep_ms":           {},
	"mark":               {},
	"caught_up":          {"timeout_ms"},
}

// reservedDo are the fields of a "do" step that are not the command's
// arguments.
var reservedDo = []string{"do", "as", "error", "result", "async", "note", "on"}

// Scenarios returns the scenarios of scenarios/, in file name order.
func Scenarios() ([]Scenario, error) {
	entries, err := scenarioFiles.ReadDir("scenarios")
	if err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	var out []Scenario
	for _, e := range entries {
		data, err := scenarioFiles.ReadFile(path.Join("scenarios", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("conformance: %w", err)
		}
		sc, err := ParseScenario(strings.TrimSuffix(e.Name(), ".json"), data)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

// ParseScenario reads the scenario named name from its file's content,
// checking every step's operation and fields.
func ParseScenario(name string, data []byte) (Scenario, error) {
	var f struct {
		Description  string           `json:"description"`
		Worker       string           `json:"worker"`
		StreamPrefix string           `json:"stream_prefix"`
		Auth         bool             `json:"auth"`
		Steps        []map[string]any `json:"steps"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Scenario{}, fmt.Errorf("conformance: scenario %s: %w", name, err)
	}
	sc := Scenario{Name: name, Description: f.Description, Worker: f.Worker, StreamPrefix: f.StreamPrefix, Auth: f.Auth}
	if sc.Worker == "" {
		sc.Worker = "w1"
	}
	if sc.StreamPrefix == "" {
		sc.StreamPrefix = "TENURE"
	}
	for i, fields := range f.Steps {
		st, err := parseStep(fields)
		if err != nil {
			return Scenario{}, fmt.Errorf("conformance: scenario %s: step %d: %w", name, i+1, err)
		}
		sc.Steps = append(sc.Steps, st)
	}
	if len(sc.Steps) == 0 {
		return Scenario{}, fmt.Errorf("conformance: scenario %s: no steps", name)
	}
	return sc, nil
}

func parseStep(fields map[string]any) (Step, error) {
	var found []string
	for k := range fields {
		if _, ok := ops[k]; ok {
			found = append(found, k)
		}
	}
	if len(found) != 1 {
		return Step{}, fmt.Errorf("want exactly one operation, have %v: %s", found, Step{Fields: fields})
	}
	st := Step{Op: found[0], Fields: fields}
	if st.Op == "do" {
		if _, ok := fields["do"].(string); !ok {
			return st, fmt.Errorf("do: want a command name")
		}
		if async, _ := fields["async"].(bool); async {
			if _, ok := fields["as"].(string); !ok {
				return st, fmt.Errorf("an async do needs an \"as\" name for its await_reply")
			}
		}
		return st, nil
	}
	for k := range fields {
		if k != st.Op && k != "note" && !slices.Contains(ops[st.Op], k) {
			return st, fmt.Errorf("%s: unknown field %q", st.Op, k)
		}
	}
	return st, nil
}
