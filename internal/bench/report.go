package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// Target is one of the targets and whether a result meets it.
type Target struct {
	Name string // e.g. "pipeline_ratio >= 0.8"
	Met  bool
	Got  string
}

// Targets judges r against the targets. Scenarios that did not run are left
// out.
func (r *Result) Targets() []Target {
	var t []Target
	add := func(ran bool, name string, met bool, got float64, format string) {
		if ran {
			t = append(t, Target{Name: name, Met: met, Got: fmt.Sprintf(format, got)})
		}
	}
	add(r.BaselinePipelinePerS > 0, "pipeline_ratio >= 0.8", r.PipelineRatio >= 0.8, r.PipelineRatio, "%.2f")
	if r.SyncMode == SyncAlways {
		add(r.TenurePipelinePerS > 0, "sync always: >= 20,000 renewals accepted/s", r.TenurePipelinePerS >= 20000, r.TenurePipelinePerS, "%.0f/s")
	}
	add(r.SDKReceiptsOffPerS > 0, "sdk_receipts_ratio >= 0.9 (receipts on / off)", r.SDKReceiptsRatio >= 0.9, r.SDKReceiptsRatio, "%.2f")
	add(r.BaselineRTTP50 > 0, "tenure_rtt_p50_us <= 2 x baseline", r.RTTP50Ratio <= 2, r.RTTP50Ratio, "x%.2f")
	add(r.BaselineRTTP99 > 0, "tenure_rtt_p99_us <= 2 x baseline", r.RTTP99Ratio <= 2, r.RTTP99Ratio, "x%.2f")
	add(r.FloodQuietRTTP99 > 0, "flood_honest_rtt_p99_ratio <= 3 (flood within the quota / quiet)", r.FloodRatio <= 3, r.FloodRatio, "x%.2f")
	add(r.BaselineReplayPerS > 0, "replay_ratio >= 0.7", r.ReplayRatio >= 0.7, r.ReplayRatio, "%.2f")
	add(r.ChainPerS > 0, "audit_chain_share <= 0.1 (chain check / audit)", r.AuditChainShare <= 0.1, r.AuditChainShare, "%.3f")
	add(r.FoldPerS > 0, "fold_per_s >= 500,000", r.FoldPerS >= 500_000, r.FoldPerS, "%.0f")
	add(r.MemJobs > 0, "bytes_per_job <= 1024", r.BytesPerJob <= 1024, r.BytesPerJob, "%.0f")
	add(r.RestartSnapshotS > 0, "restart_snapshot_s <= 3", r.RestartSnapshotS <= 3, r.RestartSnapshotS, "%.2f s")
	add(len(r.QueueHostile) > 0, "queue_hostile_ratio >= 0.8 (the least of the hostile modes)", r.QueueHostileRatio >= 0.8, r.QueueHostileRatio, "%.2f")
	qmin := 0.8
	if r.SyncMode == SyncAlways {
		qmin = 1.0
	}
	add(r.BaselineQueuePerS > 0, fmt.Sprintf("queue_ratio >= %.1f (jobs/s through the SDK / raw work queue)", qmin), r.QueueRatio >= qmin, r.QueueRatio, "%.2f")
	add(r.BaselineQueueStartP99 > 0, "queue_start_p99_ratio <= 2 (submit to start, one at a time)", r.QueueStartP99Ratio <= 2, r.QueueStartP99Ratio, "x%.2f")
	add(r.BaselineQueueLoadedP99 > 0, "queue_loaded_start_p99_ratio <= 2 (submit to start, loaded)", r.QueueLoadedP99Ratio <= 2, r.QueueLoadedP99Ratio, "x%.2f")
	if r.Soak != nil {
		add(true, "soak_ok = 1 (every job retired, no resync)", r.Soak.OK == 1, r.Soak.MaxJob, "%.0f jobs kept at most")
	}
	for _, s := range r.Storms {
		l := StormLabel(int(s.Leases))
		add(true, "storm_"+l+"_ok = 1 (each lease expired once)", s.OK == 1, s.Expired, "%.0f jobs")
		if r.SyncMode != SyncAlways {
			continue
		}
		if s.Leases == 1_000_000 {
			add(true, "sync always: storm_1m_s < 30", s.Seconds < 30, s.Seconds, "%.1f s")
		} else {
			add(true, "sync always: storm_"+l+"_per_s >= 33,334 (1m in 30 s)", s.PerS >= stormPace, s.PerS, "%.0f/s")
		}
	}
	return t
}

// WriteJSON writes r as one JSON object.
func WriteJSON(w io.Writer, r *Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// WriteTable writes r as a table: each scenario with its baseline, Tenure's
// figure and their ratio, then the targets.
func WriteTable(w io.Writer, r *Result) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	f := func(v float64, format string) string {
		if v == 0 || math.IsNaN(v) {
			return "-"
		}
		return fmt.Sprintf(format, v)
	}
	fmt.Fprintf(tw, "tenure bench, sync %s\tbaseline\ttenure\tratio\n", r.SyncMode)
	row := func(name string, base, ten float64, format string, rat float64) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, f(base, format), f(ten, format), f(rat, "%.2f"))
	}
	row("1 pipeline (per s)", r.BaselinePipelinePerS, r.TenurePipelinePerS, "%.0f", r.PipelineRatio)
	row("  CPU per unit (µs)", r.BaselinePipelineCPUUs, r.TenurePipelineCPUUs, "%.1f", ratio(r.BaselinePipelineCPUUs, r.TenurePipelineCPUUs))
	row("  one lease per input (per s)", r.BaselinePipelinePerS, r.TenureSinglePerS, "%.0f", r.SinglePipelineRatio)
	row("  the same, answers shaped like verdicts (per s)", r.BaselineShapedPerS, r.TenureSinglePerS, "%.0f", r.SingleShapedRatio)
	row("  SDK, verdicts consumed (per s)", r.BaselinePipelinePerS, r.TenureSDKPerS, "%.0f", r.SDKPipelineRatio)
	row("  SDK vs publishers reading answers (per s)", r.BaselineSDKPipelinePerS, r.TenureSDKPerS, "%.0f", r.SDKFairRatio)
	row("  the same, answers shaped like verdicts (per s)", r.BaselineSDKShapedPerS, r.TenureSDKPerS, "%.0f", r.SDKShapedRatio)
	row("8 SDK, receipts off / on (per s)", r.SDKReceiptsOffPerS, r.SDKReceiptsOnPerS, "%.0f", r.SDKReceiptsRatio)
	row("  CPU per renewal, off / on (µs)", r.SDKReceiptsOffCPUUs, r.SDKReceiptsOnCPUUs, "%.1f", ratio(r.SDKReceiptsOffCPUUs, r.SDKReceiptsOnCPUUs))
	row("2 round trip p50 (µs)", r.BaselineRTTP50, r.TenureRTTP50, "%.0f", r.RTTP50Ratio)
	row("  round trip p99 (µs)", r.BaselineRTTP99, r.TenureRTTP99, "%.0f", r.RTTP99Ratio)
	row("  round trip p99.9 (µs)", r.BaselineRTTP999, r.TenureRTTP999, "%.0f", ratio(r.TenureRTTP999, r.BaselineRTTP999))
	row("10 honest renewal p99, quiet / flood within quota (µs)", r.FloodQuietRTTP99, r.FloodRTTP99, "%.0f", r.FloodRatio)
	row("  quiet / flood beyond quota (µs)", r.FloodQuietRTTP99, r.FloodOverRTTP99, "%.0f", r.FloodOverRatio)
	row("  expiry latency p50 (ms)", 0, r.ExpiryP50, "%.1f", 0)
	row("  expiry latency p99 (ms)", 0, r.ExpiryP99, "%.1f", 0)
	row("3 replay of the log (inputs/s)", r.BaselineReplayPerS, r.AuditReplayPerS, "%.0f", r.ReplayRatio)
	row("  both streams read (inputs/s)", r.BaselineReplay2PerS, r.AuditReplayPerS, "%.0f", ratio(r.AuditReplayPerS, r.BaselineReplay2PerS))
	row("  CPU per input, one stream / audit (µs)", r.BaselineReplayCPUUs, r.AuditReplayCPUUs, "%.1f", r.ReplayCPURatio)
	row("  chain check alone (decisions/s)", 0, r.ChainPerS, "%.0f", 0)
	row("4 fold, 1 core (inputs/CPU s)", 0, r.FoldPerS, "%.0f", 0)
	row("  per wall-clock second", 0, r.FoldWallPerS, "%.0f", 0)
	row("  fold + encode (inputs/CPU s)", 0, r.FoldEncodePerS, "%.0f", 0)
	row("5 resident bytes per job", 0, r.BytesPerJob, "%.0f", 0)
	row("  live heap bytes per job", 0, r.HeapBytesPerJob, "%.0f", 0)
	row("6 restart from snapshot (s)", 0, r.RestartSnapshotS, "%.2f", 0)
	row("  restart without snapshot (s)", 0, r.RestartColdS, "%.2f", 0)
	for _, s := range r.Storms {
		row(fmt.Sprintf("7 expiry storm, %s leases (per s)", StormLabel(int(s.Leases))), s.RawPerS, s.PerS, "%.0f", s.Ratio)
		row("  live to the last expiry stored (s)", ratio(s.Leases, s.RawPerS), s.Seconds, "%.2f", ratio(ratio(s.Leases, s.RawPerS), s.Seconds))
		row("  restart, start to live (s)", 0, s.RestartS, "%.2f", 0)
		row("  the loop's longest turn, setup (ms)", 0, s.SetupPauseMS, "%.1f", 0)
		row("  the loop's longest turn, storm (ms)", 0, s.PauseMS, "%.1f", 0)
		row("  honest renewal meanwhile, p99 (ms)", 0, s.HonestP99MS, "%.1f", 0)
	}
	row("9 queue, jobs through their life, SubmitMany (per s)", r.BaselineQueuePerS, r.TenureQueuePerS, "%.0f", r.QueueRatio)
	row("  the same, Submit one job an input (per s)", r.BaselineQueuePerS, r.TenureQueueSubmitPerS, "%.0f", r.QueueSubmitRatio)
	row("  Submit, keys and a rate limit in force / without (per s)", r.TenureQueueSubmitPerS, r.TenureQueueFlowPerS, "%.0f", r.QueueFlowRatio)
	row("  CPU per job (µs)", r.BaselineQueueCPUUs, r.TenureQueueCPUUs, "%.1f", ratio(r.TenureQueueCPUUs, r.BaselineQueueCPUUs))
	row("  fsyncs per job", r.BaselineQueueFsyncs, r.TenureQueueFsyncs, "%.2f", ratio(r.TenureQueueFsyncs, r.BaselineQueueFsyncs))
	row("  durable writes per job", r.BaselineQueueWrites, r.TenureQueueWrites, "%.2f", ratio(r.TenureQueueWrites, r.BaselineQueueWrites))
	row("  to the handler's start, alone, p50 (ms)", r.BaselineQueueStartP50, r.TenureQueueStartP50, "%.2f", ratio(r.TenureQueueStartP50, r.BaselineQueueStartP50))
	row("  to the handler's start, alone, p99 (ms)", r.BaselineQueueStartP99, r.TenureQueueStartP99, "%.2f", r.QueueStartP99Ratio)
	row("  to the handler's start, alone, p99.9 (ms)", r.BaselineQueueStartP999, r.TenureQueueStartP999, "%.2f", ratio(r.TenureQueueStartP999, r.BaselineQueueStartP999))
	row("  to the handler's start, loaded, p50 (ms)", r.BaselineQueueLoadedP50, r.TenureQueueLoadedP50, "%.1f", ratio(r.TenureQueueLoadedP50, r.BaselineQueueLoadedP50))
	row("  to the handler's start, loaded, p99 (ms)", r.BaselineQueueLoadedP99, r.TenureQueueLoadedP99, "%.1f", r.QueueLoadedP99Ratio)
	row("  to the handler's start, loaded, p99.9 (ms)", r.BaselineQueueLoadedP999, r.TenureQueueLoadedP999, "%.1f", ratio(r.TenureQueueLoadedP999, r.BaselineQueueLoadedP999))
	for _, h := range r.QueueHostile {
		row("  with a worker that does "+h.Mode+" (per s)", r.TenureQueuePerS, h.PerS, "%.0f", h.Ratio)
	}
	if r.SkeletonQueuePerS > 0 {
		row("  skeleton: raw carrying Tenure's messages / raw (per s)", r.BaselineQueuePerS, r.SkeletonQueuePerS, "%.0f", r.SkeletonQueueRawRatio)
		row("  Tenure / the skeleton (per s)", r.SkeletonQueuePerS, r.TenureQueuePerS, "%.0f", r.QueueSkeletonRatio)
		row("  skeleton: CPU per job (µs)", r.BaselineQueueCPUUs, r.SkeletonQueueCPUUs, "%.1f", ratio(r.SkeletonQueueCPUUs, r.BaselineQueueCPUUs))
		row("  skeleton: to the handler's start, alone, p99 (ms)", r.BaselineQueueStartP99, r.SkeletonQueueStartP99, "%.2f", r.SkeletonQueueStartRatio)
		row("  skeleton, an input's decisions to one addressee grouped / raw (per s)", r.BaselineQueuePerS, r.SkeletonGroupedPerS, "%.0f", r.SkeletonGroupedRawRatio)
		row("  the same: durable writes per job", r.BaselineQueueWrites, r.SkeletonGroupedWrites, "%.2f", ratio(r.SkeletonGroupedWrites, r.BaselineQueueWrites))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.LogInputs > 0 {
		fmt.Fprintf(w, "log: %.0f inputs, %.0f decisions; audit clean: %v; the chain check alone %.0f MB/s, %.1f%% of the audit's time; restart from the snapshot folded %.0f inputs\n",
			r.LogInputs, r.LogDecisions, r.AuditOK == 1, r.ChainMBPerS, 100*r.AuditChainShare, r.RestartSnapshotInputs)
	}
	if r.QueueInflight > 0 {
		fmt.Fprintf(w, "queue: %.0f jobs in the loaded loops; Tenure %.2f inputs per job, %.1f decisions per append; start latencies from %.0f samples one at a time, %.0f loaded\n",
			r.QueueInflight, r.TenureQueueInputsPerJob, r.TenureQueuePerAppend, r.QueueSamplesIdle, r.QueueSamplesLoaded)
	}
	if r.PipelineInflight > 0 {
		fmt.Fprintf(w, "pipeline: %.0f units in flight in both; %.0f batch renew inputs/s; SDK renewals refused: %.0f\n", r.PipelineInflight, r.TenureInputsPerS, r.TenureRenewErrors)
	}
	if r.SDKReceiptsLines > 0 {
		fmt.Fprintf(w, "receipts: %.0f written/s while measured (%.2f per verdict), %.0f in the files (%.1f MB), every one valid; SDK renewals refused: %.0f\n",
			r.SDKReceiptsWrittenPerS, r.SDKReceiptsPerVerdict, r.SDKReceiptsLines, r.SDKReceiptsBytes/1e6, r.SDKReceiptsErrors)
	}
	for _, s := range r.Storms {
		fmt.Fprintf(w, "storm of %.0f: %.0f jobs expired exactly once (ok %v) by %.0f inputs, at most %.0f decisions per input; %.2f cores busy; raw: async %.0f/s, atomic batches %.0f/s\n",
			s.Leases, s.Expired, s.OK == 1, s.Ticks, s.MaxDecisions, s.Cores, s.RawAsyncPerS, s.RawBatchPerS)
	}
	if sk := r.Soak; sk != nil {
		fmt.Fprintf(w, "soak: %.0f jobs through their whole life (%.0f/s, %.0f inputs); ok %v; at each point:\n", sk.Jobs, sk.PerS, sk.Inputs, sk.OK == 1)
		fmt.Fprintf(w, "  %10s %8s %8s %8s %8s %9s %8s %7s %7s %10s %8s %9s %9s\n", "jobs seen", "kept", "RSS MB", "heap MB", "snap MB", "encode ms", "turn ms",
			"in MB", "out MB", "1st input", "seal s", "remove s", "restart s")
		for _, p := range sk.Points {
			fmt.Fprintf(w, "  %10.0f %8.0f %8.0f %8.0f %8.2f %9.1f %8.1f %7.0f %7.0f %10.0f %8.1f %9.1f %9.2f\n", p.Seen, p.Kept, p.RSSMB, p.HeapMB, p.SnapshotMB, p.EncodeMS, p.PauseMS,
				p.InMB, p.OutMB, p.FirstInput, p.ArchiveS, p.RemoveS, p.RestartS)
		}
	}
	fmt.Fprintf(w, "machine: %.0f CPUs, load average %.2f at the start, %.2f at the end; %.0f s\n", r.CPUs, r.LoadAvg1, r.LoadEnd1, r.Seconds)
	for _, t := range r.Targets() {
		mark := "met   "
		if !t.Met {
			mark = "MISSED"
		}
		fmt.Fprintf(w, "  %s %-45s %s\n", mark, t.Name, t.Got)
	}
	return nil
}
