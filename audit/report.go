package audit

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/maknow/tenure/events"
)

// Hash is a SHA-256 state hash; it renders in hex.
type Hash [32]byte

// String renders h in hex.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// MarshalText renders h in hex (JSON reports).
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// Key names a decision: the input sequence that caused it and its index
// among that input's decisions. Keys of a clean decision stream increase
// strictly.
type Key struct {
	Cause uint64 `json:"cause"`
	N     uint32 `json:"n"`
}

// Less orders keys by cause, then index.
func (k Key) Less(o Key) bool { return k.Cause < o.Cause || k.Cause == o.Cause && k.N < o.N }

// String renders k as cause.n, as projector.Describe does.
func (k Key) String() string { return fmt.Sprintf("%d.%d", k.Cause, k.N) }

// List is one class of findings: how many there are, and the first of them
// (at most Options.MaxListed).
type List[T any] struct {
	Count int `json:"count"`
	Items []T `json:"items,omitempty"`
}

func (l *List[T]) add(max int, v T) {
	l.Count++
	if max < 0 || len(l.Items) < max {
		l.Items = append(l.Items, v)
	}
}

// FieldDiff is one field of a decision that differs between the stored
// decision and the fold's.
type FieldDiff struct {
	Field   string `json:"field"` // "kind", "job.state", "subject", "header Tenure-N", ...
	Stored  string `json:"stored"`
	Derived string `json:"derived"`
}

// Mismatch is a stored decision whose key the fold also derives, with other
// content: subject, body bytes or headers.
type Mismatch struct {
	Seq   uint64      `json:"seq"` // decision stream sequence
	Cause uint64      `json:"cause"`
	N     uint32      `json:"n"`
	Of    uint32      `json:"of"` // as derived
	Diffs []FieldDiff `json:"diffs"`
}

// Summary renders the differing fields on one line, e.g.
// "kind granted≠rejected, reason ok≠lease_held" (stored first).
func (m Mismatch) Summary() string {
	var b strings.Builder
	for i, d := range m.Diffs {
		if i == 4 {
			fmt.Fprintf(&b, ", and %d more", len(m.Diffs)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(d.Field + " " + clip(d.Stored, 40) + "≠" + clip(d.Derived, 40))
	}
	return b.String()
}

func clip(s string, n int) string {
	if s == "" {
		return `""`
	}
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Missing is a decision the fold derives that the decision stream does not
// hold, although it holds decisions of later inputs (or later decisions of
// the same input).
type Missing struct {
	Cause  uint64 `json:"cause"`
	N      uint32 `json:"n"`
	Of     uint32 `json:"of"`
	Kind   string `json:"kind"`
	Job    string `json:"job"`
	Before uint64 `json:"before"` // the stored decision found where it was expected
}

// ExtraWhy says why a stored decision is extra.
type ExtraWhy string

// Reasons for an extra decision.
const (
	// ExtraDuplicate: the same key as the decision accepted just before it.
	ExtraDuplicate ExtraWhy = "duplicate"
	// ExtraFork: its key goes backwards, below a key already accepted.
	ExtraFork ExtraWhy = "fork"
	// ExtraOutOfOrder: its key jumps ahead of the decisions stored after
	// it, which carry on from where the chain was.
	ExtraOutOfOrder ExtraWhy = "out_of_order"
	// ExtraInjected: it differs from the fold's decision for its key, and
	// the very next stored decision is that decision, byte for byte.
	ExtraInjected ExtraWhy = "injected"
	// ExtraBeyond: its input was folded but derives fewer decisions.
	ExtraBeyond ExtraWhy = "beyond"
	// ExtraUnkeyed: neither its headers nor its body name a cause.
	ExtraUnkeyed ExtraWhy = "unkeyed"
)

// Extra is a stored decision the fold does not derive where it stands.
type Extra struct {
	Seq    uint64   `json:"seq"`
	Cause  uint64   `json:"cause"`
	N      uint32   `json:"n"`
	Of     uint32   `json:"of"` // as its header says
	Why    ExtraWhy `json:"why"`
	Detail string   `json:"detail,omitempty"`
}

// Orphan is a stored decision whose cause is no input: zero, beyond the
// input stream, a sequence the input stream does not hold, or its
// Tenure-Cause header and its body name different inputs.
type Orphan struct {
	Seq       uint64 `json:"seq"`
	Cause     uint64 `json:"cause"`      // as its header says (its body's if it has none)
	BodyCause uint64 `json:"body_cause"` // as its body says (0 if unreadable)
	Detail    string `json:"detail"`
}

// Hole is an input in the middle of the log without any stored verdict:
// later inputs are decided, this one is not.
type Hole struct {
	Input     uint64 `json:"input"`
	Subject   string `json:"subject"`
	Decisions int    `json:"decisions"` // how many the fold derives for it
}

// Pending is the tail of inputs that are stored but not decided yet: the
// normal state of a coordinator that is behind, or stopped between an input
// and its decisions. It is not a problem unless Options.Strict.
type Pending struct {
	From  uint64 `json:"from,omitempty"` // first pending input (0: none)
	To    uint64 `json:"to,omitempty"`   // last
	Count uint64 `json:"count"`
	// Partial is the last decided input when only some of its decisions
	// are stored (a crash between two appends; the coordinator appends the
	// rest on restart).
	Partial *Partial `json:"partial,omitempty"`
}

// Partial is an input whose first Stored decisions of Of are stored.
type Partial struct {
	Input  uint64 `json:"input"`
	Stored uint32 `json:"stored"`
	Of     uint32 `json:"of"`
}

// BreakKind classifies a break of the chain.
type BreakKind string

// Kinds of chain breaks.
const (
	// BreakGap: a stream's sequence jumps (messages were removed), or it
	// ends before its reported last sequence.
	BreakGap BreakKind = "gap"
	// BreakIndex: a decision's Tenure-Cause / Tenure-N headers are missing
	// or malformed ("n/of" with n < of).
	BreakIndex BreakKind = "index"
	// BreakLink: a decision's chain value (Tenure-Chain, PROTOCOL.md §20)
	// is missing where one is required, unreadable, or not the value the
	// decisions before it give.
	BreakLink BreakKind = "link"
)

// Break is a break of the chain, visible without the fold.
type Break struct {
	Stream string    `json:"stream"` // "input" or "decision"
	Seq    uint64    `json:"seq"`    // the message after the break (or the malformed one)
	Prev   uint64    `json:"prev"`   // the message before it, for gaps
	Kind   BreakKind `json:"kind"`
	Detail string    `json:"detail"`
}

// SnapshotCheck is what the audit found about the stored snapshot.
type SnapshotCheck struct {
	InputSeq    uint64 `json:"input_seq"`    // Tenure-Input-Seq: the last input it covers
	DecisionSeq uint64 `json:"decision_seq"` // Tenure-Decision-Seq: the last decision of that input
	// AnchorSeq and StateHash are its Tenure-Anchor-Seq and
	// Tenure-State-Hash headers (zero: none, a snapshot of an older Tenure).
	AnchorSeq uint64 `json:"anchor_seq,omitempty"`
	StateHash Hash   `json:"state_hash,omitzero"`
	Size      int    `json:"size"`
	// Anchored: it checks out as a coordinator checks it before restoring
	// it (PROTOCOL.md §19): decision AnchorSeq is a checkpointed decision
	// claiming exactly (InputSeq, StateHash), and its bytes hash to
	// StateHash. Only an anchored snapshot is used (Config.From).
	Anchored bool `json:"anchored"`
	// Used: the audit started from it (Config.From).
	Used bool `json:"used"`
	// Verified: the fold reached its input and produced these very bytes.
	Verified bool `json:"verified"`
	// Problem says why it does not check out ("" if it does): a finding.
	Problem string `json:"problem,omitempty"`
	// Note says why it was not used or not compared, if so, and that it
	// is not anchored (no finding: a coordinator refuses it and folds from
	// the first input).
	Note string `json:"note,omitempty"`
}

// addNote appends a note to s.Note.
func (s *SnapshotCheck) addNote(note string) {
	if s.Note != "" {
		s.Note += "; "
	}
	s.Note += note
}

// addProblem appends a problem to s.Problem.
func (s *SnapshotCheck) addProblem(problem string) {
	if s.Problem != "" {
		s.Problem += "; "
	}
	s.Problem += problem
}

// CheckpointClaim is a claim of a checkpoint input, as the fold recorded it
// in a checkpointed decision: the state after input InputSeq hashes to
// Claimed (PROTOCOL.md §6.16, §19).
type CheckpointClaim struct {
	Input    uint64 `json:"input"`     // the checkpoint input
	Actor    string `json:"actor"`     // the coordinator that claimed it
	InputSeq uint64 `json:"input_seq"` // the input the claimed state is after
	Claimed  Hash   `json:"claimed"`
	// Replayed is the hash of the fold's state after InputSeq (zero when
	// not checked).
	Replayed Hash `json:"replayed,omitzero"`
	// Note says why the claim was not checked ("" when it was).
	Note string `json:"note,omitempty"`
}

// Checkpoints is what the audit found about the checkpoint claims the fold
// recorded: every one is checked against the replay's own state hash.
type Checkpoints struct {
	Claims   uint64 `json:"claims"`   // checkpointed decisions the fold derived
	Verified uint64 `json:"verified"` // claims the replay bears out
	// Mismatches are the claims whose state hash is not the replay's: a
	// finding each (a coordinator would trust a snapshot that such a
	// claim anchors and whose bytes hash to it, which is not the log's
	// state).
	Mismatches List[CheckpointClaim] `json:"mismatches"`
	// Unchecked are the claims about an input the audit did not replay
	// (before its start, with Config.From): notes, not findings.
	Unchecked List[CheckpointClaim] `json:"unchecked"`
}

// Progress is handed to Options.Progress during a long audit.
type Progress struct {
	Inputs      uint64 // inputs read so far
	InputTotal  uint64 // inputs to read
	Decisions   uint64 // decisions read so far
	DecisionEnd uint64 // decisions to read
}

// Step is one input of a job's timeline with the fold's verdicts about the job.
type Step struct {
	Input     events.Raw        // the stored input
	Decisions []events.Decision // the fold's decisions about the job (none when pending)
	Notes     []string          // problems found with those decisions
	Pending   bool              // stored, not decided yet
}

// ArchiveCheck says what an audit read from an archive directory: its
// segments, read and checked against their manifests (an archive that does
// not check out is an error of Run, not a finding), ending at input Inputs
// and decision Decisions; the streams were read from right after them.
type ArchiveCheck struct {
	Dir       string `json:"dir"`
	Segments  int    `json:"segments"`
	Inputs    uint64 `json:"inputs"`    // last archived input
	Decisions uint64 `json:"decisions"` // last archived decision
}

// Report is the outcome of an audit.
type Report struct {
	// Partition is the partition audited (Start.Partition, from
	// Config.Topology.Partition): the zero value for an unpartitioned
	// deployment. A partitioned deployment is audited one partition at a
	// time, each with its own Report (see Deployment).
	Partition events.Partition `json:"-"`

	From        uint64 `json:"from"`         // first input audited
	InputEnd    uint64 `json:"input_end"`    // last input sequence when the audit started
	DecisionEnd uint64 `json:"decision_end"` // last decision sequence when the audit started
	Inputs      uint64 `json:"inputs"`       // inputs replayed through the fold
	LastInput   uint64 `json:"last_input"`   // last input replayed
	Derived     uint64 `json:"derived"`      // decisions the fold derived
	Decisions   uint64 `json:"decisions"`    // stored decisions read
	Verified    uint64 `json:"verified"`     // stored decisions reproduced byte for byte
	// ChainHead is the chain value of decision ChainSeq, the last one read
	// (as stored after a break): what a signed chain head or a receipt of
	// that decision must name.
	ChainSeq  uint64       `json:"chain_seq"`
	ChainHead events.Chain `json:"chain_head"`

	Mismatches List[Mismatch] `json:"mismatches"`
	Missing    List[Missing]  `json:"missing"`
	Extra      List[Extra]    `json:"extra"`
	Orphans    List[Orphan]   `json:"orphans"`
	Holes      List[Hole]     `json:"holes"`
	Chain      List[Break]    `json:"chain"`
	Pending    Pending        `json:"pending"`
	Snapshot   *SnapshotCheck `json:"snapshot,omitempty"`
	// Archive is what the audit read from the archive (Config.Archive),
	// nil without one.
	Archive *ArchiveCheck `json:"archive,omitempty"`
	// Witnesses are the receipts and chain heads checked (Options.Witnesses).
	Witnesses Witnesses `json:"witnesses"`
	// Effects are the effect receipts checked (Options.Effects), nil
	// without any.
	Effects *Effects `json:"effects,omitempty"`
	// Flow is the evidence that the flow rules of rules revision 8
	// held (PROTOCOL.md §26.3), and their breaches.
	Flow Flow `json:"flow"`
	// Checkpoints are the checkpoint claims the fold recorded, checked
	// against the replay.
	Checkpoints Checkpoints `json:"checkpoints"`
	// Lockdown is why the streams' configuration would let history be
	// rewritten ("" when they are locked down: streams.Handles.Verify).
	Lockdown string `json:"lockdown,omitempty"`
	// Undecodable counts stored decisions (not verified) whose body could
	// not be decoded, so that StoredHash leaves them out.
	Undecodable int `json:"undecodable"`

	// FoldHash is the fold's projector.StateHash after the last input
	// replayed; StoredHash the hash rebuilt from the stored decisions.
	FoldHash   Hash `json:"fold_hash"`
	StoredHash Hash `json:"stored_hash"`

	Strict  bool          `json:"strict"`
	Elapsed time.Duration `json:"elapsed_ns"`

	// Latest is the fold's last decision about every job (Options.Matrix),
	// ordered by job id: the evidence matrix.
	Latest []events.Decision `json:"-"`
	// History is every decision of Options.Job, in order.
	History []events.Decision `json:"-"`
	// Timeline is every input of Options.Job with its verdicts, in order.
	Timeline []Step `json:"-"`
}

// HashesEqual reports whether the fold's state hash equals the one rebuilt
// from the stored decisions.
func (r *Report) HashesEqual() bool { return r.FoldHash == r.StoredHash }

// Problems counts the findings that mean the log is not reproduced: every
// mismatch, missing, extra and orphan decision, hole, chain break,
// checkpoint claim the replay does not bear out, effect finding, breach of a
// flow rule, a snapshot that does not
// check out, streams that are not locked down, and unequal hashes (unless
// the tail is partial, which makes them differ by design). Pending inputs
// count only when Strict.
func (r *Report) Problems() int {
	n := r.Mismatches.Count + r.Missing.Count + r.Extra.Count + r.Orphans.Count + r.Holes.Count + r.Chain.Count
	n += r.Checkpoints.Mismatches.Count
	n += r.Witnesses.Findings.Count
	if r.Effects != nil {
		n += r.Effects.Findings.Count
	}
	n += r.Flow.Findings.Count
	if r.Snapshot != nil && r.Snapshot.Problem != "" {
		n++
	}
	if r.Lockdown != "" {
		n++
	}
	if !r.HashesEqual() && r.Pending.Partial == nil {
		n++
	}
	if r.Strict {
		n += int(r.Pending.Count)
		if r.Pending.Partial != nil {
			n++
		}
	}
	return n
}

// OK reports whether everything was reproduced.
func (r *Report) OK() bool { return r.Problems() == 0 }

// Rate is the number of inputs replayed per second.
func (r *Report) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Inputs) / r.Elapsed.Seconds()
}

// PartitionAudit is the audit of one partition of a deployment: its
// Report, or Err when the audit could not be carried out.
type PartitionAudit struct {
	Partition events.Partition
	Report    *Report
	Err       error
}

// OK reports whether the partition was audited and everything in it was
// reproduced.
func (a PartitionAudit) OK() bool { return a.Err == nil && a.Report != nil && a.Report.OK() }

// Totals sums the audits of the partitions of a deployment.
type Totals struct {
	Partitions int    // partitions audited (or attempted)
	OK         int    // partitions that reproduced everything
	Failed     []int  // indexes (in the audits) of partitions with problems
	Errors     []int  // indexes of partitions that could not be audited
	Problems   int    // problems over all partitions
	Inputs     uint64 // inputs replayed
	Decisions  uint64 // stored decisions read
	Verified   uint64 // stored decisions reproduced byte for byte
	Pending    uint64 // pending inputs
}

// Sum adds up audits.
func Sum(audits []PartitionAudit) Totals {
	var t Totals
	for i, a := range audits {
		t.Partitions++
		switch {
		case a.Err != nil || a.Report == nil:
			t.Errors = append(t.Errors, i)
			continue
		case a.Report.OK():
			t.OK++
		default:
			t.Failed = append(t.Failed, i)
		}
		r := a.Report
		t.Problems += r.Problems()
		t.Inputs += r.Inputs
		t.Decisions += r.Decisions
		t.Verified += r.Verified
		t.Pending += r.Pending.Count
	}
	return t
}

// AllOK reports whether every partition was audited and reproduced
// everything.
func (t Totals) AllOK() bool { return t.OK == t.Partitions && t.Partitions > 0 }
