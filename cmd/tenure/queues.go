package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/maknow/tenure/api"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/receipt"
)

// parsePositional parses args whose positional arguments may come before,
// between or after the flags (tenure submit <job> --queue Q), and returns
// the positional ones.
func parsePositional(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// oneJob returns the one positional argument of a command about a job.
func oneJob(fs *flag.FlagSet, pos []string) (string, error) {
	switch {
	case len(pos) == 0:
		return "", fmt.Errorf("%w: give the job id (see %s --help)", errUsage, fs.Name())
	case len(pos) > 1:
		return "", fmt.Errorf("%w: unexpected argument %q after the job id (see %s --help)", errUsage, pos[1], fs.Name())
	case !events.ValidToken(pos[0]):
		return "", fmt.Errorf("%w: job id %q: want 1 to 64 of [A-Za-z0-9_-]", errUsage, pos[0])
	}
	return pos[0], nil
}

var submitCmd = &command{
	name:    "submit",
	summary: "submit a job to a queue, for workers that pull (dispatcher)",
	usage: `tenure submit <job> --queue Q [--priority N --max-attempts N --backoff D --backoff-max D
              --lease D --ack-timeout D --payload S|--payload-file F
              --run-at TIME|--delay D --unique-key K --unique-for D --concurrency-key K] [flags]
       tenure submit --jobs FILE|- [--queue Q and the same flags, for every job] [flags]`,
	help: `Submits job <job> to queue --queue (PROTOCOL.md §22): it waits QUEUED until
the queue offers it to a worker that announced capacity on it (a pull, as
the worker SDK's Run does), highest --priority first and submitters taking
turns. An attempt that ends without success (FAILED, no ACK, an expired
lease) is retried after --backoff, doubled each time up to --backoff-max,
until --max-attempts attempts counted: then the job is DEAD, until an
operator retries or discards it (tenure resolve --action retry|discard).
Each attempt's lease and ACK timeout are --lease and --ack-timeout (the
policy's by default); --payload (or --payload-file, - for stdin: at most
4096 bytes of UTF-8) goes to the worker with every offer.

--run-at TIME (RFC 3339, e.g. 2026-05-01T03:00:00+02:00) or --delay D
schedules the job (rules revision 8, PROTOCOL.md §26.1): it is queued at
once and not offered before that time, or before the submit's stored time
plus D, by the coordinator's clock.

--unique-key K (rules revision 8, PROTOCOL.md §26.2) refuses the job while
another job of the queue that named K holds it: while that job is queued,
offered, active or unresolved, and --unique-for D after it ended (never
past its retirement or an operator's discard). The refusal is
duplicate/duplicate_unique_key, duplicate_of naming the job that holds K
(exit status 1).

--concurrency-key K (rules revision 9, PROTOCOL.md §26.4) names the job's
concurrency key: while an operator's limit of K is in force on the queue
(tenure limit), at most its max-active jobs naming K run at once, and its
rate applies to them; the job waits QUEUED otherwise.

Submitting the same job again with the same flags (a retry after a lost
verdict) is no error: the verdict says duplicate/duplicate_submit and
nothing changes; other flags are refused (rejected/submit_conflicts).

With --jobs, many jobs in few inputs (batch submits of up to 256 jobs,
rules revision 7), each judged on its own: FILE (- for stdin) has one job
per line (blank lines and lines starting with # are skipped), either a job
id, which takes --queue and the flags, or a JSON object with the job's
"job" and any of the fields of a submit as the protocol names them, which
override the flags: {"job":"mail-7","queue":"emails","priority":3,
"max_attempts":5,"backoff_ms":1000,"backoff_max_ms":60000,"lease_ms":30000,
"ack_timeout_ms":5000,"payload":"..."}. Every line is checked before
anything is published (a mistake names its line). It prints one line per
job (--json: each verdict as stored), then how many were submitted; a job
refused, or whose verdict did not come within 10 s of its input, exits
with status 1.

` + opsVerdictHelp,
	run: runSubmit,
}

func runSubmit(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var o opsCommand
	o.register(fs)
	queue := fs.String("queue", "", "the queue (required)")
	priority := fs.Int("priority", 0, "0 to 9, higher is offered first")
	attempts := fs.Int("max-attempts", 0, "the attempt budget, 1 to 1000 (default 3)")
	backoff := fs.Duration("backoff", 0, "the wait before the first retry, doubled for each later one (default 1s)")
	backoffMax := fs.Duration("backoff-max", 0, "the cap of the backoff (default 1h)")
	lease := fs.Duration("lease", 0, "each attempt's lease duration (default: the policy's)")
	ackTimeout := fs.Duration("ack-timeout", 0, "the time each offered worker has to ACK (default: the policy's)")
	payload := fs.String("payload", "", "opaque text given to the worker with each offer, at most 4096 bytes")
	payloadFile := fs.String("payload-file", "", "read the payload from `FILE` (- for stdin)")
	jobsFile := fs.String("jobs", "", "submit the jobs listed in `FILE` (- for stdin), one per line: a job id, or a JSON object (see --help)")
	runAt := fs.String("run-at", "", "not offered before this `TIME` (RFC 3339 with a time zone)")
	delay := fs.Duration("delay", 0, "not offered before the submit's time plus this (at most 366 days)")
	uniqueKey := fs.String("unique-key", "", "refused while another job of the queue holds this `KEY`")
	uniqueFor := fs.Duration("unique-for", 0, "the job holds its unique key this long after it ended too (at most 30 days)")
	concKey := fs.String("concurrency-key", "", "the job's concurrency `KEY`: limited by the queue's limit of it (tenure limit)")
	pos, err := parsePositional(fs, args)
	if err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var job string
	if given["jobs"] {
		if len(pos) > 0 {
			return fmt.Errorf("%w: --jobs lists the jobs: unexpected argument %q", errUsage, pos[0])
		}
		if given["payload-file"] && *payloadFile == "-" && *jobsFile == "-" {
			return fmt.Errorf("%w: --jobs and --payload-file cannot both read stdin", errUsage)
		}
		if given["run-at"] || given["delay"] || given["unique-key"] || given["unique-for"] || given["concurrency-key"] {
			return fmt.Errorf("%w: --run-at, --delay, --unique-key, --unique-for and --concurrency-key go with a single job, not --jobs (a batch's jobs take none of them)", errUsage)
		}
	} else {
		if job, err = oneJob(fs, pos); err != nil {
			return err
		}
		if err := needToken("queue", *queue); err != nil {
			return err
		}
	}
	var opts []ops.SubmitOption
	add := func(flag string, opt ops.SubmitOption) {
		if given[flag] {
			opts = append(opts, opt)
		}
	}
	add("priority", ops.WithPriority(*priority))
	add("max-attempts", ops.WithMaxAttempts(*attempts))
	if given["backoff"] || given["backoff-max"] {
		opts = append(opts, ops.WithBackoff(*backoff, *backoffMax))
	}
	add("lease", ops.WithLease(*lease))
	add("ack-timeout", ops.WithAckTimeout(*ackTimeout))
	add("delay", ops.WithDelay(*delay))
	add("unique-key", ops.WithUniqueKey(*uniqueKey))
	add("unique-for", ops.WithUniqueFor(*uniqueFor))
	add("concurrency-key", ops.WithConcurrencyKey(*concKey))
	if given["unique-for"] && !given["unique-key"] {
		return fmt.Errorf("%w: --unique-for needs --unique-key", errUsage)
	}
	if given["run-at"] {
		t, err := time.Parse(time.RFC3339Nano, *runAt)
		if err != nil {
			return fmt.Errorf("%w: --run-at %q: want an RFC 3339 time with a time zone, as 2026-05-01T03:00:00Z", errUsage, *runAt)
		}
		opts = append(opts, ops.WithRunAt(t))
	}
	switch {
	case given["payload"] && given["payload-file"]:
		return fmt.Errorf("%w: --payload or --payload-file, not both", errUsage)
	case given["payload"]:
		opts = append(opts, ops.WithPayload(*payload))
	case given["payload-file"]:
		p, err := readPayload(*payloadFile)
		if err != nil {
			return err
		}
		opts = append(opts, ops.WithPayload(p))
	}
	// The options check their values: a bad one is a mistake on the
	// command line, found before anything is published.
	var check ops.SubmitOptions
	for _, opt := range opts {
		if err := opt(&check); err != nil {
			return fmt.Errorf("%w: %v (see tenure submit --help)", errUsage, err)
		}
	}
	if given["jobs"] {
		jobs, err := readJobLines(*jobsFile, *queue, check)
		if err != nil {
			return err
		}
		return o.submitMany(ctx, stdout, jobs)
	}
	return o.run(ctx, stdout, func(ctx context.Context, c *ops.Client) (events.Decision, error) {
		d, err := c.Submit(ctx, job, *queue, opts...)
		if err == nil && ops.IsDuplicateSubmit(d) && !o.asJSON {
			defer fmt.Fprintln(stdout, "  already submitted with the same fields: nothing changed")
		}
		return d, err
	})
}

// jobLine is a JSON line of tenure submit --jobs: a job and the fields of
// its submit as the protocol names them (PROTOCOL.md §22.1), each
// overriding the flags'.
type jobLine struct {
	Job          *string `json:"job"`
	Queue        *string `json:"queue"`
	Priority     *int    `json:"priority"`
	MaxAttempts  *int    `json:"max_attempts"`
	BackoffMS    *int64  `json:"backoff_ms"`
	BackoffMaxMS *int64  `json:"backoff_max_ms"`
	LeaseMS      *int64  `json:"lease_ms"`
	AckTimeoutMS *int64  `json:"ack_timeout_ms"`
	Payload      *string `json:"payload"`
}

// readJobLines reads the jobs of tenure submit --jobs from path (- is
// stdin): each line a job id with the defaults (queue and def, the flags'),
// or a jobLine. Every job is checked as ops checks it; the first mistake
// is a usage error naming its line.
func readJobLines(path, queue string, def ops.SubmitOptions) ([]ops.SubmitJob, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("%w: --jobs: %v", errUsage, err)
		}
		defer f.Close()
		r = f
	}
	var jobs []ops.SubmitJob
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 2*events.MaxInputBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		j := ops.SubmitJob{ID: line, Queue: queue, Options: def}
		if strings.HasPrefix(line, "{") {
			var l jobLine
			dec := json.NewDecoder(strings.NewReader(line))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&l); err != nil || dec.More() {
				if err == nil {
					err = errors.New("more than one JSON object")
				}
				return nil, fmt.Errorf("%w: --jobs %s line %d: %v", errUsage, path, n, err)
			}
			if l.Job == nil {
				return nil, fmt.Errorf("%w: --jobs %s line %d: no \"job\"", errUsage, path, n)
			}
			j.ID = *l.Job
			if l.Queue != nil {
				j.Queue = *l.Queue
			}
			var opts []ops.SubmitOption
			if l.Priority != nil {
				opts = append(opts, ops.WithPriority(*l.Priority))
			}
			if l.MaxAttempts != nil {
				opts = append(opts, ops.WithMaxAttempts(*l.MaxAttempts))
			}
			if l.BackoffMS != nil || l.BackoffMaxMS != nil {
				b, m := j.Options.Backoff, j.Options.BackoffMax
				if l.BackoffMS != nil {
					b = time.Duration(*l.BackoffMS) * time.Millisecond
				}
				if l.BackoffMaxMS != nil {
					m = time.Duration(*l.BackoffMaxMS) * time.Millisecond
				}
				opts = append(opts, ops.WithBackoff(b, m))
			}
			if l.LeaseMS != nil {
				opts = append(opts, ops.WithLease(time.Duration(*l.LeaseMS)*time.Millisecond))
			}
			if l.AckTimeoutMS != nil {
				opts = append(opts, ops.WithAckTimeout(time.Duration(*l.AckTimeoutMS)*time.Millisecond))
			}
			if l.Payload != nil {
				opts = append(opts, ops.WithPayload(*l.Payload))
			}
			for _, opt := range opts {
				if err := opt(&j.Options); err != nil {
					return nil, fmt.Errorf("%w: --jobs %s line %d: %v", errUsage, path, n, err)
				}
			}
		}
		switch {
		case !events.ValidToken(j.ID):
			return nil, fmt.Errorf("%w: --jobs %s line %d: job id %q: want 1 to 64 of [A-Za-z0-9_-] (or a JSON object)", errUsage, path, n, j.ID)
		case !events.ValidToken(j.Queue):
			return nil, fmt.Errorf("%w: --jobs %s line %d: job %s has no valid queue (--queue, or \"queue\" on its line)", errUsage, path, n, j.ID)
		}
		jobs = append(jobs, j)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--jobs %s: %w", path, err)
	}
	return jobs, nil
}

// submitChunk is how many jobs tenure submit --jobs hands to one
// SubmitMany: its results are printed as each chunk is decided.
const submitChunk = 4096

// submitMany submits jobs with SubmitMany and prints each job's verdict.
func (o *opsCommand) submitMany(ctx context.Context, stdout io.Writer, jobs []ops.SubmitJob) error {
	nc, err := o.dial()
	if err != nil {
		return err
	}
	defer nc.Close()
	opts := []ops.Option{ops.WithPrefix(o.prefix)}
	var keepErr error
	var keepMu sync.Mutex
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
	var submitted, dups, failed int
	var first error
	for start := 0; start < len(jobs); start += submitChunk {
		chunk := jobs[start:min(start+submitChunk, len(jobs))]
		res, err := c.SubmitMany(ctx, chunk)
		if res == nil && err != nil {
			return err
		}
		for i, r := range res {
			d := r.Decision
			switch {
			case o.asJSON && d.Kind != events.KindNone:
				fmt.Fprintf(stdout, "%s\n", events.AppendDecision(nil, &d))
			case r.Err != nil && d.Kind == events.KindNone:
				fmt.Fprintf(stdout, "%s: no verdict: %v\n", chunk[i].ID, r.Err)
			case !o.asJSON:
				fmt.Fprintln(stdout, projector.Describe(&d, 0))
			}
			switch {
			case r.Err != nil:
				failed++
				if first == nil {
					first = fmt.Errorf("%s: %w", chunk[i].ID, r.Err)
				}
			case ops.IsDuplicateSubmit(d):
				dups++
			default:
				submitted++
			}
		}
	}
	if !o.asJSON {
		fmt.Fprintf(stdout, "%d jobs submitted, %d already were (the same fields), %d not submitted\n", submitted, dups, failed)
	}
	keepMu.Lock()
	defer keepMu.Unlock()
	if first != nil {
		return fmt.Errorf("%d of %d jobs not submitted; the first, %w", failed, len(jobs), first)
	}
	return keepErr
}

// readPayload reads a payload file (- is stdin): at most
// events.MaxPayloadBytes.
func readPayload(path string) (string, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("%w: --payload-file: %v", errUsage, err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, events.MaxPayloadBytes+1))
	if err != nil {
		return "", fmt.Errorf("--payload-file %s: %w", path, err)
	}
	if len(b) > events.MaxPayloadBytes {
		return "", fmt.Errorf("%w: --payload-file %s is over %d bytes: put a reference to it in the payload instead", errUsage, path, events.MaxPayloadBytes)
	}
	return string(b), nil
}

// apiCommand holds what the commands reading the state API share.
type apiCommand struct {
	conn    connFlags
	asJSON  bool
	timeout time.Duration
}

func (a *apiCommand) register(fs *flag.FlagSet) {
	a.conn.register(fs, "NATS server (default nats://127.0.0.1:4222, the local embedded one)")
	fs.BoolVar(&a.asJSON, "json", false, "print the API's answer as JSON (PROTOCOL.md §23)")
	fs.DurationVar(&a.timeout, "timeout", 5*time.Second, "how long to wait for the answer")
}

// client connects and returns a client of the API, and the connection to
// close.
func (a *apiCommand) client() (*api.Client, func(), error) {
	defaultURL(&a.conn)
	nc, err := a.conn.connect("tenure-api")
	if err != nil {
		return nil, nil, err
	}
	return api.NewClient(nc, a.timeout), nc.Close, nil
}

// apiHelp ends the help of every command reading the state API.
const apiHelp = `Asks the state API of a running tenure serve (tenure.api.>, PROTOCOL.md
§23), which answers from its read model of the decision stream: its
answer may be behind the log by the time that read takes, and says so while
the read model is still catching up. Only the ops and coordinator roles of
tenure auth init may ask. --json prints the answer as the API gave it.`

var jobsCmd = &command{
	name:    "jobs",
	summary: "list jobs, or show one job's projection (ls, get)",
	usage:   "tenure jobs <ls|get> [flags]",
	help: `Reads jobs from the state API: tenure jobs ls lists them page by page,
tenure jobs get <job> shows one job's projection.

` + apiHelp,
	subs: jobsSubs,
	run:  runJobs,
}

var jobsSubs = []*command{
	{name: "jobs ls", summary: "list jobs, by queue and state", usage: "tenure jobs ls [--queue Q] [--state S] [--after ID] [--limit N] [flags]",
		help: `Lists the jobs the coordinator keeps, in byte order of their ids, at most
--limit (200) of them: those of --queue (every job without it) in --state
(QUEUED, OFFERED, ACTIVE, DEAD, COMPLETED, FAILED, ...). When there are
more, the last line says how to ask for the next page (--after).

` + apiHelp, run: runJobsLs},
	{name: "jobs get", summary: "show one job's projection", usage: "tenure jobs get <job> [flags]",
		help: `Shows the projection of job <job> after its last decision, as the decisions
carry it (PROTOCOL.md §10.2, and §22.6 for a queue job: queue, attempt,
ready_at...), with that decision.

` + apiHelp, run: runJobsGet},
}

func runJobs(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	return dispatchSub(ctx, fs, "jobs", "ls or get", jobsSubs, args, stdout, stderr)
}

func runJobsLs(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var a apiCommand
	a.register(fs)
	var q api.JobsRequest
	fs.StringVar(&q.Queue, "queue", "", "only the jobs of this queue")
	fs.StringVar(&q.State, "state", "", "only the jobs in this state (QUEUED, OFFERED, ACTIVE, DEAD, COMPLETED, FAILED, ...)")
	fs.StringVar(&q.After, "after", "", "start after this job id (the next page)")
	fs.IntVar(&q.Limit, "limit", api.DefaultJobsLimit, fmt.Sprintf("at most this many jobs, 1 to %d", api.MaxJobsLimit))
	if err := parse(fs, args); err != nil {
		return err
	}
	q.State = strings.ToUpper(q.State)
	if _, ok := events.ParseState(q.State); q.State != "" && !ok {
		return fmt.Errorf("%w: --state %s: not a job state (QUEUED, OFFERED, ACTIVE, DEAD, COMPLETED, FAILED, ...)", errUsage, q.State)
	}
	if q.Limit < 1 || q.Limit > api.MaxJobsLimit {
		return fmt.Errorf("%w: --limit must be 1 to %d", errUsage, api.MaxJobsLimit)
	}
	for name, v := range map[string]string{"queue": q.Queue, "after": q.After} {
		if v != "" {
			if err := needToken(name, v); err != nil {
				return err
			}
		}
	}
	c, closeConn, err := a.client()
	if err != nil {
		return err
	}
	defer closeConn()
	r, err := c.Jobs(ctx, q)
	if err != nil {
		return err
	}
	if a.asJSON {
		return printJSON(stdout, r)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tQUEUE\tATTEMPT\tHOLDER\tGEN\tREADY/DEADLINE\tLAST DECISION\tRESULT DETAIL")
	for _, j := range r.Jobs {
		queue, attempt := "-", "-"
		if j.Queue != "" {
			queue, attempt = j.Queue, fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts)
		}
		when := cmp.Or(j.ReadyAt, j.Deadline, "-")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", j.ID, j.State, queue, attempt, cmp.Or(j.Holder, "-"), j.Generation, when, j.Last.Label(),
			quoteDetail(j.ResultDetail, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d of %d jobs%s\n", len(r.Jobs), r.Total, behind(r.Position))
	if r.Next != "" {
		fmt.Fprintf(stdout, "more: tenure jobs ls%s --after %s\n", lsFilters(q), r.Next)
	}
	return nil
}

// quoteDetail is a worker's free text as a table cell: quoted, its
// control characters escaped (a terminal shows no escape sequence a
// worker wrote), cut to max runes (0: whole); "-" when empty.
func quoteDetail(s string, max int) string {
	if s == "" {
		return "-"
	}
	if r := []rune(s); max > 0 && len(r) > max {
		return strconv.Quote(string(r[:max-1])) + "…"
	}
	return strconv.Quote(s)
}

// lsFilters repeats a listing's filters, for the line naming the next page.
func lsFilters(q api.JobsRequest) string {
	var b strings.Builder
	if q.Queue != "" {
		b.WriteString(" --queue " + q.Queue)
	}
	if q.State != "" {
		b.WriteString(" --state " + q.State)
	}
	if q.Limit != api.DefaultJobsLimit {
		fmt.Fprintf(&b, " --limit %d", q.Limit)
	}
	return b.String()
}

func runJobsGet(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var a apiCommand
	a.register(fs)
	pos, err := parsePositional(fs, args)
	if err != nil {
		return err
	}
	job, err := oneJob(fs, pos)
	if err != nil {
		return err
	}
	c, closeConn, err := a.client()
	if err != nil {
		return err
	}
	defer closeConn()
	r, err := c.Job(ctx, job)
	if err != nil {
		return err
	}
	if a.asJSON {
		return printJSON(stdout, r)
	}
	where := ""
	if r.Partition != "" {
		where = " (partition " + r.Partition + ")"
	}
	if r.Last.Snapshot != 0 && r.Last.Seq == 0 {
		fmt.Fprintf(stdout, "job %s%s as the stored snapshot has it (at decision %d, %s: the decisions before were archived and removed)%s\n", job, where, r.Last.Snapshot, r.Last.At, behind(r.Position))
	} else {
		fmt.Fprintf(stdout, "job %s%s after decision %d (%s of input %d at %s)%s\n", job, where, r.Last.Seq, r.Last.Label(), r.Last.Cause, r.Last.At, behind(r.Position))
	}
	if w := r.WorkerResult; w != nil {
		switch {
		case w.Removed:
			fmt.Fprintf(stdout, "latest result: input %d, archived and removed from the input stream\n", w.Input)
		default:
			fmt.Fprintf(stdout, "latest result: %s by %s (input %d)", w.Outcome, w.Worker, w.Input)
			if w.Permanent {
				fmt.Fprint(stdout, ", permanent")
			}
			if w.Detail != "" {
				fmt.Fprintf(stdout, ": %s", quoteDetail(w.Detail, 0))
			}
			fmt.Fprintln(stdout)
		}
	}
	var out bytes.Buffer
	if err := json.Indent(&out, r.Job, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = out.WriteTo(stdout)
	return err
}

var queuesCmd = &command{
	name:    "queues",
	summary: "the queues: depth, in flight, dead, done, workers, rates",
	usage:   "tenure queues [--queue Q] [flags]",
	help: `Prints every queue (or --queue Q alone, with its workers) as the state API
sees it: its depth (QUEUED jobs ready to be offered, waiting out a backoff,
or blocked by an ownership conflict), its live leases (offered or active),
its DEAD, COMPLETED and FAILED jobs, the workers announcing capacity with
their slots and free slots, and the completions, failures and requeues per
second over the last minute. With --queue it lists the queue's workers, and
the limits in force on it (tenure limit): each concurrency key's max active
with its live leases now, and rates.

` + apiHelp,
	run: runQueues,
}

// maxQueuePages bounds the pages tenure queues reads (MaxQueuesLimit
// queues each).
const maxQueuePages = 100

func runQueues(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var a apiCommand
	a.register(fs)
	queue := fs.String("queue", "", "only this queue, with its workers")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *queue != "" {
		if err := needToken("queue", *queue); err != nil {
			return err
		}
	}
	c, closeConn, err := a.client()
	if err != nil {
		return err
	}
	defer closeConn()
	var all []api.QueueStats
	var pos api.Position
	more := ""
	if *queue != "" {
		r, err := c.Queue(ctx, *queue)
		if err != nil {
			return err
		}
		if a.asJSON {
			return printJSON(stdout, r)
		}
		all, pos = []api.QueueStats{r.Queue}, r.Position
	} else {
		after := ""
		for page := 0; ; page++ {
			r, err := c.Queues(ctx, api.QueuesRequest{After: after, Limit: api.MaxQueuesLimit})
			if err != nil {
				return err
			}
			if a.asJSON {
				if err := printJSON(stdout, r); err != nil {
					return err
				}
			}
			all, pos = append(all, r.Queues...), r.Position
			if after = r.Next; after == "" {
				break
			}
			if page+1 == maxQueuePages {
				more = fmt.Sprintf("%d more queues not shown (of %d)", r.Total-len(all), r.Total)
				break
			}
		}
		if a.asJSON {
			return nil
		}
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tREADY\tWAITING\tBLOCKED\tIN FLIGHT\tDEAD\tCOMPLETED\tFAILED\tWORKERS\tSLOTS\tFREE\tDONE/S\tFAILED/S\tREQUEUED/S")
	for _, q := range all {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\n", q.Queue, q.Ready, q.Waiting, q.Blocked, q.InFlight,
			q.Dead, q.Completed, q.Failed, q.Workers, q.Slots, q.FreeSlots, q.Rates.Completed, q.Rates.Failed, q.Rates.Requeued)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if *queue != "" && len(all[0].WorkerList) > 0 {
		fmt.Fprintln(stdout)
		tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "WORKER\tPARTITION\tSLOTS\tHELD\tUNTIL\tWINDOW\tSTRIKES\tON HOLD UNTIL\tOFFERS\tDECLINED\tRELEASED\tNO ACK\tEXPIRED\tDONE\tFAILED")
		for _, w := range all[0].WorkerList {
			window, strikes, hold := "-", "-", "-"
			if st := w.Standing; st != nil {
				window, strikes, hold = strconv.FormatUint(st.Window, 10), strconv.FormatUint(st.Strikes, 10), cmp.Or(st.HeldUntil, "-")
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", w.Worker, cmp.Or(w.Partition, "-"), w.Slots, w.Held, cmp.Or(w.Until, "-"),
				window, strikes, hold, w.Offers, w.Declines, w.Releases, w.MissedAcks, w.Expiries, w.Completions, w.Failures)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if *queue != "" && len(all[0].LimitList) > 0 {
		fmt.Fprintln(stdout)
		tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CONCURRENCY KEY\tPARTITION\tMAX ACTIVE\tLIVE\tRATE")
		for _, l := range all[0].LimitList {
			key, maxActive, live, rate := cmp.Or(l.Key, "(the queue)"), "-", "-", "-"
			if l.MaxActive != nil {
				maxActive = strconv.FormatUint(*l.MaxActive, 10)
			}
			if l.Key != "" {
				live = strconv.Itoa(l.Live)
			}
			if l.Rate != 0 {
				rate = fmt.Sprintf("%d per %v", l.Rate, time.Duration(l.PeriodMS)*time.Millisecond)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", key, cmp.Or(l.Partition, "-"), maxActive, live, rate)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if all[0].Limits > len(all[0].LimitList) {
			fmt.Fprintf(stdout, "%d more limits not shown (of %d)\n", all[0].Limits-len(all[0].LimitList), all[0].Limits)
		}
	}
	if more != "" {
		fmt.Fprintln(stdout, more)
	}
	if len(all) == 0 {
		fmt.Fprintln(stdout, "no queue yet (tenure submit <job> --queue Q makes one)")
	}
	if b := behind(pos); b != "" {
		fmt.Fprintln(stdout, strings.TrimPrefix(b, " "))
	}
	return nil
}

// behind says that an answer came from a read model still catching up.
func behind(p api.Position) string {
	if p.CaughtUp {
		return ""
	}
	return fmt.Sprintf(" (the API's read model is still catching up with the decision stream, at decision %d)", p.Seq)
}

func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
