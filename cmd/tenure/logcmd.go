package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/archive"
	"github.com/maknow/tenure/streams"
)

// logSafety ends the help of tenure log and of its subcommands.
const logSafety = `Each can be run again, or after being killed, safely: archive and remove
complete or change nothing. A partitioned deployment is handled partition
by partition; the archive holds a directory per input stream.`

var logCmd = &command{
	name:    "log",
	summary: "retention of the log: seal, archive and verify segments, then remove them (status, archive, remove, restore)",
	usage:   "tenure log <status|archive|remove|restore> [flags]",
	help: `Retention of the log (README.md "Retention of the log"): the input and
decision streams stay bounded by moving sealed segments out of them into an
archive directory, never by giving anyone a right to rewrite them.

` + logSafety,
	subs: logSubs,
	run:  runLog,
}

// logSubs are the subcommands of tenure log.
var logSubs = []*command{
	logSub("status", "the streams, the snapshot, the archive and what remove would trim",
		`Prints the streams' first and last sequences, the stored snapshot, the
archive's segments (with --archive) and what tenure log remove would trim.
Changes nothing.`),
	logSub("archive", "seal the next segment and export it to the archive, verified",
		`Seals the next segment, at the stored snapshot (checked against its
anchor): exports it to --archive DIR with its hashes, reads it back and
compares it with the streams. Nothing is written to the log.`),
	logSub("remove", "trim the streams up to the end of the archive's last segment",
		`Trims the streams up to the end of the archive's last segment (--through N:
segment N), after checking again that nothing can be lost: the streams were
created with tenure serve --log-retention, every segment still has the files
it was sealed with (their hashes) and the streams still hold its last input
and decision as archived, and the stored snapshot covers it.`),
	logSub("restore", "put the archive's last snapshot back as the coordinator's",
		`Puts the archive's last snapshot back as the coordinator's when the stored
one is lost (a coordinator on a trimmed log without one stands by until
then).`),
}

// logSub is the command tenure log <sub>.
func logSub(sub, summary, help string) *command {
	return &command{name: "log " + sub, summary: summary, usage: "tenure log " + sub + " [flags]",
		help: help + "\n\n" + logSafety, run: runLogSub}
}

// runLog dispatches tenure log <sub>; fs, which has no flags, prints log's
// help (on stdout, as it always has).
func runLog(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	return dispatchSub(ctx, fs, "log", "status, archive, remove or restore", logSubs, args, stdout, stderr)
}

// dispatchSub runs the subcommand of `tenure <group>` that args name among
// subs (each named "<group> <sub>"); with no subcommand, or an unknown one,
// a usage error listing them (choices); --help prints fs's usage, group's
// help, on stdout.
func dispatchSub(ctx context.Context, fs *flag.FlagSet, group, choices string, subs []*command, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: a subcommand: %s (see tenure %s --help)", errUsage, choices, group)
	}
	if isHelp(args[0]) {
		fs.SetOutput(stdout)
		fs.Usage()
		return nil
	}
	for _, c := range subs {
		if c.name == group+" "+args[0] {
			return c.exec(ctx, args[1:], stdout, stderr)
		}
	}
	return fmt.Errorf("%w: unknown subcommand %q: %s (see tenure %s --help)", errUsage, args[0], choices, group)
}

// runLogSub is tenure log <sub>: fs is named "tenure log <sub>".
func runLogSub(ctx context.Context, fs *flag.FlagSet, args []string, stdout, _ io.Writer) error {
	sub := strings.TrimPrefix(fs.Name(), "tenure log ")
	var conn connFlags
	conn.register(fs, "NATS server or cluster of the deployment")
	prefix := fs.String("prefix", streams.DefaultPrefix, "stream and bucket name prefix of the topology")
	dir := fs.String("archive", "", "archive `DIR` (status: optional)")
	through := fs.Uint64("through", 0, "remove: trim up to the end of segment `N` (0: the last)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dir == "" && sub != "status" {
		return fmt.Errorf("%w: tenure log %s needs --archive DIR", errUsage, sub)
	}
	if *through != 0 && sub != "remove" {
		return fmt.Errorf("%w: --through is for tenure log remove", errUsage)
	}
	if !validPrefix(*prefix) {
		return fmt.Errorf("%w: invalid --prefix %q: want 1 to 64 of [A-Za-z0-9_-]", errUsage, *prefix)
	}
	nc, err := conn.connect("tenure-log")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	top := streams.Topology{Prefix: *prefix}
	count, err := streams.Discover(ctx, js, top)
	if err != nil {
		return fmt.Errorf("log: %w", err)
	}
	var errs []error
	for _, t := range top.Partitions(count) {
		head := ""
		if count > 0 {
			head = "partition " + t.Partition.Token() + ": "
		}
		cfg := archive.Config{JS: js, Topology: t, Root: *dir}
		if err := runLogStep(ctx, sub, cfg, *through, head, stdout); err != nil {
			errs = append(errs, fmt.Errorf("%s%w", head, err))
		}
	}
	return errors.Join(errs...)
}

func runLogStep(ctx context.Context, sub string, cfg archive.Config, through uint64, head string, out io.Writer) error {
	switch sub {
	case "archive":
		res, err := archive.Archive(ctx, cfg)
		if err != nil {
			return err
		}
		if res.Segment == nil {
			fmt.Fprintf(out, "%sup to date: %d segments; no stored snapshot after the last one's end\n", head, len(res.Segments))
			return nil
		}
		m := res.Segment.Manifest
		fmt.Fprintf(out, "%ssealed segment %d: inputs %d..%d, decisions %d..%d, snapshot at input %d (%d bytes), verified by read-back: %s\n",
			head, m.Segment, m.Inputs.First, m.Inputs.Last, m.Decisions.First, m.Decisions.Last, m.Snapshot.InputSeq, m.Snapshot.Bytes, res.Segment.Dir)
	case "remove":
		rm, err := archive.Remove(ctx, cfg, through)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%sremoved through segment %d: %d inputs, %d decisions; the streams now start at input %d, decision %d\n",
			head, rm.Through, rm.Inputs, rm.Decisions, rm.FirstInput, rm.FirstDecision)
	case "restore":
		r, err := archive.Restore(ctx, cfg)
		if err != nil {
			return err
		}
		if r.Segment == 0 {
			fmt.Fprintf(out, "%sthe stored snapshot checks out and is at input %d, not before the archive's last: nothing restored\n", head, r.InputSeq)
			return nil
		}
		fmt.Fprintf(out, "%srestored segment %d's snapshot (input %d) as the coordinator's\n", head, r.Segment, r.InputSeq)
	case "status":
		return logStatus(ctx, cfg, head, out)
	}
	return nil
}

func logStatus(ctx context.Context, cfg archive.Config, head string, out io.Writer) error {
	h, err := streams.Open(ctx, cfg.JS, cfg.Topology)
	if err != nil {
		return err
	}
	retained := true
	for _, st := range []jetstream.Stream{h.In, h.Out} {
		info, err := st.Info(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", st.CachedInfo().Config.Name, streams.Classify(err))
		}
		mode := "whole log kept (created without --log-retention: it denies purges)"
		if streams.Retained(info.Config) {
			mode = "log retention"
		} else {
			retained = false
		}
		fmt.Fprintf(out, "%s%-12s %s to %s, %s messages, %s bytes; %s\n", head, info.Config.Name,
			strconv.FormatUint(info.State.FirstSeq, 10), strconv.FormatUint(info.State.LastSeq, 10),
			strconv.FormatUint(info.State.Msgs, 10), strconv.FormatUint(info.State.Bytes, 10), mode)
	}
	oi, err := h.Snapshots.GetInfo(ctx, streams.SnapshotObject)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		fmt.Fprintf(out, "%ssnapshot     none stored\n", head)
	case err != nil:
		return fmt.Errorf("snapshot: %w", streams.Classify(err))
	default:
		a, perr := streams.ParseSnapshotHeaders(oi.Headers)
		note := ""
		if perr != nil {
			note = " (" + perr.Error() + ")"
		}
		fmt.Fprintf(out, "%ssnapshot     at input %d, decision %d, anchored at decision %d, %d bytes%s\n", head, a.InputSeq, a.DecisionSeq, a.AnchorSeq, oi.Size, note)
	}
	if cfg.Root == "" {
		return nil
	}
	segs, err := archive.Segments(cfg.Root, cfg.Topology)
	if err != nil {
		return err
	}
	if len(segs) == 0 {
		fmt.Fprintf(out, "%sarchive      no segments in %s\n", head, archive.StreamDir(cfg.Root, cfg.Topology))
		return nil
	}
	m := segs[len(segs)-1].Manifest
	fmt.Fprintf(out, "%sarchive      %d segments in %s, through input %d, decision %d\n", head, len(segs), archive.StreamDir(cfg.Root, cfg.Topology), m.Inputs.Last, m.Decisions.Last)
	ii, err := h.In.Info(ctx)
	if err != nil {
		return streams.Classify(err)
	}
	switch {
	case ii.State.FirstSeq >= m.Inputs.Last:
	case !retained:
		fmt.Fprintf(out, "%sremovable    nothing: the streams deny purges (created without --log-retention), so they keep the whole log; the archive is a copy of it\n", head)
	default:
		fmt.Fprintf(out, "%sremovable    inputs %d..%d and the decisions before %d (tenure log remove)\n", head, ii.State.FirstSeq, m.Inputs.Last-1, m.Decisions.Last)
	}
	return nil
}
