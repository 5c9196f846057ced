package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/chaos"
	"github.com/maknow/tenure/internal/jsmodel"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/worker"
)

// The queue workload (PROTOCOL.md §22, §26), in the seeds that draw it: a
// dispatcher submits jobs to one or two queues (single submits, batch
// submits of rules revision 7, scheduled jobs and unique keys of revision
// 8); workers of the Go SDK run them with worker.Run (package worker,
// unchanged, on the model's transport), with handlers that succeed, fail
// (retried after a backoff until the job goes DEAD), fail for good, panic,
// run long, or hang past their lease (the process paused: its renewals
// held with it); an operator retries and discards DEAD jobs, settles
// UNRESOLVED ones, cancels and revokes, and changes the policy. The
// dispatcher and the operator are package ops's Client on the model's
// transport (ops.NewWithTransport).

// queueNames are the queues a run uses (the first Plan.Queues of them).
var queueNames = []string{"qa", "qb"}

// journal is an actor's record of the inputs it sent and the PubAcks it
// read, for chaos.Check.
type journal struct {
	mu      sync.Mutex
	entries []chaos.Entry
}

func (j *journal) record(sent bool, subject, msgID string, body []byte, stream string, seq uint64) {
	e := chaos.Entry{Kind: chaos.EntrySent, At: time.Now().UnixNano(), Subject: subject, MsgID: msgID, BodySHA: chaos.BodySHA(body), Len: len(body)}
	if !sent {
		e.Kind, e.Stream, e.Seq = chaos.EntryAck, stream, seq
	}
	j.mu.Lock()
	j.entries = append(j.entries, e)
	j.mu.Unlock()
}

func (j *journal) all() []chaos.Entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.entries)
}

// opsActor is a dispatcher or an operator: package ops's Client on the
// model's transport (ops.NewWithTransport), so that Submit, SubmitMany,
// the resolves and SetPolicy run as users run them, with their publishes,
// retries and verdict matching; each call that learned a verdict is kept
// for the wrong-waiter oracle (checkOpsCalls).
type opsActor struct {
	id string
	c  *ops.Client
	j  journal

	busy atomic.Int32 // calls in progress (idle)

	mu    sync.Mutex
	calls []opsCall
}

// opsCall is one verdict an ops call returned: the job it was about, when
// the call began and returned, and the decision.
type opsCall struct {
	op       string
	job      string
	from, to time.Time
	d        events.Decision
}

func newOpsActor(net *jsmodel.Net, id string) *opsActor {
	a := &opsActor{id: id}
	tr := net.Client(id).Transport()
	tr.Journal = a.j.record
	c, err := ops.NewWithTransport(tr, id, ops.WithTimeout(3*time.Second))
	if err != nil {
		panic(err) // (an id of the simulator's own: a token)
	}
	a.c = c
	return a
}

// call makes one call of the client, bounded by until and by stop, and
// keeps the verdicts it returned (SubmitMany's: one per job).
func (o *opsActor) call(ctx context.Context, stop <-chan struct{}, until time.Time, op string, jobs []string, fn func(ctx context.Context) ([]events.Decision, error)) error {
	o.busy.Add(1)
	defer o.busy.Add(-1)
	ctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	go func() { // (ends with the call: cancel)
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	from := time.Now()
	ds, err := fn(ctx)
	to := time.Now()
	o.mu.Lock()
	for i, d := range ds {
		if d.Kind != events.KindNone && i < len(jobs) {
			o.calls = append(o.calls, opsCall{op, jobs[i], from, to, d})
		}
	}
	o.mu.Unlock()
	return err
}

// one adapts a call of one verdict to opsActor.call.
func one(fn func(ctx context.Context) (events.Decision, error)) func(ctx context.Context) ([]events.Decision, error) {
	return func(ctx context.Context) ([]events.Decision, error) {
		d, err := fn(ctx)
		return []events.Decision{d}, err
	}
}

// queueRun is the queue workload of one run.
type queueRun struct {
	p       Plan
	net     *jsmodel.Net
	view    *view
	res     *resource
	rng     *rand.Rand
	disp    *opsActor
	ops     *opsActor
	workers []*queueWorker
	quiet   <-chan struct{} // closed when the faults stop
	seeds   [2]uint64       // the dispatcher's and the operator's generators

	mu       sync.Mutex
	findings []string
}

func newQueueRun(p Plan, net *jsmodel.Net, v *view, res *resource, quiet <-chan struct{}) *queueRun {
	q := &queueRun{p: p, net: net, view: v, res: res, rng: rand.New(rand.NewPCG(p.Seed, 0x7175)), quiet: quiet,
		disp: newOpsActor(net, "disp"), ops: newOpsActor(net, "qops")}
	q.seeds = [2]uint64{q.rng.Uint64(), q.rng.Uint64()}
	v.opsPrefixes = []string{events.InputPrefix + ".ops." + q.disp.id + ".", events.InputPrefix + ".ops." + q.ops.id + "."}
	for i := range p.QueueWorkers {
		q.workers = append(q.workers, &queueWorker{q: q, id: fmt.Sprintf("r%d", i+1), seed: q.rng.Uint64()})
	}
	return q
}

func (q *queueRun) finding(format string, args ...any) {
	q.mu.Lock()
	q.findings = append(q.findings, fmt.Sprintf(format, args...))
	q.mu.Unlock()
}

func (q *queueRun) isQuiet() bool {
	select {
	case <-q.quiet:
		return true
	default:
		return false
	}
}

// submitInput draws job's submit (single: with revision 8's fields in the
// seeds that use them).
func (q *queueRun) submitInput(r *rand.Rand, job string, single bool) events.Input {
	in := events.Input{Job: job, Verb: events.VerbSubmit, Queue: queueNames[r.IntN(q.p.Queues)],
		Priority: int64(r.IntN(3)), MaxAttempts: uint64(1 + r.IntN(4)), BackoffMS: int64(50 + r.IntN(400)),
		Payload: "payload of " + job, HasPayload: true}
	in.BackoffMax = in.BackoffMS * int64(1+r.IntN(4))
	// Each attempt's lease and ACK timeout: the job's own, or (with
	// policy changes) the policy's in force at the offer.
	if !q.p.Policies || r.IntN(3) > 0 {
		in.LeaseMS = int64(600 + r.IntN(2400))
	}
	if !q.p.Policies || r.IntN(3) > 0 {
		in.AckTimeoutMS = int64(200 + r.IntN(1300))
	}
	if single && q.p.Scheduled && r.IntN(5) < 2 {
		if r.IntN(2) == 0 {
			in.DelayMS = int64(100 + r.IntN(4000))
		} else {
			in.RunAt = time.Now().Add(time.Duration(r.IntN(6000)-2000) * time.Millisecond).UnixNano()
		}
	}
	if single && q.p.Unique && r.IntN(2) == 0 {
		in.UniqueKey = fmt.Sprintf("key%d", r.IntN(3))
		if r.IntN(5) < 2 {
			in.UniqueForMS = int64(200 + r.IntN(3000))
		}
	}
	return in
}

// submission is one call of the dispatcher: a single submit (ops.Submit)
// or a batch (ops.SubmitMany).
type submission struct {
	single *events.Input // a single submit
	batch  []ops.SubmitJob
	ids    []string
}

// submitOptions are a drawn submit's fields as ops options.
func submitOptions(in *events.Input) []ops.SubmitOption {
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	opts := []ops.SubmitOption{ops.WithPriority(int(in.Priority)), ops.WithMaxAttempts(int(in.MaxAttempts)),
		ops.WithBackoff(ms(in.BackoffMS), ms(in.BackoffMax)), ops.WithLease(ms(in.LeaseMS)), ops.WithAckTimeout(ms(in.AckTimeoutMS))}
	if in.HasPayload {
		opts = append(opts, ops.WithPayload(in.Payload))
	}
	if in.DelayMS != 0 {
		opts = append(opts, ops.WithDelay(ms(in.DelayMS)))
	}
	if in.RunAt != 0 {
		opts = append(opts, ops.WithRunAt(time.Unix(0, in.RunAt)))
	}
	if in.UniqueKey != "" {
		opts = append(opts, ops.WithUniqueKey(in.UniqueKey))
	}
	if in.UniqueForMS != 0 {
		opts = append(opts, ops.WithUniqueFor(ms(in.UniqueForMS)))
	}
	return opts
}

// submitJob is a drawn batch element as SubmitMany takes it.
func submitJob(in *events.Input) ops.SubmitJob {
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	return ops.SubmitJob{ID: in.Job, Queue: in.Queue, Options: ops.SubmitOptions{Priority: in.Priority, MaxAttempts: in.MaxAttempts,
		Backoff: ms(in.BackoffMS), BackoffMax: ms(in.BackoffMax), Lease: ms(in.LeaseMS), AckTimeout: ms(in.AckTimeoutMS),
		Payload: in.Payload, HasPayload: in.HasPayload}}
}

// submit makes submission s's call, and calls again while it learned no
// verdict and none of its jobs is known to the fold (its input may be
// lost, or stored unknown to the dispatcher: then the next call's is a
// duplicate_submit), until until.
func (q *queueRun) submit(ctx context.Context, stop <-chan struct{}, until time.Time, s submission) {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		err := q.send(ctx, stop, until, "submit", s)
		var rej *ops.RejectedError
		if err == nil || errors.As(err, &rej) || ctx.Err() != nil || !time.Now().Before(until) || q.anyKnown(s.ids) {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
	}
}

// send makes submission s's call, once.
func (q *queueRun) send(ctx context.Context, stop <-chan struct{}, until time.Time, op string, s submission) error {
	return q.disp.call(ctx, stop, until, op, s.ids, func(ctx context.Context) ([]events.Decision, error) {
		if s.single != nil {
			d, err := q.disp.c.Submit(ctx, s.single.Job, s.single.Queue, submitOptions(s.single)...)
			return []events.Decision{d}, err
		}
		rs, err := q.disp.c.SubmitMany(ctx, s.batch)
		ds := make([]events.Decision, len(rs))
		for i := range rs {
			ds[i] = rs[i].Decision
		}
		return ds, err
	})
}

// anyKnown reports whether the fold knows one of the jobs ids.
func (q *queueRun) anyKnown(ids []string) bool {
	states := q.jobStates()
	for _, id := range ids {
		if _, ok := states[id]; ok {
			return true
		}
	}
	return false
}

// dispatch submits the run's jobs at the seed's times until they are all
// submitted or the faults stop; now and then it submits a job again (a
// dispatcher that did not learn its verdict: duplicate_submit).
func (q *queueRun) dispatch(ctx context.Context, stop <-chan struct{}) {
	r := rand.New(rand.NewPCG(q.seeds[0], 5))
	var sent []submission
	if !q.waitLive(ctx, stop) {
		return
	}
	for i := 0; i < q.p.QueueJobs; {
		sleep(ctx, stop, time.Duration(50+r.IntN(700))*time.Millisecond)
		if q.isQuiet() || ctx.Err() != nil {
			return
		}
		until := time.Now().Add(5 * time.Second)
		if len(sent) > 0 && r.IntN(10) == 0 {
			s := sent[r.IntN(len(sent))]
			if !q.allLive(s.ids) {
				// (A job discarded is retired, its id free again: a
				// resend would submit a new job of that id, whose
				// generations start again at 1, which the effects'
				// oracle, keyed by job and generation, cannot tell from
				// the old one's.)
				continue
			}
			q.send(ctx, stop, until, "resubmit", s)
			continue
		}
		var s submission
		if n := min(2+r.IntN(5), q.p.QueueJobs-i); q.p.Batches && n >= 2 && r.IntN(3) == 0 {
			for k := range n {
				in := q.submitInput(r, fmt.Sprintf("q%d", i+k+1), false)
				s.batch = append(s.batch, submitJob(&in))
				s.ids = append(s.ids, in.Job)
			}
			i += n
		} else {
			in := q.submitInput(r, fmt.Sprintf("q%d", i+1), true)
			s.single, s.ids = &in, []string{in.Job}
			i++
		}
		sent = append(sent, s)
		q.submit(ctx, stop, until, s)
	}
}

// waitLive waits until the log has moved to the current rules revision
// (a rules input folded): the model's input stream takes every subject
// from the start, where a deployment's takes none before its coordinator
// is live (PROTOCOL.md §1.1), so a pull or submit before it would be
// judged under revision 1, which knows no queues.
// It reports whether it is (false: stop or ctx ended first).
func (q *queueRun) waitLive(ctx context.Context, stop <-chan struct{}) bool {
	for !q.view.isLive() {
		sleep(ctx, stop, 10*time.Millisecond)
		select {
		case <-stop:
			return false
		default:
		}
		if ctx.Err() != nil {
			return false
		}
	}
	return true
}

// jobStates is every queue job's last projection in the decision stream
// (the operator's view: the board, or the state API), by id.
func (q *queueRun) jobStates() map[string]events.Job {
	jobs, _ := q.view.queueJobs()
	return jobs
}

// allLive reports whether every job of ids is in the projection and
// neither DEAD nor ended.
func (q *queueRun) allLive(ids []string) bool {
	states := q.jobStates()
	for _, id := range ids {
		j, ok := states[id]
		if !ok || j.State == events.StateDead || queueEnded(j.State) {
			return false
		}
	}
	return true
}

// ended reports whether every queue job submitted has ended: every
// submit (and operator's input) stored was folded, and the jobs it made
// have ended.
func (q *queueRun) ended() bool {
	jobs, folded := q.view.queueJobs()
	if !folded {
		return false
	}
	for _, j := range jobs {
		if !queueEnded(j.State) {
			return false
		}
	}
	return true
}

// idle reports whether neither the dispatcher nor the operator has a call
// in progress: a call between two attempts of its publish has no input in
// flight (Net.Publishing), and its next attempt may yet requeue a job
// (seed 11355 of the first long run: an operator's retry of a DEAD job
// stored after the run had judged every job ended and its workers
// stopped).
func (q *queueRun) idle() bool {
	return q.disp.busy.Load() == 0 && q.ops.busy.Load() == 0
}

// queueEnded: a queue job in this state awaits nothing more.
func queueEnded(s events.State) bool {
	switch s {
	case events.StateCompleted, events.StateFailed, events.StateCancelled, events.StateDead, events.StateRevoked:
		return true
	}
	return false
}

// operate is the operator: at the seed's times it settles UNRESOLVED
// jobs, and until the faults stop it retries (once a job) or discards
// DEAD ones, cancels and revokes live ones, and changes the policy.
func (q *queueRun) operate(ctx context.Context, stop <-chan struct{}) {
	r := rand.New(rand.NewPCG(q.seeds[1], 6))
	retried := map[string]bool{}
	if !q.waitLive(ctx, stop) {
		return
	}
	if q.p.Policies {
		q.setPolicy(ctx, r, stop)
	}
	for {
		sleep(ctx, stop, time.Duration(300+r.IntN(1200))*time.Millisecond)
		select {
		case <-stop:
			return
		default:
		}
		if ctx.Err() != nil {
			return
		}
		quiet := q.isQuiet()
		states := q.jobStates()
		ids := make([]string, 0, len(states))
		for id := range states {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		until := time.Now().Add(3 * time.Second)
		var live []string
		for _, id := range ids {
			j := states[id]
			switch {
			case j.State == events.StateUnresolved:
				out := events.OutcomeFailed
				if r.IntN(2) == 0 {
					out = events.OutcomeCancelled
				}
				q.ops.call(ctx, stop, until, "settle", []string{id}, one(func(ctx context.Context) (events.Decision, error) {
					return q.ops.c.Settle(ctx, id, out, "sim")
				}))
			case quiet:
			case j.State == events.StateDead && !retried[id] && r.IntN(2) == 0:
				retried[id] = true
				q.ops.call(ctx, stop, until, "retry", []string{id}, one(func(ctx context.Context) (events.Decision, error) {
					return q.ops.c.Retry(ctx, id, "sim")
				}))
			case j.State == events.StateDead && r.IntN(3) == 0:
				q.ops.call(ctx, stop, until, "discard", []string{id}, one(func(ctx context.Context) (events.Decision, error) {
					return q.ops.c.Discard(ctx, id, "sim")
				}))
			case j.State == events.StateQueued || j.State.Live():
				live = append(live, id)
			}
		}
		if quiet || !q.p.QueueOps {
			continue
		}
		if len(live) > 0 && r.IntN(6) == 0 {
			id := live[r.IntN(len(live))]
			q.ops.call(ctx, stop, until, "cancel", []string{id}, one(func(ctx context.Context) (events.Decision, error) {
				return q.ops.c.Cancel(ctx, id, "", 0, "sim")
			}))
		}
		if len(live) > 0 && r.IntN(8) == 0 {
			id := live[r.IntN(len(live))]
			q.ops.call(ctx, stop, until, "revoke", []string{id}, one(func(ctx context.Context) (events.Decision, error) {
				return q.ops.c.Revoke(ctx, id, "sim")
			}))
		}
		if q.p.Policies && r.IntN(6) == 0 {
			q.setPolicy(ctx, r, stop)
		}
	}
}

// setPolicy publishes a policy whose defaults (the lease and ACK timeout
// of the queue jobs that name none, the time to reconcile a cancellation)
// the seed draws; the bounds stay the defaults'.
func (q *queueRun) setPolicy(ctx context.Context, r *rand.Rand, stop <-chan struct{}) {
	p := events.DefaultPolicy()
	p.DefaultLease = int64(time.Duration(500+r.IntN(1500)) * time.Millisecond)
	p.AckTimeout = int64(time.Duration(300+r.IntN(1200)) * time.Millisecond)
	p.CancelTimeout = int64(time.Duration(500+r.IntN(4500)) * time.Millisecond)
	q.ops.call(ctx, stop, time.Now().Add(3*time.Second), "policy", []string{events.NoJob}, one(func(ctx context.Context) (events.Decision, error) {
		return q.ops.c.SetPolicy(ctx, p)
	}))
	q.net.Touch("queue: policy sent")
}

// queueWorker is a worker of the Go SDK running worker.Run on every queue.
type queueWorker struct {
	q     *queueRun
	id    string
	seed  uint64
	j     journal
	calls *calls
	runs  []*calls // every run's calls (a restarted worker gets new ones): what reached it when
}

// reached reports whether decision seq of the decision stream, stored at
// storedAt, had reached the worker by t (in any of its runs).
func (w *queueWorker) reached(seq uint64, storedAt int64, t time.Time) bool {
	for _, c := range w.runs {
		c.mu.Lock()
		at, ok := c.delivered[decAt{seq, storedAt}]
		c.mu.Unlock()
		if ok && !at.After(t) {
			return true
		}
	}
	return false
}

func (w *queueWorker) run(ctx context.Context, stop <-chan struct{}) {
	q := w.q
	if !q.waitLive(ctx, stop) {
		return
	}
	tr := q.net.Client(w.id).Transport()
	tr.Journal = w.j.record
	w.calls = newCalls(tr, w.id)
	w.runs = append(w.runs, w.calls)
	sw, err := worker.NewWithTransport(w.calls, w.id, worker.WithVerdictTimeout(3*time.Second))
	if err != nil {
		q.finding("%s: worker.NewWithTransport: %v", w.id, err)
		return
	}
	defer sw.Close()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
		case <-rctx.Done():
		}
		cancel()
	}()
	r := rand.New(rand.NewPCG(w.seed, 7))
	ttl := time.Duration(5000+r.IntN(25000)) * time.Millisecond
	// One to three slots per queue, so that offers find every slot taken
	// (more offers than slots, in flight together, or a lease the
	// coordinator ended while its handler still runs): Run declines the
	// surplus after correcting its announcement, a decline that is no
	// refusal (PROTOCOL.md §22.7).
	conc := 1 + r.IntN(3)
	var wg sync.WaitGroup
	for _, name := range queueNames[:q.p.Queues] {
		wg.Go(func() {
			err := sw.Run(rctx, name, w.handle, worker.WithConcurrency(conc), worker.WithCapacityTTL(ttl))
			if err != nil && !errors.Is(err, worker.ErrClosed) {
				q.finding("%s: run %s: %v", w.id, name, err)
			}
		})
	}
	wg.Wait()
}

// handle runs one attempt: what it does is drawn from the attempt's own
// generator (the job and generation), whichever goroutine runs first.
func (w *queueWorker) handle(ctx context.Context, j *worker.Job) error {
	q := w.q
	l := j.Lease
	tok := l.Token()
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", tok.Job, tok.Generation)
	r := rand.New(rand.NewPCG(w.seed, h.Sum64()))
	x := r.Float64()
	p := q.p
	quiet := q.isQuiet()
	switch {
	case x < p.Hang && !quiet:
		// The process paused past the lease (a stop, a long GC): its
		// renewals held with it. It wakes to find its authority gone, and
		// writes nothing more.
		q.net.Touch("queue handler: paused past its lease")
		pause := min(time.Until(l.Expires())+time.Duration(100+r.IntN(1000))*time.Millisecond, 4*time.Second)
		q.net.Cut(w.id, time.Now().Add(pause))
		time.Sleep(pause)
		w.effect(l)
		return errors.New("sim: woke after a pause")
	case x < p.Hang+p.Slow:
		// Long work, for as long as the lease is renewed and not
		// cancelled.
		q.net.Touch("queue handler: long")
		sleepCtx(ctx, time.Duration(1000+r.IntN(3000))*time.Millisecond)
	}
	steps := 1 + r.IntN(4)
	for i := range steps {
		sleepCtx(ctx, time.Duration(20+r.IntN(300))*time.Millisecond)
		if err := ctx.Err(); err != nil {
			q.net.Touch("queue handler: stopped by its context")
			return err
		}
		if p.Progress && r.IntN(3) == 0 {
			cctx, k := w.calls.tag(ctx, "progress", tok.Job)
			err := l.Progress(cctx, (i+1)*100/steps)
			w.calls.done(k, err, nil)
			continue
		}
		w.effect(l)
	}
	y := r.Float64()
	switch {
	case y < p.Panic:
		q.net.Touch("queue handler: panicked")
		panic("sim: handler panicked")
	case y < p.Panic+p.Permanent:
		q.net.Touch("queue handler: failed for good")
		return worker.Permanent(errors.New("sim: failed for good"))
	case y < p.Panic+p.Permanent+p.Fail:
		q.net.Touch("queue handler: failed")
		return errors.New("sim: attempt failed")
	}
	q.net.Touch("queue handler: succeeded")
	return nil
}

// effect writes to the fenced resource while the lease holds, as a
// careful handler checks (its context, and its local deadline).
func (w *queueWorker) effect(l *worker.Lease) {
	tok := l.Token()
	if now := time.Now(); l.Context().Err() == nil && now.Before(l.Expires()) {
		w.q.res.write(tok.Job, tok.Generation, w.id, now)
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// checkOpsCalls is the wrong-waiter oracle of package ops: every verdict
// an ops call of actor a returned must be the stored verdict of the
// call's own input about the call's job. The actor makes one call at a
// time, so its own inputs are those whose PubAck it read during the call
// (its journal); the verdict must answer one of them, be about the job
// (or, a whole batch refused, about none: "_"), and be in the decision
// stream with that kind and reason.
//
// A verdict of an input the server acknowledged and then lost in a crash
// (excused, by Msg-Id: lost.go) is not checked: it is not in the
// decision stream, and the input's sequence holds another input since.
func checkOpsCalls(rep *Report, net *jsmodel.Net, l *chaos.Log, a *opsActor, excused map[string]bool) {
	type key struct {
		cause uint64
		job   string
	}
	stored := map[key]events.Decision{}
	for _, m := range l.Decisions {
		d, err := events.DecodeDecision(m.Data)
		if err != nil || d.Kind.Derived() || d.Role != events.RoleOps || d.Actor != a.id {
			continue
		}
		if _, ok := stored[key{d.Cause, d.Job.ID}]; !ok {
			stored[key{d.Cause, d.Job.ID}] = d
		}
	}
	type ack struct {
		seq uint64
		at  time.Time
		id  string
	}
	var acks []ack // the PubAcks the actor read, in order
	for _, e := range a.j.all() {
		if e.Kind == chaos.EntryAck {
			acks = append(acks, ack{e.Seq, time.Unix(0, e.At), e.MsgID})
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.calls {
		what := fmt.Sprintf("ops call: %s's %s of %s (%s to %s)", a.id, c.op, c.job, c.from.Format("15:04:05.000000"), c.to.Format("15:04:05.000000"))
		d := c.d
		// The call's own inputs: those acknowledged during it.
		acked, lost := false, false
		for _, k := range acks {
			if k.seq == d.Cause && !k.at.Before(c.from) && !k.at.After(c.to) {
				acked, lost = true, lost || excused[k.id]
			}
		}
		own, ok := stored[key{d.Cause, d.Job.ID}]
		switch {
		case d.Job.ID != c.job && d.Job.ID != events.NoJob:
			rep.finding("%s: given a verdict about job %s (%s/%s of input %d)", what, d.Job.ID, d.Kind, d.Reason, d.Cause)
		case !acked:
			rep.finding("%s: given the verdict of input %d (%s/%s), which it did not have acknowledged during the call", what, d.Cause, d.Kind, d.Reason)
		case lost:
			net.Touch("ops calls: input lost in a crash, not checked")
		case !ok:
			rep.finding("%s: given %s/%s of input %d, which the decision stream does not hold", what, d.Kind, d.Reason, d.Cause)
		case own.Kind != d.Kind || own.Reason != d.Reason:
			rep.finding("%s: given %s/%s of input %d, but the stored verdict is %s/%s", what, d.Kind, d.Reason, d.Cause, own.Kind, own.Reason)
		default:
			net.Touch("ops calls: verdict checked")
		}
	}
}

// close closes the dispatcher's and the operator's clients (their
// decision readers).
func (q *queueRun) close() {
	q.disp.c.Close()
	q.ops.c.Close()
}
