package coordinator

// A session: one pass of standby then live from the stored snapshot (or the
// first input): reading both streams, folding, verifying the stored
// decisions and the decision chain.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// session is one pass of standby then live, from a fresh projector.
type session struct {
	core // the log as the session knows it: every change to it is a method of core (core.go)

	c    *Coordinator
	ctx  context.Context
	in   *reader
	out  *reader
	gate *gate // live: empties intake streams, reads the storage (intake.go); nil when none

	inKnown    uint64                 // the input stream is known to hold inputs up to this sequence
	app        *appender              // live: the appends in flight; Stats' InputsFolded then follows their acknowledgements
	leaderRev  uint64                 // the leadership entry's revision while no renewer runs (acquire, stepDown)
	renewer    *renewer               // renews the entry while the session holds it (leadership.go)
	tickFut    jetstream.PubAckFuture // the last tick's append
	markMu     sync.Mutex             // guards mark: read by the renewer (inputKept)
	mark       foldMark               // the last input folded
	reconnects uint64                 // Backend.Reconnects when the session began
	decMark    foldMark               // the last decision verified (standby), as its stream held it: the session's goroutine's

	snapWait *taken // taken, waiting for its decisions to be acknowledged
	snapCh   chan taken
	// The encoder (snapshot.go): frozen states go to it, encoded
	// snapshots come back to the live loop.
	enc      chan encodeJob
	encoded  chan *taken
	encoding bool // a snapshot handed to the encoder, not back yet
}

type pending struct {
	subject string
	n, of   uint32
	cause   uint64
	body    []byte
	seq     uint64       // its decision sequence
	src     uint64       // the sourced input's intake sequence, on decisions addressed to its worker (0: none)
	chain   events.Chain // its chain value
	chained bool         // derived at rules revision 2 or later: the stored decision must carry its chain value
	trace   string       // the traceparent header it carries ("": none; traces.go)
}

func (c *Coordinator) session(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.sessions.Add(1)
	if st := c.currentState(); st.name == StateStarting || st.name == StateLive {
		c.setState(StateStandby, "verifying the stored decisions before taking leadership")
	}
	s := &session{core: newCore(c.cfg.Topology), c: c, ctx: ctx, reconnects: c.be.Reconnects()}
	s.pol = policy{leaderTTL: c.cfg.LeaderTTL, snapshotEvery: c.cfg.SnapshotEvery, snapshotInterval: c.cfg.SnapshotInterval, headInterval: c.cfg.HeadInterval}
	s.snapAt = c.clk.Now().UnixNano()
	s.loadSnapshot() // may start the readers (perf: reading overlaps the restore)
	if c.cfg.SnapshotEvery >= 0 {
		// Snapshots are encoded off the loop (snapshot.go): from the state
		// restored, or the empty one, every change is tracked.
		s.p.Track()
		ectx, ecancel := context.WithCancel(ctx)
		var ewg sync.WaitGroup
		defer func() { ecancel(); ewg.Wait() }()
		s.enc, s.encoded = make(chan encodeJob, 1), make(chan *taken, 1)
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
		return s.unlessInputsLost(err)
	}
	err := s.unlessInputsLost(s.runLive())
	// Not live from the moment the loop stops appending: stepping down
	// (draining appends, releasing the entry) can take seconds, and
	// Stats must not say live meanwhile (TestModelStuckRenewal).
	if c.live.Swap(false) && err != nil {
		c.setState(StateStandby, "stepping down after: "+err.Error())
	}
	s.stopRenewer()
	s.stepDown()
	return err
}

// startReaders starts the input and decision readers at these sequences
// (both or neither).
func (s *session) startReaders(inFrom, outFrom uint64) error {
	c := s.c
	in := startReader(s.ctx, c.be, true, inFrom, 4096)
	out := startReader(s.ctx, c.be, false, outFrom, 4096)
	s.in, s.out = in, out
	return nil
}

func (c *Coordinator) setSnapshot(seq uint64, at time.Time) {
	c.snapMu.Lock()
	c.snapInputSeq, c.snapAt = seq, at
	c.snapMu.Unlock()
}

// fold folds input m (core.fold) and does what follows for the loop: the
// gate, the snapshot anchor, the tick, the metrics.
func (s *session) fold(m stored) error {
	if m.seq != s.p.LastSeq()+1 {
		if err := s.removed(true, s.p.LastSeq()+1); err != nil {
			return err
		}
	}
	f, err := s.core.fold(m)
	if err != nil {
		return err
	}
	s.markFolded(m)
	if s.app != nil {
		// Live: the live gate may empty the input from its worker's intake
		// stream (quotas, PROTOCOL.md §4.2).
		if g := s.gate; g != nil && f.src > 0 {
			g.folded(f.worker, f.src, int64(len(m.subject)+len(m.data)+64))
		}
		s.anchored(f.ds, f.first)
	} else {
		// Live, an input counts as folded once its decisions are stored
		// (acknowledged), so that Stats never shows an input folded whose
		// decisions are not in the stream yet.
		s.c.folded.Store(m.seq)
	}
	s.c.jobs.Store(int64(s.p.Len()))
	s.compact()
	if mt := s.c.cfg.Metrics; mt != nil {
		mt.InputFolded(m.seq, time.Unix(0, m.time), len(f.ds))
		if cu, ok := mt.(CatchUpMetrics); ok && m.pending == 0 {
			cu.CaughtUp(m.seq)
		}
	}
	return nil
}

// removed returns an ErrLogRemoved when want, the sequence the session
// needs next from the input (or decision) stream, is before the first one st holds because a
// segment was removed (st is a stream created for log retention), nil
// otherwise (then the hole is the caller's finding). It reads the stream's
// info: only on this rare path.
func (s *session) removed(input bool, want uint64) error {
	what := "decision"
	if input {
		what = "input"
	}
	info, err := s.c.be.Info(s.ctx, input)
	if err != nil {
		return fmt.Errorf("coordinator: %s stream info: %w", what, streams.Classify(err))
	}
	if streams.Retained(info.Config) && info.State.FirstSeq > want {
		return fmt.Errorf("%w: the session needs %s %d, the stream starts at %d", ErrLogRemoved, what, want, info.State.FirstSeq)
	}
	return nil
}

// verify matches one stored decision against the fold (core.match),
// reading the inputs it needs.
func (s *session) verify(sd stored) error {
	if sd.seq != s.decSeq+1 {
		if err := s.removed(false, s.decSeq+1); err != nil {
			return err
		}
	}
	for {
		need, err := s.match(sd)
		if err != nil {
			return err
		}
		if need == 0 {
			break
		}
		var m stored
		select {
		case m = <-s.in.ch:
		default:
			// The decision names an input not read yet: one that exists,
			// or the session would wait for ever.
			if err := s.inputExists(sd.seq, need); err != nil {
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
	s.c.appended.Store(sd.seq)
	s.decMark = foldMark{seq: sd.seq, time: sd.time, subject: sd.subject, data: sd.data}
	return nil
}

// inputExists checks, before waiting for input cause, that the input
// stream holds it: a decision caused by an input that was never stored
// would otherwise keep the session waiting for ever.
func (s *session) inputExists(seq, cause uint64) error {
	if cause <= s.inKnown {
		return nil
	}
	info, err := s.c.be.Info(s.ctx, true)
	if err != nil {
		return fmt.Errorf("coordinator: input stream info: %w", streams.Classify(err))
	}
	if info.State.LastSeq < cause {
		return fmt.Errorf("%w: decision %d names input %d; the input stream ends at %d", ErrDivergence, seq, cause, info.State.LastSeq)
	}
	s.inKnown = info.State.LastSeq
	return nil
}
