package coordinator

// The coordinator's port to JetStream (issue "Deterministic simulation"):
// everything a session reads, writes or asks of JetStream goes through a
// Backend. JetStream implements it over a connection (jsBackend, below:
// the one production uses, built by New from Config.Conn); the simulator
// (internal/sim) implements it over a model of JetStream with seeded
// faults (internal/jsmodel), and runs real coordinators on it. What the
// model shares with JetStream is pinned by tests that run against both.
//
// The port speaks JetStream's own data types (stream infos, stored
// messages, PubAcks, the publish headers of fenced appends and atomic
// batches), so that the coordinator's code above it (building the fenced
// appends, matching their replies, checking anchors) is the same code in
// production and in the simulator.

import (
	"bytes"
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/snapshot"
	"github.com/maknow/tenure/streams"
)

// Backend is what a coordinator needs of JetStream.
type Backend interface {
	// Setup makes the topology (streams.Ensure) or finds it, and returns
	// once it can be used. A *streams.ConfigMismatchError means it exists
	// in a form the coordinator refuses.
	Setup(ctx context.Context) error
	// Info reads the input stream's (input true) or the decision
	// stream's configuration and state.
	Info(ctx context.Context, input bool) (*jetstream.StreamInfo, error)
	// Setup's info of the input stream (the configuration it found).
	SetupInfo() *jetstream.StreamInfo
	// Decisions reads the decision stream by sequence (snapshot anchors).
	Decisions() streams.MsgGetter
	// Inputs reads the input stream by sequence.
	Inputs() streams.MsgGetter
	// Read reads a stream in order from sequence from on, handing each
	// message to fn (one at a time, on a goroutine of the reader's own;
	// blocking in fn is the back-pressure) until ctx ends or Stop.
	Read(ctx context.Context, input bool, from uint64, fn func(Stored)) Reader
	// Publish stores one of the coordinator's inputs (rules, policy) in
	// the input stream and waits for its PubAck; expectLast, if not nil,
	// is its Nats-Expected-Last-Sequence.
	Publish(ctx context.Context, msg *nats.Msg, msgID string, expectLast *uint64) (*jetstream.PubAck, error)
	// PublishAsync stores one of its inputs (ticks, checkpoints) without
	// waiting.
	PublishAsync(msg *nats.Msg, msgID string) (jetstream.PubAckFuture, error)
	// PublishAsyncComplete is closed once every PublishAsync is answered.
	PublishAsyncComplete() <-chan struct{}
	// Appends opens the connection the appender publishes the fenced
	// appends of decisions on (append.go): core publishes, each with
	// JetStream's publish headers and a reply subject under the returned
	// inbox, whose replies (PubAcks, errors) come on replies.
	Appends(replies chan *nats.Msg) (AppendConn, error)
	// Leader is the leadership entry's bucket.
	Leader() LeaderStore
	// Snapshots is the store of the latest snapshot.
	Snapshots() SnapshotStore
	// Reconnects counts the times the connection was established again
	// after it was lost (nats.Conn's Statistics.Reconnects): a server
	// that restarted may have lost the unsynced tails of its streams
	// (PROTOCOL.md §2, "A server that loses its tail"), so a session on
	// a stream of one replica then reads the streams again (inputKept).
	Reconnects() uint64
}

// Stored is one message read from a stream, in stream order.
type Stored = follow.Msg

// Reader is a reader Backend.Read started.
type Reader interface {
	// Stop stops the reader and waits until fn is no longer called.
	Stop()
	// Err is why the reader cannot read (it goes on trying), nil if it
	// can.
	Err() error
}

// AppendConn is the connection of a coordinator's appends.
type AppendConn interface {
	// Inbox is the prefix of the reply subjects (inbox.<unit id>): one
	// nobody else can name.
	Inbox() string
	// Publish publishes msg (core NATS: it buffers, never waits on the
	// server).
	Publish(msg *nats.Msg) error
	Close()
}

// LeaderStore is the leadership entry's bucket: a KV bucket whose entries
// live LeaderTTL after their last write.
type LeaderStore interface {
	// Create writes key if it does not exist (jetstream.ErrKeyExists if
	// it does) and returns its revision.
	Create(ctx context.Context, key string, value []byte) (uint64, error)
	// Get reads key (jetstream.ErrKeyNotFound, jetstream.ErrKeyDeleted).
	Get(ctx context.Context, key string) (value []byte, rev uint64, err error)
	// Update writes key if its revision is last (compare and set), and
	// returns the new revision.
	Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error)
	// Delete deletes key if its revision is last.
	Delete(ctx context.Context, key string, last uint64) error
}

// SnapshotStore stores the latest snapshot (streams.SnapshotObject) with
// headers that say where it is anchored (streams.ParseSnapshotHeaders); it
// is read by a snapshot.Reader, as the archive, the read models and the
// auditor read it.
type SnapshotStore interface {
	snapshot.Objects
	// Put replaces the stored snapshot.
	Put(ctx context.Context, headers nats.Header, data []byte) error
}

// jsBackend is the Backend of JetStream over a connection.
type jsBackend struct {
	c      *Coordinator
	nc     *nats.Conn
	js     jetstream.JetStream
	h      *streams.Handles
	drops  *dropCounter
	setup  *jetstream.StreamInfo
	leader jsLeader
	snaps  jsSnapshots
}

func newJSBackend(c *Coordinator, nc *nats.Conn, js jetstream.JetStream) *jsBackend {
	return &jsBackend{c: c, nc: nc, js: js, drops: c.drops}
}

func (b *jsBackend) Reconnects() uint64 { return b.nc.Stats().Reconnects }

func (b *jsBackend) Setup(ctx context.Context) error {
	h, err := streams.Ensure(ctx, b.js, b.c.cfg.Topology, b.c.cfg.LeaderTTL)
	if err != nil {
		return err
	}
	b.h = h
	b.setup = h.In.CachedInfo()
	b.leader = jsLeader{h.Leader}
	b.snaps = jsSnapshots{Objects: snapshot.JetStream(b.c.cfg.Topology, h), obs: h.Snapshots}
	return nil
}

func (b *jsBackend) SetupInfo() *jetstream.StreamInfo { return b.setup }

func (b *jsBackend) Info(ctx context.Context, input bool) (*jetstream.StreamInfo, error) {
	if input {
		return b.h.In.Info(ctx)
	}
	return b.h.Out.Info(ctx)
}

func (b *jsBackend) Decisions() streams.MsgGetter { return b.h.Out }
func (b *jsBackend) Inputs() streams.MsgGetter    { return b.h.In }

func (b *jsBackend) Read(ctx context.Context, input bool, from uint64, fn func(Stored)) Reader {
	stream := b.c.cfg.Topology.DecisionStream()
	if input {
		stream = b.c.cfg.Topology.InputStream()
	}
	return follow.Start(ctx, b.js, follow.Config{Stream: stream, StartSeq: from, PullAhead: readerPullAhead,
		OnDrop: func(reason, subject string) {
			b.drops.drop("reader of "+stream, fmt.Errorf("%s on %s", reason, subject))
		}}, func(_ context.Context, m follow.Msg) { fn(m) })
}

func (b *jsBackend) Publish(ctx context.Context, msg *nats.Msg, msgID string, expectLast *uint64) (*jetstream.PubAck, error) {
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	if expectLast != nil {
		opts = append(opts, jetstream.WithExpectLastSequence(*expectLast))
	}
	return b.js.PublishMsg(ctx, msg, opts...)
}

func (b *jsBackend) PublishAsync(msg *nats.Msg, msgID string) (jetstream.PubAckFuture, error) {
	return b.js.PublishMsgAsync(msg, jetstream.WithMsgID(msgID))
}

func (b *jsBackend) PublishAsyncComplete() <-chan struct{} { return b.js.PublishAsyncComplete() }

func (b *jsBackend) Appends(replies chan *nats.Msg) (AppendConn, error) {
	a := &jsAppends{nc: b.nc, inbox: privateInbox(b.nc)}
	var err error
	if a.sub, err = b.nc.ChanSubscribe(a.inbox+".*", replies); err != nil {
		return nil, fmt.Errorf("coordinator: subscribe to append replies: %w", err)
	}
	// Replies are bounded by the units in flight; never drop one.
	_ = a.sub.SetPendingLimits(-1, -1)
	return a, nil
}

func (b *jsBackend) Leader() LeaderStore      { return b.leader }
func (b *jsBackend) Snapshots() SnapshotStore { return b.snaps }

// jsAppends is the appends' connection of a jsBackend.
type jsAppends struct {
	nc    *nats.Conn
	inbox string
	sub   *nats.Subscription
}

func (a *jsAppends) Inbox() string               { return a.inbox }
func (a *jsAppends) Publish(msg *nats.Msg) error { return a.nc.PublishMsg(msg) }
func (a *jsAppends) Close() {
	if a.sub != nil {
		_ = a.sub.Unsubscribe()
	}
}

// jsLeader is a LeaderStore over a JetStream KV bucket.
type jsLeader struct{ kv jetstream.KeyValue }

func (l jsLeader) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	return l.kv.Create(ctx, key, value)
}

func (l jsLeader) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := l.kv.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	return e.Value(), e.Revision(), nil
}

func (l jsLeader) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	return l.kv.Update(ctx, key, value, last)
}

func (l jsLeader) Delete(ctx context.Context, key string, last uint64) error {
	return l.kv.Delete(ctx, key, jetstream.LastRevision(last))
}

// jsSnapshots is a SnapshotStore over a JetStream object store: it is
// read by snapshot.JetStream, which never waits for a version replaced
// while it is read (ObjectStore.GetBytes does, until its context ends).
type jsSnapshots struct {
	snapshot.Objects
	obs jetstream.ObjectStore
}

func (s jsSnapshots) Put(ctx context.Context, headers nats.Header, data []byte) error {
	_, err := s.obs.Put(ctx, jetstream.ObjectMeta{Name: snapshotName, Headers: headers}, bytes.NewReader(data))
	return err
}
