package receipt

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

var chain = events.NextChain(events.Chain{}, 1, 1, 0, 1, "s", nil).String()

// AppendJSON writes what encoding/json writes, and Read reads it back.
func TestRoundTrip(t *testing.T) {
	rs := []Receipt{
		Input("TENURE_IN", 3, "tenure.in.worker.w1.j1.acquire", []byte(`{"v":1}`), "worker w1"),
		Decision("TENURE_OUT", 4, 3, chain, "worker w1"),
		Decision("TENURE_P2_OUT", 1<<63, 1<<64-1, chain, "odd \"name\" \\ é <&> \x00\x1f\u2028"),
	}
	var file []byte
	for _, r := range rs {
		if err := r.Check(); err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		got := r.AppendJSON(nil)
		var back Receipt
		if err := json.Unmarshal(got, &back); err != nil || back != r {
			t.Errorf("AppendJSON %s: reads back as %+v, %v", got, back, err)
		}
		file = append(append(file, got...), '\n')
	}
	// Invalid UTF-8 still makes valid JSON.
	var back Receipt
	if err := json.Unmarshal(Decision("S", 1, 1, chain, "a\xffb").AppendJSON(nil), &back); err != nil || back.By != "a\ufffdb" {
		t.Errorf("invalid UTF-8: %+v, %v", back, err)
	}
	file = append(file, "\n  \n"...) // blank lines are skipped
	lines, err := Read(strings.NewReader(string(file)), "f")
	if err != nil || len(lines) != len(rs) {
		t.Fatalf("Read: %d lines, %v", len(lines), err)
	}
	for i, l := range lines {
		if l.Err != nil || l.Receipt != rs[i] || l.File != "f" || l.Line != i+1 {
			t.Errorf("line %d: %+v", i+1, l)
		}
	}
	if o := lines[0].Origin(); o != "f:1 (worker w1)" {
		t.Errorf("origin %q", o)
	}
}

// A line that is not a receipt is returned with its reason; the others are
// still read.
func TestReadStrict(t *testing.T) {
	good := string(Decision("TENURE_OUT", 4, 3, chain, "w").AppendJSON(nil))
	for name, line := range map[string]string{
		"not json":      `{"v":1,`,
		"unknown field": `{"v":1,"kind":"decision","stream":"S","seq":1,"chain":"` + chain + `","extra":1}`,
		"version":       `{"v":2,"kind":"decision","stream":"S","seq":1,"chain":"` + chain + `"}`,
		"kind":          `{"v":1,"kind":"other","stream":"S","seq":1}`,
		"no seq":        `{"v":1,"kind":"decision","stream":"S","chain":"` + chain + `"}`,
		"no stream":     `{"v":1,"kind":"decision","seq":1,"chain":"` + chain + `"}`,
		"bad chain":     `{"v":1,"kind":"decision","stream":"S","seq":1,"chain":"` + strings.ToUpper(chain) + `"}`,
		"no chain":      `{"v":1,"kind":"decision","stream":"S","seq":1}`,
		"input fields":  `{"v":1,"kind":"decision","stream":"S","seq":1,"chain":"` + chain + `","subject":"x"}`,
		"no subject":    `{"v":1,"kind":"input","stream":"S","seq":1,"sha256":"` + chain + `"}`,
		"bad hash":      `{"v":1,"kind":"input","stream":"S","seq":1,"subject":"x","sha256":"00"}`,
		"two values":    good + ` {}`,
		"seq overflow":  `{"v":1,"kind":"decision","stream":"S","seq":18446744073709551616,"chain":"` + chain + `"}`,
	} {
		lines, err := Read(strings.NewReader(good+"\n"+line+"\n"+good+"\n"), "f")
		if err != nil || len(lines) != 3 {
			t.Fatalf("%s: %d lines, %v", name, len(lines), err)
		}
		if lines[0].Err != nil || lines[2].Err != nil || lines[1].Err == nil || lines[1].Line != 2 {
			t.Errorf("%s: %v / %v / %v", name, lines[0].Err, lines[1].Err, lines[2].Err)
		}
	}
	// A line beyond MaxLine is an error of the file.
	if _, err := Read(strings.NewReader(strings.Repeat("x", MaxLine+1)), "f"); err == nil {
		t.Error("a line beyond MaxLine was read")
	}
}

// A File is appended to by many goroutines at once, one whole line per
// receipt; reopening it keeps what it holds; it is private to its owner.
func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r")
	for round := range 2 {
		f, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 100 {
					if err := f.Keep(Decision("TENURE_OUT", uint64(round*1000+g*100+i+1), 1, chain, "w")); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Keep(Decision("TENURE_OUT", 1, 1, chain, "w")); err == nil {
			t.Fatal("Keep after Close")
		}
	}
	lines, err := ReadFile(path)
	if err != nil || len(lines) != 1600 {
		t.Fatalf("%d lines, %v", len(lines), err)
	}
	seen := map[uint64]bool{}
	for _, l := range lines {
		if l.Err != nil || seen[l.Seq] {
			t.Fatalf("line %d: %+v", l.Line, l)
		}
		seen[l.Seq] = true
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
}
