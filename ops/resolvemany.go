package ops

import (
	"context"
	"fmt"
	"sync"

	"github.com/maknow/tenure/events"
)

// ResolveResult is what became of one job of ResolveMany.
type ResolveResult struct {
	Job string
	// Decision is the job's verdict: resolved/retried or
	// resolved/discarded, or a refusal (rejected/nothing_to_resolve for a
	// job that is no longer DEAD). Zero when no verdict was learned.
	Decision events.Decision
	// Err is nil when the job was resolved; a *RejectedError for a
	// refusal; an error matching ErrNoVerdict when its verdict was not
	// learned in time (it may still be decided: a second retry of a job
	// retried already is rejected/nothing_to_resolve, never a second
	// retry); the publish's error when its input could not be stored.
	Err error
}

// maxResolvesInFlight bounds ResolveMany's inputs awaiting their verdicts.
const maxResolvesInFlight = 16

// ResolveMany gives each of jobs the operator's action on a DEAD queue
// job, events.ActionRetry or events.ActionDiscard (PROTOCOL.md §22.5):
// one resolve input per job, each judged on its own with its own verdict,
// as Retry and Discard do, up to 16 awaiting their verdicts at once. Its
// results are in the order of jobs. The error is nil when every job was
// resolved; else it names how many were not and the first (errors.Is and
// errors.As find that one's error; each result has its own).
//
// It is the bulk operation of `tenure resolve --queue Q --all-dead` and
// the board's: the caller chooses the jobs (the state API lists a queue's
// DEAD jobs). A job that is no longer DEAD when its input is judged
// (retried by someone else meanwhile, say) is rejected/nothing_to_resolve
// and nothing changes, so a bulk operation run twice does no harm. The
// arguments are checked first (an action other than retry or discard, an
// invalid job id, a reason over events.MaxTextLen bytes): nothing is
// published then.
func (c *Client) ResolveMany(ctx context.Context, action events.Action, jobs []string, reason string) ([]ResolveResult, error) {
	if action != events.ActionRetry && action != events.ActionDiscard {
		return nil, fmt.Errorf("ops: resolve many: action %s: want retry or discard", action)
	}
	if len(reason) > events.MaxTextLen {
		return nil, fmt.Errorf("ops: resolve many: the reason is %d bytes: at most %d", len(reason), events.MaxTextLen)
	}
	for i, j := range jobs {
		if !events.ValidToken(j) {
			return nil, fmt.Errorf("ops: resolve many: job %d: invalid id %q", i, j)
		}
	}
	results := make([]ResolveResult, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(maxResolvesInFlight, len(jobs)) {
		wg.Go(func() {
			for i := range next {
				d, err := c.do(ctx, &events.Input{Job: jobs[i], Verb: events.VerbResolve, Action: action, Text: reason})
				results[i] = ResolveResult{Job: jobs[i], Decision: d, Err: err}
			}
		})
	}
feed:
	for i := range jobs {
		select {
		case next <- i:
		case <-ctx.Done():
			for k := i; k < len(jobs); k++ {
				results[k] = ResolveResult{Job: jobs[k], Err: fmt.Errorf("ops: resolve %s: not sent: %w", jobs[k], ctx.Err())}
			}
			break feed
		}
	}
	close(next)
	wg.Wait()
	failed, first := 0, -1
	for i := range results {
		if results[i].Err != nil {
			failed++
			if first < 0 {
				first = i
			}
		}
	}
	if failed == 0 {
		return results, nil
	}
	return results, fmt.Errorf("ops: resolve many: %d of %d jobs not resolved; the first, %s: %w", failed, len(jobs), jobs[first], results[first].Err)
}
