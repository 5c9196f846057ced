package coordinator

// The core: the coordinator's deterministic heart, without I/O.

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// core is what a session knows of the log, and the one place it changes:
// the fold of the stored inputs (the projector), the decisions it derived
// and has not yet matched (standby) or published (live), their decision
// sequences and chain values, and what the decision stream acknowledged.
// It does no I/O, reads no clock, starts no goroutine and holds no map
// whose order reaches its output; the session is the loop around it: it
// hands the core each input and decision read and each append
// acknowledged (Step), takes the decisions to append from it (Ready), and
// does the I/O itself. core_test.go drives it with no server at all.
//
// Its sequences, at every turn of the session's loop (check):
//
//	standby: pend[i].seq == decSeq+1+i, headSeq == decSeq+len(pend)
//	live:    pend[i].seq == sentSeq+1+i, decSeq == headSeq == sentSeq+len(pend),
//	         acked <= sentSeq
//
// where decSeq is the last decision verified (standby) or derived (live),
// sentSeq the last one handed to the appender, acked the last one the
// stream acknowledged, and head the chain value of decision headSeq.
type core struct {
	topo streams.Topology
	p    *projector.Projector

	pend  []pending // derived decisions not yet matched (standby) or sent (live)
	arena []byte    // the bodies of pend, reset when pend empties

	head    events.Chain
	headSeq uint64
	chainer *events.Chainer
	chk     events.ChainCheck // the stored decisions' chain headers, as the audit checks them

	live       bool
	decSeq     uint64
	sentSeq    uint64
	acked      uint64
	ackedChain events.Chain // the chain value of decision acked
	ackedCause uint64       // the input decision acked answers

	sinceSnap   int   // inputs folded since the last snapshot (checkpoints aside)
	sinceFreeze int   // inputs folded since the last freeze
	snapAt      int64 // when the last snapshot was taken, or the session began (Unix ns)

	pol  policy      // the configuration of the policies (corepolicy.go)
	lead leaderState // live and standby: how long the leadership lasts

	tick tickState // live: this coordinator's ticks

	traces traceMemory // the trace context of the jobs ops inputs submitted or offered (traces.go)
}

// tickState is the tick policy's: the one tick that may stand ahead of
// the fold (tickWanted).
type tickState struct {
	subject string // the subject of this coordinator's ticks
	lastAt  int64  // the deadline the last tick was appended for
	count   int    // ticks appended for it
	sentAt  int64  // when the last tick was appended (Unix ns), 0 once it is folded or refused
	stored  bool   // the last tick's append was acknowledged
}

// newCore returns the core of a session that starts from the empty state.
func newCore(topo streams.Topology) core {
	return core{topo: topo, p: projector.NewPartition(topo.Partition)}
}

// restore starts the core from a restored state: p, the state after input
// pos.InputSeq, whose last decision is pos.DecisionSeq with chain value
// pos.Chain.
func (k *core) restore(p *projector.Projector, pos streams.SnapshotAnchor) {
	k.p, k.decSeq, k.headSeq, k.acked, k.head = p, pos.DecisionSeq, pos.DecisionSeq, pos.DecisionSeq, pos.Chain
	k.ackedChain, k.ackedCause = pos.Chain, pos.InputSeq // checkAnchor: decision DecisionSeq answers input InputSeq
}

// foldResult is what the fold of one input gave, for the loop's I/O.
type foldResult struct {
	ds     []events.Decision
	first  uint64 // the decision sequence of ds[0]
	worker string // the worker whose input it is, when sourced from its intake stream
	src    uint64 // its intake sequence (0: not sourced)
}

// fold folds input m, the next stored input, and derives its decisions
// into pend. A gap before m is ErrInputGap (the loop tells a removed
// segment first).
func (k *core) fold(m stored) (foldResult, error) {
	if m.seq != k.p.LastSeq()+1 {
		return foldResult{}, fmt.Errorf("%w: after input %d comes input %d", ErrInputGap, k.p.LastSeq(), m.seq)
	}
	ds, err := k.p.Step(events.Raw{Seq: m.seq, Time: m.time, Subject: m.subject, Body: m.data})
	if err != nil {
		return foldResult{}, err
	}
	// A worker's input sourced from its intake stream (quotas, PROTOCOL.md
	// §4.2): its verdicts name the intake sequence its PubAck gave.
	f := foldResult{ds: ds, first: k.headSeq + 1}
	if w, ok := intakeActor(m.subject); ok && m.header != nil {
		if f.src = k.topo.SourceSeq(m.header.Get(streams.HeaderStreamSource), w); f.src > 0 {
			f.worker = w
		}
	}
	tr := k.traces.input(m)
	for i := range ds {
		d := &ds[i]
		if cap(k.arena)-len(k.arena) < arenaChunk/64 {
			// perf: a new chunk rather than a grown (copied) arena; the
			// bodies cut from the old one keep it alive until sent.
			k.arena = make([]byte, 0, arenaChunk)
		}
		start := len(k.arena)
		k.arena = events.AppendDecision(k.arena, d)
		pd := pending{
			subject: k.topo.Partition.DecisionSubject(d), n: d.N, of: d.Of, cause: d.Cause,
			body:    k.arena[start:len(k.arena):len(k.arena)],
			seq:     k.headSeq + 1,
			chained: k.p.Revision() >= events.Revision2,
		}
		if f.src > 0 && d.Addressee == f.worker {
			pd.src = f.src
		}
		if tr.any {
			pd.trace = k.traces.decision(&tr, d)
		}
		if k.chainer == nil {
			k.chainer = events.NewChainer()
		}
		pd.chain = k.chainer.Next(k.head, pd.seq, pd.cause, pd.n, pd.of, pd.subject, pd.body)
		k.head, k.headSeq = pd.chain, pd.seq
		k.pend = append(k.pend, pd)
	}
	if k.live {
		k.decSeq = k.headSeq
		if m.subject == k.tick.subject {
			k.tick.sentAt = 0 // folded: the next one may leave
		}
	}
	if n := len(ds); n == 0 || ds[n-1].Verb != events.VerbCheckpoint {
		k.sinceSnap++ // checkpoints do not count, or each would call for the next
	}
	k.sinceFreeze++
	return f, nil
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

// match matches sd, the next stored decision (standby), against the fold.
// When every decision derived so far is matched, it returns the input
// sd names (need > 0) and leaves sd unmatched: the loop reads that input
// (checking first that the stream holds it), folds it, and matches sd
// again. A decision that is not the next derived one, byte for byte with
// its headers and chain value, is ErrDivergence.
func (k *core) match(sd stored) (need uint64, err error) {
	if k.live {
		return 0, fmt.Errorf("%w: match while live", errInvariant)
	}
	if sd.seq != k.decSeq+1 {
		return 0, fmt.Errorf("%w: decision stream jumped from %d to %d", ErrDivergence, k.decSeq, sd.seq)
	}
	cause, n, of, herr := decisionIndex(sd.header)
	if herr != nil {
		return 0, fmt.Errorf("%w: decision %d: %v", ErrDivergence, sd.seq, herr)
	}
	if len(k.pend) == 0 {
		// Every decision of the inputs folded so far is matched: this one
		// must be caused by an input still to come.
		if cause <= k.p.LastSeq() {
			return 0, fmt.Errorf("%w: decision %d names input %d, whose decisions are all matched already (an extra decision)", ErrDivergence, sd.seq, cause)
		}
		return cause, nil
	}
	want := k.pend[0]
	if sd.subject != want.subject || !bytes.Equal(sd.data, want.body) || cause != want.cause || n != want.n || of != want.of || sd.seq != want.seq {
		return 0, fmt.Errorf("%w: decision %d (cause input %d, %d/%d):\n stored  %s %s (headers %d, %d/%d)\n derived %s %s",
			ErrDivergence, sd.seq, want.cause, want.n, want.of, sd.subject, sd.data, cause, n, of, want.subject, want.body)
	}
	if err := k.chk.Check(sd.header.Get(events.HeaderChain), want.chain, want.chained); err != nil {
		return 0, fmt.Errorf("%w: decision %d: %w", ErrDivergence, sd.seq, err)
	}
	k.pend = k.pend[1:]
	if len(k.pend) == 0 {
		k.resetArena()
	}
	k.decSeq = sd.seq
	k.acked, k.ackedChain, k.ackedCause = sd.seq, want.chain, cause
	return 0, nil
}

// goLive ends standby: the decisions derived and not matched (those of
// the last input a crash left unstored) are the first to send.
func (k *core) goLive(tickSubject string) {
	k.live, k.tick.subject = true, tickSubject
	k.sentSeq = k.decSeq
	k.decSeq = k.headSeq
}

// unsent returns the decisions derived and not yet sent (live), oldest
// first. They stay the core's until sent says they left.
func (k *core) unsent() []pending { return k.pend }

// sent records that the first n unsent decisions were handed to the
// appender.
func (k *core) sent(n int) {
	if n == 0 {
		return
	}
	k.sentSeq += uint64(n)
	clear(k.pend[:n])
	k.pend = k.pend[n:] // a queue: appends reallocate once its capacity is used up
	if len(k.pend) == 0 {
		k.resetArena() // every body was copied out by the publishes
	}
}

// ack records that the stream acknowledged the decisions up to last, the
// last of which has chain value chain and answers input cause.
func (k *core) ack(last uint64, chain events.Chain, cause uint64) error {
	if last <= k.acked || last > k.sentSeq {
		return fmt.Errorf("%w: decision %d acknowledged after %d, with %d sent", errInvariant, last, k.acked, k.sentSeq)
	}
	k.acked, k.ackedChain, k.ackedCause = last, chain, cause
	return nil
}

// inflight is how many decisions were derived and not yet acknowledged
// (live).
func (k *core) inflight() uint64 { return k.headSeq - k.acked }

// snapshotted records that a snapshot of the state as it is was taken at
// now.
func (k *core) snapshotted(now int64) { k.sinceSnap, k.sinceFreeze, k.snapAt = 0, 0, now }

// frozen records that the state was frozen for the encoder (compaction).
func (k *core) frozen() { k.sinceFreeze = 0 }

// tickLost is how long a tick's append may go unanswered before another
// is appended in its place.
const tickLost = 2 * time.Second

// tickWanted returns the deadline a tick should be appended for now (Unix
// ns), if one should: a deadline is due by now, and no tick stands. A tick
// stands from its append until it is folded, unless its append was refused
// or went unanswered for tickLost; a stored tick is never appended again:
// the fold reaches it, however long the decisions ahead of it take (the
// reader waits while MaxInflight decisions are unacknowledged), and the
// next one leaves once it is folded. So the input stream holds at most one
// tick ahead of the fold, and a worker's input waits for at most its
// decisions and those in flight (PROTOCOL.md §4.2, fair service). (A tick
// appended whenever the earliest deadline moved filled the input stream
// with ticks far ahead of the fold in an expiry storm, and every worker's
// input stored behind them waited for the whole backlog.)
func (k *core) tickWanted(now int64) (int64, bool) {
	d, ok := k.p.NextDeadline()
	if !ok || d > now {
		return 0, false
	}
	if t := &k.tick; t.sentAt != 0 && (t.stored || now-t.sentAt < int64(tickLost)) {
		return 0, false
	}
	return d, true
}

// tickAppended records a tick appended at now for deadline d.
func (k *core) tickAppended(d, now int64) {
	t := &k.tick
	if d == t.lastAt {
		t.count++
	} else {
		t.lastAt, t.count = d, 0
	}
	t.sentAt, t.stored = now, false
}

// tickAnswered records the stream's answer to the last tick's append.
func (k *core) tickAnswered(stored bool) {
	if stored {
		k.tick.stored = true
	} else {
		k.tick.sentAt = 0
	}
}

// tickRetry is how long the loop waits before it looks again at a
// deadline it appended a tick for: unless the tick's stored timestamp
// passes it, it backs off (20 ms doubling to 1 s), so that a stalled input
// reader does not fill the append-only log with ticks.
func (k *core) tickRetry() time.Duration {
	return min(20*time.Millisecond<<min(k.tick.count, 6), time.Second)
}

// arenaChunk is the size of the chunks of the arena decision bodies are
// encoded into (perf: under a backlog, growing one arena copied every
// body queued, a tenth of the process's CPU in the pipeline benchmark).
const arenaChunk = 256 << 10

// resetArena lets the next bodies reuse the arena, once pend is empty.
func (k *core) resetArena() {
	if cap(k.arena) > 4<<20 {
		k.arena = nil // after a burst, do not keep it all
		return
	}
	k.arena = k.arena[:0]
}

// errInvariant is a broken invariant of the core: a bug, never the log's
// fault. The session ends with it (Run returns it).
var errInvariant = errors.New("coordinator: internal invariant broken")

// check checks the core's invariants; the session calls it after every
// turn of its loop.
func (k *core) check() error {
	base := k.decSeq
	if k.live {
		base = k.sentSeq
		switch {
		case k.decSeq != k.headSeq:
			return fmt.Errorf("%w: live, last derived %d, chain head at %d", errInvariant, k.decSeq, k.headSeq)
		case k.acked > k.sentSeq:
			return fmt.Errorf("%w: decision %d acknowledged, %d sent", errInvariant, k.acked, k.sentSeq)
		}
	}
	if k.headSeq != base+uint64(len(k.pend)) {
		return fmt.Errorf("%w: chain head at %d, %d decisions pending after %d", errInvariant, k.headSeq, len(k.pend), base)
	}
	if n := len(k.pend); n > 0 {
		if k.pend[0].seq != base+1 || k.pend[n-1].seq != k.headSeq || k.pend[n-1].chain != k.head {
			return fmt.Errorf("%w: pending decisions %d to %d, want %d to %d", errInvariant, k.pend[0].seq, k.pend[n-1].seq, base+1, k.headSeq)
		}
		if k.pend[n-1].cause > k.p.LastSeq() {
			return fmt.Errorf("%w: a pending decision answers input %d, the fold is at %d", errInvariant, k.pend[n-1].cause, k.p.LastSeq())
		}
	}
	return nil
}
