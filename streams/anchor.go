package streams

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
)

// A snapshot is checked, not trusted (PROTOCOL.md §19, step 4): whoever
// restores it (a coordinator) or starts an audit from it (tenure audit
// --from) first requires that the decision at its anchor sequence is a
// checkpointed decision claiming exactly its input sequence and state hash,
// and that its bytes hash to that state hash. The decision stream is fenced
// (only the single writer appends to it); the object store is not.

// SnapshotAnchor is what a stored snapshot's headers say: where it stands
// in the log and where its state hash is anchored.
type SnapshotAnchor struct {
	InputSeq    uint64                    // S (HeaderSnapshotInput): the last input it covers
	DecisionSeq uint64                    // HeaderSnapshotDecision: the last decision of input S
	AnchorSeq   uint64                    // A (HeaderSnapshotAnchor): the checkpointed decision claiming (S, Hash)
	Hash        [events.StateHashLen]byte // H (HeaderSnapshotHash): the state hash of its bytes
	Chain       events.Chain              // HeaderSnapshotChain: the chain value of decision DecisionSeq
}

// ErrSnapshotUnanchored is the error of ParseSnapshotHeaders for a
// snapshot without anchor headers: one stored by an older Tenure (or not by
// Tenure). Its position is still read.
var ErrSnapshotUnanchored = errors.New("no state hash anchored in the decision stream (a snapshot of an older Tenure, or not Tenure's)")

// AnchorError is why a snapshot does not check out against its anchor:
// unreadable headers, an anchor that is not a checkpointed decision
// claiming the snapshot's input and hash, bytes that do not hash to it. It
// is a finding about the snapshot, not a failure to read it.
type AnchorError struct {
	Reason string
}

// Error returns the reason.
func (e *AnchorError) Error() string { return e.Reason }

func anchorErr(format string, args ...any) error {
	return &AnchorError{Reason: fmt.Sprintf(format, args...)}
}

// ParseSnapshotHeaders reads a snapshot object's headers. Without the
// anchor headers (HeaderSnapshotAnchor and HeaderSnapshotHash both absent)
// it returns the position (InputSeq, DecisionSeq) and
// ErrSnapshotUnanchored; headers that do not parse are an *AnchorError.
func ParseSnapshotHeaders(h nats.Header) (SnapshotAnchor, error) {
	var a SnapshotAnchor
	var err1, err2 error
	a.InputSeq, err1 = strconv.ParseUint(h.Get(HeaderSnapshotInput), 10, 64)
	a.DecisionSeq, err2 = strconv.ParseUint(h.Get(HeaderSnapshotDecision), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return a, anchorErr("unreadable position (%s %q, %s %q)", HeaderSnapshotInput, h.Get(HeaderSnapshotInput),
			HeaderSnapshotDecision, h.Get(HeaderSnapshotDecision))
	}
	if h.Get(HeaderSnapshotAnchor) == "" && h.Get(HeaderSnapshotHash) == "" {
		return a, ErrSnapshotUnanchored
	}
	anchor, err := strconv.ParseUint(h.Get(HeaderSnapshotAnchor), 10, 64)
	hash, ok := events.ParseStateHash([]byte(h.Get(HeaderSnapshotHash)))
	if err != nil || anchor == 0 || !ok {
		return a, anchorErr("unreadable anchor %q or state hash %q", h.Get(HeaderSnapshotAnchor), h.Get(HeaderSnapshotHash))
	}
	a.AnchorSeq, a.Hash = anchor, hash
	chain, ok := events.ParseChain(h.Get(HeaderSnapshotChain))
	if !ok {
		return a, anchorErr("unreadable or missing chain value %s %q", HeaderSnapshotChain, h.Get(HeaderSnapshotChain))
	}
	a.Chain = chain
	return a, nil
}

// CheckChain checks that h, the headers of the stored decision at
// a.DecisionSeq, carry the snapshot's chain value (an *AnchorError if not):
// the decision chain after the snapshot continues from the log's own value,
// not from one the object store says.
func (a SnapshotAnchor) CheckChain(h nats.Header) error {
	v := h.Get(events.HeaderChain)
	got, ok := events.ParseChain(v)
	switch {
	case v == "":
		return anchorErr("decision %d, its position, carries no %s header", a.DecisionSeq, events.HeaderChain)
	case !ok:
		return anchorErr("decision %d, its position, has an unreadable %s header %q", a.DecisionSeq, events.HeaderChain, v)
	case got != a.Chain:
		return anchorErr("decision %d, its position, has chain value %s; the snapshot says %s", a.DecisionSeq, got, a.Chain)
	}
	return nil
}

// CheckPosition reads decision a.DecisionSeq from the decision stream out
// and checks that it is the last decision of input a.InputSeq (its
// Tenure-Cause and Tenure-N headers) and carries the snapshot's chain value
// (CheckChain). A decision that is not, or none at that sequence, is an
// *AnchorError; any other error reading it is returned wrapped.
func (a SnapshotAnchor) CheckPosition(ctx context.Context, out MsgGetter) error {
	m, err := out.GetMsg(ctx, a.DecisionSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return anchorErr("its position, decision %d, is not in the decision stream", a.DecisionSeq)
	}
	if err != nil {
		return fmt.Errorf("read the snapshot's position, decision %d: %w", a.DecisionSeq, err)
	}
	cause, err1 := strconv.ParseUint(m.Header.Get(events.HeaderCause), 10, 64)
	n, of, ok := strings.Cut(m.Header.Get(events.HeaderIndex), "/")
	n64, err2 := strconv.ParseUint(n, 10, 32)
	of64, err3 := strconv.ParseUint(of, 10, 32)
	if err1 != nil || err2 != nil || err3 != nil || !ok || cause != a.InputSeq || n64+1 != of64 {
		return anchorErr("its position does not match the decision stream (decision %d is not the last of input %d)", a.DecisionSeq, a.InputSeq)
	}
	return a.CheckChain(m.Header)
}

// MsgGetter reads a stream's message by sequence (jetstream.Stream does).
type MsgGetter interface {
	GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error)
}

// CheckAnchor reads decision a.AnchorSeq from the decision stream out and
// checks that it is a checkpointed decision claiming exactly (a.InputSeq,
// a.Hash). A decision that does not, or none at that sequence, is an
// *AnchorError; any other error reading it is returned wrapped (the check
// could not be made).
func (a SnapshotAnchor) CheckAnchor(ctx context.Context, out MsgGetter) error {
	m, err := out.GetMsg(ctx, a.AnchorSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return anchorErr("its anchor, decision %d, is not in the decision stream", a.AnchorSeq)
	}
	if err != nil {
		return fmt.Errorf("read the snapshot's anchor, decision %d: %w", a.AnchorSeq, err)
	}
	d, err := events.DecodeDecision(m.Data)
	switch {
	case err != nil:
		return anchorErr("its anchor, decision %d, does not decode: %v", a.AnchorSeq, err)
	case d.Kind != events.KindCheckpointed || d.Checkpoint == nil:
		return anchorErr("its anchor, decision %d, is a %s decision, not a checkpointed one", a.AnchorSeq, d.Kind)
	case d.Checkpoint.InputSeq != a.InputSeq || d.Checkpoint.StateHash != a.Hash:
		return anchorErr("its anchor, decision %d, claims input %d with state hash %x; the snapshot says input %d with %x",
			a.AnchorSeq, d.Checkpoint.InputSeq, d.Checkpoint.StateHash, a.InputSeq, a.Hash)
	}
	return nil
}

// CheckBytes checks that data, the snapshot's bytes as read, hash to
// a.Hash (an *AnchorError if not).
func (a SnapshotAnchor) CheckBytes(data []byte) error {
	if sha256.Sum256(data) != a.Hash {
		return anchorErr("its bytes do not hash to the state hash anchored at decision %d (they hash to %x, the anchor says %x)",
			a.AnchorSeq, sha256.Sum256(data), a.Hash)
	}
	return nil
}
