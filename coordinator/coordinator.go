// Package coordinator is Tenure's single-writer I/O loop around the pure
// fold: it consumes the input stream strictly in order, folds each input
// with the projector, and appends the decisions to the decision stream in
// order, each fenced with Nats-Expected-Last-Sequence and deduplicated by a
// deterministic Nats-Msg-Id.
//
// The loop's knowledge of the log lives in its core (core.go), which does
// no I/O and reads no clock: the fold, the decisions derived and not yet
// matched or sent, their sequences and chain values (checked with the
// audit's own events.ChainCheck), what the stream acknowledged, and the
// tick policy. The loop hands it each input and decision read, each
// append acknowledged and the time a timer fired, takes from it what to
// append, and checks its invariants after every turn (core.check); its
// tests (core_test.go, testdata/core) need no server.
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
// The streams' configuration: a live coordinator watches it (watch.go: the
// stream-updated advisories, and Config.StreamCheckInterval) and refuses,
// appending nothing more, once it is less safe than its start accepts. A
// brand-new input stream's genesis is ended by the coordinator itself or,
// with Config.Genesis GenesisAdmin, by an administrator (EndGenesis) while
// the coordinator waits (genesis.go).
//
// Signed chain heads: with Config.HeadSigner, the live coordinator publishes
// periodically, as core NATS messages on Topology.HeadSubject(), a signed
// head (package heads) of the last decision the stream acknowledged, so
// that auditors can keep the chain outside NATS (PROTOCOL.md §20.3). The
// fold knows nothing of it.
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/heads"
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
	// DefaultStreamCheckInterval is Config.StreamCheckInterval's default.
	DefaultStreamCheckInterval = 5 * time.Second
	leaderKey                  = "leader"
	snapshotName               = streams.SnapshotObject
)

// AppendMode is what a coordinator knows of how its decision stream stores
// messages, which decides how it appends under a backlog (append.go):
// atomic batches are one write (one fsync, one consensus proposal) for
// many decisions, but nats-server stages each batch of a one-replica file
// stream in a file store of its own, some milliseconds whatever the sync
// mode, so they win only when every message is fsynced or replicated.
type AppendMode uint8

const (
	// AppendMeasure, the default, compares both ways while a backlog
	// lasts and keeps the better (for a server whose durability the
	// coordinator cannot know: the client cannot ask how it syncs).
	AppendMeasure AppendMode = iota
	// AppendBatched appends in atomic batches whenever decisions queue up,
	// never trying one by one: for a stream that fsyncs every message
	// (sync_interval always) or is replicated.
	AppendBatched
	// AppendOneByOne never batches: for a one-replica stream of a server
	// that fsyncs on an interval, under loads where batches cost more than
	// they save (SDK workers renewing in bursts; not a queue's, for which
	// they save a fifth: BENCHMARKS.md). tenure serve leaves that to the
	// measurement.
	AppendOneByOne
)

// String is the mode's name: measure, batched or one-by-one.
func (m AppendMode) String() string {
	switch m {
	case AppendMeasure:
		return "measure"
	case AppendBatched:
		return "batched"
	case AppendOneByOne:
		return "one-by-one"
	}
	return "AppendMode(" + strconv.Itoa(int(m)) + ")"
}

// Config configures a coordinator.
type Config struct {
	// Storage headroom (intake.go, PROTOCOL.md §4.2). StorageLimit is
	// the bytes the deployment may store, for when its NATS account has
	// no JetStream limit of its own (tenure serve gives the embedded
	// server's store size); 0 with no account limit: no headroom is kept.
	// Below StorageReserve free bytes (0: twice the sum of the intake
	// streams' MaxBytes, plus 16 MiB) the coordinator empties no intake
	// stream, so that workers' inputs are refused once their intakes are
	// full and its own ticks and decisions keep the room that is left;
	// below StorageWarn (0: twice the reserve) it says so in Stats.Storage
	// and its log.
	StorageLimit, StorageReserve, StorageWarn int64

	ID               string           // identity: actor token of its tick and policy inputs
	Conn             *nats.Conn       // connection to the NATS server or cluster
	Topology         streams.Topology // stream and bucket names
	LeaderTTL        time.Duration    // leadership entry lifetime; renewed every third of it
	SnapshotEvery    int              // inputs between snapshots; negative disables snapshots
	SnapshotInterval time.Duration    // time between snapshots when inputs arrived
	MaxInflight      int              // decisions derived and not yet acknowledged; the loop stops reading inputs beyond
	AppendBatch      int              // most decisions per atomic batch append (at most 1000, the server's limit); negative: never batch
	AppendBatches    int              // atomic batches awaiting their reply
	// AppendMode says how the decision stream stores what it is sent, when
	// the process that configures the server knows (see AppendMode); the
	// default, AppendMeasure, finds out by measuring.
	AppendMode AppendMode
	TickSlack  time.Duration // how long after a deadline to append a tick
	Logger     *slog.Logger
	Metrics    Metrics // optional observer of folds and appends (nil: none); see PartitionMetrics for a Group
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
	// Genesis says who ends the genesis of a brand-new input stream
	// (PROTOCOL.md §1.1): GenesisSelf, the default, the coordinator
	// itself once its rules and policy are stored; GenesisAdmin, an
	// administrator (`tenure genesis`, EndGenesis), for a coordinator
	// whose credential may not update the stream (tenure auth init's).
	Genesis GenesisMode
	// GenesisCommand is what the status and the log of a coordinator
	// waiting for the end of genesis tell the operator to run (default
	// DefaultGenesisCommand); tenure serve names the administrator's
	// credential file when it finds it.
	GenesisCommand string
	// WatchConn is the connection of the subscriptions to the streams'
	// updated advisories ($JS.EVENT.ADVISORY.STREAM.UPDATED.<stream>,
	// watch.go). Any push consumer of the deployment's account can be
	// aimed at those subjects (a worker may create one delivering its own
	// decisions there), so give it a connection other than Conn: a flood
	// on it then cannot slow Conn's appends (nil: Conn).
	WatchConn *nats.Conn
	// StreamCheckInterval is how often the live coordinator reads its
	// streams' configuration again, whether or not an advisory came (they
	// can be missed): default DefaultStreamCheckInterval.
	StreamCheckInterval time.Duration
	// Backend is the coordinator's port to JetStream (backend.go): nil,
	// the default, is JetStream over Conn. The simulator (internal/sim)
	// sets a model of JetStream; Conn is then not used, and the features
	// that only JetStream has (the watch of the streams' configuration,
	// quotas' intake gate, genesis by the coordinator itself, signed heads)
	// are off.
	Backend Backend
	// Clock times everything the coordinator waits for (nil: the real
	// clock): the live loop's tick, leadership-expiry, snapshot, overdue
	// and head timers, the appender's timeouts, the leadership renewer,
	// the standby's retries and the pauses between sessions. The fold
	// reads no clock (it judges inputs by their stored timestamps), and
	// the timeouts of single requests are contexts on the real clock.
	// Tests set a clock.Fake.
	Clock clock.Clock

	// yield, set by Group, tells a live coordinator to hand its partition
	// to another process (it holds more than its share of the partitions).
	yield func(*Coordinator) bool
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
	if c.GenesisCommand == "" {
		c.GenesisCommand = DefaultGenesisCommand
	}
	if c.WatchConn == nil {
		c.WatchConn = c.Conn
	}
	if c.StreamCheckInterval == 0 {
		c.StreamCheckInterval = DefaultStreamCheckInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Coordinator runs the fold over JetStream. Create it with New, run it with Run.
type Coordinator struct {
	cfg Config
	clk clock.Clock // cfg.Clock, or the real clock
	log *slog.Logger
	be  Backend    // Config.Backend, or jsb
	jsb *jsBackend // JetStream over Config.Conn (nil: another Backend)

	folded       atomic.Uint64 // last input sequence folded
	jobs         atomic.Int64  // jobs in the projection after the last input folded
	appended     atomic.Uint64 // last decision sequence acknowledged by the stream
	live         atomic.Bool
	gate         atomic.Pointer[gate] // the live phase's intake gate (intake.go), nil when none
	lostAuth     atomic.Uint64        // appends refused for a wrong last sequence
	sessions     atomic.Uint64        // times the coordinator (re)synchronised
	snapRefused  atomic.Uint64        // stored snapshots refused (not anchored, or not what the anchor says)
	wentLive     atomic.Uint64        // sessions that went live
	drops        *dropCounter         // messages that reached its inboxes without being the server's answer to it
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
	// Storage is the live coordinator's view of storage and intake
	// streams (nil: not live, or neither quotas nor a storage limit).
	Storage *StorageStats `json:"storage,omitempty"`
}

// New checks the configuration.
func New(cfg Config) (*Coordinator, error) {
	cfg = cfg.withDefaults()
	if !events.ValidToken(cfg.ID) {
		return nil, fmt.Errorf("coordinator: invalid id %q: want 1 to %d of [A-Za-z0-9_-]", cfg.ID, events.MaxTokenLen)
	}
	if cfg.Conn == nil && cfg.Backend == nil {
		return nil, errors.New("coordinator: no NATS connection")
	}
	if cfg.Backend != nil && cfg.HeadSigner != nil {
		return nil, errors.New("coordinator: signed heads need JetStream (Config.Conn), not another Backend")
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
	if cfg.Genesis > GenesisAdmin {
		return nil, fmt.Errorf("coordinator: unknown genesis mode %v", cfg.Genesis)
	}
	if cfg.StreamCheckInterval < 0 {
		return nil, fmt.Errorf("coordinator: negative stream check interval %v", cfg.StreamCheckInterval)
	}
	if cfg.AppendMode > AppendOneByOne {
		return nil, fmt.Errorf("coordinator: unknown append mode %v", cfg.AppendMode)
	}
	if cfg.AppendMode == AppendBatched && cfg.AppendBatch < 0 {
		// Batched would hold singles to maxSinglesSlow and never batch.
		return nil, errors.New("coordinator: append mode batched with a negative AppendBatch (never batch)")
	}
	log := cfg.Logger.With("coordinator", cfg.ID)
	if cfg.Topology.Partition.Partitioned() {
		log = log.With("partition", cfg.Topology.Partition.Index)
	}
	clk := clock.OrReal(cfg.Clock)
	c := &Coordinator{cfg: cfg, clk: clk, log: log, drops: newDropCounter(log, clk.Now), be: cfg.Backend}
	if c.be == nil {
		js, err := jetstream.New(cfg.Conn,
			jetstream.WithPublishAsyncMaxPending(cfg.MaxInflight),
			jetstream.WithPublishAsyncTimeout(10*time.Second))
		if err != nil {
			return nil, fmt.Errorf("coordinator: jetstream: %w", err)
		}
		c.jsb = newJSBackend(c, cfg.Conn, js)
		c.be = c.jsb
	}
	return c, nil
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
		Storage: c.storage(),
	}
}

// storage is Stats.Storage: the live gate's view, if any.
func (c *Coordinator) storage() *StorageStats {
	if g := c.gate.Load(); g != nil && c.live.Load() {
		return g.Stats()
	}
	return nil
}

// Run creates the topology if needed and coordinates until ctx ends (nil),
// the stored decisions diverge from the fold (ErrDivergence), the input
// stream has a gap (ErrInputGap) or a stream's configuration changes, while
// live, into one its start would refuse (ErrStreamChanged, watch.go). Losing
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
		err := c.be.Setup(ctx)
		if err == nil {
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
		if !c.sleep(ctx, backoff) {
			return nil
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
		if errors.Is(err, ErrStreamChanged) {
			c.setState(StateRefused, refusal(err))
			c.log.Error("refusing to go on: a stream's configuration changed under the coordinator; it appends nothing more", "err", err, "what_to_do", Remedy(err))
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
		if !c.sleep(ctx, wait) {
			return nil
		}
		backoff = min(2*backoff, time.Second)
	}
}

// sleep waits d on the coordinator's clock; it reports false if ctx ended
// first.
func (c *Coordinator) sleep(ctx context.Context, d time.Duration) bool {
	t := c.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// logRemovedRetry is the wait between sessions that found the log removed
// before the state at hand (ErrLogRemoved): an operator restoring a
// snapshot is minutes away, not milliseconds.
const logRemovedRetry = 5 * time.Second
