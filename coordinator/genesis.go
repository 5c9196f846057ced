package coordinator

import (
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
//     granted under the lease key (if another input was stored first, the
//     rules follow it unfenced: the inputs before them are judged by
//     revision 1);
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
	info, err := c.h.In.Info(s.ctx)
	if err != nil {
		return fmt.Errorf("coordinator: input stream info: %w", streams.Classify(err))
	}
	if streams.Retained(info.Config) && info.State.FirstSeq > s.p.LastSeq()+1 {
		// The log's first inputs (its rules among them) were archived and
		// removed: a rules input now would start a second log.
		return fmt.Errorf("%w: the state at hand ends at input %d, the stream starts at %d", ErrLogRemoved, s.p.LastSeq(), info.State.FirstSeq)
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
		if _, err := c.js.PublishMsg(s.ctx, rules, jetstream.WithMsgID(randomID("rules-"+c.cfg.ID))); err != nil {
			return fmt.Errorf("coordinator: append rules: %w", err)
		}
		c.log.Info("moved the log to the current rules revision", "revision", events.CurrentRevision, "after_input", info.State.LastSeq)
		return nil
	}
	ack, err := c.js.PublishMsg(s.ctx, rules, jetstream.WithExpectLastSequence(0))
	if errors.Is(streams.Classify(err), streams.ErrLostAuthority) {
		// An input came first: another coordinator's rules (then this
		// second one is rejected, rules_in_force), or anyone's input,
		// which must not keep the log at revision 1.
		if _, err := c.js.PublishMsg(s.ctx, rules, jetstream.WithMsgID(randomID("rules-"+c.cfg.ID))); err != nil {
			return fmt.Errorf("coordinator: append rules: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("coordinator: append rules: %w", err)
	}
	pol := events.Input{Verb: events.VerbPolicy, Policy: events.DefaultPolicy()}
	policy := &nats.Msg{
		Subject: c.cfg.Topology.Partition.InputSubject(events.RoleCoord, c.cfg.ID, events.NoJob, events.VerbPolicy),
		Data:    events.AppendInputBody(nil, &pol),
	}
	// Fenced too: if an input came in between, the default policy is in
	// force anyway (it is until the log holds a policy input).
	_, err = c.js.PublishMsg(s.ctx, policy, jetstream.WithExpectLastSequence(ack.Sequence))
	if err != nil && !errors.Is(streams.Classify(err), streams.ErrLostAuthority) {
		return fmt.Errorf("coordinator: append default policy: %w", err)
	}
	return nil
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
