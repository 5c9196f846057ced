// Package coordinator is Tenure's single-writer I/O loop around the pure
// fold: it consumes the input stream strictly in order, folds each input
// with the projector, and appends the decisions to the decision stream in
// order, each fenced with Nats-Expected-Last-Sequence and deduplicated by a
// deterministic Nats-Msg-Id.
//
// A coordinator is either a warm standby or live. A standby follows both
// streams and re-derives every stored decision from the stored inputs,
// byte for byte; a mismatch is ErrDivergence, and a missing input sequence
// ErrInputGap, and the coordinator refuses to go live. Leadership is a JetStream KV entry created with Create and renewed
// by compare-and-set, by a goroutine of its own that reports into the loop
// (leadership.go): the loop steps out of live once the entry could have
// expired without a confirmed renewal. The decision stream's
// expected-sequence check, not the KV entry, is the fence: an append refused for a wrong last sequence means
// another writer has authority, and the coordinator stops writing at once
// and falls back to standby.
//
// Time: the fold judges inputs by their stored timestamps. When a deadline
// is due and no input has advanced time past it, the live coordinator
// appends a tick input; the tick's stored timestamp fires the deadline.
//
// Restart is the same path as taking over: load the latest snapshot (if its
// decision position checks out), fold the inputs after it without publishing
// while verifying the stored decisions, append whatever decisions of the
// last input are missing, then go live. Nothing is lost or appended twice,
// whatever the crash point.
//
// Snapshots never stall the loop: the loop freezes the projector's state in
// constant time and an encoder goroutine of the session encodes it
// (snapshot.go); the loop's longest turns are reported (Metrics.LoopPause).
//
// Signed chain heads: with Config.HeadSigner, the live coordinator publishes
// periodically, as core NATS messages on Topology.HeadSubject(), a signed
// head (package heads) of the last decision the stream acknowledged, so
// that auditors can keep the chain outside NATS (PROTOCOL.md §20.3). The
// fold knows nothing of it.
package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/heads"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// ErrDivergence means a stored decision differs from the one the fold derives
// from the stored inputs (or the decision chain has a gap or fork). The
// coordinator refuses to go live: an operator must audit the log.
var ErrDivergence = errors.New("coordinator: stored decisions diverge from the fold")

// ErrInputGap means the input stream lacks a sequence: an input was removed
// from the log (the stream denies deletes and purges, so only by tampering
// with the server's store). No fold can reproduce the decisions made on it;
// the coordinator refuses to go live, as for ErrDivergence.
var ErrInputGap = errors.New("coordinator: the input stream has a gap")

// ErrLogRemoved means the state at hand (the stored snapshot, or none) ends
// before the first input or decision the streams still hold: a segment of
// the log was archived and removed (package archive), and no usable
// snapshot covers it. Nothing is folded or appended; the coordinator stands
// by and retries, so that it resumes once a snapshot that covers the
// removed segment is back (tenure log restore). It is only ever returned
// for streams created for log retention (streams.Retained); a hole in
// others is ErrInputGap or ErrDivergence.
var ErrLogRemoved = errors.New("coordinator: the log before the first stored input was removed, and no usable snapshot covers it")

// Defaults of Config.
const (
	DefaultLeaderTTL        = 3 * time.Second
	DefaultSnapshotEvery    = 100_000
	DefaultSnapshotInterval = time.Minute
	DefaultMaxInflight      = 4096
	DefaultAppendBatch      = maxAtomicBatch
	DefaultAppendBatches    = 2
	DefaultTickSlack        = time.Millisecond
	DefaultHeadInterval     = 5 * time.Second
	leaderKey               = "leader"
	snapshotName            = streams.SnapshotObject
)

// Config configures a coordinator.
type Config struct {
	ID               string           // identity: actor token of its tick and policy inputs
	Conn             *nats.Conn       // connection to the NATS server or cluster
	Topology         streams.Topology // stream and bucket names
	LeaderTTL        time.Duration    // leadership entry lifetime; renewed every third of it
	SnapshotEvery    int              // inputs between snapshots; negative disables snapshots
	SnapshotInterval time.Duration    // time between snapshots when inputs arrived
	MaxInflight      int              // decisions derived and not yet acknowledged; the loop stops reading inputs beyond
	AppendBatch      int              // most decisions per atomic batch append (at most 1000, the server's limit); negative: never batch
	AppendBatches    int              // atomic batches awaiting their reply
	TickSlack        time.Duration    // how long after a deadline to append a tick
	Logger           *slog.Logger
	Metrics          Metrics // optional observer of folds and appends (nil: none); see PartitionMetrics for a Group
	// LeaseKey is the lease key this coordinator writes into the rules input
	// when it moves a log to rules revision 2 (PROTOCOL.md §14): nil, the
	// default, draws one from crypto/rand. Only tests and documentation
	// examples, which need the same lease ids on every run, set it; a
	// deployment that sets it makes its lease ids as guessable as the key.
	LeaseKey *[events.LeaseKeyLen]byte
	// HeadSigner, if not nil, signs the chain heads the coordinator
	// publishes while live (package heads, PROTOCOL.md §20.3) on
	// Topology.HeadSubject(): every HeadInterval (default
	// DefaultHeadInterval), a head of the last decision the stream
	// acknowledged, if it moved since the last head or HeadRefresh has
	// passed. It must be a server nkey with its seed (heads.CheckSigner).
	HeadSigner   nkeys.KeyPair
	HeadInterval time.Duration

	// yield, set by Group, tells a live coordinator to hand its partition
	// to another process (it holds more than its share of the partitions).
	yield func(*Coordinator) bool
	// caughtUp, set by tests, runs after each decision verified while a
	// session that holds leadership catches up (to make catching up slow).
	caughtUp func()
	// renewing, set by tests, runs in the renewer before each renewal's KV
	// update, with the renewer's context (to make renewals slow or stuck).
	renewing func(context.Context)
	// snapshotTaken, set by tests, runs in the live loop after it takes
	// (freezes) a snapshot (to make that turn slow).
	snapshotTaken func()
	// encodingSnapshot, set by tests, runs in the encoder before it encodes
	// a snapshot the live loop asked for.
	encodingSnapshot func(context.Context)
}

func (c Config) withDefaults() Config {
	if c.LeaderTTL == 0 {
		c.LeaderTTL = DefaultLeaderTTL
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = DefaultSnapshotEvery
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = DefaultSnapshotInterval
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.AppendBatch == 0 {
		c.AppendBatch = DefaultAppendBatch
	}
	c.AppendBatch = min(c.AppendBatch, maxAtomicBatch)
	if c.AppendBatches == 0 {
		c.AppendBatches = DefaultAppendBatches
	}
	if c.TickSlack == 0 {
		c.TickSlack = DefaultTickSlack
	}
	if c.HeadInterval == 0 {
		c.HeadInterval = DefaultHeadInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Coordinator runs the fold over JetStream. Create it with New, run it with Run.
type Coordinator struct {
	cfg Config
	log *slog.Logger
	js  jetstream.JetStream
	h   *streams.Handles

	folded       atomic.Uint64 // last input sequence folded
	jobs         atomic.Int64  // jobs in the projection after the last input folded
	appended     atomic.Uint64 // last decision sequence acknowledged by the stream
	live         atomic.Bool
	lostAuth     atomic.Uint64 // appends refused for a wrong last sequence
	sessions     atomic.Uint64 // times the coordinator (re)synchronised
	snapRefused  atomic.Uint64 // stored snapshots refused (not anchored, or not what the anchor says)
	wentLive     atomic.Uint64 // sessions that went live
	drops        *dropCounter  // messages that reached its inboxes without being the server's answer to it
	state        atomic.Pointer[state]
	lastHead     atomic.Pointer[heads.Head] // the last chain head published
	snapMu       sync.Mutex
	snapInputSeq uint64
	snapAt       time.Time
	snapEncode   time.Duration // the last snapshot's encoding, off the loop
	snapBytes    int
}

// Stats is a point-in-time view of a coordinator, safe to read from any goroutine.
type Stats struct {
	ID        string `json:"id"`
	Partition string `json:"partition,omitempty"` // "2" for partition 2 of a partitioned deployment
	Live      bool   `json:"live"`
	// State is StateStarting, StateStandby, StateLive or StateRefused;
	// Reason says why it is not live (who leads, the error it
	// resynchronises after, or why it refuses and what to do), "" when live.
	State           string    `json:"state"`
	Reason          string    `json:"reason,omitempty"`
	InputsFolded    uint64    `json:"inputs_folded"`    // sequence of the last input folded (live: folded and its decisions stored)
	DecisionsStored uint64    `json:"decisions_stored"` // last decision sequence acknowledged
	SnapshotSeq     uint64    `json:"snapshot_input_seq"`
	SnapshotAt      time.Time `json:"snapshot_at"`
	LostAuthority   uint64    `json:"lost_authority"` // appends refused: another writer had authority
	Sessions        uint64    `json:"sessions"`       // synchronisations from the streams (1 + restarts of the loop)
	// SnapshotsRefused counts stored snapshots not restored: not anchored
	// in the decision stream, or not what their anchor says.
	SnapshotsRefused uint64 `json:"snapshots_refused"`
	// Dropped counts the messages that reached the coordinator's inboxes
	// without being the server's answer to it (a delivery of another
	// stream or consumer, a reply to nothing in flight): dropped, never
	// folded or taken for an append's outcome.
	Dropped uint64 `json:"dropped"`
	// Head is the last chain head this coordinator published (nil: none
	// yet, or no Config.HeadSigner): a head of a past live phase once it
	// stands by.
	Head *heads.Head `json:"head,omitempty"`
	// Jobs is the number of jobs in the projection after the last input
	// folded (a retired job is no longer counted).
	Jobs int64 `json:"jobs"`
	// SnapshotEncode is how long the last snapshot took to encode (on the
	// session's encoder goroutine, off the live loop), SnapshotBytes its
	// size; zero before the first.
	SnapshotEncode time.Duration `json:"snapshot_encode_ns"`
	SnapshotBytes  int           `json:"snapshot_bytes"`
}

// New checks the configuration.
func New(cfg Config) (*Coordinator, error) {
	cfg = cfg.withDefaults()
	if !events.ValidToken(cfg.ID) {
		return nil, fmt.Errorf("coordinator: invalid id %q: want 1 to %d of [A-Za-z0-9_-]", cfg.ID, events.MaxTokenLen)
	}
	if cfg.Conn == nil {
		return nil, errors.New("coordinator: no NATS connection")
	}
	if err := cfg.Topology.Validate(); err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	if cfg.LeaderTTL < 0 {
		return nil, fmt.Errorf("coordinator: negative leader TTL %v", cfg.LeaderTTL)
	}
	if cfg.HeadSigner != nil {
		if _, err := heads.CheckSigner(cfg.HeadSigner); err != nil {
			return nil, fmt.Errorf("coordinator: head signer: %w", err)
		}
	}
	if cfg.HeadInterval < 0 {
		return nil, fmt.Errorf("coordinator: negative head interval %v", cfg.HeadInterval)
	}
	js, err := jetstream.New(cfg.Conn,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxInflight),
		jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("coordinator: jetstream: %w", err)
	}
	log := cfg.Logger.With("coordinator", cfg.ID)
	if cfg.Topology.Partition.Partitioned() {
		log = log.With("partition", cfg.Topology.Partition.Index)
	}
	return &Coordinator{cfg: cfg, log: log, js: js, drops: newDropCounter(log)}, nil
}

// Topology is the topology the coordinator folds (its partition included).
func (c *Coordinator) Topology() streams.Topology { return c.cfg.Topology }

// Stats returns the current statistics.
func (c *Coordinator) Stats() Stats {
	c.snapMu.Lock()
	defer c.snapMu.Unlock()
	st := c.currentState()
	return Stats{
		ID: c.cfg.ID, Partition: c.cfg.Topology.Partition.Token(), Live: c.live.Load(), State: st.name, Reason: st.reason,
		InputsFolded: c.folded.Load(), DecisionsStored: c.appended.Load(),
		SnapshotSeq: c.snapInputSeq, SnapshotAt: c.snapAt,
		LostAuthority: c.lostAuth.Load(), Sessions: c.sessions.Load(),
		SnapshotsRefused: c.snapRefused.Load(), Dropped: c.drops.count.Load(),
		Head: c.lastHead.Load(), Jobs: c.jobs.Load(),
		SnapshotEncode: c.snapEncode, SnapshotBytes: c.snapBytes,
	}
}

// Run creates the topology if needed and coordinates until ctx ends (nil),
// the stored decisions diverge from the fold (ErrDivergence) or the input
// stream has a gap (ErrInputGap). Losing
// authority or a transient JetStream failure makes it resynchronise from the
// streams and stand by, never exit.
//
// Each JetStream request Run makes takes at most the client's default
// timeout (5 s), whatever ctx's deadline: a request the cluster drops (no
// meta or stream leader yet) is retried instead of waited for until the
// deadline. ctx ending, deadline included, stops Run.
func (c *Coordinator) Run(ctx context.Context) error {
	parent := ctx
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	defer cancel()
	defer context.AfterFunc(parent, cancel)()
	backoff := 50 * time.Millisecond
	for {
		// A cluster that is still electing its leaders or gathering its
		// peers, or a server that is restarting, fails these requests for
		// a while: wait it out. A topology that exists in a form that cannot
		// be used (a less safe stream, another partition count) is an
		// operator's problem: stop.
		h, err := streams.Ensure(ctx, c.js, c.cfg.Topology, c.cfg.LeaderTTL)
		if err == nil {
			c.h = h
			break
		}
		var mismatch *streams.ConfigMismatchError
		if errors.As(err, &mismatch) {
			c.setState(StateRefused, refusal(err))
			c.log.Error("refusing to go live", "err", err, "what_to_do", Remedy(err))
			return err
		}
		c.setState(StateStarting, "topology not ready: "+err.Error())
		c.log.Warn("topology not ready, retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
	backoff = 50 * time.Millisecond
	for {
		sessions := c.wentLive.Load()
		err := c.session(ctx)
		c.live.Store(false)
		if c.wentLive.Load() != sessions {
			backoff = 50 * time.Millisecond // it was live: a new failure, not a streak
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrDivergence) || errors.Is(err, ErrInputGap) {
			c.setState(StateRefused, refusal(err))
			c.log.Error("refusing to go live", "err", err, "what_to_do", Remedy(err))
			return err
		}
		wait := backoff
		switch {
		case errors.Is(err, errYield):
			// Let another process take the partition before standing by
			// again (if none does, this one takes it back after the wait).
			c.setState(StateStandby, "handed the partition to another process to balance the partitions")
			c.log.Info("handed the partition over to balance the partitions between processes")
			wait = 2 * c.cfg.LeaderTTL
		case errors.Is(err, ErrLogRemoved):
			// Not a refusal: once a snapshot covering the removed segment
			// is back, the next session resumes from it.
			c.setState(StateStandby, refusal(err))
			c.log.Error("cannot resume: the log was trimmed before the state at hand", "err", err, "what_to_do", Remedy(err))
			wait = max(wait, logRemovedRetry)
		case err != nil:
			c.setState(StateStandby, "resynchronising after: "+err.Error())
			c.log.Warn("resynchronising", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// foldSlice bounds the time the live loop folds inputs before it serves its
// other cases (append replies, ticks, leadership reports): it bounds the
// loop's turns under a flood, so it is kept well below the 50 ms a turn
// should not exceed (leadership renewal runs off the loop).
const foldSlice = 20 * time.Millisecond

// logRemovedRetry is the wait between sessions that found the log removed
// before the state at hand (ErrLogRemoved): an operator restoring a
// snapshot is minutes away, not milliseconds.
const logRemovedRetry = 5 * time.Second

// errYield ends a live session whose partition is handed to another process.
var errYield = errors.New("coordinator: partition handed over")

// session is one pass of standby then live, from a fresh projector.
type session struct {
	c     *Coordinator
	ctx   context.Context
	p     *projector.Projector
	in    *reader
	out   *reader
	pend  []pending // derived decisions not yet matched or appended
	arena []byte    // the bodies of pend, reset when pend empties

	// The decision chain (events.HeaderChain): head is the chain value of
	// decision headSeq, the last one derived (or, before any is, the last
	// one verified or restored).
	head    events.Chain
	headSeq uint64
	chainer *events.Chainer

	decSeq     uint64    // last decision sequence verified, or derived while live
	inKnown    uint64    // the input stream is known to hold inputs up to this sequence
	sentSeq    uint64    // live: last decision sequence published (decSeq - len(pend))
	acked      uint64    // last decision sequence acknowledged
	app        *appender // live: the appends in flight; Stats' InputsFolded then follows their acknowledgements
	leaderRev  uint64    // the leadership entry's revision while no renewer runs (acquire, stepDown)
	renewer    *renewer  // renews the entry while the session holds it (leadership.go)
	validUntil time.Time // the leadership cannot have expired before then
	lastTickAt int64     // the deadline the last tick was appended for
	ticks      int       // ticks appended for it
	tickSent   time.Time // when the last tick was appended, zero once it is folded
	tickSubj   string    // the subject of this coordinator's ticks

	// Chain heads (heads.go): the chain value of decision acked and the
	// input it answers; the decision of the last head published in this
	// session (0: none) and when.
	ackedChain  events.Chain
	ackedCause  uint64
	lastHeadSeq uint64
	lastHeadAt  time.Time

	sinceSnap int
	snapTime  time.Time
	snapWait  *snapshot // taken, waiting for its decisions to be acknowledged
	snapCh    chan snapshot
	// The encoder (snapshot.go): frozen states go to it, encoded
	// snapshots come back to the live loop.
	enc         chan encodeJob
	encoded     chan *snapshot
	encoding    bool // a snapshot handed to the encoder, not back yet
	sinceFreeze int  // inputs folded since the last freeze
}

type pending struct {
	subject string
	n, of   uint32
	cause   uint64
	body    []byte
	seq     uint64       // its decision sequence
	chain   events.Chain // its chain value
	chained bool         // derived at rules revision 2 or later: the stored decision must carry its chain value
}

func (c *Coordinator) session(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.sessions.Add(1)
	if st := c.currentState(); st.name == StateStarting || st.name == StateLive {
		c.setState(StateStandby, "verifying the stored decisions before taking leadership")
	}
	s := &session{c: c, ctx: ctx, p: projector.NewPartition(c.cfg.Topology.Partition), snapTime: time.Now()}
	s.loadSnapshot() // may start the readers (perf: reading overlaps the restore)
	s.headSeq = s.decSeq
	if c.cfg.SnapshotEvery >= 0 {
		// Snapshots are encoded off the loop (snapshot.go): from the state
		// restored, or the empty one, every change is tracked.
		s.p.Track()
		ectx, ecancel := context.WithCancel(ctx)
		var ewg sync.WaitGroup
		defer func() { ecancel(); ewg.Wait() }()
		s.enc, s.encoded = make(chan encodeJob, 1), make(chan *snapshot, 1)
		ewg.Add(1)
		go func() { defer ewg.Done(); s.encoder(ectx) }()
	}
	c.folded.Store(s.p.LastSeq())
	defer func() { s.out.stop(); s.in.stop() }()
	if s.in == nil {
		if err := s.startReaders(s.p.LastSeq()+1, s.decSeq+1); err != nil {
			return err
		}
	}
	defer s.stopRenewer()
	if err := s.standby(); err != nil {
		return err
	}
	err := s.runLive()
	s.stopRenewer()
	s.stepDown()
	return err
}

// startReaders starts the input and decision readers at these sequences
// (both or neither).
func (s *session) startReaders(inFrom, outFrom uint64) error {
	c := s.c
	in, err := startReader(s.ctx, c.js, c.cfg.Topology.InputStream(), inFrom, 4096, c.drops)
	if err != nil {
		return err
	}
	out, err := startReader(s.ctx, c.js, c.cfg.Topology.DecisionStream(), outFrom, 4096, c.drops)
	if err != nil {
		in.stop()
		return err
	}
	s.in, s.out = in, out
	return nil
}

func (c *Coordinator) setSnapshot(seq uint64, at time.Time) {
	c.snapMu.Lock()
	c.snapInputSeq, c.snapAt = seq, at
	c.snapMu.Unlock()
}

// fold reads the next input (blocking) and derives its decisions into s.pend.
func (s *session) fold(m stored) error {
	if m.err != nil {
		return m.err
	}
	if m.seq != s.p.LastSeq()+1 {
		if err := s.removed(true, s.p.LastSeq()+1); err != nil {
			return err
		}
		return fmt.Errorf("%w: after input %d comes input %d", ErrInputGap, s.p.LastSeq(), m.seq)
	}
	ds, err := s.p.Step(events.Raw{Seq: m.seq, Time: m.time, Subject: m.subject, Body: m.data})
	if err != nil {
		return err
	}
	if s.app != nil {
		// Live: the first of these decisions gets the sequence after the
		// ones derived so far.
		s.anchored(ds, s.sentSeq+uint64(len(s.pend))+1)
		if m.subject == s.tickSubj {
			s.tickSent = time.Time{} // folded: the next one may leave
		}
	}
	for i := range ds {
		d := &ds[i]
		if cap(s.arena)-len(s.arena) < arenaChunk/64 {
			// perf: a new chunk rather than a grown (copied) arena; the
			// bodies cut from the old one keep it alive until sent.
			s.arena = make([]byte, 0, arenaChunk)
		}
		start := len(s.arena)
		s.arena = events.AppendDecision(s.arena, d)
		pd := pending{
			subject: s.c.cfg.Topology.Partition.DecisionSubject(d), n: d.N, of: d.Of, cause: d.Cause,
			body:    s.arena[start:len(s.arena):len(s.arena)],
			seq:     s.headSeq + 1,
			chained: s.p.Revision() >= events.Revision2,
		}
		if s.chainer == nil {
			s.chainer = events.NewChainer()
		}
		pd.chain = s.chainer.Next(s.head, pd.seq, pd.cause, pd.n, pd.of, pd.subject, pd.body)
		s.head, s.headSeq = pd.chain, pd.seq
		s.pend = append(s.pend, pd)
	}
	if s.app == nil {
		// Live, an input counts as folded once its decisions are stored
		// (acknowledged), so that Stats never shows an input folded whose
		// decisions are not in the stream yet.
		s.c.folded.Store(m.seq)
	}
	if n := len(ds); n == 0 || ds[n-1].Verb != events.VerbCheckpoint {
		s.sinceSnap++ // checkpoints do not count, or each would call for the next
	}
	s.sinceFreeze++
	s.c.jobs.Store(int64(s.p.Len()))
	s.compact()
	if mt := s.c.cfg.Metrics; mt != nil {
		mt.InputFolded(m.seq, time.Unix(0, m.time), len(ds))
	}
	return nil
}

// removed returns an ErrLogRemoved when want, the sequence the session
// needs next from the input (or decision) stream, is before the first one st holds because a
// segment was removed (st is a stream created for log retention), nil
// otherwise (then the hole is the caller's finding). It reads the stream's
// info: only on this rare path.
func (s *session) removed(input bool, want uint64) error {
	if s.c.h == nil {
		return nil // no streams (unit tests of the fold)
	}
	st, what := s.c.h.Out, "decision"
	if input {
		st, what = s.c.h.In, "input"
	}
	info, err := st.Info(s.ctx)
	if err != nil {
		return fmt.Errorf("coordinator: %s stream info: %w", what, streams.Classify(err))
	}
	if streams.Retained(info.Config) && info.State.FirstSeq > want {
		return fmt.Errorf("%w: the session needs %s %d, the stream starts at %d", ErrLogRemoved, what, want, info.State.FirstSeq)
	}
	return nil
}

// verify matches one stored decision against the fold.
func (s *session) verify(sd stored) error {
	if sd.err != nil {
		return sd.err
	}
	if sd.seq != s.decSeq+1 {
		if err := s.removed(false, s.decSeq+1); err != nil {
			return err
		}
		return fmt.Errorf("%w: decision stream jumped from %d to %d", ErrDivergence, s.decSeq, sd.seq)
	}
	cause, n, of, herr := decisionIndex(sd.header)
	if herr != nil {
		return fmt.Errorf("%w: decision %d: %v", ErrDivergence, sd.seq, herr)
	}
	if len(s.pend) == 0 {
		// Every decision of the inputs folded so far is matched: this one
		// must be caused by an input still to come, one that exists.
		if cause <= s.p.LastSeq() {
			return fmt.Errorf("%w: decision %d names input %d, whose decisions are all matched already (an extra decision)", ErrDivergence, sd.seq, cause)
		}
		var m stored
		select {
		case m = <-s.in.ch:
		default:
			if err := s.inputExists(cause); err != nil {
				return err
			}
			select {
			case m = <-s.in.ch:
			case <-s.ctx.Done():
				return s.ctx.Err()
			}
		}
		if err := s.fold(m); err != nil {
			return err
		}
	}
	want := s.pend[0]
	if sd.subject != want.subject || !bytes.Equal(sd.data, want.body) || cause != want.cause || n != want.n || of != want.of || sd.seq != want.seq {
		return fmt.Errorf("%w: decision %d (cause input %d, %d/%d):\n stored  %s %s (headers %d, %d/%d)\n derived %s %s",
			ErrDivergence, sd.seq, want.cause, want.n, want.of, sd.subject, sd.data, cause, n, of, want.subject, want.body)
	}
	if err := checkChain(sd.seq, sd.header, want.chain, want.chained); err != nil {
		return err
	}
	s.pend = s.pend[1:]
	if len(s.pend) == 0 {
		s.resetArena()
	}
	s.decSeq = sd.seq
	s.acked, s.ackedChain, s.ackedCause = sd.seq, want.chain, cause
	s.c.appended.Store(sd.seq)
	return nil
}

// inputExists checks, before waiting for input cause, that the input
// stream holds it: a decision caused by an input that was never stored
// would otherwise keep the session waiting for ever.
func (s *session) inputExists(cause uint64) error {
	if cause <= s.inKnown {
		return nil
	}
	info, err := s.c.h.In.Info(s.ctx)
	if err != nil {
		return fmt.Errorf("coordinator: input stream info: %w", streams.Classify(err))
	}
	if info.State.LastSeq < cause {
		return fmt.Errorf("%w: a stored decision names input %d; the input stream ends at %d", ErrDivergence, cause, info.State.LastSeq)
	}
	s.inKnown = info.State.LastSeq
	return nil
}

// checkChain checks a stored decision's chain header against want, its
// chain value computed from the decisions before it: a value that differs
// (the log before it changed, or lost a decision) or, when required, none
// at all is a divergence.
func checkChain(seq uint64, h nats.Header, want events.Chain, required bool) error {
	v := h.Get(events.HeaderChain)
	if v == "" {
		if required {
			return fmt.Errorf("%w: decision %d carries no %s header (every decision at rules revision 2 does)", ErrDivergence, seq, events.HeaderChain)
		}
		return nil
	}
	got, ok := events.ParseChain(v)
	if !ok {
		return fmt.Errorf("%w: decision %d: unreadable %s header %q", ErrDivergence, seq, events.HeaderChain, v)
	}
	if got != want {
		return fmt.Errorf("%w: decision %d: the chain breaks: its %s header is %s, the decisions before it give %s (the log before it was changed or lost decisions)",
			ErrDivergence, seq, events.HeaderChain, got, want)
	}
	return nil
}

// standby follows the streams, verifying, until it holds leadership and has
// verified every decision stored at that moment.
func (s *session) standby() error {
	c := s.c
	try := time.NewTicker(max(c.cfg.LeaderTTL/10, 10*time.Millisecond))
	defer try.Stop()
	for {
		taken := time.Now()
		if s.acquire() {
			s.startRenewer(s.leaderRev, taken)
			break
		}
		select {
		case sd := <-s.out.ch:
			if err := s.verify(sd); err != nil {
				return err
			}
		case <-try.C:
			s.noteReaderErrs()
		case <-s.ctx.Done():
			return s.ctx.Err()
		}
	}
	info, err := c.h.Out.Info(s.ctx)
	if err != nil {
		return fmt.Errorf("coordinator: decision stream info: %w", streams.Classify(err))
	}
	// Catching up on a long log (a cold restart after a million inputs) can
	// take longer than the leadership entry lives: the renewer renews it
	// meanwhile, or the first renewal once live would find it gone and the
	// coordinator would resynchronise for ever.
	expiry := time.NewTimer(time.Until(s.validUntil))
	defer expiry.Stop()
	for s.decSeq < info.State.LastSeq {
		select {
		case sd := <-s.out.ch:
			if err := s.verify(sd); err != nil {
				return err
			}
			if c.cfg.caughtUp != nil {
				c.cfg.caughtUp()
			}
		case <-try.C:
			s.noteReaderErrs()
		case rep := <-s.leadershipReports():
			if err := s.renewed(rep); err != nil {
				return err
			}
			expiry.Reset(time.Until(s.validUntil))
		case now := <-expiry.C:
			if err := s.leaderExpired(now); err != nil {
				return err
			}
			expiry.Reset(time.Until(s.validUntil))
		case <-s.ctx.Done():
			return s.ctx.Err()
		}
	}
	s.out.stop()
	return nil
}

// noteReaderErrs puts a reader that cannot create its consumer (server
// permissions, a consumer limit, a stream that does not answer) in the
// coordinator's state: it is why it stays in standby.
func (s *session) noteReaderErrs() {
	for _, r := range []*reader{s.in, s.out} {
		if err := r.f.Err(); err != nil {
			s.c.setState(StateStandby, "cannot read the streams: "+err.Error())
		}
	}
}

// acquire tries to take the leadership entry.
func (s *session) acquire() bool {
	kv := s.c.h.Leader
	rev, err := kv.Create(s.ctx, leaderKey, []byte(s.c.cfg.ID))
	if errors.Is(err, jetstream.ErrKeyExists) {
		// A coordinator restarted under the same id takes its entry back at
		// once instead of waiting for it to expire. (Ids must be unique; the
		// decision stream's fence keeps even a duplicate id safe.)
		e, gerr := kv.Get(s.ctx, leaderKey)
		if gerr == nil && string(e.Value()) == s.c.cfg.ID {
			rev, err = kv.Update(s.ctx, leaderKey, []byte(s.c.cfg.ID), e.Revision())
		} else if gerr == nil {
			s.c.setState(StateStandby, "coordinator "+string(e.Value())+" holds leadership; following and verifying its decisions")
		}
	}
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) && s.ctx.Err() == nil {
			s.c.log.Debug("leadership not acquired", "err", err)
		}
		return false
	}
	s.leaderRev = rev
	return true
}

// stepDown drains what can be drained and releases the leadership entry so
// that a standby can take over at once.
func (s *session) stepDown() {
	c := s.c
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	select {
	case <-c.js.PublishAsyncComplete():
	case <-ctx.Done():
	}
	if s.app != nil {
		for len(s.app.units) > 0 && ctx.Err() == nil {
			select {
			case m := <-s.app.replies:
				if s.acknowledged(m) != nil {
					s.app.units = nil
				}
			case <-ctx.Done():
			}
		}
		s.app.close()
		s.app = nil
	}
	if s.leaderRev != 0 {
		_ = c.h.Leader.Delete(ctx, leaderKey, jetstream.LastRevision(s.leaderRev))
		s.leaderRev = 0
	}
}

// runLive is the live loop: one select over inputs, acknowledgements,
// ticks, leadership reports and expiry, snapshots and shutdown.
//
// Each turn of the loop (the work done between two selects) is timed, and
// its duration reported as the loop's pause (Metrics.LoopPause): for that
// long, no input was received.
func (s *session) runLive() error {
	c := s.c
	var err error
	if s.app, err = newAppender(c.cfg.Conn, c.cfg.Topology.DecisionStream(), c.cfg.MaxInflight, c.log); err != nil {
		return err
	}
	// Decisions of the last input that a crash left unstored come first.
	s.sentSeq = s.decSeq
	s.decSeq += uint64(len(s.pend))
	if err := s.flush(); err != nil {
		return err
	}
	s.tickSubj = c.cfg.Topology.Partition.InputSubject(events.RoleCoord, c.cfg.ID, events.NoJob, events.VerbTick)
	if err := s.ensureRules(); err != nil {
		return err
	}
	c.live.Store(true)
	c.wentLive.Add(1)
	c.setState(StateLive, "")
	c.log.Info("live", "input_seq", s.p.LastSeq(), "decision_seq", s.decSeq)
	expiry := time.NewTimer(time.Until(s.validUntil))
	defer expiry.Stop()
	tick := time.NewTimer(time.Hour)
	defer tick.Stop()
	armedFor := int64(-1)
	snapTicker := time.NewTicker(max(c.cfg.SnapshotInterval/4, 100*time.Millisecond))
	defer snapTicker.Stop()
	overdue := time.NewTicker(time.Second)
	defer overdue.Stop()
	var headC <-chan time.Time // nil: no heads
	if c.cfg.HeadSigner != nil {
		t := time.NewTicker(c.cfg.HeadInterval)
		defer t.Stop()
		headC = t.C
	}
	// The snapshot writer lives as long as this live phase.
	s.snapCh = make(chan snapshot, 1)
	wctx, wcancel := context.WithCancel(s.ctx)
	var wg sync.WaitGroup
	defer func() { wcancel(); wg.Wait() }()
	wg.Add(1)
	go func() { defer wg.Done(); s.snapshotWriter(wctx) }()

	var woke time.Time // when the select last returned: the start of the turn
	for {
		// Arm the tick timer for the earliest deadline.
		if d, ok := s.p.NextDeadline(); ok && d != armedFor {
			armedFor = d
			tick.Reset(time.Until(time.Unix(0, d)) + c.cfg.TickSlack)
		}
		// Backpressure: past MaxInflight decisions not yet acknowledged,
		// read no more inputs until the stream catches up.
		inC := s.in.ch
		if s.decSeq-s.acked >= uint64(c.cfg.MaxInflight) {
			inC = nil
		}
		if !woke.IsZero() {
			s.paused(time.Since(woke))
		}
		select {
		case m := <-inC:
			woke = time.Now()
			if err := s.fold(m); err != nil {
				return err
			}
			// Fold what else has arrived, up to a batch, so that its
			// decisions leave together; for at most foldSlice, so that
			// leadership renewal, replies and ticks are served even when
			// every input is slow to decode (a flood of the largest bodies).
			sliceEnd := woke.Add(foldSlice)
		more:
			for len(s.pend) < max(c.cfg.AppendBatch, batchMin) && s.sentSeq-s.acked+uint64(len(s.pend)) < uint64(c.cfg.MaxInflight) && time.Now().Before(sliceEnd) {
				select {
				case m := <-s.in.ch:
					if err := s.fold(m); err != nil {
						return err
					}
				default:
					break more
				}
			}
			s.decSeq = s.sentSeq + uint64(len(s.pend))
			if err := s.flush(); err != nil {
				return err
			}
			if s.p.Due() && s.tickSent.IsZero() {
				// Deadlines the fold's per-input limit left due
				// (events.MaxFiredPerInput): the next tick at once.
				d, _ := s.p.NextDeadline()
				s.appendTick(d)
			}
			s.maybeSnapshot(false)
		case m := <-s.app.replies:
			woke = time.Now()
			if err := s.acknowledged(m); err != nil {
				return err
			}
			if err := s.flush(); err != nil {
				return err
			}
			s.maybeSnapshot(false)
		case <-overdue.C:
			woke = time.Now()
			if err := s.app.overdue(); err != nil {
				return err
			}
		case <-tick.C:
			woke = time.Now()
			armedFor = -1
			if d, ok := s.p.NextDeadline(); ok && d <= woke.UnixNano() {
				// A tick still in flight is retried with the backoff below
				// (its append may have been lost).
				s.appendTick(d)
				// Retry unless the tick's stored timestamp passes d, backing
				// off (20 ms doubling to 1 s) so that a stalled input reader
				// does not fill the append-only log with ticks.
				armedFor = d
				tick.Reset(min(20*time.Millisecond<<min(s.ticks, 6), time.Second))
			}
		case rep := <-s.leadershipReports():
			woke = time.Now()
			if err := s.renewed(rep); err != nil {
				return err
			}
			expiry.Reset(time.Until(s.validUntil))
			if c.cfg.yield != nil && c.cfg.yield(c) {
				return errYield
			}
		case <-expiry.C:
			woke = time.Now()
			if err := s.leaderExpired(woke); err != nil {
				return err
			}
			expiry.Reset(time.Until(s.validUntil))
		case <-snapTicker.C:
			woke = time.Now()
			s.maybeSnapshot(true)
		case snap := <-s.encoded:
			woke = time.Now()
			s.snapshotEncoded(snap)
		case now := <-headC:
			woke = time.Now()
			s.publishHead(now)
		case <-s.ctx.Done():
			return nil
		}
	}
}

// paused reports one turn of the live loop that took d.
func (s *session) paused(d time.Duration) {
	if mt := s.c.cfg.Metrics; mt != nil {
		mt.LoopPause(d)
	}
}

// flush publishes the decisions derived and not yet published: one by one
// while the stream stores single appends quickly, as atomic batches of up
// to AppendBatch when they are slow (every one fsynced, or replicated) and
// decisions queue up (see append.go).
func (s *session) flush() error {
	c := s.c
	a := s.app
	if len(s.pend) > 0 {
		// Never append as leader once the leadership could have expired,
		// however long this turn of the loop took to get here.
		if err := s.leaderExpired(time.Now()); err != nil {
			return err
		}
	}
	n := 0
	for n < len(s.pend) {
		left := len(s.pend) - n
		var k int
		switch {
		case c.cfg.AppendBatch > 1 && a.batching && left >= batchMin:
			if a.batches >= c.cfg.AppendBatches {
				break
			}
			k = min(left, c.cfg.AppendBatch)
		case len(a.units)-a.batches < a.maxSingles():
			k = 1
		}
		if k == 0 {
			break
		}
		if err := a.send(s.pend[n:n+k], s.sentSeq); err != nil {
			return err
		}
		s.sentSeq += uint64(k)
		n += k
	}
	if n > 0 {
		clear(s.pend[:n])
		s.pend = s.pend[n:] // a queue: appends reallocate once its capacity is used up
		if len(s.pend) == 0 {
			s.resetArena() // every body was copied out by the publishes
		}
	}
	return nil
}

// arenaChunk is the size of the chunks of the arena decision bodies are
// encoded into (perf: under a backlog, growing one arena copied every
// body queued, a tenth of the process's CPU in the pipeline benchmark).
const arenaChunk = 256 << 10

// resetArena lets the next bodies reuse the arena, once pend is empty.
func (s *session) resetArena() {
	if cap(s.arena) > 4<<20 {
		s.arena = nil // after a burst, do not keep it all
		return
	}
	s.arena = s.arena[:0]
}

// acknowledged applies the stream's reply to the oldest unit in flight.
func (s *session) acknowledged(m *nats.Msg) error {
	c := s.c
	u, err := s.app.reply(m, len(s.pend) >= batchMin)
	if errors.Is(err, errForged) {
		c.drops.drop("append reply", err)
		return nil
	}
	if err != nil {
		if errors.Is(err, streams.ErrLostAuthority) {
			c.lostAuth.Add(1)
			c.log.Error("lost authority: another writer appended to the decision stream; standing by", "decision_seq", u.first, "err", err)
		}
		return err
	}
	if mt := c.cfg.Metrics; mt != nil {
		lat := time.Since(u.sent)
		for range u.last - u.first + 1 {
			mt.DecisionAppended(lat)
		}
	}
	s.acked, s.ackedChain, s.ackedCause = u.last, u.chain, u.cause
	c.appended.Store(s.acked)
	c.folded.Store(u.cause)
	return nil
}

// appendTick appends a tick input for deadline d.
func (s *session) appendTick(d int64) {
	c := s.c
	if d == s.lastTickAt {
		s.ticks++
	} else {
		s.lastTickAt, s.ticks = d, 0
	}
	msg := &nats.Msg{Subject: s.tickSubj, Data: []byte(`{"v":1}`)}
	// An unpredictable id: a publisher that stored a tick's id first would
	// make the stream drop the tick as a duplicate, delaying the deadline.
	if _, err := c.js.PublishMsgAsync(msg, jetstream.WithMsgID(randomID("tick-"+c.cfg.ID))); err != nil {
		c.log.Warn("tick not appended", "err", err)
		return
	}
	s.tickSent = time.Now()
}
