package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"
)

// Sync modes of the embedded server (Config.Sync).
const (
	SyncAlways   = "always"   // fsync every write before acknowledging it (Tenure's default)
	SyncInterval = "interval" // nats-server's periodic sync
)

// Config says what to run. The zero value of a size takes the default of the
// full run, or of the quick one when Quick is set.
type Config struct {
	// Sync is SyncAlways or SyncInterval (default SyncAlways, as tenure serve).
	Sync string
	// Quick is the short run (under two minutes on two cores).
	Quick bool
	// Dir is where the servers' data directories go (default os.TempDir()).
	Dir string
	// Progress receives one line per step (nil: none).
	Progress io.Writer
	// ProfileDir, when set, receives a CPU profile of every measured phase
	// (<phase>.cpu.pprof), the allocation profiles before and after it
	// (<phase>.allocs-base.pprof, <phase>.allocs.pprof) and a heap profile
	// of the memory scenario.
	ProfileDir string
	// Trace, with ProfileDir, also writes an execution trace of the first
	// two seconds of each measured pipeline window and of each storm
	// (<phase>.trace), and a goroutine dump one second into each pipeline
	// window (<phase>.goroutines).
	Trace bool
	// CoordinatorLog, if set, receives the coordinators' logs (their debug
	// level tells when the appender changes its way of appending).
	CoordinatorLog *slog.Logger
	// Only, when not empty, runs only these scenarios: "pipeline",
	// "receipts" (the SDK with receipts off and on), "rtt", "expiry",
	// "replay" (with "restart": both use the large log), "fold", "memory",
	// "storm", "queue", "flood", "soak" (the soak runs only when named
	// here).
	Only []string

	PipelineWorkers   int           // scenarios 1 and 8: SDK workers (per set in 8)
	PipelineLeases    int           // scenarios 1 and 8: leases per worker
	PipelineWarmup    time.Duration // scenarios 1 and 8: before measuring (a quarter of it before each window of 8)
	PipelineDuration  time.Duration // scenarios 1 and 8: measured (a quarter of it in each of the 16 windows of 8)
	RTTSamples        int           // scenario 2: round trips measured (after as many warm-up ones / 10)
	ExpirySamples     int           // scenario 2: leases left to expire
	LogInputs         int           // scenarios 3 and 6: inputs in the large log
	FoldDuration      time.Duration // scenario 4
	MemJobs           int           // scenario 5
	StormSizes        []int         // scenario 7: leases due at once, one storm per size (default 100,000 and 1,000,000; quick: 100,000)
	StormRawWindow    time.Duration // scenario 7: the most each way of the raw baseline publishes for
	SoakJobs          int           // the soak (only with Only "soak"): jobs pushed through their whole life (default 5,000,000; quick: 200,000)
	SoakPoints        int           // the soak: measurements, each with a restart of the coordinator (default 10)
	SoakPlot          string        // the soak: where to write its SVG plot ("" for none)
	SoakRetain        time.Duration // the soak: the policy's retention (default 1 s)
	SoakSnapshotEvery int           // the soak: the coordinator's inputs between snapshots (0: its default, coordinator.DefaultSnapshotEvery)
	QueueWorkers      int           // scenario 9: workers (SDK workers running worker.Run; pull workers of the raw baseline)
	QueueConcurrency  int           // scenario 9: handlers at once per worker
	QueueInflight     int           // scenario 9: jobs submitted and not yet completed (the loaded closed loops' window)
	QueueWarmup       time.Duration // scenario 9: before measuring, each run
	QueueDuration     time.Duration // scenario 9: measured, each run (one job at a time too: its samples are its start latencies)
}

func (c Config) withDefaults() Config {
	if c.Sync == "" {
		c.Sync = SyncAlways
	}
	def := func(v *int, full, quick int) {
		if *v == 0 {
			*v = full
			if c.Quick {
				*v = quick
			}
		}
	}
	defD := func(v *time.Duration, full, quick time.Duration) {
		if *v == 0 {
			*v = full
			if c.Quick {
				*v = quick
			}
		}
	}
	def(&c.PipelineWorkers, 16, 8)
	def(&c.PipelineLeases, 512, 512)
	defD(&c.PipelineWarmup, 3*time.Second, time.Second)
	defD(&c.PipelineDuration, 10*time.Second, 3*time.Second)
	def(&c.RTTSamples, 5000, 1000)
	def(&c.ExpirySamples, 300, 100)
	def(&c.LogInputs, 1_000_000, 300_000)
	defD(&c.FoldDuration, 3*time.Second, time.Second)
	def(&c.MemJobs, 1_000_000, 1_000_000)
	if c.StormSizes == nil {
		c.StormSizes = []int{100_000, 1_000_000}
		if c.Quick {
			c.StormSizes = []int{100_000}
		}
	}
	defD(&c.StormRawWindow, 15*time.Second, 4*time.Second)
	def(&c.SoakJobs, 5_000_000, 200_000)
	def(&c.SoakPoints, 10, 10)
	defD(&c.SoakRetain, time.Second, time.Second)
	def(&c.QueueWorkers, 4, 4)
	def(&c.QueueConcurrency, 64, 64)
	def(&c.QueueInflight, 1024, 1024)
	defD(&c.QueueWarmup, 2*time.Second, time.Second)
	defD(&c.QueueDuration, 10*time.Second, 3*time.Second)
	return c
}

// check reports a configuration Run cannot run.
func (c Config) check() error {
	if c.Sync != SyncAlways && c.Sync != SyncInterval {
		return fmt.Errorf("bench: sync mode %q: want %s or %s", c.Sync, SyncAlways, SyncInterval)
	}
	labels := map[string]bool{}
	for _, n := range c.StormSizes {
		if n <= 0 {
			return fmt.Errorf("bench: storm of %d leases: want a positive count", n)
		}
		if labels[StormLabel(n)] {
			return fmt.Errorf("bench: two storms of %d leases", n)
		}
		labels[StormLabel(n)] = true
	}
	return nil
}

func (c Config) runs(name string) bool {
	if len(c.Only) == 0 {
		return name != "soak" // the soak runs only when asked for
	}
	for _, s := range c.Only {
		if s == name || name == "restart" && s == "replay" || name == "replay" && s == "restart" {
			return true
		}
	}
	return false
}

// Result holds the figures of one run. The JSON keys are the contract of
// `tenure bench --json`: every value is a number except sync_mode. A figure
// of a scenario that was not run is 0, except the storms', whose keys are
// there only for the sizes that ran (MarshalJSON).
type Result struct {
	SyncMode string `json:"sync_mode"`

	// 1. Pipeline.
	BaselinePipelinePerS  float64 `json:"baseline_pipeline_per_s"` // inputs answered per second
	TenurePipelinePerS    float64 `json:"tenure_pipeline_per_s"`   // renewals accepted (verdicts stored) per second
	PipelineRatio         float64 `json:"pipeline_ratio"`
	TenureInputsPerS      float64 `json:"tenure_pipeline_inputs_per_s"` // inputs stored per second (batch renews count once)
	PipelineInflight      float64 `json:"pipeline_inflight"`            // units in flight in both (leases renewed in a closed loop)
	BaselinePipelineCPUUs float64 `json:"baseline_pipeline_cpu_us"`     // CPU time of the whole process per input answered
	TenurePipelineCPUUs   float64 `json:"tenure_pipeline_cpu_us"`       // CPU time of the whole process per renewal accepted
	TenureSinglePerS      float64 `json:"tenure_pipeline_single_per_s"` // one lease per input
	SinglePipelineRatio   float64 `json:"pipeline_single_ratio"`
	// The baseline pipeline again, its answers shaped like the last verdict
	// the one-lease run stored (issue 20's model of that row).
	BaselineShapedPerS float64 `json:"baseline_pipeline_shaped_per_s"`
	SingleShapedRatio  float64 `json:"pipeline_single_shaped_ratio"` // tenure_pipeline_single_per_s / baseline_pipeline_shaped_per_s
	TenureSDKPerS      float64 `json:"tenure_pipeline_sdk_per_s"`    // SDK workers, verdicts consumed
	SDKPipelineRatio   float64 `json:"pipeline_sdk_ratio"`
	// The SDK's fair baseline (issue 20): publishers on their own
	// connections that read their answers from the output stream, as SDK
	// workers read their verdicts.
	BaselineSDKPipelinePerS float64 `json:"baseline_pipeline_sdk_per_s"`
	SDKFairRatio            float64 `json:"pipeline_sdk_fair_ratio"`    // tenure_pipeline_sdk_per_s / baseline_pipeline_sdk_per_s
	TenureRenewErrors       float64 `json:"tenure_pipeline_sdk_errors"` // SDK renewals not accepted
	// The same fair baseline whose answers are shaped like Tenure's
	// verdicts (issue 20's measured model of what separates the SDK path
	// from it): each answer carries the body and the header set of a
	// renewal verdict the SDK run stored (a fresh Nats-Msg-Id each, in the
	// stream's duplicate window as Tenure's are), appended with an expected
	// last sequence as the coordinator's single writer appends.
	BaselineSDKShapedPerS float64 `json:"baseline_pipeline_sdk_shaped_per_s"`
	SDKShapedRatio        float64 `json:"pipeline_sdk_shaped_ratio"` // tenure_pipeline_sdk_per_s / baseline_pipeline_sdk_shaped_per_s
	DecisionBytes         float64 `json:"decision_bytes"`            // the body of that verdict, bytes
	DecisionHeaderBytes   float64 `json:"decision_header_bytes"`     // its headers as stored, bytes

	// 8. Receipts (run after the pipeline): SDK workers end to end with
	// receipts off and on, in alternating windows of the same run.
	SDKReceiptsOffPerS     float64 `json:"sdk_receipts_off_per_s"`     // renewals (verdicts stored) per second, no receipts kept
	SDKReceiptsOnPerS      float64 `json:"sdk_receipts_on_per_s"`      // the same, every worker keeping receipts in a file
	SDKReceiptsRatio       float64 `json:"sdk_receipts_ratio"`         // on / off
	SDKReceiptsRatioMin    float64 `json:"sdk_receipts_ratio_min"`     // the lowest of on / off over pairs of adjacent windows
	SDKReceiptsRatioMax    float64 `json:"sdk_receipts_ratio_max"`     // the highest
	SDKReceiptsOffCPUUs    float64 `json:"sdk_receipts_off_cpu_us"`    // CPU time of the whole process per renewal, off
	SDKReceiptsOnCPUUs     float64 `json:"sdk_receipts_on_cpu_us"`     // and on
	SDKReceiptsWrittenPerS float64 `json:"sdk_receipts_written_per_s"` // receipt lines written per second while measured (read back from the files)
	SDKReceiptsPerVerdict  float64 `json:"sdk_receipts_per_verdict"`   // receipts written per renewal verdict stored
	SDKReceiptsLines       float64 `json:"sdk_receipts_lines"`         // receipts in the files after the run, every one valid
	SDKReceiptsBytes       float64 `json:"sdk_receipts_bytes"`         // their size
	SDKReceiptsErrors      float64 `json:"sdk_receipts_renew_errors"`  // renewals not accepted, both sets

	// 2. Latency.
	BaselineRTTP50  float64 `json:"baseline_rtt_p50_us"`
	BaselineRTTP99  float64 `json:"baseline_rtt_p99_us"`
	BaselineRTTP999 float64 `json:"baseline_rtt_p999_us"`
	TenureRTTP50    float64 `json:"tenure_rtt_p50_us"`
	TenureRTTP99    float64 `json:"tenure_rtt_p99_us"`
	TenureRTTP999   float64 `json:"tenure_rtt_p999_us"`
	RTTP50Ratio     float64 `json:"rtt_p50_ratio"` // tenure / baseline
	RTTP99Ratio     float64 `json:"rtt_p99_ratio"`
	// 10. Flood (issue "A flood costs only the flooder"): an honest
	// renewal's round trip on a deployment with quotas, in windows while
	// one worker floods its intake (within its quota, and beyond it)
	// against the quiet ones between them.
	FloodQuietRTTP50     float64 `json:"flood_quiet_rtt_p50_us"`
	FloodQuietRTTP99     float64 `json:"flood_quiet_rtt_p99_us"`
	FloodRTTP50          float64 `json:"flood_honest_rtt_p50_us"`    // within the quota
	FloodRTTP99          float64 `json:"flood_honest_rtt_p99_us"`    // within the quota
	FloodRatio           float64 `json:"flood_honest_rtt_p99_ratio"` // within the quota / quiet, p99 (target at most 3)
	FloodOverRTTP99      float64 `json:"flood_over_rtt_p99_us"`      // beyond the quota
	FloodOverRatio       float64 `json:"flood_over_rtt_p99_ratio"`   // beyond the quota / quiet, p99
	FloodStoredPerS      float64 `json:"flood_stored_per_s"`         // the flooder within its quota: inputs stored per second
	FloodOverRefusedPerS float64 `json:"flood_over_refused_per_s"`   // the flooder beyond it: publishes refused over its quota per second
	ExpiryP50            float64 `json:"expiry_p50_ms"`
	ExpiryP99            float64 `json:"expiry_p99_ms"`
	ExpiryMax            float64 `json:"expiry_max_ms"`

	// 3. Replay.
	LogInputs           float64 `json:"log_inputs"`
	LogDecisions        float64 `json:"log_decisions"`
	BaselineReplayPerS  float64 `json:"baseline_replay_per_s"`      // one stream of N messages, in order
	BaselineReplay2PerS float64 `json:"baseline_replay_both_per_s"` // both streams read concurrently, per input
	AuditReplayPerS     float64 `json:"audit_replay_per_s"`
	ReplayRatio         float64 `json:"replay_ratio"`
	ReplayBothRatio     float64 `json:"replay_both_ratio"` // against the read of both streams
	// CPU time of the whole process (server and readers) per input, of
	// the one-stream read (its faster run), the read of both streams and
	// the audit; their ratio, one stream / audit, is what replay_ratio
	// comes to when the reads keep the machine's cores busy.
	BaselineReplayCPUUs  float64 `json:"baseline_replay_cpu_us"`
	BaselineReplay2CPUUs float64 `json:"baseline_replay_both_cpu_us"`
	AuditReplayCPUUs     float64 `json:"audit_replay_cpu_us"`
	ReplayCPURatio       float64 `json:"replay_cpu_ratio"`
	// The cores the one-stream read (its faster run) and the audit kept
	// busy: CPU time over wall-clock time. replay_ratio is
	// replay_cpu_ratio x audit_replay_cores / baseline_replay_cores, so a
	// run in which the neighbours took cores from the audit shows here.
	BaselineReplayCores float64 `json:"baseline_replay_cores"`
	AuditReplayCores    float64 `json:"audit_replay_cores"`
	AuditOK             float64 `json:"audit_ok"`          // 1 when the audit reproduced every decision
	ChainPerS           float64 `json:"chain_per_s"`       // the decision chain's check alone (hash, parse, compare), decisions per second of one goroutine, from memory
	ChainMBPerS         float64 `json:"chain_mb_per_s"`    // the bytes it hashes (subjects and bodies), MB per second
	AuditChainShare     float64 `json:"audit_chain_share"` // the chain check's time over the decisions of the log / the audit's time

	// 4. Fold.
	FoldPerS       float64 `json:"fold_per_s"`        // inputs per second of one core (CPU time, GOMAXPROCS=1, garbage collection included)
	FoldWallPerS   float64 `json:"fold_wall_per_s"`   // the same per wall-clock second (lower when other processes hold the core)
	FoldEncodePerS float64 `json:"fold_encode_per_s"` // with the decisions' canonical encoding

	// 5. Memory.
	MemJobs         float64 `json:"mem_jobs"`
	BytesPerJob     float64 `json:"bytes_per_job"`      // resident (RSS) bytes per job, after returning free memory to the OS
	HeapBytesPerJob float64 `json:"heap_bytes_per_job"` // live heap bytes per job

	// 6. Restart.
	RestartSnapshotS      float64 `json:"restart_snapshot_s"`
	RestartColdS          float64 `json:"restart_cold_s"`
	RestartSnapshotInputs float64 `json:"restart_snapshot_inputs_after"` // inputs folded after the snapshot

	// 9. Queues: jobs through submit, pull and result, through the SDK
	// (ops.SubmitMany and Submit, worker.Run), against a raw JetStream work
	// queue (publish, pull, double ack) in the same run.
	BaselineQueuePerS     float64 `json:"baseline_queue_per_s"`      // jobs acknowledged (ack confirmed) per second
	TenureQueuePerS       float64 `json:"tenure_queue_per_s"`        // jobs completed (SUCCESS accepted) per second, dispatcher on SubmitMany
	QueueRatio            float64 `json:"queue_ratio"`               // tenure / baseline
	TenureQueueSubmitPerS float64 `json:"tenure_queue_submit_per_s"` // the same, dispatcher on Submit (one job an input)
	QueueSubmitRatio      float64 `json:"queue_submit_ratio"`        // that / baseline
	// TenureQueueFlowPerS is the same Submit loop with flow control in
	// force (rules revision 9: 64 concurrency keys limited, a rate limit
	// on the queue, none of them binding); QueueFlowRatio is that / the
	// Submit loop without them: the cost of checking limits at each offer.
	TenureQueueFlowPerS     float64 `json:"tenure_queue_flow_per_s"`
	QueueFlowRatio          float64 `json:"queue_flow_ratio"`
	QueueInflight           float64 `json:"queue_inflight"`                     // jobs submitted and not yet completed, both loaded loops
	BaselineQueueStartP50   float64 `json:"baseline_queue_start_p50_ms"`        // publish to the handler's start, one job at a time
	BaselineQueueStartP99   float64 `json:"baseline_queue_start_p99_ms"`        //
	BaselineQueueStartP999  float64 `json:"baseline_queue_start_p999_ms"`       //
	TenureQueueStartP50     float64 `json:"tenure_queue_start_p50_ms"`          // Submit to the handler's start, one job at a time
	TenureQueueStartP99     float64 `json:"tenure_queue_start_p99_ms"`          //
	TenureQueueStartP999    float64 `json:"tenure_queue_start_p999_ms"`         //
	QueueStartP99Ratio      float64 `json:"queue_start_p99_ratio"`              // tenure / baseline, one at a time
	BaselineQueueLoadedP50  float64 `json:"baseline_queue_loaded_start_p50_ms"` // the same with queue_inflight jobs in the loop (the window dominates it)
	BaselineQueueLoadedP99  float64 `json:"baseline_queue_loaded_start_p99_ms"`
	BaselineQueueLoadedP999 float64 `json:"baseline_queue_loaded_start_p999_ms"`
	TenureQueueLoadedP50    float64 `json:"tenure_queue_loaded_start_p50_ms"` // SubmitMany to the handler's start
	TenureQueueLoadedP99    float64 `json:"tenure_queue_loaded_start_p99_ms"`
	TenureQueueLoadedP999   float64 `json:"tenure_queue_loaded_start_p999_ms"`
	QueueLoadedP99Ratio     float64 `json:"queue_loaded_start_p99_ratio"` // tenure / baseline, loaded
	QueueSamplesIdle        float64 `json:"queue_start_samples"`          // start latencies measured one at a time (the fewer side's)
	QueueSamplesLoaded      float64 `json:"queue_loaded_start_samples"`   // and loaded
	// Per job done, in the loaded loops: the CPU time of the whole process
	// (server, coordinator, clients), its fsync system calls (perf; -1 when
	// not measured), and the durable writes (messages stored and acks of
	// the raw queue; inputs stored and coordinator appends of Tenure: with
	// sync always, one fsync each).
	BaselineQueueCPUUs      float64 `json:"baseline_queue_cpu_us"`
	TenureQueueCPUUs        float64 `json:"tenure_queue_cpu_us"`
	TenureQueueSubmitCPUUs  float64 `json:"tenure_queue_submit_cpu_us"`
	BaselineQueueFsyncs     float64 `json:"baseline_queue_fsyncs_per_job"`
	TenureQueueFsyncs       float64 `json:"tenure_queue_fsyncs_per_job"`
	TenureQueueSubmitFsyncs float64 `json:"tenure_queue_submit_fsyncs_per_job"`
	BaselineQueueWrites     float64 `json:"baseline_queue_writes_per_job"`
	TenureQueueWrites       float64 `json:"tenure_queue_writes_per_job"`
	TenureQueueSubmitWrites float64 `json:"tenure_queue_submit_writes_per_job"`
	TenureQueueInputsPerJob float64 `json:"tenure_queue_inputs_per_job"`       // inputs stored per job (batches count once)
	TenureQueuePerAppend    float64 `json:"tenure_queue_decisions_per_append"` // decisions per coordinator append
	// The skeleton (queueskel.go): raw JetStream carrying the messages of
	// Tenure's job path, shaped as Tenure's, and nothing else; what the
	// message design leaves Tenure's code at most.
	SkeletonQueuePerS       float64 `json:"skeleton_queue_per_s"`               // jobs completed per second, loaded
	QueueSkeletonRatio      float64 `json:"queue_skeleton_ratio"`               // tenure_queue_per_s / that
	SkeletonQueueRawRatio   float64 `json:"skeleton_queue_raw_ratio"`           // skeleton_queue_per_s / baseline_queue_per_s: the ceiling the design leaves
	SkeletonQueueStartP50   float64 `json:"skeleton_queue_start_p50_ms"`        // one job at a time
	SkeletonQueueStartP99   float64 `json:"skeleton_queue_start_p99_ms"`        //
	SkeletonQueueStartRatio float64 `json:"skeleton_queue_start_p99_raw_ratio"` // that / baseline_queue_start_p99_ms: the least the design allows
	SkeletonQueueLoadedP99  float64 `json:"skeleton_queue_loaded_start_p99_ms"`
	SkeletonQueueCPUUs      float64 `json:"skeleton_queue_cpu_us"`
	SkeletonQueueWrites     float64 `json:"skeleton_queue_writes_per_job"`
	SkeletonQueueInputs     float64 `json:"skeleton_queue_inputs_per_job"`
	// The skeleton again with the decisions of one input to one addressee
	// (and of one kind) in one message: a design Tenure does not have,
	// measured for what it would leave.
	SkeletonGroupedPerS     float64 `json:"skeleton_grouped_queue_per_s"`
	SkeletonGroupedRawRatio float64 `json:"skeleton_grouped_queue_raw_ratio"` // that / baseline_queue_per_s
	SkeletonGroupedCPUUs    float64 `json:"skeleton_grouped_queue_cpu_us"`
	SkeletonGroupedWrites   float64 `json:"skeleton_grouped_queue_writes_per_job"`
	// The same loaded loop with one hostile worker beside the honest ones
	// (HostileModes): its jobs per second in each mode against the run
	// without it, and the least of those ratios.
	QueueHostileRatio float64        `json:"queue_hostile_ratio"`
	QueueHostile      []QueueHostile `json:"-"` // queue_hostile_<mode>_per_s and _ratio (MarshalJSON)

	// 7. Expiry storms, one per size (their JSON keys: see Storm).
	Storms []Storm `json:"-"`
	// Soak is the soak's result (nil unless it ran).
	Soak *Soak `json:"soak,omitempty"`

	// The machine while it ran.
	CPUs     float64 `json:"cpus"`
	LoadAvg1 float64 `json:"load_avg_1m"` // at the start of the run
	LoadEnd1 float64 `json:"load_avg_1m_end"`
	Seconds  float64 `json:"run_s"`
}

// QueueHostile is the queue scenario's loaded loop with a hostile worker
// of one mode.
type QueueHostile struct {
	Mode  string  `json:"mode"`
	PerS  float64 `json:"per_s"`
	Ratio float64 `json:"ratio"` // per_s against the run without it
}

// Run runs the scenarios of cfg and returns their figures.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		cfg.Dir = os.TempDir()
	}
	dir, err := os.MkdirTemp(cfg.Dir, "tenure-bench-*")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	r := &Result{SyncMode: cfg.Sync, CPUs: float64(runtime.NumCPU()), LoadAvg1: loadAvg()}
	b := &runner{cfg: cfg, dir: dir, res: r}
	t0 := time.Now()
	b.logf("tenure bench: sync %s, %s run, %d CPUs, load average %.2f", cfg.Sync, map[bool]string{true: "quick", false: "full"}[cfg.Quick], runtime.NumCPU(), r.LoadAvg1)
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		// The pure ones first, while the process is small and quiet.
		{"memory", b.memory},
		{"fold", b.fold},
		{"pipeline", b.pipeline},
		{"receipts", b.receipts},
		{"rtt", b.rtt},
		{"flood", b.flood},
		{"expiry", b.expiry},
		{"replay", b.largeLog},
		{"storm", b.storm},
		{"queue", b.queues},
		{"soak", b.soak},
	}
	for _, s := range steps {
		if !cfg.runs(s.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t1 := time.Now()
		if err := s.run(ctx); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", s.name, err)
		}
		b.logf("  (%s: %.1f s)", s.name, time.Since(t1).Seconds())
	}
	r.LoadEnd1 = loadAvg()
	r.Seconds = time.Since(t0).Seconds()
	return r, nil
}

type runner struct {
	cfg Config
	dir string
	res *Result
	n   int // data directories made

	lastCPU float64 // cores this process kept busy during the last window
	// The shapes of a Tenure queue run's messages, which the skeleton's
	// runs copy (queueskel.go); set by the loaded SubmitMany run.
	queueShapes *queueShapes
}

func (b *runner) logf(format string, args ...any) {
	if b.cfg.Progress != nil {
		fmt.Fprintf(b.cfg.Progress, format+"\n", args...)
	}
}

// newDir returns a fresh data directory.
func (b *runner) newDir(name string) string {
	b.n++
	d := filepath.Join(b.dir, fmt.Sprintf("%02d-%s", b.n, name))
	_ = os.MkdirAll(d, 0o755)
	return d
}

// profile starts a CPU profile of phase name, if asked; call the returned
// function to stop it. It also writes the allocation profile of the
// process before (<phase>.allocs-base.pprof) and after the phase
// (<phase>.allocs.pprof): `go tool pprof -sample_index=alloc_space
// -diff_base DIR/<phase>.allocs-base.pprof DIR/<phase>.allocs.pprof` shows
// what the phase allocated.
func (b *runner) profile(name string) func() {
	if b.cfg.ProfileDir == "" {
		return func() {}
	}
	allocs := func(file string) {
		f, err := os.Create(filepath.Join(b.cfg.ProfileDir, file))
		if err != nil {
			b.logf("profile %s: %v", name, err)
			return
		}
		defer f.Close()
		runtime.GC() // the profile is as of the last collection
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			b.logf("profile %s: %v", name, err)
		}
	}
	allocs(name + ".allocs-base.pprof")
	f, err := os.Create(filepath.Join(b.cfg.ProfileDir, name+".cpu.pprof"))
	if err != nil {
		b.logf("profile %s: %v", name, err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.logf("profile %s: %v", name, err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		allocs(name + ".allocs.pprof")
	}
}

// trace starts an execution trace of the first two seconds of phase name,
// if asked (Trace, with ProfileDir); call the returned function to stop it.
func (b *runner) trace(name string) func() {
	if b.cfg.ProfileDir == "" || !b.cfg.Trace {
		return func() {}
	}
	f, err := os.Create(filepath.Join(b.cfg.ProfileDir, name+".trace"))
	if err != nil {
		return func() {}
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return func() {}
	}
	t := time.AfterFunc(2*time.Second, trace.Stop)
	return func() {
		t.Stop()
		trace.Stop()
		f.Close()
	}
}

// loadAvg is the one-minute load average (0 where /proc is missing).
func loadAvg() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	_, _ = fmt.Sscan(strings.Fields(string(data))[0], &l)
	return l
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

var errTimeout = errors.New("timed out")
