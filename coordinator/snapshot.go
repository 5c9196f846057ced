package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/snapshot"
	"github.com/maknow/tenure/streams"
)

// Snapshots are checked, not trusted (PROTOCOL.md §19). The live
// coordinator, when a snapshot is due, freezes the projector's state after
// input S (projector.Freeze: constant time, whatever the number of jobs),
// and the session's encoder goroutine encodes it off the loop (from the
// previous snapshot and the jobs changed since) and takes its SHA-256 H
// (the hash of the canonical encoding, projector.StateHash); the loop then
// appends a checkpoint input claiming (S, H). The
// fold records the claim in a checkpointed decision, at decision sequence
// A of the fenced decision stream. Once A is acknowledged, the snapshot is
// stored with S, the sequence of the last decision of input S, A and H in
// its headers. A coordinator restoring it requires that decision A is a
// checkpointed decision claiming (S, H) and that the bytes it read hash to
// H; anything else (a snapshot rewritten with a valid CRC, one of an older
// Tenure without an anchor) is refused, with the reason logged, and the
// coordinator folds from the start. An auditor checks every claim against
// its own replay (package audit).

// Snapshot object headers (streams.HeaderSnapshotInput and the others).
const (
	headerSnapInput    = streams.HeaderSnapshotInput    // S: the last input the state covers
	headerSnapDecision = streams.HeaderSnapshotDecision // the last decision of input S
	headerSnapAnchor   = streams.HeaderSnapshotAnchor   // A: the checkpointed decision anchoring the hash
	headerSnapHash     = streams.HeaderSnapshotHash     // H: 64 hex digits
	headerSnapChain    = streams.HeaderSnapshotChain    // the chain value of the decision at headerSnapDecision
)

// checkpointTimeout bounds the wait for the checkpointed decision of a
// snapshot taken: if it does not come (the checkpoint input was lost), the
// snapshot is dropped and the next one is taken when due.
const checkpointTimeout = 30 * time.Second

// taken is a snapshot the session took: its position, then its state
// hash and bytes once encoded, then its anchor once its checkpointed
// decision is derived.
type taken struct {
	inputSeq, decSeq uint64
	anchorSeq        uint64 // 0 until the checkpointed decision is derived
	hash             [events.StateHashLen]byte
	chain            events.Chain // of decision decSeq
	data             []byte
	sent             time.Time // when the checkpoint input was appended
}

// loadSnapshot restores the latest snapshot if it checks out (package
// snapshot reads and checks it: its anchor, its bytes, its state);
// otherwise the session folds from the start.
func (s *session) loadSnapshot() {
	c := s.c
	if c.cfg.SnapshotEvery < 0 {
		return
	}
	rd := snapshot.Reader{
		Objects: c.be.Snapshots(), Decisions: c.be.Decisions(), Partition: c.cfg.Topology.Partition, Clock: c.clk,
		// perf: once its anchor checks out, the streams after the
		// snapshot are read (into the readers' buffers) while its bytes
		// are read and restored; if it does not restore, the readers are
		// stopped and the session starts them again from the start.
		Ahead: func(a streams.SnapshotAnchor) {
			s.stopReaders()
			if err := s.startReaders(a.InputSeq+1, a.DecisionSeq+1); err != nil {
				c.log.Debug("readers not started ahead of the snapshot", "err", err)
			}
		},
	}
	snap, err := rd.Read(s.ctx)
	if err != nil {
		s.stopReaders()
		switch {
		case s.ctx.Err() != nil, errors.Is(err, snapshot.ErrNone):
		case errors.Is(err, snapshot.ErrUnreadable), errors.Is(err, snapshot.ErrReplaced):
			// A check that could not be made (the decision stream or the
			// object store did not answer, every time the reader tried)
			// is no refusal.
			c.log.Warn("snapshot could not be read, folding from the start", "err", err)
		default:
			c.snapRefused.Add(1)
			c.log.Warn("snapshot refused, folding from the start", "err", fmt.Errorf("%w: %w", ErrSnapshotRefused, err))
		}
		return
	}
	pos := snap.Anchor
	s.restore(snap.State, pos)
	c.setSnapshot(pos.InputSeq, snap.Info.ModTime)
	c.log.Info("restored snapshot", "input_seq", pos.InputSeq, "decision_seq", pos.DecisionSeq, "anchor_seq", pos.AnchorSeq, "jobs", snap.State.Len())
}

// stopReaders stops the readers if they are started.
func (s *session) stopReaders() {
	if s.in != nil {
		s.in.stop()
		s.out.stop()
		s.in, s.out = nil, nil
	}
}

// ErrSnapshotRefused is the reason a stored snapshot is not restored: it is
// not anchored in the decision stream, not what its anchor says, or does
// not restore (package snapshot's ErrUnanchored, ErrMismatch, ErrCorrupt,
// ErrFormat). The coordinator then folds from the start (it is logged, not
// returned) and counts it (Stats.SnapshotsRefused).
var ErrSnapshotRefused = errors.New("coordinator: snapshot refused")

// maybeSnapshot takes a snapshot when one is due: it freezes the state (in
// time independent of the number of jobs: projector.Freeze) and hands it
// to the encoder; once encoded (snapshotEncoded) the checkpoint input
// anchoring its state hash is appended, and the snapshot goes to the
// writer once its checkpointed decision is acknowledged.
func (s *session) maybeSnapshot(timer bool) {
	c := s.c
	if !s.snapshotsOn() {
		return
	}
	if w := s.snapWait; w != nil && w.anchorSeq == 0 && clock.Since(s.c.clk, w.sent) > checkpointTimeout {
		c.log.Warn("no checkpointed decision for the snapshot taken; taking another when due", "input_seq", w.inputSeq)
		s.snapWait = nil
	}
	// The snapshot anchored hands over to the writer first, so that one
	// due is taken in the same turn (no later event may come to take it).
	if w := s.snapWait; w != nil && w.anchorSeq != 0 && s.acked >= w.anchorSeq {
		select {
		case s.snapCh <- *w:
		default:
			// The writer is busy and an older one waits for it: this one
			// replaces it (the loop is the only sender, so the send after
			// the drain cannot block). Dropping this one instead left the
			// stored snapshot behind until the next was due, for ever if
			// no input came.
			select {
			case <-s.snapCh:
			default:
			}
			s.snapCh <- *w
		}
		s.snapWait = nil
	}
	var now int64 // read only for the timer's case: this runs after every batch folded
	if timer {
		now = c.clk.Now().UnixNano()
	}
	if s.snapWait == nil && !s.encoding && len(s.enc) == 0 && s.snapshotDue(now, timer) {
		snap := &taken{inputSeq: s.p.LastSeq(), decSeq: s.decSeq, chain: s.head}
		s.enc <- encodeJob{f: s.p.Freeze(), snap: snap} // the loop is the only sender, and it was empty
		if c.cfg.snapshotTaken != nil {
			c.cfg.snapshotTaken()
		}
		s.encoding = true
		s.snapshotted(c.clk.Now().UnixNano())
	}
}

// snapshotEncoded takes a snapshot back from the encoder (nil: it could not
// be encoded) and appends its checkpoint input.
func (s *session) snapshotEncoded(snap *taken) {
	s.encoding = false
	if snap == nil {
		// The frozen states build on each other: start the tracking
		// again from the state now (one encoding of it, in the loop).
		s.p.Untrack()
		s.p.Track()
		return
	}
	snap.sent = s.c.clk.Now()
	if s.appendCheckpoint(snap) {
		s.snapWait = snap
	}
	s.maybeSnapshot(false)
}

// encodeJob is a frozen state for the encoder; snap, when not nil, is the
// snapshot it is for (its position), else the job only folds the changes
// into the base of the next ones (compact).
type encodeJob struct {
	f    *projector.Frozen
	snap *taken
}

// compactEvery is how many inputs a session folds, outside the live loop,
// between two freezes that only keep the changes tracked for the next
// snapshot few (a long catch-up would otherwise hold a copy of every job it
// touched); compactChanges is how many changed jobs, live or not, call for
// one (a storm changes every job between two snapshots).
const (
	compactEvery   = 50_000
	compactChanges = 1 << 18
)

// compact freezes the state for the encoder when enough inputs were folded
// since the last freeze outside the live loop (standby and catch-up; live,
// snapshots freeze often enough), or enough jobs changed, and the encoder
// is idle.
func (s *session) compact() {
	if s.enc == nil || s.encoding || len(s.enc) != 0 {
		return
	}
	if s.p.Changes() < compactChanges && (s.app != nil || s.sinceFreeze < compactEvery) {
		return
	}
	s.enc <- encodeJob{f: s.p.Freeze()}
	s.frozen()
}

// encoder encodes the frozen states handed to it, in order, off the loop,
// and hands each snapshot asked for back to the loop with its state hash.
func (s *session) encoder(ctx context.Context) {
	c := s.c
	for {
		var job encodeJob
		select {
		case <-ctx.Done():
			return
		case job = <-s.enc:
		}
		if job.snap != nil && c.cfg.encodingSnapshot != nil {
			c.cfg.encodingSnapshot(ctx)
		}
		start := s.c.clk.Now()
		data, err := job.f.Encode()
		if job.snap == nil {
			if err != nil {
				c.log.Error("snapshot base not encoded", "err", err)
			}
			continue
		}
		snap := job.snap
		if err != nil {
			c.log.Error("snapshot not encoded", "input_seq", snap.inputSeq, "err", err)
			snap = nil
		} else {
			snap.data, snap.hash = data, sha256.Sum256(data)
			took := clock.Since(s.c.clk, start)
			c.snapMu.Lock()
			c.snapEncode, c.snapBytes = took, len(data)
			c.snapMu.Unlock()
			c.log.Debug("snapshot encoded", "input_seq", snap.inputSeq, "bytes", len(data), "took", took)
		}
		select {
		case s.encoded <- snap:
		case <-ctx.Done():
			return
		}
	}
}

// appendCheckpoint appends the checkpoint input claiming snap's state hash.
func (s *session) appendCheckpoint(snap *taken) bool {
	c := s.c
	in := events.Input{Verb: events.VerbCheckpoint, CheckpointSeq: snap.inputSeq, StateHash: snap.hash}
	msg := &nats.Msg{
		Subject: c.cfg.Topology.Partition.InputSubject(events.RoleCoord, c.cfg.ID, events.NoJob, events.VerbCheckpoint),
		Data:    events.AppendInputBody(nil, &in),
	}
	if _, err := c.be.PublishAsync(msg, randomID("checkpoint-"+c.cfg.ID)); err != nil {
		c.log.Warn("checkpoint not appended", "input_seq", snap.inputSeq, "err", err)
		return false
	}
	return true
}

// anchored is called for each input folded live, with the decision
// sequence its first decision gets: if it is the checkpoint of the
// snapshot waiting, the snapshot learns its anchor.
func (s *session) anchored(ds []events.Decision, first uint64) {
	w := s.snapWait
	if w == nil || w.anchorSeq != 0 {
		return
	}
	for i := range ds {
		d := &ds[i]
		if d.Kind == events.KindCheckpointed && d.Actor == s.c.cfg.ID && d.Checkpoint.InputSeq == w.inputSeq && d.Checkpoint.StateHash == w.hash {
			w.anchorSeq = first + uint64(i)
			return
		}
	}
}

// snapshotWriter stores snapshots handed over by the live loop.
func (s *session) snapshotWriter(ctx context.Context) {
	c := s.c
	for {
		select {
		case <-ctx.Done():
			return
		case snap := <-s.snapCh:
			if s.reconnected() {
				// The server may have restarted and lost inputs this
				// state folded (inputKept): a snapshot of it would let
				// the next session start past the loss, unseen. The
				// session reads the streams again at its next check.
				c.log.Info("snapshot not stored: the connection was established again since the session began", "input_seq", snap.inputSeq)
				continue
			}
			h := nats.Header{}
			h.Set(headerSnapInput, strconv.FormatUint(snap.inputSeq, 10))
			h.Set(headerSnapDecision, strconv.FormatUint(snap.decSeq, 10))
			h.Set(headerSnapAnchor, strconv.FormatUint(snap.anchorSeq, 10))
			h.Set(headerSnapHash, hex.EncodeToString(snap.hash[:]))
			h.Set(headerSnapChain, snap.chain.String())
			if err := c.be.Snapshots().Put(ctx, h, snap.data); err != nil {
				if ctx.Err() == nil {
					c.log.Warn("snapshot not stored", "input_seq", snap.inputSeq, "err", err)
				}
				continue
			}
			c.setSnapshot(snap.inputSeq, c.clk.Now())
			c.log.Debug("snapshot stored", "input_seq", snap.inputSeq, "anchor_seq", snap.anchorSeq, "bytes", len(snap.data))
		}
	}
}
