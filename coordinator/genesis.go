package coordinator

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// ensureRules moves the log to the current rules revision when it is not
// there yet, and on an empty log appends the default policy after the rules,
// so that the log alone determines every decision (PROTOCOL.md §1.1, §6.1):
//
//   - an empty log gets the rules input as input 1 and the default policy as
//     input 2, each fenced on the input stream's last sequence, so that two
//     coordinators starting together append them once and every lease is
//     granted under the lease key. A new input stream is in genesis
//     (streams.Topology.GenesisSubjects) until awaitGenesis widens it after
//     this, so no other input can come first; on a stream created before
//     genesis existed, an input stored first makes the rules follow it
//     unfenced (the inputs before them are judged by revision 1). On a
//     stream still in genesis whose input 1 is already the rules (a
//     coordinator stopped in the middle), resumeGenesis finishes the job;
//   - a log of an older revision gets a rules input after its last input:
//     the inputs before it keep the rules they were judged by.
//
// A rules input that another coordinator appended first (and had not folded
// yet when it stopped) makes this one's rejected by the fold
// (rules_in_force): it changes nothing.
func (s *session) ensureRules() error {
	if s.p.Revision() >= events.CurrentRevision {
		return nil
	}
	c := s.c
	info, err := c.be.Info(s.ctx, true)
	if err != nil {
		return fmt.Errorf("coordinator: input stream info: %w", streams.Classify(err))
	}
	if streams.Retained(info.Config) && info.State.FirstSeq > s.p.LastSeq()+1 {
		// The log's first inputs (its rules among them) were archived and
		// removed: a rules input now would start a second log.
		return fmt.Errorf("%w: the state at hand ends at input %d, the stream starts at %d", ErrLogRemoved, s.p.LastSeq(), info.State.FirstSeq)
	}
	if c.cfg.Topology.InGenesis(info.Config) && info.State.LastSeq > 0 {
		// A coordinator stopped in the genesis of the input stream (see
		// awaitGenesis), after its rules were stored: only coordinators'
		// rules and policy inputs can be there, and rules first. Finish
		// what it started rather than append a second rules input.
		done, err := s.resumeGenesis(info.State.LastSeq)
		if err != nil || done {
			return err
		}
	}
	in := events.Input{Verb: events.VerbRules, Revision: events.CurrentRevision}
	if k := c.cfg.LeaseKey; k != nil {
		in.LeaseKey = *k
	} else {
		_, _ = rand.Read(in.LeaseKey[:]) // never fails (crypto/rand)
	}
	rules := &nats.Msg{
		Subject: c.cfg.Topology.Partition.InputSubject(events.RoleCoord, c.cfg.ID, events.NoJob, events.VerbRules),
		Data:    events.AppendInputBody(nil, &in),
	}
	if info.State.LastSeq != 0 {
		if _, err := c.be.Publish(s.ctx, rules, randomID("rules-"+c.cfg.ID), nil); err != nil {
			return fmt.Errorf("coordinator: append rules: %w", err)
		}
		c.log.Info("moved the log to the current rules revision", "revision", events.CurrentRevision, "after_input", info.State.LastSeq)
		return nil
	}
	zero := uint64(0)
	ack, err := c.be.Publish(s.ctx, rules, "", &zero)
	if errors.Is(streams.Classify(err), streams.ErrLostAuthority) {
		// An input came first: another coordinator's rules (then this
		// second one is rejected, rules_in_force), or anyone's input,
		// which must not keep the log at revision 1.
		if _, err := c.be.Publish(s.ctx, rules, randomID("rules-"+c.cfg.ID), nil); err != nil {
			return fmt.Errorf("coordinator: append rules: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("coordinator: append rules: %w", err)
	}
	return s.appendDefaultPolicy(ack.Sequence)
}

// appendDefaultPolicy appends the default policy after the rules input,
// input after, fenced on it.
func (s *session) appendDefaultPolicy(after uint64) error {
	c := s.c
	pol := events.Input{Verb: events.VerbPolicy, Policy: events.DefaultPolicy()}
	policy := &nats.Msg{
		Subject: c.cfg.Topology.Partition.InputSubject(events.RoleCoord, c.cfg.ID, events.NoJob, events.VerbPolicy),
		Data:    events.AppendInputBody(nil, &pol),
	}
	// Fenced too: if an input came in between, the default policy is in
	// force anyway (it is until the log holds a policy input).
	_, err := c.be.Publish(s.ctx, policy, "", &after)
	if err != nil && !errors.Is(streams.Classify(err), streams.ErrLostAuthority) {
		return fmt.Errorf("coordinator: append default policy: %w", streams.Classify(err))
	}
	return nil
}

// resumeGenesis looks at input 1 of an input stream in genesis that holds
// last inputs (not folded yet): when it is a rules input of the current
// revision, the rules are stored, and done is true; with nothing after
// them (a coordinator stopped between its two appends), the default policy
// is appended after them. Otherwise (done false) ensureRules goes on as for
// any log.
func (s *session) resumeGenesis(last uint64) (done bool, err error) {
	c := s.c
	m, err := c.be.Inputs().GetMsg(s.ctx, 1)
	if err != nil {
		return false, fmt.Errorf("coordinator: read input 1: %w", streams.Classify(err))
	}
	subject, ok := c.cfg.Topology.Partition.StripInput(m.Subject)
	var in events.Input
	if !ok || events.DecodeInput(subject, m.Data, &in) != nil || in.Role != events.RoleCoord ||
		in.Verb != events.VerbRules || in.Revision != events.CurrentRevision {
		return false, nil
	}
	if last == 1 {
		if err := s.appendDefaultPolicy(1); err != nil {
			return false, err
		}
	}
	c.log.Info("resumed the genesis of the input stream", "rules_by", in.Actor, "inputs", last)
	return true, nil
}

// GenesisMode says who ends the genesis of a brand-new input stream
// (Config.Genesis, PROTOCOL.md §1.1).
type GenesisMode uint8

const (
	// GenesisSelf, the default: the coordinator widens the input stream
	// itself once its rules and policy are stored (it needs
	// $JS.API.STREAM.UPDATE on it: an embedded server without
	// authorization, a server whose permissions allow it). If the update
	// fails, it waits as with GenesisAdmin, trying again now and then.
	GenesisSelf GenesisMode = iota
	// GenesisAdmin: the coordinator never updates a stream. Once its rules
	// and policy are stored it waits, standing by with the command to run
	// in its status and log (Config.GenesisCommand), for an administrator
	// to widen the stream (`tenure genesis`, EndGenesis), notices the
	// widening when it happens and goes live. For a coordinator whose
	// credential may not update the stream, as under tenure auth init.
	GenesisAdmin
)

// String is the mode's name: self or admin.
func (m GenesisMode) String() string {
	switch m {
	case GenesisSelf:
		return "self"
	case GenesisAdmin:
		return "admin"
	}
	return "GenesisMode(" + strconv.Itoa(int(m)) + ")"
}

// DefaultGenesisCommand is Config.GenesisCommand's default.
const DefaultGenesisCommand = "tenure genesis --creds-json ADMIN.creds.json (the administrator's credential that tenure auth init writes)"

// Retries of a GenesisSelf coordinator's own widening once it failed.
const (
	genesisRetryFirst = time.Second
	genesisRetryMax   = time.Minute
)

// awaitGenesis ends the input stream's genesis, when it is in genesis
// (streams.EndGenesis), once ensureRules has stored the rules input and the
// default policy or found them stored, and before the coordinator declares
// itself live: until then, every input but a coordinator's rules and
// policy finds no stream (PROTOCOL.md §1.1), so that none can come before
// them and be judged by revision 1. A GenesisSelf coordinator widens the
// stream itself; a GenesisAdmin one (or a GenesisSelf one whose update
// failed) waits for an administrator to widen it, keeping its leadership
// and saying so in its state, until the watch sees the stream open (an
// advisory, or its interval) or refuses a change. Idempotent: a coordinator
// stopped before the widening leaves a stream in genesis, which the next
// coordinator to go live, or the administrator, widens.
func (s *session) awaitGenesis(w *watch) error {
	c := s.c
	top := c.cfg.Topology
	if !top.InGenesis(c.be.SetupInfo().Config) {
		return nil // as Ensure or the last check found it: widened (streams are never narrowed)
	}
	reason := "the input stream " + top.InputStream() + " is in genesis (its rules and policy are stored) and this coordinator does not widen it " +
		"(its credential may not update streams): run " + c.cfg.GenesisCommand + " once; it goes live as soon as the stream is widened"
	if c.cfg.Genesis == GenesisSelf {
		err := s.widen()
		if err == nil {
			return nil
		}
		var mismatch *streams.ConfigMismatchError
		if errors.As(err, &mismatch) {
			return fmt.Errorf("%w: %w", ErrStreamChanged, err)
		}
		reason = "the input stream " + top.InputStream() + " is in genesis (its rules and policy are stored) and this coordinator could not widen it (" +
			err.Error() + "; it needs $JS.API.STREAM.UPDATE." + top.InputStream() + "): run " + c.cfg.GenesisCommand +
			" once, or give it a credential that may update the stream; it goes live as soon as the stream is widened"
		wait := genesisRetryFirst
		t := c.clk.NewTimer(wait)
		defer t.Stop()
		return s.waitGenesis(w, reason, t.C(), func() bool {
			if s.widen() == nil {
				return true
			}
			wait = min(2*wait, genesisRetryMax)
			t.Reset(wait)
			return false
		})
	}
	return s.waitGenesis(w, reason, nil, nil)
}

// widen is the coordinator's own end of genesis.
func (s *session) widen() error {
	c := s.c
	top := c.cfg.Topology
	if c.jsb == nil {
		return errors.New("coordinator: the input stream is in genesis, and this backend cannot widen it")
	}
	if _, err := streams.EndGenesis(s.ctx, c.jsb.js, top); err != nil {
		// A denied request is never answered: this is a timeout.
		return fmt.Errorf("coordinator: %w", err)
	}
	c.log.Info("input stream open to every input", "stream", top.InputStream(), "subjects", top.InputConfig().Subjects)
	return nil
}

// waitGenesis stands by, holding leadership, until the watch sees the input
// stream open (nil), refuses a change, or try (when retry fires) widens it
// itself.
func (s *session) waitGenesis(w *watch, reason string, retry <-chan time.Time, try func() bool) error {
	c := s.c
	c.setState(StateStandby, reason)
	c.log.Warn("waiting for the end of the input stream's genesis to go live", "stream", c.cfg.Topology.InputStream(), "what_to_do", "run "+c.cfg.GenesisCommand)
	expiry := c.clk.NewTimer(clock.Until(c.clk, s.leaderValidUntil()))
	defer expiry.Stop()
	for {
		select {
		case <-w.open:
			c.log.Info("input stream open to every input: its genesis was ended by an administrator", "stream", c.cfg.Topology.InputStream())
			return nil
		case err := <-w.found:
			return err
		case <-retry:
			if try() {
				return nil
			}
		case m := <-s.app.replies:
			if err := s.acknowledged(m); err != nil {
				return err
			}
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
}

// EndGenesis is the administrator's end of the genesis of t's input
// stream (`tenure genesis`), for coordinators that may not update it
// (GenesisAdmin): it waits, reading the stream every poll on clk (nil:
// the real clock), until the stream exists and either is past its genesis
// (widened false: nothing to do) or holds the rules input of a coordinator
// as input 1 and at least one input after it (the default policy, or a
// second coordinator's rules), and then widens it (streams.EndGenesis,
// widened true). The coordinator, which waits for it, then goes live. It
// returns when ctx ends, and on a stream it refuses (a
// *streams.ConfigMismatchError, or an input 1 that is not a coordinator's
// rules: ErrGenesisBroken).
func EndGenesis(ctx context.Context, js jetstream.JetStream, t streams.Topology, clk clock.Clock, poll time.Duration) (widened bool, err error) {
	return EndGenesisQuotas(ctx, js, t, nil, clk, poll)
}

// EndGenesisQuotas is EndGenesis giving the deployment the workers' quotas
// q (streams.ApplyQuotas) instead of opening the input stream to every
// input, when q is not nil: a stream in genesis goes straight to the quota
// form, and one past genesis gets them too (widened false), so that it may
// be run again for more workers.
func EndGenesisQuotas(ctx context.Context, js jetstream.JetStream, t streams.Topology, q *streams.Quotas, clk clock.Clock, poll time.Duration) (widened bool, err error) {
	if err := t.Validate(); err != nil {
		return false, err
	}
	end := func(ctx context.Context) error {
		if q != nil {
			_, err := streams.ApplyQuotas(ctx, js, t, *q)
			return err
		}
		_, err := streams.EndGenesis(ctx, js, t)
		return err
	}
	clk = clock.OrReal(clk)
	for {
		// Each attempt within genesisAttempt: a request a cluster drops
		// (no leader yet) is tried again, not waited for until ctx ends.
		actx, cancel := context.WithTimeout(ctx, genesisAttempt)
		ready, err := genesisReady(actx, js, t)
		if err == nil && ready {
			err = end(actx)
			var mismatch *streams.ConfigMismatchError
			if err == nil || errors.As(err, &mismatch) || errors.Is(err, streams.ErrQuotasReplicated) {
				cancel()
				return err == nil, err
			}
			err = nil // not answered: again
		}
		cancel()
		switch {
		case errors.Is(err, errGenesisOver) && q != nil:
			actx, cancel := context.WithTimeout(ctx, genesisAttempt)
			err := end(actx)
			cancel()
			return false, err
		case errors.Is(err, errGenesisOver):
			return false, nil
		case err != nil:
			return false, err
		}
		tm := clk.NewTimer(poll)
		select {
		case <-ctx.Done():
			tm.Stop()
			return false, ctx.Err()
		case <-tm.C():
		}
	}
}

// genesisAttempt bounds each look-up and update of EndGenesis.
const genesisAttempt = 5 * time.Second

// ErrGenesisBroken means an input stream in genesis holds, as input 1,
// something other than a coordinator's rules input: EndGenesis does not
// widen it (no coordinator stored what must come first).
var ErrGenesisBroken = errors.New("coordinator: the input stream in genesis does not start with a coordinator's rules input")

// errGenesisOver is genesisReady's finding of a stream past its genesis.
var errGenesisOver = errors.New("coordinator: the input stream is past its genesis")

// genesisReady reports whether t's input stream is in genesis with its
// rules and something after them stored (true), not yet (false, nil:
// missing, or the coordinator has not stored them), past genesis
// (errGenesisOver, once its configuration checks out), or refused.
func genesisReady(ctx context.Context, js jetstream.JetStream, t streams.Topology) (bool, error) {
	st, err := js.Stream(ctx, t.InputStream())
	if err != nil {
		return false, nil // missing, or not answering: wait
	}
	info := st.CachedInfo()
	if !t.InGenesis(info.Config) {
		// Checked as EndGenesis checks it.
		_, err := streams.EndGenesis(ctx, js, t)
		var mismatch *streams.ConfigMismatchError
		if errors.As(err, &mismatch) {
			return false, err
		}
		if err != nil {
			return false, nil // not answering: again
		}
		return false, errGenesisOver
	}
	if info.State.LastSeq < 2 {
		return false, nil
	}
	m, err := st.GetMsg(ctx, 1)
	if err != nil {
		return false, nil
	}
	subject, ok := t.Partition.StripInput(m.Subject)
	var in events.Input
	if !ok || events.DecodeInput(subject, m.Data, &in) != nil || in.Role != events.RoleCoord || in.Verb != events.VerbRules {
		return false, fmt.Errorf("%w: input 1 is on %s", ErrGenesisBroken, m.Subject)
	}
	return true, nil
}

// randomID is prefix-<32 hex digits of crypto/rand>: a Nats-Msg-Id nobody
// can predict, so that no publisher can make the input stream drop a
// coordinator input as a duplicate by storing its id first.
func randomID(prefix string) string {
	var r [16]byte
	_, _ = rand.Read(r[:]) // never fails (crypto/rand)
	const hex = "0123456789abcdef"
	b := make([]byte, 0, len(prefix)+1+32)
	b = append(b, prefix...)
	b = append(b, '-')
	for _, x := range r {
		b = append(b, hex[x>>4], hex[x&15])
	}
	return string(b)
}
