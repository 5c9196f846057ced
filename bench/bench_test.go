package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/testutil"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// tiny is a configuration that runs every scenario in seconds: the figures
// mean nothing, the machinery is what is tested.
func tiny(t *testing.T, sync string) Config {
	return Config{
		Sync: sync, Quick: true, Dir: t.TempDir(),
		PipelineWorkers: 2, PipelineLeases: 8,
		PipelineWarmup: 100 * time.Millisecond, PipelineDuration: 300 * time.Millisecond,
		RTTSamples: 20, ExpirySamples: 4, LogInputs: 3000,
		FoldDuration: 50 * time.Millisecond, MemJobs: 20000,
	}
}

// Every scenario runs end to end on real embedded servers (sync always, as
// tenure serve), the audit finds the log clean, and every figure the JSON
// contract names is there and positive.
func TestRunTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every scenario")
	}
	var progress bytes.Buffer
	cfg := tiny(t, SyncAlways)
	cfg.Progress = &progress
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	t.Logf("progress:\n%s", progress.String())
	if r.AuditOK != 1 {
		t.Errorf("the audit of the log built was not clean")
	}
	// 3000 worker inputs after the rules and the policy, then the
	// checkpoint anchoring the snapshot, taken 1000 inputs before the end.
	if r.LogInputs != 3003 || r.RestartSnapshotInputs != 1001 {
		t.Errorf("log of %v inputs, restart folded %v after the snapshot: want 3003 and 1001", r.LogInputs, r.RestartSnapshotInputs)
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"baseline_pipeline_per_s", "tenure_pipeline_per_s", "pipeline_ratio",
		"baseline_rtt_p50_us", "baseline_rtt_p99_us", "tenure_rtt_p50_us", "tenure_rtt_p99_us",
		"baseline_replay_per_s", "audit_replay_per_s", "replay_ratio", "fold_per_s", "bytes_per_job",
		"restart_snapshot_s", "restart_cold_s", "expiry_p50_ms", "expiry_p99_ms"} {
		v, ok := m[k].(float64)
		if !ok || !(v > 0) {
			t.Errorf("%s = %v, want a positive number", k, m[k])
		}
	}
	if m["sync_mode"] != SyncAlways {
		t.Errorf("sync_mode = %v", m["sync_mode"])
	}
	for k, v := range m {
		if _, isNum := v.(float64); !isNum && k != "sync_mode" {
			t.Errorf("%s = %v: every key but sync_mode is a number", k, v)
		}
	}
	var table bytes.Buffer
	if err := WriteTable(&table, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1 pipeline", "2 round trip p50", "3 replay", "4 fold", "5 resident bytes", "6 restart", "pipeline_ratio >= 0.8"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

// Only runs the scenarios asked for, in interval mode too.
func TestRunOnly(t *testing.T) {
	cfg := tiny(t, SyncInterval)
	cfg.Only = []string{"fold", "memory"}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.FoldPerS <= 0 || r.BytesPerJob <= 0 || r.BaselinePipelinePerS != 0 || r.SyncMode != SyncInterval {
		t.Fatalf("%+v", r)
	}
	if _, err := Run(context.Background(), Config{Sync: "sometimes"}); err == nil {
		t.Fatal("a bad sync mode was accepted")
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i))
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 500}, {99, 990}, {99.9, 999}, {100, 1000}, {0, 1}} {
		if got := percentile(d, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
}
