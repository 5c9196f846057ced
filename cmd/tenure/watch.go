package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/api"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/receipt"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/ui"
)

func defaultURL(c *connFlags) {
	switch {
	case c.url != "":
	case c.cred != nil:
		c.url = c.cred.URL
	default:
		c.url = "nats://127.0.0.1:4222"
	}
}

var watchCmd = &command{
	name:    "watch",
	summary: "print decisions live, filtered by job, holder and kind",
	usage:   "tenure watch [flags]",
	help: `Prints the coordinator's decisions as they are appended (from the first one
with --all), one line each, or as JSON lines (the decision bodies as
stored), until interrupted or -n decisions. --job, --holder and --kind keep
only the decisions about that job, addressed to or held by that actor, or of
that kind. A partitioned deployment is followed in every partition (only the
job's with --job), the table with a PART column. Read-only.

A completed decision says that a result was recorded, whatever its outcome
(the projection's result says which): its DETAIL column shows a FAILED or
CANCELLED result's outcome and the worker's own detail (why it failed),
which only the result input holds. watch asks the state API of a running
tenure serve for it (tenure.api.job.result), or reads the input itself
where no API answers; a JSON line then ends with "result_detail" (the
stored decision has no such field: drop it to compare bytes).`,
	run: runWatch,
}

// runWatch prints decisions as they are appended, filtered by job, holder
// and kind, as a table or as JSON lines (the decision bodies themselves).
// On a partitioned deployment it follows every partition's decision stream
// (only the job's with --job) and prints their decisions as they arrive,
// the table with a PART column.
func runWatch(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var conn connFlags
	conn.register(fs, "NATS server (default nats://127.0.0.1:4222, the local embedded one)")
	job := fs.String("job", "", "only decisions about this job")
	holder := fs.String("holder", "", "only decisions addressed to or held by this actor")
	kind := fs.String("kind", "", "only decisions of this kind (e.g. expired, stale, conflict)")
	format := fs.String("format", "table", "table or json (one decision per line, as stored)")
	all := fs.Bool("all", false, "start from the first decision instead of new ones")
	limit := fs.Int("n", 0, "stop after this many decisions (0: until interrupted)")
	receipts := fs.String("receipts", "", "append a receipt (stream, sequence, chain value) of every decision printed to `FILE`, for tenure audit --receipts")
	if err := parse(fs, args); err != nil {
		return err
	}
	var keep receipt.Sink
	if *receipts != "" {
		f, err := receipt.OpenFile(*receipts)
		if err != nil {
			return err
		}
		defer f.Close()
		keep = f
	}
	if *format != "table" && *format != "json" {
		return fmt.Errorf("%w: --format must be table or json", errUsage)
	}
	for _, tok := range []string{*job, *holder} {
		if tok != "" && !events.ValidToken(tok) {
			return fmt.Errorf("%w: %q is not a valid id", errUsage, tok)
		}
	}
	if *kind != "" {
		if _, ok := events.ParseKind(*kind); !ok {
			return fmt.Errorf("%w: unknown kind %q", errUsage, *kind)
		}
	}
	defaultURL(&conn)
	nc, err := conn.connect("tenure-watch")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	count, err := streams.Discover(ctx, js, streams.Topology{})
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	topos := streams.Topology{}.Partitions(count)
	if count > 0 && *job != "" {
		topos = topos[events.PartitionOf(*job, count) : events.PartitionOf(*job, count)+1]
	}
	filter := events.DecisionPrefix + ".*." + or(*job, "*") + "." + or(*kind, "*")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs := make(chan watched)
	// One follow.Follower per partition: it replaces a consumer lost with
	// a cluster node without the ~10 s stall of an ordered consumer.
	var fols []*follow.Follower
	defer func() {
		for _, f := range fols {
			f.Stop()
		}
	}()
	for _, topo := range topos {
		fcfg := follow.Config{Stream: topo.DecisionStream(), Filters: []string{filter}, StartSeq: 1}
		if topo.Partition.Partitioned() {
			fcfg.Filters[0] += "." + topo.Partition.Token()
		}
		if !*all {
			s, err := js.Stream(ctx, topo.DecisionStream())
			if err != nil {
				return fmt.Errorf("watch: %w", streams.Classify(err))
			}
			fcfg.StartSeq = s.CachedInfo().State.LastSeq + 1
		}
		part := topo.Partition
		f := follow.Start(ctx, js, fcfg, func(ctx context.Context, m follow.Msg) {
			select {
			case msgs <- watched{part: part, m: m}:
			case <-ctx.Done():
			}
		})
		fols = append(fols, f)
		select {
		case <-f.Ready():
		case <-time.After(10 * time.Second):
			err := f.Err()
			if err == nil {
				err = errors.New("timed out")
			}
			return fmt.Errorf("watch: no consumer on %s: %w", fcfg.Stream, streams.Classify(err))
		case <-ctx.Done():
			return nil
		}
	}
	results := newResultDetails(nc, js, stderr)
	// Lines are printed as they come, so no tabwriter can align them: the
	// columns are as wide as the widest value the column can hold where the
	// set is closed (kind, reason, state, times), and otherwise grow with
	// the widest value seen (never shrink).
	cols := newWatchColumns(count > 0)
	if *format == "table" {
		cols.header(stdout)
	}
	n := 0
	for {
		var w watched
		select {
		case w = <-msgs:
		case <-ctx.Done():
			return nil
		}
		m := w.m
		d, err := events.DecodeDecision(m.Data)
		if err != nil {
			fmt.Fprintln(stderr, "tenure watch: undecodable decision:", err)
			continue
		}
		if *holder != "" && d.Addressee != *holder && d.Job.Holder != *holder {
			continue
		}
		if keep != nil {
			stream := streams.Topology{Partition: w.part}.DecisionStream()
			if err := keep.Keep(receipt.Decision(stream, m.Seq, d.Cause, m.Header.Get(events.HeaderChain), "tenure watch")); err != nil {
				return fmt.Errorf("watch: %w", err)
			}
		}
		detail, hasDetail := "", false
		if d.Kind == events.KindCompleted && d.Job.Result != events.OutcomeSuccess {
			detail, hasDetail = results.get(ctx, w.part, &d)
		}
		cell := ""
		if hasDetail {
			cell = d.Job.Result.String() + " " + quoteDetail(detail, 80)
		}
		switch {
		case *format == "json" && hasDetail:
			// The decision as stored, and the worker's detail after it.
			q, _ := json.Marshal(detail)
			fmt.Fprintf(stdout, "%s,\"result_detail\":%s}\n", bytes.TrimSuffix(bytes.TrimSpace(m.Data), []byte("}")), q)
		case *format == "json":
			fmt.Fprintf(stdout, "%s\n", m.Data)
		default:
			fields := []string{time.Unix(0, d.At).UTC().Format("15:04:05.000")}
			if cols.partitioned {
				fields = append(fields, w.part.Token())
			}
			fields = append(fields, fmt.Sprintf("#%d.%d", d.Cause, d.N), d.Kind.String(), or(string(d.Reason), "-"),
				d.Job.ID, strconv.FormatUint(d.Job.Generation, 10), or(d.Job.Holder, "-"), d.Job.State.String(),
				or(clock(d.Job.ExpiresAt), "-"), d.Role.String()+"/"+d.Actor, cell)
			cols.line(stdout, fields)
		}
		n++
		if *limit > 0 && n >= *limit {
			return nil
		}
	}
}

// resultDetails reads, for tenure watch, the worker's detail of the
// results completed decisions record: from the state API
// (tenure.api.job.result, which the ops role may ask), or, when no API
// answers, from the input stream (a user allowed to read it).
type resultDetails struct {
	cl     *api.Client
	js     jetstream.JetStream
	ins    map[string]jetstream.Stream
	stderr io.Writer
	warned bool
	noAPI  bool
}

func newResultDetails(nc *nats.Conn, js jetstream.JetStream, stderr io.Writer) *resultDetails {
	return &resultDetails{cl: api.NewClient(nc, 2*time.Second), js: js, ins: make(map[string]jetstream.Stream), stderr: stderr}
}

// get returns the detail of the result input d.Cause of partition part,
// false (said once on stderr) if it cannot be read.
func (r *resultDetails) get(ctx context.Context, part events.Partition, d *events.Decision) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var err error
	if !r.noAPI {
		var rep api.ResultReply
		if rep, err = r.cl.Result(ctx, d.Job.ID, d.Cause); err == nil {
			return rep.Result.Detail, true
		}
		r.noAPI = errors.Is(err, api.ErrNoServer)
	}
	if r.noAPI {
		name := streams.Topology{Partition: part}.InputStream()
		st := r.ins[name]
		if st == nil {
			if st, err = r.js.Stream(ctx, name); err == nil {
				r.ins[name] = st
			}
		}
		if err == nil {
			var w api.WorkerResult
			if w, err = api.ReadResult(ctx, st, part, d.Job.ID, d.Cause); err == nil {
				return w.Detail, true
			}
		}
	}
	if !r.warned {
		r.warned = true
		fmt.Fprintf(r.stderr, "tenure watch: a result's detail could not be read (%v): the state API of tenure serve answers it\n", streams.Classify(err))
	}
	return "", false
}

// watchColumns lays out tenure watch's table one line at a time.
type watchColumns struct {
	partitioned bool
	names       []string
	width       []int
}

func newWatchColumns(partitioned bool) *watchColumns {
	widest := func(names []string) int {
		n := 0
		for _, s := range names {
			n = max(n, len(s))
		}
		return n
	}
	var kinds, reasons, states []string
	for _, k := range events.Kinds() {
		kinds = append(kinds, k.String())
	}
	for _, r := range events.Reasons() {
		reasons = append(reasons, string(r.Reason))
	}
	for s := events.State(0); s.String() != "?"; s++ {
		states = append(states, s.String())
	}
	c := &watchColumns{partitioned: partitioned}
	add := func(name string, width int) {
		c.names = append(c.names, name)
		c.width = append(c.width, max(len(name), width))
	}
	add("AT", len("15:04:05.000"))
	if partitioned {
		add("PART", 3)
	}
	add("INPUT", len("#1000.0"))
	add("KIND", widest(kinds))
	add("REASON", widest(reasons))
	add("JOB", 12)
	add("GEN", 3)
	add("HOLDER", 8)
	add("STATE", widest(states))
	add("EXPIRES", len("15:04:05.000"))
	add("BY", len("worker/w1"))
	add("DETAIL", 0)
	return c
}

func (c *watchColumns) header(w io.Writer) { c.line(w, c.names) }

// line writes fields, each padded to its column's width (grown to the
// field's if it is wider), one space between columns, the last unpadded.
func (c *watchColumns) line(w io.Writer, fields []string) {
	var b strings.Builder
	for i, f := range fields {
		if i == len(fields)-1 {
			b.WriteString(f)
			break
		}
		c.width[i] = max(c.width[i], utf8.RuneCountInString(f))
		b.WriteString(f)
		b.WriteString(strings.Repeat(" ", c.width[i]-utf8.RuneCountInString(f)+1))
	}
	b.WriteByte('\n')
	io.WriteString(w, b.String())
}

// watched is one decision message read from a partition's decision stream
// (the zero Partition when unpartitioned).
type watched struct {
	part events.Partition
	m    follow.Msg
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func clock(t int64) string {
	if t == 0 {
		return ""
	}
	return time.Unix(0, t).UTC().Format("15:04:05.000")
}

var statusCmd = &command{
	name:    "status",
	summary: "show every running coordinator: live or standby, lag, snapshot",
	usage:   "tenure status [flags]",
	help: `Asks every running coordinator (the "tenure" NATS micro service) for its
status and prints one line each: live or standby, the input it has folded
up to and its lag behind the input stream, its last snapshot. A process
serving a partitioned deployment answers for each partition; partitions no
live coordinator answered for are listed after the table. Answers are
collected for --wait after the first one; on a loaded machine a first
answer is awaited for up to --timeout before "no coordinator answered".`,
	run: runStatus,
}

// runStatus asks every running coordinator (the "tenure" micro service) for
// its status and prints one line each. A process serving a partitioned
// deployment has one coordinator per partition, each answering with its
// partition's statistics and lag (one line per partition, with a PARTITION
// column); the partitions that no live coordinator answered for are listed
// after the table.
func runStatus(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var conn connFlags
	conn.register(fs, "NATS server (default nats://127.0.0.1:4222, the local embedded one)")
	asJSON := fs.Bool("json", false, "print the raw status objects, one per line")
	wait := fs.Duration("wait", 500*time.Millisecond, "how long to collect answers after the first one")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for a first answer")
	if err := parse(fs, args); err != nil {
		return err
	}
	defaultURL(&conn)
	nc, err := conn.connect("tenure-status")
	if err != nil {
		return err
	}
	defer nc.Close()
	// The inbox honours --inbox-prefix.
	got, err := ui.StatusFromServiceFirst(nc, *wait, *timeout)(ctx)
	if err != nil {
		return err
	}
	if len(got) == 0 {
		return fmt.Errorf("no coordinator answered within %v (is `tenure serve` running and reachable?)", *timeout)
	}
	slices.SortFunc(got, func(a, b status) int {
		if c := strings.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return cmp.Compare(partitionIndex(a.Partition), partitionIndex(b.Partition))
	})
	partitioned := slices.ContainsFunc(got, func(s status) bool { return s.Partition != "" })
	if *asJSON {
		for _, s := range got {
			b, _ := json.Marshal(s)
			fmt.Fprintf(stdout, "%s\n", b)
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	if partitioned {
		fmt.Fprintln(tw, "COORDINATOR\tPARTITION\tSTATE\tFOLDED\tSTORED\tLAG\tLEADER\tSNAPSHOT\tLOST-AUTHORITY")
	} else {
		fmt.Fprintln(tw, "COORDINATOR\tSTATE\tFOLDED\tSTORED\tLAG\tLEADER\tSNAPSHOT\tLOST-AUTHORITY")
	}
	var reasons []string
	for _, s := range got {
		role := s.State
		switch {
		case s.Live:
			role = "live"
		case role == "":
			role = "standby" // a coordinator of an older Tenure
		}
		if s.Reason != "" {
			who := s.ID
			if s.Partition != "" {
				who += " partition " + s.Partition
			}
			reasons = append(reasons, who+" ("+role+"): "+s.Reason)
		}
		snap := "-"
		if s.SnapshotSeq > 0 {
			snap = fmt.Sprintf("#%d %s ago", s.SnapshotSeq, time.Since(s.SnapshotAt).Round(time.Second))
		}
		if partitioned {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%d\n", s.ID, or(s.Partition, "-"), role, s.InputsFolded, s.DecisionsStored, s.Lag, s.Leader, snap, s.LostAuthority)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%d\n", s.ID, role, s.InputsFolded, s.DecisionsStored, s.Lag, s.Leader, snap, s.LostAuthority)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range reasons {
		fmt.Fprintln(stdout, r)
	}
	for _, s := range got {
		// Storage and quotas (PROTOCOL.md §4.2): shown with quotas, and
		// whenever free space is low.
		st := s.Storage
		if st == nil || st.Intakes == 0 && st.State != coordinator.StorageLow && st.State != coordinator.StorageShort {
			continue
		}
		line := fmt.Sprintf("%s storage: %s", s.ID, st.State)
		if st.Limit > 0 {
			line += fmt.Sprintf(", %d of %d bytes used (warning below %d free, reserve %d)", st.Used, st.Limit, st.Warn, st.Reserve)
		}
		line += fmt.Sprintf("; %d intake streams, %d workers held, %d inputs emptied", st.Intakes, st.Held, st.Purged)
		if st.State == coordinator.StorageShort {
			line += ": workers' inputs are refused once their intakes are full; free space or raise the limit"
		}
		fmt.Fprintln(stdout, line)
	}
	printHeads(stdout, got)
	if partitioned {
		reportLeaderless(ctx, nc, got, stdout)
	}
	return nil
}

// partitionIndex orders partition tokens numerically ("" first).
func partitionIndex(tok string) int {
	n, err := strconv.Atoi(tok)
	if err != nil {
		return -1
	}
	return n
}

// reportLeaderless lists the partitions of the deployment that no live
// coordinator answered for (best effort: nothing if the partition count
// cannot be read).
func reportLeaderless(ctx context.Context, nc *nats.Conn, got []status, stdout io.Writer) {
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	count, err := streams.Discover(ctx, js, streams.Topology{})
	if err != nil || count == 0 {
		return
	}
	live := make([]bool, count)
	for _, s := range got {
		if k := partitionIndex(s.Partition); s.Live && k >= 0 && k < int(count) {
			live[k] = true
		}
	}
	for k, ok := range live {
		if !ok {
			fmt.Fprintf(stdout, "partition %d of %d: no live coordinator answered\n", k, count)
		}
	}
}
