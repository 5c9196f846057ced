package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/receipt"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/tracing"
)

// workerInactive is the inactivity threshold of a worker's decision
// consumers: a consumer whose process died holds one of the worker's few
// consumer names (events.WorkerConsumers) that long.
const workerInactive = 30 * time.Second

// Worker is one worker identity connected to Tenure. Its methods are safe for
// concurrent use. Create it with Connect; Close it when done.
type Worker struct {
	id   string
	tr   Transport   // JetStream (Connect), or another one (NewWithTransport)
	clk  clock.Clock // Options.Clock, or the real clock
	opts Options
	part events.Partition // Count: the deployment's partition count (0: unpartitioned)
	ins  []string         // input stream name of each partition (one if unpartitioned)
	// intake is this worker's intake stream (quotas, PROTOCOL.md §4.2;
	// "" when partitioned), viaIntake whether its inputs were last stored
	// there (learned from the server's answers).
	intake    string
	viaIntake atomic.Bool

	ctx    context.Context // cancelled (cause ErrClosed) by Close
	cancel context.CancelCauseFunc
	fols   []Follower     // the decision reader of each partition
	wg     sync.WaitGroup // the offer pump and every lease's renew loop
	once   sync.Once

	rmu    sync.Mutex    // guards renewQ and renewN
	renewQ [][]*renewReq // per partition: renewals waiting for the renewer
	renewN []int         // per partition: renewal inputs awaiting their verdicts
	renewS chan struct{} // wakes the renewer

	acks, results *batcher // Run's ACKs and results (batch.go)

	mu      sync.Mutex
	waiters map[verdictKey][]*waiter // input -> its callers (more than one only after a lost tail: waiter)
	leases  map[leaseKey]*Lease
	stash   stash // unclaimed decisions: verdicts that overtook their PubAck, lease decisions that overtook its registration
	offerQ  []Offer
	offerC  chan Offer
	offerS  chan struct{}      // wakes the offer pump
	runs    map[string]*runner // the Run of each queue: its offers go there, not to offerQ
}

type leaseKey struct{ job, leaseID string }

// verdictKey names one stored input: input sequences are per partition
// (each partition has its own input stream), so the partition index is
// part of the key (0 when unpartitioned).
//
// An input stored in the worker's intake stream (quotas) is named by its
// intake sequence, with intakeKey set in part: the two sequence spaces
// never meet.
type verdictKey struct {
	part uint32
	seq  uint64
}

// intakeKey marks a verdictKey's part as naming an intake sequence.
const intakeKey = 1 << 31

// waiter receives the verdicts of one input: left more are expected (a
// batch renew has one per lease); ch has room for all of them.
//
// It takes only the verdicts of its input's verb and job (any job for an
// input about no job: a batch, a pull), or about no job (the whole input
// rejected). An input sequence names one input only while the stream keeps
// it: a server that loses its unsynced tail in a crash (PROTOCOL.md §2)
// stores the next inputs at the sequences lost, so an input of this
// worker whose PubAck came back may have lost its sequence to another
// input of this worker, whose verdict is not its own (the simulator's
// seeds 50926, 50942: a renewal's waiter took the verdict of a result,
// and Run's pull the late verdict of an ACK, which stopped Run). The
// input lost has no verdict; its caller learns none, as after any
// unknown outcome.
type waiter struct {
	ch   chan events.Decision
	left int
	verb events.Verb
	job  string
}

// wants reports whether d may be a verdict of wt's input. A verdict with
// no verb is of an input whose verb the log's rules do not know (a pull
// sent to a log below revision 4: bad_subject), which can only be the
// waiter's own.
func (wt *waiter) wants(d *events.Decision) bool {
	return (d.Verb == wt.verb || d.Verb == events.VerbNone) && (wt.job == events.NoJob || d.Job.ID == events.NoJob || d.Job.ID == wt.job)
}

// Connect starts a worker with identity id (a token of 1 to 64
// [A-Za-z0-9_-]) on nc, which the caller keeps owning (Close does not close
// it).
//
// Before returning it starts reading the decisions addressed to id
// (tenure.out.<id>.>) on the decision stream, from the stream's next
// sequence on, through a follow.Follower: every verdict of an input
// published later reaches it, and a consumer lost or deleted (a reconnect,
// a cluster node killed, an operator) is replaced after the last decision
// read, without a gap and with short, retried creation requests. Its
// consumers take one of the worker's four names
// (events.WorkerConsumerNames), another one when a name is in use (a twin
// process with the same id, or the consumer of a process that crashed less
// than 30 s ago). The worker's NATS user needs permission to publish on
// tenure.in.worker.<id>.> and to create, look up, delete and pull from
// those consumers on the decision stream; it needs no stream info.
//
// Connect also finds out whether the deployment is partitioned
// (streams.DiscoverWorker); if it is, it follows every partition's
// decision stream, one follow.Follower each, and the worker's user needs
// those permissions on every partition's decision stream.
func Connect(nc *nats.Conn, id string, opts ...Option) (*Worker, error) {
	if !events.ValidToken(id) {
		return nil, fmt.Errorf("worker: invalid id %q: want 1 to %d of [A-Za-z0-9_-]", id, events.MaxTokenLen)
	}
	if nc == nil {
		return nil, errors.New("worker: nil NATS connection")
	}
	o := Options{
		StreamPrefix:   DefaultStreamPrefix,
		VerdictTimeout: DefaultVerdictTimeout,
		PublishTimeout: DefaultPublishTimeout,
		OfferBuffer:    DefaultOfferBuffer,
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.VerdictTimeout)
	defer cancel()
	// A worker in an account of its own (tenure auth init) reaches the
	// deployment's JetStream API under the worker prefix, and may not read
	// the decision streams' info: it finds the deployment by looking up
	// its first consumer name.
	js, count, err := streams.DiscoverWorker(ctx, nc, streams.Topology{Prefix: o.StreamPrefix}, events.WorkerConsumerName(id, 0))
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	topos := streams.Topology{Prefix: o.StreamPrefix}.Partitions(count)
	w := newWorker(id, o, jsTransport{js}, topos)
	if err := w.start(ctx, topos); err != nil {
		w.cancel(err)
		return nil, err
	}
	w.run()
	return w, nil
}

// NewWithTransport starts a worker with identity id, as Connect does, on
// transport t instead of a NATS connection: an unpartitioned deployment of
// the streams Options.StreamPrefix names (the simulator's model of
// JetStream; internal/sim).
func NewWithTransport(t Transport, id string, opts ...Option) (*Worker, error) {
	if !events.ValidToken(id) {
		return nil, fmt.Errorf("worker: invalid id %q: want 1 to %d of [A-Za-z0-9_-]", id, events.MaxTokenLen)
	}
	o := Options{
		StreamPrefix:   DefaultStreamPrefix,
		VerdictTimeout: DefaultVerdictTimeout,
		PublishTimeout: DefaultPublishTimeout,
		OfferBuffer:    DefaultOfferBuffer,
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.VerdictTimeout)
	defer cancel()
	topos := streams.Topology{Prefix: o.StreamPrefix}.Partitions(0)
	w := newWorker(id, o, t, topos)
	if err := w.start(ctx, topos); err != nil {
		w.cancel(err)
		return nil, err
	}
	w.run()
	return w, nil
}

// newWorker returns the worker of Connect, publishing with tr to the
// input streams of topos, before its decision readers and goroutines start.
func newWorker(id string, o Options, tr Transport, topos []streams.Topology) *Worker {
	w := &Worker{
		id: id, tr: tr, clk: clock.OrReal(o.Clock), opts: o,
		part:    events.Partition{Count: topos[0].Partition.Count},
		renewQ:  make([][]*renewReq, len(topos)),
		renewN:  make([]int, len(topos)),
		waiters: make(map[verdictKey][]*waiter),
		leases:  make(map[leaseKey]*Lease),
		stash:   newStash(),
		runs:    make(map[string]*runner),
		offerC:  make(chan Offer),
		offerS:  make(chan struct{}, 1),
		renewS:  make(chan struct{}, 1),
	}
	for _, t := range topos {
		w.ins = append(w.ins, t.InputStream())
	}
	w.acks, w.results = newBatcher(w, events.VerbAck, len(topos)), newBatcher(w, events.VerbResult, len(topos))
	if len(topos) == 1 && !topos[0].Partition.Partitioned() {
		w.intake = topos[0].IntakeStream(id)
	}
	w.ctx, w.cancel = context.WithCancelCause(context.Background())
	return w
}

// run starts the offer pump, the renewer and Run's batchers.
func (w *Worker) run() {
	w.wg.Add(4)
	go w.pumpOffers()
	go w.renewer()
	go w.acks.loop()
	go w.results.loop()
}

// start creates the decision consumer of every partition (of the
// deployment, when unpartitioned) and starts consuming; on error it stops
// those it started.
func (w *Worker) start(ctx context.Context, topos []streams.Topology) error {
	for _, t := range topos {
		if err := w.follow(ctx, t.Partition.Index, t.DecisionStream()); err != nil {
			w.stopConsumers()
			return err
		}
	}
	return nil
}

// follow starts the decision consumer of partition part, on stream out.
func (w *Worker) follow(ctx context.Context, part uint32, out string) error {
	// From the next decision on, with no gap: the first consumer delivers
	// what is stored after its creation (deliver policy new: a worker may
	// not read the stream's info to learn its last sequence), and a
	// follower replaces a lost consumer after the last decision it handed
	// over (and creates it with short, retried requests, so that a cluster
	// without a JetStream meta leader for a few seconds stalls the worker
	// no longer than that).
	f := w.tr.Follow(w.ctx, follow.Config{
		Stream:  out,
		FromNew: true,
		Filters: []string{events.AddresseeFilter(w.id)},
		OnError: w.report,
		OnDrop: func(reason, subject string) {
			w.report(fmt.Errorf("worker: decision stream %s: dropped a message no consumer of this worker sent (%s) on %s", out, reason, subject))
		},
		// A worker may hold only the consumers of its own few names on a
		// decision stream (tenure auth init allows no others), and may
		// delete them; the consumer of a process that died frees its name
		// after workerInactive.
		Names:             events.WorkerConsumerNames(w.id),
		InactiveThreshold: workerInactive,
	}, func(m follow.Msg) {
		if r := w.opts.Receipts; r != nil {
			cause, _ := strconv.ParseUint(m.Header.Get(events.HeaderCause), 10, 64)
			w.keep(r, receipt.Decision(out, m.Seq, cause, m.Header.Get(events.HeaderChain), "worker "+w.id))
		}
		src, _ := strconv.ParseUint(m.Header.Get(events.HeaderSourceSeq), 10, 64)
		w.onMsg(part, m.Subject, m.Data, delivery{seq: m.Seq, src: src, h: m.Header})
	})
	w.fols = append(w.fols, f)
	// Wait for its consumer: a worker not allowed to read its decisions
	// (or a server that does not answer) fails Connect, as before.
	select {
	case <-f.Ready():
		return nil
	case <-ctx.Done():
		err := f.Err()
		if err == nil {
			err = ctx.Err()
		}
		return fmt.Errorf("worker: decision consumer on %s: %w", out, err)
	}
}

// stopConsumers stops every decision reader and waits until it has
// stopped.
func (w *Worker) stopConsumers() {
	for _, f := range w.fols {
		f.Stop()
	}
}

// ID is the worker's identity.
func (w *Worker) ID() string { return w.id }

// Offers returns the channel of offers addressed to this worker, in the
// order the coordinator made them (in a partitioned deployment, in the
// order each partition's coordinator made them), but for the offers of a
// queue a Run of this worker runs, which go to that Run. It is closed by
// Close.
func (w *Worker) Offers() <-chan Offer { return w.offerC }

// Close stops reading decisions, cancels the context of every lease (cause
// ErrClosed), stops their renewals and waits for every goroutine the worker
// started. Leases are not released: they expire at the coordinator. Close
// does not close the NATS connection. It is idempotent.
func (w *Worker) Close() error {
	w.once.Do(func() {
		w.cancel(ErrClosed)
		w.stopConsumers()
		w.mu.Lock()
		for k, l := range w.leases {
			l.finish(ErrClosed)
			delete(w.leases, k)
		}
		w.mu.Unlock()
		w.wg.Wait()
	})
	return nil
}

// keep hands a receipt to the sink, reporting a failure.
func (w *Worker) keep(s receipt.Sink, r receipt.Receipt) {
	if err := s.Keep(r); err != nil {
		w.report(fmt.Errorf("worker: receipt of %s %d not kept: %w", r.Stream, r.Seq, err))
	}
}

func (w *Worker) report(err error) {
	if h := w.opts.ErrorHandler; h != nil && w.ctx.Err() == nil {
		h(err)
	}
}

// onMsg receives each decision addressed to this worker from partition
// part's decision stream, in stream order.
func (w *Worker) onMsg(part uint32, subject string, data []byte, dv delivery) {
	d, err := events.DecodeDecision(data)
	if err != nil {
		w.report(fmt.Errorf("worker: decision %s: %w", subject, err))
		return
	}
	w.mu.Lock()
	err = w.dispatchLocked(part, d, dv)
	w.mu.Unlock()
	if err != nil {
		w.report(err)
	}
}

// dispatch is dispatchFrom for the unpartitioned deployment.
func (w *Worker) dispatch(d events.Decision) { w.dispatchFrom(0, d) }

// dispatchFrom routes one decision read from partition part: a verdict of
// this worker's input to its caller, an offer the queue made to the Run of
// its queue if one runs, any other offer to the offer queue, a decision
// about one of its leases to the lease; what nobody claims yet is stashed.
func (w *Worker) dispatchFrom(part uint32, d events.Decision) {
	w.mu.Lock()
	err := w.dispatchLocked(part, d, delivery{})
	w.mu.Unlock()
	if err != nil {
		w.report(err)
	}
}

// delivery is what a decision's message told besides its body: its
// sequence in the decision stream (0: not known), its Tenure-Source-Seq
// (src, 0: none; a verdict of an input stored in this worker's intake
// stream, matched by that sequence), and its headers (an offer's trace
// context).
type delivery struct {
	seq, src uint64
	h        nats.Header
}

func (w *Worker) dispatchLocked(part uint32, d events.Decision, dv delivery) error {
	src := dv.src
	if w.ctx.Err() != nil {
		return nil
	}
	if w.verdictOfMine(&d) {
		k := verdictKey{part, d.Cause}
		if src > 0 {
			k = verdictKey{part | intakeKey, src}
		}
		for _, wt := range w.waiters[k] {
			if !wt.wants(&d) {
				continue
			}
			wt.ch <- d // buffered: room for every verdict expected
			wt.left--
			if wt.left == 0 || d.Job.ID == events.NoJob {
				w.dropWaiterLocked(k, wt)
			}
			return nil
		}
		return w.stash.addVerdict(k, d, w.clk.Now()) // its PubAck has not come back yet
	}
	switch d.Kind {
	case events.KindAssigned:
		// An offer the queue made (PROTOCOL.md §22.3): to the Run of its
		// queue, or, with none, to Offers like any offer.
		if d.Job.Holder != w.id {
			break
		}
		if r := w.runs[d.Job.Queue]; r != nil {
			r.offerLocked(newOffer(w, d, w.clk.Now(), dv))
			return nil
		}
		return w.queueOfferLocked(d, dv)
	case events.KindWithdrawn:
		if c := d.Capacity; c != nil && d.Addressee == w.id {
			if r := w.runs[c.Queue]; r != nil {
				r.withdrawnLocked(part)
			}
		}
	case events.KindOffered:
		if d.Job.Holder != w.id {
			break
		}
		return w.queueOfferLocked(d, dv)
	case events.KindCancelRequested, events.KindExpired, events.KindUnresolved, events.KindResolved:
		k := leaseKey{d.Job.ID, d.Job.LeaseID}
		if l := w.leases[k]; l != nil {
			if l.handle(d) {
				delete(w.leases, k)
			}
			return nil
		}
		return w.stash.addLease(k, d, w.clk.Now()) // its lease is being registered
	}
	return nil
}

// verdictOfMine reports whether d is a verdict of one of this worker's
// inputs: a decision that is not derived, caused by an input of this
// worker. An offer the queue made (assigned) is derived: the matching
// that follows every input (PROTOCOL.md §22.3) may offer a job to the
// worker whose pull, result or release freed the slot, in that input's
// decisions, after its verdict.
func (w *Worker) verdictOfMine(d *events.Decision) bool {
	return !d.Kind.Derived() && d.Role == events.RoleWorker && d.Actor == w.id
}

// register adds l and applies, in order, the stashed decisions about it.
func (w *Worker) register(l *Lease) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() != nil {
		l.finish(ErrClosed)
		return ErrClosed
	}
	k := leaseKey{l.token.Job, l.token.LeaseID}
	w.leases[k] = l
	ended := false
	for _, d := range w.stash.takeLease(k) {
		ended = l.handle(d) || ended
	}
	if ended {
		delete(w.leases, k)
	}
	w.wg.Add(1) // under w.mu: Close cannot be waiting yet
	go l.run()
	return nil
}

func (w *Worker) unregister(l *Lease) {
	w.mu.Lock()
	k := leaseKey{l.token.Job, l.token.LeaseID}
	if w.leases[k] == l {
		delete(w.leases, k)
	}
	w.mu.Unlock()
}

// input is one input to publish: its body and Msg-Id are fixed once, so
// that every retry is the same message, deduplicated by the stream.
type input struct {
	job   string
	verb  events.Verb
	part  events.Partition // the partition it is published to (the job's)
	body  []byte
	msgID string
	t0    time.Time // local time just before the first publish attempt
	sent  bool      // an attempt went out: a duplicate PubAck is then its own
	// deadline is the local deadline of the lease the input belongs to
	// (zero: none); it bounds each publish attempt (publishTimeout).
	deadline time.Time
	// trace is the trace context the input carries when the ctx it is
	// sent with has none (its lease's, its offer's; PROTOCOL.md §27).
	trace trace.SpanContext
}

func (w *Worker) newInput(in *events.Input) *input {
	in.Role, in.Actor = events.RoleWorker, w.id
	in.SentAt = w.clk.Now().UnixNano()
	return &input{job: in.Job, verb: in.Verb, part: w.part.Of(in.Job), body: events.AppendInputBody(nil, in), msgID: w.newMsgID()}
}

// newMsgID returns "<id>-<random UUID v4>": namespaced by the worker, and
// unguessable, so that no other publisher can suppress this worker's input
// through the input stream's duplicate window.
func (w *Worker) newMsgID() string {
	var u [16]byte
	_, _ = rand.Read(u[:]) // never fails (crypto/rand)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	b := make([]byte, 0, len(w.id)+37)
	b = append(b, w.id...)
	b = append(b, '-')
	b = hex.AppendEncode(b, u[0:4])
	b = append(b, '-')
	b = hex.AppendEncode(b, u[4:6])
	b = append(b, '-')
	b = hex.AppendEncode(b, u[6:8])
	b = append(b, '-')
	b = hex.AppendEncode(b, u[8:10])
	b = append(b, '-')
	b = hex.AppendEncode(b, u[10:16])
	return string(b)
}

// send publishes p (with retries, same Msg-Id) and waits for its verdict.
// The error is ErrClosed, or matches ErrNoVerdict; a verdict that does not
// accept the operation is returned as a decision, not as an error.
func (w *Worker) send(ctx context.Context, p *input) (events.Decision, error) {
	ds, err := w.sendN(ctx, p, 1)
	if err != nil {
		return events.Decision{}, err
	}
	return ds[0], nil
}

// sendN is send for an input with n verdicts (a batch renew of n leases).
// On error it returns the verdicts learned so far.
func (w *Worker) sendN(ctx context.Context, p *input, n int) ([]events.Decision, error) {
	if w.ctx.Err() != nil {
		return nil, ErrClosed // publish nothing after Close
	}
	ctx, cancel := context.WithTimeout(ctx, w.opts.VerdictTimeout)
	defer cancel()
	stop := context.AfterFunc(w.ctx, cancel)
	defer stop()
	if p.t0.IsZero() {
		p.t0 = w.clk.Now()
	}
	key, err := w.publishKey(ctx, p)
	if err != nil {
		// (A refusal over quota matches both ErrNoVerdict, since callers
		// retry those, and ErrQuota.)
		return nil, w.callErr(ctx, err)
	}
	return w.awaitN(ctx, key.part, key.seq, n, p.verb, p.job)
}

func (w *Worker) callErr(ctx context.Context, err error) error {
	if w.ctx.Err() != nil {
		return ErrClosed
	}
	if err == nil {
		err = context.Cause(ctx)
	}
	return fmt.Errorf("%w: %w", ErrNoVerdict, err)
}

// publish stores p in the input stream (of p's partition) and returns its
// sequence there. Attempts that may have failed in transit are retried with
// the same Msg-Id until ctx ends: if an earlier attempt was stored, the
// stream answers with that attempt's sequence.
func (w *Worker) publish(ctx context.Context, p *input) (uint64, error) {
	k, err := w.publishKey(ctx, p)
	return k.seq, err
}

// publishKey is publish, returning the key the input's verdicts come
// under: its sequence in the input stream, or in the worker's intake
// stream (quotas) with intakeKey set.
func (w *Worker) publishKey(ctx context.Context, p *input) (verdictKey, error) {
	msg := &nats.Msg{
		Subject: p.part.InputSubject(events.RoleWorker, w.id, p.job, p.verb),
		Data:    p.body,
	}
	w.injectTrace(ctx, p, msg)
	flips := 0
	wait := 10 * time.Millisecond
	var noStream bool      // an attempt found no stream taking the subject
	var lastNoStream error // its error
	for {
		first := !p.sent
		p.sent = true
		// A deployment with quotas stores the worker's inputs in its
		// intake stream: the expected stream header names whichever the
		// last answer showed, and an answer "expected stream does not
		// match" (10060: nothing stored) switches to the other.
		in, part := w.ins[p.part.Index], p.part.Index
		intake := w.intake != "" && w.viaIntake.Load()
		if intake {
			in, part = w.intake, part|intakeKey
		}
		actx, cancel := context.WithTimeout(ctx, publishTimeout(w.opts.PublishTimeout, p.deadline, w.clk.Now()))
		// No retries inside the client: this loop retries no responders
		// itself, so that a ctx ending meanwhile still reports them.
		ack, err := w.tr.Publish(actx, msg, p.msgID, in)
		cancel()
		if err == nil && ack.Stream != in {
			// Never with the expected-stream header; the verdict is
			// matched by (partition, sequence), so make sure.
			return verdictKey{}, fmt.Errorf("publish %s: stored by stream %s, want %s", msg.Subject, ack.Stream, in)
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jsStreamNotMatch && w.intake != "" && flips < 2 {
			flips++
			w.viaIntake.Store(!intake)
			p.sent = !first // nothing was stored: the next attempt may still be the first
			continue
		}
		if streams.QuotaRefusal(err) {
			return verdictKey{}, fmt.Errorf("publish %s: %w: %w", msg.Subject, ErrQuota, err)
		}
		if err == nil && ack.Duplicate && first {
			w.msgIDCollision(p, ack.Sequence) // not ours: resend under a fresh id
			continue
		}
		if err == nil {
			if r := w.opts.Receipts; r != nil {
				w.keep(r, receipt.Input(in, ack.Sequence, msg.Subject, msg.Data, "worker "+w.id))
			}
			return verdictKey{part, ack.Sequence}, nil
		}
		if !retryable(err) {
			return verdictKey{}, fmt.Errorf("publish %s: %w", msg.Subject, err)
		}
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
			noStream, lastNoStream = true, err
		}
		t := w.clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			if noStream {
				// No stream takes the subject: most often a brand-new
				// deployment whose coordinator has not gone live yet (its
				// input stream is in genesis, PROTOCOL.md §1.1).
				return verdictKey{}, fmt.Errorf("publish %s: %w (no input stream takes the subject yet: is the coordinator live? %w)", msg.Subject, context.Cause(ctx), streams.Classify(lastNoStream))
			}
			return verdictKey{}, fmt.Errorf("publish %s: %w (last attempt: %w)", msg.Subject, context.Cause(ctx), streams.Classify(err))
		case <-t.C():
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// injectTrace writes the trace context of ctx, or else p's, into msg's
// headers with the worker's propagator (PROTOCOL.md §27).
func (w *Worker) injectTrace(ctx context.Context, p *input, msg *nats.Msg) {
	if p.trace.IsValid() && !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, p.trace)
	}
	tracing.Inject(ctx, w.opts.Propagator, msg)
}

// spanContextOf is the trace context headers h carry (read with the
// worker's propagator), invalid when none.
func (w *Worker) spanContextOf(h nats.Header) trace.SpanContext {
	if len(h) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(tracing.Extract(context.Background(), w.opts.Propagator, h))
}

// jsStreamNotMatch is JetStream's "expected stream does not match" (the
// Nats-Expected-Stream header named another stream than the one that
// takes the subject; nothing stored).
const jsStreamNotMatch = 10060

// retryable reports whether a publish error leaves the outcome unknown or
// may clear by itself: a timeout, no responders (a stream leader being
// elected, or a new deployment's input stream still in genesis, which the
// coordinator widens when it goes live), a connection being re-established.
func retryable(err error) bool {
	switch {
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrReconnectBufExceeded):
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// No JetStream leader for the stream (yet): 10008, 10009; the
		// stream's ingest queue is full (too many requests, 429): 10167.
		return apiErr.ErrorCode == 10008 || apiErr.ErrorCode == 10009 || apiErr.ErrorCode == 10167
	}
	return false
}

// await waits for the verdict of input seq of the unpartitioned deployment,
// an input of verb about job.
func (w *Worker) await(ctx context.Context, seq uint64, verb events.Verb, job string) (events.Decision, error) {
	ds, err := w.awaitN(ctx, 0, seq, 1, verb, job)
	if err != nil {
		return events.Decision{}, err
	}
	return ds[0], nil
}

// awaitN waits for the n verdicts of input seq of partition part, an input
// of verb about job (events.NoJob: a batch or a pull), or for a verdict
// about no job (the whole input rejected), which is then the only one. On
// error it returns the verdicts learned so far.
func (w *Worker) awaitN(ctx context.Context, part uint32, seq uint64, n int, verb events.Verb, job string) ([]events.Decision, error) {
	ds := make([]events.Decision, 0, n)
	whole := false
	key := verdictKey{part, seq}
	var wt *waiter
	w.mu.Lock()
	for _, x := range w.waiters[key] {
		if x.verb == verb && x.job == job { // a wait for the same input again
			wt = x
		}
	}
	if wt == nil {
		wt = &waiter{verb: verb, job: job}
	}
	for _, d := range w.stash.takeVerdicts(key, n, wt.wants) {
		ds = append(ds, d)
		whole = d.Job.ID == events.NoJob
	}
	if len(ds) == n || whole {
		w.mu.Unlock()
		return ds, nil
	}
	if wt.ch == nil {
		wt.ch, wt.left = make(chan events.Decision, n-len(ds)), n-len(ds)
		w.waiters[key] = append(w.waiters[key], wt)
	}
	w.mu.Unlock()
	for len(ds) < n && !whole {
		select {
		case d := <-wt.ch:
			ds = append(ds, d)
			whole = d.Job.ID == events.NoJob
		case <-ctx.Done():
			w.mu.Lock()
			w.dropWaiterLocked(key, wt)
			w.mu.Unlock()
			for len(ds) < n && !whole { // arrived while giving up
				select {
				case d := <-wt.ch:
					ds = append(ds, d)
					whole = d.Job.ID == events.NoJob
					continue
				default:
				}
				break
			}
			if len(ds) == n || whole {
				return ds, nil
			}
			return ds, w.callErr(ctx, fmt.Errorf("input %d: %d of %d verdicts: %w", seq, len(ds), n, context.Cause(ctx)))
		}
	}
	return ds, nil
}

// dropWaiterLocked removes wt from the waiters of input k, if it is there.
// Called under w.mu.
func (w *Worker) dropWaiterLocked(k verdictKey, wt *waiter) {
	ws := w.waiters[k]
	for i, x := range ws {
		if x == wt {
			ws = slices.Delete(ws, i, i+1)
			break
		}
	}
	if len(ws) == 0 {
		delete(w.waiters, k)
		return
	}
	w.waiters[k] = ws
}

func (w *Worker) queueOfferLocked(d events.Decision, dv delivery) error {
	var err error
	if len(w.offerQ) == w.opts.OfferBuffer {
		old := w.offerQ[0]
		w.offerQ = w.offerQ[1:]
		err = fmt.Errorf("worker: offer of job %s (lease %s) dropped: offer buffer full", old.Job, old.LeaseID)
	}
	w.offerQ = append(w.offerQ, newOffer(w, d, w.clk.Now(), dv))
	select {
	case w.offerS <- struct{}{}:
	default:
	}
	return err
}

// pumpOffers hands queued offers to Offers() readers; it exits on Close and
// closes the channel.
func (w *Worker) pumpOffers() {
	defer w.wg.Done()
	defer close(w.offerC)
	for {
		w.mu.Lock()
		var out chan<- Offer
		var head Offer
		if len(w.offerQ) > 0 {
			out, head = w.offerC, w.offerQ[0]
		}
		w.mu.Unlock()
		select {
		case out <- head:
			w.mu.Lock()
			// Unless a full buffer dropped it meanwhile.
			if len(w.offerQ) > 0 && w.offerQ[0].Job == head.Job && w.offerQ[0].LeaseID == head.LeaseID {
				w.offerQ[0] = Offer{}
				w.offerQ = w.offerQ[1:]
			}
			w.mu.Unlock()
		case <-w.offerS:
		case <-w.ctx.Done():
			return
		}
	}
}
