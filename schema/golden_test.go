package schema

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

// goldenScenario is one of projector's golden files, read as
// projector/golden_test.go reads it: its inputs, in order.
type goldenScenario struct {
	file   string
	inputs []goldenInput
}

type goldenInput struct {
	pos string // file:line of the in command
	raw events.Raw
}

// readGolden reads every projector/testdata/*.txt. The expected outputs
// are projector's to check; each command's output is given back as
// written, so the files never change here.
func readGolden(t *testing.T) []goldenScenario {
	t.Helper()
	files, err := filepath.Glob("../projector/testdata/*.txt")
	if err != nil || len(files) < 30 {
		t.Fatalf("want the golden files of projector, found %d (%v)", len(files), err)
	}
	var out []goldenScenario
	for _, path := range files {
		sc := goldenScenario{file: filepath.Base(path)}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "in" {
				raw, err := testutil.ScenarioInput(d, uint64(len(sc.inputs)+1))
				if err != nil {
					t.Fatalf("%v", err)
				}
				sc.inputs = append(sc.inputs, goldenInput{pos: d.Pos, raw: raw})
			}
			return d.Expected
		})
		out = append(out, sc)
	}
	return out
}

// Every decision the golden scenarios produce satisfies the decision
// schema: each scenario folded by a fresh projector, as projector's golden
// test folds it, each decision in its canonical encoding.
func TestGoldenDecisions(t *testing.T) {
	s := loadSchemas(t)
	kinds := map[events.Kind]int{}
	n := 0
	for _, sc := range readGolden(t) {
		p := projector.New()
		for _, in := range sc.inputs {
			ds, err := p.Step(in.raw)
			if err != nil {
				t.Fatalf("%s: step: %v", in.pos, err)
			}
			for i := range ds {
				n++
				kinds[ds[i].Kind]++
				b := events.AppendDecision(nil, &ds[i])
				if err := s.validate(t, BaseURI+DecisionPath, b); err != nil {
					t.Errorf("%s: decision %d/%d %s: %s", in.pos, ds[i].N, ds[i].Of, b, short(err))
				}
			}
		}
	}
	for _, k := range events.Kinds() {
		if kinds[k] == 0 {
			t.Errorf("no %s decision in the golden scenarios: the schema of that kind is never checked against the fold (add a scenario to projector/testdata)", k)
		}
	}
	t.Logf("%d decisions validated, by kind %v", n, kinds)
}

// goldenExceptions are the golden inputs whose rejection is only partly a
// schema matter and whose fault is a decoder-only rule.
var goldenExceptions = map[string]string{
	"rev4_queue_submit.txt: submit {\"v\":1,\"queue\":\"emails\",\"backoff_ms\":5000,\"backoff_max_ms\":1000}": "backoff_max_ms below a given backoff_ms (decoder-only: bad_value)",
	"rev10_schedules.txt: schedule {\"v\":1,\"schedule\":\"never\",\"cron\":\"0 0 30 2 *\",\"queue\":\"q\"}":   "an expression that never falls due (decoder-only: package cron judges it, bad_value)",
}

// The input bodies of the golden scenarios, decoded under rules revision 4
// (the revision the schemas describe): each one the decoder accepts
// satisfies its verb's schema, each one it rejects for a schema matter is
// rejected by the schema, and each one it rejects for a decoder-only
// reason satisfies it (goldenExceptions lists the others).
func TestGoldenInputs(t *testing.T) {
	a := newAgreement(t, goldenExceptions)
	for _, sc := range readGolden(t) {
		for _, in := range sc.inputs {
			name := fmt.Sprintf("%s: %s %s", sc.file, lastToken(in.raw.Subject), in.raw.Body)
			if _, ok := goldenExceptions[name]; !ok {
				name = in.pos + ": " + name
			}
			a.check(name, in.raw.Subject, in.raw.Body)
		}
	}
	a.done()
}

func lastToken(subject string) string {
	for i := len(subject) - 1; i >= 0; i-- {
		if subject[i] == '.' {
			return subject[i+1:]
		}
	}
	return subject
}
