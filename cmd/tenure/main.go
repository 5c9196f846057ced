// Command tenure is Tenure's binary: the coordinator (serve) and the tools
// around it.
//
//	tenure serve   run the embedded nats-server (or connect to one) and the coordinator
//
// Run `tenure <command> -h` for the flags of a command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

const version = "0.1.0"

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run the coordinator (embedded nats-server by default)", runServe},
		{"cluster", "start a local NATS cluster of real processes plus coordinators (cluster up)", runCluster},
		{"demo", "play the seeds' decisive scenarios live and print the evidence matrix", runDemo},
		{"offer", "offer a job to a worker (dispatcher)", runOffer},
		{"cancel", "request the cancellation of a job's live lease", runCancel},
		{"resolve", "settle an ownership conflict or an UNRESOLVED job", runResolve},
		{"policy", "set the lease policy (limits and defaults)", runPolicy},
		{"watch", "print decisions live, filtered by job, holder and kind", runWatch},
		{"status", "show every running coordinator: live or standby, lag, snapshot", runStatus},
		{"auth", "write a nats-server authorization binding each actor to its subjects (auth init)", runAuth},
		{"audit", "replay the log and verify every decision (read-only); evidence matrix and timelines", runAudit},
		{"log", "retention of the log: seal, archive and verify segments, then remove them (status, archive, remove, restore)", runLog},
		{"heads", "keep the coordinators' signed chain heads in a file, verified, for tenure audit --heads", runHeads},
		{"chaos", "fault injection against real processes, checked from the streams (make chaos)", runChaos},
		{"ui", "serve the web UI (lease board, job timelines, anomalies, audit), /healthz and /metrics", runUI},
		{"bench", "measure Tenure against a raw JetStream baseline in the same run (see BENCHMARKS.md)", runBench},
		{"version", "print the version", func(_ context.Context, _ []string, out, _ io.Writer) error {
			_, err := fmt.Fprintln(out, "tenure", version)
			return err
		}},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: tenure <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage marks a command-line mistake: exit status 2.
var errUsage = errors.New("usage")

// errReported marks an error already printed (the flag package prints its
// parse errors with the command's usage).
var errReported = errors.New("reported")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			if !errors.Is(err, errReported) {
				fmt.Fprintln(stderr, "tenure "+c.name+":", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
			}
			return 2
		default:
			fmt.Fprintln(stderr, "tenure:", err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "tenure: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("tenure "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parse parses args, mapping flag errors to errUsage.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w: %v", errUsage, errReported, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}
