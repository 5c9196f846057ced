package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/bench"
)

var benchCmd = &command{
	name:    "bench",
	summary: "measure Tenure against a raw JetStream baseline in the same run (see BENCHMARKS.md)",
	usage:   "tenure bench [flags]",
	help: `Runs, in one process and one run, a raw JetStream baseline and Tenure on the
same embedded nats-server configuration, and prints both with their ratio:
the pipeline, SDK workers with receipts off and on (the cost of keeping
them), one-at-a-time round trips and expiry latency, the replay of a log
(tenure audit, and the share of it the decision chain's check takes), the
fold alone, memory per job, and the coordinator's restart, expiry storms
(N leases due at once when a coordinator restarts), and queues: jobs
submitted with ops and run with worker.Run against a raw work queue, and
against the skeleton, raw JetStream carrying the messages a Tenure job
makes and nothing else (what the message design leaves Tenure's code).
Progress goes to stderr. See BENCHMARKS.md.`,
	run: runBench,
}

func runBench(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	sync := fs.String("sync", bench.SyncAlways, "embedded server durability: always (fsync before every ack) or interval")
	quick := fs.Bool("quick", false, "the short run (under two minutes on two cores)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	dir := fs.String("dir", "", "where the servers' temporary data directories go (default: the system's)")
	profile := fs.String("profile", "", "write CPU and allocation profiles of every measured phase into `DIR`")
	trace := fs.Bool("trace", false, "with --profile: also execution traces of the pipeline runs and the storms, goroutine dumps of the pipeline runs")
	debug := fs.Bool("debug", false, "the coordinators' debug logs on stderr (how the appender appends)")
	only := fs.String("only", "", "comma-separated scenarios to run: pipeline, receipts, rtt, flood, expiry, replay, fold, memory, storm, queue, soak (default: all but soak)")
	soakJobs := fs.Int("soak", 0, "with --only soak: jobs pushed through their whole life (default 5000000; 200000 with --quick)")
	soakPlot := fs.String("soak-plot", "", "with --only soak: write the soak's plot (SVG) to `FILE`")
	storm := fs.String("storm", "", "comma-separated lease counts of the expiry storms, e.g. `100000,1000000` (default: that; 100000 with --quick)")
	quiet := fs.Bool("q", false, "no progress on stderr")
	clusterMode := fs.Bool("cluster", false, "instead: throughput with 1, 2 and 4 partitions on a local 3-node cluster of real processes (R3 streams), next to raw JetStream on the same cluster")
	natsServer := fs.String("nats-server", "", "with --cluster: a nats-server binary for the nodes (default: this binary's embedded server)")
	clusterLeases := fs.Int("cluster-leases", 0, "with --cluster: leases per SDK worker (8 workers; default 512: as many in flight as the raw baseline keeps)")
	clusterParts := fs.String("partitions", "", "with --cluster: comma-separated partition counts to measure (default 1,2,4)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *clusterMode {
		ccfg := bench.ClusterConfig{Dir: *dir, NatsServer: *natsServer, Leases: *clusterLeases}
		if *clusterLeases < 0 {
			return fmt.Errorf("%w: --cluster-leases: want a positive lease count", errUsage)
		}
		if *clusterParts != "" {
			for _, s := range strings.Split(*clusterParts, ",") {
				n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
				if err != nil || n == 0 || n > events.MaxPartitions {
					return fmt.Errorf("%w: --partitions: %q is not a partition count from 1 to %d", errUsage, s, events.MaxPartitions)
				}
				ccfg.Partitions = append(ccfg.Partitions, uint32(n))
			}
		}
		if *quick {
			ccfg.Window = 5 * time.Second
		}
		if !*quiet {
			ccfg.Log = stderr
		}
		res, err := bench.Cluster(ctx, ccfg)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			return enc.Encode(res)
		}
		fmt.Fprintf(stdout, "cluster: %d nodes (real processes, loopback, R3, sync always), %d SDK workers x %d leases\n", res.Nodes, res.Workers, res.Leases)
		fmt.Fprintf(stdout, "%-11s %16s %14s %7s %17s %7s   %s\n", "partitions", "tenure renew/s", "raw msgs/s", "ratio", "raw shaped msgs/s", "ratio", "CPU µs per unit: tenure (nodes + serve + workers) / raw / shaped; tenure's cores")
		for _, p := range res.Points {
			fmt.Fprintf(stdout, "%-11d %16.0f %14.0f %7.2f %17.0f %7.2f   %.1f (%.1f + %.1f + %.1f) / %.1f / %.1f; %.2f\n", p.Partitions, p.TenurePerS, p.RawPerS, p.Ratio, p.RawShapedPerS, p.ShapedRatio,
				p.TenureCPUUs, p.TenureNodesCPUUs, p.TenureServeCPUUs, p.TenureWorkersCPUUs, p.RawCPUUs, p.RawShapedCPUUs, p.TenureCores)
		}
		return nil
	}
	if *sync != bench.SyncAlways && *sync != bench.SyncInterval {
		return fmt.Errorf("%w: --sync must be always or interval", errUsage)
	}
	cfg := bench.Config{Sync: *sync, Quick: *quick, Dir: *dir, ProfileDir: *profile, Trace: *trace}
	if *debug {
		cfg.CoordinatorLog = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if !*quiet {
		cfg.Progress = stderr
	}
	if *only != "" {
		for _, s := range strings.Split(*only, ",") {
			switch s = strings.TrimSpace(s); s {
			case "pipeline", "receipts", "rtt", "flood", "expiry", "replay", "restart", "fold", "memory", "storm", "queue", "soak":
				cfg.Only = append(cfg.Only, s)
			default:
				return fmt.Errorf("%w: --only: unknown scenario %q", errUsage, s)
			}
		}
	}
	if *storm != "" {
		for _, s := range strings.Split(*storm, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 {
				return fmt.Errorf("%w: --storm: %q is not a positive lease count", errUsage, s)
			}
			cfg.StormSizes = append(cfg.StormSizes, n)
		}
	}
	if *soakJobs < 0 {
		return fmt.Errorf("%w: --soak: want a positive job count", errUsage)
	}
	cfg.SoakJobs, cfg.SoakPlot = *soakJobs, *soakPlot
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		return bench.WriteJSON(stdout, res)
	}
	return bench.WriteTable(stdout, res)
}
