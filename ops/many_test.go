package ops_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ops"
)

// inputsAfter reads the inputs stored in TENURE_IN after sequence after.
func inputsAfter(t *testing.T, js jetstream.JetStream, after uint64) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, "TENURE_IN")
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := after + 1; ; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
}

// SubmitMany sends 603 jobs in three batch submits (256 jobs an input at
// most), each job with its own verdict in the order given: a job named
// again with the same fields is a duplicate (no error), with other fields
// or a lease outside the policy a refusal of that job alone.
func TestSubmitMany(t *testing.T) {
	c, js := startTenureJS(t)
	ctx := context.Background()
	inBefore, _ := lastSeqs(t, js)
	var jobs []ops.SubmitJob
	for i := range 600 {
		jobs = append(jobs, ops.SubmitJob{ID: fmt.Sprintf("m-%03d", i), Queue: "emails",
			Options: ops.SubmitOptions{Payload: fmt.Sprintf("p%d", i), HasPayload: true}})
	}
	jobs = append(jobs,
		jobs[599], // the same again: a duplicate
		ops.SubmitJob{ID: "m-000", Queue: "emails", Options: ops.SubmitOptions{Priority: 3, Payload: "p0", HasPayload: true}}, // a conflict
		ops.SubmitJob{ID: "m-long", Queue: "emails", Options: ops.SubmitOptions{Lease: 2 * time.Hour}},                        // out of policy
	)
	res, err := c.SubmitMany(ctx, jobs)
	var rej *ops.RejectedError
	if !errors.As(err, &rej) || rej.Reason != events.ReasonSubmitConflicts || !strings.Contains(err.Error(), "2 of 603 jobs not submitted; the first, m-000") {
		t.Fatalf("SubmitMany: %v, want 2 of 603 not submitted, the first a submit_conflicts", err)
	}
	if len(res) != len(jobs) {
		t.Fatalf("%d results for %d jobs", len(res), len(jobs))
	}
	for i, r := range res {
		d := r.Decision
		switch {
		case i < 600:
			if r.Err != nil || d.Kind != events.KindSubmitted || d.Job.ID != jobs[i].ID || d.Job.Payload != jobs[i].Options.Payload {
				t.Fatalf("job %d: %v %s/%s %s", i, r.Err, d.Kind, d.Reason, d.Job.ID)
			}
		case i == 600:
			if r.Err != nil || !ops.IsDuplicateSubmit(d) || d.Job.ID != "m-599" {
				t.Fatalf("job %d, m-599 again: %v %s/%s", i, r.Err, d.Kind, d.Reason)
			}
		case i == 601:
			if !errors.As(r.Err, &rej) || rej.Reason != events.ReasonSubmitConflicts || d.Job.ID != "m-000" {
				t.Fatalf("job %d, m-000 with another priority: %v", i, r.Err)
			}
		case i == 602:
			if !errors.As(r.Err, &rej) || rej.Reason != events.ReasonDurationOutOfPolicy || d.Job.ID != "m-long" {
				t.Fatalf("job %d, a lease of 2h: %v", i, r.Err)
			}
		}
	}
	// Three inputs, all batch submits of at most 256 jobs, in order.
	ins := inputsAfter(t, js, inBefore)
	if len(ins) != 3 {
		t.Fatalf("%d inputs stored, want 3 batch submits", len(ins))
	}
	n := 0
	for k, m := range ins {
		var in events.Input
		if err := events.DecodeInput(m.Subject, m.Data, &in); err != nil || m.Subject != "tenure.in.ops.disp._.submit" {
			t.Fatalf("input %d on %s: %v", m.Sequence, m.Subject, err)
		}
		if len(in.Batch) > events.MaxBatch || k < 2 && len(in.Batch) != events.MaxBatch {
			t.Fatalf("input %d holds %d jobs", m.Sequence, len(in.Batch))
		}
		for _, e := range in.Batch {
			if e.Job != jobs[n].ID {
				t.Fatalf("element %d of input %d is %s, want %s (the order given)", n, m.Sequence, e.Job, jobs[n].ID)
			}
			n++
		}
	}
	// The jobs of one batch are offered in the order given: a worker
	// with one slot gets m-000 first.
	if n != len(jobs) {
		t.Fatalf("%d jobs in the inputs, want %d", n, len(jobs))
	}
}

// Every job is checked before anything is published: one invalid job
// fails the call, naming it, and no input is stored.
func TestSubmitManyChecksFirst(t *testing.T) {
	c, js := startTenureJS(t)
	ctx := context.Background()
	before, _ := lastSeqs(t, js)
	good := ops.SubmitJob{ID: "ok", Queue: "q"}
	for name, bad := range map[string]ops.SubmitJob{
		"job id":        {ID: "a.b", Queue: "q"},
		"reserved id":   {ID: "_", Queue: "q"},
		"queue":         {ID: "x", Queue: ""},
		"priority":      {ID: "x", Queue: "q", Options: ops.SubmitOptions{Priority: 10}},
		"negative":      {ID: "x", Queue: "q", Options: ops.SubmitOptions{Priority: -1}},
		"attempts":      {ID: "x", Queue: "q", Options: ops.SubmitOptions{MaxAttempts: events.MaxAttempts + 1}},
		"backoff cap":   {ID: "x", Queue: "q", Options: ops.SubmitOptions{Backoff: time.Minute, BackoffMax: time.Second}},
		"lease in µs":   {ID: "x", Queue: "q", Options: ops.SubmitOptions{Lease: time.Microsecond}},
		"payload size":  {ID: "x", Queue: "q", Options: ops.SubmitOptions{Payload: strings.Repeat("a", events.MaxPayloadBytes+1), HasPayload: true}},
		"payload utf8":  {ID: "x", Queue: "q", Options: ops.SubmitOptions{Payload: "\xff", HasPayload: true}},
		"no HasPayload": {ID: "x", Queue: "q", Options: ops.SubmitOptions{Payload: "p"}},
		// A batch's elements take none of rules revision 8's fields: such
		// a job goes alone, with Submit (else they would be dropped).
		"run at":     {ID: "x", Queue: "q", Options: ops.SubmitOptions{RunAt: time.Unix(1777597200, 0)}},
		"delay":      {ID: "x", Queue: "q", Options: ops.SubmitOptions{Delay: time.Second}},
		"unique key": {ID: "x", Queue: "q", Options: ops.SubmitOptions{UniqueKey: "k"}},
		"unique for": {ID: "x", Queue: "q", Options: ops.SubmitOptions{UniqueKey: "k", UniqueFor: time.Second}},
	} {
		res, err := c.SubmitMany(ctx, []ops.SubmitJob{good, good, bad})
		if err == nil || res != nil || !strings.Contains(err.Error(), "job 2") {
			t.Errorf("%s: %v (%d results), want an error naming job 2", name, err, len(res))
		}
	}
	if after, _ := lastSeqs(t, js); after != before {
		t.Fatalf("inputs %d to %d stored by calls that should publish nothing", before+1, after)
	}
	if res, err := c.SubmitMany(ctx, nil); err != nil || len(res) != 0 {
		t.Fatalf("no jobs: %v %v", res, err)
	}
}

// Jobs with large payloads take several inputs, none over the protocol's
// 64 KiB.
func TestSubmitManyLargePayloads(t *testing.T) {
	c, js := startTenureJS(t)
	ctx := context.Background()
	before, _ := lastSeqs(t, js)
	var jobs []ops.SubmitJob
	for i := range 40 {
		p := strings.Repeat(string(rune('a'+i%26)), events.MaxPayloadBytes-4) + "\"\n\\\x01" // escaped, it is longer
		jobs = append(jobs, ops.SubmitJob{ID: fmt.Sprintf("big-%d", i), Queue: "q", Options: ops.SubmitOptions{Payload: p, HasPayload: true}})
	}
	res, err := c.SubmitMany(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Decision.Kind != events.KindSubmitted || r.Decision.Job.Payload != jobs[i].Options.Payload {
			t.Fatalf("job %d: %s/%s", i, r.Decision.Kind, r.Decision.Reason)
		}
	}
	ins := inputsAfter(t, js, before)
	if len(ins) < 3 {
		t.Fatalf("%d inputs for 40 jobs of 4 KiB", len(ins))
	}
	for _, m := range ins {
		if len(m.Data) > events.MaxInputBytes {
			t.Fatalf("input %d has %d bytes", m.Sequence, len(m.Data))
		}
	}
}

// The client reads its submits' verdicts with one decision consumer,
// created on its first submit and deleted by Close: 30 submits, single and
// batched, one after the other and at once, create one consumer.
func TestSubmitsShareOneReader(t *testing.T) {
	c, js := startTenureJS(t)
	ctx := context.Background()
	var creates, deletes atomic.Int64
	sub := func(subject string, n *atomic.Int64) {
		s, err := js.Conn().Subscribe(subject, func(*nats.Msg) { n.Add(1) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Unsubscribe() })
	}
	sub("$JS.API.CONSUMER.CREATE.TENURE_OUT.>", &creates)
	sub("$JS.API.CONSUMER.DELETE.TENURE_OUT.>", &deletes)
	if err := js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := c.Submit(ctx, fmt.Sprintf("one-%d", i), "q"); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 10)
	for i := range 10 {
		go func() {
			_, err := c.SubmitMany(ctx, []ops.SubmitJob{{ID: fmt.Sprintf("two-%d-a", i), Queue: "q"}, {ID: fmt.Sprintf("two-%d-b", i), Queue: "q"}})
			errs <- err
		}()
	}
	for range 10 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if n, d := creates.Load(), deletes.Load(); n != 1 || d != 0 {
		t.Fatalf("%d consumers created and %d deleted for 30 calls, want 1 and 0", n, d)
	}
	c.Close()
	testutil.WaitFor(t, 2*time.Second, "the reader's consumer deleted", func() bool { return deletes.Load() == 1 })
}
