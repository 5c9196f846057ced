// Command tenure is Tenure's binary: the coordinator (serve) and the tools
// around it.
//
//	tenure serve   run the embedded nats-server (or connect to one) and the coordinator
//
// Run `tenure <command> --help` for what a command does and its flags.
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

// A command is one `tenure <name>` (or `tenure <name> <sub>`): what it is
// for, its help text and how it runs. The dispatcher makes the command's
// flag set from it (flags), so that --help always prints the usage line,
// the paragraphs that say what the command does, and then the flags; run
// defines the command's flags on that set and parses them (parse or
// parseFlags).
type command struct {
	name    string // "offer"; a subcommand's: "auth init"
	summary string // one line: tenure --help's list, a parent's list of subcommands
	usage   string // the synopsis printed after "usage: " (lines after the first indented by 7)
	help    string // what the command does, printed by --help before the flags
	hidden  bool   // a subcommand this binary runs itself (cluster node, chaos worker): not listed
	subs    []*command
	run     func(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error
}

// flags returns the command's flag set: errors are reported, not fatal
// (parse), and --help prints the command's help and its flags.
func (c *command) flags(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("tenure "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		c.printHelp(fs.Output())
		fs.PrintDefaults()
	}
	return fs
}

// printHelp prints the usage line, the help text and the subcommands (if
// any), each followed by an empty line.
func (c *command) printHelp(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n\n%s\n\n", c.usage, strings.TrimSpace(c.help))
	listed := false
	for _, sub := range c.subs {
		if !sub.hidden {
			fmt.Fprintf(w, "  %-8s %s\n", strings.TrimPrefix(sub.name, c.name+" "), sub.summary)
			listed = true
		}
	}
	if listed {
		fmt.Fprintf(w, "\nRun `tenure %s <subcommand> --help` for what each does and its flags.\n\n", c.name)
	}
}

// exec runs the command with args, the arguments after its name.
func (c *command) exec(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return c.run(ctx, c.flags(stderr), args, stdout, stderr)
}

// isHelp reports whether arg asks for help rather than for a subcommand.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

func commands() []*command {
	return []*command{serveCmd, clusterCmd, demoCmd, offerCmd, submitCmd, cancelCmd, resolveCmd, policyCmd, limitCmd, scheduleCmd, watchCmd,
		jobsCmd, queuesCmd, statusCmd, authCmd, genesisCmd, auditCmd, logCmd, headsCmd, chaosCmd, uiCmd, benchCmd, versionCmd}
}

var versionCmd = &command{
	name:    "version",
	summary: "print the version",
	usage:   "tenure version",
	help:    "Prints the version of this tenure binary (\"tenure " + version + "\").",
	run: func(_ context.Context, fs *flag.FlagSet, args []string, out, _ io.Writer) error {
		if err := parse(fs, args); err != nil {
			return err
		}
		_, err := fmt.Fprintln(out, "tenure", version)
		return err
	},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: tenure <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run `tenure <command> --help` for what a command does and its flags.")
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
		err := c.exec(ctx, args[1:], stdout, stderr)
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
		usage()
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %v (see %s --help)", errUsage, err, fs.Name())
	}
	return nil
}
