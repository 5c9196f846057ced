package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/maknow/tenure/bench"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: tenure bench [flags]

Runs, in one process and one run, a raw JetStream baseline and Tenure on the
same embedded nats-server configuration, and prints both with their ratio:
the pipeline, one-at-a-time round trips and expiry latency, the replay of a
log (tenure audit), the fold alone, memory per job, and the coordinator's
restart. Progress goes to stderr. See BENCHMARKS.md.

`)
		fs.PrintDefaults()
	}
	sync := fs.String("sync", bench.SyncAlways, "embedded server durability: always (fsync before every ack) or interval")
	quick := fs.Bool("quick", false, "the short run (under two minutes on two cores)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	dir := fs.String("dir", "", "where the servers' temporary data directories go (default: the system's)")
	profile := fs.String("profile", "", "write a CPU profile of every measured phase into `DIR`")
	trace := fs.Bool("trace", false, "with --profile: also execution traces and goroutine dumps of the pipeline runs")
	debug := fs.Bool("debug", false, "the coordinators' debug logs on stderr (how the appender appends)")
	only := fs.String("only", "", "comma-separated scenarios to run: pipeline, rtt, expiry, replay, fold, memory (default: all)")
	quiet := fs.Bool("q", false, "no progress on stderr")
	if err := parse(fs, args); err != nil {
		return err
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
			case "pipeline", "rtt", "expiry", "replay", "restart", "fold", "memory":
				cfg.Only = append(cfg.Only, s)
			default:
				return fmt.Errorf("%w: --only: unknown scenario %q", errUsage, s)
			}
		}
	}
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		return bench.WriteJSON(stdout, res)
	}
	return bench.WriteTable(stdout, res)
}
