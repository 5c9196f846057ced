package coordinator

// A session: one pass of standby then live from the stored snapshot (or the
// first input): reading both streams, folding, verifying the stored
// decisions and the decision chain.

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// session is one pass of standby then live, from a fresh projector.
type session struct {
	c     *Coordinator
	ctx   context.Context
	p     *projector.Projector
	in    *reader
	out   *reader
	pend  []pending // derived decisions not yet matched or appended
	arena []byte    // the bodies of pend, reset when pend empties
	gate  *gate     // live: empties intake streams, reads the storage (intake.go); nil when none

	// The decision chain (events.HeaderChain): head is the chain value of
	// decision headSeq, the last one derived (or, before any is, the last
	// one verified or restored).
	head    events.Chain
	headSeq uint64
	chainer *events.Chainer
	chk     events.ChainCheck // the stored decisions' chain headers, as the audit checks them

	decSeq     uint64                 // last decision sequence verified, or derived while live
	inKnown    uint64                 // the input stream is known to hold inputs up to this sequence
	sentSeq    uint64                 // live: last decision sequence published (decSeq - len(pend))
	acked      uint64                 // last decision sequence acknowledged
	app        *appender              // live: the appends in flight; Stats' InputsFolded then follows their acknowledgements
	leaderRev  uint64                 // the leadership entry's revision while no renewer runs (acquire, stepDown)
	renewer    *renewer               // renews the entry while the session holds it (leadership.go)
	validUntil time.Time              // the leadership cannot have expired before then
	lastTickAt int64                  // the deadline the last tick was appended for
	ticks      int                    // ticks appended for it
	tickSent   time.Time              // when the last tick was appended, zero once it is folded
	tickFut    jetstream.PubAckFuture // the last tick's append
	tickStored bool                   // the last tick's append was acknowledged
	tickSubj   string                 // the subject of this coordinator's ticks

	// Chain heads (heads.go): the chain value of decision acked and the
	// input it answers (the last head published is the Coordinator's).
	ackedChain events.Chain
	ackedCause uint64

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
	src     uint64       // the sourced input's intake sequence, on decisions addressed to its worker (0: none)
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
	s := &session{c: c, ctx: ctx, p: projector.NewPartition(c.cfg.Topology.Partition), snapTime: c.clk.Now()}
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
	// A worker's input sourced from its intake stream (quotas, PROTOCOL.md
	// §4.2): its verdicts name the intake sequence its PubAck gave, and
	// the live gate may empty it from the intake.
	var src uint64
	var worker string
	if w, ok := intakeActor(m.subject); ok && m.header != nil {
		if src = s.c.cfg.Topology.SourceSeq(m.header.Get(streams.HeaderStreamSource), w); src > 0 {
			worker = w
			if g := s.gate; g != nil && s.app != nil {
				g.folded(w, src, int64(len(m.subject)+len(m.data)+64))
			}
		}
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
		if src > 0 && d.Addressee == worker {
			pd.src = src
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
		if cu, ok := mt.(CatchUpMetrics); ok && m.pending == 0 {
			cu.CaughtUp(m.seq)
		}
	}
	return nil
}

// intakeActor returns the worker of an input subject of the worker role.
func intakeActor(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, events.InputPrefix+".worker.")
	if !ok {
		return "", false
	}
	w, _, ok := strings.Cut(rest, ".")
	return w, ok
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
	if err := s.chk.Check(sd.header.Get(events.HeaderChain), want.chain, want.chained); err != nil {
		return fmt.Errorf("%w: decision %d: %w", ErrDivergence, sd.seq, err)
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
	info, err := s.c.be.Info(s.ctx, true)
	if err != nil {
		return fmt.Errorf("coordinator: input stream info: %w", streams.Classify(err))
	}
	if info.State.LastSeq < cause {
		return fmt.Errorf("%w: a stored decision names input %d; the input stream ends at %d", ErrDivergence, cause, info.State.LastSeq)
	}
	s.inKnown = info.State.LastSeq
	return nil
}
