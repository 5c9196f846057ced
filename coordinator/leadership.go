package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/streams"
)

// Leadership renewal runs off the loop. Once a session holds the leadership
// entry, a renewer goroutine owned by the session extends it by
// compare-and-set every third of the TTL and reports each outcome into the
// session's loop: a blocking KV call (slow, or stuck on a partitioned
// server) never stops the loop from folding and appending.
//
// The loop does not trust the goroutine to report in time. Its core keeps
// validUntil (corepolicy.go), the start of the last renewal that
// succeeded plus the TTL minus a safety margin: the entry cannot have
// expired before then, since the server counts its TTL from a moment after
// that start. When validUntil passes without a fresh report, the loop
// leaves live as for a failed renewal, whatever the goroutine is doing.

// errRenewalOverdue is why a loop whose leadership could have expired stops
// acting as leader: no renewal was confirmed in time.
var errRenewalOverdue = errors.New("no renewal confirmed within the leadership lifetime")

// leaderMargin is the part of the TTL the loop does not count on: for the
// server's and this process's clocks to differ in rate, and for the
// decisions already published to land. A renewal that takes until its
// timeout (a third of the TTL) is reported before validUntil passes.
func leaderMargin(ttl time.Duration) time.Duration { return ttl / 6 }

// leaderReport is one renewal's outcome, as reported to the loop.
type leaderReport struct {
	started time.Time // when the renewal was started
	rev     uint64    // the entry's new revision (success)
	err     error     // not nil: the renewal failed, leadership is lost
	lost    error     // not nil: the input stream lost inputs the session folded (inputKept)
}

// renewer is the goroutine renewing a session's leadership entry.
type renewer struct {
	reports chan leaderReport // the latest report not yet taken by the loop (capacity 1)
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	rev     uint64 // the last revision the renewer holds; read after wg.Wait
}

// startRenewer starts renewing the entry at revision rev, taken at time
// taken (leadership then lasts until the core's validUntil, corepolicy.go).
func (s *session) startRenewer(rev uint64, taken time.Time) {
	s.leaderTaken(taken.UnixNano())
	ctx, cancel := context.WithCancel(s.ctx)
	r := &renewer{reports: make(chan leaderReport, 1), cancel: cancel, rev: rev}
	s.renewer = r
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		s.renewLoop(ctx, r)
	}()
}

// stopRenewer stops the renewer and waits for it to exit; the session then
// holds the entry at the last revision the renewer obtained (0: lost).
func (s *session) stopRenewer() {
	r := s.renewer
	if r == nil {
		return
	}
	r.cancel()
	r.wg.Wait()
	s.renewer = nil
	s.leaderRev = r.rev
}

// renewLoop renews every third of the TTL until ctx ends or the
// leadership is lost for certain. Each attempt is bounded by a third of the
// TTL too; an attempt whose outcome is unknown is tried again at once
// (renewOnce), and the loop's validUntil, not the renewer, ends the
// leadership if no renewal is confirmed in time: a KV reply that is late
// under load (an expiry storm on two loaded cores) no longer ends a live
// session that still holds the entry.
func (s *session) renewLoop(ctx context.Context, r *renewer) {
	c := s.c
	period := max(c.cfg.LeaderTTL/3, 10*time.Millisecond)
	timeout := max(c.cfg.LeaderTTL/3, 50*time.Millisecond)
	t := c.clk.NewTicker(period)
	defer t.Stop()
	var lost error // the input stream lost inputs the session folded (sticky)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		started := c.clk.Now()
		rev, err := renewOnce(ctx, c.be.Leader(), c.cfg.ID, r.rev, timeout)
		for errors.Is(err, errRenewalUnknown) && ctx.Err() == nil {
			c.log.Warn("leadership renewal unconfirmed, trying again", "err", err)
			if !c.sleep(ctx, 20*time.Millisecond) {
				return
			}
			rev, err = renewOnce(ctx, c.be.Leader(), c.cfg.ID, r.rev, timeout)
		}
		if ctx.Err() != nil {
			return // stopped: the outcome of a cancelled renewal is nobody's concern
		}
		if err != nil {
			r.rev = 0
			r.send(leaderReport{started: started, err: err})
			return
		}
		r.rev = rev
		// The renewal is reported before the input stream is checked
		// (inputKept, another request): the loop's validUntil counts
		// from started, and a slow check on a loaded server made the
		// report late enough to end a session that held the entry
		// (cmd/tenure's expiry storm, on two cores loaded by another
		// suite). A loss found is reported next, and in every report
		// after it, so that no later success replaces it untaken.
		r.send(leaderReport{started: started, rev: rev, lost: lost})
		if lost == nil {
			if lost = s.inputKept(ctx, timeout, false); lost != nil && ctx.Err() == nil {
				r.send(leaderReport{started: started, rev: rev, lost: lost})
			}
		}
	}
}

// send hands rep to the loop without waiting for it: a report the loop
// has not taken yet is replaced by this newer one (the renewer is the
// only sender).
func (r *renewer) send(rep leaderReport) {
	for {
		select {
		case r.reports <- rep:
			return
		default:
			select {
			case <-r.reports:
			default:
			}
		}
	}
}

// errRenewalUnknown is a renewal whose outcome is not known: its update
// failed without saying whether it was applied, and the entry could not be
// read back.
var errRenewalUnknown = errors.New("leadership renewal: outcome unknown")

// renewOnce extends the leadership entry that coordinator id holds at
// revision held, and returns its new revision. An update may fail without
// telling whether it was applied (its reply late or lost: a timeout, a
// connection dropped), and one applied that way makes the next fail for a
// wrong revision; so after any failure the entry is read back. If it names
// id at a later revision, an update of id's was applied: that is the
// revision now held. If it names id at revision held, none was: unknown, to
// try again. If it names another coordinator or is gone, the leadership is
// lost. If it cannot be read either, errRenewalUnknown. Each request takes
// at most timeout.
func renewOnce(ctx context.Context, kv LeaderStore, id string, held uint64, timeout time.Duration) (uint64, error) {
	uctx, cancel := context.WithTimeout(ctx, timeout)
	rev, err := kv.Update(uctx, leaderKey, []byte(id), held)
	cancel()
	if err == nil || ctx.Err() != nil {
		return rev, err
	}
	gctx, cancel := context.WithTimeout(ctx, timeout)
	val, rev, gerr := kv.Get(gctx, leaderKey)
	cancel()
	switch {
	case errors.Is(gerr, jetstream.ErrKeyNotFound) || errors.Is(gerr, jetstream.ErrKeyDeleted):
		return 0, fmt.Errorf("%w (the entry is gone)", err)
	case gerr != nil:
		return 0, fmt.Errorf("%w: %w (and reading it back: %w)", errRenewalUnknown, err, gerr)
	case string(val) != id:
		return 0, fmt.Errorf("%w (the entry names %q)", err, val)
	case rev > held:
		return rev, nil
	}
	return 0, fmt.Errorf("%w: %w", errRenewalUnknown, err)
}

// leadershipReports is the channel of the renewer's reports (nil: none).
func (s *session) leadershipReports() <-chan leaderReport {
	if s.renewer == nil {
		return nil
	}
	return s.renewer.reports
}

// renewed applies a renewer's report: a failure is the loss of leadership;
// a success moves validUntil.
func (s *session) renewed(rep leaderReport) error {
	if rep.err != nil {
		return fmt.Errorf("coordinator: leadership lost: %w", rep.err)
	}
	if rep.lost != nil {
		return rep.lost
	}
	s.leaderRenewed(rep.started.UnixNano())
	return nil
}

// leaderExpired is the loss of leadership once validUntil has passed
// without a report that moves it.
func (s *session) leaderExpired(now time.Time) error {
	if s.leaderValid(now.UnixNano()) {
		return nil
	}
	// A report may be waiting: the turn of the loop that calls this was
	// long, or its select took the expiry timer rather than the report
	// that came at the same time.
	select {
	case rep := <-s.leadershipReports():
		if err := s.renewed(rep); err != nil {
			return err
		}
		if s.leaderValid(now.UnixNano()) {
			return nil
		}
	default:
	}
	return fmt.Errorf("coordinator: leadership lost: %w (valid until %s, now %s)",
		errRenewalOverdue, s.leaderValidUntil().Format("15:04:05.000"), now.Format("15:04:05.000"))
}

// errInputsLost is why a session ends when the input stream holds fewer
// inputs than it has folded: the server lost messages it had
// acknowledged (a machine that crashed before its file store synced
// them: --sync interval; PROTOCOL.md §2, "A server that loses its tail").
// Its readers wait past the stream's new end, and the inputs stored at
// the sequences lost would never reach them; the next session reads the
// streams again from what they hold, and either goes live on a log that
// still folds or refuses one that no longer does (ErrDivergence: a
// decision names an input lost).
var errInputsLost = errors.New("the input stream lost inputs this coordinator had folded")

// foldMark is the last input a session folded, as its stream held it.
type foldMark struct {
	seq     uint64
	time    int64
	subject string
	data    []byte // (the reader's: never changed)
}

// markFolded records m as the last input folded (fold).
func (s *session) markFolded(m stored) {
	s.markMu.Lock()
	s.mark = foldMark{seq: m.seq, time: m.time, subject: m.subject, data: m.data}
	s.markMu.Unlock()
}

// inputKept checks, every renewal and before going live, that the input
// stream still holds the last input the session folded, as it read it:
// a stream that ends before it, or holds another message at its
// sequence (the sequences lost are used again by the next inputs
// stored), lost it. A request that fails says nothing (the next renewal
// asks again), unless strict (before going live): then its error.
//
// Checking the last input alone misses a loss the stream has already
// made up for: a session whose reader had read inputs a crash lost reads
// on past the stream's new end, skipping what is stored at the sequences
// lost, and the last input it folded is then one stored after the crash
// (sim seed 188 with lost tails: inputs 9 and 10 lost, 11 to 15 folded
// before the next check, which found 15 as read); and its readers may
// hold inputs read before the crash, not folded yet (seed 137). A crash
// breaks every connection to the server: on a stream of one replica
// (whose tail a crash can lose), a connection established again since
// the session began (Backend.Reconnects) makes the session read the
// streams again, with readers that read only what the restarted server
// holds.
func (s *session) inputKept(ctx context.Context, timeout time.Duration, strict bool) error {
	if s.reconnected() {
		return fmt.Errorf("coordinator: %w: the connection to the server was established again (a server that restarted may have lost its unsynced tail); reading the streams again", errInputsLost)
	}
	s.markMu.Lock()
	mk := s.mark
	s.markMu.Unlock()
	if mk.seq == 0 {
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := s.c.be.Inputs().GetMsg(ictx, mk.seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		// Gone: lost, unless a retention removed it (the stream then goes
		// on past it).
		info, ierr := s.c.be.Info(ictx, true)
		if ierr != nil && strict {
			return fmt.Errorf("coordinator: input stream info: %w", streams.Classify(ierr))
		}
		if ierr != nil || info.State.LastSeq >= mk.seq {
			return nil
		}
		return fmt.Errorf("coordinator: %w: the stream ends at input %d, the session folded input %d (a server that lost its unsynced tail in a crash); reading the streams again", errInputsLost, info.State.LastSeq, mk.seq)
	case err != nil && strict:
		return fmt.Errorf("coordinator: input %d: %w", mk.seq, streams.Classify(err))
	case err != nil:
		return nil
	case m.Time.UnixNano() != mk.time || m.Subject != mk.subject || !bytes.Equal(m.Data, mk.data):
		return fmt.Errorf("coordinator: %w: input %d is another message than the one the session folded (a server that lost its unsynced tail in a crash stores the next inputs at the sequences lost); reading the streams again", errInputsLost, mk.seq)
	}
	return nil
}

// reconnected reports whether the connection was established again since
// the session began, on a deployment whose input stream has one replica
// (a replicated stream keeps what a quorum acknowledged across a
// node's restart).
func (s *session) reconnected() bool {
	if info := s.c.be.SetupInfo(); info != nil && info.Config.Replicas > 1 {
		return false
	}
	return s.c.be.Reconnects() != s.reconnects
}

// unlessInputsLost returns err, a session's refusal of the log
// (ErrDivergence, ErrInputGap), unless the session's own reading of the
// input stream is what the server lost: a standby that read inputs a
// crash then lost finds the decisions of the inputs stored at their
// sequences since diverge from its fold; the log may be whole, and the
// next session, reading it again, judges it.
//
// The same holds of its reading of the decision stream: a standby that
// read decisions a crash then lost reads, past the stream's new end, the
// decisions stored since at later sequences, whose chain values follow
// the decisions stored at the sequences lost, not the ones it read
// (sim seeds 107 and 177 with lost tails): the chain seems to break.
func (s *session) unlessInputsLost(err error) error {
	if !errors.Is(err, ErrDivergence) && !errors.Is(err, ErrInputGap) {
		return err
	}
	timeout := max(s.c.cfg.LeaderTTL/3, 50*time.Millisecond)
	if lerr := s.inputKept(s.ctx, timeout, false); lerr != nil {
		return fmt.Errorf("%w (what the session found: %v)", lerr, err)
	}
	if lerr := s.decisionKept(s.ctx, timeout); lerr != nil {
		return fmt.Errorf("%w (what the session found: %v)", lerr, err)
	}
	return err
}

// errDecisionsLost: the decision stream no longer holds a decision the
// session read (a server that lost its unsynced tail in a crash).
var errDecisionsLost = errors.New("the decision stream lost decisions this coordinator had read")

// decisionKept checks that the decision stream still holds the last
// decision the session verified, as it read it (inputKept's check of
// the other stream). A request that fails says nothing.
func (s *session) decisionKept(ctx context.Context, timeout time.Duration) error {
	mk := s.decMark
	if mk.seq == 0 {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := s.c.be.Decisions().GetMsg(dctx, mk.seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		info, ierr := s.c.be.Info(dctx, false)
		if ierr != nil || info.State.LastSeq >= mk.seq {
			return nil
		}
		return fmt.Errorf("coordinator: %w: the stream ends at decision %d, the session read decision %d (a server that lost its unsynced tail in a crash); reading the streams again", errDecisionsLost, info.State.LastSeq, mk.seq)
	case err != nil:
		return nil
	case m.Time.UnixNano() != mk.time || m.Subject != mk.subject || !bytes.Equal(m.Data, mk.data):
		return fmt.Errorf("coordinator: %w: decision %d is another message than the one the session read (a server that lost its unsynced tail in a crash stores the next decisions at the sequences lost); reading the streams again", errDecisionsLost, mk.seq)
	}
	return nil
}
