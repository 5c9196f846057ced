package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/maknow/tenure/api"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/projector"
)

// maxDeadPages bounds the pages of DEAD jobs tenure resolve --all-dead
// reads (api.MaxJobsLimit jobs each): a million jobs.
const maxDeadPages = 10_000

// runResolveDead is `tenure resolve --queue Q --all-dead --action
// retry|discard`: the bulk operation on a queue's DEAD jobs (issue "flow
// control": each job's fate its own decision).
func runResolveDead(ctx context.Context, o *opsCommand, job, queue, action, lastReason, reason string, allDead, dryRun bool, stdout io.Writer) error {
	var act events.Action
	switch {
	case !allDead:
		return fmt.Errorf("%w: --queue, --last-reason and --dry-run go with --all-dead (or give --job alone)", errUsage)
	case job != "":
		return fmt.Errorf("%w: --all-dead acts on a queue's DEAD jobs: no --job with it", errUsage)
	case action == "retry":
		act = events.ActionRetry
	case action == "discard":
		act = events.ActionDiscard
	default:
		return fmt.Errorf("%w: --all-dead takes --action retry or discard", errUsage)
	}
	if err := needToken("queue", queue); err != nil {
		return err
	}
	if lastReason != "" {
		if !events.Reason(lastReason).Known() {
			return fmt.Errorf("%w: --last-reason %q is no reason of the protocol (PROTOCOL.md §11)", errUsage, lastReason)
		}
	}
	if o.receipts != "" {
		return fmt.Errorf("%w: --receipts is not taken with --all-dead (each job's verdict prints with --json)", errUsage)
	}
	if len(reason) > events.MaxTextLen {
		return fmt.Errorf("%w: --reason is %d bytes: at most %d", errUsage, len(reason), events.MaxTextLen)
	}
	nc, err := o.dial()
	if err != nil {
		return err
	}
	defer nc.Close()

	// The DEAD jobs of the queue, as the state API lists them now.
	ac := api.NewClient(nc, 10*time.Second)
	var jobs []string
	after := ""
	for page := 0; ; page++ {
		r, err := ac.Jobs(ctx, api.JobsRequest{Queue: queue, State: events.StateDead.String(), After: after, Limit: api.MaxJobsLimit})
		if err != nil {
			return fmt.Errorf("list the DEAD jobs of %s: %w", queue, err)
		}
		if !r.CaughtUp {
			return fmt.Errorf("the state API's read model is still catching up with the decision stream (at decision %d): its list of DEAD jobs would be partial; try again in a moment", r.Seq)
		}
		for _, j := range r.Jobs {
			if lastReason == "" || j.LastReason == lastReason {
				jobs = append(jobs, j.ID)
			}
		}
		if after = r.Next; after == "" {
			break
		}
		if page+1 == maxDeadPages {
			return fmt.Errorf("queue %s has more than %d DEAD jobs: narrow the run with --last-reason", queue, maxDeadPages*api.MaxJobsLimit)
		}
	}
	which := "DEAD jobs of " + queue
	if lastReason != "" {
		which += " whose last attempt ended " + lastReason
	}
	if len(jobs) == 0 {
		fmt.Fprintf(stdout, "no %s\n", which)
		return nil
	}
	if dryRun {
		for _, j := range jobs {
			fmt.Fprintln(stdout, j)
		}
		fmt.Fprintf(stdout, "%d %s (a dry run: nothing sent)\n", len(jobs), which)
		return nil
	}

	c, err := ops.New(nc, o.as, ops.WithPrefix(o.prefix))
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	defer c.Close()
	results, err := c.ResolveMany(ctx, act, jobs, reason)
	done := 0
	for _, r := range results {
		switch {
		case r.Err == nil:
			done++
			if o.asJSON {
				fmt.Fprintf(stdout, "%s\n", events.AppendDecision(nil, &r.Decision))
			}
		case r.Decision.Kind != events.KindNone:
			if o.asJSON {
				fmt.Fprintf(stdout, "%s\n", events.AppendDecision(nil, &r.Decision))
			} else {
				fmt.Fprintf(stdout, "%s: %s\n", r.Job, projector.Describe(&r.Decision, 0))
			}
		default:
			if !o.asJSON {
				fmt.Fprintf(stdout, "%s: %v\n", r.Job, r.Err)
			}
		}
	}
	verb := map[events.Action]string{events.ActionRetry: "retried", events.ActionDiscard: "discarded"}[act]
	if !o.asJSON {
		fmt.Fprintf(stdout, "%s %d of %d %s\n", verb, done, len(jobs), which)
	}
	return err
}
