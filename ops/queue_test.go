package ops_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ops"
)

// Submit's verdicts against a real coordinator: submitted, a resent submit
// is a success that says it was a duplicate, a submit with other fields or
// of a job outside any queue is refused with its reason, and an invalid
// option publishes nothing.
func TestSubmit(t *testing.T) {
	c, js := startTenureJS(t)
	ctx := context.Background()

	opts := []ops.SubmitOption{ops.WithPriority(7), ops.WithMaxAttempts(5), ops.WithBackoff(2*time.Second, time.Minute),
		ops.WithLease(20 * time.Second), ops.WithAckTimeout(3 * time.Second), ops.WithPayload("s3://bucket/mail-1\n")}
	d, err := c.Submit(ctx, "mail-1", "emails", opts...)
	if err != nil || d.Kind != events.KindSubmitted || d.Reason != events.ReasonOk {
		t.Fatalf("submit: %v %s/%s", err, d.Kind, d.Reason)
	}
	j := d.Job
	if j.State != events.StateQueued || j.Queue != "emails" || j.Submitter != "disp" || j.Priority != 7 || j.MaxAttempts != 5 ||
		j.Backoff != int64(2*time.Second) || j.BackoffMax != int64(time.Minute) || j.AttemptLease != int64(20*time.Second) ||
		j.AttemptAck != int64(3*time.Second) || !j.HasPayload || j.Payload != "s3://bucket/mail-1\n" || j.ReadyAt == 0 {
		t.Fatalf("the submitted job's projection: %+v", j)
	}
	requireInputBody(t, js, d.Cause, `{"v":1,"queue":"emails","priority":7,"max_attempts":5,"backoff_ms":2000,"backoff_max_ms":60000,"lease_ms":20000,"ack_timeout_ms":3000,"payload":"s3://bucket/mail-1\u000a"}`)

	// The same submit again: success, and the decision says duplicate.
	d, err = c.Submit(ctx, "mail-1", "emails", opts...)
	if err != nil || !ops.IsDuplicateSubmit(d) || d.Job.State != events.StateQueued {
		t.Fatalf("the same submit again: %v %s/%s, want duplicate/duplicate_submit and no error", err, d.Kind, d.Reason)
	}
	// Other fields: refused, naming the first field that differs.
	_, err = c.Submit(ctx, "mail-1", "emails", ops.WithPriority(7))
	var rej *ops.RejectedError
	if !errors.As(err, &rej) || !errors.Is(err, ops.ErrRejected) || rej.Reason != events.ReasonSubmitConflicts ||
		!strings.HasPrefix(rej.Detail, "max_attempts differs") {
		t.Fatalf("a submit with other fields: %v", err)
	}
	// A job outside any queue.
	if _, err := c.Offer(ctx, "plain", "w1", 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err = c.Submit(ctx, "plain", "emails"); !errors.As(err, &rej) || rej.Reason != events.ReasonJobExists {
		t.Fatalf("submit of an offered job: %v", err)
	}
	// The defaults: a body with nothing but the queue.
	if d, err = c.Submit(ctx, "mail-2", "emails"); err != nil || d.Job.MaxAttempts != events.DefaultMaxAttempts || d.Job.HasPayload {
		t.Fatalf("submit with the defaults: %v %+v", err, d.Job)
	}
	requireInputBody(t, js, d.Cause, `{"v":1,"queue":"emails"}`)
	// An empty payload is a payload.
	if d, err = c.Submit(ctx, "mail-3", "emails", ops.WithPayload("")); err != nil || !d.Job.HasPayload {
		t.Fatalf("submit with an empty payload: %v %+v", err, d.Job)
	}
	// A lease outside the policy's bounds (1 h at most by default).
	if _, err = c.Submit(ctx, "mail-4", "emails", ops.WithLease(2*time.Hour)); !errors.As(err, &rej) || rej.Reason != events.ReasonDurationOutOfPolicy {
		t.Fatalf("submit with a lease of 2h: %v", err)
	}

	// Invalid options and ids fail before anything is published.
	_, before := lastSeqs(t, js)
	for name, o := range map[string]ops.SubmitOption{
		"priority 10":       ops.WithPriority(10),
		"max attempts 0":    ops.WithMaxAttempts(0),
		"max attempts big":  ops.WithMaxAttempts(events.MaxAttempts + 1),
		"cap below":         ops.WithBackoff(time.Minute, time.Second),
		"cap below default": ops.WithBackoff(0, time.Millisecond*(events.DefaultBackoffMS-1)),
		"sub-millisecond":   ops.WithLease(1500 * time.Microsecond),
		"ack timeout long":  ops.WithAckTimeout(31 * 24 * time.Hour),
		"payload too big":   ops.WithPayload(strings.Repeat("x", events.MaxPayloadBytes+1)),
		"payload not UTF-8": ops.WithPayload("\xff"),
		"delay 0":           ops.WithDelay(0),
		"delay too long":    ops.WithDelay(367 * 24 * time.Hour),
		"delay sub-ms":      ops.WithDelay(1500 * time.Microsecond),
		"run at zero":       ops.WithRunAt(time.Time{}),
		"run at epoch":      ops.WithRunAt(time.Unix(0, 0)),
		"unique key dot":    ops.WithUniqueKey("user.42"),
		"unique key none":   ops.WithUniqueKey("_"),
		"unique for 0":      ops.WithUniqueFor(0),
		"unique for long":   ops.WithUniqueFor(31 * 24 * time.Hour),
		"unique for alone":  ops.WithUniqueFor(time.Hour),
	} {
		if _, err := c.Submit(ctx, "bad", "emails", o); err == nil || errors.Is(err, ops.ErrRejected) {
			t.Errorf("%s: %v, want an error of the client", name, err)
		}
	}
	for _, args := range [][2]string{{"no.dots", "emails"}, {"ok", "a queue"}, {"_", "emails"}} {
		if _, err := c.Submit(ctx, args[0], args[1]); err == nil {
			t.Errorf("submit %q to %q was accepted", args[0], args[1])
		}
	}
	if _, err := c.Submit(ctx, "bad", "emails", ops.WithDelay(time.Second), ops.WithRunAt(time.Now())); err == nil {
		t.Error("run at and delay together were accepted")
	}
	if _, after := lastSeqs(t, js); after != before {
		t.Fatalf("invalid submits published %d inputs", after-before)
	}
}

// Scheduled submits (rules revision 8): the body carries run_at or
// delay_ms, the job is QUEUED with its ready_at then, and a resend is a
// duplicate.
func TestSubmitScheduled(t *testing.T) {
	c, js := startTenureJS(t)
	ctx := context.Background()
	at := time.Date(2030, 5, 6, 7, 8, 9, 123000000, time.UTC)
	d, err := c.Submit(ctx, "later", "emails", ops.WithRunAt(at))
	if err != nil || d.Job.RunAt != at.UnixNano() || d.Job.ReadyAt != at.UnixNano() || d.Job.State != events.StateQueued {
		t.Fatalf("run at: %v %+v", err, d.Job)
	}
	requireInputBody(t, js, d.Cause, `{"v":1,"queue":"emails","run_at":"2030-05-06T07:08:09.123Z"}`)
	if d, err = c.Submit(ctx, "later", "emails", ops.WithRunAt(at)); err != nil || !ops.IsDuplicateSubmit(d) {
		t.Fatalf("the same scheduled submit again: %v %s/%s", err, d.Kind, d.Reason)
	}
	d, err = c.Submit(ctx, "soon", "emails", ops.WithDelay(90*time.Second))
	if err != nil || d.Job.Delay != int64(90*time.Second) || d.Job.ReadyAt != d.At+int64(90*time.Second) {
		t.Fatalf("delay: %v %+v", err, d.Job)
	}
	requireInputBody(t, js, d.Cause, `{"v":1,"queue":"emails","delay_ms":90000}`)
}

// Unique keys (rules revision 8): the body carries unique_key and
// unique_for_ms; a second job naming a held key is refused, naming the
// holder; the holder's own resend is a duplicate submit, no error.
func TestSubmitUnique(t *testing.T) {
	c, js := startTenureJS(t)
	ctx := context.Background()
	d, err := c.Submit(ctx, "export-1", "exports", ops.WithUniqueKey("user-42"), ops.WithUniqueFor(time.Hour))
	if err != nil || d.Job.UniqueKey != "user-42" || d.Job.UniqueFor != int64(time.Hour) {
		t.Fatalf("submit: %v %+v", err, d.Job)
	}
	requireInputBody(t, js, d.Cause, `{"v":1,"queue":"exports","unique_key":"user-42","unique_for_ms":3600000}`)
	d, err = c.Submit(ctx, "export-2", "exports", ops.WithUniqueKey("user-42"))
	var re *ops.RejectedError
	if !errors.Is(err, ops.ErrRejected) || !errors.As(err, &re) || !ops.IsDuplicateUniqueKey(d) || d.DuplicateOf != "export-1" {
		t.Fatalf("second job with the key: %v %s/%s of %q", err, d.Kind, d.Reason, d.DuplicateOf)
	}
	if d, err = c.Submit(ctx, "export-1", "exports", ops.WithUniqueKey("user-42"), ops.WithUniqueFor(time.Hour)); err != nil || !ops.IsDuplicateSubmit(d) {
		t.Fatalf("the holder's resend: %v %s/%s", err, d.Kind, d.Reason)
	}
	if _, err = c.Submit(ctx, "export-3", "other", ops.WithUniqueKey("user-42")); err != nil {
		t.Fatalf("the key in another queue: %v", err)
	}
}

// SetLimit and WithConcurrencyKey (rules revision 9) against a real
// coordinator: a key's limit and a queue's rate are set (limit_set, the
// input's body as PROTOCOL.md §26.4 has it), a job names the key, a bad
// limit is refused before anything is sent, a limit past the fold's
// bound is a *RejectedError, and a batch refuses a concurrency key.
func TestSetLimitAndConcurrencyKey(t *testing.T) {
	c, js := startTenureJS(t)
	ctx := context.Background()
	d, err := c.SetLimit(ctx, events.Limit{Queue: "exports", ConcurrencyKey: "acct-42", MaxActive: 1, HasMaxActive: true, Rate: 10, PeriodMS: 1000})
	if err != nil || d.Kind != events.KindLimitSet || d.Limit == nil || d.Limit.MaxActive != 1 || d.Limit.Rate != 10 {
		t.Fatalf("set: %v %+v", err, d)
	}
	requireInputBody(t, js, d.Cause, `{"v":1,"queue":"exports","concurrency_key":"acct-42","max_active":1,"rate":10,"period_ms":1000}`)
	if d, err = c.SetLimit(ctx, events.Limit{Queue: "exports", Rate: 100, PeriodMS: 60000}); err != nil || d.Limit.ConcurrencyKey != "" {
		t.Fatalf("the queue's rate: %v %+v", err, d)
	}
	requireInputBody(t, js, d.Cause, `{"v":1,"queue":"exports","rate":100,"period_ms":60000}`)
	d, err = c.Submit(ctx, "x1", "exports", ops.WithConcurrencyKey("acct-42"))
	if err != nil || d.Job.ConcurrencyKey != "acct-42" {
		t.Fatalf("submit: %v %+v", err, d.Job)
	}
	requireInputBody(t, js, d.Cause, `{"v":1,"queue":"exports","concurrency_key":"acct-42"}`)
	if _, err := c.Submit(ctx, "x2", "exports", ops.WithConcurrencyKey("acct.42")); err == nil {
		t.Fatal("a key that is no token was sent")
	}
	for _, bad := range []events.Limit{
		{Queue: "exports", MaxActive: 1, HasMaxActive: true},                                         // no key
		{Queue: "exports", ConcurrencyKey: "k", MaxActive: events.MaxActive + 1, HasMaxActive: true}, // past the bound
		{Queue: "exports", Rate: 1},                                     // no period
		{Queue: "exports", Rate: events.MaxRate + 1, PeriodMS: 1},       // past the bound
		{Queue: "exports", Rate: 1, PeriodMS: events.MaxDurationMS + 1}, // past the bound
	} {
		if _, err := c.SetLimit(ctx, bad); err == nil || errors.Is(err, ops.ErrRejected) {
			t.Errorf("%+v: %v, want a refusal before sending", bad, err)
		}
	}
	if _, err := c.SubmitMany(ctx, []ops.SubmitJob{{ID: "m1", Queue: "exports", Options: ops.SubmitOptions{ConcurrencyKey: "k"}}}); err == nil {
		t.Fatal("a batch took a concurrency key")
	}
}

// Retry and Discard, the operator's way out of DEAD: a job whose one
// attempt's lease expired ends DEAD; Retry queues it again
// with a fresh budget; once DEAD again, Discard removes it and its id is
// free for a new submit. Either on a job that is not DEAD is
// nothing_to_resolve.
func TestRetryAndDiscard(t *testing.T) {
	c, js := startTenureJS(t)
	ctx := context.Background()
	if _, err := c.Submit(ctx, "jd", "reports", ops.WithMaxAttempts(1), ops.WithLease(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var rej *ops.RejectedError
	if _, err := c.Retry(ctx, "jd", ""); !errors.As(err, &rej) || rej.Reason != events.ReasonNothingToResolve {
		t.Fatalf("retry of a QUEUED job: %v", err)
	}
	// Worker w1 announces one slot, ACKs what it is offered and never
	// renews it.
	pull := func() {
		t.Helper()
		if _, err := js.Publish(ctx, "tenure.in.worker.w1._.pull", []byte(`{"v":1,"queue":"reports","slots":1,"ttl_ms":600000}`)); err != nil {
			t.Fatal(err)
		}
	}
	ackOffer := func(after uint64) {
		t.Helper()
		o := awaitDecision(t, js, "tenure.out.w1.jd.assigned", after)
		if _, err := js.Publish(ctx, "tenure.in.worker.w1.jd.ack", fmt.Appendf(nil, `{"v":1,"lease_id":%q,"generation":%d}`, o.Job.LeaseID, o.Job.Generation)); err != nil {
			t.Fatal(err)
		}
	}
	pull()
	ackOffer(0)
	dead := awaitDecision(t, js, "tenure.out.disp.jd.dead", 0)
	if dead.Job.State != events.StateDead || dead.Reason != events.ReasonLeaseExpired || dead.Job.Attempt != 1 {
		t.Fatalf("the end of the only attempt: %s/%s %+v", dead.Kind, dead.Reason, dead.Job)
	}
	d, err := c.Retry(ctx, "jd", "the mail server is back")
	if err != nil || d.Kind != events.KindResolved || d.Reason != events.ReasonRetried || d.Job.State != events.StateQueued || d.Job.Attempt != 0 {
		t.Fatalf("retry: %v %s/%s %+v", err, d.Kind, d.Reason, d.Job)
	}
	requireInputBody(t, js, d.Cause, `{"v":1,"action":"retry","reason":"the mail server is back"}`)
	// The expiry was w1's refusal (rules revision 5): its announcement was
	// withdrawn, and it is held for a second; it announces again, and is
	// offered the job once the hold ends.
	pull()
	ackOffer(d.Cause - 1)
	dead = awaitDecision(t, js, "tenure.out.disp.jd.dead", dead.Cause)
	if _, err := c.Discard(ctx, "plain-job", ""); !errors.As(err, &rej) || rej.Reason != events.ReasonNoSuchJob {
		t.Fatalf("discard of no job: %v", err)
	}
	d, err = c.Discard(ctx, "jd", "")
	if err != nil || d.Kind != events.KindResolved || d.Reason != events.ReasonDiscarded {
		t.Fatalf("discard: %v %s/%s", err, d.Kind, d.Reason)
	}
	if _, err := c.Retry(ctx, "jd", ""); !errors.As(err, &rej) || rej.Reason != events.ReasonNoSuchJob {
		t.Fatalf("retry of a discarded job: %v", err)
	}
	if d, err := c.Submit(ctx, "jd", "other-queue"); err != nil || d.Kind != events.KindSubmitted || d.Job.Queue != "other-queue" {
		t.Fatalf("a new submit of the discarded id: %v %s", err, d.Kind)
	}
}

// requireInputBody checks the body stored as input seq.
func requireInputBody(t *testing.T, js jetstream.JetStream, seq uint64, want string) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, "TENURE_IN")
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != want {
		t.Fatalf("input %d on %s is\n%s\nwant\n%s", seq, m.Subject, m.Data, want)
	}
}

// lastSeqs are the last sequences of the input and decision streams.
func lastSeqs(t *testing.T, js jetstream.JetStream) (in, out uint64) {
	t.Helper()
	ctx := context.Background()
	for name, p := range map[string]*uint64{"TENURE_IN": &in, "TENURE_OUT": &out} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		*p = info.State.LastSeq
	}
	return in, out
}

// awaitDecision waits for the last decision stored on subject to have a
// cause after the given one, and returns it.
func awaitDecision(t *testing.T, js jetstream.JetStream, subject string, after uint64) events.Decision {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, "TENURE_OUT")
	if err != nil {
		t.Fatal(err)
	}
	var d events.Decision
	testutil.WaitFor(t, 10*time.Second, "a decision on "+subject, func() bool {
		m, err := s.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			return false
		}
		if d, err = events.DecodeDecision(m.Data); err != nil {
			t.Fatal(err)
		}
		return d.Cause > after
	})
	return d
}
