package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"time"

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
	fs.StringVar(&o.as, "as", "cli", "ops identity (actor token) to publish as")
	fs.BoolVar(&o.asJSON, "json", false, "print the verdict decision as JSON")
	fs.StringVar(&o.receipts, "receipts", "", "append receipts of the input and its verdict to `FILE`, for tenure audit --receipts")
	fs.StringVar(&o.prefix, "prefix", streams.DefaultPrefix, "stream name prefix of the topology")
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
	defaultURL(&o.conn)
	nc, err := o.conn.connect("tenure-ops-" + o.as)
	if err != nil {
		return err
	}
	defer nc.Close()
	if !validPrefix(o.prefix) {
		return fmt.Errorf("%w: invalid --prefix %q: want 1 to 64 of [A-Za-z0-9_-]", errUsage, o.prefix)
	}
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
	}
	return err
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func needToken(name, v string) error {
	if !events.ValidToken(v) {
		return fmt.Errorf("%w: --%s must be 1 to 64 of [A-Za-z0-9_-], got %q", errUsage, name, v)
	}
	return nil
}

func runOffer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("offer", stderr)
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

func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("cancel", stderr)
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

func runResolve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("resolve", stderr)
	var o opsCommand
	o.register(fs)
	job := fs.String("job", "", "job to resolve (required)")
	action := fs.String("action", "", "affirm (keep the named live lease), revoke (end it), or settle (give an UNRESOLVED job its outcome)")
	holder := fs.String("holder", "", "affirm: the holder that keeps the lease")
	leaseID := fs.String("lease-id", "", "affirm: its lease id")
	gen := fs.Uint64("generation", 0, "affirm: its generation")
	outcome := fs.String("outcome", "", "settle: FAILED or CANCELLED")
	reason := fs.String("reason", "", "why, recorded with the decision")
	if err := parse(fs, args); err != nil {
		return err
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
	default:
		return fmt.Errorf("%w: --action must be affirm, revoke or settle", errUsage)
	}
	return o.run(ctx, stdout, call)
}

func runPolicy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("policy", stderr)
	var o opsCommand
	o.register(fs)
	def := events.DefaultPolicy()
	d := func(ns int64) time.Duration { return time.Duration(ns) }
	minLease := fs.Duration("min-lease", d(def.MinLease), "shortest lease an offer, acquire or renew may ask for")
	maxLease := fs.Duration("max-lease", d(def.MaxLease), "longest lease")
	defLease := fs.Duration("default-lease", d(def.DefaultLease), "lease duration when an offer or acquire names none")
	ackTimeout := fs.Duration("ack-timeout", d(def.AckTimeout), "default time an offered holder has to ACK")
	cancelTimeout := fs.Duration("cancel-timeout", d(def.CancelTimeout), "time from a cancel request to terminal reconciliation")
	maxLifetime := fs.Duration("max-lifetime", d(def.MaxLifetime), "a lease never extends past issued_at + this")
	maxGens := fs.Uint64("max-generations", def.MaxGenerations, "leases a job may ever be given")
	retain := fs.Duration("retain", 0, "how long a job is kept once its last lease ended (awaiting no operator) before it is retired and its id is free again; 0 keeps every job for ever (rules revision 3)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *retain < 0 || *retain > events.MaxRetainMS*time.Millisecond {
		return fmt.Errorf("%w: --retain must be 0 to %v", errUsage, events.MaxRetainMS*time.Millisecond)
	}
	if *retain%time.Millisecond != 0 {
		return fmt.Errorf("%w: --retain is whole milliseconds", errUsage)
	}
	p := events.Policy{
		MinLease: int64(*minLease), MaxLease: int64(*maxLease), DefaultLease: int64(*defLease),
		AckTimeout: int64(*ackTimeout), CancelTimeout: int64(*cancelTimeout), MaxLifetime: int64(*maxLifetime),
		MaxGenerations: *maxGens, Retain: int64(*retain),
	}
	return o.runAll(ctx, stdout, func(ctx context.Context, c *ops.Client) ([]events.Decision, error) {
		return c.SetPolicyAll(ctx, p) // to every partition of a partitioned deployment
	})
}
