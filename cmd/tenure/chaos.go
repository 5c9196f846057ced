package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/maknow/tenure/internal/chaos"
	"github.com/maknow/tenure/streams"
)

// errChaosFailed is the error of a chaos run whose checks failed: exit
// status 1, after the report.
var errChaosFailed = errors.New("chaos: a check failed")

var chaosCmd = &command{
	name:    "chaos",
	summary: "fault injection against real processes, checked from the streams (make chaos)",
	usage:   "tenure chaos --nats-server PATH [flags]",
	help: `Fault injection against real processes on loopback: nats-server processes
running the accounts of tenure auth init, two coordinators (this binary's
serve), worker processes (this binary's hidden "chaos worker"), a hostile
worker (the hidden "chaos hostile") and a dispatcher, each with its own
credentials; the workers run leases of their own and the jobs of a queue
the dispatcher submits to. Coordinators are SIGKILLed at random points and restarted, a
worker is SIGSTOPped for longer than its lease, the nats-server is SIGKILLed
and restarted, and in a 3-node cluster the stream leaders step down and the
nodes are SIGKILLed one at a time; during each schedule the hostile worker
attacks (bad inputs, guessed lease ids, consumer hogging, forged
deliveries, predictable tick ids, floods, the web board without a
credential, the inputs whose verdicts used to tell a non-holder the lease
id, and the queue's offers declined, released, never ACKed or left to
expire). After every schedule the streams
are checked (lost and phantom inputs, double holders, stale effects, gaps,
audit, liveness, and what the hostile inputs achieved). Exit status 0 only
if every check passed. make chaos-short and make chaos build the binaries
and run it.`,
	subs: []*command{chaosWorkerCmd, chaosHostileCmd},
	run:  runChaos,
}

var chaosWorkerCmd = &command{
	name:    "chaos worker",
	summary: "a worker process of tenure chaos",
	usage:   "tenure chaos worker --id ID --journal FILE --control FILE [flags]",
	help: `Runs one worker process of a tenure chaos run: it acquires the jobs the
orchestrator's control file names, works on them and journals every input
it sent and every PubAck it got, for the orchestrator's checks. tenure
chaos starts it; it is not meant to be run by hand.`,
	hidden: true,
	run:    runChaosWorker,
}

var chaosHostileCmd = &command{
	name:    "chaos hostile",
	summary: "the hostile worker process of tenure chaos",
	usage:   "tenure chaos hostile --credential FILE --id ID --journal FILE --control FILE --records FILE [flags]",
	help: `Runs the hostile worker process of a tenure chaos run: with a worker's
valid credential, it attacks in the rounds the orchestrator's control file
names (bad inputs, guessed lease ids, consumer hogging, forged deliveries,
floods, lease ids learned from verdicts, refused queue offers) and records every attack, for the orchestrator's checks. tenure
chaos starts it; it is not meant to be run by hand.`,
	hidden: true,
	run:    runChaosHostile,
}

// runChaos is tenure chaos, or the hidden subcommand args[0] (worker,
// hostile) that a chaos run starts as its processes.
func runChaos(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "worker" {
		return chaosWorkerCmd.exec(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "hostile" {
		return chaosHostileCmd.exec(ctx, args[1:], stdout, stderr)
	}
	profiles := make([]string, 0, len(chaos.Profiles))
	for p := range chaos.Profiles {
		profiles = append(profiles, p)
	}
	sort.Strings(profiles)
	profile := fs.String("profile", "short", "schedules and durations: "+strings.Join(profiles, " or "))
	natsServer := fs.String("nats-server", "", "the nats-server binary (go build -o DIR/nats-server github.com/nats-io/nats-server/v2)")
	tenureBin := fs.String("tenure", "", "the tenure binary run as coordinators and workers (default: this executable)")
	seed := fs.Uint64("seed", 0, "random seed of the schedules (0: from the clock; printed, so a run can be replayed)")
	dir := fs.String("dir", "", "run directory: stores, logs, journals (default: a new temporary directory, removed when every check passed)")
	keep := fs.Bool("keep", false, "keep the run directory even when every check passed")
	coordKills := fs.Int("coordinator-kills", -1, "coordinator SIGKILL schedules (-1: the profile's)")
	workerStops := fs.Int("worker-stops", -1, "worker SIGSTOP schedules (-1: the profile's)")
	serverKills := fs.Int("server-kills", -1, "nats-server SIGKILL schedules (-1: the profile's)")
	clusterRounds := fs.Int("cluster-rounds", -1, "3-node cluster rounds: stepdowns, then each node killed (-1: the profile's)")
	hostiles := fs.Int("hostile", -1, "hostile worker processes per environment, attacking during every schedule (-1: the profile's)")
	attacks := fs.String("attacks", "", "the hostile workers' attack types, comma-separated (default: all of "+strings.Join(chaos.AttackTypes, ", ")+")")
	lease := fs.Duration("lease", 0, "lease duration of the workers (0: the profile's)")
	clusterLease := fs.Duration("cluster-lease", 0, "lease duration of the workers in the cluster (0: the profile's)")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, ok := chaos.Profiles[*profile]
	if !ok {
		return fmt.Errorf("%w: --profile must be %s", errUsage, strings.Join(profiles, " or "))
	}
	if *natsServer == "" {
		return fmt.Errorf("%w: --nats-server is required", errUsage)
	}
	for _, o := range []struct {
		v   int
		dst *int
	}{{*coordKills, &cfg.CoordinatorKills}, {*workerStops, &cfg.WorkerStops}, {*serverKills, &cfg.ServerKills}, {*clusterRounds, &cfg.ClusterRounds}, {*hostiles, &cfg.Hostile}} {
		if o.v >= 0 {
			*o.dst = o.v
		}
	}
	if *lease > 0 {
		cfg.Lease = *lease
	}
	if *attacks != "" {
		for _, a := range strings.Split(*attacks, ",") {
			if !slices.Contains(chaos.AttackTypes, a) {
				return fmt.Errorf("%w: --attacks: unknown attack %q (known: %s)", errUsage, a, strings.Join(chaos.AttackTypes, ", "))
			}
			cfg.Attacks = append(cfg.Attacks, a)
		}
	}
	if *clusterLease > 0 {
		cfg.ClusterLease = *clusterLease
	}
	cfg.NatsServer, cfg.Tenure, cfg.Seed, cfg.Out = *natsServer, *tenureBin, *seed, stdout
	if cfg.Tenure == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		cfg.Tenure = exe
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	cfg.Dir = *dir
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "tenure-chaos-*")
		if err != nil {
			return err
		}
		cfg.Dir = d
	} else if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return err
	}
	if abs, err := filepath.Abs(cfg.Dir); err == nil {
		cfg.Dir = abs
	}
	rep, err := chaos.Run(ctx, cfg)
	var le *streams.LockedError
	switch {
	case errors.As(err, &le):
		return fmt.Errorf("%s is in use by %s: stop that process, or give this run another --dir", le.Dir, le.Holder)
	case err != nil:
		fmt.Fprintf(stderr, "tenure chaos: run directory kept: %s\n", cfg.Dir)
		return err
	case !rep.OK():
		fmt.Fprintf(stderr, "tenure chaos: run directory kept: %s (rerun with --seed %d)\n", cfg.Dir, cfg.Seed)
		return errChaosFailed
	case *keep || *dir != "":
		fmt.Fprintf(stderr, "tenure chaos: run directory: %s\n", cfg.Dir)
	default:
		_ = os.RemoveAll(cfg.Dir)
	}
	return nil
}

// runChaosWorker is the worker process of a chaos run.
func runChaosWorker(ctx context.Context, fs *flag.FlagSet, args []string, _, stderr io.Writer) error {
	var cfg chaos.WorkerConfig
	fs.StringVar(&cfg.URL, "nats-url", "", "NATS server URLs, comma-separated")
	fs.StringVar(&cfg.Credential, "credential", "", "credential file of the worker (tenure auth init: <id>.creds.json)")
	fs.StringVar(&cfg.ID, "id", "", "worker id")
	fs.StringVar(&cfg.Journal, "journal", "", "journal file: every input sent and PubAck received, from the wire")
	fs.StringVar(&cfg.Control, "control", "", "control file the orchestrator writes (the current batch of jobs)")
	fs.DurationVar(&cfg.Lease, "lease", time.Second, "lease duration to ask for")
	fs.IntVar(&cfg.Slots, "slots", 2, "leases acquired and worked on at once")
	fs.StringVar(&cfg.Queue, "queue", "", "queue whose jobs it runs besides (worker.Run; empty: none)")
	fs.IntVar(&cfg.QueueSlots, "queue-slots", 2, "queue jobs run at once")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "random seed")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parse(fs, args); err != nil {
		return err
	}
	if cfg.URL == "" && cfg.Credential == "" || cfg.ID == "" || cfg.Journal == "" || cfg.Control == "" {
		return fmt.Errorf("%w: --nats-url or --credential, --id, --journal and --control are required", errUsage)
	}
	log, err := newLogger(stderr, "json", *logLevel)
	if err != nil {
		return err
	}
	cfg.Logger = log
	return chaos.RunWorker(ctx, cfg)
}

// runChaosHostile is the hostile worker process of a chaos run.
func runChaosHostile(ctx context.Context, fs *flag.FlagSet, args []string, _, stderr io.Writer) error {
	var cfg chaos.HostileConfig
	fs.StringVar(&cfg.Credential, "credential", "", "credential file of the hostile worker (tenure auth init: <id>.creds.json)")
	fs.StringVar(&cfg.URL, "nats-url", "", "NATS server URLs, comma-separated (default: the credential's)")
	fs.StringVar(&cfg.ID, "id", "", "its worker id (the credential's name)")
	fs.StringVar(&cfg.Journal, "journal", "", "journal file: every input sent and PubAck received, from the wire")
	fs.StringVar(&cfg.Control, "control", "", "control file the orchestrator writes (the rounds of attacks)")
	fs.StringVar(&cfg.Records, "records", "", "file of its attack records (JSON lines)")
	fs.DurationVar(&cfg.Lease, "lease", time.Second, "lease duration of its own leases")
	attacks := fs.String("attacks", "", "attack types, comma-separated (default: all)")
	boards := fs.String("boards", "", "the web boards to attack (the board attack), comma-separated base URLs, e.g. http://127.0.0.1:8080")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "random seed")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *attacks != "" {
		cfg.Attacks = strings.Split(*attacks, ",")
	}
	if *boards != "" {
		cfg.Boards = strings.Split(*boards, ",")
	}
	if cfg.Credential == "" || cfg.ID == "" || cfg.Journal == "" || cfg.Control == "" || cfg.Records == "" {
		return fmt.Errorf("%w: --credential, --id, --journal, --control and --records are required", errUsage)
	}
	log, err := newLogger(stderr, "json", *logLevel)
	if err != nil {
		return err
	}
	cfg.Logger = log
	return chaos.RunHostile(ctx, cfg)
}
