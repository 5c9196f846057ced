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
//     granted under the lease key. A new input stream is in genesis
//     (streams.Topology.GenesisSubjects) until endGenesis widens it after
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
	info, err := c.h.In.Info(s.ctx)
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
		// endGenesis), after its rules were stored: only coordinators'
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
	_, err := c.js.PublishMsg(s.ctx, policy, jetstream.WithExpectLastSequence(after))
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
	m, err := c.h.In.GetMsg(s.ctx, 1)
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

// endGenesis widens the input stream, when it is in genesis, to every input
// subject (streams.EndGenesis), once ensureRules has stored the rules input
// and the default policy or found them stored, and before the coordinator
// declares itself live: until then, every input but a coordinator's rules
// and policy finds no stream (PROTOCOL.md §1.1), so that none can come
// before them and be judged by revision 1. Idempotent: a coordinator
// stopped before it (or between its rules and it) leaves a stream in
// genesis, which the next coordinator to go live, this one or another,
// widens.
func (s *session) endGenesis() error {
	c := s.c
	top := c.cfg.Topology
	if !top.InGenesis(c.h.In.CachedInfo().Config) {
		return nil // as Ensure found it: widened (streams are never narrowed)
	}
	if _, err := streams.EndGenesis(s.ctx, c.js, top); err != nil {
		// A denied request is never answered: under permissions made by
		// a tenure auth init older than genesis, this is a timeout.
		return fmt.Errorf("coordinator: %w (the coordinator needs $JS.API.STREAM.UPDATE.%s: regenerate credentials made by a tenure auth init older than the input stream's genesis)", err, top.InputStream())
	}
	c.log.Info("input stream open to every input", "stream", top.InputStream(), "subjects", top.InputConfig().Subjects)
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
