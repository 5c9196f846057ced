package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/tracing"
)

// Handler runs one attempt of a queue job. Its ctx is the lease's context
// (cancelled with its cause the moment authority is lost, a cancellation
// request included) and is also cancelled, with a cause matching
// ErrRunStopped, when the Run that called it shuts down. Return nil for
// success, an error to fail the attempt (the queue retries it after a
// backoff while the job's attempt budget lasts), or an error matching
// ErrPermanent (see Permanent) to fail the job without retry. A panic is
// recovered and fails the attempt like an error.
type Handler func(ctx context.Context, j *Job) error

// Job is one attempt of a queue job, as the queue offered it
// (PROTOCOL.md §22.6).
type Job struct {
	ID          string
	Queue       string
	Payload     string // opaque to Tenure; see HasPayload
	HasPayload  bool   // the submit carried a payload (an empty one is a payload)
	Attempt     uint64 // this attempt's number, counting from 1 (declines and releases are not counted)
	MaxAttempts uint64 // the job's attempt budget
	Priority    int64
	Submitter   string    // the ops actor that submitted it
	SubmittedAt time.Time // on the coordinator's clock
	// ScheduledFor (rules revision 8, PROTOCOL.md §26.1) is when the
	// submit asked the job to run from, on the coordinator's clock: its
	// run_at, or its time plus delay_ms; the zero time for a job
	// submitted to run at once.
	ScheduledFor time.Time
	// ConcurrencyKey (rules revision 9, PROTOCOL.md §26.4) is the key the
	// submit named ("" if none): the queue's limit of it bounds how many
	// of its jobs run at once.
	ConcurrencyKey string
	LastReason     events.Reason // why the previous attempt ended ("" on the first)
	// Lease is the attempt's lease: its Token for every side effect,
	// Progress, Expires, CancelRequested. Run reports the result itself
	// when the handler returns; a handler that calls Complete or Release
	// has ended the lease, and Run then reports nothing more.
	Lease *Lease
}

// Result is how one attempt Run ran ended (RunOptions.OnResult): what Run
// reported to the coordinator, or why it reported nothing.
type Result struct {
	// Outcome is the result Run reported: SUCCESS, FAILED or CANCELLED
	// (a cancellation request reconciled); OutcomeNone when it reported
	// none.
	Outcome events.Outcome
	// Permanent: the FAILED result said not to retry (ErrPermanent).
	Permanent bool
	// Released: Run gave the lease back instead (it was stopping): not an
	// attempt, the queue offers the job again at once.
	Released bool
	// Ended: the handler ended the lease itself (Complete, Release).
	Ended bool
	// Detail is the detail reported with a FAILED or CANCELLED outcome.
	Detail string
	// Err is what the handler returned (a panic as an error).
	Err error
	// ReportErr says why the result could not be reported or was not
	// accepted (authority lost before it, no verdict); nil when the
	// coordinator accepted what Run reported, or nothing was to report.
	ReportErr error
}

// String is the result for a log line: "SUCCESS", "FAILED (retried if
// attempts remain): <detail>", "FAILED permanently: <detail>", "CANCELLED",
// "released", "ended by the handler", each with ", not accepted: <why>" or
// "not reported: <why>" when that went wrong.
func (res Result) String() string {
	var s string
	switch {
	case res.Released:
		s = "released (the run was stopping): not an attempt"
	case res.Ended:
		s = "ended by the handler"
	case res.Outcome == events.OutcomeFailed && res.Permanent:
		s = "FAILED permanently: " + res.Detail
	case res.Outcome == events.OutcomeFailed:
		s = "FAILED (retried if attempts remain): " + res.Detail
	case res.Outcome != events.OutcomeNone:
		s = res.Outcome.String()
	default:
		if res.ReportErr != nil {
			return "not reported: " + res.ReportErr.Error()
		}
		return "not reported"
	}
	if res.ReportErr != nil {
		s += ", not accepted: " + res.ReportErr.Error()
	}
	return s
}

func newJob(o *Offer, l *Lease) *Job {
	j := &o.Decision.Job
	return &Job{
		ID: j.ID, Queue: j.Queue, Payload: j.Payload, HasPayload: j.HasPayload,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Priority: j.Priority, Submitter: j.Submitter,
		SubmittedAt: time.Unix(0, j.SubmittedAt), ScheduledFor: scheduledFor(j), ConcurrencyKey: j.ConcurrencyKey, LastReason: j.LastReason, Lease: l,
	}
}

// scheduledFor is Job.ScheduledFor of projection j.
func scheduledFor(j *events.Job) time.Time {
	switch {
	case j.RunAt != 0:
		return time.Unix(0, j.RunAt)
	case j.Delay != 0:
		return time.Unix(0, j.SubmittedAt+j.Delay)
	}
	return time.Time{}
}

// Run takes the jobs of queue and runs h on each, at most
// RunOptions.Concurrency at once, until ctx ends. It announces the
// worker's capacity on the queue (pull inputs, PROTOCOL.md §22.2) and
// renews the announcement every third of RunOptions.CapacityTTL; it accepts
// the offers the queue makes to this worker (assigned decisions) and runs h
// on each in a goroutine of its own, then reports the attempt's result:
//
//   - h returns nil: SUCCESS;
//   - h returns an error: FAILED, the error's text as detail (control
//     characters replaced by spaces, cut to events.MaxTextLen bytes on a
//     UTF-8 boundary); with "permanent":true when the error matches
//     ErrPermanent (no retry);
//   - h panics: FAILED, detail "panic: <value>" (retried as any failure);
//     the stack goes to the worker's ErrorHandler;
//   - the lease's context was cancelled by a cancellation request: the
//     worker acknowledges it and reports CANCELLED, which ends the job
//     (cancelled jobs are not retried);
//   - authority was lost otherwise (expired, revoked, a newer generation,
//     no verdict before the local deadline, the Worker closed): nothing is
//     reported (the coordinator would refuse it), the ErrorHandler is told;
//   - h ended the lease itself (Complete, Release): nothing more.
//
// Offers of other queues, and offers a dispatcher made (offered/ok),
// still reach Offers() or the Run of their queue: a Worker may run several
// queues at once, one Run each; Run on a queue another Run of the Worker
// runs returns ErrAlreadyRunning.
//
// When ctx ends Run shuts down: it withdraws the capacity (a pull with
// slots 0, on every partition), declines the offers that arrive from then
// on, cancels the handlers' contexts (cause ErrRunStopped wrapping ctx's
// cause) and waits for every handler. A handler that returns an error
// after the shutdown began (or a panic) has its lease released instead of
// failed: a release is not counted as an attempt (§22.4), so the job is
// retried at once elsewhere; nil or an ErrPermanent error is reported as
// above. Run returns nil after such a shutdown, once every handler has
// returned and its result was reported. It returns ErrClosed when the
// Worker was closed, the refusal (a *VerdictError) when the coordinator
// refused an announcement (a slots or ttl out of bounds, for instance),
// after the same shutdown (a log that does not know the pull verb,
// bad_subject, stops nothing: the refusal is reported to the
// ErrorHandler and the announcement tried again, since a log whose rules
// input a crash lost is judged under revision 1 until a live coordinator
// moves it to its revision again), and an error at once for invalid arguments.
//
// With WithDrain, Run can stop gracefully instead: when the drain's
// context ends it withdraws the capacity and declines new offers at once,
// as above, but lets the running handlers finish (their results reported
// as usual: an error is a FAILED attempt, nothing interrupted it) until
// the drain's timeout, when it cancels those still running as a shutdown
// does (cause ErrRunStopped, their errors releasing their leases). Run's
// ctx ending during a drain ends it at once, the same way.
//
// WithResultHandler is told how each attempt ended (what was reported,
// or why nothing was), for a log line per outcome.
//
// Every goroutine Run starts has exited when it returns. The time of its
// announcements follows the Worker's clock (WithClock).
func (w *Worker) Run(ctx context.Context, queue string, h Handler, opts ...RunOption) error {
	if !events.ValidToken(queue) {
		return fmt.Errorf("worker: run: invalid queue %q", queue)
	}
	if h == nil {
		return errors.New("worker: run: nil handler")
	}
	ro, err := runOptions(opts)
	if err != nil {
		return err
	}
	r := newRunner(w, queue, h, ro)
	if err := w.addRun(r); err != nil {
		return err
	}
	return r.run(ctx)
}

// runner is one Run.
type runner struct {
	w     *Worker
	queue string
	h     Handler
	opts  RunOptions
	every time.Duration // between announcements: a third of the ttl
	retry time.Duration // after an announcement whose verdict was not learned

	stop      context.Context // ends when Run's ctx ends, the Worker closes, a pull is refused or a drain times out: cancels the handlers
	quit      context.Context // ends with stop or when a drain begins (WithDrain): Run takes no more jobs
	withdrawn chan struct{}   // closed once the capacity was withdrawn (or that failed)
	fatal     chan error      // a refused announcement
	wg        sync.WaitGroup  // the goroutine of each offer: accept, handler, result; declines

	// Under w.mu: the offers dispatch routed to this Run, for its loop.
	offers []Offer
	offerS chan struct{} // wakes the loop

	ann  []announcement  // per partition
	wake []chan struct{} // per partition: wakes its announcer

	mu      sync.Mutex
	slots   map[*slot]struct{}
	running int           // slots accepting an offer or running a handler
	settled chan struct{} // closed (and replaced) when a slot is freed or its offer accepted
}

// slot is one offer this Run took: from its arrival until its result was
// reported.
type slot struct {
	part  uint32
	state slotState
	lease *Lease // nil while accepting
}

type slotState uint8

const (
	slotAccepting slotState = iota // the ACK is in flight
	slotRunning                    // the handler runs
	slotFinishing                  // the handler returned; the result is being reported
)

// announcement is the state of one partition's announcements.
type announcement struct {
	// sem is its lock (lock, unlock): one pull of the partition at a
	// time, stored in the order decided. It is held across the pull's
	// round trip, so it is a channel rather than a sync.Mutex: a
	// goroutine waiting to send on a channel is durably blocked in a
	// testing/synctest bubble (the simulator's), one waiting on a mutex
	// is not, and the bubble's clock would stop.
	sem   chan struct{}
	stale atomic.Bool // the coordinator withdrew the announcement (a missed ACK): announce again at once
	ok    bool        // the last pull was accepted
	slots uint64      // the slots it announced
	due   time.Time   // the next pull is due then, whatever changes
	// declining counts the surplus offers of the partition being declined
	// (surplus): while there are any, it announces no more than the
	// leases of the partition whose ACKs were accepted (confirmed).
	declining int
}

func (a *announcement) lock()   { a.sem <- struct{}{} }
func (a *announcement) unlock() { <-a.sem }

func newRunner(w *Worker, queue string, h Handler, ro RunOptions) *runner {
	n := max(len(w.ins), 1)
	r := &runner{
		w: w, queue: queue, h: h, opts: ro,
		every:     max(ro.CapacityTTL/3, time.Millisecond),
		withdrawn: make(chan struct{}),
		fatal:     make(chan error, 1),
		offerS:    make(chan struct{}, 1),
		ann:       make([]announcement, n),
		wake:      make([]chan struct{}, n),
		slots:     make(map[*slot]struct{}),
		settled:   make(chan struct{}),
	}
	r.retry = max(r.every/4, time.Millisecond)
	for k := range r.wake {
		r.wake[k] = make(chan struct{}, 1)
		r.ann[k].sem = make(chan struct{}, 1)
	}
	return r
}

// addRun routes the offers of r's queue to r.
func (w *Worker) addRun(r *runner) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() != nil {
		return ErrClosed
	}
	if w.runs[r.queue] != nil {
		return fmt.Errorf("worker: run %s: %w", r.queue, ErrAlreadyRunning)
	}
	w.runs[r.queue] = r
	return nil
}

// removeRun stops routing offers to r and returns those it did not take.
func (w *Worker) removeRun(r *runner) []Offer {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.runs[r.queue] == r {
		delete(w.runs, r.queue)
	}
	os := r.offers
	r.offers = nil
	return os
}

// offerLocked queues an offer of r's queue for r's loop; w.mu is held.
func (r *runner) offerLocked(o Offer) {
	r.offers = append(r.offers, o)
	select {
	case r.offerS <- struct{}{}:
	default:
	}
}

func (r *runner) takeOffers() []Offer {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	os := r.offers
	r.offers = nil
	return os
}

func (r *runner) run(ctx context.Context) error {
	stop, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	unclose := context.AfterFunc(r.w.ctx, func() { cancel(ErrClosed) })
	defer unclose()
	quit, quitCancel := context.WithCancelCause(stop)
	defer quitCancel(nil)
	if d := r.opts.Drain; d != nil {
		undrain := context.AfterFunc(d, func() { quitCancel(context.Cause(d)) })
		defer undrain()
	}
	r.stop, r.quit = stop, quit

	var anns sync.WaitGroup
	for k := range r.ann {
		anns.Go(func() { r.announcer(uint32(k)) })
	}
	var err error
loop:
	for {
		select {
		case <-r.offerS:
			for _, o := range r.takeOffers() {
				r.offer(o)
			}
		case err = <-r.fatal:
			cancel(err)
			break loop
		case <-quit.Done():
			break loop
		}
	}
	// Shutdown (stop ended: the handlers' contexts are being cancelled) or
	// drain (only quit ended: they run on): the capacity is withdrawn
	// before any release or decline is sent, so that the queue does not
	// offer those jobs to this worker again.
	anns.Wait()
	r.withdraw()
	close(r.withdrawn)
	// Every offer made before the withdrawal was dispatched before its
	// verdict (each partition's decisions arrive in order): r has them all.
	for _, o := range r.w.removeRun(r) {
		r.offer(o) // declined
	}
	if stop.Err() == nil && r.opts.DrainTimeout > 0 {
		t := r.w.clk.AfterFunc(r.opts.DrainTimeout, func() {
			cancel(fmt.Errorf("the drain's timeout of %v passed", r.opts.DrainTimeout))
		})
		defer t.Stop()
	}
	r.wg.Wait()
	if err == nil && r.w.ctx.Err() != nil {
		err = ErrClosed
	}
	return err
}

// offer takes o in a free slot, or handles it as a surplus (always once Run
// takes no more jobs).
func (r *runner) offer(o Offer) {
	k := r.w.part.Of(o.Job).Index
	if s := r.reserve(k); s != nil {
		r.wg.Go(func() { r.work(&o, s) })
		return
	}
	r.wg.Go(func() { r.surplus(&o, k) })
}

// reserve takes a free slot for an offer of partition k, if there is one
// and Run still takes jobs.
func (r *runner) reserve(k uint32) *slot {
	r.mu.Lock()
	if r.quit.Err() != nil || r.running >= r.opts.Concurrency {
		r.mu.Unlock()
		return nil
	}
	s := &slot{part: k, state: slotAccepting}
	r.slots[s] = struct{}{}
	r.running++
	r.mu.Unlock()
	r.wakeAll() // fewer free slots to announce to the other partitions
	return s
}

// surplusAnnounceTries bounds the attempts of a surplus's corrected
// announcement whose verdict was not learned.
const surplusAnnounceTries = 3

// surplus handles an offer that came when no slot was free: announced
// slots of another partition that were not corrected yet, or a lease the
// coordinator ended while its handler still runs. Partition k's
// announcement is corrected first, so that the queue does not offer the
// declined job to this worker again; if a slot was freed meanwhile the
// offer takes it instead. A decline is not counted as an attempt.
//
// The corrected announcement counts only the leases of k whose ACKs were
// accepted, not those being accepted: the coordinator may have ended one
// of those already (its ACK deadline passed while the offer or the ACK
// was on its way), and no longer counts it among this worker's live
// leases. Counted, it kept the announcement at the leases the
// coordinator holds live, the declined offer included, and the decline
// was a refusal: a strike, a hold and a halved window against an honest
// worker (the simulator's seed 173; PROTOCOL.md §22.8). The announcer
// announces the slots again once the decline is stored.
//
// The decline is surplus only once the corrected announcement is stored.
// One whose verdict was not learned (a request or a reply lost) is sent
// again at once, until it is stored or half the time left to o's ACK
// deadline has passed, surplusAnnounceTries times at most; only then is o
// declined (a refusal, if the announcement was never stored: nothing
// better is left to do). A refusal of the announcement is not retried.
func (r *runner) surplus(o *Offer, k uint32) {
	if r.quit.Err() != nil {
		<-r.withdrawn
		r.decline(o)
		return
	}
	a := &r.ann[k]
	a.lock()
	a.declining++
	a.unlock()
	lowered := true
	raise := func() {
		if lowered {
			lowered = false
			a.lock()
			a.declining--
			a.unlock()
			r.wake1(k)
		}
	}
	defer raise()
	until := r.w.clk.Now().Add(o.localDeadline.Sub(r.w.clk.Now()) / 2)
	for try := 1; ; try++ {
		stored, again := r.announce(r.quit, k)
		if stored || !again || try == surplusAnnounceTries || r.quit.Err() != nil || !r.w.clk.Now().Before(until) {
			break
		}
		a.stale.Store(true) // at once, not at the announcer's next retry
	}
	s := r.reserve(k)
	if s == nil {
		s = r.awaitAccepts(o, k)
	}
	if s != nil {
		raise()
		r.work(o, s)
		return
	}
	if r.quit.Err() != nil {
		<-r.withdrawn
	}
	r.decline(o)
}

// decline releases o, unless its ACK window has passed already.
func (r *runner) decline(o *Offer) {
	if !r.w.clk.Now().Before(o.localDeadline) {
		return // lapsed already: nothing to decline
	}
	if err := o.Decline(context.Background()); err != nil {
		r.report(fmt.Errorf("worker: run %s: decline %s: %w", r.queue, o.Token(), err))
	}
}

// settleLocked wakes awaitAccepts: a slot was freed, or its offer
// accepted. Called under r.mu.
func (r *runner) settleLocked() {
	close(r.settled)
	r.settled = make(chan struct{})
}

// awaitAccepts waits, while offers of partition k are being accepted (their
// ACKs in flight), for one of them to free its slot, and takes it for o;
// nil once none is being accepted and no slot is free, when half the time
// left to o's ACK deadline has passed, or when Run quits. An ACK in
// flight may be refused (an operator revoked the lease meanwhile, its
// deadline passed): the coordinator has then ended that lease and offered
// o in its place, and counts o against the slots announced, so declining
// o would be a refusal, a strike against this worker (the simulator's
// seed 717: an operator's revoke raced the ACK).
func (r *runner) awaitAccepts(o *Offer, k uint32) *slot {
	until := r.w.clk.Now().Add(o.localDeadline.Sub(r.w.clk.Now()) / 2)
	for {
		r.mu.Lock()
		accepting := false
		for s := range r.slots {
			if s.part == k && s.state == slotAccepting {
				accepting = true
				break
			}
		}
		settled := r.settled
		r.mu.Unlock()
		left := until.Sub(r.w.clk.Now())
		if !accepting || left <= 0 {
			return nil
		}
		t := r.w.clk.NewTimer(left)
		select {
		case <-settled:
			t.Stop()
			if s := r.reserve(k); s != nil {
				return s
			}
		case <-t.C():
			return nil
		case <-r.quit.Done():
			t.Stop()
			return nil
		}
	}
}

// work accepts o in slot s, runs the handler and reports the result.
func (r *runner) work(o *Offer, s *slot) {
	span := r.startSpan(o)
	defer span.End()
	l, err := r.accept(o, span.SpanContext())
	if err != nil {
		r.free(s)
		err = fmt.Errorf("worker: run %s: accept %s: %w", r.queue, o.Token(), err)
		span.SetStatus(codes.Error, "not accepted")
		span.RecordError(err)
		r.report(err)
		return
	}
	unwatch := context.AfterFunc(l.Context(), r.wakeAll) // a lost lease is no longer held
	defer unwatch()
	r.mu.Lock()
	s.lease = l
	s.state = slotRunning
	r.settleLocked()
	r.mu.Unlock()
	j := newJob(o, l)
	if r.stop.Err() != nil { // shutting down before the handler started: give it back
		r.finishing(s)
		r.done(j, r.result(l, fmt.Errorf("%w: before the handler started", ErrRunStopped), true))
		r.free(s)
		return
	}
	hctx, hcancel := context.WithCancelCause(trace.ContextWithSpan(l.Context(), span))
	unstop := context.AfterFunc(r.stop, func() {
		hcancel(fmt.Errorf("%w: %w", ErrRunStopped, context.Cause(r.stop)))
	})
	var herr error
	if b := r.opts.Effects; b != nil {
		bctx, err := b.Bind(hctx, l)
		if err != nil {
			herr = fmt.Errorf("worker: run %s: job %s: bind its effects: %w", r.queue, l.token, err)
		} else {
			hctx = bctx
		}
	}
	if herr == nil {
		herr = r.call(hctx, j)
	}
	unstop()
	hcancel(nil)
	shutdown := r.stop.Err() != nil
	r.finishing(s) // the handler no longer runs: its slot is free
	res := r.result(l, herr, shutdown)
	endSpan(span, res)
	r.done(j, res)
	r.free(s)
}

// startSpan starts the span of the run of offer o (tracing.SpanRun): a
// child of the trace context the offer carried (the submit's), if any.
// With no TracerProvider installed it records nothing, and its span
// context is the offer's, which the lease's inputs then carry on.
func (r *runner) startSpan(o *Offer) trace.Span {
	_, span := tracing.Tracer(r.w.opts.TracerProvider).Start(o.TraceContext(context.Background()), tracing.SpanRun,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			tracing.AttrJob.String(o.Job), tracing.AttrQueue.String(r.queue),
			tracing.AttrLeaseRef.String(tracing.LeaseRef(o.LeaseID)),
			tracing.AttrGeneration.Int64(int64(o.Generation)), // a generation counts offers: far below 2^63
			tracing.AttrDecisionSeq.Int64(int64(o.seq)),       // a stream sequence: far below 2^63
			tracing.AttrAttempt.Int64(int64(o.Decision.Job.Attempt)),
		))
	return span
}

// endSpan records on span how the run ended.
func endSpan(span trace.Span, res Result) {
	if !span.IsRecording() {
		return
	}
	switch {
	case res.Released:
		span.SetAttributes(attribute.Bool("tenure.result.released", true))
	case res.Ended:
		span.SetAttributes(attribute.Bool("tenure.result.by_handler", true))
	case res.Outcome != events.OutcomeNone:
		span.SetAttributes(tracing.AttrOutcome.String(res.Outcome.String()))
	}
	if res.Err != nil {
		span.RecordError(res.Err)
	}
	switch {
	case res.ReportErr != nil:
		span.RecordError(res.ReportErr)
		span.SetStatus(codes.Error, "result not reported")
	case res.Outcome == events.OutcomeFailed:
		span.SetStatus(codes.Error, res.Detail)
	}
}

// done reports what went wrong with an attempt's end to the ErrorHandler
// and tells the result to RunOptions.OnResult.
func (r *runner) done(j *Job, res Result) {
	r.report(res.ReportErr)
	if f := r.opts.OnResult; f != nil {
		f(j, res)
	}
}

// accept ACKs o through the worker's ACK batcher (with the ACKs of other
// offers that arrived meanwhile, in one batch ack), which sends the same
// input again while its verdict is not learned and the offer's ACK
// deadline has not passed (an offer read after its deadline, from a
// coordinator that lagged or a worker that was paused, is not ACKed at
// all).
func (r *runner) accept(o *Offer, sc trace.SpanContext) (*Lease, error) {
	if !r.w.clk.Now().Before(o.localDeadline) { // an ACK now would be late
		return nil, fmt.Errorf("%w: the offer's ACK deadline passed before it could be accepted", ErrExpired)
	}
	res := r.w.acks.do(events.Input{Job: o.Job, LeaseID: o.LeaseID, Generation: o.Generation}, o.localDeadline, sc)
	if res.err != nil {
		return nil, fmt.Errorf("worker: accept %s: %w", o.Token(), res.err)
	}
	d := res.d
	lo, _ := leaseOptions(nil)
	lo.trace = sc // the lease's inputs (its renewals, its result) carry the run's span context
	switch j := &d.Job; {
	case d.Kind == events.KindAcked:
		return r.w.newLease(d, res.t0, lo)
	case d.Kind == events.KindDuplicate && d.Reason == events.ReasonDuplicateAck && j.State == events.StateActive &&
		j.Holder == r.w.id && j.LeaseID == o.LeaseID && j.Generation == o.Generation && j.AckedAt != 0:
		// This ACK was stored twice (its first verdict was not learned,
		// and the duplicate window had passed): the first was accepted at
		// AckedAt, after res.t0.
		d.At = j.AckedAt
		return r.w.newLease(d, res.t0, lo)
	}
	return nil, verdictError(d)
}

// pause waits a little before an input is sent again.
func (r *runner) pause() {
	t := r.w.clk.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C():
	case <-r.w.ctx.Done():
	}
}

// call runs the handler, turning a panic into an error.
func (r *runner) call(ctx context.Context, j *Job) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{v}
			r.report(fmt.Errorf("worker: run %s: job %s: handler panicked: %v\n%s", r.queue, j.Lease.Token(), v, debug.Stack()))
		}
	}()
	return r.h(ctx, j)
}

// panicError is a handler's panic, as the attempt's failure.
type panicError struct{ v any }

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.v) }

// result reports the result of the handler that returned herr on lease l
// (shutdown: its context was cancelled by Run's shutdown), and returns
// what it reported and what went wrong.
func (r *runner) result(l *Lease, herr error, shutdown bool) Result {
	res := Result{Err: herr}
	if l.ctx.Err() != nil {
		cause := context.Cause(l.ctx)
		switch {
		case errors.Is(cause, ErrLeaseEnded):
			res.Ended = true // the handler completed or released the lease itself
			return res
		case cancelPending(cause):
			return r.reconcile(l, res)
		}
		res.ReportErr = fmt.Errorf("worker: run %s: job %s: authority lost (%w), the handler's return (%v) not reported", r.queue, l.token, cause, herr)
		return res
	}
	var err error
	switch {
	case herr == nil:
		res.Outcome = events.OutcomeSuccess
		err = r.settle(l, "complete", func(context.Context) error { return l.resultVia(events.OutcomeSuccess, "", false) })
	case errors.Is(herr, ErrPermanent):
		res.Outcome, res.Permanent, res.Detail = events.OutcomeFailed, true, detailOf(herr)
		err = r.settle(l, "complete", func(context.Context) error { return l.resultVia(events.OutcomeFailed, res.Detail, true) })
	case shutdown:
		<-r.withdrawn
		res.Released = true
		err = r.settle(l, "release", l.Release)
	default:
		res.Outcome, res.Detail = events.OutcomeFailed, detailOf(herr)
		err = r.settle(l, "complete", func(context.Context) error { return l.resultVia(events.OutcomeFailed, res.Detail, false) })
	}
	if cancelPending(err) { // requested while the result was on its way
		return r.reconcile(l, Result{Err: herr})
	}
	res.ReportErr = err
	return res
}

// reconcile answers a cancellation request: cancel ACK, then CANCELLED.
func (r *runner) reconcile(l *Lease, res Result) Result {
	res.Outcome, res.Detail = events.OutcomeCancelled, "cancelled on request"
	if res.Err != nil {
		res.Detail = detailOf(fmt.Errorf("%s: %w", res.Detail, res.Err))
	}
	err := r.settle(l, "cancel_ack", l.AckCancel)
	if e := r.settle(l, "complete", func(context.Context) error { return l.resultVia(events.OutcomeCancelled, res.Detail, false) }); e != nil {
		res.ReportErr = errors.Join(err, e)
	}
	return res
}

// settle sends one of l's closing inputs with op, sending it again while
// its verdict is not learned and the lease's local deadline has not
// passed; a duplicate verdict says an earlier one was accepted.
func (r *runner) settle(l *Lease, what string, op func(context.Context) error) error {
	for {
		err := op(context.Background())
		if err == nil || errors.Is(err, ErrDuplicate) {
			return nil
		}
		if !errors.Is(err, ErrNoVerdict) || r.w.ctx.Err() != nil || !r.w.clk.Now().Before(l.Expires()) {
			return fmt.Errorf("worker: run %s: %s: %w", r.queue, what, err)
		}
		r.pause()
	}
}

// detailOf is the text of err as a result's detail: valid UTF-8, control
// characters (which the protocol refuses in text) replaced by spaces, and
// cut to events.MaxTextLen bytes on a character boundary.
func detailOf(err error) string {
	s := strings.Map(func(c rune) rune {
		if c < 0x20 || c == 0x7f {
			return ' '
		}
		return c
	}, strings.ToValidUTF8(err.Error(), "\uFFFD"))
	if len(s) <= events.MaxTextLen {
		return s
	}
	n := events.MaxTextLen
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func (r *runner) finishing(s *slot) {
	r.mu.Lock()
	if s.state != slotFinishing {
		s.state = slotFinishing
		r.running--
	}
	r.mu.Unlock()
	r.wakeAll()
}

func (r *runner) free(s *slot) {
	r.mu.Lock()
	if s.state != slotFinishing {
		r.running--
	}
	delete(r.slots, s)
	r.settleLocked()
	r.mu.Unlock()
	r.wakeAll()
}

// wake1 wakes partition k's announcer.
func (r *runner) wake1(k uint32) {
	select {
	case r.wake[k] <- struct{}{}:
	default:
	}
}

func (r *runner) wakeAll() {
	for _, c := range r.wake {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (r *runner) report(err error) {
	if err != nil {
		r.w.report(err)
	}
}

// desired is the slots to announce to partition k: the leases of k this
// Run holds (those of running handlers and of offers being accepted, the
// coordinator's live leases) plus the free slots. It is the concurrency
// limit when unpartitioned; in a partitioned deployment each partition
// may offer every free slot, and the surplus is declined.
func (r *runner) desired(k uint32) uint64 {
	if r.quit.Err() != nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	held := 0
	for s := range r.slots {
		if s.part == k && s.state != slotFinishing && !endedAtCoordinator(s.lease) {
			held++
		}
	}
	return uint64(r.opts.Concurrency - r.running + held)
}

// confirmed is the leases of partition k this Run holds whose ACKs were
// accepted (running handlers), less those known to be no longer live at
// the coordinator: at most the live leases the coordinator counts for
// this worker in k.
func (r *runner) confirmed(k uint32) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := uint64(0)
	for s := range r.slots {
		if s.part == k && s.state == slotRunning && !endedAtCoordinator(s.lease) {
			n++
		}
	}
	return n
}

// endedAtCoordinator reports whether l is known to be no longer live at
// the coordinator: its authority was lost otherwise than by a cancellation
// request (after which the lease stays live until its result).
func endedAtCoordinator(l *Lease) bool {
	return l != nil && l.ctx.Err() != nil && !cancelPending(context.Cause(l.ctx))
}

// cancelPending reports whether a lease's cause is a cancellation request
// that leaves the lease live until the worker reconciles it (not one that
// ended it: an unresolved cancellation, a cancel deadline passed).
func cancelPending(cause error) bool {
	return errors.Is(cause, ErrCancelRequested) && !errors.Is(cause, ErrLostAuthority)
}

// announcer keeps partition k's announcement standing and right until
// Run takes no more jobs: at once, every third of the ttl, and whenever the slots
// to announce change.
func (r *runner) announcer(k uint32) {
	a := &r.ann[k]
	r.announce(r.quit, k)
	a.lock()
	t := r.w.clk.NewTimer(clock.Until(r.w.clk, a.due))
	a.unlock()
	defer t.Stop()
	for {
		select {
		case <-r.quit.Done():
			return
		case <-r.wake[k]:
		case <-t.C():
		}
		r.announce(r.quit, k)
		a.lock()
		t.Reset(clock.Until(r.w.clk, a.due))
		a.unlock()
	}
}

// announce sends partition k's announcement if it is due or its slots
// changed (unless a failed one waits for its retry), and learns its
// verdict. A refusal stops Run, but for bad_subject: a log that does not
// know the pull verb (rules below revision 4) is one whose rules input a
// server lost with its unsynced tail (PROTOCOL.md §2) until a live
// coordinator moves it to its revision again, which it does at once; the
// refusal is reported and the announcement tried again (the simulator's
// seeds 11777, 13603 and 61869, where it stopped Run for good). A
// coordinator too old for queues refuses every attempt, each reported.
//
// It reports whether the announcement standing is the one wanted (stored),
// and, when not, whether it failed for want of a verdict or a publish and
// may be sent again at once (again): not after a refusal.
func (r *runner) announce(ctx context.Context, k uint32) (stored, again bool) {
	a := &r.ann[k]
	a.lock()
	defer a.unlock()
	want := r.desired(k)
	if a.declining > 0 {
		want = min(want, r.confirmed(k))
	}
	t0 := r.w.clk.Now()
	if stale := a.stale.Swap(false); !stale && t0.Before(a.due) && (!a.ok || want == a.slots) {
		return a.ok && want == a.slots, !a.ok
	}
	err := r.pull(ctx, k, want)
	var ve *VerdictError
	switch {
	case err == nil:
		a.ok, a.slots, a.due = true, want, t0.Add(r.every)
		return true, false
	case errors.As(err, &ve) && ve.Reason == events.ReasonBadSubject:
		a.ok, a.due = false, r.w.clk.Now().Add(r.retry)
		if ctx.Err() == nil {
			r.report(err)
		}
	case errors.As(err, &ve):
		a.ok, a.due = false, r.w.clk.Now().Add(r.every)
		select {
		case r.fatal <- err:
		default:
		}
	default:
		a.ok, a.due = false, r.w.clk.Now().Add(r.retry)
		if ctx.Err() == nil {
			r.report(err)
		}
		return false, true
	}
	return false, false
}

// withdrawnLocked handles the coordinator's withdrawal of partition k's
// announcement (a withdrawn decision: an offer to this worker was not
// ACKed in time, PROTOCOL.md §22.4): the announcer announces again at
// once, so that a worker that is alive keeps receiving jobs. Called under
// w.mu: it takes no lock of the announcement.
func (r *runner) withdrawnLocked(k uint32) {
	if int(k) >= len(r.ann) {
		return
	}
	r.ann[k].stale.Store(true)
	select {
	case r.wake[k] <- struct{}{}:
	default:
	}
}

// withdraw announces slots 0 on every partition.
func (r *runner) withdraw() {
	var wg sync.WaitGroup
	for k := range r.ann {
		wg.Go(func() {
			a := &r.ann[k]
			a.lock()
			defer a.unlock()
			if err := r.pull(context.Background(), uint32(k), 0); err != nil {
				r.report(fmt.Errorf("worker: run %s: withdraw: %w", r.queue, err))
			}
		})
	}
	wg.Wait()
}

// pull announces slots on partition k and learns the verdict: nil for
// capacity_set, a *VerdictError for a refusal, or an error matching
// ErrNoVerdict or ErrClosed.
func (r *runner) pull(ctx context.Context, k uint32, slots uint64) error {
	p := r.w.newInput(&events.Input{Job: events.NoJob, Verb: events.VerbPull, Queue: r.queue,
		Slots: slots, TTLMS: r.opts.CapacityTTL.Milliseconds()})
	p.part = events.Partition{Index: k, Count: r.w.part.Count}
	d, err := r.w.send(ctx, p)
	if err != nil {
		return fmt.Errorf("worker: run %s: pull %d slots (%s): %w", r.queue, slots, p.part, err)
	}
	if d.Kind != events.KindCapacitySet {
		return fmt.Errorf("worker: run %s: pull (%s): %w", r.queue, p.part, verdictError(d))
	}
	return nil
}
