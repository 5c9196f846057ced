package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/maknow/tenure/api"
	"github.com/maknow/tenure/cron"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/ops"
)

// scheduleCmd is `tenure schedule`: an operator's cron schedules (rules
// revision 10, PROTOCOL.md §26.6).
var scheduleCmd = &command{
	name:    "schedule",
	summary: "set, pause, resume or delete a cron schedule that submits jobs (operator)",
	usage:   "tenure schedule <set|pause|resume|delete> <id> [flags]\n       tenure schedule ls [--queue Q] [flags]",
	help: `Cron schedules (rules revision 10, PROTOCOL.md §26.6): the coordinator's
fold fires a schedule at each due time, once, as a submit of its job
template (job <id>-<due time, UTC, as 20060102T150405Z>, submitted by the
operator that set it), across restarts and failovers: a fire is a
decision on the log's time, not an action of a process. Due times reached
late (the deployment was down, the schedule paused) are recorded
(schedule_missed), and with --missed once the latest fires anyway.`,
	subs: scheduleSubs,
	run: func(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
		return dispatchSub(ctx, fs, "schedule", "set, pause, resume, delete or ls", scheduleSubs, args, stdout, stderr)
	},
}

var scheduleSubs = []*command{
	{name: "schedule set", summary: "define a schedule, or replace its definition",
		usage: `tenure schedule set <id> --cron EXPR --queue Q [--zone Z] [--missed skip|once]
              [--priority N --max-attempts N --backoff D --backoff-max D --lease D
               --ack-timeout D --payload S|--payload-file F --unique-key K --concurrency-key K] [flags]`,
		help: `Defines schedule <id> (a token of at most 40 characters), or replaces its
definition (a paused one stays paused). --cron is five fields (minute,
hour, day of the month, month, day of the week: "30 2 * * 1-5"), a macro
(@hourly, @daily, @weekly, @monthly, @yearly) or @every D (1s to 366 days).
--zone is an IANA name (Europe/Berlin), resolved here, from this host's
time zone database, to the POSIX TZ rule the schedule carries (the fold
fires by the rule, so a replay elsewhere fires at the same instants), or
such a rule itself; UTC by default. A local time that a change of the
clocks repeats fires once, one that it skips fires when the gap ends.
--missed says what due times reached late do: skip (default) records
them and fires none; once fires the latest however late. The other flags
shape the jobs it fires, as tenure submit's (--unique-key K: a fire while
the last fire's job holds K is refused, and recorded).

The verdict is schedule_set/ok with the next due time; 1,024 schedules at
most (rejected/schedules_full). In a partitioned deployment the schedule
goes to its id's partition, and so do the jobs it fires.

` + opsVerdictHelp,
		run: runScheduleSet},
	{name: "schedule pause", summary: "stop a schedule firing; due times passed meanwhile are recorded at the resume",
		usage: "tenure schedule pause <id> [flags]",
		help:  "Stops schedule <id> from firing until tenure schedule resume (schedule_set/ok, paused).\n\n" + opsVerdictHelp,
		run:   runScheduleOp},
	{name: "schedule resume", summary: "make a paused schedule fire again, from its next due time",
		usage: "tenure schedule resume <id> [flags]",
		help: `Makes paused schedule <id> fire again from its next due time after now
(schedule_set/ok with it); the due times passed while it was paused are
recorded (schedule_missed/paused_through), none fired.

` + opsVerdictHelp,
		run: runScheduleOp},
	{name: "schedule delete", summary: "forget a schedule (the jobs it fired stay)",
		usage: "tenure schedule delete <id> [flags]",
		help:  "Forgets schedule <id> (schedule_deleted/ok); the jobs it fired stay.\n\n" + opsVerdictHelp,
		run:   runScheduleOp},
	{name: "schedule ls", summary: "list the schedules: when each fires next, in its zone, and its fires",
		usage: "tenure schedule ls [--queue Q] [flags]",
		help: `Lists the schedules (or those whose jobs go to --queue Q): the expression,
the zone, the queue, when each falls due next (in the schedule's zone, by
its rule), and, in the decisions the read model has read, its fires that
submitted a job, those refused, the due times recorded missed, and the
latest fire's job and reason.

` + apiHelp,
		run: runScheduleLs},
}

// maxSchedulePages bounds the pages tenure schedule ls reads.
const maxSchedulePages = 100

func runScheduleLs(ctx context.Context, fs *flag.FlagSet, args []string, stdout, _ io.Writer) error {
	var a apiCommand
	a.register(fs)
	queue := fs.String("queue", "", "only the schedules of this queue")
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
	var all []api.ScheduleSummary
	var pos api.Position
	more, after := "", ""
	for page := 0; ; page++ {
		r, err := c.Schedules(ctx, api.SchedulesRequest{Queue: *queue, After: after, Limit: api.MaxSchedulesLimit})
		if err != nil {
			return err
		}
		if a.asJSON {
			if err := printJSON(stdout, r); err != nil {
				return err
			}
		}
		all, pos = append(all, r.Schedules...), r.Position
		if after = r.Next; after == "" {
			break
		}
		if page+1 == maxSchedulePages {
			more = fmt.Sprintf("%d more schedules not shown (of %d)", r.Total-len(all), r.Total)
			break
		}
	}
	if a.asJSON {
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULE\tCRON\tZONE\tQUEUE\tMISSED\tNEXT\tFIRES\tREFUSED\tSKIPPED\tLAST JOB\tLAST")
	for _, s := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", s.ID, s.Cron, zoneLabel(s), s.Queue, s.Missed, nextLabel(s),
			s.Fires, s.Refused, s.Skipped, cmp.Or(s.LastJob, "-"), cmp.Or(s.LastReason, "-"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if more != "" {
		fmt.Fprintln(stdout, more)
	}
	if len(all) == 0 {
		fmt.Fprintln(stdout, "no schedule yet (tenure schedule set <id> --cron EXPR --queue Q makes one)")
	}
	if b := behind(pos); b != "" {
		fmt.Fprintln(stdout, strings.TrimPrefix(b, " "))
	}
	return nil
}

// zoneLabel is a schedule's zone as the list shows it: its name, else its
// rule, else UTC.
func zoneLabel(s api.ScheduleSummary) string {
	return cmp.Or(s.Zone, s.TZ, "UTC")
}

// nextLabel is a schedule's next due time in its zone (by its rule), or
// why it has none.
func nextLabel(s api.ScheduleSummary) string {
	switch {
	case s.Paused:
		return "paused"
	case s.Next == "":
		return "-"
	}
	t, err := time.Parse(time.RFC3339Nano, s.Next)
	if err != nil {
		return s.Next
	}
	if z, err := cron.ParseZone(cmp.Or(s.TZ, "UTC0")); err == nil {
		east, _ := z.Offset(t.Unix())
		t = t.In(time.FixedZone("", int(east)))
	}
	return t.Format("2006-01-02 15:04 -07:00")
}

// scheduleID reads the one positional argument, a schedule id.
func scheduleID(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := parsePositional(fs, args)
	if err != nil {
		return "", err
	}
	switch {
	case len(pos) == 0:
		return "", fmt.Errorf("%w: give the schedule id (see %s --help)", errUsage, fs.Name())
	case len(pos) > 1:
		return "", fmt.Errorf("%w: unexpected argument %q after the schedule id (see %s --help)", errUsage, pos[1], fs.Name())
	case !events.ValidToken(pos[0]) || len(pos[0]) > events.MaxScheduleIDLen:
		return "", fmt.Errorf("%w: schedule id %q: want 1 to %d of [A-Za-z0-9_-]", errUsage, pos[0], events.MaxScheduleIDLen)
	}
	return pos[0], nil
}

func runScheduleOp(ctx context.Context, fs *flag.FlagSet, args []string, stdout, _ io.Writer) error {
	var o opsCommand
	o.register(fs)
	id, err := scheduleID(fs, args)
	if err != nil {
		return err
	}
	op := strings.TrimPrefix(fs.Name(), "tenure schedule ")
	return o.run(ctx, stdout, func(ctx context.Context, c *ops.Client) (events.Decision, error) {
		switch op {
		case "pause":
			return c.PauseSchedule(ctx, id)
		case "resume":
			return c.ResumeSchedule(ctx, id)
		}
		return c.DeleteSchedule(ctx, id)
	})
}

func runScheduleSet(ctx context.Context, fs *flag.FlagSet, args []string, stdout, _ io.Writer) error {
	var o opsCommand
	o.register(fs)
	expr := fs.String("cron", "", "when it falls due: five fields, a macro or @every D (required)")
	zone := fs.String("zone", "", "the time zone: an IANA `NAME` or a POSIX TZ rule (default UTC)")
	missed := fs.String("missed", "skip", "what due times reached late do: skip, or once (the latest fires)")
	queue := fs.String("queue", "", "the queue of the jobs it fires (required)")
	priority := fs.Int("priority", 0, "0 to 9, higher is offered first")
	attempts := fs.Int("max-attempts", 0, "the attempt budget, 1 to 1000 (default 3)")
	backoff := fs.Duration("backoff", 0, "the wait before the first retry, doubled for each later one (default 1s)")
	backoffMax := fs.Duration("backoff-max", 0, "the cap of the backoff (default 1h)")
	lease := fs.Duration("lease", 0, "each attempt's lease duration (default: the policy's)")
	ackTimeout := fs.Duration("ack-timeout", 0, "the time each offered worker has to ACK (default: the policy's)")
	payload := fs.String("payload", "", "opaque text given to the worker with each offer, at most 4096 bytes")
	payloadFile := fs.String("payload-file", "", "read the payload from `FILE` (- for stdin)")
	uniqueKey := fs.String("unique-key", "", "a fire is refused while the last fire's job holds this `KEY`")
	concKey := fs.String("concurrency-key", "", "the jobs' concurrency `KEY` (tenure limit)")
	id, err := scheduleID(fs, args)
	if err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !given["cron"] {
		return fmt.Errorf("%w: give --cron (see tenure schedule set --help)", errUsage)
	}
	if err := needToken("queue", *queue); err != nil {
		return err
	}
	m, ok := events.ParseMissed(*missed)
	if !ok {
		return fmt.Errorf("%w: --missed %q: want skip or once", errUsage, *missed)
	}
	s := ops.Schedule{Cron: *expr, Zone: *zone, Missed: m, Queue: *queue}
	add := func(flag string, opt ops.SubmitOption) {
		if given[flag] {
			s.Job = append(s.Job, opt)
		}
	}
	add("priority", ops.WithPriority(*priority))
	add("max-attempts", ops.WithMaxAttempts(*attempts))
	if given["backoff"] || given["backoff-max"] {
		s.Job = append(s.Job, ops.WithBackoff(*backoff, *backoffMax))
	}
	add("lease", ops.WithLease(*lease))
	add("ack-timeout", ops.WithAckTimeout(*ackTimeout))
	add("unique-key", ops.WithUniqueKey(*uniqueKey))
	add("concurrency-key", ops.WithConcurrencyKey(*concKey))
	switch {
	case given["payload"] && given["payload-file"]:
		return fmt.Errorf("%w: --payload or --payload-file, not both", errUsage)
	case given["payload"]:
		s.Job = append(s.Job, ops.WithPayload(*payload))
	case given["payload-file"]:
		p, err := readPayload(*payloadFile)
		if err != nil {
			return err
		}
		s.Job = append(s.Job, ops.WithPayload(p))
	}
	// A mistake on the command line is a usage error, found before
	// anything is published: the options check their values,
	// ops.CheckSchedule the rest (the id, the expression, the zone).
	var check ops.SubmitOptions
	for _, opt := range s.Job {
		if err := opt(&check); err != nil {
			return fmt.Errorf("%w: %v (see tenure schedule set --help)", errUsage, err)
		}
	}
	if err := ops.CheckSchedule(id, s); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return o.run(ctx, stdout, func(ctx context.Context, c *ops.Client) (events.Decision, error) {
		return c.SetSchedule(ctx, id, s)
	})
}
