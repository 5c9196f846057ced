package schema

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const protocolDoc = "../PROTOCOL.md"

// docBlock is one fenced code block of PROTOCOL.md, read as
// coordinator/protocol_test.go reads them (PROTOCOL.md §17).
type docBlock struct {
	line  int               // 1-based line of the opening fence
	lang  string            // first word of the info string
	attrs map[string]string // key=value words of the info string
	flags []string          // other words of the info string
	body  string            // content, lines joined by "\n", no final newline
	after string            // the first non-blank line after the block
}

func readDocBlocks(t *testing.T) []docBlock {
	t.Helper()
	data, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var out []docBlock
	for i := 0; i < len(lines); i++ {
		open, ok := strings.CutPrefix(lines[i], "```")
		if !ok {
			continue
		}
		b := docBlock{line: i + 1, attrs: map[string]string{}}
		for j, w := range strings.Fields(open) {
			switch k, v, kv := strings.Cut(w, "="); {
			case j == 0:
				b.lang = w
			case kv:
				b.attrs[k] = v
			default:
				b.flags = append(b.flags, w)
			}
		}
		var content []string
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			content = append(content, lines[i])
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: unterminated code block", protocolDoc, b.line)
		}
		b.body = strings.Join(content, "\n")
		for k := i + 1; k < len(lines); k++ {
			if l := strings.TrimSpace(lines[k]); l != "" {
				b.after = l
				break
			}
		}
		out = append(out, b)
	}
	return out
}

// protocolExceptions are the examples of PROTOCOL.md §8 whose reason is
// only partly a schema matter and whose fault is a decoder-only rule.
var protocolExceptions = map[string]string{
	"bad-number":         "generation 1.0 is an integer to JSON Schema (decoder-only: bad_number)",
	"submit-backoff-cap": "backoff_max_ms below a given backoff_ms (decoder-only: bad_value)",
	"schedule-never":     "an expression that never falls due (decoder-only: package cron judges it, bad_value)",
}

// Every example of PROTOCOL.md against the schemas: each input example
// (json example=... subject=...) against the schema of its subject's verb,
// valid when the decoder accepts it or rejects it for a reason only the
// decoder checks (the §8 examples have one fault each), invalid when its
// reason is a schema matter; the stored inputs (json stored-input=N); the
// decisions (json decision); the bodies of the nats commands of §16.
func TestProtocolExamples(t *testing.T) {
	s := loadSchemas(t)
	a := newAgreement(t, protocolExceptions)
	cli := regexp.MustCompile(`^nats (?:req|pub(?: -J)?) (\S+) '([^']*)'`)
	var examples, stored, decisions, commands int
	for _, b := range readDocBlocks(t) {
		switch {
		case b.lang == "json" && b.attrs["example"] != "":
			examples++
			name := b.attrs["example"]
			subject := "tenure.in." + b.attrs["subject"]
			r := a.check(name, subject, []byte(b.body))
			expect, _ := strings.CutPrefix(b.after, "expect: ")
			first, _, _ := strings.Cut(expect, ",")
			if first = strings.Trim(first, "` "); r != "" && first != "rejected/"+string(r) {
				t.Errorf("%s:%d: example %s: the decoder says %s, the document %s", protocolDoc, b.line, name, r, first)
			}
		case b.lang == "json" && b.attrs["stored-input"] != "":
			stored++
			subject := map[string]string{"1": "tenure.in.coord.c1._.rules", "2": "tenure.in.coord.c1._.policy"}[b.attrs["stored-input"]]
			if subject == "" {
				t.Errorf("%s:%d: stored-input=%s: which input kind?", protocolDoc, b.line, b.attrs["stored-input"])
				continue
			}
			a.check("stored-input="+b.attrs["stored-input"], subject, []byte(b.body))
		case b.lang == "json" && slices.Contains(b.flags, "decision"):
			decisions++
			if err := s.validate(t, BaseURI+DecisionPath, []byte(b.body)); err != nil {
				t.Errorf("%s:%d: decision: %s", protocolDoc, b.line, short(err))
			}
		case b.lang == "sh":
			for _, l := range strings.Split(b.body, "\n") {
				if m := cli.FindStringSubmatch(l); m != nil {
					commands++
					a.check(l, m[1], []byte(m[2]))
				}
			}
		}
	}
	if examples < 60 || stored != 2 || decisions < 2 || commands < 8 {
		t.Errorf("%s: %d input examples, %d stored inputs, %d decisions, %d nats commands: fewer than expected", protocolDoc, examples, stored, decisions, commands)
	}
	a.done()
	t.Logf("%d input examples, %d stored inputs, %d decisions, %d nats commands", examples, stored, decisions, commands)
}

// PROTOCOL.md §24 names the files and every reason the schemas do not
// fully cover (wrong_partition aside: the fold's partition check, not the
// decoder's).
func TestProtocolSection24(t *testing.T) {
	data, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(data), "\n## 24. Machine-readable schemas\n")
	if !ok {
		t.Fatalf("%s has no §24", protocolDoc)
	}
	for _, f := range []string{"schema/input/<verb>.json", "schema/" + DecisionPath, "schema/" + DefsPath, "#/$defs/single", "#/$defs/batch"} {
		if !strings.Contains(sec, "`"+f+"`") {
			t.Errorf("§24 does not name %s", f)
		}
	}
	for r, c := range reasonCoverage {
		if c.c != covered && r != "wrong_partition" && !strings.Contains(sec, "`"+string(r)+"`") {
			t.Errorf("§24 does not name %s, which the schemas do not fully cover (%s)", r, c.how)
		}
	}
}
