package jsmodel

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/worker"
)

// requestTimeout is the bound of a request whose context has none, as
// nats.go's JetStream client bounds it (its default timeout).
const requestTimeout = 5 * time.Second

// call sends a request of actor to target and waits for its reply (or
// ctx, bounded by requestTimeout when it has no deadline). The request may
// be lost (never applied), or applied and its reply lost: the caller then
// times out, whatever became of it, as a JetStream client does.
func call[T any](ctx context.Context, n *Net, actor, target string, apply func(now time.Time) (T, error)) (T, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, requestTimeout)
		defer cancel()
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 2)
	n.submit(actor, actor+">"+target, func(now time.Time) {
		if n.chance(n.faults.LoseRequest, "lose-request") {
			return
		}
		v, err := apply(now)
		n.replyLocked(actor, target, func() {
			select {
			case ch <- result{v, err}:
			default:
			}
		})
	})
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// replyLocked sends a reply from target to actor: late, lost or twice as
// the faults say.
func (n *Net) replyLocked(actor, target string, deliver func()) {
	if n.chance(n.faults.LoseReply, "lose-reply") {
		return
	}
	lane := "<" + target + ">" + actor
	n.submitLocked(actor, lane, 0, func(time.Time) { deliver() })
	if n.chance(n.faults.DupReply, "dup-reply") {
		n.submitLocked(actor, lane, 0, func(time.Time) { deliver() })
	}
}

// Backend is a coordinator's port (coordinator.Backend) to the model.
type Backend struct {
	n     *Net
	actor string
	top   streams.Topology
	mu    sync.Mutex
	async int           // PublishAsync in flight
	idle  chan struct{} // closed while none is (PublishAsyncComplete)
	rn    int           // readers started
}

var _ coordinator.Backend = (*Backend)(nil)

// Backend returns coordinator actor's port to the model.
func (n *Net) Backend(actor string, top streams.Topology) *Backend {
	b := &Backend{n: n, actor: actor, top: top, idle: make(chan struct{})}
	close(b.idle)
	return b
}

func (b *Backend) stream(input bool) *Stream {
	if input {
		return b.n.model.In
	}
	return b.n.model.Out
}

// Reconnects counts the server's crashes (Net.LoseTails): every
// connection to it was lost and established again.
func (b *Backend) Reconnects() uint64 {
	b.n.mu.Lock()
	defer b.n.mu.Unlock()
	return b.n.crashes
}

// Setup finds the model's streams, made open (past genesis).
func (b *Backend) Setup(context.Context) error { return nil }

func (b *Backend) SetupInfo() *jetstream.StreamInfo {
	b.n.mu.Lock()
	defer b.n.mu.Unlock()
	return b.n.model.In.Info()
}

func (b *Backend) Info(ctx context.Context, input bool) (*jetstream.StreamInfo, error) {
	return call(ctx, b.n, b.actor, "info", func(time.Time) (*jetstream.StreamInfo, error) {
		return b.stream(input).Info(), nil
	})
}

// getter is a stream's MsgGetter through the net.
type getter struct {
	b     *Backend
	input bool
}

func (g getter) GetMsg(ctx context.Context, seq uint64, _ ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	return call(ctx, g.b.n, g.b.actor, "get", func(time.Time) (*jetstream.RawStreamMsg, error) {
		m := g.b.stream(g.input).Get(seq)
		if m == nil {
			return nil, jetstream.ErrMsgNotFound
		}
		return m.Raw(), nil
	})
}

func (b *Backend) Decisions() streams.MsgGetter { return getter{b, false} }
func (b *Backend) Inputs() streams.MsgGetter    { return getter{b, true} }

func (b *Backend) Read(ctx context.Context, input bool, from uint64, fn func(coordinator.Stored)) coordinator.Reader {
	b.mu.Lock()
	b.rn++
	id := b.actor + "#" + strconv.Itoa(b.rn)
	b.mu.Unlock()
	return b.n.read(ctx, id, b.actor, b.stream(input), from, nil, fn)
}

func (b *Backend) Publish(ctx context.Context, msg *nats.Msg, msgID string, expectLast *uint64) (*jetstream.PubAck, error) {
	m := withHeaders(msg, msgID, expectLast)
	a, err := call(ctx, b.n, b.actor, "in", func(now time.Time) (PubAck, error) {
		a, _ := b.n.model.In.Publish(now, m)
		b.n.fed(b.n.model.In)
		return a, nil
	})
	if err != nil {
		return nil, err
	}
	return a.result()
}

// result is a PubAck as nats.go's JetStream client returns it.
func (a PubAck) result() (*jetstream.PubAck, error) {
	if a.Error != nil {
		return nil, a.Error
	}
	return &jetstream.PubAck{Stream: a.Stream, Sequence: a.Seq, Duplicate: a.Duplicate}, nil
}

func withHeaders(msg *nats.Msg, msgID string, expectLast *uint64) *nats.Msg {
	m := &nats.Msg{Subject: msg.Subject, Data: append([]byte(nil), msg.Data...), Header: cloneHeader(msg.Header)}
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	if msgID != "" {
		m.Header.Set(hdrMsgID, msgID)
	}
	if expectLast != nil {
		m.Header.Set(hdrExpectSeq, strconv.FormatUint(*expectLast, 10))
	}
	return m
}

// future is a PubAckFuture of the model.
type future struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
	err chan error
}

func (f *future) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *future) Err() <-chan error            { return f.err }
func (f *future) Msg() *nats.Msg               { return f.msg }

func (b *Backend) PublishAsync(msg *nats.Msg, msgID string) (jetstream.PubAckFuture, error) {
	m := withHeaders(msg, msgID, nil)
	f := &future{msg: m, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	b.mu.Lock()
	if b.async == 0 {
		b.idle = make(chan struct{})
	}
	b.async++
	b.mu.Unlock()
	done := func() {
		b.mu.Lock()
		if b.async--; b.async == 0 {
			close(b.idle)
		}
		b.mu.Unlock()
	}
	answered := false
	b.n.submitWhat(b.actor, b.actor+">in", m.Subject, func(now time.Time) {
		if b.n.chance(b.n.faults.LoseRequest, "lose-request") {
			done() // the client's async publish times out: err
			f.err <- context.DeadlineExceeded
			return
		}
		a, _ := b.n.model.In.Publish(now, m)
		b.n.fed(b.n.model.In)
		if b.n.chance(b.n.faults.LoseReply, "lose-reply") {
			done()
			f.err <- context.DeadlineExceeded // stored, but the client does not know
			return
		}
		b.n.submitLocked(b.actor, "<in>"+b.actor, 0, func(time.Time) {
			if answered {
				return
			}
			answered = true
			done()
			if r, err := a.result(); err != nil {
				f.err <- err
			} else {
				f.ok <- r
			}
		})
	})
	return f, nil
}

func (b *Backend) PublishAsyncComplete() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.idle
}

// appends is a coordinator's appends connection in the model: core
// publishes to the decision stream, in order, their replies to replies.
type appends struct {
	b       *Backend
	replies chan *nats.Msg
}

func (b *Backend) Appends(replies chan *nats.Msg) (coordinator.AppendConn, error) {
	return &appends{b: b, replies: replies}, nil
}

func (a *appends) Inbox() string { return "_INBOX.sim." + a.b.actor }
func (a *appends) Close()        {}

func (a *appends) Publish(msg *nats.Msg) error {
	n, actor := a.b.n, a.b.actor
	m := &nats.Msg{Subject: msg.Subject, Reply: msg.Reply, Data: append([]byte(nil), msg.Data...), Header: cloneHeader(msg.Header)}
	n.submit(actor, actor+">out", func(now time.Time) {
		if n.chance(n.faults.LoseRequest, "lose-append") {
			return
		}
		before := n.model.Out.Last()
		ack, ok := n.model.Out.Publish(now, m)
		if last := n.model.Out.Last(); last > before {
			for _, fn := range n.onAppend {
				fn(actor, before+1, last)
			}
			n.fed(n.model.Out)
		}
		if !ok || m.Reply == "" {
			return
		}
		reply := &nats.Msg{Subject: m.Reply, Data: ack.JSON()}
		n.replyLocked(actor, "out", func() {
			select {
			case a.replies <- reply:
			default:
				n.Counts["reply-dropped-full"]++
			}
		})
	})
	return nil
}

func (b *Backend) Leader() coordinator.LeaderStore { return leader{b} }

// leader is the leadership bucket through the net.
type leader struct{ b *Backend }

type kvRev struct {
	val []byte
	rev uint64
}

func (l leader) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	return call(ctx, l.b.n, l.b.actor, "kv", func(now time.Time) (uint64, error) {
		return l.b.n.model.Leader.Create(now, key, value)
	})
}

func (l leader) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	r, err := call(ctx, l.b.n, l.b.actor, "kv", func(now time.Time) (kvRev, error) {
		v, rev, err := l.b.n.model.Leader.Get(now, key)
		return kvRev{v, rev}, err
	})
	return r.val, r.rev, err
}

func (l leader) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	return call(ctx, l.b.n, l.b.actor, "kv", func(now time.Time) (uint64, error) {
		return l.b.n.model.Leader.Update(now, key, value, last)
	})
}

func (l leader) Delete(ctx context.Context, key string, last uint64) error {
	_, err := call(ctx, l.b.n, l.b.actor, "kv", func(now time.Time) (struct{}, error) {
		return struct{}{}, l.b.n.model.Leader.Delete(now, key, last)
	})
	return err
}

func (b *Backend) Snapshots() coordinator.SnapshotStore { return snapshots{b} }

// snapshots is the snapshot object through the net.
type snapshots struct{ b *Backend }

func (s snapshots) GetInfo(ctx context.Context, name string, _ ...jetstream.GetObjectInfoOpt) (*jetstream.ObjectInfo, error) {
	return call(ctx, s.b.n, s.b.actor, "obj", func(time.Time) (*jetstream.ObjectInfo, error) {
		o := s.b.n.model.Snap
		if o == nil || o.Info.Name != name {
			return nil, jetstream.ErrObjectNotFound
		}
		info := *o.Info
		return &info, nil
	})
}

func (s snapshots) GetBytes(ctx context.Context, name string, _ ...jetstream.GetObjectOpt) ([]byte, error) {
	return call(ctx, s.b.n, s.b.actor, "obj", func(time.Time) ([]byte, error) {
		o := s.b.n.model.Snap
		if o == nil || o.Info.Name != name {
			return nil, jetstream.ErrObjectNotFound
		}
		return append([]byte(nil), o.Data...), nil
	})
}

func (s snapshots) Put(ctx context.Context, headers nats.Header, data []byte) error {
	_, err := call(ctx, s.b.n, s.b.actor, "obj", func(now time.Time) (struct{}, error) {
		stored := data
		if old := s.b.n.model.Snap; old != nil && s.b.n.chance(s.b.n.faults.StaleSnapshot, "stale-snapshot") {
			stored = old.Data
		}
		s.b.n.model.PutSnapshot(now, streams.SnapshotObject, headers, stored)
		return struct{}{}, nil
	})
	return err
}

// reader reads a stream of the model in order: each message reaches it
// through the net (a lane of its own: late, or stalled as a consumer lost
// and replaced is), and its goroutine hands them to fn one at a time.
// delivered is a message that reached a reader, and how many the stream
// held after it then.
type delivered struct {
	Msg
	after uint64
}

type reader struct {
	n       *Net
	id      string
	actor   string
	s       *Stream
	filters []string // only subjects matching one of them (none: all)
	next    uint64   // the next sequence to deliver
	inLane  bool     // a delivery is in the net
	mu      sync.Mutex
	pending []delivered
	wake    chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

func (n *Net) read(ctx context.Context, id, actor string, s *Stream, from uint64, filters []string, fn func(coordinator.Stored)) *reader {
	ctx, cancel := context.WithCancel(ctx)
	r := &reader{n: n, id: id, actor: actor, s: s, filters: filters, next: max(from, 1), wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	n.mu.Lock()
	n.readers = append(n.readers, r)
	n.feedLocked(r)
	n.mu.Unlock()
	go func() {
		defer close(r.done)
		for {
			r.mu.Lock()
			var m delivered
			has := len(r.pending) > 0
			if has {
				m, r.pending = r.pending[0], r.pending[1:]
			}
			r.mu.Unlock()
			if !has {
				select {
				case <-ctx.Done():
					return
				case <-r.wake:
				}
				continue
			}
			if ctx.Err() != nil {
				return
			}
			fn(coordinator.Stored{Seq: m.Seq, Time: m.Time.UnixNano(), Subject: m.Subject, Data: m.Data, Header: cloneHeader(m.Header), Pending: m.after})
		}
	}()
	return r
}

func (r *reader) Stop() {
	r.cancel()
	<-r.done
	r.n.mu.Lock()
	for i, x := range r.n.readers {
		if x == r {
			r.n.readers = append(r.n.readers[:i], r.n.readers[i+1:]...)
			break
		}
	}
	r.n.mu.Unlock()
}

func (r *reader) Err() error { return nil }

// wants reports whether subject matches one of r's filters (any, with
// none).
func (r *reader) wants(subject string) bool {
	if len(r.filters) == 0 {
		return true
	}
	for _, f := range r.filters {
		if SubjectMatches(f, subject) {
			return true
		}
	}
	return false
}

// SubjectMatches reports whether subject matches filter as a JetStream
// consumer's filter subject matches (TestConformFilters): tokens split at
// '.', '*' matches any one token, '>' as the last token one or more.
func SubjectMatches(filter, subject string) bool {
	for {
		ft, frest, fmore := strings.Cut(filter, ".")
		st, srest, smore := strings.Cut(subject, ".")
		switch {
		case ft == ">" && !fmore:
			return true
		case ft != "*" && ft != st:
			return false
		}
		if !fmore || !smore {
			return fmore == smore
		}
		filter, subject = frest, srest
	}
}

// fed is called (under the lock) after s grew: its readers may go on.
func (n *Net) fed(s *Stream) {
	for _, r := range n.readers {
		if r.s == s {
			n.feedLocked(r)
		}
	}
}

// feedLocked puts r's next message (matching its filters) in the net, if
// the stream has one and none is in the net already.
func (n *Net) feedLocked(r *reader) {
	if r.inLane {
		return
	}
	for r.next <= r.s.Last() && !r.wants(r.s.Get(r.next).Subject) {
		r.next++
	}
	if r.next > r.s.Last() {
		return
	}
	m := *r.s.Get(r.next)
	r.next++
	r.inLane = true
	var stall time.Duration
	if n.laneChance("~"+r.id, n.faults.ReaderStall, "reader-stall") {
		stall = n.faults.StallDelay
	}
	n.submitLocked(r.actor, "~"+r.id, stall, func(time.Time) {
		r.inLane = false
		r.mu.Lock()
		var after uint64 // (0 for a message the stream lost since it was read: LoseTail)
		if last := r.s.Last(); last > m.Seq {
			after = last - m.Seq
		}
		r.pending = append(r.pending, delivered{m, after})
		r.mu.Unlock()
		select {
		case r.wake <- struct{}{}:
		default:
		}
		n.feedLocked(r)
	})
}

// Client is a worker's (or an operator's) side of the model: it publishes
// inputs to the input stream and reads the decisions addressed to it.
type Client struct {
	n     *Net
	actor string
	rn    atomic.Int64 // readers started (an ops.Client starts them concurrently)
}

// Client returns actor's client.
func (n *Net) Client(actor string) *Client { return &Client{n: n, actor: actor} }

// ErrNotStored is a publish's outcome when no reply came: it may or may
// not have been stored.
var ErrNotStored = errors.New("jsmodel: no reply: the input may or may not be stored")

// Publish stores an input (with msgID, a Nats-Msg-Id) and returns its
// sequence (a duplicate's: the first one's).
func (c *Client) Publish(ctx context.Context, subject string, data []byte, msgID string) (uint64, error) {
	m := withHeaders(&nats.Msg{Subject: subject, Data: data}, msgID, nil)
	a, err := call(ctx, c.n, c.actor, "in", func(now time.Time) (PubAck, error) {
		a, _ := c.n.model.In.Publish(now, m)
		c.n.fed(c.n.model.In)
		return a, nil
	})
	if err != nil {
		return 0, ErrNotStored
	}
	r, err := a.result()
	if err != nil {
		return 0, err
	}
	return r.Sequence, nil
}

// Decisions reads the decision stream's messages under subject prefix
// prefix (e.g. tenure.out.w1.) from sequence from on, handing each to fn
// on a goroutine of its own, until ctx ends; Stop stops it.
func (c *Client) Decisions(ctx context.Context, from uint64, prefix string, fn func(coordinator.Stored)) coordinator.Reader {
	var filters []string
	if prefix != "" {
		filters = []string{prefix + ">"}
	}
	return c.n.read(ctx, c.readerID(), c.actor, c.n.model.Out, from, filters, fn)
}

// readerID names the client's next reader.
func (c *Client) readerID() string {
	return c.actor + "#" + strconv.FormatInt(c.rn.Add(1), 10)
}

// Transport is a Go SDK worker's port (worker.Transport) and a
// dispatcher's or an operator's (ops.Transport) to the model: its
// publishes go to the input stream through the net, Follow reads the
// decision stream, filtered by subject as JetStream filters
// (SubjectMatches), as a follow.Follower does (a consumer that delivers
// what is stored after its creation with FromNew), and LastMsg is a get
// of the last message on a subject.
// Journal, if set, receives every input sent and every PubAck read, as the
// chaos workers' taps journal them.
type Transport struct {
	c       *Client
	Journal func(sent bool, subject, msgID string, body []byte, stream string, seq uint64)
}

var (
	_ worker.Transport = (*Transport)(nil)
	_ ops.Transport    = (*Transport)(nil)
)

// Transport returns the client's transport: a worker's (worker.Transport)
// or a dispatcher's and an operator's (ops.Transport).
func (c *Client) Transport() *Transport { return &Transport{c: c} }

func (t *Transport) Publish(ctx context.Context, msg *nats.Msg, msgID, expectStream string) (*jetstream.PubAck, error) {
	c := t.c
	m := withHeaders(msg, msgID, nil)
	if expectStream != "" {
		m.Header.Set(hdrExpectStrm, expectStream)
	}
	if t.Journal != nil {
		t.Journal(true, m.Subject, msgID, m.Data, "", 0)
	}
	a, err := call(ctx, c.n, c.actor, "in", func(now time.Time) (PubAck, error) {
		a, _ := c.n.model.In.Publish(now, m)
		c.n.fed(c.n.model.In)
		return a, nil
	})
	if err != nil {
		return nil, err
	}
	r, err := a.result()
	if err == nil && t.Journal != nil {
		t.Journal(false, m.Subject, msgID, m.Data, r.Stream, r.Sequence)
	}
	return r, err
}

// follower is a reader as a worker.Follower.
type follower struct {
	*reader
	ready chan struct{}
}

func (f follower) Ready() <-chan struct{} { return f.ready }

func (t *Transport) Follow(ctx context.Context, cfg follow.Config, fn func(follow.Msg)) worker.Follower {
	c := t.c
	s := c.n.model.Out
	if cfg.Stream == c.n.model.In.Name {
		s = c.n.model.In
	}
	from := max(cfg.StartSeq, 1)
	if cfg.FromNew {
		c.n.mu.Lock()
		from = s.Last() + 1
		c.n.mu.Unlock()
	}
	ready := make(chan struct{})
	close(ready)
	return follower{c.n.read(ctx, c.readerID(), c.actor, s, from, cfg.Filters, fn), ready}
}

// PublishAsync is Publish without waiting (ops.Transport): the future
// learns the PubAck, or context.DeadlineExceeded when the request or its
// reply was lost (nats.go's async publish times out; the input may have
// been stored). The journal records the send, and the PubAck read.
func (t *Transport) PublishAsync(msg *nats.Msg, msgID, expectStream string) (jetstream.PubAckFuture, error) {
	c := t.c
	m := withHeaders(msg, msgID, nil)
	if expectStream != "" {
		m.Header.Set(hdrExpectStrm, expectStream)
	}
	if t.Journal != nil {
		t.Journal(true, m.Subject, msgID, m.Data, "", 0)
	}
	f := &future{msg: m, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	answered := false
	c.n.submitWhat(c.actor, c.actor+">in", m.Subject, func(now time.Time) {
		if c.n.chance(c.n.faults.LoseRequest, "lose-request") {
			f.err <- context.DeadlineExceeded
			return
		}
		a, _ := c.n.model.In.Publish(now, m)
		c.n.fed(c.n.model.In)
		if c.n.chance(c.n.faults.LoseReply, "lose-reply") {
			f.err <- context.DeadlineExceeded // stored, but the client does not know
			return
		}
		c.n.submitLocked(c.actor, "<in>"+c.actor, 0, func(time.Time) {
			if answered {
				return
			}
			answered = true
			r, err := a.result()
			if err != nil {
				f.err <- err
				return
			}
			if t.Journal != nil {
				t.Journal(false, m.Subject, msgID, m.Data, r.Stream, r.Sequence)
			}
			f.ok <- r
		})
	})
	return f, nil
}

// Partitions is the model's partition count (ops.Transport): 0, the
// model's streams being one unpartitioned deployment's; a prefix that
// names other streams finds none (jetstream.ErrStreamNotFound).
func (t *Transport) Partitions(ctx context.Context, prefix string) (uint32, error) {
	want := streams.Topology{Prefix: prefix}.DecisionStream()
	return call(ctx, t.c.n, t.c.actor, "info", func(time.Time) (uint32, error) {
		if want != t.c.n.model.Out.Name {
			return 0, fmt.Errorf("jsmodel: stream %s: %w", want, jetstream.ErrStreamNotFound)
		}
		return 0, nil
	})
}

// LastMsg is the last message of stream on subject, which may hold
// wildcards (ops.Transport), and the stream's first sequence.
func (t *Transport) LastMsg(ctx context.Context, stream, subject string) (*jetstream.RawStreamMsg, uint64, error) {
	type last struct {
		m     *jetstream.RawStreamMsg
		first uint64
	}
	l, err := call(ctx, t.c.n, t.c.actor, "get", func(time.Time) (last, error) {
		s := t.c.n.model.Out
		if stream == t.c.n.model.In.Name {
			s = t.c.n.model.In
		} else if stream != s.Name {
			return last{}, fmt.Errorf("jsmodel: stream %s: %w", stream, jetstream.ErrStreamNotFound)
		}
		var first uint64
		if s.Last() > 0 {
			first = 1
		}
		for seq := s.Last(); seq >= 1; seq-- {
			if m := s.Get(seq); m != nil && SubjectMatches(subject, m.Subject) {
				return last{m.Raw(), first}, nil
			}
		}
		return last{nil, first}, jetstream.ErrMsgNotFound
	})
	return l.m, l.first, err
}
