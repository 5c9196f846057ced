// Package audit replays Tenure's log and checks that every stored decision is
// reproduced, bit for bit, by the fold (DESIGN.md §1, §3, §5).
//
// An audit reads the input stream and the decision stream in order, folds
// every input with a fresh projector (or one restored from the stored
// snapshot, after checking it), and walks both sequences of decisions side
// by side, keyed by (cause, n): the input sequence that caused a decision
// and its index among that input's decisions. Every stored decision gets
// exactly one verdict:
//
//   - verified: subject, body bytes and Tenure-Cause / Tenure-N headers equal
//     the fold's;
//   - mismatch: same key, different content (with a field-level diff);
//   - extra: the fold derives nothing there: a duplicate, a fork (its key
//     goes backwards), an out-of-order or injected decision, an index beyond
//     the input's decision count, or no key at all;
//   - orphan: its cause is no input of the input stream (zero, beyond the
//     stream, a missing sequence) or its headers and body disagree on it.
//
// Every derived decision that is not stored is missing, except at the tail:
// inputs after the last decided one, and the rest of the last decided input,
// are pending (a coordinator that is behind, or that crashed between two
// appends, catches up on restart), not a hole. Inputs in the middle without
// any stored verdict are holes. Sequence jumps in either stream and
// malformed decision headers are breaks of the chain.
//
// Every checkpoint claim is checked (PROTOCOL.md §19): a checkpoint input
// claims that the state after an earlier input S hashes to H, and the fold
// records the claim, without judging it, in a checkpointed decision (the
// anchor a coordinator requires before it trusts a snapshot). The audit
// reads the checkpoint inputs ahead, hashes its own state after every
// claimed input once, and checks every claim its fold records against it:
// a claim the replay does not bear out is a finding
// (Report.Checkpoints.Mismatches); one about an input before the audit's
// start cannot be checked, and is a note (Unchecked).
//
// The stored snapshot is read and checked by the reader a coordinator
// restores it with (package snapshot, Reader.Inspect: the audit reads its
// bytes whatever its headers say, to compare them with the fold): the
// decision at its anchor
// sequence is a checkpointed decision claiming exactly its input and state
// hash, and its bytes hash to that state hash; and it restores, holds the
// input its headers say, and its decision sequence is that input's last
// decision. With Config.From the audit starts from it only if it checks
// out; one that does not is a finding, and the audit replays from the
// first input. One without an anchor (stored by an older Tenure, which a
// coordinator refuses) is not used either, and is a note. On a full replay
// the snapshot is also compared, byte for byte, with the fold's state
// after its input.
//
// Finally the audit compares two state hashes: the fold's
// projector.StateHash and one rebuilt, with projector.RebuildHash, from the
// stored decisions alone (the job projections they carry, the cause and time
// of the last one, the policy of the last policy_set). They are equal when
// the log is clean.
//
// The package is pure where it can be: Check is the whole comparison over
// two readers and does no I/O; Run opens the streams read-only
// (streams.Open: nothing is created, nothing is published), reads the
// checkpoint inputs ahead through a filtered consumer, and feeds Check
// through two consumers read concurrently in batches; OpenDataDir
// serves a copy of a stopped data directory from a throw-away embedded
// server, so that the original is never touched. WriteSummary and
// WriteTimeline render what a Report holds; projector.WriteMatrix renders
// its evidence rows.
package audit
