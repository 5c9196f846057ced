// Package follow reads a JetStream stream in stream order, from a start
// sequence onward, without gaps, and keeps reading through the faults of a
// NATS cluster: a consumer lost with its server, a cluster without a
// JetStream meta leader for a few seconds, a skipped delivery.
//
// A Follower reads through a pull consumer of its own, and replaces it
// whenever it is lost (two missed heartbeats, a deleted or unknown
// consumer, no responders) or delivers out of order, starting the new one
// after the last message handed over. It does what nats.go's ordered
// consumer (jetstream.OrderedConsumer) does, but creates each consumer with
// a short request, retried every Config.Retry: an ordered consumer
// recreates its consumer with one request of a fixed 10 s timeout, and a
// creation sent while the cluster has no meta leader (its node was killed)
// is dropped by every server, so an ordered consumer stands still for those
// 10 s even when the cluster has healed within 5.
//
// The handler runs on the Follower's goroutine, one message at a time, in
// stream order; no message reaches it twice and none is skipped (with
// Config.Filters, none of those the filters match). It is never called
// again once Stop has returned. Blocking in the handler is the
// back-pressure: the consumer is asked for no more than Config.PullAhead
// messages and Config.PullBytes bytes ahead of it (plus, once in a while,
// one message larger than that).
//
// # Hostile clients
//
// Any client allowed to create a consumer can make the server deliver
// messages of its choosing to any subject it can name (a push consumer's
// deliver subject), and any client can make the server send a PubAck, a
// JetStream API response or the status messages of its own pull requests
// to any reply subject. A Follower therefore fetches with pull requests of
// its own, each with a reply subject of its own,
//
//	<inbox prefix>.<token>.<request id>
//
// where the prefix is the connection's (nats.CustomInboxPrefix, "_INBOX"
// by default), the token is 32 lowercase hex digits (128 bits) from
// crypto/rand, new for each consumer (never a NUID: nats.go's NewInbox
// takes its NUIDs from a process-wide generator whose output is
// predictable), and the request id counts the Follower's requests. It
// subscribes to each request's reply subject while the request is
// outstanding, and only then (all into one channel, so in the order they
// arrive: the server delivers a message under its own subject, so the
// subscription it came through is what ties it to its request). A message
// that arrives there is handed over only if its reply subject is a $JS.ACK
// subject naming the Follower's stream and its current consumer
// (streams.ParseAckReply), and the request still expects one; a status
// message is honoured only if it is consistent with its request (a
// heartbeat names the consumer's last delivery, a timeout or end of a
// request the messages and bytes the request had left, a "no responders"
// the request's own subject), and a status that could end or lose the
// consumer without proof (409 Consumer Deleted, 409 Leadership Change)
// only makes the Follower look its consumer up. Everything else is dropped: never handed over, never taken
// for a lost consumer, counted (Dropped) and reported to Config.OnDrop.
// (A client that knows the consumer's name and may pull from it can still
// make it deliver out of turn; the Follower sees the gap and replaces it.)
// Consumer names are random (128 bits from crypto/rand) unless
// Config.Names confines them; each consumer carries a random token in its
// metadata, which the Follower checks in the server's answer to its
// creation and before it deletes a consumer it believes its own.
package follow

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// HeaderLen is the length of the header block the message came with,
	// as stored (0: none). Header is what the NATS client parsed of it: nil
	// when it could not parse it, and a block that is not in the client's
	// own form (a status line, lines without a colon or with an empty
	// name, other spacing, names repeated apart) parses to less than it
	// holds. The block's bytes themselves are the stream's message get's
	// (package archive keeps them).
	HeaderLen int
}

// Config says what to read and how.
type Config struct {
	Stream   string
	StartSeq uint64   // the first stream sequence to read (0 is 1)
	Filters  []string // subjects to read (none: all)
	// FromNew starts the first consumer after the last message the stream
	// holds when the consumer is created (deliver policy "new"), instead
	// of at StartSeq, which is then ignored: the server's answer to the
	// creation says which stream sequence it starts after (its
	// delivered.stream_seq, the stream's last sequence then), and Next
	// says it from Ready on. A reader that may not look up the stream's
	// info (a worker under tenure auth init's permissions, PROTOCOL.md §4)
	// learns where to start so. On a cluster, a consumer placed on a
	// replica still applying the latest publishes starts after that
	// replica's last message: earlier, never later, so nothing stored
	// after the creation is skipped (Next says where it really starts).
	// Every replacement starts after the last message handed over, as
	// without it.
	FromNew bool
	// PullAhead is how many messages the consumer is asked for ahead of
	// what the handler has taken: one pull request for all of them, then
	// another for what the handler took whenever it has taken more than
	// half (as nats.go's Consume does), up to four outstanding. Zero is
	// DefaultPullAhead.
	PullAhead int
	// PullBytes bounds the bytes asked for ahead of the handler, likewise
	// (the requests' max_bytes, counted as the server counts them:
	// subject, ack reply, headers and body). A message larger than a
	// request's max_bytes is then asked for alone, with room for the
	// largest message the server accepts (its max_payload plus room for
	// the subject and ack reply; without a bound if even that is refused),
	// so a large message is never a stall. Zero is DefaultPullBytes.
	PullBytes int
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
	// a client not allowed to delete consumers. It does not apply with
	// Names.
	KeepConsumers bool
	// InactiveThreshold is how long the server keeps a consumer nobody
	// reads. Zero is DefaultInactiveThreshold.
	InactiveThreshold time.Duration
	// Names, when set, are the only consumer names the Follower may use
	// (a client whose permissions allow it a few consumer names of its
	// own, so that it cannot create consumers without bound). It creates
	// its consumer under the first name of the list not in use; when it
	// replaces or stops its consumer, it deletes it (whatever
	// KeepConsumers says: the client must be allowed to delete its own
	// names) and, on a replacement, creates it again under the same name.
	// When every name is in use, the creation fails with ErrNamesInUse
	// (Err, OnError) and is retried after Retry, doubling up to
	// MaxNamesBackoff. So at most len(Names) Followers with the same names
	// read at once, and the consumer of a process that crashed holds its
	// name until the server removes it, InactiveThreshold after its last
	// request.
	Names []string
	// OnError, if set, is told of every error of a consumer (from the
	// Follower's goroutine; it must not block): why one was replaced, the
	// first of a streak of failed creations. The Follower handles them
	// itself; this is for logging.
	OnError func(error)
	// OnDrop, if set, is told of every message the Follower dropped (see
	// Dropped), with one of the Drop reasons and the subject the message
	// came with (a delivery's own subject; for a status or a response, the
	// request's reply subject), on the Follower's goroutine (it must not
	// block): for logs and metrics. Deliveries and statuses that a
	// consumer or request of this Follower sends after the Follower gave
	// it up (a replacement, a reconnection) are expected, and discarded
	// without a report.
	OnDrop func(reason, subject string)
}

// Defaults of Config.
const (
	DefaultPullAhead     = 500
	DefaultPullBytes     = 8 << 20
	DefaultHeartbeat     = time.Second
	DefaultCreateTimeout = time.Second
	DefaultRetry         = 100 * time.Millisecond
	// DefaultInactiveThreshold is nats.go's ordered consumers' own.
	DefaultInactiveThreshold = 5 * time.Minute
	// MaxNamesBackoff bounds the wait between creations that failed
	// because every one of Config.Names was in use.
	MaxNamesBackoff = 5 * time.Second
)

// Reasons given to Config.OnDrop, short enough for a metric label.
const (
	// DropNoAckReply: a message without a $JS.ACK reply subject that is no
	// status either (a PubAck, a JetStream API response, a plain publish).
	DropNoAckReply = "no_ack_reply"
	// DropOtherStream: a delivery from another stream.
	DropOtherStream = "other_stream"
	// DropOtherConsumer: a delivery from another consumer of the stream.
	DropOtherConsumer = "other_consumer"
	// DropStatusMismatch: a status that does not match its request (a
	// heartbeat naming another delivery sequence, a timeout with other
	// counts, a "no responders" for another subject).
	DropStatusMismatch = "status_mismatch"
	// DropUnexpectedStatus: a status the server does not send for the
	// Follower's requests (404 No Messages, 409 Consumer is push based,
	// 409 Exceeded ..., 400 ...).
	DropUnexpectedStatus = "unexpected_status"
)

// ErrNamesInUse is why a Follower with Config.Names has no consumer: every
// one of the names is in use.
var ErrNamesInUse = errors.New("every consumer name allowed is in use")

// ErrReplacing is what a report of a consumer being replaced (Config.OnError)
// matches: the Follower lost its consumer (a missed heartbeat, a deleted
// consumer, a node gone) and creates another, which goes on after the last
// message handed over; nothing is lost. A notice, not a failure.
var ErrReplacing = errors.New("replacing consumer")

// metaToken is the consumer metadata key of the random token that tells a
// Follower its own consumers from others of the same name.
const metaToken = "tenure_follow"

// largeRoom is what a request for one large message asks for beyond the
// server's max_payload (which bounds headers and body): the subject and
// the ack reply.
var largeRoom = 8 << 10

func (c Config) withDefaults() Config {
	if c.StartSeq == 0 {
		c.StartSeq = 1
	}
	if c.PullAhead <= 0 {
		c.PullAhead = DefaultPullAhead
	}
	if c.PullBytes <= 0 {
		c.PullBytes = DefaultPullBytes
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

// Handle is a reader as the SDKs hold it (worker.Follower and
// ops.Follower are this type): a *Follower is one, and a model of
// JetStream (internal/jsmodel) provides others, so that the SDKs run on
// either.
type Handle interface {
	// Ready is closed once the reader reads (its first consumer made).
	Ready() <-chan struct{}
	// Err is why it cannot read, nil if it can.
	Err() error
	// Stop stops it and waits until its handler is no longer called.
	Stop()
}

var _ Handle = (*Follower)(nil)

// Follower reads one stream. It is owned by the goroutine that started it:
// Stop ends it and waits.
type Follower struct {
	cfg    Config
	js     jetstream.JetStream
	nc     *nats.Conn
	api    string // the JetStream API prefix, "$JS.API." by default
	handle func(context.Context, Msg)
	cancel context.CancelFunc
	done   chan struct{}
	ready  chan struct{} // closed when the first consumer exists

	readyOnce sync.Once

	// Owned by the run goroutine.
	ch     chan *nats.Msg // every request's subscription delivers here, in the order received
	checks chan checked   // the results of consumer look-ups
	next   uint64         // the next stream sequence to hand over
	reqID  uint64         // the last request id
	gen    uint64         // the last session's
	used   []string       // the names of this Follower's recent consumers
	prev   *session       // with Names: the replaced consumer, deleted before its name is used again
	prefer int            // with Names: the index of the name to try first
	placed bool           // f.next is known: a consumer was created (FromNew) or StartSeq given

	// Copies for Next, Replaced and Dropped, which must not wait for a
	// handler that blocks.
	nextCopy atomic.Uint64
	replaced atomic.Int64 // consumers replaced so far
	// For the tests, which wait on these events instead of waiting for
	// time to pass: failed creation attempts, look-ups of the consumer
	// concluded, deletions of a consumer begun.
	failedCreates, lookups, deletes atomic.Int64
	dropped                         atomic.Uint64

	errMu sync.Mutex
	// createErr is the last consumer creation's error (nil once one
	// succeeded); only the first of a streak goes to Config.OnError.
	createErr error

	obsMu   sync.Mutex // what the tests observe
	obsName string
	obsIn   string
	obsReqs []string
	onPull  func([]pullInfo) // a test hook, called after each request is sent
}

// session is one consumer and its outstanding requests.
type session struct {
	gen      uint64
	cons     jetstream.Consumer
	name     string
	token    string // the random token in the consumer's metadata
	inbox    string // <prefix>.<token>: the requests' replies are inbox.<id>
	nextSubj string // $JS.API.CONSUMER.MSG.NEXT.<stream>.<name>
	dseq     uint64 // the delivery sequence of the last message handed over
	reqs     []*request

	batch    int // the most messages a request asks for
	bytes    int // the largest max_bytes of a request
	largeMax int // the max_bytes of a request for one large message
	expires  time.Duration
	hb       time.Duration

	needLarge bool // the next message is larger than a request's max_bytes
	unbounded bool // ... and larger than largeMax: ask for it without a bound

	live      uint64    // messages proving the consumer alive, counted
	seen      uint64    // live at the last tick
	lastLive  time.Time // when live last changed (to a tick)
	lastSent  time.Time // the last request sent
	checking  bool      // a look-up of the consumer is in flight
	wantCheck bool      // one is asked for
	lastCheck time.Time
	body      []byte
}

// request is one outstanding pull request.
type request struct {
	id       uint64
	reply    string
	sub      *nats.Subscription
	batch    int // messages asked for
	maxBytes int // bytes asked for (0: no bound)
	n, b     int // messages and bytes left
	large    bool
	got      bool // something it proved alive came in (a delivery, a heartbeat)
	sent     time.Time
}

// pullInfo describes an outstanding request, for the tests.
type pullInfo struct {
	Batch, MaxBytes, Left, LeftBytes int
	Large                            bool
}

// checked is the result of a look-up of a consumer: gone is why it is
// lost, nil if it exists or could not be looked up.
type checked struct {
	gen  uint64
	gone error
}

// Start reads cfg.Stream until ctx ends or Stop, handing every message to
// handle, with a context that ends when the Follower stops (a handler that
// blocks must return when it does). It returns at once: the first consumer
// is created in the background, and retried until it exists (Ready).
func Start(ctx context.Context, js jetstream.JetStream, cfg Config, handle func(context.Context, Msg)) *Follower {
	return start(ctx, js, cfg, handle, nil)
}

func start(ctx context.Context, js jetstream.JetStream, cfg Config, handle func(context.Context, Msg), onPull func([]pullInfo)) *Follower {
	cfg = cfg.withDefaults()
	rctx, cancel := context.WithCancel(ctx)
	f := &Follower{cfg: cfg, js: js, nc: js.Conn(), api: streams.APIPrefix(js), handle: handle, cancel: cancel,
		done: make(chan struct{}), ready: make(chan struct{}), next: cfg.StartSeq, placed: !cfg.FromNew, onPull: onPull,
		// Room for every message asked for, and the statuses of the
		// requests (heartbeats, ends): nats.go drops what does not fit.
		ch:     make(chan *nats.Msg, cfg.PullAhead+256),
		checks: make(chan checked, 1)}
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

// Done is closed when the Follower has stopped (Stop, or its context
// ended).
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

// Next is the stream sequence after the last message handed over (with
// Config.FromNew, until Ready, StartSeq).
func (f *Follower) Next() uint64 {
	return f.nextCopy.Load()
}

// Replaced is how many times the Follower replaced its consumer.
func (f *Follower) Replaced() int { return int(f.replaced.Load()) }

// Dropped is how many messages the Follower dropped because its consumer
// did not send them, or a status did not match its request (see the
// package documentation and Config.OnDrop). It stays 0 unless another
// client aims messages at the Follower's inbox (or the server misbehaves).
func (f *Follower) Dropped() uint64 { return f.dropped.Load() }

// run creates the consumer, and a new one each time the current one is
// lost, until ctx ends.
func (f *Follower) run(ctx context.Context) {
	defer close(f.done)
	conn := f.nc.StatusChanged(nats.CONNECTED)
	defer f.nc.RemoveStatusListener(conn)
	tick := time.NewTicker(f.cfg.Heartbeat / 2)
	defer tick.Stop()
	for {
		s := f.create(ctx)
		if s == nil {
			if f.prev != nil {
				f.deletes.Add(1)
				go f.deleteIfOurs(f.prev.name, f.prev.token)
			}
			return
		}
		err := f.follow(ctx, s, conn, tick.C)
		stopping := ctx.Err() != nil
		f.end(s, stopping)
		if stopping {
			return
		}
		if h := f.cfg.OnError; h != nil {
			h(fmt.Errorf("follow %s: %w %s: %w", f.cfg.Stream, ErrReplacing, s.name, err))
		}
		f.replaced.Add(1)
	}
}

// create creates a consumer starting at f.next, retrying until it exists
// or ctx ends (nil).
func (f *Follower) create(ctx context.Context) *session {
	backoff := f.cfg.Retry
	for {
		s, err := f.tryCreate(ctx)
		if err == nil {
			f.errMu.Lock()
			f.createErr = nil
			f.errMu.Unlock()
			f.observe(s)
			f.readyOnce.Do(func() { close(f.ready) })
			return s
		}
		if ctx.Err() != nil {
			return nil
		}
		err = fmt.Errorf("follow %s: creating a consumer: %w", f.cfg.Stream, err)
		f.failedCreates.Add(1)
		f.errMu.Lock()
		first := f.createErr == nil
		f.createErr = err
		f.errMu.Unlock()
		if h := f.cfg.OnError; h != nil && first {
			h(err)
		}
		wait := f.cfg.Retry
		if errors.Is(err, ErrNamesInUse) {
			wait, backoff = backoff, min(2*backoff, MaxNamesBackoff)
		} else {
			backoff = f.cfg.Retry
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// tryCreate makes one attempt at creating a consumer (with Names, one per
// name until one is free).
func (f *Follower) tryCreate(ctx context.Context) (*session, error) {
	names := f.cfg.Names
	if len(names) == 0 {
		return f.createNamed(ctx, "tenure_"+randomHex())
	}
	for i := range names {
		k := (f.prefer + i) % len(names)
		name := names[k]
		if p := f.prev; p != nil && p.name == name {
			// The consumer this one replaces: gone, or deleted now.
			f.deletes.Add(1)
			if err := f.deleteIfOursCtx(ctx, p.name, p.token); err != nil {
				return nil, err
			}
			f.prev = nil
		}
		s, err := f.createNamed(ctx, name)
		if err == nil {
			f.prefer = k
			return s, nil
		}
		var apiErr *jetstream.APIError
		if !errors.Is(err, jetstream.ErrConsumerExists) && (!errors.As(err, &apiErr) ||
			(apiErr.ErrorCode != jetstream.JSErrCodeConsumerExists && apiErr.ErrorCode != jetstream.JSErrCodeConsumerNameExists)) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w (%s)", ErrNamesInUse, strings.Join(names, ", "))
}

// createNamed creates the consumer name, starting at f.next (with
// FromNew, before the first consumer exists: after the stream's last
// message).
func (f *Follower) createNamed(ctx context.Context, name string) (*session, error) {
	token := randomHex()
	cfg := jetstream.ConsumerConfig{
		Name:              name,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       f.next,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: f.cfg.InactiveThreshold,
		Replicas:          1,
		MemoryStorage:     true,
		// Tells this consumer from another of the same name (in the
		// answer to this request, in a look-up, before a deletion). And
		// a creation of an existing consumer with the same configuration
		// succeeds: the token makes every configuration unique, so that
		// two Followers with the same Names never share a consumer.
		Metadata: map[string]string{metaToken: token},
	}
	if !f.placed {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverNewPolicy, 0
	}
	if len(f.cfg.Filters) == 1 {
		// One filter goes in the creation request's subject
		// ($JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>), where
		// server permissions can restrict it (tenure auth init does).
		cfg.FilterSubject = f.cfg.Filters[0]
	} else {
		cfg.FilterSubjects = f.cfg.Filters
	}
	cctx, cancel := context.WithTimeout(ctx, f.cfg.CreateTimeout)
	cons, err := f.js.CreateConsumer(cctx, f.cfg.Stream, cfg)
	cancel()
	if err != nil {
		return nil, err
	}
	info := cons.CachedInfo()
	if info == nil || info.Name != name || info.Stream != f.cfg.Stream || info.Config.Metadata[metaToken] != token ||
		info.Config.DeliverPolicy != cfg.DeliverPolicy || info.Config.OptStartSeq != cfg.OptStartSeq {
		// Not the answer to this request (the client's API inbox is not
		// unguessable).
		return nil, fmt.Errorf("the answer to the creation of consumer %s describes another consumer", name)
	}
	if !f.placed {
		// A new consumer delivers from its start: nats-server sets its
		// next stream sequence to the stream's last sequence + 1 (1 for
		// a stream that never held a message) whatever its filters, and
		// reports one less as delivered (follow/fromnew_test.go pins
		// it).
		if info.Delivered.Consumer != 0 {
			return nil, fmt.Errorf("the answer to the creation of consumer %s says it delivered %d messages already", name, info.Delivered.Consumer)
		}
		f.next, f.placed = info.Delivered.Stream+1, true
		f.nextCopy.Store(f.next)
	}
	f.gen++
	s := &session{gen: f.gen, cons: cons, name: name, token: token,
		inbox:    inboxPrefix(f.nc) + "." + randomHex(),
		nextSubj: f.api + "CONSUMER.MSG.NEXT." + f.cfg.Stream + "." + name,
		batch:    f.cfg.PullAhead,
		bytes:    f.cfg.PullBytes,
		largeMax: int(f.nc.MaxPayload()) + largeRoom,
		expires:  max(5*time.Second, 2*f.cfg.Heartbeat),
		hb:       f.cfg.Heartbeat,
	}
	// Within the consumer's limits (an account may impose them), so the
	// server never refuses a request.
	c := info.Config
	if c.MaxRequestBatch > 0 {
		s.batch = min(s.batch, c.MaxRequestBatch)
	}
	if c.MaxRequestMaxBytes > 0 {
		s.bytes = min(s.bytes, c.MaxRequestMaxBytes)
		s.largeMax = min(s.largeMax, c.MaxRequestMaxBytes)
	}
	if c.MaxRequestExpires > 0 && s.expires > c.MaxRequestExpires {
		s.expires = c.MaxRequestExpires
		s.hb = min(s.hb, s.expires/2)
	}
	f.used = append(f.used, name)
	if len(f.used) > 8 {
		f.used = f.used[1:]
	}
	return s, nil
}

// inboxPrefix is the connection's inbox prefix, without its dot.
func inboxPrefix(nc *nats.Conn) string {
	if p := strings.TrimSuffix(nc.Opts.InboxPrefix, "."); p != "" {
		return p
	}
	return strings.TrimSuffix(nats.InboxPrefix, ".")
}

// randomHex is 128 bits from crypto/rand, in 32 lowercase hex digits.
func randomHex() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (it crashes the program instead)
	return hex.EncodeToString(b[:])
}

// end forgets session s: unsubscribes its requests, and deletes its
// consumer unless KeepConsumers (in the background: the server may be
// unreachable; its inactivity threshold removes it then). With Names, a
// replaced consumer is deleted before its name is used again, a stopped
// one in the background.
func (f *Follower) end(s *session, stopping bool) {
	for len(s.reqs) > 0 {
		f.retire(s, s.reqs[0])
	}
	// What came in before: nothing more can (nats.go drops what arrives
	// for a closed subscription), and none of it is handed over now.
	for len(f.ch) > 0 {
		_ = f.process(context.Background(), s, <-f.ch)
	}
	f.observe(nil)
	switch {
	case len(f.cfg.Names) > 0 && stopping:
		f.deletes.Add(1)
		go f.deleteIfOurs(s.name, s.token)
	case len(f.cfg.Names) > 0:
		f.prev = s
	case !f.cfg.KeepConsumers:
		f.deletes.Add(1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = f.js.DeleteConsumer(ctx, f.cfg.Stream, s.name)
		}()
	}
}

// deleteIfOurs deletes consumer name if it is still the one with token (in
// the background, bounded).
func (f *Follower) deleteIfOurs(name, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = f.deleteIfOursCtx(ctx, name, token)
}

// deleteIfOursCtx deletes consumer name if it exists and is the one with
// token: another process with the same Names may have taken the name since
// the consumer was lost. nil means the name is no longer held by it.
func (f *Follower) deleteIfOursCtx(ctx context.Context, name, token string) error {
	cctx, cancel := context.WithTimeout(ctx, f.cfg.CreateTimeout)
	defer cancel()
	cons, err := f.js.Consumer(cctx, f.cfg.Stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up consumer %s before deleting it: %w", name, err)
	}
	if cons.CachedInfo().Config.Metadata[metaToken] != token {
		return nil // not ours: its creation will find the name in use
	}
	if err := f.js.DeleteConsumer(cctx, f.cfg.Stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("deleting consumer %s: %w", name, err)
	}
	return nil
}

// follow reads through session s until its consumer must be replaced (the
// error says why) or ctx ends (nil).
func (f *Follower) follow(ctx context.Context, s *session, conn <-chan nats.Status, tick <-chan time.Time) error {
	// A reconnection before this consumer existed is no concern of its
	// requests.
	for len(conn) > 0 {
		<-conn
	}
	s.lastLive = time.Now()
	f.fill(s)
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-f.ch:
			if err := f.process(ctx, s, m); err != nil {
				return err
			}
			// What else came in, without a select per message (the
			// other cases wait: a tick, a reconnection, a look-up).
			for i := 0; i < 256 && len(f.ch) > 0; i++ {
				if err := f.process(ctx, s, <-f.ch); err != nil {
					return err
				}
			}
		case <-tick:
			if len(f.ch) > 0 {
				continue // what came in first
			}
			if err := f.tick(ctx, s); err != nil {
				return err
			}
		case _, ok := <-conn:
			if !ok {
				conn = nil
				continue
			}
			// Reconnected: the server dropped the requests of the
			// connection it lost. Take what came in before, then ask
			// again.
			for len(f.ch) > 0 {
				if err := f.process(ctx, s, <-f.ch); err != nil {
					return err
				}
			}
			for len(s.reqs) > 0 {
				f.retire(s, s.reqs[0])
			}
			f.fill(s)
		case c := <-f.checks:
			f.lookups.Add(1)
			if c.gen == s.gen {
				s.checking = false
				if c.gone != nil {
					return c.gone
				}
			}
		}
	}
}

// tick runs every half heartbeat, when nothing is waiting in f.ch.
func (f *Follower) tick(ctx context.Context, s *session) error {
	now := time.Now()
	for i := 0; i < len(s.reqs); {
		if r := s.reqs[i]; now.After(r.sent.Add(s.expires + s.hb)) {
			// The server ends a request at its expiry with a status;
			// that status never came: it ended without one.
			f.retire(s, r)
			continue
		}
		i++
	}
	if s.wantCheck {
		f.check(ctx, s)
	}
	f.fill(s)
	if s.live != s.seen {
		s.seen, s.lastLive = s.live, now
	}
	last := s.lastLive
	if s.lastSent.After(last) {
		last = s.lastSent
	}
	if now.Sub(last) > 2*s.hb {
		return jetstream.ErrNoHeartbeat
	}
	return nil
}

// process takes one message that came in through a request's subscription
// (s.reqs, or one given up since).
func (f *Follower) process(ctx context.Context, s *session, m *nats.Msg) error {
	var r *request
	for _, q := range s.reqs {
		if q.sub == m.Sub {
			r = q
			break
		}
	}
	if m.Reply == "" && len(m.Data) == 0 && m.Header.Get("Status") != "" {
		// The server's statuses have no reply subject; a stored message
		// with a Status header has its ack reply.
		return f.status(ctx, s, r, m)
	}
	d, ok := streams.ParseAckReply(m.Reply)
	switch {
	case !ok:
		f.drop(DropNoAckReply, m)
		return nil
	case d.Stream != f.cfg.Stream:
		f.drop(DropOtherStream, m)
		return nil
	case r == nil && f.usedName(d.Consumer):
		return nil // for a request given up: expected after a replacement or a reconnection
	case d.Consumer != s.name || r == nil:
		f.drop(DropOtherConsumer, m)
		return nil
	}
	// r expects more: a request is given up once it has all it asked for.
	r.got = true
	r.n--
	if r.maxBytes > 0 {
		// The server stops a request once its bytes are spent.
		if r.b -= m.Size(); r.b <= 0 {
			r.b, r.n = 0, 0
		}
	}
	if ctx.Err() != nil {
		return nil // stopping: nothing more is handed over
	}
	if d.ConsumerSeq != s.dseq+1 || d.StreamSeq < f.next {
		// A message skipped (or one already handed over): start again
		// after the last one handed over.
		return fmt.Errorf("delivery %d (stream sequence %d) after delivery %d (next %d)", d.ConsumerSeq, d.StreamSeq, s.dseq, f.next)
	}
	s.dseq, f.next = d.ConsumerSeq, d.StreamSeq+1
	f.nextCopy.Store(f.next)
	f.handle(ctx, Msg{Seq: d.StreamSeq, Time: d.Time, Subject: m.Subject, Data: m.Data, Header: m.Header, Pending: d.Pending,
		HeaderLen: m.Size() - len(m.Subject) - len(m.Reply) - len(m.Data)})
	s.live++ // after the handler: its time is no missed heartbeat
	if r.n == 0 {
		if r.large {
			s.unbounded = false
		}
		f.retire(s, r)
	}
	f.fill(s)
	return nil
}

// status takes a status message for request r (nil: one given up).
func (f *Follower) status(ctx context.Context, s *session, r *request, m *nats.Msg) error {
	if r == nil {
		// The end of a request after its last message (409 Batch
		// Completed), the 409 Consumer Deleted of a consumer deleted
		// after its replacement, ...
		return nil
	}
	code, desc := m.Header.Get("Status"), m.Header.Get("Description")
	switch code {
	case "100": // idle heartbeat
		if v, err := strconv.ParseUint(m.Header.Get("Nats-Last-Consumer"), 10, 64); err == nil && v == s.dseq {
			r.got = true
			s.live++
			return nil
		}
		f.drop(DropStatusMismatch, m)
		return nil
	case "503": // no responders: nobody serves the consumer's subject
		if m.Header.Get("Nats-Subject") == s.nextSubj && !r.got {
			return nats.ErrNoResponders
		}
		f.drop(DropStatusMismatch, m)
		return nil
	case "408", "409", "423":
		if n, b, ok := pendingCounts(m); ok {
			// The end of the request (408 Request Timeout, 409 Message
			// Size Exceeds MaxBytes, 409 Server Shutdown, ...), with the
			// messages and bytes it had left.
			if n != r.n || b != r.b {
				f.drop(DropStatusMismatch, m)
				return nil
			}
			s.live++
			if code == "409" && strings.EqualFold(desc, "Server Shutdown") {
				// The consumer's server is shutting down, and the
				// consumer (memory, one replica) with it.
				return jetstream.ErrServerShutdown
			}
			if code == "409" && strings.EqualFold(desc, "Message Size Exceeds MaxBytes") && r.n == r.batch && r.b == r.maxBytes {
				// Nothing came: the next message is larger than the
				// request's max_bytes. Ask for it alone.
				if r.large {
					s.unbounded = true
				}
				s.needLarge = true
			}
			f.retire(s, r)
			f.fill(s)
			return nil
		}
		if code == "409" && (strings.EqualFold(desc, "Consumer Deleted") || strings.EqualFold(desc, "Leadership Change")) {
			// Anyone can send this to a subject it knows: look the
			// consumer up. The request stays outstanding until its end
			// is proven (a later status, its expiry).
			s.wantCheck = true
			f.check(ctx, s)
			return nil
		}
	}
	f.drop(DropUnexpectedStatus, m)
	return nil
}

// pendingCounts reads the messages and bytes a request had left from the
// status that ended it.
func pendingCounts(m *nats.Msg) (n, b int, ok bool) {
	ns, bs := m.Header.Get("Nats-Pending-Messages"), m.Header.Get("Nats-Pending-Bytes")
	if ns == "" || bs == "" {
		return 0, 0, false
	}
	n, err1 := strconv.Atoi(ns)
	b, err2 := strconv.Atoi(bs)
	return n, b, err1 == nil && err2 == nil
}

// check looks consumer s up in the background, at most once per half
// heartbeat; f.follow replaces it if it is gone.
func (f *Follower) check(ctx context.Context, s *session) {
	if s.checking || time.Since(s.lastCheck) < s.hb/2 {
		return
	}
	s.checking, s.wantCheck, s.lastCheck = true, false, time.Now()
	gen, cons, name, token := s.gen, s.cons, s.name, s.token
	go func() {
		cctx, cancel := context.WithTimeout(ctx, f.cfg.CreateTimeout)
		info, err := cons.Info(cctx)
		cancel()
		var gone error
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
			gone = err
		case err == nil && info.Config.Metadata[metaToken] != token:
			gone = fmt.Errorf("consumer %s is another one now: %w", name, jetstream.ErrConsumerNotFound)
		}
		select {
		case f.checks <- checked{gen: gen, gone: gone}:
		case <-ctx.Done():
		}
	}()
}

// maxRequests bounds the outstanding requests of a consumer.
const maxRequests = 4

// fill tops the outstanding requests up to PullAhead messages and
// PullBytes bytes once half of either is spent, as nats.go's Consume does
// with its own: the server serves its outstanding requests in turn, one
// message each, so requests of a fixed size, each renewed when it ends,
// would end together (after a burst: a worker's verdicts) and leave the
// server nothing to deliver to until the next ones arrive.
func (f *Follower) fill(s *session) {
	for len(s.reqs) < maxRequests {
		aheadN, aheadB, large := 0, 0, false
		for _, r := range s.reqs {
			aheadN += r.n
			aheadB += r.b
			large = large || r.large
		}
		var n, maxBytes int
		asLarge := s.needLarge && !large && aheadN < f.cfg.PullAhead
		switch {
		case asLarge:
			n, maxBytes = 1, s.largeMax
			if s.unbounded {
				maxBytes = 0
			}
		case len(s.reqs) > 0 && 2*aheadN > f.cfg.PullAhead && 2*aheadB > f.cfg.PullBytes:
			return // more than half of both still asked for
		default:
			n, maxBytes = min(s.batch, f.cfg.PullAhead-aheadN), min(s.bytes, f.cfg.PullBytes-aheadB)
			if n <= 0 || maxBytes <= 0 {
				return
			}
		}
		if !f.pull(s, n, maxBytes, asLarge) {
			return
		}
		if asLarge {
			s.needLarge = false
		}
	}
}

// pull sends one request for n messages and maxBytes bytes (0: no bound).
func (f *Follower) pull(s *session, n, maxBytes int, large bool) bool {
	f.reqID++
	reply := s.inbox + "." + strconv.FormatUint(f.reqID, 10)
	sub, err := f.nc.ChanSubscribe(reply, f.ch)
	if err != nil {
		return false // the connection is closed; the missed heartbeats tell
	}
	b := append(s.body[:0], `{"batch":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	if maxBytes > 0 {
		b = append(b, `,"max_bytes":`...)
		b = strconv.AppendInt(b, int64(maxBytes), 10)
	}
	b = append(b, `,"expires":`...)
	b = strconv.AppendInt(b, int64(s.expires), 10)
	b = append(b, `,"idle_heartbeat":`...)
	b = strconv.AppendInt(b, int64(s.hb), 10)
	b = append(b, '}')
	s.body = b
	if err := f.nc.PublishRequest(s.nextSubj, reply, b); err != nil {
		_ = sub.Unsubscribe()
		return false
	}
	now := time.Now()
	s.reqs = append(s.reqs, &request{id: f.reqID, reply: reply, sub: sub, batch: n, maxBytes: maxBytes,
		n: n, b: maxBytes, large: large, sent: now})
	s.lastSent = now
	f.observe(s)
	if f.onPull != nil {
		infos := make([]pullInfo, len(s.reqs))
		for i, r := range s.reqs {
			infos[i] = pullInfo{Batch: r.batch, MaxBytes: r.maxBytes, Left: r.n, LeftBytes: r.b, Large: r.large}
		}
		f.onPull(infos)
	}
	return true
}

// retire forgets request r: nothing more is taken from its subscription.
func (f *Follower) retire(s *session, r *request) {
	for i, q := range s.reqs {
		if q == r {
			s.reqs = append(s.reqs[:i], s.reqs[i+1:]...)
			break
		}
	}
	_ = r.sub.Unsubscribe()
	f.observe(s)
}

// usedName tells whether name is one of this Follower's recent consumers.
func (f *Follower) usedName(name string) bool {
	for _, n := range f.used {
		if n == name {
			return true
		}
	}
	return false
}

// drop counts and reports a message the Follower does not take.
func (f *Follower) drop(reason string, m *nats.Msg) {
	f.dropped.Add(1)
	if h := f.cfg.OnDrop; h != nil {
		h(reason, m.Subject)
	}
}

// observe records what the tests look at (nil: no consumer).
func (f *Follower) observe(s *session) {
	f.obsMu.Lock()
	defer f.obsMu.Unlock()
	f.obsName, f.obsIn, f.obsReqs = "", "", f.obsReqs[:0]
	if s == nil {
		return
	}
	f.obsName, f.obsIn = s.name, s.inbox
	for _, r := range s.reqs {
		f.obsReqs = append(f.obsReqs, r.reply)
	}
}
