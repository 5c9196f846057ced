// Package follow reads a JetStream stream in stream order, from a start
// sequence onward, without gaps, and keeps reading through the faults of a
// NATS cluster: a consumer lost with its server, a cluster without a
// JetStream meta leader for a few seconds, a skipped delivery.
//
// A Follower reads through an ephemeral pull consumer of its own, and
// replaces it whenever it is lost (a missed heartbeat, a deleted or unknown
// consumer, no responders) or delivers out of order, starting the new one
// after the last message handed over. It does what nats.go's ordered
// consumer (jetstream.OrderedConsumer) does, but creates each consumer with
// a short request, retried every Config.Retry: an ordered consumer
// recreates its consumer with one request of a fixed 10 s timeout, and a
// creation sent while the cluster has no meta leader (its node was killed)
// is dropped by every server, so an ordered consumer stands still for those
// 10 s even when the cluster has healed within 5.
//
// The handler runs on the consumer's goroutine, one message at a time, in
// stream order; no message reaches it twice and none is skipped (with
// Config.Filters, none of those the filters match). It is never called
// again once Stop has returned. Blocking in the handler is the
// back-pressure: the consumer asks for no more than Config.PullAhead
// messages ahead of it.
package follow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/streams"
)

// Msg is one message of the stream, as handed to the handler.
type Msg struct {
	Seq     uint64 // its stream sequence
	Time    int64  // its stored timestamp, Unix ns
	Subject string
	Data    []byte
	Header  nats.Header
	// Pending is how many messages (matching the filters) the stream held
	// after this one when the server delivered it: 0 means the reader had
	// caught up then.
	Pending uint64
	// Err, when set, is why the Follower stopped (a delivered message it
	// could not place in the stream); the Msg carries nothing else and is
	// the last one the handler receives.
	Err error
}

// Config says what to read and how.
type Config struct {
	Stream   string
	StartSeq uint64   // the first stream sequence to read (0 is 1)
	Filters  []string // subjects to read (none: all)
	// PullAhead is how many messages the consumer is asked for ahead of
	// what the handler has taken (more are asked for when half of them
	// have arrived). Zero is DefaultPullAhead.
	PullAhead int
	// Heartbeat is the idle heartbeat of each pull; two missed ones replace
	// the consumer. Zero is DefaultHeartbeat; it is kept between 500 ms and
	// 30 s (the client library's bounds).
	Heartbeat time.Duration
	// CreateTimeout bounds one consumer creation request; Retry is the wait
	// between failed ones. Zero is DefaultCreateTimeout, DefaultRetry.
	CreateTimeout time.Duration
	Retry         time.Duration
	// KeepConsumers leaves a replaced or stopped consumer on the server,
	// which removes it after InactiveThreshold, instead of deleting it: for
	// a client not allowed to delete consumers (a Tenure worker is not).
	KeepConsumers bool
	// InactiveThreshold is how long the server keeps a consumer nobody
	// reads. Zero is DefaultInactiveThreshold.
	InactiveThreshold time.Duration
	// OnError, if set, is told of every error of a consumer (from its
	// goroutine); the Follower handles them itself, this is for logging.
	OnError func(error)
}

// Defaults of Config.
const (
	DefaultPullAhead     = 500
	DefaultHeartbeat     = time.Second
	DefaultCreateTimeout = time.Second
	DefaultRetry         = 100 * time.Millisecond
	// DefaultInactiveThreshold is nats.go's ordered consumers' own.
	DefaultInactiveThreshold = 5 * time.Minute
)

func (c Config) withDefaults() Config {
	if c.StartSeq == 0 {
		c.StartSeq = 1
	}
	if c.PullAhead <= 0 {
		c.PullAhead = DefaultPullAhead
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	c.Heartbeat = min(max(c.Heartbeat, 500*time.Millisecond), 30*time.Second)
	if c.CreateTimeout <= 0 {
		c.CreateTimeout = DefaultCreateTimeout
	}
	if c.Retry <= 0 {
		c.Retry = DefaultRetry
	}
	if c.InactiveThreshold <= 0 {
		c.InactiveThreshold = DefaultInactiveThreshold
	}
	return c
}

// Follower reads one stream. It is owned by the goroutine that started it:
// Stop ends it and waits.
type Follower struct {
	cfg     Config
	js      jetstream.JetStream
	handle  func(context.Context, Msg)
	cancel  context.CancelFunc
	done    chan struct{}
	ready   chan struct{} // closed when the first consumer exists
	restart chan struct{} // buffered: the current consumer must be replaced

	readyOnce sync.Once

	mu   sync.Mutex // serialises the handler, replacements, and Stop
	dead bool       // no more messages: failed or stopped
	gen  int        // the current consumer's generation; callbacks of older ones are ignored
	next uint64     // the next stream sequence to hand over
	dseq uint64     // the last delivery sequence of the current consumer

	ccMu sync.Mutex // guards cc and name, set while a handler may hold mu
	cc   jetstream.ConsumeContext
	name string // the current consumer's name

	// Copies for Next and Replaced, which must not wait for a handler
	// that blocks.
	nextCopy atomic.Uint64
	replaced atomic.Int64 // consumers replaced so far

	errMu sync.Mutex
	// createErr is the last consumer creation's error (nil once one
	// succeeded); only the first of a streak goes to Config.OnError.
	createErr error
}

// Start reads cfg.Stream until ctx ends or Stop, handing every message to
// handle, with a context that ends when the Follower stops (a handler that
// blocks must return when it does). It returns at once: the first consumer
// is created in the background, and retried until it exists (Ready).
func Start(ctx context.Context, js jetstream.JetStream, cfg Config, handle func(context.Context, Msg)) *Follower {
	cfg = cfg.withDefaults()
	rctx, cancel := context.WithCancel(ctx)
	f := &Follower{cfg: cfg, js: js, handle: handle, cancel: cancel, done: make(chan struct{}),
		ready: make(chan struct{}), restart: make(chan struct{}, 1), next: cfg.StartSeq}
	f.nextCopy.Store(cfg.StartSeq)
	go f.run(rctx)
	return f
}

// Stop ends the Follower and waits until the handler has returned for the
// last time. It may be called more than once, and on a nil Follower.
func (f *Follower) Stop() {
	if f == nil {
		return
	}
	f.cancel()
	<-f.done
}

// Done is closed when the Follower has stopped (Stop, its context ended, or
// a message it could not place).
func (f *Follower) Done() <-chan struct{} { return f.done }

// Ready is closed once the Follower's first consumer exists: from then on
// every message from Config.StartSeq on is on its way to the handler.
func (f *Follower) Ready() <-chan struct{} { return f.ready }

// Err is the error of the last failed consumer creation, if no consumer
// has been created since (nil otherwise).
func (f *Follower) Err() error {
	f.errMu.Lock()
	defer f.errMu.Unlock()
	return f.createErr
}

// Next is the stream sequence after the last message handed over.
func (f *Follower) Next() uint64 {
	return f.nextCopy.Load()
}

// Replaced is how many times the Follower replaced its consumer.
func (f *Follower) Replaced() int { return int(f.replaced.Load()) }

// run creates the consumer, and a new one each time a replacement is
// asked for, until ctx ends.
func (f *Follower) run(ctx context.Context) {
	defer close(f.done)
	defer func() {
		f.mu.Lock() // waits for a handler in progress (ctx has ended)
		f.dead = true
		f.mu.Unlock()
		f.drop(f.take())
	}()
	for {
		if !f.consume(ctx) {
			return
		}
		select {
		case <-f.restart:
		case <-ctx.Done():
			return
		}
		f.mu.Lock()
		f.gen++ // from now on the old consumer's callbacks are ignored
		f.dseq = 0
		dead := f.dead
		f.mu.Unlock()
		f.drop(f.take())
		if dead {
			return
		}
		f.replaced.Add(1)
	}
}

// take returns the current consumer and forgets it.
func (f *Follower) take() (jetstream.ConsumeContext, string) {
	f.ccMu.Lock()
	defer f.ccMu.Unlock()
	cc, name := f.cc, f.name
	f.cc, f.name = nil, ""
	return cc, name
}

// consume creates a consumer starting at f.next, retrying until it exists
// or ctx ends (false).
func (f *Follower) consume(ctx context.Context) bool {
	for {
		f.mu.Lock()
		next, gen, dead := f.next, f.gen, f.dead
		f.mu.Unlock()
		if dead {
			return false
		}
		cfg := jetstream.ConsumerConfig{
			Name:              "tenure_" + strings.ReplaceAll(uuid.NewString(), "-", ""),
			DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:       next,
			AckPolicy:         jetstream.AckNonePolicy,
			InactiveThreshold: f.cfg.InactiveThreshold,
			Replicas:          1,
			MemoryStorage:     true,
		}
		if len(f.cfg.Filters) == 1 {
			// One filter goes in the creation request's subject
			// ($JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>), where
			// server permissions can restrict it (tenure auth init does).
			cfg.FilterSubject = f.cfg.Filters[0]
		} else {
			cfg.FilterSubjects = f.cfg.Filters
		}
		cctx, ccancel := context.WithTimeout(ctx, f.cfg.CreateTimeout)
		cons, err := f.js.CreateConsumer(cctx, f.cfg.Stream, cfg)
		ccancel()
		if err == nil {
			var cc jetstream.ConsumeContext
			cc, err = cons.Consume(func(m jetstream.Msg) { f.deliver(ctx, gen, m) },
				jetstream.PullMaxMessages(f.cfg.PullAhead), jetstream.PullHeartbeat(f.cfg.Heartbeat),
				jetstream.PullExpiry(max(5*time.Second, 2*f.cfg.Heartbeat)),
				jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
					if h := f.cfg.OnError; h != nil {
						h(fmt.Errorf("follow %s: %w", f.cfg.Stream, err))
					}
					if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
						errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, nats.ErrNoResponders) {
						f.replace(gen)
					}
				}))
			if err == nil {
				// Not under f.mu: the handler may already hold it, blocked
				// until its caller reads, and the caller may be waiting for
				// Ready.
				f.ccMu.Lock()
				f.cc, f.name = cc, cons.CachedInfo().Name
				f.ccMu.Unlock()
				f.errMu.Lock()
				f.createErr = nil
				f.errMu.Unlock()
				f.readyOnce.Do(func() { close(f.ready) })
				return true
			}
			f.drop(nil, cons.CachedInfo().Name)
		}
		if ctx.Err() != nil {
			return false
		}
		err = fmt.Errorf("follow %s: creating a consumer: %w", f.cfg.Stream, err)
		f.errMu.Lock()
		first := f.createErr == nil
		f.createErr = err
		f.errMu.Unlock()
		if h := f.cfg.OnError; h != nil && first {
			h(err)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(f.cfg.Retry):
		}
	}
}

// replace asks run for a new consumer, if the one of generation gen is
// still the current one.
func (f *Follower) replace(gen int) {
	f.mu.Lock()
	cur := gen == f.gen && !f.dead
	if cur {
		f.gen++ // its callbacks are ignored from now on
	}
	f.mu.Unlock()
	if cur {
		f.wake()
	}
}

// wake asks run for a new consumer.
func (f *Follower) wake() {
	select {
	case f.restart <- struct{}{}:
	default:
	}
}

// drop stops a consumer and deletes it from the server (in the background:
// the server may be unreachable; its inactivity threshold removes it then),
// unless Config.KeepConsumers.
func (f *Follower) drop(cc jetstream.ConsumeContext, name string) {
	if cc != nil {
		cc.Stop()
	}
	if name != "" && !f.cfg.KeepConsumers {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = f.js.DeleteConsumer(ctx, f.cfg.Stream, name)
		}()
	}
}

// deliver runs on the consumer's goroutine, one message at a time. It
// reads the stream sequence and stored time from the message's reply
// subject without allocating (jetstream.Msg.Metadata allocates on every
// message).
func (f *Follower) deliver(ctx context.Context, gen int, m jetstream.Msg) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead || gen != f.gen {
		return
	}
	msg := Msg{Subject: m.Subject(), Data: m.Data(), Header: m.Headers()}
	var dseq uint64
	if d, ok := streams.ParseAckReply(m.Reply()); ok {
		msg.Seq, dseq, msg.Time, msg.Pending = d.StreamSeq, d.ConsumerSeq, d.Time, d.Pending
	} else if meta, err := m.Metadata(); err != nil {
		f.dead = true
		f.handle(ctx, Msg{Err: fmt.Errorf("follow %s: a delivered message without its metadata: %w", f.cfg.Stream, err)})
		f.wake() // run stops: f.dead
		return
	} else {
		msg.Seq, dseq, msg.Time, msg.Pending = meta.Sequence.Stream, meta.Sequence.Consumer, meta.Timestamp.UnixNano(), meta.NumPending
	}
	if dseq != f.dseq+1 || msg.Seq < f.next {
		// A message skipped (or one already handed over): start again
		// after the last one handed over.
		f.gen++
		f.wake()
		return
	}
	f.dseq, f.next = dseq, msg.Seq+1
	f.nextCopy.Store(f.next)
	f.handle(ctx, msg)
	if ctx.Err() != nil {
		f.dead = true
	}
}
