package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/maknow/tenure/events"
)

// Run's ACKs and results travel like renewals (renew.go): through a
// batcher per verb that keeps at most maxBatchesInFlight inputs of that
// verb awaiting their verdicts per partition. Idle, an ACK or a result
// leaves at once, alone; under load, those that fall due meanwhile leave
// together in one batch ack or batch result (rules revision 7, PROTOCOL.md
// §22.9), each element judged and answered on its own. One input stored
// (one fsync with sync always) for many jobs' ACKs or results.
//
// The batcher also retries: an input whose verdicts were not all learned
// is sent again under the same Msg-Id (the stream stores it once) until
// they are, or until the earliest of its elements' local deadlines (an
// offer's ACK deadline, a lease's expiry). Only Run uses the batchers:
// Offer.Accept and the Lease methods send one input each, as documented.

// maxBatchesInFlight bounds a batcher's inputs awaiting their verdicts per
// partition, as maxRenewBatches does a worker's renewals.
const maxBatchesInFlight = 4

// batchReq is one element handed to a batcher.
type batchReq struct {
	in       events.Input      // Job, LeaseID, Generation; a result's Outcome, Text, Permanent
	deadline time.Time         // the element's local deadline: no attempt is sent after it
	trace    trace.SpanContext // the trace context it carries when sent alone (a batch carries none)
	done     chan batchResult
}

// batchResult is the outcome of one element: its verdict, or err. t0 is
// the local time just before the input that carried it was first
// published.
type batchResult struct {
	d   events.Decision
	t0  time.Time
	err error
}

// batcher coalesces one verb's inputs (ack, result).
type batcher struct {
	w    *Worker
	verb events.Verb

	mu   sync.Mutex
	q    [][]*batchReq // per partition: waiting for a free input
	n    []int         // per partition: inputs awaiting their verdicts
	wake chan struct{}

	// single is set once the log refused a batch of this verb as a
	// subject it does not know (rules revision 6 or earlier): from then
	// on every element is an input of its own.
	single atomic.Bool
}

func newBatcher(w *Worker, verb events.Verb, parts int) *batcher {
	return &batcher{w: w, verb: verb, q: make([][]*batchReq, parts), n: make([]int, parts), wake: make(chan struct{}, 1)}
}

// do hands in (an element of the batcher's verb) to the batcher and waits
// for its outcome. The batcher answers every element, even on Close.
//
// sc is the trace context the element's input carries when it is sent
// alone (PROTOCOL.md §27); an input carrying a batch carries none, since
// its elements belong to as many traces.
func (b *batcher) do(in events.Input, deadline time.Time, sc trace.SpanContext) batchResult {
	r := &batchReq{in: in, deadline: deadline, trace: sc, done: make(chan batchResult, 1)}
	k := b.w.part.Of(in.Job).Index
	b.mu.Lock()
	if b.w.ctx.Err() != nil {
		b.mu.Unlock()
		return batchResult{err: ErrClosed}
	}
	b.q[k] = append(b.q[k], r)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return <-r.done
}

// elemBytes bounds the bytes an element adds to a batch body: its fields,
// its tokens, its text escaped at worst (\u00XX for each byte).
func elemBytes(in *events.Input) int {
	return 192 + len(in.Job) + len(in.LeaseID) + 6*len(in.Text)
}

// loop sends the queued elements, at most events.MaxBatch (and
// events.MaxInputBytes of body) per input and maxBatchesInFlight inputs
// at a time per partition. It exits on Close, failing what is queued with
// ErrClosed.
func (b *batcher) loop() {
	defer b.w.wg.Done()
	defer func() {
		b.mu.Lock()
		qs := b.q
		b.q = make([][]*batchReq, len(qs))
		b.mu.Unlock()
		for _, q := range qs {
			for _, r := range q {
				r.done <- batchResult{err: ErrClosed}
			}
		}
	}()
	for {
		select {
		case <-b.wake:
		case <-b.w.ctx.Done():
			return
		}
		b.mu.Lock()
		for k := range b.q {
			for b.n[k] < maxBatchesInFlight && len(b.q[k]) > 0 {
				q := b.q[k]
				n, size := 0, 64
				for n < len(q) && n < events.MaxBatch {
					if s := elemBytes(&q[n].in); n > 0 && size+s > events.MaxInputBytes {
						break
					} else {
						size += s
					}
					n++
				}
				batch := make([]*batchReq, n)
				copy(batch, q)
				clear(q[:n])
				b.q[k] = q[n:]
				if len(b.q[k]) == 0 {
					b.q[k] = nil
				}
				b.n[k]++
				b.w.wg.Add(1) // the loop itself is counted: never from zero
				go func() {
					defer b.w.wg.Done()
					b.send(batch)
					b.mu.Lock()
					b.n[k]--
					b.mu.Unlock()
					select { // more may have queued meanwhile
					case b.wake <- struct{}{}:
					default:
					}
				}()
			}
		}
		b.mu.Unlock()
	}
}

// send publishes one input for batch (elements of one partition): a
// single input for one element (or for each, when the log refuses
// batches), a batch for more, and hands each element its verdict.
func (b *batcher) send(batch []*batchReq) {
	if len(batch) == 1 || b.single.Load() {
		var wg sync.WaitGroup
		for _, r := range batch {
			wg.Go(func() { b.sendOne(r) })
		}
		wg.Wait()
		return
	}
	in := events.Input{Verb: b.verb, Job: events.NoJob, Batch: make([]events.Input, len(batch))}
	for i, r := range batch {
		in.Batch[i] = r.in
	}
	p := b.w.newInput(&in)
	p.part = b.w.part.Of(batch[0].in.Job) // a batch's job token is "_"
	p.t0 = b.w.clk.Now()
	for _, r := range batch { // the publish attempts fit in the earliest deadline
		if p.deadline.IsZero() || r.deadline.Before(p.deadline) {
			p.deadline = r.deadline
		}
	}
	answered := make([]bool, len(batch))
	left := len(batch)
	answer := func(i int, res batchResult) {
		answered[i] = true
		left--
		batch[i].done <- res
	}
	var first verdictKey // the input's key once stored, and the verdicts of it learned so far
	got := 0
	for {
		ds, key, err := b.attempt(p, first, got, len(batch))
		if first != key {
			first, got = key, 0 // stored again as another input (past the duplicate window): all its verdicts come
		}
		got += len(ds)
		for _, d := range ds {
			if d.Job.ID == events.NoJob { // the whole input refused
				if d.Kind == events.KindRejected && d.Reason == events.ReasonBadSubject {
					b.single.Store(true) // a log below rules revision 7
					var rest []*batchReq
					for i, r := range batch {
						if !answered[i] {
							rest = append(rest, r)
						}
					}
					b.send(rest)
					return
				}
				for i := range batch {
					if !answered[i] {
						answer(i, batchResult{d: d, t0: p.t0})
					}
				}
				return
			}
			for i, r := range batch { // in array order; by job all the same
				if !answered[i] && r.in.Job == d.Job.ID {
					answer(i, batchResult{d: d, t0: p.t0})
					break
				}
			}
		}
		if left == 0 {
			return
		}
		if err == nil {
			err = fmt.Errorf("%w: input %s: %d verdicts missing", ErrNoVerdict, p.msgID, left)
		}
		if !errors.Is(err, ErrNoVerdict) || b.w.ctx.Err() != nil || !b.w.clk.Now().Before(p.deadline) {
			for i := range batch {
				if !answered[i] {
					answer(i, batchResult{t0: p.t0, err: err})
				}
			}
			return
		}
		b.pause()
	}
}

// attempt publishes p (again, under its Msg-Id) and waits for the verdicts
// of it not learned yet: n of them, or n-got when it is stored as input
// first, whose first got verdicts were learned.
func (b *batcher) attempt(p *input, first verdictKey, got, n int) ([]events.Decision, verdictKey, error) {
	w := b.w
	if w.ctx.Err() != nil {
		return nil, first, ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.opts.VerdictTimeout)
	defer cancel()
	stop := context.AfterFunc(w.ctx, cancel)
	defer stop()
	key, err := w.publishKey(ctx, p)
	if err != nil {
		return nil, first, w.callErr(ctx, err)
	}
	want := n
	if key == first {
		want = n - got
	}
	ds, err := w.awaitN(ctx, key.part, key.seq, want, p.verb, p.job)
	return ds, key, err
}

// sendOne sends r alone, again under the same Msg-Id while its verdict is
// not learned and its deadline has not passed.
func (b *batcher) sendOne(r *batchReq) {
	in := r.in
	in.Verb = b.verb
	p := b.w.newInput(&in)
	p.deadline = r.deadline
	p.trace = r.trace
	for {
		d, err := b.w.send(context.Background(), p)
		if err == nil || !errors.Is(err, ErrNoVerdict) || b.w.ctx.Err() != nil || !b.w.clk.Now().Before(r.deadline) {
			r.done <- batchResult{d: d, t0: p.t0, err: err}
			return
		}
		b.pause()
	}
}

// pause waits a little before an input is sent again.
func (b *batcher) pause() {
	t := b.w.clk.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C():
	case <-b.w.ctx.Done():
	}
}
