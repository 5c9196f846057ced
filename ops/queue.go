package ops

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/tracing"
)

// SubmitOptions are the optional fields of a submit (PROTOCOL.md §22.1).
// A zero value stands for the protocol's default; set them with the
// SubmitOption functions, which check each value as the coordinator's
// decoder would.
type SubmitOptions struct {
	Priority    int64         // 0 (default) to events.MaxPriority; higher is offered first
	MaxAttempts uint64        // the attempt budget; 0: events.DefaultMaxAttempts
	Backoff     time.Duration // before the first retry; 0: events.DefaultBackoffMS
	BackoffMax  time.Duration // the backoff's cap; 0: events.DefaultBackoffMax
	Lease       time.Duration // each attempt's lease; 0: the policy's default_lease_ms at the offer
	AckTimeout  time.Duration // each attempt's ACK timeout; 0: the policy's ack_timeout_ms at the offer
	Payload     string        // opaque, at most events.MaxPayloadBytes of UTF-8
	HasPayload  bool          // the submit carries Payload (an empty payload is a payload)
	// Rules revision 8 (PROTOCOL.md §26.1): not offered before RunAt, or
	// before the submit's stored time plus Delay (whole milliseconds, at
	// most events.MaxDelayMS). They exclude each other.
	RunAt time.Time
	Delay time.Duration
	// Rules revision 8 (PROTOCOL.md §26.2): no other job of the queue
	// naming UniqueKey is submitted while this one holds it (while it
	// lives, and UniqueFor after it ended); UniqueFor needs UniqueKey.
	UniqueKey string
	UniqueFor time.Duration
	// Rules revision 9 (PROTOCOL.md §26.4): the job's concurrency key;
	// while an operator's limit of the key is in force on the queue
	// (SetLimit), at most its max_active jobs naming it run at once, and
	// its rate limit, if any, applies to them.
	ConcurrencyKey string
}

// SubmitOption sets one of SubmitOptions, or returns why its value is
// invalid (Submit then fails with it, publishing nothing).
type SubmitOption func(*SubmitOptions) error

// WithPriority sets SubmitOptions.Priority: 0 to events.MaxPriority.
func WithPriority(p int) SubmitOption {
	return func(o *SubmitOptions) error {
		if p < 0 || p > events.MaxPriority {
			return fmt.Errorf("priority %d: want 0 to %d", p, events.MaxPriority)
		}
		o.Priority = int64(p)
		return nil
	}
}

// WithMaxAttempts sets SubmitOptions.MaxAttempts: 1 to events.MaxAttempts.
func WithMaxAttempts(n int) SubmitOption {
	return func(o *SubmitOptions) error {
		if n < 1 || n > events.MaxAttempts {
			return fmt.Errorf("max attempts %d: want 1 to %d", n, events.MaxAttempts)
		}
		o.MaxAttempts = uint64(n)
		return nil
	}
}

// WithBackoff sets SubmitOptions.Backoff and BackoffMax: the wait before
// the first retry, doubled for each later one up to the cap. Both are
// whole milliseconds within the protocol's durations, and the cap is at
// least the backoff; a zero one stands for its default (then the other is
// checked against that default).
func WithBackoff(backoff, cap time.Duration) SubmitOption {
	return func(o *SubmitOptions) error {
		if err := errors.Join(checkDuration("backoff", backoff), checkDuration("backoff cap", cap)); err != nil {
			return err
		}
		lo, hi := backoff, cap
		if lo == 0 {
			lo = events.DefaultBackoffMS * time.Millisecond
		}
		if hi == 0 {
			hi = events.DefaultBackoffMax * time.Millisecond
		}
		if hi < lo {
			return fmt.Errorf("backoff cap %v is below the backoff %v", hi, lo)
		}
		o.Backoff, o.BackoffMax = backoff, cap
		return nil
	}
}

// WithLease sets SubmitOptions.Lease, each attempt's lease duration
// (whole milliseconds; 0: the policy's default at each offer). The
// coordinator refuses a submit whose lease is outside the policy's bounds
// (rejected/duration_out_of_policy).
func WithLease(d time.Duration) SubmitOption {
	return func(o *SubmitOptions) error {
		if err := checkDuration("lease", d); err != nil {
			return err
		}
		o.Lease = d
		return nil
	}
}

// WithAckTimeout sets SubmitOptions.AckTimeout, the time each attempt's
// offered worker has to ACK (whole milliseconds; 0: the policy's).
func WithAckTimeout(d time.Duration) SubmitOption {
	return func(o *SubmitOptions) error {
		if err := checkDuration("ACK timeout", d); err != nil {
			return err
		}
		o.AckTimeout = d
		return nil
	}
}

// WithPayload sets SubmitOptions.Payload: at most events.MaxPayloadBytes
// of valid UTF-8, opaque to Tenure and given to the worker with each offer
// (put a reference there, an object key or a URL, for a larger body).
func WithPayload(s string) SubmitOption {
	return func(o *SubmitOptions) error {
		if len(s) > events.MaxPayloadBytes {
			return fmt.Errorf("payload of %d bytes: at most %d", len(s), events.MaxPayloadBytes)
		}
		if !utf8.ValidString(s) {
			return fmt.Errorf("payload is not valid UTF-8")
		}
		o.Payload, o.HasPayload = s, true
		return nil
	}
}

// WithRunAt sets SubmitOptions.RunAt: the job is queued at once and not
// offered before t, by the coordinator's clock (the stored time of the
// inputs); a time already past is at once (PROTOCOL.md §26.1). It
// excludes WithDelay.
func WithRunAt(t time.Time) SubmitOption {
	return func(o *SubmitOptions) error {
		if t.IsZero() {
			return fmt.Errorf("run at: the zero time")
		}
		if t.UnixNano() == 0 || t.Year() < 1678 || t.Year() > 2261 {
			return fmt.Errorf("run at %v: want a time from 1678 to 2261, not the Unix epoch itself", t)
		}
		if o.Delay != 0 {
			return fmt.Errorf("run at and delay exclude each other")
		}
		o.RunAt = t
		return nil
	}
}

// WithDelay sets SubmitOptions.Delay: the job is queued at once and not
// offered before the submit's stored time plus d (whole milliseconds, at
// most events.MaxDelayMS: 366 days). Unlike a RunAt computed from the
// caller's clock, it is measured on the coordinator's. It excludes
// WithRunAt.
func WithDelay(d time.Duration) SubmitOption {
	return func(o *SubmitOptions) error {
		switch {
		case d%time.Millisecond != 0:
			return fmt.Errorf("delay %v: want whole milliseconds", d)
		case d < time.Millisecond || d > events.MaxDelayMS*time.Millisecond:
			return fmt.Errorf("delay %v: want 1ms to %v", d, events.MaxDelayMS*time.Millisecond)
		case !o.RunAt.IsZero():
			return fmt.Errorf("run at and delay exclude each other")
		}
		o.Delay = d
		return nil
	}
}

// WithUniqueKey sets SubmitOptions.UniqueKey (a token: 1 to 64 of
// [A-Za-z0-9_-]): while a job of the queue that named key holds it
// (QUEUED, OFFERED, ACTIVE or UNRESOLVED, and WithUniqueFor after it
// ended), this submit is refused: duplicate/duplicate_unique_key, a
// *RejectedError whose decision's DuplicateOf names that job
// (IsDuplicateUniqueKey). PROTOCOL.md §26.2.
func WithUniqueKey(key string) SubmitOption {
	return func(o *SubmitOptions) error {
		if !events.ValidToken(key) {
			return fmt.Errorf("unique key %q: want 1 to %d characters of [A-Za-z0-9_-], not _", key, events.MaxTokenLen)
		}
		o.UniqueKey = key
		return nil
	}
}

// WithConcurrencyKey sets SubmitOptions.ConcurrencyKey (a token: 1 to 64
// of [A-Za-z0-9_-]). A key limits nothing until an operator sets its
// limit (SetLimit); then the job waits QUEUED while the key is at its
// limit. PROTOCOL.md §26.4.
func WithConcurrencyKey(key string) SubmitOption {
	return func(o *SubmitOptions) error {
		if !events.ValidToken(key) {
			return fmt.Errorf("concurrency key %q: want 1 to %d characters of [A-Za-z0-9_-], not _", key, events.MaxTokenLen)
		}
		o.ConcurrencyKey = key
		return nil
	}
}

// WithUniqueFor sets SubmitOptions.UniqueFor: the job holds its unique key
// this long after it ended too (whole milliseconds, at most
// events.MaxDurationMS), never past its retirement or discard. It needs
// WithUniqueKey.
func WithUniqueFor(d time.Duration) SubmitOption {
	return func(o *SubmitOptions) error {
		if err := checkDuration("unique for", d); err != nil {
			return err
		}
		if d == 0 {
			return fmt.Errorf("unique for 0: want %v to %v", events.MinDurationMS*time.Millisecond, events.MaxDurationMS*time.Millisecond)
		}
		o.UniqueFor = d
		return nil
	}
}

// checkDuration checks an optional duration of a submit: 0, or whole
// milliseconds from events.MinDurationMS to events.MaxDurationMS.
func checkDuration(what string, d time.Duration) error {
	switch {
	case d == 0:
		return nil
	case d%time.Millisecond != 0:
		return fmt.Errorf("%s %v: want whole milliseconds", what, d)
	case d < events.MinDurationMS*time.Millisecond || d > events.MaxDurationMS*time.Millisecond:
		return fmt.Errorf("%s %v: want %v to %v", what, d, events.MinDurationMS*time.Millisecond, events.MaxDurationMS*time.Millisecond)
	}
	return nil
}

// Submit puts job in queue (PROTOCOL.md §22.1): the job waits QUEUED until
// the queue offers it to a worker that announced capacity (not before its
// WithRunAt or WithDelay, rules revision 8), and is retried
// after a backoff when an attempt ends without success, until its attempt
// budget is spent (DEAD). Its verdict is submitted/ok.
//
// Submitting the same job again with the same fields (a retry of a submit
// whose verdict was not learned) is no error: the returned decision is
// duplicate/duplicate_submit, and the error is nil. Check d.Kind to tell
// the two apart. A job that exists with other fields is
// rejected/submit_conflicts (the detail names the first field that
// differs), a job outside any queue rejected/job_exists, a lease outside
// the policy's bounds rejected/duration_out_of_policy: *RejectedError, as
// every refusal.
func (c *Client) Submit(ctx context.Context, job, queue string, opts ...SubmitOption) (events.Decision, error) {
	if !events.ValidToken(job) {
		return events.Decision{}, fmt.Errorf("ops: submit: invalid job id %q", job)
	}
	if !events.ValidToken(queue) {
		return events.Decision{}, fmt.Errorf("ops: submit %s: invalid queue name %q", job, queue)
	}
	var o SubmitOptions
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return events.Decision{}, fmt.Errorf("ops: submit %s: %w", job, err)
		}
	}
	if o.UniqueFor != 0 && o.UniqueKey == "" {
		return events.Decision{}, fmt.Errorf("ops: submit %s: unique for needs a unique key", job)
	}
	in := events.Input{Job: job, Verb: events.VerbSubmit, Queue: queue,
		Priority: o.Priority, MaxAttempts: o.MaxAttempts,
		BackoffMS: o.Backoff.Milliseconds(), BackoffMax: o.BackoffMax.Milliseconds(),
		LeaseMS: o.Lease.Milliseconds(), AckTimeoutMS: o.AckTimeout.Milliseconds(),
		Payload: o.Payload, HasPayload: o.HasPayload, DelayMS: o.Delay.Milliseconds(),
		UniqueKey: o.UniqueKey, UniqueForMS: o.UniqueFor.Milliseconds(), ConcurrencyKey: o.ConcurrencyKey}
	if !o.RunAt.IsZero() {
		in.RunAt = o.RunAt.UnixNano()
	}
	ctx, span := c.tracer.Start(ctx, tracing.SpanSubmit, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(tracing.AttrJob.String(job), tracing.AttrQueue.String(queue)))
	defer span.End()
	d, err := c.do(ctx, &in)
	if err != nil && IsDuplicateSubmit(d) {
		err = nil
	}
	verdictSpan(span, d, err)
	return d, err
}

// verdictSpan records on span the verdict d of its input (or err).
func verdictSpan(span trace.Span, d events.Decision, err error) {
	if !span.IsRecording() {
		return
	}
	if d.Kind != events.KindNone {
		span.SetAttributes(tracing.AttrKind.String(d.Kind.String()), tracing.AttrReason.String(string(d.Reason)),
			tracing.AttrInputSeq.Int64(int64(d.Cause))) // a stream sequence: far below 2^63
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

// IsDuplicateSubmit reports whether d is the verdict of a submit that
// found the job already submitted with the same fields
// (duplicate/duplicate_submit): Submit's success for a resent submit.
func IsDuplicateSubmit(d events.Decision) bool {
	return d.Kind == events.KindDuplicate && d.Reason == events.ReasonDuplicateSubmit
}

// IsDuplicateUniqueKey reports whether d is the verdict of a submit
// refused because another job of the queue holds its unique key
// (duplicate/duplicate_unique_key, rules revision 8): d.DuplicateOf names
// that job.
func IsDuplicateUniqueKey(d events.Decision) bool {
	return d.Kind == events.KindDuplicate && d.Reason == events.ReasonDuplicateUniqueKey
}

// Retry queues a DEAD queue job again, ready at once, with a fresh attempt
// budget (resolve action retry, PROTOCOL.md §22.5): resolved/retried. A job
// that is not DEAD is rejected/nothing_to_resolve, one whose unique key
// another job holds now rejected/unique_key_held (revision 8: DuplicateOf
// names it).
func (c *Client) Retry(ctx context.Context, job, reason string) (events.Decision, error) {
	return c.do(ctx, &events.Input{Job: job, Verb: events.VerbResolve, Action: events.ActionRetry, Text: reason})
}

// Discard removes a DEAD queue job (resolve action discard, PROTOCOL.md
// §22.5): resolved/discarded, then the job is retired and its id is free
// again. A job that is not DEAD is rejected/nothing_to_resolve.
func (c *Client) Discard(ctx context.Context, job, reason string) (events.Decision, error) {
	return c.do(ctx, &events.Input{Job: job, Verb: events.VerbResolve, Action: events.ActionDiscard, Text: reason})
}
