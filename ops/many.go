package ops

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/receipt"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/tracing"
	"github.com/maknow/tenure/verdict"
)

// SubmitJob is one job of SubmitMany: its id, its queue and the optional
// fields of its submit (PROTOCOL.md §22.1; the zero value of each is the
// protocol's default). Check the options with the SubmitOption functions,
// or SubmitMany checks them as they would.
type SubmitJob struct {
	ID      string
	Queue   string
	Options SubmitOptions
}

// SubmitResult is what became of one job of SubmitMany.
type SubmitResult struct {
	// Decision is the job's verdict: submitted/ok, or
	// duplicate/duplicate_submit for a job already submitted with the same
	// fields (no error, as for Submit), or a refusal. Zero when no verdict
	// was learned.
	Decision events.Decision
	// Err is nil when the job is in its queue (submitted now or before,
	// with the same fields); a *RejectedError for a refusal
	// (submit_conflicts, job_exists, duration_out_of_policy, ...); an
	// error matching ErrNoVerdict when its input's verdicts were not
	// learned in time (it may still be decided: submitting the same jobs
	// again is safe, a duplicate of a stored submit is no error); the
	// publish's error when its input could not be stored.
	Err error
}

// maxInputsInFlight bounds SubmitMany's inputs published and awaiting
// their verdicts: enough to keep the coordinator's pipeline busy, few
// enough that a failing call stops soon.
const maxInputsInFlight = 8

// SubmitMany submits jobs in few inputs (PROTOCOL.md §22.9): each
// partition's jobs in batch submits of up to events.MaxBatch jobs and
// events.MaxInputBytes bytes, in the order given, each job still judged on
// its own, with its own verdict. Its results are in the order of jobs. The
// error is nil when every job is in its queue; else it names how many are
// not and the first (errors.Is and errors.As find that one's error; each
// result has its own).
//
// Every job is checked first (ids and queues are tokens, the options
// within their ranges, as the coordinator's decoder checks them): one
// invalid job fails the call with an error naming it, and nothing is
// published. A job named twice is submitted twice (the second is a
// duplicate of the first when its fields are equal, else
// rejected/submit_conflicts).
//
// Up to eight inputs are in flight at once; without a deadline of ctx's
// own, each input's publish and verdicts are bounded by Options.Timeout.
// A log below rules revision 7 (a coordinator older than batches) refuses
// a batch as bad_subject: SubmitMany then submits those jobs one by one,
// and every later call of the Client does.
func (c *Client) SubmitMany(ctx context.Context, jobs []SubmitJob) ([]SubmitResult, error) {
	ctx, span := c.tracer.Start(ctx, tracing.SpanSubmit, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.Int("tenure.submit.jobs", len(jobs))))
	defer span.End()
	ins := make([]events.Input, len(jobs))
	for i := range jobs {
		in, err := submitInput(&jobs[i])
		if err != nil {
			return nil, fmt.Errorf("ops: submit many: job %d: %w", i, err)
		}
		ins[i] = in
	}
	count, err := c.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	results := make([]SubmitResult, len(jobs))
	// Each partition's jobs in their order, cut into batches.
	type batch struct {
		part events.Partition
		idx  []int // into jobs
	}
	var batches []batch
	open := map[uint32]int{} // partition -> its batch being filled (index into batches)
	size := map[uint32]int{} // its body's size so far
	for i := range ins {
		part := events.Partition{Count: count}.Of(ins[i].Job)
		ins[i].Role, ins[i].Actor = events.RoleOps, c.id
		n := len(events.AppendInputBody(nil, &ins[i])) + len(ins[i].Job) + 16 // the element: its fields, its job
		b, ok := open[part.Index]
		if !ok || len(batches[b].idx) == events.MaxBatch || size[part.Index]+n > events.MaxInputBytes-64 {
			batches = append(batches, batch{part: part})
			b, open[part.Index], size[part.Index] = len(batches)-1, len(batches)-1, 0
		}
		batches[b].idx = append(batches[b].idx, i)
		size[part.Index] += n
	}
	sem := make(chan struct{}, maxInputsInFlight)
	var wg sync.WaitGroup
	for _, b := range batches {
		if ctx.Err() == nil {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			for _, i := range b.idx {
				results[i].Err = &noVerdictError{fmt.Sprintf("ops: submit %s: not sent: %v", jobs[i].ID, context.Cause(ctx))}
			}
			continue
		}
		// Published here, in order (a submitter's jobs are offered in the
		// order they were stored); their verdicts awaited meanwhile.
		bctx, cancel := c.withTimeout(ctx)
		sent := c.sendBatch(bctx, b.part, b.idx, ins)
		wg.Go(func() {
			defer func() { <-sem }()
			defer cancel()
			c.finishBatch(bctx, sent, b.part, b.idx, ins, results)
		})
	}
	wg.Wait()
	failed, first := 0, -1
	for i := range results {
		if results[i].Err != nil {
			if failed++; first < 0 {
				first = i
			}
		}
	}
	if failed == 0 {
		return results, nil
	}
	return results, fmt.Errorf("ops: submit many: %d of %d jobs not submitted; the first, %s: %w", failed, len(jobs), jobs[first].ID, results[first].Err)
}

// sent is a batch submit published asynchronously: its future PubAck,
// or why it could not be published.
type sent struct {
	subject, msgID string
	body           []byte
	fut            jetstream.PubAckFuture
	err            error
	each           bool // submitted one by one instead (a single job, or no batches)
}

// sendBatch publishes the jobs idx (of ins, one partition's) as one batch
// submit, without waiting for its PubAck.
func (c *Client) sendBatch(ctx context.Context, part events.Partition, idx []int, ins []events.Input) sent {
	if len(idx) == 1 || c.noBatch.Load() {
		return sent{each: true}
	}
	if _, err := c.readerOf(ctx, part); err != nil {
		return sent{err: err}
	}
	in := events.Input{Role: events.RoleOps, Actor: c.id, Job: events.NoJob, Verb: events.VerbSubmit, Batch: make([]events.Input, len(idx))}
	for k, i := range idx {
		in.Batch[k] = ins[i]
	}
	s := sent{subject: part.InputSubject(events.RoleOps, c.id, events.NoJob, events.VerbSubmit), msgID: c.newMsgID(), body: events.AppendInputBody(nil, &in)}
	expect := ""
	if part.Partitioned() {
		expect = streams.Topology{Prefix: c.prefix, Partition: part}.InputStream()
	}
	msg := &nats.Msg{Subject: s.subject, Data: s.body}
	tracing.Inject(ctx, c.prop, msg)
	s.fut, s.err = c.tr.PublishAsync(msg, s.msgID, expect)
	return s
}

// finishBatch learns what became of a batch sendBatch published (its
// PubAck, resending it with the same Msg-Id if that is not known, then its
// verdicts), or submits its jobs one by one, and fills their results.
func (c *Client) finishBatch(ctx context.Context, s sent, part events.Partition, idx []int, ins []events.Input, results []SubmitResult) {
	if s.each {
		c.submitEach(ctx, part, idx, ins, results)
		return
	}
	var key verdictKey
	err := s.err
	if err == nil {
		select {
		case ack := <-s.fut.Ok():
			c.keep(receipt.Input(ack.Stream, ack.Sequence, s.subject, s.body, "ops "+c.id))
			key = verdictKey{part.Index, ack.Sequence}
		case err = <-s.fut.Err():
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
	}
	if err != nil && (s.fut == nil || retryable(err)) && ctx.Err() == nil {
		key, err = c.publish(ctx, part, s.subject, s.body, s.msgID) // the same Msg-Id: stored once
	}
	var ds []events.Decision
	if err == nil {
		ds, err = c.await(ctx, key, len(idx), events.VerbSubmit, events.NoJob)
	}
	if len(ds) == 1 && ds[0].Job.ID == events.NoJob {
		d := ds[0]
		if d.Kind == events.KindRejected && d.Reason == events.ReasonBadSubject {
			// A log below rules revision 7: no batches there.
			c.noBatch.Store(true)
			c.submitEach(ctx, part, idx, ins, results)
			return
		}
		for _, i := range idx { // the whole input refused (a broken contract of this client's)
			results[i] = SubmitResult{Decision: d, Err: verdict.Of(events.RoleOps, d)}
		}
		return
	}
	for k, i := range idx {
		if k >= len(ds) {
			e := err
			if e == nil {
				e = &noVerdictError{fmt.Sprintf("ops: submit %s: verdict missing", ins[i].Job)}
			}
			results[i].Err = e
			continue
		}
		d := ds[k]
		if d.Job.ID != ins[i].Job {
			results[i].Err = fmt.Errorf("ops: submit %s: verdict %d of the batch is about job %s", ins[i].Job, k, d.Job.ID)
			continue
		}
		results[i] = submitResult(d)
	}
}

// submitEach submits the jobs idx one per input, in order.
func (c *Client) submitEach(ctx context.Context, part events.Partition, idx []int, ins []events.Input, results []SubmitResult) {
	for _, i := range idx {
		in := ins[i]
		ds, err := c.send(ctx, part, &in, 1)
		if err != nil {
			results[i].Err = err
			continue
		}
		results[i] = submitResult(ds[0])
	}
}

func submitResult(d events.Decision) SubmitResult {
	err := verdict.Of(events.RoleOps, d)
	if err != nil && IsDuplicateSubmit(d) {
		err = nil
	}
	return SubmitResult{Decision: d, Err: err}
}

// submitInput checks one job of SubmitMany and returns its submit.
func submitInput(j *SubmitJob) (events.Input, error) {
	if !events.ValidToken(j.ID) {
		return events.Input{}, fmt.Errorf("invalid job id %q", j.ID)
	}
	if !events.ValidToken(j.Queue) {
		return events.Input{}, fmt.Errorf("%s: invalid queue name %q", j.ID, j.Queue)
	}
	o := j.Options
	if !o.RunAt.IsZero() || o.Delay != 0 || o.UniqueKey != "" || o.UniqueFor != 0 || o.ConcurrencyKey != "" {
		// A batch's elements take none of the fields of rules revisions
		// 8 and 9 (PROTOCOL.md §22.9, §26): such a job goes alone, with
		// Submit.
		return events.Input{}, fmt.Errorf("%s: a run_at, delay, unique key or concurrency key goes in a single submit (Submit), not a batch", j.ID)
	}
	var check SubmitOptions
	opts := []SubmitOption{WithPriority(int(o.Priority)), WithLease(o.Lease), WithAckTimeout(o.AckTimeout), WithBackoff(o.Backoff, o.BackoffMax)}
	if o.MaxAttempts != 0 {
		opts = append(opts, WithMaxAttempts(int(min(o.MaxAttempts, events.MaxAttempts+1))))
	}
	if o.HasPayload {
		opts = append(opts, WithPayload(o.Payload))
	} else if o.Payload != "" {
		return events.Input{}, fmt.Errorf("%s: a payload without HasPayload", j.ID)
	}
	for _, opt := range opts {
		if err := opt(&check); err != nil {
			return events.Input{}, fmt.Errorf("%s: %w", j.ID, err)
		}
	}
	return events.Input{Job: j.ID, Verb: events.VerbSubmit, Queue: j.Queue,
		Priority: o.Priority, MaxAttempts: o.MaxAttempts,
		BackoffMS: o.Backoff.Milliseconds(), BackoffMax: o.BackoffMax.Milliseconds(),
		LeaseMS: o.Lease.Milliseconds(), AckTimeoutMS: o.AckTimeout.Milliseconds(),
		Payload: o.Payload, HasPayload: o.HasPayload}, nil
}
