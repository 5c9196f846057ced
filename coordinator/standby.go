package coordinator

// The standby phase: following and verifying the streams until leadership is
// held, and giving it up.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/streams"
)

// standby follows the streams, verifying, until it holds leadership and has
// verified every decision stored at that moment.
func (s *session) standby() error {
	c := s.c
	try := c.clk.NewTicker(max(c.cfg.LeaderTTL/10, 10*time.Millisecond))
	defer try.Stop()
	for {
		taken := c.clk.Now()
		if s.acquire() {
			s.startRenewer(s.leaderRev, taken)
			break
		}
		select {
		case sd := <-s.out.ch:
			if err := s.verify(sd); err != nil {
				return err
			}
			if err := s.check(); err != nil {
				return err
			}
		case <-try.C():
			s.noteReaderErrs()
		case <-s.ctx.Done():
			return s.ctx.Err()
		}
	}
	if err := s.inputKept(s.ctx, max(c.cfg.LeaderTTL/3, 50*time.Millisecond), true); err != nil {
		return err
	}
	info, err := c.be.Info(s.ctx, false)
	if err != nil {
		return fmt.Errorf("coordinator: decision stream info: %w", streams.Classify(err))
	}
	// Catching up on a long log (a cold restart after a million inputs) can
	// take longer than the leadership entry lives: the renewer renews it
	// meanwhile, or the first renewal once live would find it gone and the
	// coordinator would resynchronise for ever.
	expiry := c.clk.NewTimer(clock.Until(c.clk, s.leaderValidUntil()))
	defer expiry.Stop()
	for s.decSeq < info.State.LastSeq {
		select {
		case sd := <-s.out.ch:
			if err := s.verify(sd); err != nil {
				return err
			}
			if err := s.check(); err != nil {
				return err
			}
		case <-try.C():
			s.noteReaderErrs()
		case rep := <-s.leadershipReports():
			if err := s.renewed(rep); err != nil {
				return err
			}
			expiry.Reset(clock.Until(c.clk, s.leaderValidUntil()))
		case now := <-expiry.C():
			if err := s.leaderExpired(now); err != nil {
				return err
			}
			expiry.Reset(clock.Until(c.clk, s.leaderValidUntil()))
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
		if err := r.r.Err(); err != nil {
			s.c.setState(StateStandby, "cannot read the streams: "+err.Error())
		}
	}
}

// acquire tries to take the leadership entry.
func (s *session) acquire() bool {
	kv := s.c.be.Leader()
	rev, err := kv.Create(s.ctx, leaderKey, []byte(s.c.cfg.ID))
	if errors.Is(err, jetstream.ErrKeyExists) {
		// A coordinator restarted under the same id takes its entry back at
		// once instead of waiting for it to expire. (Ids must be unique; the
		// decision stream's fence keeps even a duplicate id safe.)
		val, erev, gerr := kv.Get(s.ctx, leaderKey)
		if gerr == nil && string(val) == s.c.cfg.ID {
			rev, err = kv.Update(s.ctx, leaderKey, []byte(s.c.cfg.ID), erev)
		} else if gerr == nil {
			s.c.setState(StateStandby, "coordinator "+string(val)+" holds leadership; following and verifying its decisions")
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
	case <-c.be.PublishAsyncComplete():
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
		_ = c.be.Leader().Delete(ctx, leaderKey, s.leaderRev)
		s.leaderRev = 0
	}
}
