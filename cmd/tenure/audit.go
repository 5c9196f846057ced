package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/fence"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// errAuditFailed is the error of an audit that ran and found problems: exit
// status 1, after the summary.
var errAuditFailed = errors.New("audit: the log is not reproduced")

var auditCmd = &command{
	name:    "audit",
	summary: "replay the log and verify every decision (read-only); evidence matrix and timelines",
	usage:   "tenure audit [flags]",
	help: `Replays the input stream through the fold and checks every stored decision,
byte for byte, against it. Read-only: nothing is written to the streams.
Audits a running system (--nats-url) or a copy of a stopped data directory
(--data). Exit status: 0 when everything was reproduced, 1 otherwise, 2 for
usage errors.

Every checkpoint claim (a coordinator's "the state after input S hashes to
H", which anchors its snapshots) is checked against the replay's own state
after S: one that does not match is a finding, "checkpoint at input C
(actor) claims state hash H for input S; the replay gives H'"; one about
an input before the audit's start (--from) is a note. The stored snapshot is checked
as a coordinator checks it before restoring it: the decision at its anchor
claims exactly its input and state hash, and its bytes hash to it. --from
starts from it only if it checks out; one that does not is a finding (the
audit then replays from the first input), one without an anchor (an older
Tenure's) a note. The JSON report (--report) has "checkpoints": {"claims",
"verified", "mismatches", "unchecked"} and, in "snapshot", "anchor_seq",
"state_hash" and "anchored".

--job prints the job's evidence matrix (every decision about it) and then
the results its workers sent: each result input's worker, outcome, verdict
and the worker's own detail (why it failed), which the input holds and no
decision carries.

A log whose first segments were archived and removed (tenure log) is
audited from the stored snapshot, or, with --archive DIR, from input 1:
the archived segments (each file checked against its manifest as it is
read; an archive that does not check out is an error, exit status 1), then
the streams after them, the decision chain checked across each boundary.

A partitioned deployment (found on the server: the partition count its
streams record) is audited partition by partition, each with its own
streams, fold and report, headed with the partition; a last line sums up
all of them, and the exit status is the worst of all partitions. --job
audits only the job's partition. --from SEQ applies to every partition:
SEQ is a sequence of each partition's own input stream. The evidence
matrix (--matrix, --job) has one more column, Partition ("partition" in
JSON lines), and --report writes {"partitions", "ok", "problems",
"reports": [{"partition": k, ...}]}.

--effects FILE checks effect receipts (package fence: JSON lines of what a
resource committed under a lease, as adapters/pgfence, adapters/sqlitefence,
fence/kvfence and fence/httpfence export them) against the leases of the
log, which it must read whole: each effect committed under a lease the log
gave that job, with its generation, while that lease held authority by the
log's clock (from the input that made it ACTIVE to its end or its
expires_at; --effects-skew widens both by the most the resource's clock may
differ from the NATS server's) and not after a later generation started;
each effect id of a job committed once; and at each resource a job's
effects in the order of its leases. Each violation is a finding naming the
receipt (FILE:LINE), the lease and the input sequences involved; the JSON
report has them under "effects".`,
	run: runAudit,
}

func runAudit(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var conn connFlags
	conn.register(fs, "audit the system behind this NATS server or cluster")
	data := fs.String("data", "", "audit a stopped data directory (of tenure serve --data); it is copied first and never touched")
	serverConf := fs.String("server-config", "", "with --data: nats-server configuration file (accounts, authorization) to serve the copy with")
	prefix := fs.String("prefix", streams.DefaultPrefix, "stream and bucket name prefix of the topology")
	from := fs.Uint64("from", 0, "start at input `SEQ` from the stored snapshot, once it checks out against its anchor (0: replay from the first input); partitioned: in every partition, SEQ of its own input stream")
	archiveDir := fs.String("archive", "", "replay the archived segments in `DIR` (tenure log archive) from input 1, then the streams after them")
	job := fs.String("job", "", "print the evidence matrix of job `ID`: every row of its history; partitioned: audit only the job's partition")
	matrix := fs.Bool("matrix", false, "print the evidence matrix of every job: its latest row")
	format := fs.String("format", "table", "evidence matrix format: table, csv or json (json lines); with csv and json the summary goes to stderr")
	timeline := fs.Bool("timeline", false, "with --job: print every input of the job with its verdicts")
	strict := fs.Bool("strict", false, "count pending inputs (stored, not decided yet) as problems")
	list := fs.Int("list", 20, "findings listed per class in the summary (all are counted; -1: all kept)")
	reportFile := fs.String("report", "", "also write the whole report as JSON to `FILE`")
	progress := fs.String("progress", "auto", "progress on stderr: auto (a bar on a terminal, log lines otherwise), bar, log or none")
	logFormat := fs.String("log-format", "text", "text (coloured on a terminal) or json")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	var receiptFiles files
	fs.Var(&receiptFiles, "receipts", "check the receipts in `FILE` (JSON lines: worker.WithReceipts, tenure watch --receipts, ...) against the log: an input or decision missing or different is a finding; repeatable")
	var effectFiles files
	fs.Var(&effectFiles, "effects", "check the effect receipts in `FILE` (JSON lines of package fence: what a resource committed under a lease, e.g. pgfence's WriteReceipts; - reads standard input) against the log's leases: an effect of an unknown lease, committed outside its lease's authority or after a later generation started, committed twice, or out of the leases' order is a finding; repeatable")
	effectSkew := fs.Duration("effects-skew", 0, "with --effects: the most a resource's clock may differ from the NATS server's; a commit within it of its lease's authority is not a finding")
	var hw auditHeads
	hw.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	urlSet := false
	fs.Visit(func(f *flag.Flag) { urlSet = urlSet || f.Name == "nats-url" })
	switch {
	case *data != "" && urlSet:
		return fmt.Errorf("%w: --data and --nats-url are exclusive", errUsage)
	case *serverConf != "" && *data == "":
		return fmt.Errorf("%w: --server-config needs --data", errUsage)
	case *archiveDir != "" && *from > 1:
		return fmt.Errorf("%w: --archive replays from the first input: not with --from", errUsage)
	case *timeline && *job == "":
		return fmt.Errorf("%w: --timeline needs --job", errUsage)
	case *list < -1:
		return fmt.Errorf("%w: --list must be -1 or more", errUsage)
	case len(receiptFiles) > 0 && (*from > 1 || *job != ""):
		return fmt.Errorf("%w: --receipts checks the whole log: not with --from or --job", errUsage)
	case len(effectFiles) > 0 && (*from > 1 || *job != "" || *archiveDir != ""):
		return fmt.Errorf("%w: --effects checks the leases of the whole log: not with --from, --job or --archive", errUsage)
	case *effectSkew < 0:
		return fmt.Errorf("%w: --effects-skew must not be negative", errUsage)
	}
	var effects []fence.ReceiptLine
	for _, f := range effectFiles {
		lines, err := fence.ReadReceiptFile(f)
		if err != nil {
			return fmt.Errorf("--effects: %w", err)
		}
		effects = append(effects, lines...)
	}
	if len(effectFiles) > 0 && effects == nil {
		effects = []fence.ReceiptLine{} // checked, though empty
	}
	var wits witnessSet
	if err := wits.addReceipts(receiptFiles); err != nil {
		return err
	}
	mf := projector.Format(*format)
	if mf != projector.FormatTable && mf != projector.FormatCSV && mf != projector.FormatJSON {
		return fmt.Errorf("%w: --format must be table, csv or json, not %q", errUsage, *format)
	}
	pmode, err := progressMode(*progress, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	if !validPrefix(*prefix) {
		return fmt.Errorf("%w: invalid --prefix %q: want 1 to 64 of [A-Za-z0-9_-]", errUsage, *prefix)
	}
	top := streams.Topology{Prefix: *prefix}

	if *data != "" {
		d, err := audit.OpenDataDir(*data, audit.DataDirConfig{ConfigFile: *serverConf, Logger: log})
		if err != nil {
			return dataDirInUse(err, "audit the running deployment with --nats-url instead")
		}
		defer func() {
			if err := d.Close(); err != nil {
				log.Warn("temporary copy not removed", "dir", d.Dir, "err", err)
			}
		}()
		conn.url = d.Server.ClientURL()
		log.Debug("serving a copy of the data directory", "data", *data, "copy", d.Dir, "nats_url", conn.url)
	}
	nc, err := conn.connect("tenure-audit")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}

	count, err := streams.Discover(ctx, js, top)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	topos := top.Partitions(count) // count 0: the unpartitioned topology alone
	if count > 0 && *job != "" {
		topos = topos[events.PartitionOf(*job, count) : events.PartitionOf(*job, count)+1]
	}
	if err := hw.load(top.Partitions(count), topos); err != nil {
		return err
	}
	maxListed := audit.DefaultMaxListed
	if *list < 0 {
		maxListed = -1
	} else {
		maxListed = max(maxListed, *list)
	}
	wits.strays(topos)
	var audits []audit.PartitionAudit
	for _, t := range topos {
		plog := log
		if count > 0 {
			plog = log.With("partition", t.Partition.Index)
			plog.Debug("auditing", "input_stream", t.InputStream(), "decision_stream", t.DecisionStream())
		}
		prog := &progressPrinter{mode: pmode, w: stderr, log: plog, start: time.Now()}
		rep, err := audit.Run(ctx, audit.Config{
			JS: js, Topology: t, From: *from, Archive: *archiveDir, Logger: plog,
			Options: audit.Options{
				Job: *job, Matrix: *matrix, Strict: *strict, MaxListed: maxListed, Progress: prog.update,
				Witnesses: append(wits.forTopology(t), hw.of(t)...),
				Effects:   effectsOf(effects, t), EffectSkew: *effectSkew,
			},
		})
		prog.finish()
		if err != nil && (count == 0 || ctx.Err() != nil) {
			return err
		}
		audits = append(audits, audit.PartitionAudit{Partition: t.Partition, Report: rep, Err: err})
	}
	var reps []*audit.Report
	for _, a := range audits {
		if a.Report != nil {
			reps = append(reps, a.Report)
		}
	}

	if *reportFile != "" {
		if err := writeAuditReport(*reportFile, count, audits); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	printsMatrix := *matrix || *job != ""
	summaryOut := stdout
	if printsMatrix && mf != projector.FormatTable {
		summaryOut = stderr // keep stdout machine-readable
	}
	if *timeline {
		for _, rep := range reps {
			if len(rep.Timeline) == 0 {
				fmt.Fprintf(stdout, "no input concerns job %s\n", *job)
			}
			if err := audit.WriteTimeline(stdout, rep, 0); err != nil {
				return err
			}
			fmt.Fprintln(stdout)
		}
	}
	if printsMatrix {
		if err := audit.WriteMatrix(stdout, mf, reps, *job != "", projector.MatrixOptions{}); err != nil {
			return err
		}
		if mf == projector.FormatTable {
			fmt.Fprintln(stdout)
		}
	}
	if *job != "" {
		// What the job's workers said of their results (why one failed):
		// the decisions do not carry it.
		out := stdout
		if mf != projector.FormatTable {
			out = summaryOut
		}
		for _, rep := range reps {
			if err := audit.WriteResults(out, rep); err != nil {
				return err
			}
		}
	}
	witnessErr := wits.report(summaryOut)
	if count == 0 {
		rep := reps[0]
		if err := audit.WriteSummary(summaryOut, rep, *list); err != nil {
			return err
		}
		if !rep.OK() {
			return hw.report(summaryOut, fmt.Errorf("%w: %d problems", errAuditFailed, rep.Problems()+len(wits.problems)))
		}
		return hw.report(summaryOut, witnessErr)
	}
	// A partitioned deployment: a report per partition, headed with it,
	// then one line over all of them; the exit status is the worst.
	var errs []error
	for i, a := range audits {
		if i > 0 {
			fmt.Fprintln(summaryOut)
		}
		fmt.Fprintln(summaryOut, audit.PartitionHeading(topos[i]))
		if a.Err != nil {
			fmt.Fprintf(summaryOut, "result:      NOT AUDITED: %v\n", a.Err)
			errs = append(errs, fmt.Errorf("%s: %w", a.Partition, a.Err))
			continue
		}
		if err := audit.WriteSummary(summaryOut, a.Report, *list); err != nil {
			return err
		}
	}
	fmt.Fprintln(summaryOut)
	if err := audit.WriteTotals(summaryOut, audits); err != nil {
		return err
	}
	if err := errors.Join(errs...); err != nil {
		return hw.report(summaryOut, err)
	}
	if t := audit.Sum(audits); !t.AllOK() {
		var failed []string
		for _, i := range t.Failed {
			failed = append(failed, audits[i].Partition.Token())
		}
		return hw.report(summaryOut, fmt.Errorf("%w: %d problems in partition %s", errAuditFailed, t.Problems, strings.Join(failed, ", ")))
	}
	return hw.report(summaryOut, witnessErr)
}

// writeAuditReport writes the reports as JSON: the Report itself for an
// unpartitioned deployment; for a partitioned one, an object with the
// partition count, the outcome over all partitions audited and, per
// partition, its index with the fields of its Report (or the error that
// kept it from being audited).
func writeAuditReport(file string, count uint32, audits []audit.PartitionAudit) error {
	var v any
	if count == 0 {
		v = audits[0].Report
	} else {
		type partitionReport struct {
			Partition uint32 `json:"partition"`
			Error     string `json:"error,omitempty"`
			*audit.Report
		}
		t := audit.Sum(audits)
		all := struct {
			Partitions uint32            `json:"partitions"`
			OK         bool              `json:"ok"`
			Problems   int               `json:"problems"`
			Reports    []partitionReport `json:"reports"`
		}{Partitions: count, OK: t.AllOK(), Problems: t.Problems}
		for _, a := range audits {
			pr := partitionReport{Partition: a.Partition.Index, Report: a.Report}
			if a.Err != nil {
				pr.Error = a.Err.Error()
			}
			all.Reports = append(all.Reports, pr)
		}
		v = all
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o644)
}

// effectsOf is the effect receipts of partition t's jobs (all of them
// unpartitioned; a line without a job goes to partition 0); nil for nil.
func effectsOf(lines []fence.ReceiptLine, t streams.Topology) []fence.ReceiptLine {
	if lines == nil || !t.Partition.Partitioned() {
		return lines
	}
	out := []fence.ReceiptLine{}
	for _, l := range lines {
		k := uint32(0)
		if l.Job != "" {
			k = events.PartitionOf(l.Job, t.Partition.Count)
		}
		if k == t.Partition.Index {
			out = append(out, l)
		}
	}
	return out
}

func validPrefix(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// progressMode resolves --progress: "auto" is a bar when stderr is a
// terminal (a character device), log lines otherwise.
func progressMode(mode string, stderr io.Writer) (string, error) {
	switch mode {
	case "bar", "log", "none":
		return mode, nil
	case "auto":
		if f, ok := stderr.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				return "bar", nil
			}
		}
		return "log", nil
	}
	return "", fmt.Errorf("%w: --progress must be auto, bar, log or none, not %q", errUsage, mode)
}

// progressPrinter renders audit.Progress: a bar redrawn in place at most
// five times a second, or a log line every five seconds.
type progressPrinter struct {
	mode  string
	w     io.Writer
	log   *slog.Logger
	start time.Time
	last  time.Time
	drawn bool
}

func (p *progressPrinter) update(pr audit.Progress) {
	now := time.Now()
	every := 5 * time.Second
	if p.mode == "bar" {
		every = 200 * time.Millisecond
	}
	if p.mode == "none" || now.Sub(p.last) < every {
		return
	}
	if p.last.IsZero() && p.mode == "log" {
		p.last = now // the first line after five seconds
		return
	}
	p.last = now
	elapsed := now.Sub(p.start)
	rate := float64(pr.Inputs) / max(elapsed.Seconds(), 1e-9)
	frac := 1.0
	if pr.InputTotal > 0 {
		frac = min(float64(pr.Inputs)/float64(pr.InputTotal), 1)
	}
	eta := time.Duration(0)
	if rate > 0 && pr.InputTotal > pr.Inputs {
		eta = time.Duration(float64(pr.InputTotal-pr.Inputs) / rate * float64(time.Second))
	}
	switch p.mode {
	case "bar":
		const width = 30
		n := int(frac * width)
		fmt.Fprintf(p.w, "\r[%s%s] %3.0f%% %d/%d inputs, %d decisions, %.0f inputs/s, eta %v ",
			strings.Repeat("=", n), strings.Repeat(" ", width-n), frac*100, pr.Inputs, pr.InputTotal,
			pr.Decisions, rate, eta.Round(time.Second))
		p.drawn = true
	case "log":
		p.log.Info("auditing", "inputs", pr.Inputs, "of", pr.InputTotal, "decisions", pr.Decisions,
			"rate", fmt.Sprintf("%.0f/s", rate), "eta", eta.Round(time.Second))
	}
}

// finish clears the bar.
func (p *progressPrinter) finish() {
	if p.drawn {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", 120))
	}
}
