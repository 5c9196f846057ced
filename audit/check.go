package audit

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/fence"
	"github.com/maknow/tenure/projector"
)

// StoredDecision is one message of the decision stream, as read.
type StoredDecision struct {
	Seq     uint64 // decision stream sequence
	Subject string
	Body    []byte
	Cause   string // the Tenure-Cause header ("" if absent)
	Index   string // the Tenure-N header, "n/of" ("" if absent)
	Chain   string // the Tenure-Chain header ("" if absent)
}

// InputReader yields the stored inputs in stream order; false at the end.
// The bytes of a returned input must stay valid after later calls.
type InputReader interface {
	NextInput() (events.Raw, bool)
}

// DecisionReader yields the stored decisions in stream order; false at the
// end. The bytes of a returned decision must stay valid after later calls:
// Check looks ahead a few decisions at times.
type DecisionReader interface {
	NextDecision() (StoredDecision, bool)
}

// Start is the point an audit starts from: by default the beginning of
// both streams with a fresh projector.
type Start struct {
	// Projector holds the fold's state before the first input read (nil:
	// projector.NewPartition(Partition)); Base is the snapshot it was restored from (nil for
	// a new projector), the starting point of the rebuilt hash.
	Projector *projector.Projector
	Base      []byte
	// LastDecision is the decision stream sequence of the last decision
	// before the first one read (0: reading from the first), and Last its key.
	LastDecision uint64
	Last         Key
	// Chain is the chain value (events.HeaderChain) of decision
	// LastDecision: the zero value, C(0), when reading from the first
	// decision; ChainUnknown says it is not known (the first decision read
	// that carries one is taken as it is, and noted).
	Chain        events.Chain
	ChainUnknown bool
	// InputEnd and DecisionEnd are the streams' last sequences: a decision
	// naming a cause beyond InputEnd names no input.
	InputEnd, DecisionEnd uint64
	// Snapshot is what is known of the stored snapshot (Report.Snapshot).
	// When SnapshotData (its bytes) is set, Check compares it with the
	// fold's own snapshot when the fold reaches its input, and records the
	// outcome in it.
	Snapshot     *SnapshotCheck
	SnapshotData []byte
	// Partition is the partition of a partitioned deployment the streams
	// hold (zero: unpartitioned): the fold is projector.NewPartition's,
	// and stored decision subjects end in its token. It must be Valid.
	Partition events.Partition
	// Claimed are the input sequences whose state the checkpoint inputs
	// to be read claim a hash of, in any order (duplicates allowed). A
	// claim comes after its input, so they are read ahead: Run reads the
	// checkpoint inputs first, through a filtered consumer. Check hashes
	// the fold's state after each of them once, and checks every claim
	// the fold records (a checkpointed decision) against it; a claim about
	// an input not listed here, or before the start, is not checked, and
	// noted (Report.Checkpoints).
	Claimed []uint64
}

// Options say what an audit collects besides the verdicts.
type Options struct {
	// Job, when set, collects the job's history (Report.History) and
	// timeline (Report.Timeline).
	Job string
	// Matrix collects the latest decision of every job (Report.Latest).
	Matrix bool
	// Strict counts pending inputs as problems.
	Strict bool
	// MaxListed bounds the findings listed per class (all are counted);
	// 0 means DefaultMaxListed, negative means no bound.
	MaxListed int
	// Progress, when set, is called every few thousand messages.
	Progress func(Progress)
	// Witnesses are receipts and signed chain heads to check against the
	// log (Report.Witnesses): each must be borne out by the input or
	// decision it names. They need the whole log: one before the audit's
	// start is a finding.
	Witnesses []Witness
	// Effects are effect receipts (package fence: what resources
	// committed under leases) to check against the leases of the log
	// (Report.Effects, CheckEffects): they need the whole log. EffectSkew
	// is the most a resource's clock may differ from the NATS server's.
	Effects    []fence.ReceiptLine
	EffectSkew time.Duration
}

// DefaultMaxListed is the default of Options.MaxListed.
const DefaultMaxListed = 1000

// lookaheadWindow is how far Check looks ahead to tell a decision that
// jumps forward out of order from decisions that are really missing.
const lookaheadWindow = 64

const progressEvery = 1 << 13

// Check audits a decision stream against the fold of an input stream. It
// does no I/O: the readers bring the messages, in stream order, and it
// reads inputs only as far as the decisions need them (then the rest, as
// pending). See the package documentation for the verdicts.
func Check(in InputReader, out DecisionReader, st Start, opts Options) *Report {
	c := newChecker(in, out, st, opts)
	for {
		s, ok := c.out.next()
		if !ok {
			break
		}
		c.decision(&s)
		if c.opts.Progress != nil && c.rep.Decisions%progressEvery == 0 {
			c.progress()
		}
	}
	c.finish()
	return c.rep
}

// derived is a decision of the fold, not yet matched with a stored one.
// The decision itself stays in the projector's output slice (borrowed)
// until the next Step, which reuses that slice: only the decisions still
// unmatched then are copied (owned).
type derived struct {
	key      Key
	of       uint32
	off, end int // body in the arena
	subject  string
	i        int  // index in checker.cur or, when owned, checker.owned
	owned    bool // copied out of the projector's output slice
}

type checker struct {
	opts Options
	rep  *Report
	max  int
	p    *projector.Projector
	in   InputReader
	out  lookahead
	base []byte

	inEnd     uint64
	lastInput uint64      // last input sequence read
	gaps      [][2]uint64 // input sequences the input stream does not hold
	inDone    bool
	inRead    uint64 // inputs read, folded or pending

	q     []derived // derived decisions not yet matched, in key order
	qh    int
	arena []byte
	cur   []events.Decision // the projector's output of the last Step
	owned []events.Decision // decisions of earlier Steps still unmatched

	last     Key // last stored key accepted (verified or mismatched)
	hasLast  bool
	lastBody []byte
	lastSeq  uint64 // its decision sequence
	prevDec  uint64 // last decision sequence read

	snap         *SnapshotCheck
	snapData     []byte
	snapCompared bool   // the fold reached the snapshot's input and compared
	suffix       string // ".<k>", the partition token of decision subjects ("" unpartitioned)

	// Checkpoint claims: the claimed inputs, sorted and distinct, the
	// next one to hash, and the fold's state hash after each one hashed.
	claimed  []uint64
	claimAt  int
	claimFor map[uint64]Hash
	start    uint64 // the last input before the audit's start (the fold's LastSeq then)
	startDec uint64 // the last decision before it

	// The state the stored decisions describe.
	state projector.Rebuilder
	sRev  uint32 // the revision of the last rules_set decision (0: none)

	// The decision chain: chain is the value of decision prevDec (as
	// computed, or as stored after a break, so that each break is found
	// once, where it is); every decision must carry its value once one
	// has (chk, shared with the coordinator) or once the fold has moved to rules revision 2
	// (from input rulesSeq on).
	chainer      *events.Chainer
	chain        events.Chain
	chainUnknown bool
	chk          events.ChainCheck
	rulesSeq     uint64

	wit  *witnesses // Options.Witnesses by sequence (nil: none)
	fx   *EffectTracker
	flow *FlowTracker

	latest map[string]events.Decision
	steps  map[uint64]int // timeline index by input sequence
}

func newChecker(in InputReader, out DecisionReader, st Start, opts Options) *checker {
	c := &checker{
		opts: opts, in: in, out: lookahead{r: out}, base: st.Base,
		p: st.Projector, inEnd: st.InputEnd,
		snap: st.Snapshot, snapData: st.SnapshotData,
		rep: &Report{InputEnd: st.InputEnd, DecisionEnd: st.DecisionEnd, Strict: opts.Strict, Snapshot: st.Snapshot},
	}
	c.max = opts.MaxListed
	if c.max == 0 {
		c.max = DefaultMaxListed
	}
	if c.p == nil {
		c.p = projector.NewPartition(st.Partition)
	}
	c.lastInput = c.p.LastSeq()
	c.start = c.lastInput
	c.rep.From = c.lastInput + 1
	if len(st.Claimed) > 0 {
		c.claimed = slices.Compact(slices.Sorted(slices.Values(st.Claimed)))
		c.claimFor = make(map[uint64]Hash)
	}
	c.rep.LastInput = c.lastInput
	c.state.Seed(c.p) // its sequence, time, and limits (revision 9)
	if st.LastDecision != 0 {
		c.last, c.hasLast, c.lastSeq = st.Last, true, st.LastDecision
	}
	c.prevDec, c.startDec = st.LastDecision, st.LastDecision
	c.chainer, c.chain, c.chainUnknown = events.NewChainer(), st.Chain, st.ChainUnknown
	c.wit = newWitnesses(opts.Witnesses)
	c.rep.Witnesses.Given = len(opts.Witnesses)
	if opts.Effects != nil {
		c.fx = NewEffectTracker(ReceiptJobs(opts.Effects))
	}
	c.flow = NewFlowTracker(c.max)
	if c.p.LastSeq() > 0 {
		c.flow.Seed(c.p) // an audit that starts from a snapshot
	}
	if c.p.Revision() >= events.Revision2 {
		c.rulesSeq = c.p.LastSeq() + 1 // a snapshot at revision 2: every decision read
	}
	if opts.Matrix {
		c.latest = make(map[string]events.Decision)
	}
	if opts.Job != "" {
		c.steps = make(map[uint64]int)
	}
	c.rep.Partition = c.p.Partition()
	if c.rep.Partition.Partitioned() {
		c.suffix = "." + c.rep.Partition.Token()
	}
	return c
}

func (c *checker) progress() {
	c.opts.Progress(Progress{
		Inputs: c.inRead, InputTotal: c.inEnd - min(c.rep.From-1, c.inEnd),
		Decisions: c.rep.Decisions, DecisionEnd: c.rep.DecisionEnd,
	})
}

// readInput reads the next input, checking the input stream's sequence.
func (c *checker) readInput() (events.Raw, bool) {
	if c.inDone {
		return events.Raw{}, false
	}
	raw, ok := c.in.NextInput()
	if !ok || raw.Seq > c.inEnd {
		c.inDone = true
		if c.lastInput < c.inEnd {
			c.rep.Chain.add(c.max, Break{Stream: "input", Seq: c.inEnd, Prev: c.lastInput, Kind: BreakGap,
				Detail: fmt.Sprintf("the input stream ends at %d, its last sequence is %d", c.lastInput, c.inEnd)})
			c.gaps = append(c.gaps, [2]uint64{c.lastInput + 1, c.inEnd})
			c.lastInput = c.inEnd
		}
		return events.Raw{}, false
	}
	if raw.Seq != c.lastInput+1 {
		if raw.Seq <= c.lastInput {
			c.rep.Chain.add(c.max, Break{Stream: "input", Seq: raw.Seq, Prev: c.lastInput, Kind: BreakGap,
				Detail: "input sequence goes backwards"})
			return c.readInput()
		}
		c.rep.Chain.add(c.max, Break{Stream: "input", Seq: raw.Seq, Prev: c.lastInput, Kind: BreakGap,
			Detail: fmt.Sprintf("inputs %d to %d are not in the input stream", c.lastInput+1, raw.Seq-1)})
		c.gaps = append(c.gaps, [2]uint64{c.lastInput + 1, raw.Seq - 1})
	}
	c.lastInput = raw.Seq
	c.inRead++
	c.witnessInput(&raw)
	if c.opts.Progress != nil && c.inRead%progressEvery == 0 {
		c.progress()
	}
	return raw, true
}

// isGap reports whether the input stream does not hold input seq.
func (c *checker) isGap(seq uint64) bool {
	for _, g := range c.gaps {
		if seq >= g[0] && seq <= g[1] {
			return true
		}
	}
	return false
}

// foldNext folds the next input and queues its decisions.
func (c *checker) foldNext() bool {
	raw, ok := c.readInput()
	if !ok {
		return false
	}
	if c.qh == len(c.q) {
		c.q, c.qh, c.arena = c.q[:0], 0, c.arena[:0]
		clear(c.owned)
		c.owned = c.owned[:0]
	}
	for i := c.qh; i < len(c.q); i++ { // Step reuses its output slice
		if d := &c.q[i]; !d.owned {
			c.owned = append(c.owned, c.cur[d.i])
			d.i, d.owned = len(c.owned)-1, true
		}
	}
	c.hashClaimed(raw.Seq)
	ds, err := c.p.Step(raw)
	if err != nil { // cannot happen: readInput keeps sequences increasing
		c.rep.Chain.add(c.max, Break{Stream: "input", Seq: raw.Seq, Prev: c.p.LastSeq(), Kind: BreakGap, Detail: err.Error()})
		return true
	}
	c.rep.Inputs++
	c.rep.LastInput = raw.Seq
	if c.rulesSeq == 0 && c.p.Revision() >= events.Revision2 {
		c.rulesSeq = raw.Seq
	}
	c.rep.Derived += uint64(len(ds))
	c.cur = ds
	for i := range ds {
		d := &ds[i]
		off := len(c.arena)
		c.arena = events.AppendDecision(c.arena, d)
		c.q = append(c.q, derived{key: Key{d.Cause, d.N}, of: d.Of, off: off, end: len(c.arena), subject: raw.Subject, i: i})
		if c.latest != nil && d.Job.ID != events.NoJob {
			c.latest[d.Job.ID] = *d
		}
		if d.Kind == events.KindCheckpointed && d.Checkpoint != nil {
			c.checkClaim(d)
		}
		if c.fx != nil {
			c.fx.Observe(d)
		}
		c.flow.Observe(d)
	}
	if c.steps != nil {
		c.track(raw, ds)
	}
	if c.snapData != nil && raw.Seq == c.snap.InputSeq {
		c.snapCompared = true
		if bytes.Equal(c.p.Snapshot(), c.snapData) {
			c.snap.Verified = true
		} else {
			c.snap.addProblem(fmt.Sprintf("the fold's state after input %d differs from the stored snapshot", raw.Seq))
		}
	}
	return true
}

// hashClaimed takes the fold's state hash for every claimed input before
// next, the input about to be folded, that the fold has reached: the state
// after input S is the state before the first input after S (S itself when
// the input stream holds it). One StateHash (O(jobs)) per distinct claimed
// input, however many claims name it.
func (c *checker) hashClaimed(next uint64) {
	var h Hash
	hashed := false
	for ; c.claimAt < len(c.claimed) && c.claimed[c.claimAt] < next; c.claimAt++ {
		s := c.claimed[c.claimAt]
		if s < c.p.LastSeq() {
			continue // before the audit's start: not replayed
		}
		if !hashed {
			h, hashed = c.p.StateHash(), true
		}
		c.claimFor[s] = h
	}
}

// checkClaim checks the claim of a checkpointed decision of the fold
// against the fold's state hash after the input it names.
func (c *checker) checkClaim(d *events.Decision) {
	cp := d.Checkpoint
	c.rep.Checkpoints.Claims++
	claim := CheckpointClaim{Input: d.Cause, Actor: d.Actor, InputSeq: cp.InputSeq, Claimed: cp.StateHash}
	h, ok := c.claimFor[cp.InputSeq]
	switch {
	case ok && h == Hash(cp.StateHash):
		c.rep.Checkpoints.Verified++
	case ok:
		claim.Replayed = h
		c.rep.Checkpoints.Mismatches.add(c.max, claim)
	case cp.InputSeq < c.start:
		claim.Note = fmt.Sprintf("not checked: the audit did not replay input %d (it starts after input %d)", cp.InputSeq, c.start)
		c.rep.Checkpoints.Unchecked.add(c.max, claim)
	default:
		claim.Note = fmt.Sprintf("not checked: input %d was not among the claims read ahead", cp.InputSeq)
		c.rep.Checkpoints.Unchecked.add(c.max, claim)
	}
}

// track records raw in the timeline of Options.Job if it concerns the job.
func (c *checker) track(raw events.Raw, ds []events.Decision) {
	job := c.opts.Job
	var mine []events.Decision
	for i := range ds {
		if ds[i].Job.ID == job {
			mine = append(mine, ds[i])
		}
	}
	if len(mine) == 0 && inputJob(raw.Subject) != job {
		return
	}
	c.rep.History = append(c.rep.History, mine...)
	raw.Body = bytes.Clone(raw.Body)
	c.steps[raw.Seq] = len(c.rep.Timeline)
	c.rep.Timeline = append(c.rep.Timeline, Step{Input: raw, Decisions: mine})
}

// note attaches a finding to the timeline step of input cause, if any.
func (c *checker) note(cause uint64, format string, args ...any) {
	if c.steps == nil {
		return
	}
	if i, ok := c.steps[cause]; ok {
		c.rep.Timeline[i].Notes = append(c.rep.Timeline[i].Notes, fmt.Sprintf(format, args...))
	}
}

// inputJob is the job token of an input subject ("" if it has none).
func inputJob(subject string) string {
	rest := subject
	for range 4 {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			return ""
		}
		rest = rest[i+1:]
	}
	if i := strings.IndexByte(rest, '.'); i >= 0 {
		return rest[:i]
	}
	return ""
}

func (c *checker) body(d *derived) []byte { return c.arena[d.off:d.end] }

// dec is the decision of d.
func (c *checker) dec(d *derived) *events.Decision {
	if d.owned {
		return &c.owned[d.i]
	}
	return &c.cur[d.i]
}

// decision judges one stored decision.
func (c *checker) decision(s *StoredDecision) {
	c.rep.Decisions++
	if s.Seq != c.prevDec+1 {
		c.rep.Chain.add(c.max, Break{Stream: "decision", Seq: s.Seq, Prev: c.prevDec, Kind: BreakGap,
			Detail: fmt.Sprintf("decisions %d to %d are not in the decision stream", c.prevDec+1, s.Seq-1)})
	}
	c.prevDec = s.Seq
	k := parseKey(s)
	if !k.hdrOK {
		c.rep.Chain.add(c.max, Break{Stream: "decision", Seq: s.Seq, Prev: s.Seq - 1, Kind: BreakIndex, Detail: k.hdrErr})
	}
	if d, verified := c.judge(s, &k); verified {
		c.applyStored(c.dec(d))
	} else {
		c.applyStoredBody(s.Body)
	}
	c.link(s, &k) // after judge, which folds up to the decision's cause
}

// link checks s's chain value against the one the decisions before it
// give (PROTOCOL.md §20).
func (c *checker) link(s *StoredDecision, k *skey) {
	var cause uint64
	var n, of uint32
	if k.hdrOK {
		cause, n, of = k.hdrCause, k.key.N, k.of
	}
	want := c.chainer.Next(c.chain, s.Seq, cause, n, of, s.Subject, s.Body)
	c.chain = want
	c.witnessDecision(s, cause, want)
	c.rep.ChainSeq, c.rep.ChainHead = s.Seq, want
	required := c.rulesSeq != 0 && cause >= c.rulesSeq
	if c.chainUnknown && s.Chain != "" {
		// The fold began where the chain value is not known (a
		// snapshot without one): the first readable value is adopted.
		if got, ok := events.ParseChain(s.Chain); ok {
			_ = c.chk.Check(s.Chain, got, required)
			c.chainUnknown = false
			c.chain, c.rep.ChainHead = got, got
			return
		}
	}
	err := c.chk.Check(s.Chain, want, required)
	var ce *events.ChainError
	if !errors.As(err, &ce) {
		return
	}
	c.rep.Chain.add(c.max, Break{Stream: "decision", Seq: s.Seq, Prev: s.Seq - 1, Kind: BreakLink, Detail: ce.Error()})
	if ce.Kind == events.ChainBroken {
		// Follow the log's own chain from here, so one break is
		// reported once.
		got, _ := events.ParseChain(s.Chain)
		c.chain, c.rep.ChainHead = got, got
	}
}

// judge gives s its verdict; it returns the derived decision when s
// reproduces it byte for byte.
func (c *checker) judge(s *StoredDecision, k *skey) (*derived, bool) {
	if !k.ok {
		c.extra(s, k, ExtraUnkeyed, "no valid "+events.HeaderCause+" / "+events.HeaderIndex+" headers and no cause in the body")
		return nil, false
	}
	if k.hdrOK && k.bodyOK && k.bodyCause != k.hdrCause {
		c.orphan(s, k, fmt.Sprintf("%s names input %d, the body input %d", events.HeaderCause, k.hdrCause, k.bodyCause))
		return nil, false
	}
	if k.key.Cause == 0 || k.key.Cause > c.inEnd {
		c.orphan(s, k, fmt.Sprintf("input %d is not in the input stream (last input %d)", k.key.Cause, c.inEnd))
		return nil, false
	}
	if c.hasLast && !c.last.Less(k.key) {
		if k.key == c.last {
			same := "a different body"
			if bytes.Equal(s.Body, c.lastBody) {
				same = "the same body"
			}
			c.extra(s, k, ExtraDuplicate, fmt.Sprintf("decision %s was already stored at %d, with %s", k.key, c.lastSeq, same))
		} else {
			c.extra(s, k, ExtraFork, fmt.Sprintf("after decision %s (at %d)", c.last, c.lastSeq))
		}
		return nil, false
	}
	// Where the chain stands: the next derived decision not yet matched.
	expected := Key{Cause: c.p.LastSeq() + 1}
	if c.qh < len(c.q) {
		expected = c.q[c.qh].key
	}
	if expected.Less(k.key) && c.outOfOrder(expected, k.key) {
		c.extra(s, k, ExtraOutOfOrder, fmt.Sprintf("the decisions stored after it carry on from %s", expected))
		return nil, false
	}
	// Fold up to the cause, and drop what the store skipped.
	for {
		for c.qh < len(c.q) && c.q[c.qh].key.Less(k.key) {
			c.missing(&c.q[c.qh], s.Seq)
			c.qh++
		}
		if c.p.LastSeq() >= k.key.Cause || !c.foldNext() {
			break
		}
	}
	if k.key.Cause > c.p.LastSeq() || c.isGap(k.key.Cause) {
		c.orphan(s, k, fmt.Sprintf("input %d is not in the input stream", k.key.Cause))
		return nil, false
	}
	if c.qh == len(c.q) || c.q[c.qh].key != k.key {
		c.extra(s, k, ExtraBeyond, fmt.Sprintf("input %d has fewer decisions", k.key.Cause))
		return nil, false
	}
	d := &c.q[c.qh]
	if c.equal(s, k, d) {
		c.accept(s, k)
		c.rep.Verified++
		return d, true
	}
	// A foreign decision stored just before the genuine one?
	if nx, ok := c.out.peek(0); ok {
		nk := parseKey(nx)
		if nk.ok && nk.key == k.key && c.equal(nx, &nk, d) {
			c.extra(s, k, ExtraInjected, fmt.Sprintf("decision %s is stored, as derived, at %d", k.key, nx.Seq))
			return nil, false
		}
	}
	m := Mismatch{Seq: s.Seq, Cause: k.key.Cause, N: k.key.N, Of: d.of, Diffs: diffDecision(s, k, c.dec(d), c.body(d), c.p.Partition())}
	c.rep.Mismatches.add(c.max, m)
	c.note(m.Cause, "stored decision %d (%s) differs: %s", s.Seq, k.key, m.Summary())
	c.accept(s, k)
	return nil, false
}

// outOfOrder reports whether some of the next stored decisions carry on
// the chain between lo and k, which makes k a jump out of order.
func (c *checker) outOfOrder(lo, k Key) bool {
	for i := range lookaheadWindow {
		nx, ok := c.out.peek(i)
		if !ok {
			return false
		}
		nk := parseKey(nx)
		if nk.ok && !nk.key.Less(lo) && nk.key.Less(k) {
			return true
		}
	}
	return false
}

// accept makes s the decision stored for the head of the derived queue.
func (c *checker) accept(s *StoredDecision, k *skey) {
	c.last, c.hasLast, c.lastBody, c.lastSeq = k.key, true, s.Body, s.Seq
	c.qh++
}

func (c *checker) equal(s *StoredDecision, k *skey, d *derived) bool {
	return k.hdrOK && k.of == d.of && subjectIn(s.Subject, c.suffix, c.dec(d)) && bytes.Equal(s.Body, c.body(d))
}

func (c *checker) missing(d *derived, before uint64) {
	dd := c.dec(d)
	c.rep.Missing.add(c.max, Missing{Cause: d.key.Cause, N: d.key.N, Of: d.of, Kind: dd.Kind.String(), Job: dd.Job.ID, Before: before})
	c.note(d.key.Cause, "decision %s (%s) is not in the decision stream", d.key, dd.Kind)
	if d.key.N == d.of-1 && (!c.hasLast || c.last.Cause != d.key.Cause) {
		c.rep.Holes.add(c.max, Hole{Input: d.key.Cause, Subject: d.subject, Decisions: int(d.of)})
		c.note(d.key.Cause, "no verdict of this input is stored, though later inputs are decided")
	}
}

func (c *checker) extra(s *StoredDecision, k *skey, why ExtraWhy, detail string) {
	c.rep.Extra.add(c.max, Extra{Seq: s.Seq, Cause: k.key.Cause, N: k.key.N, Of: k.of, Why: why, Detail: detail})
	c.note(k.key.Cause, "extra stored decision %d (%s): %s", s.Seq, why, detail)
}

func (c *checker) orphan(s *StoredDecision, k *skey, detail string) {
	c.rep.Orphans.add(c.max, Orphan{Seq: s.Seq, Cause: k.key.Cause, BodyCause: k.bodyCause, Detail: detail})
}

// applyStored folds a stored decision into the state the decision stream
// describes. For a verified decision it is given the fold's decision: their
// canonical encodings are equal byte for byte, and the encoding carries
// every field of the projection (durations are whole milliseconds), so
// decoding the stored body would give the same projection; only the
// decisions that are not verified are decoded (applyStoredBody).
func (c *checker) applyStored(d *events.Decision) {
	c.state.Add(d)
	if d.Kind == events.KindRulesSet {
		c.sRev = d.Revision
	}
}

func (c *checker) applyStoredBody(body []byte) {
	d, err := events.DecodeDecision(body)
	if err != nil {
		c.rep.Undecodable++
		return
	}
	c.applyStored(&d)
}

// finish classifies the tail and computes the hashes.
func (c *checker) finish() {
	rep := c.rep
	defer c.witnessesLeft() // after the tail's inputs are read
	// What the fold derived beyond the last stored decision: the tail.
	if c.qh < len(c.q) {
		first := c.q[c.qh]
		if c.hasLast && first.key.Cause == c.last.Cause {
			rep.Pending.Partial = &Partial{Input: first.key.Cause, Stored: first.key.N, Of: first.of}
			c.note(first.key.Cause, "pending: %d of its %d decisions are stored", first.key.N, first.of)
		}
		for i := c.qh; i < len(c.q); i++ {
			if d := &c.q[i]; d.key.N == 0 && (!c.hasLast || d.key.Cause != c.last.Cause) {
				c.pending(d.key.Cause)
				c.note(d.key.Cause, "pending: no verdict stored yet")
			}
		}
	}
	rep.FoldHash = c.p.StateHash()
	var rules *projector.Rules
	if c.sRev != 0 {
		// The revision as the stored decisions say; the key, which no
		// decision carries, from the input stream (the fold's).
		rules = &projector.Rules{Revision: c.sRev, LeaseKey: c.p.Rules().LeaseKey}
	}
	h, err := c.state.Hash(c.base, rules)
	if err == nil {
		rep.StoredHash = h
	}
	if c.snap != nil && c.snapData != nil && !c.snapCompared {
		c.snap.addNote(fmt.Sprintf("not compared: the audit did not replay input %d", c.snap.InputSeq))
	}
	// The inputs nobody decided yet.
	for {
		raw, ok := c.readInput()
		if !ok {
			break
		}
		c.pending(raw.Seq)
		if c.steps != nil && inputJob(raw.Subject) == c.opts.Job {
			raw.Body = bytes.Clone(raw.Body)
			c.rep.Timeline = append(c.rep.Timeline, Step{Input: raw, Pending: true})
		}
	}
	if c.latest != nil {
		ids := slices.Sorted(maps.Keys(c.latest))
		rep.Latest = make([]events.Decision, 0, len(ids))
		for _, id := range ids {
			rep.Latest = append(rep.Latest, c.latest[id])
		}
	}
	if c.steps != nil {
		sort.SliceStable(rep.Timeline, func(i, j int) bool { return rep.Timeline[i].Input.Seq < rep.Timeline[j].Input.Seq })
	}
	if c.fx != nil {
		fx := c.fx.CheckEffects(c.opts.Effects, c.opts.EffectSkew, c.max)
		rep.Effects = &fx
	}
	rep.Flow = c.flow.Result()
	if c.opts.Progress != nil {
		c.progress()
	}
}

func (c *checker) pending(seq uint64) {
	p := &c.rep.Pending
	if p.From == 0 {
		p.From = seq
	}
	p.To = seq
	p.Count++
}

// skey is the key of a stored decision, from its headers (or its body).
type skey struct {
	key    Key
	of     uint32
	ok     bool // key known
	hdrOK  bool // headers present and valid: key and of come from them
	hdrErr string

	hdrCause  uint64
	bodyOK    bool
	bodyCause uint64
	bodyN     uint32
	bodyOf    uint32
}

func parseKey(s *StoredDecision) skey {
	var k skey
	k.bodyCause, k.bodyN, k.bodyOf, k.bodyOK = bodyKey(s.Body)
	cause, err := strconv.ParseUint(s.Cause, 10, 64)
	n, of, iok := parseIndex(s.Index)
	switch {
	case s.Cause == "" && s.Index == "":
		k.hdrErr = "no " + events.HeaderCause + " / " + events.HeaderIndex + " headers"
	case err != nil:
		k.hdrErr = fmt.Sprintf("bad %s header %q", events.HeaderCause, s.Cause)
	case !iok:
		k.hdrErr = fmt.Sprintf("bad %s header %q: want n/of with n < of", events.HeaderIndex, s.Index)
	default:
		k.hdrOK, k.ok = true, true
		k.key, k.of, k.hdrCause = Key{cause, n}, of, cause
		return k
	}
	if k.bodyOK {
		k.ok = true
		k.key, k.of = Key{k.bodyCause, k.bodyN}, k.bodyOf
	}
	return k
}

func parseIndex(s string) (n, of uint32, ok bool) {
	a, b, found := strings.Cut(s, "/")
	n64, err1 := strconv.ParseUint(a, 10, 32)
	of64, err2 := strconv.ParseUint(b, 10, 32)
	if !found || err1 != nil || err2 != nil || n64 >= of64 {
		return 0, 0, false
	}
	return uint32(n64), uint32(of64), true
}

// bodyKey reads cause, n and of from the fixed start of a canonical
// decision body, without decoding it: {"v":1,"cause":C,"n":N,"of":O,...
func bodyKey(b []byte) (cause uint64, n, of uint32, ok bool) {
	var v uint64
	if b, ok = cutPrefix(b, `{"v":1,"cause":`); !ok {
		return
	}
	if cause, b, ok = leadingUint(b); !ok {
		return
	}
	if b, ok = cutPrefix(b, `,"n":`); !ok {
		return
	}
	if v, b, ok = leadingUint(b); !ok || v > 0xffffffff {
		return 0, 0, 0, false
	}
	n = uint32(v)
	if b, ok = cutPrefix(b, `,"of":`); !ok {
		return
	}
	if v, b, ok = leadingUint(b); !ok || v > 0xffffffff || len(b) == 0 || b[0] != ',' {
		return 0, 0, 0, false
	}
	return cause, n, uint32(v), true
}

func cutPrefix(b []byte, p string) ([]byte, bool) {
	if len(b) < len(p) || string(b[:len(p)]) != p {
		return b, false
	}
	return b[len(p):], true
}

func leadingUint(b []byte) (uint64, []byte, bool) {
	var v uint64
	i := 0
	for ; i < len(b) && i < 17 && b[i] >= '0' && b[i] <= '9'; i++ {
		v = v*10 + uint64(b[i]-'0')
	}
	return v, b[i:], i > 0
}

// subjectIs reports whether s is events.DecisionSubject(d), without
// building it.
func subjectIs(s string, d *events.Decision) bool {
	kind := d.Kind.String()
	p := events.DecisionPrefix
	if len(s) != len(p)+len(d.Addressee)+len(d.Job.ID)+len(kind)+3 {
		return false
	}
	i := 0
	for _, part := range [...]string{p, d.Addressee, d.Job.ID, kind} {
		if i > 0 {
			if s[i] != '.' {
				return false
			}
			i++
		}
		if s[i:i+len(part)] != part {
			return false
		}
		i += len(part)
	}
	return true
}

// lookahead is a DecisionReader with a window of decisions read ahead.
type lookahead struct {
	r   DecisionReader
	buf []StoredDecision
	h   int
	eof bool
}

func (l *lookahead) next() (StoredDecision, bool) {
	if l.h < len(l.buf) {
		d := l.buf[l.h]
		l.buf[l.h] = StoredDecision{}
		if l.h++; l.h == len(l.buf) {
			l.buf, l.h = l.buf[:0], 0
		}
		return d, true
	}
	if l.eof {
		return StoredDecision{}, false
	}
	d, ok := l.r.NextDecision()
	if !ok {
		l.eof = true
	}
	return d, ok
}

// peek returns the i-th decision after the last one returned by next; the
// pointer is valid until the next call to peek or next.
func (l *lookahead) peek(i int) (*StoredDecision, bool) {
	for l.h+i >= len(l.buf) {
		if l.eof {
			return nil, false
		}
		d, ok := l.r.NextDecision()
		if !ok {
			l.eof = true
			return nil, false
		}
		l.buf = append(l.buf, d)
	}
	return &l.buf[l.h+i], true
}
