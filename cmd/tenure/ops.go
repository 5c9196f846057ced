package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/receipt"
	"github.com/maknow/tenure/streams"
)

// opsCommand holds what every operator command shares: the connection, the
// ops identity, and how to print the verdict.
type opsCommand struct {
	conn     connFlags
	as       string
	asJSON   bool
	receipts string
	prefix   string
}

func (o *opsCommand) register(fs *flag.FlagSet) {
	o.conn.register(fs, "NATS server (default nats://127.0.0.1:4222, the local embedded one)")
	fs.StringVar(&o.as, "as", "", "ops identity (actor token) to publish as (default: the name of --creds-json's credential, else cli)")
	fs.BoolVar(&o.asJSON, "json", false, "print the verdict decision as JSON")
	fs.StringVar(&o.receipts, "receipts", "", "append receipts of the input and its verdict to `FILE`, for tenure audit --receipts")
	fs.StringVar(&o.prefix, "prefix", streams.DefaultPrefix, "stream name prefix of the topology")
}

// defaultActor sets --as when it was not given: the credential's name
// (whose permissions let it publish only as itself), else cli.
func (o *opsCommand) defaultActor() {
	if o.as != "" {
		return
	}
	o.as = "cli"
	if o.conn.cred != nil {
		o.as = o.conn.cred.Name
	}
}

// dial checks --prefix, sets the defaults of --nats-url and --as, and
// connects as the ops actor.
func (o *opsCommand) dial() (*nats.Conn, error) {
	defaultURL(&o.conn)
	o.defaultActor()
	if !validPrefix(o.prefix) {
		return nil, fmt.Errorf("%w: invalid --prefix %q: want 1 to 64 of [A-Za-z0-9_-]", errUsage, o.prefix)
	}
	return o.conn.connect("tenure-ops-" + o.as)
}

// run connects, calls f, and prints the verdict; a verdict that is not
// accepted is an error (exit status 1). In a partitioned deployment the
// verdict is that of the job's partition.
func (o *opsCommand) run(ctx context.Context, stdout io.Writer, f func(context.Context, *ops.Client) (events.Decision, error)) error {
	return o.runAll(ctx, stdout, func(ctx context.Context, c *ops.Client) ([]events.Decision, error) {
		d, err := f(ctx, c)
		return []events.Decision{d}, err
	})
}

// runAll is run for an input sent to every partition (policy): it prints
// every verdict learned, each prefixed with its partition when the
// deployment is partitioned ("partition 2: ..."; as JSON, one decision per
// line in partition order).
func (o *opsCommand) runAll(ctx context.Context, stdout io.Writer, f func(context.Context, *ops.Client) ([]events.Decision, error)) error {
	nc, err := o.dial()
	if err != nil {
		return err
	}
	defer nc.Close()
	opts := []ops.Option{ops.WithPrefix(o.prefix)}
	var keepErr error
	var keepMu sync.Mutex // SetPolicyAll asks the partitions at once
	if o.receipts != "" {
		rf, err := receipt.OpenFile(o.receipts)
		if err != nil {
			return err
		}
		defer rf.Close()
		opts = append(opts, ops.WithReceipts(rf), ops.WithErrorHandler(func(err error) {
			keepMu.Lock()
			keepErr = errors.Join(keepErr, err)
			keepMu.Unlock()
		}))
	}
	c, err := ops.New(nc, o.as, opts...)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	defer c.Close()
	ds, err := f(ctx, c)
	keepMu.Lock()
	if err == nil {
		err = keepErr // the verdict was accepted, but its receipt is lost
	}
	keepMu.Unlock()
	var rej *ops.RejectedError
	if err != nil && !errors.As(err, &rej) && len(ds) <= 1 {
		return err
	}
	count, _ := c.Partitions(ctx) // known by now: f succeeded at least in part
	for k, d := range ds {
		if d.Kind == events.KindNone {
			continue // no verdict learned: the error says so
		}
		switch {
		case o.asJSON:
			fmt.Fprintf(stdout, "%s\n", events.AppendDecision(nil, &d))
		case count > 0 && len(ds) > 1:
			fmt.Fprintf(stdout, "partition %d: %s\n", k, projector.Describe(&d, 0))
		default:
			fmt.Fprintln(stdout, projector.Describe(&d, 0))
		}
		if !o.asJSON && d.Reason == events.ReasonDurationOutOfPolicy {
			fmt.Fprintln(stdout, "  "+leaseLimits(ctx, c, d))
		}
	}
	return err
}

// leaseLimits says which lease durations the policy in force allows, for
// a duration_out_of_policy verdict (the recorded decision carries no detail
// under rules revisions 1 to 3, and its wording is part of what the audit
// reproduces, so the limits are read now, from the decision stream's last
// policy_set, and labelled so).
func leaseLimits(ctx context.Context, c *ops.Client, d events.Decision) string {
	pols, err := c.Policies(ctx)
	if err != nil {
		return "the policy in force could not be read: " + err.Error()
	}
	part := 0
	if len(pols) > 1 {
		part = int(events.PartitionOf(d.Job.ID, uint32(len(pols))))
	}
	p := pols[part].Policy
	return fmt.Sprintf("the policy in force now allows leases of %v to %v (default %v): tenure policy show",
		time.Duration(p.MinLease), time.Duration(p.MaxLease), time.Duration(p.DefaultLease))
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func needToken(name, v string) error {
	if !events.ValidToken(v) {
		return fmt.Errorf("%w: --%s must be 1 to 64 of [A-Za-z0-9_-], got %q", errUsage, name, v)
	}
	return nil
}

// opsVerdictHelp ends the help of every operator command.
const opsVerdictHelp = `Publishes one input as ops actor --as (tenure.in.ops.<as>.<job>.<verb>)
and waits for its verdict: the coordinator's decision on that input,
printed as one line (--json: the decision as stored). A verdict that does
not accept the input exits with status 1, no verdict within 10 s too. In a
partitioned deployment the input goes to the job's partition.`

var offerCmd = &command{
	name:    "offer",
	summary: "offer a job to a worker (dispatcher)",
	usage:   "tenure offer --job ID --holder ID [flags]",
	help: `Offers job --job to worker --holder: the job's next lease generation is
OFFERED to it, and the worker has --ack-timeout to ACK (accept) it; once
ACKed the lease is ACTIVE for --lease and the worker renews it. An offer
the worker does not ACK in time lapses (ack_missed). A job with a live or
pending lease is refused (rejected/lease_held).

` + opsVerdictHelp,
	run: runOffer,
}

func runOffer(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var o opsCommand
	o.register(fs)
	job := fs.String("job", "", "job to offer (required)")
	holder := fs.String("holder", "", "worker to offer it to (required)")
	lease := fs.Duration("lease", 0, "lease duration once ACKed (0: the policy's default)")
	ackTimeout := fs.Duration("ack-timeout", 0, "time the holder has to ACK (0: the policy's default)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := errors.Join(needToken("job", *job), needToken("holder", *holder)); err != nil {
		return err
	}
	return o.run(ctx, stdout, func(ctx context.Context, c *ops.Client) (events.Decision, error) {
		return c.Offer(ctx, *job, *holder, ms(*lease), ms(*ackTimeout))
	})
}

var cancelCmd = &command{
	name:    "cancel",
	summary: "request the cancellation of a job's live lease",
	usage:   "tenure cancel --job ID [--lease-id ID --generation N] [flags]",
	help: `Requests the cancellation of job --job's live lease. The holder learns it,
stops, acknowledges the request and reports a terminal result (CANCELLED or
FAILED); if it does not within the policy's cancel timeout, the job becomes
UNRESOLVED until an operator settles it (tenure resolve --action settle). An
offer not yet ACKed is withdrawn at once (cancel_requested/offer_withdrawn).
With --lease-id and --generation the request applies only if that lease is
still the live one (else stale/stale_generation).

` + opsVerdictHelp,
	run: runCancel,
}

func runCancel(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var o opsCommand
	o.register(fs)
	job := fs.String("job", "", "job whose live lease to cancel (required)")
	leaseID := fs.String("lease-id", "", "only if this is still the live lease (with --generation)")
	gen := fs.Uint64("generation", 0, "only if this is still the live generation (with --lease-id)")
	reason := fs.String("reason", "", "why, recorded with the request")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := needToken("job", *job); err != nil {
		return err
	}
	if (*leaseID == "") != (*gen == 0) {
		return fmt.Errorf("%w: --lease-id and --generation go together", errUsage)
	}
	return o.run(ctx, stdout, func(ctx context.Context, c *ops.Client) (events.Decision, error) {
		return c.Cancel(ctx, *job, *leaseID, *gen, *reason)
	})
}

var resolveCmd = &command{
	name:    "resolve",
	summary: "settle an ownership conflict, an UNRESOLVED job or a DEAD queue job",
	usage: `tenure resolve --job ID --action affirm|revoke|settle|retry|discard [flags]
       tenure resolve --queue Q --all-dead --action retry|discard [--last-reason R] [--dry-run] [flags]`,
	help: `Gives an operator's answer where the coordinator may not decide alone:
  affirm   an ownership conflict, in favour of the live lease named by
           --holder, --lease-id and --generation: it keeps the job
  revoke   ends the job's live lease (if any) and clears its conflict
  settle   gives an UNRESOLVED job (its holder never reconciled a cancel) its
           terminal outcome, --outcome FAILED or CANCELLED
  retry    queues a DEAD queue job (its attempt budget spent) again, ready at
           once, with a fresh budget
  discard  removes a DEAD queue job: its id is free again
An action with nothing to act on is refused (rejected/nothing_to_resolve).

With --queue Q --all-dead instead of --job, retry or discard every DEAD job
of queue Q (only those whose last attempt ended for --last-reason R, say
lease_expired or attempt_failed, when given): the jobs the state API lists
DEAD now, each its own resolve input and verdict, 16 at a time. It prints
each job that was not resolved and a count of those that were; --dry-run
lists the jobs and sends nothing. A job no longer DEAD when its input is
judged (someone retried it meanwhile) is rejected/nothing_to_resolve and
left as it is, so running it twice does no harm; jobs that go DEAD after
the listing wait for the next run. It refuses to start while the state
API's read model is still catching up (its list would be partial).

` + opsVerdictHelp,
	run: runResolve,
}

func runResolve(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var o opsCommand
	o.register(fs)
	job := fs.String("job", "", "job to resolve (required)")
	action := fs.String("action", "", "affirm (keep the named live lease), revoke (end it), settle (give an UNRESOLVED job its outcome), retry or discard (a DEAD queue job)")
	holder := fs.String("holder", "", "affirm: the holder that keeps the lease")
	leaseID := fs.String("lease-id", "", "affirm: its lease id")
	gen := fs.Uint64("generation", 0, "affirm: its generation")
	outcome := fs.String("outcome", "", "settle: FAILED or CANCELLED")
	reason := fs.String("reason", "", "why, recorded with the decision")
	queue := fs.String("queue", "", "with --all-dead: the queue whose DEAD jobs to retry or discard")
	allDead := fs.Bool("all-dead", false, "retry or discard every DEAD job of --queue (instead of --job)")
	lastReason := fs.String("last-reason", "", "with --all-dead: only the jobs whose last attempt ended for this `REASON`")
	dryRun := fs.Bool("dry-run", false, "with --all-dead: list the jobs, send nothing")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *allDead || *queue != "" || *lastReason != "" || *dryRun {
		return runResolveDead(ctx, &o, *job, *queue, *action, *lastReason, *reason, *allDead, *dryRun, stdout)
	}
	if err := needToken("job", *job); err != nil {
		return err
	}
	var call func(context.Context, *ops.Client) (events.Decision, error)
	switch *action {
	case "affirm":
		if err := errors.Join(needToken("holder", *holder), needToken("lease-id", *leaseID)); err != nil || *gen == 0 {
			return fmt.Errorf("%w: affirm needs --holder, --lease-id and --generation", errUsage)
		}
		call = func(ctx context.Context, c *ops.Client) (events.Decision, error) {
			return c.Affirm(ctx, *job, *holder, *leaseID, *gen, *reason)
		}
	case "revoke":
		call = func(ctx context.Context, c *ops.Client) (events.Decision, error) { return c.Revoke(ctx, *job, *reason) }
	case "settle":
		out, ok := events.ParseOutcome(*outcome)
		if !ok || out == events.OutcomeSuccess {
			return fmt.Errorf("%w: settle needs --outcome FAILED or CANCELLED", errUsage)
		}
		call = func(ctx context.Context, c *ops.Client) (events.Decision, error) {
			return c.Settle(ctx, *job, out, *reason)
		}
	case "retry":
		call = func(ctx context.Context, c *ops.Client) (events.Decision, error) { return c.Retry(ctx, *job, *reason) }
	case "discard":
		call = func(ctx context.Context, c *ops.Client) (events.Decision, error) {
			return c.Discard(ctx, *job, *reason)
		}
	default:
		return fmt.Errorf("%w: --action must be affirm, revoke, settle, retry or discard", errUsage)
	}
	return o.run(ctx, stdout, call)
}

// policyField is one field of a policy as `tenure policy` names it: its
// flag, its wire field and where it lives in an events.Policy.
type policyField struct {
	flag, wire, help string
	dur              func(p *events.Policy) *int64 // a duration (ns), or
	count            func(p *events.Policy) *uint64
}

var policyFields = []policyField{
	{flag: "min-lease", wire: "min_lease_ms", help: "shortest lease an offer, acquire or renew may ask for", dur: func(p *events.Policy) *int64 { return &p.MinLease }},
	{flag: "max-lease", wire: "max_lease_ms", help: "longest lease", dur: func(p *events.Policy) *int64 { return &p.MaxLease }},
	{flag: "default-lease", wire: "default_lease_ms", help: "lease duration when an offer or acquire names none", dur: func(p *events.Policy) *int64 { return &p.DefaultLease }},
	{flag: "ack-timeout", wire: "ack_timeout_ms", help: "default time an offered holder has to ACK", dur: func(p *events.Policy) *int64 { return &p.AckTimeout }},
	{flag: "cancel-timeout", wire: "cancel_timeout_ms", help: "time from a cancel request to terminal reconciliation", dur: func(p *events.Policy) *int64 { return &p.CancelTimeout }},
	{flag: "max-lifetime", wire: "max_lifetime_ms", help: "a lease never extends past issued_at + this", dur: func(p *events.Policy) *int64 { return &p.MaxLifetime }},
	{flag: "max-generations", wire: "max_generations", help: "leases a job may ever be given", count: func(p *events.Policy) *uint64 { return &p.MaxGenerations }},
	{flag: "retain", wire: "retain_ms", help: "how long a job is kept once its last lease ended (awaiting no operator) before it is retired and its id is free again; 0 keeps every job for ever (rules revision 3)", dur: func(p *events.Policy) *int64 { return &p.Retain }},
}

// runPolicy is `tenure policy [flags]`, which changes the fields given and
// keeps the others as they are in force, and `tenure policy show`.
var policyCmd = &command{
	name:    "policy",
	summary: "show or change the lease policy (limits and defaults)",
	usage: `tenure policy [flags]       change the fields given, keep the others
       tenure policy show [flags]  print the policy in force`,
	help: `A policy input sets every limit at once (PROTOCOL.md §6.1): tenure policy
reads the policy in force (the last policy_set decision of each partition)
and sends it with the fields given changed. Two operators changing the
policy at the same moment: the one stored last wins, with the fields it did
not give as they were when it read them.`,
	run: runPolicy,
}

func runPolicy(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	show := len(args) > 0 && args[0] == "show" // or after the flags
	if show {
		args = args[1:]
	}
	var o opsCommand
	o.register(fs)
	durs := make(map[string]*time.Duration)
	counts := make(map[string]*uint64)
	for _, f := range policyFields {
		if f.dur != nil {
			durs[f.flag] = fs.Duration(f.flag, 0, f.help+" (default: unchanged)")
		} else {
			counts[f.flag] = fs.Uint64(f.flag, 0, f.help+" (default: unchanged)")
		}
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if rest := fs.Args(); !show && len(rest) == 1 && rest[0] == "show" {
		show = true
	} else if len(rest) > 0 {
		return fmt.Errorf("%w: unexpected argument %q (see tenure policy --help)", errUsage, rest[0])
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	changes := 0
	for _, f := range policyFields {
		if !given[f.flag] {
			continue
		}
		if show {
			return fmt.Errorf("%w: tenure policy show changes nothing: --%s is for tenure policy", errUsage, f.flag)
		}
		changes++
		if d, ok := durs[f.flag]; ok && *d%time.Millisecond != 0 {
			return fmt.Errorf("%w: --%s is whole milliseconds", errUsage, f.flag)
		}
	}
	if show {
		return o.showPolicy(ctx, stdout)
	}
	if changes == 0 {
		return fmt.Errorf("%w: give the fields to change, e.g. --max-lease 20m (see tenure policy --help), or tenure policy show", errUsage)
	}
	if r := *durs["retain"]; given["retain"] && (r < 0 || r > events.MaxRetainMS*time.Millisecond) {
		return fmt.Errorf("%w: --retain must be 0 to %v", errUsage, events.MaxRetainMS*time.Millisecond)
	}
	merge := func(p events.Policy) events.Policy {
		for _, f := range policyFields {
			switch {
			case !given[f.flag]:
			case f.dur != nil:
				*f.dur(&p) = int64(*durs[f.flag])
			default:
				*f.count(&p) = *counts[f.flag]
			}
		}
		return p
	}
	return o.runAll(ctx, stdout, func(ctx context.Context, c *ops.Client) ([]events.Decision, error) {
		inForce, err := c.Policies(ctx)
		if err != nil {
			return nil, err
		}
		p := merge(inForce[0].Policy)
		for k, pf := range inForce {
			if merge(pf.Policy) != p {
				return nil, fmt.Errorf("partitions 0 and %d have different policies (tenure policy show): give every field that differs, so that one policy results", k)
			}
		}
		return c.SetPolicyAll(ctx, p) // to every partition of a partitioned deployment
	})
}

// showPolicy prints the policy in force, each field with its value and
// unit (per partition in a partitioned deployment); --json prints each as
// its wire object, one line per partition.
func (o *opsCommand) showPolicy(ctx context.Context, stdout io.Writer) error {
	nc, err := o.dial()
	if err != nil {
		return err
	}
	defer nc.Close()
	c, err := ops.New(nc, o.as, ops.WithPrefix(o.prefix))
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	defer c.Close()
	inForce, err := c.Policies(ctx)
	if err != nil {
		return err
	}
	for k, pf := range inForce {
		if o.asJSON {
			fmt.Fprintf(stdout, "%s\n", events.AppendPolicy(nil, &pf.Policy))
			continue
		}
		if k > 0 {
			fmt.Fprintln(stdout)
		}
		where := ""
		if len(inForce) > 1 {
			where = fmt.Sprintf("partition %d: ", k)
		}
		if pf.Decision == 0 {
			fmt.Fprintf(stdout, "%sthe protocol's defaults (no policy_set decision yet)\n", where)
		} else {
			fmt.Fprintf(stdout, "%sset by input %d at %s (decision %d)\n", where, pf.Cause, events.FormatTime(pf.At), pf.Decision)
		}
		fmt.Fprintf(stdout, "  %-16s %-14s %s\n", "FIELD", "VALUE", "ON THE WIRE")
		for _, f := range policyFields {
			if f.count != nil {
				n := *f.count(&pf.Policy)
				fmt.Fprintf(stdout, "  %-16s %-14s %s=%d\n", f.flag, fmt.Sprintf("%d leases", n), f.wire, n)
				continue
			}
			d := time.Duration(*f.dur(&pf.Policy))
			v := d.String()
			if f.flag == "retain" && d == 0 {
				v = "0 (for ever)"
			}
			fmt.Fprintf(stdout, "  %-16s %-14s %s=%d\n", f.flag, v, f.wire, d.Milliseconds())
		}
	}
	return nil
}

// limitCmd is `tenure limit`: a queue's limit of a concurrency key, or
// its rate limit (rules revision 9).
var limitCmd = &command{
	name:    "limit",
	summary: "set or lift a queue's concurrency limit of a key, or a rate limit (operator)",
	usage: `tenure limit --queue Q [--concurrency-key K] [--max-active N] [--rate R --period D] [flags]
       tenure limit --queue Q [--concurrency-key K] --lift [flags]`,
	help: `Sets the limit of concurrency key --concurrency-key of queue --queue (or,
without a key, of the queue itself) to what the flags name, lifting what
they do not (PROTOCOL.md §26.4, §26.5, rules revision 9): --max-active N
(0 to 1000000; a key's only; 0 holds every job of the key back), at most N
of the queue's jobs naming the key live (offered or active) at once;
--rate R --period D (1 to 1000000 per 1ms to 30 days), at most R offers
per D, a token bucket of R tokens. --lift lifts the limit. Lowering a
limit ends no lease: jobs already running go on. The verdict is
limit_set/ok; more than 1024 limits in force is rejected/limits_full. In
a partitioned deployment the limit goes to every partition, each applying
it to its own jobs. tenure queues --queue Q lists the limits in force on
Q, each key's beside its live leases now.

` + opsVerdictHelp,
	run: runLimit,
}

func runLimit(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var o opsCommand
	o.register(fs)
	queue := fs.String("queue", "", "the queue (required)")
	key := fs.String("concurrency-key", "", "the concurrency `KEY` (absent: the queue's own limit, a rate only)")
	maxActive := fs.Int64("max-active", 0, "at most this many jobs of the key live at once, 0 to 1000000")
	rate := fs.Int64("rate", 0, "at most this many offers per --period, 1 to 1000000")
	period := fs.Duration("period", 0, "the period of --rate, 1ms to 30 days, whole milliseconds")
	lift := fs.Bool("lift", false, "lift the limit")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if rest := fs.Args(); len(rest) > 0 {
		return fmt.Errorf("%w: unexpected argument %q (see tenure limit --help)", errUsage, rest[0])
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if err := needToken("queue", *queue); err != nil {
		return err
	}
	l := events.Limit{Queue: *queue, ConcurrencyKey: *key}
	switch {
	case given["concurrency-key"] && !events.ValidToken(*key):
		return needToken("concurrency-key", *key)
	case *lift && (given["max-active"] || given["rate"] || given["period"]):
		return fmt.Errorf("%w: --lift lifts the whole limit: no --max-active, --rate or --period with it", errUsage)
	case !*lift && !given["max-active"] && !given["rate"]:
		return fmt.Errorf("%w: give --max-active, --rate with --period, or --lift (see tenure limit --help)", errUsage)
	case given["max-active"] && *key == "":
		return fmt.Errorf("%w: --max-active limits a concurrency key: give --concurrency-key", errUsage)
	case given["max-active"] && (*maxActive < 0 || *maxActive > events.MaxActive):
		return fmt.Errorf("%w: --max-active must be 0 to %d", errUsage, events.MaxActive)
	case given["rate"] != given["period"]:
		return fmt.Errorf("%w: --rate and --period go together", errUsage)
	case given["rate"] && (*rate < 1 || *rate > events.MaxRate):
		return fmt.Errorf("%w: --rate must be 1 to %d", errUsage, events.MaxRate)
	case given["period"] && (*period%time.Millisecond != 0 || *period < time.Millisecond || *period > events.MaxDurationMS*time.Millisecond):
		return fmt.Errorf("%w: --period must be whole milliseconds, 1ms to %v", errUsage, events.MaxDurationMS*time.Millisecond)
	}
	if given["max-active"] {
		l.MaxActive, l.HasMaxActive = uint64(*maxActive), true
	}
	if given["rate"] {
		l.Rate, l.PeriodMS = uint64(*rate), period.Milliseconds()
	}
	return o.runAll(ctx, stdout, func(ctx context.Context, c *ops.Client) ([]events.Decision, error) {
		return c.SetLimitAll(ctx, l) // to every partition of a partitioned deployment
	})
}
