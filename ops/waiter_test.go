package ops

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/follow"
)

// An input sequence names one input only while the stream keeps it: after
// a server lost its unsynced tail, another input of this client may be
// stored at the sequence of one whose PubAck came back. A call takes only
// the verdicts of its own input's verb and job (any job for a batch), or
// about no job; two calls waiting at one sequence each get their own, and
// the lost input's call learns no verdict.
func TestVerdictOfAnotherInputAtItsSequence(t *testing.T) {
	c := &Client{id: "op", waiters: map[verdictKey][]*waiter{}, stashN: map[verdictKey]int{}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	defer c.cancel()
	const seq = 1 << 40
	k := verdictKey{0, seq}
	deliver := func(verb events.Verb, job string, kind events.Kind) {
		d := events.Decision{Cause: seq, Kind: kind, Reason: events.ReasonOk, Role: events.RoleOps, Actor: "op",
			Verb: verb, Addressee: "op", Job: events.Job{ID: job, State: events.StateQueued}}
		c.onDecision(0, "TENURE_OUT", follow.Msg{Seq: 7, Data: events.AppendDecision(nil, &d)})
	}
	type got struct {
		ds  []events.Decision
		err error
	}
	wait := func(ctx context.Context, verb events.Verb, job string) chan got {
		ch := make(chan got, 1)
		go func() {
			ds, err := c.await(ctx, k, 1, verb, job)
			ch <- got{ds, err}
		}()
		return ch
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	lost := wait(short, events.VerbSubmit, events.NoJob) // a batch submit the server lost
	cancelJob := wait(ctx, events.VerbCancel, "a2")
	time.Sleep(50 * time.Millisecond)
	deliver(events.VerbCancel, "a1", events.KindCancelRequested) // same verb, another job: nobody's here
	deliver(events.VerbCancel, "a2", events.KindCancelRequested)
	if g := <-cancelJob; g.err != nil || g.ds[0].Job.ID != "a2" {
		t.Fatalf("the cancel of a2 got %v, %v", g.ds, g.err)
	}
	if g := <-lost; !errors.Is(g.err, ErrNoVerdict) || len(g.ds) != 0 {
		t.Fatalf("the lost submit got %v, %v; want no verdict", g.ds, g.err)
	}
	if ds, err := c.await(ctx, k, 1, events.VerbCancel, "a1"); err != nil || ds[0].Job.ID != "a1" {
		t.Fatalf("the cancel of a1, stashed: %v, %v", ds, err)
	}
	// A verdict with no verb (a verb the log's rules do not know) is the
	// waiting input's own.
	deliver(events.VerbNone, events.NoJob, events.KindRejected)
	if ds, err := c.await(ctx, k, 1, events.VerbSubmit, events.NoJob); err != nil || ds[0].Kind != events.KindRejected {
		t.Fatalf("the verb the rules do not know: %v, %v", ds, err)
	}
}
