package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/auth"
	tclock "github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/streams"
)

var genesisCmd = &command{
	name:    "genesis",
	summary: "end a brand-new deployment's genesis as its administrator (once, with tenure auth init's admin credential)",
	usage:   "tenure genesis --creds-json DIR/admin.creds.json [flags]",
	help: `A brand-new deployment's input stream takes only the coordinators' rules and
policy inputs until they are stored (PROTOCOL.md §1.1, genesis); then it is
widened to every input. Under tenure auth init's permissions no coordinator
may update a stream (an update could also trim its log), so the
administrator does it, once: tenure genesis waits for the deployment's
streams and for the coordinator's rules and policy (start tenure serve
before or after it), widens the input stream of every partition, and exits.
The coordinator, which says in its status and log that it waits for this
command, notices the widening and goes live. On a deployment past genesis it
does nothing. Later starts of the coordinator need nothing of it.`,
	run: runGenesis,
}

// loadQuotas reads the quotas file flag names: "none" for none, "" for
// the one beside the credential file if there is one.
func loadQuotas(flagValue, credential string) (*streams.Quotas, string, error) {
	path := flagValue
	switch {
	case flagValue == "none":
		return nil, "", nil
	case flagValue == "" && credential == "":
		return nil, "", nil
	case flagValue == "":
		path = filepath.Join(filepath.Dir(credential), auth.QuotasFile)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, "", nil
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("genesis: --quotas: %w", err)
	}
	var q streams.Quotas
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		return nil, "", fmt.Errorf("genesis: --quotas %s: %w", path, err)
	}
	if err := q.Validate(); err != nil {
		return nil, "", fmt.Errorf("genesis: --quotas %s: %w", path, err)
	}
	return &q, path, nil
}

// genesisPoll is how often tenure genesis reads the streams while it waits.
const genesisPoll = 100 * time.Millisecond

func runGenesis(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var conn connFlags
	conn.register(fs, "NATS server of the deployment (default nats://127.0.0.1:4222, the local embedded one)")
	prefix := fs.String("prefix", streams.DefaultPrefix, "stream name prefix of the topology")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long (0: wait until interrupted)")
	quotasFlag := fs.String("quotas", "", "the workers' quotas to apply (tenure auth init's "+auth.QuotasFile+"; default: the one beside --creds-json, if any; none: no quotas)")
	if err := parse(fs, args); err != nil {
		return err
	}
	quotas, quotasPath, err := loadQuotas(*quotasFlag, conn.credPath)
	if err != nil {
		return err
	}
	if !validPrefix(*prefix) {
		return fmt.Errorf("%w: invalid --prefix %q: want 1 to 64 of [A-Za-z0-9_-]", errUsage, *prefix)
	}
	if *timeout < 0 {
		return fmt.Errorf("%w: --timeout must not be negative", errUsage)
	}
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	defaultURL(&conn)
	nc, err := conn.connect("tenure-genesis")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	top := streams.Topology{Prefix: *prefix}
	fmt.Fprintf(stdout, "waiting for the deployment's streams and its coordinator's rules and policy (%s)...\n", conn.url)
	// The deployment may not exist yet (its coordinator not started): wait
	// for its decision stream, unpartitioned or partition 0's (listed by
	// name: a credential of one form may not look up the other), then for
	// each partition's rules.
	p0 := top.Partitions(1)[0].DecisionStream()
	clk := tclock.OrReal(nil)
	var unpartitioned bool
	for found := false; !found; {
		// One attempt at a time: a request a cluster drops is tried again.
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		names := js.StreamNames(actx)
		for n := range names.Name() {
			unpartitioned = unpartitioned || n == top.DecisionStream()
			found = found || n == top.DecisionStream() || n == p0
		}
		acancel()
		if found {
			break
		}
		t := clk.NewTimer(genesisPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("genesis: no deployment with stream prefix %s found: %w", *prefix, ctx.Err())
		case <-t.C():
		}
	}
	// Listed by name, an unpartitioned deployment needs no more: its
	// stream's info may not answer yet (a cluster that just created it
	// answered "not found", and a credential of one form may not ask for
	// the other's).
	var count uint32
	if !unpartitioned {
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		count, err = streams.Discover(dctx, js, top)
		dcancel()
		if err != nil {
			return err
		}
	}
	if quotas != nil {
		if count > 0 {
			return fmt.Errorf("genesis: %s: quotas are for unpartitioned deployments, this one has %d partitions", quotasPath, count)
		}
		widened, err := coordinator.EndGenesisQuotas(ctx, js, top, quotas, clk, genesisPoll)
		switch {
		case errors.Is(err, streams.ErrQuotasReplicated):
			// A cluster: genesis ends without quotas (the error says why).
			fmt.Fprintf(stdout, "%s: the quotas of %s are not applied: %v\n", top.InputStream(), quotasPath, err)
		case err != nil:
			return fmt.Errorf("genesis of %s with the quotas of %s: %w", top.InputStream(), quotasPath, err)
		case widened:
			fmt.Fprintf(stdout, "%s: genesis ended, open to %v and to the intake streams of %d workers (quotas of %s)\n", top.InputStream(), top.IntakeSubjects(), len(quotas.Workers), quotasPath)
			return nil
		default:
			fmt.Fprintf(stdout, "%s: past its genesis; the intake streams of %d workers are in place (quotas of %s)\n", top.InputStream(), len(quotas.Workers), quotasPath)
			return nil
		}
	}
	for _, pt := range top.Partitions(count) {
		widened, err := coordinator.EndGenesis(ctx, js, pt, clk, genesisPoll)
		if err != nil {
			return fmt.Errorf("genesis of %s: %w", pt.InputStream(), err)
		}
		if widened {
			fmt.Fprintf(stdout, "%s: genesis ended, open to %s\n", pt.InputStream(), pt.InputConfig().Subjects[0])
		} else {
			fmt.Fprintf(stdout, "%s: past its genesis already, nothing to do\n", pt.InputStream())
		}
	}
	return nil
}
