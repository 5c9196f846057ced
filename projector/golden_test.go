package projector_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

// TestGolden runs the scenario files in testdata/ (datadriven format; rewrite
// expectations with -rewrite and review the diff). Commands:
//
//	in t=<offset> <role>.<actor>.<job>.<verb>   one stored input; body below
//	matrix [job=<id>] [all]                      evidence matrix (latest row per job, or every row)
//	state job=<id>                               the job's projection now
//	next                                         NextDeadline and Due: when the coordinator ticks
//
// After each file, the whole log is replayed twice more: straight (decisions
// must be byte-identical) and with a snapshot/restore before every input.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) < 30 {
		t.Fatalf("want at least 30 golden files, found %d (%v)", len(files), err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) { runGolden(t, path) })
	}
}

func runGolden(t *testing.T, path string) {
	{
		p := projector.New()
		var raws []events.Raw
		var all []events.Decision
		var encoded [][]byte
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "in":
				raw, err := testutil.ScenarioInput(d, uint64(len(raws)+1))
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				raws = append(raws, raw)
				ds, err := p.Step(raw)
				if err != nil {
					d.Fatalf(t, "step: %v", err)
				}
				var b strings.Builder
				for i := range ds {
					all = append(all, ds[i])
					encoded = append(encoded, events.AppendDecision(nil, &ds[i]))
					b.WriteString(projector.Describe(&ds[i], testutil.ScenarioBase))
					b.WriteByte('\n')
				}
				return b.String()
			case "matrix":
				rows := projector.LatestByJob(all)
				if d.HasArg("all") {
					rows = nil
					for _, x := range all {
						if x.Job.ID != events.NoJob {
							rows = append(rows, x)
						}
					}
				}
				if d.HasArg("job") {
					var id string
					d.ScanArgs(t, "job", &id)
					var keep []events.Decision
					for _, x := range rows {
						if x.Job.ID == id {
							keep = append(keep, x)
						}
					}
					rows = keep
				}
				var b bytes.Buffer
				if err := projector.WriteMatrix(&b, projector.FormatTable, rows, projector.MatrixOptions{Base: testutil.ScenarioBase}); err != nil {
					d.Fatalf(t, "%v", err)
				}
				return b.String()
			case "next":
				d, ok := p.NextDeadline()
				next := "none"
				if ok {
					next = "+" + time.Duration(d-testutil.ScenarioBase).String()
				}
				return fmt.Sprintf("next=%s due=%v\n", next, p.Due())
			case "state":
				var id string
				d.ScanArgs(t, "job", &id)
				j, ok := p.Job(id)
				if !ok {
					return "no such job\n"
				}
				return projector.DescribeJob(&j, projector.MatrixOptions{Base: testutil.ScenarioBase}) + "\n"
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
		checkReplay(t, raws, encoded, p.StateHash())
	}
}

// checkReplay folds raws again, straight and with a snapshot/restore before
// every input, and requires byte-identical decisions and the same final hash.
func checkReplay(t *testing.T, raws []events.Raw, want [][]byte, wantHash [32]byte) {
	t.Helper()
	for _, restoreEvery := range []bool{false, true} {
		p := projector.New()
		var got [][]byte
		for _, raw := range raws {
			if restoreEvery {
				q := projector.New()
				if err := q.Restore(p.Snapshot()); err != nil {
					t.Fatalf("restore before #%d: %v", raw.Seq, err)
				}
				if q.StateHash() != p.StateHash() {
					t.Fatalf("state hash changed by snapshot/restore before #%d", raw.Seq)
				}
				p = q
			}
			ds, err := p.Step(raw)
			if err != nil {
				t.Fatal(err)
			}
			for i := range ds {
				got = append(got, events.AppendDecision(nil, &ds[i]))
			}
		}
		mode := fmt.Sprintf("replay(restoreEvery=%v)", restoreEvery)
		if len(got) != len(want) {
			t.Fatalf("%s: %d decisions, want %d", mode, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%s: decision %d differs:\n got %s\nwant %s", mode, i, got[i], want[i])
			}
		}
		if p.StateHash() != wantHash {
			t.Fatalf("%s: final state hash differs", mode)
		}
	}
}
