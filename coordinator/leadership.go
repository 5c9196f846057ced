package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Leadership renewal runs off the loop. Once a session holds the leadership
// entry, a renewer goroutine owned by the session extends it by
// compare-and-set every third of the TTL and reports each outcome into the
// session's loop: a blocking KV call (slow, or stuck on a partitioned
// server) never stops the loop from folding and appending.
//
// The loop does not trust the goroutine to report in time. It keeps
// validUntil, the start of the last renewal that succeeded plus the TTL
// minus a safety margin: the entry cannot have expired before then, since
// the server counts its TTL from a moment after that start. When validUntil
// passes without a fresh report, the loop leaves live as for a failed
// renewal, whatever the goroutine is doing.

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
}

// renewer is the goroutine renewing a session's leadership entry.
type renewer struct {
	reports chan leaderReport // the latest report not yet taken by the loop (capacity 1)
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	rev     uint64 // the last revision the renewer holds; read after wg.Wait
}

// startRenewer starts renewing the entry at revision rev, taken at time
// taken (leadership then lasts until validUntil).
func (s *session) startRenewer(rev uint64, taken time.Time) {
	c := s.c
	s.validUntil = taken.Add(c.cfg.LeaderTTL - leaderMargin(c.cfg.LeaderTTL))
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
		rep := leaderReport{started: started, rev: rev, err: err}
		if err != nil {
			r.rev = 0
		} else {
			r.rev = rev
		}
		// Never wait for the loop: a report it has not taken yet is
		// replaced by this newer one (this goroutine is the only sender).
		for sent := false; !sent; {
			select {
			case r.reports <- rep:
				sent = true
			default:
				select {
				case <-r.reports:
				default:
				}
			}
		}
		if err != nil {
			return
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
	ttl := s.c.cfg.LeaderTTL
	if v := rep.started.Add(ttl - leaderMargin(ttl)); v.After(s.validUntil) {
		s.validUntil = v
	}
	return nil
}

// leaderExpired is the loss of leadership once validUntil has passed
// without a report that moves it.
func (s *session) leaderExpired(now time.Time) error {
	if now.Before(s.validUntil) {
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
		if now.Before(s.validUntil) {
			return nil
		}
	default:
	}
	return fmt.Errorf("coordinator: leadership lost: %w (valid until %s, now %s)",
		errRenewalOverdue, s.validUntil.Format("15:04:05.000"), now.Format("15:04:05.000"))
}
