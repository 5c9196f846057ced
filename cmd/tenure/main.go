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
			fmt.Fprintln(stderr, "tenure "+c.name+":", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
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

// parse parses args, mapping flag errors to errUsage. A flag error is one
// line naming how to get help (the flag package would print the whole
// usage under it); -h and --help print the usage and return flag.ErrHelp.
func parse(fs *flag.FlagSet, args []string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (see %s --help)", errUsage, fs.Arg(0), fs.Name())
	}
	return nil
}

// parseFlags is parse leaving the arguments after the flags to the caller
// (fs.Args).
func parseFlags(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) {
		if usage != nil {
			usage()
		} else {
			fmt.Fprintf(out, "usage: %s [flags]\n\n", fs.Name())
			fs.PrintDefaults()
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %v (see %s --help)", errUsage, err, fs.Name())
	}
	return nil
}
