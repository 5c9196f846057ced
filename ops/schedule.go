package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/maknow/tenure/cron"
	"github.com/maknow/tenure/cron/tzdb"
	"github.com/maknow/tenure/events"
)

// Schedule is a cron schedule's definition (rules revision 10, PROTOCOL.md
// §26.6): when it falls due, in which zone, what to do with due times
// reached late, and the job it fires each time.
type Schedule struct {
	// Cron is five fields (minute hour day-of-month month day-of-week), a
	// macro (@hourly, @daily, ...) or @every D (a duration of 1s to 366
	// days).
	Cron string
	// Zone is an IANA name (Europe/Berlin), resolved here, once, to the
	// POSIX TZ rule the schedule carries (package tzdb: this host's time
	// zone database), or a POSIX TZ rule itself; "" is UTC. The fold
	// fires by the rule, so a replay elsewhere fires at the same instants.
	Zone string
	// Missed is what due times reached late do: events.MissedSkip (the
	// default) records them and fires none, events.MissedOnce fires the
	// latest however late.
	Missed events.Missed
	// Queue is the queue of the jobs it fires.
	Queue string
	// Job shapes the jobs it fires, as a submit's options; WithRunAt,
	// WithDelay and WithUniqueFor do not apply (an error).
	Job []SubmitOption
}

// SetSchedule defines schedule id (at most events.MaxScheduleIDLen
// characters), or replaces its definition. Its verdict is
// schedule_set/ok, whose Schedule holds the definition and the next due
// time (Schedule.Next). The fold fires it: each due time once, as a
// submit of the template by this client's actor, of the job
// "<id>-<due time as 20060102T150405Z>" (with a suffix in a partitioned
// deployment, which sends the schedule to its id's partition alone). A
// refusal is a *RejectedError: schedules_full (1,024 defined),
// duration_out_of_policy (the template's lease), the decoder's reasons.
// s is checked as the decoder would before anything is sent.
func (c *Client) SetSchedule(ctx context.Context, id string, s Schedule) (events.Decision, error) {
	in, err := scheduleInput(id, s)
	if err != nil {
		return events.Decision{}, err
	}
	return c.schedule(ctx, &in)
}

// CheckSchedule returns the error SetSchedule would return for id and s
// before sending anything (a command line checks its flags so).
func CheckSchedule(id string, s Schedule) error {
	_, err := scheduleInput(id, s)
	return err
}

// scheduleInput is the schedule input that sets id to s, checked as the
// decoder would check it (the zone resolved to its rule).
func scheduleInput(id string, s Schedule) (events.Input, error) {
	if err := checkScheduleID(id); err != nil {
		return events.Input{}, err
	}
	if len(s.Cron) > cron.MaxExprLen {
		return events.Input{}, fmt.Errorf("ops: schedule %s: expression of %d bytes, over %d", id, len(s.Cron), cron.MaxExprLen)
	}
	if _, err := cron.Parse(s.Cron); err != nil {
		return events.Input{}, fmt.Errorf("ops: schedule %s: %w", id, oneLine(err, cron.ErrSyntax))
	}
	if !events.ValidToken(s.Queue) {
		return events.Input{}, fmt.Errorf("ops: schedule %s: invalid queue name %q", id, s.Queue)
	}
	if s.Missed != events.MissedSkip && s.Missed != events.MissedOnce {
		return events.Input{}, fmt.Errorf("ops: schedule %s: missed policy %d: want skip or once", id, s.Missed)
	}
	in := events.Input{Job: events.NoJob, Verb: events.VerbSchedule, Schedule: id, Cron: s.Cron, Queue: s.Queue, Missed: s.Missed}
	if s.Zone != "" {
		_, rule, err := tzdb.Resolve(s.Zone)
		if err != nil {
			return events.Input{}, fmt.Errorf("ops: schedule %s: zone %q: %w", id, s.Zone, oneLine(err, cron.ErrZone))
		}
		if len(rule) > cron.MaxZoneLen {
			return events.Input{}, fmt.Errorf("ops: schedule %s: zone %q: rule of %d bytes, over %d", id, s.Zone, len(rule), cron.MaxZoneLen)
		}
		in.TZ = rule
		if rule != s.Zone && len(s.Zone) <= 64 {
			in.Zone = s.Zone // the name it came from, shown only
		}
	}
	var o SubmitOptions
	for _, opt := range s.Job {
		if err := opt(&o); err != nil {
			return events.Input{}, fmt.Errorf("ops: schedule %s: %w", id, err)
		}
	}
	switch {
	case !o.RunAt.IsZero() || o.Delay != 0:
		return events.Input{}, fmt.Errorf("ops: schedule %s: a schedule's jobs run when it falls due: no run at or delay", id)
	case o.UniqueFor != 0:
		return events.Input{}, fmt.Errorf("ops: schedule %s: a schedule's jobs take no unique for", id)
	}
	in.Priority, in.MaxAttempts = o.Priority, o.MaxAttempts
	in.BackoffMS, in.BackoffMax = o.Backoff.Milliseconds(), o.BackoffMax.Milliseconds()
	in.LeaseMS, in.AckTimeoutMS = o.Lease.Milliseconds(), o.AckTimeout.Milliseconds()
	in.Payload, in.HasPayload = o.Payload, o.HasPayload
	in.UniqueKey, in.ConcurrencyKey = o.UniqueKey, o.ConcurrencyKey
	return in, nil
}

// PauseSchedule stops schedule id from firing until ResumeSchedule: the
// due times that pass meanwhile are recorded at the resume
// (schedule_missed/paused_through), none fired. Its verdict is
// schedule_set/ok (Schedule.Paused); no_such_schedule is a *RejectedError.
func (c *Client) PauseSchedule(ctx context.Context, id string) (events.Decision, error) {
	return c.scheduleOp(ctx, id, events.SchedulePause)
}

// ResumeSchedule makes a paused schedule fire again, from its next due
// time after the resume (schedule_set/ok, Schedule.Next).
func (c *Client) ResumeSchedule(ctx context.Context, id string) (events.Decision, error) {
	return c.scheduleOp(ctx, id, events.ScheduleResume)
}

// DeleteSchedule forgets schedule id (schedule_deleted/ok); the jobs it
// fired stay.
func (c *Client) DeleteSchedule(ctx context.Context, id string) (events.Decision, error) {
	return c.scheduleOp(ctx, id, events.ScheduleDelete)
}

func (c *Client) scheduleOp(ctx context.Context, id string, op events.ScheduleOp) (events.Decision, error) {
	if err := checkScheduleID(id); err != nil {
		return events.Decision{}, err
	}
	return c.schedule(ctx, &events.Input{Job: events.NoJob, Verb: events.VerbSchedule, Schedule: id, ScheduleOp: op})
}

// schedule sends a schedule input to the partition of its schedule (the
// one its fold keeps it in) and waits for its verdict.
func (c *Client) schedule(ctx context.Context, in *events.Input) (events.Decision, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	count, err := c.Partitions(ctx)
	if err != nil {
		return events.Decision{}, err
	}
	return c.doIn(ctx, events.Partition{Count: count}.Of(in.Schedule), in)
}

func checkScheduleID(id string) error {
	if !events.ValidToken(id) || len(id) > events.MaxScheduleIDLen {
		return fmt.Errorf("ops: invalid schedule id %q: a token of at most %d characters", id, events.MaxScheduleIDLen)
	}
	return nil
}

// oneLine is err, a package cron error (sentinel and its reason joined on
// two lines), on one line; it still matches sentinel.
func oneLine(err, sentinel error) error {
	if !errors.Is(err, sentinel) {
		return err
	}
	return fmt.Errorf("%w: %s", sentinel, strings.ReplaceAll(strings.TrimPrefix(err.Error(), sentinel.Error()+"\n"), "\n", "; "))
}
