package coordinator

// The live phase: the loop that folds, appends (pipelined and fenced), ticks
// and snapshots.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// foldSlice bounds the time the live loop folds inputs before it serves its
// other cases (append replies, ticks, leadership reports): it bounds the
// loop's turns under a flood, so it is kept well below the 50 ms a turn
// should not exceed (leadership renewal runs off the loop).
const foldSlice = 20 * time.Millisecond

// errYield ends a live session whose partition is handed to another process.
var errYield = errors.New("coordinator: partition handed over")

// runLive is the live loop: one select over inputs, acknowledgements,
// ticks, leadership reports and expiry, snapshots and shutdown.
//
// Each turn of the loop (the work done between two selects) is timed, and
// its duration reported as the loop's pause (Metrics.LoopPause): for that
// long, no input was received.
func (s *session) runLive() error {
	c := s.c
	var err error
	if s.app, err = newAppender(c.be, c.cfg.Topology.DecisionStream(), c.cfg.MaxInflight, c.cfg.AppendMode, c.log, c.clk); err != nil {
		return err
	}
	// Decisions of the last input that a crash left unstored come first.
	s.goLive(c.cfg.Topology.Partition.InputSubject(events.RoleCoord, c.cfg.ID, events.NoJob, events.VerbTick))
	if err := s.flush(); err != nil {
		return err
	}
	if err := s.ensureRules(); err != nil {
		return err
	}
	// The watch of the streams' configuration lives as long as this live
	// phase: from here on, a change less safe than the topology is found
	// at once (an advisory) or within StreamCheckInterval.
	w, err := s.startWatch()
	if err != nil {
		return err
	}
	defer w.stop()
	if err := s.awaitGenesis(w); err != nil {
		return err
	}
	c.live.Store(true)
	c.wentLive.Add(1)
	c.setState(StateLive, "")
	c.log.Info("live", "input_seq", s.p.LastSeq(), "decision_seq", s.decSeq)
	clk := c.clk
	expiry := clk.NewTimer(clock.Until(clk, s.leaderValidUntil()))
	defer expiry.Stop()
	tick := clk.NewTimer(time.Hour)
	defer tick.Stop()
	armedFor := int64(-1)
	snapTicker := clk.NewTicker(max(c.cfg.SnapshotInterval/4, 100*time.Millisecond))
	defer snapTicker.Stop()
	overdue := clk.NewTicker(time.Second)
	defer overdue.Stop()
	var headC <-chan time.Time // nil: no heads
	if c.cfg.HeadSigner != nil {
		t := clk.NewTicker(c.cfg.HeadInterval)
		defer t.Stop()
		headC = t.C()
	}
	// The snapshot writer lives as long as this live phase.
	s.snapCh = make(chan taken, 1)
	wctx, wcancel := context.WithCancel(s.ctx)
	var wg sync.WaitGroup
	defer func() { wcancel(); wg.Wait() }()
	wg.Add(1)
	go func() { defer wg.Done(); s.snapshotWriter(wctx) }()
	// The intake gate too (quotas and storage headroom, intake.go).
	if s.gate, err = s.newGate(); err != nil {
		return err
	}
	if g := s.gate; g != nil {
		c.gate.Store(g)
		defer c.gate.CompareAndSwap(g, nil)
		wg.Add(1)
		go func() { defer wg.Done(); g.run(wctx) }()
	}

	var woke time.Time // when the select last returned: the start of the turn
	for {
		if err := s.check(); err != nil {
			return err
		}
		// Arm the tick timer for the earliest deadline.
		if d, ok := s.p.NextDeadline(); ok && d != armedFor {
			armedFor = d
			tick.Reset(clock.Until(clk, time.Unix(0, d)) + c.cfg.TickSlack)
		}
		// Backpressure: past MaxInflight decisions not yet acknowledged,
		// read no more inputs until the stream catches up.
		inC := s.in.ch
		if s.inflight() >= uint64(c.cfg.MaxInflight) {
			inC = nil
		}
		if !woke.IsZero() {
			s.paused(clock.Since(clk, woke))
		}
		select {
		case m := <-inC:
			woke = clk.Now()
			if err := s.fold(m); err != nil {
				return err
			}
			// Fold what else has arrived, up to a batch, so that its
			// decisions leave together; for at most foldSlice, so that
			// leadership renewal, replies and ticks are served even when
			// every input is slow to decode (a flood of the largest bodies).
			sliceEnd := woke.Add(foldSlice)
		more:
			for len(s.pend) < max(c.cfg.AppendBatch, batchMin) && s.inflight() < uint64(c.cfg.MaxInflight) && clk.Now().Before(sliceEnd) {
				select {
				case m := <-s.in.ch:
					if err := s.fold(m); err != nil {
						return err
					}
				default:
					break more
				}
			}
			if err := s.flush(); err != nil {
				return err
			}
			if s.p.Due() && s.tick.sentAt == 0 {
				// Deadlines the fold's per-input limit left due
				// (events.MaxFiredPerInput): the next tick at once.
				d, _ := s.p.NextDeadline()
				s.appendTick(d)
			}
			s.maybeSnapshot(false)
		case m := <-s.app.replies:
			woke = clk.Now()
			if err := s.acknowledged(m); err != nil {
				return err
			}
			if err := s.flush(); err != nil {
				return err
			}
			s.maybeSnapshot(false)
		case <-overdue.C():
			woke = clk.Now()
			if err := s.app.overdue(); err != nil {
				return err
			}
		case <-tick.C():
			woke = clk.Now()
			armedFor = -1
			s.tickAnswer()
			if d, ok := s.p.NextDeadline(); ok && d <= woke.UnixNano() {
				if d, ok := s.tickWanted(woke.UnixNano()); ok {
					s.appendTick(d)
				}
				armedFor = d
				tick.Reset(s.tickRetry())
			}
		case rep := <-s.leadershipReports():
			woke = clk.Now()
			if err := s.renewed(rep); err != nil {
				return err
			}
			expiry.Reset(clock.Until(clk, s.leaderValidUntil()))
			if c.cfg.yield != nil && c.cfg.yield(c) {
				return errYield
			}
		case <-expiry.C():
			woke = clk.Now()
			if err := s.leaderExpired(woke); err != nil {
				return err
			}
			expiry.Reset(clock.Until(clk, s.leaderValidUntil()))
		case <-snapTicker.C():
			woke = clk.Now()
			s.maybeSnapshot(true)
		case snap := <-s.encoded:
			woke = clk.Now()
			s.snapshotEncoded(snap)
		case now := <-headC:
			woke = clk.Now()
			s.publishHead(now)
		case err := <-w.found:
			return err
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
		if err := s.leaderExpired(c.clk.Now()); err != nil {
			return err
		}
	}
	for {
		pend := s.unsent()
		left := len(pend)
		var k int
		switch {
		case left == 0:
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
		if err := a.send(pend[:k], s.sentSeq); err != nil {
			return err
		}
		s.sent(k)
	}
	return nil
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
		lat := clock.Since(c.clk, u.sent)
		for range u.last - u.first + 1 {
			mt.DecisionAppended(lat)
		}
	}
	if err := s.ack(u.last, u.chain, u.cause); err != nil {
		return err
	}
	c.appended.Store(s.acked)
	c.folded.Store(u.cause)
	return nil
}

// appendTick appends a tick input for deadline d.
func (s *session) appendTick(d int64) {
	c := s.c
	msg := &nats.Msg{Subject: s.tick.subject, Data: []byte(`{"v":1}`)}
	// An unpredictable id: a publisher that stored a tick's id first would
	// make the stream drop the tick as a duplicate, delaying the deadline.
	f, err := c.be.PublishAsync(msg, randomID("tick-"+c.cfg.ID))
	if err != nil {
		c.log.Warn("tick not appended", "err", err)
		return
	}
	s.tickFut = f
	s.tickAppended(d, c.clk.Now().UnixNano())
}

// tickAnswer hands the core the stream's answer to the last tick's
// append, if it came.
func (s *session) tickAnswer() {
	if s.tick.sentAt == 0 || s.tick.stored {
		return
	}
	select {
	case <-s.tickFut.Ok():
		s.tickAnswered(true)
	case err := <-s.tickFut.Err():
		s.c.log.Warn("tick not appended", "err", err)
		s.tickAnswered(false)
	default:
	}
}
