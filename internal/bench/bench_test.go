package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
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
		StormSizes: []int{3000}, StormRawWindow: 500 * time.Millisecond,
		QueueWorkers: 2, QueueConcurrency: 4, QueueInflight: 16,
		QueueWarmup: 100 * time.Millisecond, QueueDuration: 300 * time.Millisecond,
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
		"sdk_receipts_off_per_s", "sdk_receipts_on_per_s", "sdk_receipts_ratio", "sdk_receipts_ratio_max", "sdk_receipts_off_cpu_us", "sdk_receipts_on_cpu_us",
		"sdk_receipts_written_per_s", "sdk_receipts_per_verdict", "sdk_receipts_lines", "sdk_receipts_bytes",
		"baseline_replay_per_s", "audit_replay_per_s", "replay_ratio",
		"baseline_replay_cpu_us", "baseline_replay_both_cpu_us", "audit_replay_cpu_us", "replay_cpu_ratio", "baseline_replay_cores", "audit_replay_cores", "chain_per_s", "chain_mb_per_s", "audit_chain_share", "fold_per_s", "bytes_per_job",
		"restart_snapshot_s", "restart_cold_s", "expiry_p50_ms", "expiry_p99_ms",
		"storm_3k_leases", "storm_3k_s", "storm_3k_per_s", "storm_3k_raw_per_s", "storm_3k_ratio",
		"storm_3k_raw_async_per_s", "storm_3k_raw_batch_per_s", "storm_3k_first_s", "storm_3k_restart_s",
		"storm_3k_expired", "storm_3k_ok", "storm_3k_max_decisions_per_input", "storm_3k_ticks", "storm_3k_grants_per_s",
		"storm_3k_cores", "storm_3k_decisions_per_append", "storm_3k_steady_per_s", "storm_3k_sessions", "storm_3k_restart_inputs", "storm_3k_setup_pause_ms", "storm_3k_pause_ms",
		// Every figure of a run that measured nothing fails the run (issue 31).
		"baseline_queue_per_s", "tenure_queue_per_s", "queue_ratio", "tenure_queue_submit_per_s", "queue_submit_ratio", "queue_inflight",
		"tenure_queue_flow_per_s", "queue_flow_ratio",
		"baseline_queue_start_p50_ms", "baseline_queue_start_p99_ms", "baseline_queue_start_p999_ms",
		"tenure_queue_start_p50_ms", "tenure_queue_start_p99_ms", "tenure_queue_start_p999_ms", "queue_start_p99_ratio",
		"baseline_queue_loaded_start_p50_ms", "baseline_queue_loaded_start_p99_ms", "baseline_queue_loaded_start_p999_ms",
		"tenure_queue_loaded_start_p50_ms", "tenure_queue_loaded_start_p99_ms", "tenure_queue_loaded_start_p999_ms", "queue_loaded_start_p99_ratio",
		"queue_start_samples", "queue_loaded_start_samples",
		"baseline_queue_cpu_us", "tenure_queue_cpu_us", "tenure_queue_submit_cpu_us",
		"baseline_queue_writes_per_job", "tenure_queue_writes_per_job", "tenure_queue_submit_writes_per_job",
		"tenure_queue_inputs_per_job", "tenure_queue_decisions_per_append",
		"skeleton_queue_per_s", "queue_skeleton_ratio", "skeleton_queue_raw_ratio", "skeleton_queue_start_p50_ms", "skeleton_queue_start_p99_ms",
		"skeleton_queue_start_p99_raw_ratio", "skeleton_queue_loaded_start_p99_ms", "skeleton_queue_cpu_us", "skeleton_queue_writes_per_job", "skeleton_queue_inputs_per_job",
		"skeleton_grouped_queue_per_s", "skeleton_grouped_queue_raw_ratio", "skeleton_grouped_queue_cpu_us", "skeleton_grouped_queue_writes_per_job",
	} {
		v, ok := m[k].(float64)
		if !ok || !(v > 0) {
			t.Errorf("%s = %v, want a positive number", k, m[k])
		}
	}
	// Figures of windows this short may be 0 on a loaded machine (a 75 ms
	// receipts window without a renewal made sdk_receipts_ratio_min 0; an
	// fsync stall, a window of the SDK's pipeline): they are there, numbers.
	for _, k := range []string{"sdk_receipts_ratio_min",
		"baseline_pipeline_sdk_per_s", "pipeline_sdk_fair_ratio", "baseline_pipeline_sdk_shaped_per_s", "pipeline_sdk_shaped_ratio",
		"baseline_pipeline_shaped_per_s", "pipeline_single_shaped_ratio", "queue_hostile_ratio"} {
		if v, ok := m[k].(float64); !ok || v < 0 {
			t.Errorf("%s = %v, want a number, 0 or more", k, m[k])
		}
	}
	// Fsyncs are counted with perf where it may trace (-1 otherwise).
	for _, k := range []string{"baseline_queue_fsyncs_per_job", "tenure_queue_fsyncs_per_job", "tenure_queue_submit_fsyncs_per_job"} {
		if v, ok := m[k].(float64); !ok || v == 0 || v < 0 && v != -1 {
			t.Errorf("%s = %v, want a positive number with sync always, or -1", k, m[k])
		}
	}
	for _, mode := range HostileModes {
		k := "queue_hostile_" + strings.ReplaceAll(mode, "-", "_")
		if _, ok := m[k+"_ratio"].(float64); !ok {
			t.Errorf("%s_ratio = %v, want a number", k, m[k+"_ratio"])
		}
	}
	// The skeleton stores what a Tenure job stores: four decisions a job,
	// and its share of the inputs. The jobs in flight at the window's
	// edges (queue_inflight, three decisions each at most) blur the count
	// by 48 decisions at most: it is checked when the window held more
	// than 100 jobs (its rate times its least length), under 0.5 a job.
	d := m["skeleton_queue_writes_per_job"].(float64) - m["skeleton_queue_inputs_per_job"].(float64)
	if jobs := m["skeleton_queue_per_s"].(float64) * cfg.QueueDuration.Seconds(); jobs > 100 && (d < 3.5 || d > 4.5) {
		t.Errorf("the skeleton stored %.2f decisions per job over %.0f jobs or more, want 4", d, jobs)
	} else {
		t.Logf("the skeleton stored %.2f decisions per job (%.0f jobs or more)", d, jobs)
	}
	if m["queue_inflight"] != 16.0 || m["baseline_queue_per_s"].(float64)+m["tenure_queue_per_s"].(float64) <= 0 {
		t.Errorf("queue: %v in flight, %v and %v jobs/s", m["queue_inflight"], m["baseline_queue_per_s"], m["tenure_queue_per_s"])
	}
	// The shaped baseline's answers are a renewal verdict as stored: a
	// body of several hundred bytes and Tenure's headers.
	if b, h := m["decision_bytes"].(float64), m["decision_header_bytes"].(float64); b < 500 || h < 100 {
		t.Errorf("the shaped baseline's template: %v bytes of body, %v of headers", b, h)
	}
	if !strings.Contains(progress.String(), "answers shaped like verdicts") {
		t.Errorf("the shaped SDK baseline did not run:\n%s", progress.String())
	}
	if !strings.Contains(progress.String(), "publishers reading their answers") {
		t.Errorf("the fair SDK baseline did not run:\n%s", progress.String())
	}
	// Every one of the storm's 3,000 leases expired exactly once, fired by
	// ticks of at most MaxFiredPerInput expiries each.
	if m["storm_3k_expired"] != 3000.0 || m["storm_3k_ok"] != 1.0 {
		t.Errorf("storm: %v jobs expired exactly once, ok %v; want 3000 and 1", m["storm_3k_expired"], m["storm_3k_ok"])
	}
	if d := m["storm_3k_max_decisions_per_input"]; d != float64(events.MaxFiredPerInput+1) {
		t.Errorf("storm: at most %v decisions per input, want %d (a tick firing %d)", d, events.MaxFiredPerInput+1, events.MaxFiredPerInput)
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
	for _, want := range []string{"1 pipeline", "2 round trip p50", "3 replay", "4 fold", "5 resident bytes", "6 restart", "7 expiry storm, 3k leases", "8 SDK, receipts off / on", "pipeline_ratio >= 0.8", "sdk_receipts_ratio >= 0.9", "audit_chain_share <= 0.1", "chain check alone", "CPU per input, one stream / audit", "storm_3k_ok = 1", "9 queue, jobs through their life"} {
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
	for _, sizes := range [][]int{{0}, {3000, 3000}, {1000, -1}} {
		if _, err := Run(context.Background(), Config{Only: []string{"storm"}, StormSizes: sizes}); err == nil {
			t.Errorf("storm sizes %v accepted", sizes)
		}
	}
}

// --only receipts runs the receipts scenario alone, and what it reports
// was read back from the receipt files.
func TestRunOnlyReceipts(t *testing.T) {
	cfg := tiny(t, SyncInterval)
	cfg.Only = []string{"receipts"}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.BaselinePipelinePerS != 0 || r.TenureSDKPerS != 0 || r.FoldPerS != 0 {
		t.Errorf("other scenarios ran: %+v", r)
	}
	if r.SDKReceiptsOffPerS <= 0 || r.SDKReceiptsOnPerS <= 0 || r.SDKReceiptsRatio <= 0 {
		t.Errorf("receipts off %v/s, on %v/s, ratio %v: want positive figures", r.SDKReceiptsOffPerS, r.SDKReceiptsOnPerS, r.SDKReceiptsRatio)
	}
	// At least a decision receipt per verdict the workers received; the
	// files hold the acquisitions' receipts too.
	if r.SDKReceiptsWrittenPerS <= 0 || r.SDKReceiptsLines < 2*float64(cfg.PipelineWorkers*cfg.PipelineLeases) || r.SDKReceiptsBytes <= r.SDKReceiptsLines {
		t.Errorf("receipts: %v written/s, %v lines, %v bytes", r.SDKReceiptsWrittenPerS, r.SDKReceiptsLines, r.SDKReceiptsBytes)
	}
}

// A storm's figures are keys of the flat JSON object, named by its size.
func TestStormJSON(t *testing.T) {
	for n, want := range map[int]string{100_000: "100k", 1_000_000: "1m", 3000: "3k", 2500: "2500", 1_500_000: "1500k"} {
		if got := StormLabel(n); got != want {
			t.Errorf("StormLabel(%d) = %q, want %q", n, got, want)
		}
	}
	var b bytes.Buffer
	r := &Result{SyncMode: SyncAlways, FoldPerS: 1, Storms: []Storm{{Leases: 100_000, Seconds: 2.5, PerS: 40_000}, {Leases: 1_000_000, OK: 1}}}
	if err := WriteJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatalf("%v: %s", err, b.String())
	}
	if m["storm_100k_s"] != 2.5 || m["storm_100k_per_s"] != 40_000.0 || m["storm_1m_ok"] != 1.0 || m["storm_1m_s"] != 0.0 || m["fold_per_s"] != 1.0 {
		t.Errorf("%s", b.String())
	}
	if _, ok := m["storms"]; ok {
		t.Errorf("the storms are also a nested key: %s", b.String())
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

// --only soak pushes jobs through their whole life with a retention: every
// point is measured (the coordinator restarted from its snapshot each
// time), the projection never holds every job begun, and at the end every
// job is retired; the plot has a line per panel. The default run has no
// soak.
func TestSoak(t *testing.T) {
	cfg := tiny(t, SyncInterval)
	cfg.Only = []string{"soak"}
	cfg.SoakJobs, cfg.SoakPoints, cfg.SoakRetain = 3000, 3, 50*time.Millisecond
	cfg.SoakSnapshotEvery = 1000 // segments to archive and remove at every point
	cfg.SoakPlot = filepath.Join(t.TempDir(), "soak.svg")
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := r.Soak
	if s == nil || s.OK != 1 || s.Jobs != 3000 || len(s.Points) != 3 {
		t.Fatalf("soak %+v", s)
	}
	for _, p := range s.Points {
		if p.Seen <= 0 || p.RSSMB <= 0 || p.RestartS <= 0 || p.InMB <= 0 || p.OutMB <= 0 || p.Kept > p.Seen {
			t.Fatalf("point %+v", p)
		}
	}
	if last := s.Points[len(s.Points)-1]; last.Kept >= last.Seen {
		t.Fatalf("no job retired by the last point: %+v", last)
	}
	// The runtime's window: goroutines waited for a core at some point.
	waited := false
	for _, p := range s.Points {
		if p.SchedMaxMS < p.SchedP99MS || p.SchedP99MS < 0 || p.AssistS < 0 {
			t.Fatalf("runtime window %+v", p)
		}
		waited = waited || p.SchedMaxMS > 0
	}
	if !waited {
		t.Fatal("no scheduling latency measured at any point")
	}
	// Retention of the log: every point sealed a segment and removed it,
	// so the input stream starts later each time.
	for i, p := range s.Points {
		if p.ArchiveMB <= 0 || p.FirstInput <= 1 || i > 0 && p.FirstInput <= s.Points[i-1].FirstInput {
			t.Fatalf("point %d: no segment sealed and removed: %+v", i, p)
		}
	}
	svg, err := os.ReadFile(cfg.SoakPlot)
	if err != nil || strings.Count(string(svg), "<polyline") != 4 {
		t.Fatalf("plot: %v\n%s", err, svg)
	}
	var b bytes.Buffer
	if err := WriteJSON(&b, r); err != nil || !strings.Contains(b.String(), `"soak":{"jobs":3000`) {
		t.Fatalf("json: %v %s", err, b.String())
	}
	if !(Config{}).runs("storm") || (Config{}).runs("soak") {
		t.Fatal("the default run must run the storm and not the soak")
	}
}

// procCPU reads a process's CPU time from /proc as Getrusage gives it for
// this one.
func TestProcCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system: clusterCPU counts this process alone")
	}
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	got, want := procCPU(os.Getpid()), cpuTime()
	if got <= 0 || got > want+20*time.Millisecond || got < want-100*time.Millisecond {
		t.Errorf("procCPU = %v, Getrusage %v", got, want)
	}
	if procCPU(0) != 0 || procCPU(-1) != 0 {
		t.Errorf("procCPU of no process is not 0")
	}
}

// A queue run that measured nothing fails: no job done, no start latency,
// no CPU time, no durable write (issue 31: the fair baseline's 0 jobs/s
// passed as a figure).
func TestQueueLoadCheck(t *testing.T) {
	good := queueLoad{jobs: 10, perS: 100, samples: []time.Duration{time.Millisecond}, cpuUs: 5, fsyncs: -1, writes: 2}
	if err := good.check(); err != nil {
		t.Fatalf("a run that measured: %v", err)
	}
	for name, f := range map[string]func(*queueLoad){
		"no job":         func(q *queueLoad) { q.jobs, q.perS = 0, 0 },
		"no sample":      func(q *queueLoad) { q.samples = nil },
		"no CPU":         func(q *queueLoad) { q.cpuUs = 0 },
		"no write":       func(q *queueLoad) { q.writes = 0 },
		"a zero rate":    func(q *queueLoad) { q.perS = 0 },
		"negative write": func(q *queueLoad) { q.writes = -1 },
	} {
		q := good
		f(&q)
		if err := q.check(); err == nil {
			t.Errorf("%s: passed", name)
		}
	}
}

// A measured window in which no job completed is extended until one did
// (on two loaded cores TestRunTiny's 300 ms window of a queue with a
// hostile worker once passed without a completion, and the run failed):
// here the first job completes and starts after the planned window.
func TestQueueWindowExtendedUntilMeasured(t *testing.T) {
	b := &runner{cfg: Config{QueueWarmup: time.Millisecond, QueueDuration: 50 * time.Millisecond}}
	var l loadWindow
	go func() {
		for !l.measure.Load() {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // past the planned window
		l.started(time.Now().Add(-time.Millisecond))
		l.done.Add(1)
	}()
	q, err := b.runWindow(context.Background(), &l, func() (queueCounts, error) { return queueCounts{writes: 1}, nil })
	if err != nil {
		t.Fatal(err)
	}
	if q.jobs != 1 || len(q.samples) != 1 || q.fsyncs != -1 {
		t.Fatalf("a window whose first job completed after it: %d jobs, %d samples, fsyncs %v; want 1, 1 and -1 (not counted over an extended window)", q.jobs, len(q.samples), q.fsyncs)
	}
}
