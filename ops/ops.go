// Package ops is the dispatcher and operator side of Tenure: offer a job to
// a holder, submit a job to a queue (Submit, PROTOCOL.md §22) or many
// (SubmitMany), request its cancellation, resolve an ownership conflict, an
// unresolved job or a DEAD queue job (Retry, Discard), and set the policy.
// Every call publishes one input on tenure.in.ops.<id>.<job>.<verb> and
// returns the coordinator's verdict: the decision whose cause is that
// input. SubmitMany publishes batch submits (tenure.in.ops.<id>._.submit,
// rules revision 7), up to 256 jobs an input, and returns each job's own
// verdict. A verdict that is not an accepted one comes back as a
// *RejectedError carrying the decision, so that callers can match on it
// with errors.As (or errors.Is against the sentinels).
//
// # Reading verdicts
//
// The verdicts of a submit and of a policy are all addressed to the client
// (PROTOCOL.md §3.2): a Client reads them with one decision reader per
// partition (a follow.Follower of tenure.out.<id>.>, as the worker SDK
// reads its own), started by the first such call and stopped by Close. So
// a submit costs its publish and nothing more. The accepted verdict of an
// offer, a cancel or a resolve goes to the job's holder: each of those
// calls follows the job's decisions with a consumer of its own, created
// before it publishes and deleted once it has its verdict. Close a Client
// when done with it.
//
// # Errors and options, as the worker SDK's
//
// RejectedError is package verdict's Error, the type the worker SDK returns
// as worker.VerdictError: errors.As with either finds it. Every one matches
// ErrRejected (verdict.ErrNotAccepted: any verdict that is not accepted) and
// the sentinels of package verdict its kind and reason map to, which are
// worker's too: an offer refused because the job has a live lease matches
// worker.ErrRejected and worker.ErrLeaseHeld, a cancel already requested
// worker.ErrDuplicate, one naming an older generation
// worker.ErrStaleGeneration. ErrNoVerdict is worker.ErrNoVerdict.
//
// A Client is configured as a worker.Worker is: New takes Option values,
// each setting one field of Options and returning an error when its value
// is invalid (WithTimeout(0), WithPrefix("no.dots")); New fails with it.
//
// # Partitioned deployments
//
// Nothing changes for the caller. On its first call a Client finds out
// whether the deployment is partitioned (streams.Discover; the count is
// recorded in the streams and never changes). If it is, offer, submit,
// cancel and resolve go to the job's partition (tenure.in.ops.<id>.<job>.<verb>.<k>,
// k the FNV-32a hash of the job modulo the count) and their verdict is
// read from that partition's decision stream. Each partition folds its own
// policy, so SetPolicy sends the policy to every partition and waits for
// every verdict; SetPolicyAll returns them all, in partition order.
package ops

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/receipt"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/tracing"
	"github.com/maknow/tenure/verdict"
)

// Sentinels. A *RejectedError matches ErrRejected and those of package
// verdict its kind and reason map to (see the package documentation).
var (
	// ErrRejected matches every verdict that is not an accepted one, of
	// whatever kind (verdict.ErrNotAccepted; the kind rejected alone is
	// verdict.ErrRejected, worker.ErrRejected).
	ErrRejected = verdict.ErrNotAccepted
	// ErrNoVerdict means no verdict arrived before the context ended (is a
	// coordinator running?). The input may still be decided later. It is
	// verdict.ErrNoVerdict, worker.ErrNoVerdict.
	ErrNoVerdict = verdict.ErrNoVerdict
)

// RejectedError is a verdict that was not accepted: package verdict's
// Error with Role events.RoleOps, whose message reads
// "ops: <verb> <job>: <kind>/<reason> (<detail>)".
type RejectedError = verdict.Error

// noVerdictError is an error matching ErrNoVerdict under a message of its
// own ("ops: no verdict for input N: ...").
type noVerdictError struct{ msg string }

func (e *noVerdictError) Error() string { return e.msg }
func (e *noVerdictError) Unwrap() error { return ErrNoVerdict }

// Client publishes operator inputs as one ops actor. Its methods are safe
// for concurrent use. Close it when done: it keeps a decision reader per
// partition once a call needed one (reader.go).
type Client struct {
	id       string
	tr       Transport
	timeout  time.Duration
	receipts receipt.Sink
	onErr    func(error)
	prefix   string // the streams' name prefix ("" is streams.DefaultPrefix)
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator // nil: OpenTelemetry's global one

	pmu   sync.Mutex
	count uint32 // the deployment's partition count (0: unpartitioned), once known
	known bool

	ctx    context.Context // ends with Close: the readers' owner
	cancel context.CancelFunc
	// noBatch is set once a batch submit was refused as a subject its
	// coordinator does not know (a log below rules revision 7): SubmitMany
	// then submits one job per input.
	noBatch atomic.Bool

	rmu     sync.Mutex
	readers map[uint32]Follower // by partition index
	closed  bool

	mu        sync.Mutex               // guards what follows
	waiters   map[verdictKey][]*waiter // input -> its callers (more than one only after a lost tail: waiter)
	stash     []stashed                // verdicts nobody waited for yet, oldest first from stashHead
	stashHead int                      //
	stashN    map[verdictKey]int       // unclaimed stashed verdicts per input
}

// DefaultTimeout bounds a call without a deadline of its own (Options.Timeout).
const DefaultTimeout = 10 * time.Second

// Options configures a Client. Set them with the Option functions.
type Options struct {
	// StreamPrefix names the deployment's streams (streams.Topology.Prefix;
	// "" is streams.DefaultPrefix): the client reads its verdicts from
	// <prefix>_OUT (<prefix>_P<k>_OUT per partition).
	StreamPrefix string
	// Timeout bounds each call whose ctx has no deadline: the publish, the
	// wait for the verdict (for every partition's, SetPolicy), the reading
	// of the policies in force.
	Timeout time.Duration
	// Receipts, when set, keeps a receipt (package receipt, PROTOCOL.md
	// §20.2) of every input this client had acknowledged and of every
	// verdict it received, with its chain value.
	Receipts receipt.Sink
	// ErrorHandler receives the errors that do not fail a call: a receipt
	// not kept. Nil loses them.
	ErrorHandler func(error)
	// TracerProvider records a span of each submit (tracing.SpanSubmit,
	// PROTOCOL.md §27); nil: OpenTelemetry's global one, which records
	// nothing until the program installs one.
	TracerProvider trace.TracerProvider
	// Propagator writes the trace context of a call's ctx into its
	// input's headers; nil: OpenTelemetry's global one, which propagates
	// nothing until the program sets one (typically
	// propagation.TraceContext{}).
	Propagator propagation.TextMapPropagator
}

// WithTracing sets Options.TracerProvider and Options.Propagator (either
// may be nil: OpenTelemetry's global one).
func WithTracing(tp trace.TracerProvider, prop propagation.TextMapPropagator) Option {
	return func(o *Options) error {
		o.TracerProvider, o.Propagator = tp, prop
		return nil
	}
}

// Option sets one of Options, or returns why its value is invalid.
type Option func(*Options) error

// WithReceipts sets Options.Receipts.
func WithReceipts(s receipt.Sink) Option {
	return func(o *Options) error {
		o.Receipts = s
		return nil
	}
}

// WithErrorHandler sets Options.ErrorHandler.
func WithErrorHandler(h func(error)) Option {
	return func(o *Options) error {
		o.ErrorHandler = h
		return nil
	}
}

// WithPrefix sets Options.StreamPrefix: 1 to 64 of [A-Za-z0-9_-], or ""
// for streams.DefaultPrefix.
func WithPrefix(prefix string) Option {
	return func(o *Options) error {
		if err := (streams.Topology{Prefix: prefix}).Validate(); err != nil {
			return err
		}
		o.StreamPrefix = prefix
		return nil
	}
}

// WithTimeout sets Options.Timeout (default DefaultTimeout); it must be
// positive.
func WithTimeout(d time.Duration) Option {
	return func(o *Options) error {
		if d <= 0 {
			return fmt.Errorf("timeout %v: want > 0", d)
		}
		o.Timeout = d
		return nil
	}
}

// New returns a client that acts as ops actor id (a token; server
// permissions should let it publish only on tenure.in.ops.<id>.>).
func New(nc *nats.Conn, id string, opts ...Option) (*Client, error) {
	if !events.ValidToken(id) {
		return nil, fmt.Errorf("ops: invalid id %q", id)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return NewWithTransport(jsTransport{js}, id, opts...)
}

// NewWithTransport is New on a port of its own (the simulator's model of
// JetStream); New is NewWithTransport over JetStream.
func NewWithTransport(tr Transport, id string, opts ...Option) (*Client, error) {
	if !events.ValidToken(id) {
		return nil, fmt.Errorf("ops: invalid id %q", id)
	}
	o := Options{Timeout: DefaultTimeout}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("ops: %w", err)
		}
	}
	c := &Client{id: id, tr: tr, timeout: o.Timeout, receipts: o.Receipts, onErr: o.ErrorHandler, prefix: o.StreamPrefix,
		tracer: tracing.Tracer(o.TracerProvider), prop: o.Propagator,
		readers: map[uint32]Follower{}, waiters: map[verdictKey][]*waiter{}, stashN: map[verdictKey]int{}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// keep hands a receipt to the sink, if any.
func (c *Client) keep(r receipt.Receipt) {
	if c.receipts == nil {
		return
	}
	if err := c.receipts.Keep(r); err != nil && c.onErr != nil {
		c.onErr(fmt.Errorf("ops: receipt of %s %d not kept: %w", r.Stream, r.Seq, err))
	}
}

// Offer offers job to holder. leaseMS and ackTimeoutMS of 0 take the policy's defaults.
func (c *Client) Offer(ctx context.Context, job, holder string, leaseMS, ackTimeoutMS int64) (events.Decision, error) {
	return c.do(ctx, &events.Input{Job: job, Verb: events.VerbOffer, Holder: holder, LeaseMS: leaseMS, AckTimeoutMS: ackTimeoutMS})
}

// Cancel requests the cancellation of job's live lease. A non-zero
// generation (with its leaseID) makes the request apply to that lease only.
func (c *Client) Cancel(ctx context.Context, job, leaseID string, generation uint64, reason string) (events.Decision, error) {
	return c.do(ctx, &events.Input{Job: job, Verb: events.VerbCancel, LeaseID: leaseID, Generation: generation, Text: reason})
}

// Affirm settles an ownership conflict in favour of the named live lease.
func (c *Client) Affirm(ctx context.Context, job, holder, leaseID string, generation uint64, reason string) (events.Decision, error) {
	return c.do(ctx, &events.Input{Job: job, Verb: events.VerbResolve, Action: events.ActionAffirm, Holder: holder, LeaseID: leaseID, Generation: generation, Text: reason})
}

// Revoke ends job's live lease (if any) and clears its ownership conflict.
func (c *Client) Revoke(ctx context.Context, job, reason string) (events.Decision, error) {
	return c.do(ctx, &events.Input{Job: job, Verb: events.VerbResolve, Action: events.ActionRevoke, Text: reason})
}

// Settle gives an UNRESOLVED job its terminal outcome (FAILED or CANCELLED).
func (c *Client) Settle(ctx context.Context, job string, outcome events.Outcome, reason string) (events.Decision, error) {
	return c.do(ctx, &events.Input{Job: job, Verb: events.VerbResolve, Action: events.ActionSettle, Outcome: outcome, Text: reason})
}

// SetPolicy replaces the policy; it applies to inputs stored after it. In a
// partitioned deployment the policy is sent to every partition: SetPolicy
// returns the first verdict that did not accept it (partition 0's if all
// did), and an error for every partition whose verdict was not an
// acceptance, naming the partition.
func (c *Client) SetPolicy(ctx context.Context, p events.Policy) (events.Decision, error) {
	ds, err := c.SetPolicyAll(ctx, p)
	for _, d := range ds {
		if d.Kind != events.KindNone && !d.Kind.Accepted() {
			return d, err
		}
	}
	if len(ds) == 0 {
		return events.Decision{}, err
	}
	return ds[0], err
}

// SetPolicyAll is SetPolicy returning the verdict of every partition, in
// partition order (one when the deployment is unpartitioned). A partition
// whose verdict was not learned has a zero Decision. The error joins those
// of every partition that did not accept the policy, each naming its
// partition (unpartitioned: the error of SetPolicy); errors.As finds each
// *RejectedError.
func (c *Client) SetPolicyAll(ctx context.Context, p events.Policy) ([]events.Decision, error) {
	return c.allPartitions(ctx, events.Input{Job: events.NoJob, Verb: events.VerbPolicy, Policy: p})
}

// SetLimit sets a queue's limit (rules revision 9, PROTOCOL.md §26.4,
// §26.5): of l.ConcurrencyKey (or, "", of the queue), at most
// l.MaxActive of its jobs live at once when l.HasMaxActive (a key's
// only), at most l.Rate starts per l.PeriodMS when l.Rate is not 0; what
// l does not name is lifted, and naming neither lifts the limit. Its
// verdict is limit_set/ok; more than events.MaxLimits limits is
// rejected/limits_full, a *RejectedError. In a partitioned deployment the
// limit is sent to every partition, and each applies it to its own jobs
// (the limit is per partition); the verdicts and errors are those of
// SetPolicy. l is checked as the decoder would before anything is sent.
func (c *Client) SetLimit(ctx context.Context, l events.Limit) (events.Decision, error) {
	ds, err := c.SetLimitAll(ctx, l)
	for _, d := range ds {
		if d.Kind != events.KindNone && !d.Kind.Accepted() {
			return d, err
		}
	}
	if len(ds) == 0 {
		return events.Decision{}, err
	}
	return ds[0], err
}

// SetLimitAll is SetLimit returning the verdict of every partition, as
// SetPolicyAll.
func (c *Client) SetLimitAll(ctx context.Context, l events.Limit) ([]events.Decision, error) {
	switch {
	case !events.ValidToken(l.Queue):
		return nil, fmt.Errorf("ops: limit: invalid queue name %q", l.Queue)
	case l.ConcurrencyKey != "" && !events.ValidToken(l.ConcurrencyKey):
		return nil, fmt.Errorf("ops: limit: invalid concurrency key %q", l.ConcurrencyKey)
	case l.HasMaxActive && l.ConcurrencyKey == "":
		return nil, fmt.Errorf("ops: limit: max_active limits a concurrency key: name one")
	case l.HasMaxActive && l.MaxActive > events.MaxActive:
		return nil, fmt.Errorf("ops: limit: max_active %d: want 0 to %d", l.MaxActive, events.MaxActive)
	case l.Rate > events.MaxRate:
		return nil, fmt.Errorf("ops: limit: rate %d: want 1 to %d", l.Rate, events.MaxRate)
	case (l.Rate == 0) != (l.PeriodMS == 0):
		return nil, fmt.Errorf("ops: limit: rate and period go together")
	case l.Rate != 0 && (l.PeriodMS < events.MinDurationMS || l.PeriodMS > events.MaxDurationMS):
		return nil, fmt.Errorf("ops: limit: period %d ms: want %d to %d", l.PeriodMS, events.MinDurationMS, events.MaxDurationMS)
	}
	return c.allPartitions(ctx, events.Input{Job: events.NoJob, Verb: events.VerbLimit, Queue: l.Queue, ConcurrencyKey: l.ConcurrencyKey,
		MaxActive: l.MaxActive, HasMaxActive: l.HasMaxActive, Rate: l.Rate, PeriodMS: l.PeriodMS})
}

// allPartitions sends the job-less in to every partition (one when the
// deployment is unpartitioned) and returns each verdict, as SetPolicyAll.
func (c *Client) allPartitions(ctx context.Context, in events.Input) ([]events.Decision, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	count, err := c.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	if count == 0 {
		d, err := c.doIn(ctx, events.Partition{}, &in)
		return []events.Decision{d}, err
	}
	ds := make([]events.Decision, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for k := range count {
		wg.Go(func() {
			in := in
			part := events.Partition{Index: k, Count: count}
			ds[k], errs[k] = c.doIn(ctx, part, &in)
			if errs[k] != nil {
				errs[k] = fmt.Errorf("%s: %w", part, errs[k])
			}
		})
	}
	wg.Wait()
	return ds, errors.Join(errs...)
}

// PolicyInForce is the policy a partition's coordinator judges new inputs
// by: the one its last policy_set decision carries (PROTOCOL.md §6.1).
type PolicyInForce struct {
	Policy events.Policy
	// Decision is the sequence of that policy_set decision in the decision
	// stream, Cause the input that set it and At its time. All zero when the
	// stream holds no policy_set yet (no coordinator has gone live on the
	// log): then the protocol's defaults are in force (events.DefaultPolicy).
	Decision, Cause uint64
	At              int64 // Unix ns, as events.Decision.At
}

// Policies returns the policy in force in every partition, in partition
// order (one when the deployment is unpartitioned), read from the last
// policy_set decision of each decision stream. It is what SetPolicy would
// change: read it, change some fields and set it to change only those
// (another operator's policy stored in between is then overwritten).
func (c *Client) Policies(ctx context.Context) ([]PolicyInForce, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	count, err := c.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	parts := []events.Partition{{}}
	if count > 0 {
		parts = parts[:0]
		for k := range count {
			parts = append(parts, events.Partition{Index: k, Count: count})
		}
	}
	out := make([]PolicyInForce, len(parts))
	for i, part := range parts {
		topo := streams.Topology{Prefix: c.prefix, Partition: part}
		subject := events.DecisionPrefix + ".*." + events.NoJob + "." + events.KindPolicySet.String()
		if part.Partitioned() {
			subject += "." + part.Token()
		}
		m, first, err := c.tr.LastMsg(ctx, topo.DecisionStream(), subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			if first > 1 {
				// A trimmed log (package archive) keeps its last
				// policy_set decision; none means it cannot tell.
				return nil, fmt.Errorf("ops: %s starts at decision %d and holds no policy_set decision: the policy in force is not known from it", topo.DecisionStream(), first)
			}
			out[i] = PolicyInForce{Policy: events.DefaultPolicy()}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ops: read the policy of %s: %w", topo.DecisionStream(), streams.Classify(err))
		}
		d, err := events.DecodeDecision(m.Data)
		if err != nil || d.Kind != events.KindPolicySet || d.Policy == nil {
			return nil, fmt.Errorf("ops: %s message %d on %s is not a policy_set decision with its policy (%v)", topo.DecisionStream(), m.Sequence, m.Subject, err)
		}
		out[i] = PolicyInForce{Policy: *d.Policy, Decision: m.Sequence, Cause: d.Cause, At: d.At}
	}
	return out, nil
}

// Partitions returns the partition count of the deployment (0:
// unpartitioned), discovering it on first use.
func (c *Client) Partitions(ctx context.Context) (uint32, error) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.known {
		return c.count, nil
	}
	n, err := c.tr.Partitions(ctx, c.prefix)
	if err != nil {
		return 0, fmt.Errorf("ops: decision stream: %w", err)
	}
	c.count, c.known = n, true
	return n, nil
}

// withTimeout bounds ctx by the client's timeout unless it has a deadline.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

// do publishes in to its job's partition and waits for its verdict.
func (c *Client) do(ctx context.Context, in *events.Input) (events.Decision, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	count, err := c.Partitions(ctx)
	if err != nil {
		return events.Decision{}, err
	}
	return c.doIn(ctx, events.Partition{Count: count}.Of(in.Job), in)
}

// addressedToMe reports whether every verdict of an input of verb v is
// addressed to the ops actor that published it (PROTOCOL.md §3.2): then
// the client's shared reader learns them.
func addressedToMe(v events.Verb) bool {
	return v == events.VerbSubmit || v == events.VerbPolicy || v == events.VerbLimit || v == events.VerbSchedule
}

// doIn publishes in to partition part and waits for its verdict there.
func (c *Client) doIn(ctx context.Context, part events.Partition, in *events.Input) (events.Decision, error) {
	in.Role, in.Actor = events.RoleOps, c.id
	if addressedToMe(in.Verb) {
		ds, err := c.send(ctx, part, in, 1)
		if err != nil {
			return events.Decision{}, err
		}
		return ds[0], verdict.Of(events.RoleOps, ds[0])
	}
	if c.ctx.Err() != nil {
		return events.Decision{}, ErrClosed
	}
	topo := streams.Topology{Prefix: c.prefix, Partition: part}
	// The accepted verdicts of an offer, a cancel or a resolve go to the
	// job's holder: follow the decisions about this job from now on,
	// before publishing, so the verdict cannot be missed. The consumer
	// starts after the stream's last decision when it is created (deliver
	// policy new: no look-up of the stream first). A follow.Follower
	// replaces a consumer lost with a cluster node (an ordered consumer
	// stalls ~10 s when the node was the meta leader), and its consumer is
	// deleted when it stops: left alone it would linger until its
	// inactivity threshold (minutes).
	filter := part.JobDecisionFilter(in.Job)
	ch := make(chan follow.Msg, 16)
	// The follower's own context, cancelled before Stop waits for the
	// handler: a handler blocked on a full ch (a busy job's decisions)
	// must return, or Stop would wait for ever.
	fctx, fcancel := context.WithCancel(ctx)
	f := c.tr.Follow(fctx, follow.Config{Stream: topo.DecisionStream(), Filters: []string{filter},
		FromNew: true, PullAhead: 64}, func(m follow.Msg) {
		select {
		case ch <- m:
		case <-fctx.Done():
		}
	})
	defer func() {
		fcancel()
		f.Stop()
	}()
	select {
	case <-f.Ready():
	case <-ctx.Done():
		err := f.Err()
		if err == nil {
			err = ctx.Err()
		}
		return events.Decision{}, fmt.Errorf("ops: follow decisions: %w", streams.Classify(err))
	}
	subject := part.InputSubject(events.RoleOps, c.id, in.Job, in.Verb)
	body := events.AppendInputBody(nil, in)
	key, err := c.publish(ctx, part, subject, body, c.newMsgID())
	if err != nil {
		return events.Decision{}, err
	}
	mine := waiter{verb: in.Verb, job: in.Job} // the verdicts this call takes
	for {
		var m follow.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return events.Decision{}, &noVerdictError{fmt.Sprintf("ops: no verdict for input %d: %v", key.seq, ctx.Err())}
		}
		d, err := events.DecodeDecision(m.Data)
		if err != nil || d.Cause != key.seq || d.Kind.Derived() || !mine.wants(&d) {
			continue
		}
		c.keep(receipt.Decision(topo.DecisionStream(), m.Seq, d.Cause, m.Header.Get(events.HeaderChain), "ops "+c.id))
		return d, verdict.Of(events.RoleOps, d)
	}
}

// send publishes in (its Role and Actor set) to partition part, through
// the partition's shared reader, and waits for its n verdicts (a batch has
// one per element; a rejection of the whole input is the only one). The
// error is ErrClosed or matches ErrNoVerdict; verdicts that refuse are
// returned as decisions.
func (c *Client) send(ctx context.Context, part events.Partition, in *events.Input, n int) ([]events.Decision, error) {
	if _, err := c.readerOf(ctx, part); err != nil {
		return nil, err
	}
	subject := part.InputSubject(events.RoleOps, c.id, in.Job, in.Verb)
	key, err := c.publish(ctx, part, subject, events.AppendInputBody(nil, in), c.newMsgID())
	if err != nil {
		return nil, err
	}
	return c.await(ctx, key, n, in.Verb, in.Job)
}

// newMsgID is "<id>-<random UUID>": namespaced by the actor and
// unguessable, so that no other publisher can suppress this input through
// the input stream's duplicate window.
func (c *Client) newMsgID() string { return c.id + "-" + uuid.NewString() }

// publish stores body on subject in partition part's input stream and
// returns the key its verdicts come under. Attempts whose outcome is
// unknown (a timeout, no responders while a stream leader is elected, a
// reconnection) are sent again with the same Msg-Id until ctx ends: if an
// earlier one was stored, the stream answers with its sequence.
func (c *Client) publish(ctx context.Context, part events.Partition, subject string, body []byte, msgID string) (verdictKey, error) {
	topo := streams.Topology{Prefix: c.prefix, Partition: part}
	expect := ""
	if part.Partitioned() {
		expect = topo.InputStream()
	}
	wait := 10 * time.Millisecond
	for {
		msg := &nats.Msg{Subject: subject, Data: body}
		tracing.Inject(ctx, c.prop, msg)
		ack, err := c.tr.Publish(ctx, msg, msgID, expect)
		if err == nil {
			c.keep(receipt.Input(ack.Stream, ack.Sequence, msg.Subject, msg.Data, "ops "+c.id))
			return verdictKey{part.Index, ack.Sequence}, nil
		}
		if !retryable(err) || ctx.Err() != nil {
			return verdictKey{}, fmt.Errorf("ops: publish %s: %w", subject, streams.Classify(err))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return verdictKey{}, fmt.Errorf("ops: publish %s: %w (last attempt: %w)", subject, context.Cause(ctx), streams.Classify(err))
		case <-t.C:
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// retryable reports whether a publish error leaves the outcome unknown or
// may clear by itself: a timeout, no responders (a stream leader being
// elected, or a deployment whose input stream is still in genesis), a
// connection being re-established, a stream's full ingest queue.
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
		return apiErr.ErrorCode == 10008 || apiErr.ErrorCode == 10009 || apiErr.ErrorCode == 10167
	}
	return false
}
