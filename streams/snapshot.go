package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// The coordinator's snapshot in the topology's object store (SnapshotBucket):
// one object, replaced by each new snapshot, whose headers say where it
// stands in the log and where its state hash is anchored (PROTOCOL.md §19).
// The coordinator writes it; the coordinator and the auditor read it.
const (
	// SnapshotObject is the object's name.
	SnapshotObject = "projector"
	// HeaderSnapshotInput is S: the last input the state covers.
	HeaderSnapshotInput = "Tenure-Input-Seq"
	// HeaderSnapshotDecision is the decision sequence of the last decision of input S.
	HeaderSnapshotDecision = "Tenure-Decision-Seq"
	// HeaderSnapshotAnchor is A: the decision sequence of the checkpointed
	// decision that claims (S, HeaderSnapshotHash).
	HeaderSnapshotAnchor = "Tenure-Anchor-Seq"
	// HeaderSnapshotHash is H: the state hash (SHA-256 of the object's
	// bytes), 64 lower-case hexadecimal digits.
	HeaderSnapshotHash = "Tenure-State-Hash"
	// HeaderSnapshotChain is the chain value (events.HeaderChain) of the
	// decision at HeaderSnapshotDecision, 64 lower-case hexadecimal digits:
	// where the decision chain continues from after the snapshot.
	HeaderSnapshotChain = "Tenure-Decision-Chain"
)

// StoredSnapshot is the coordinator's stored snapshot as ReadSnapshot read
// and checked it: where it stands (its anchor) and its bytes (the
// projector's state, projector.Projector.Restore reads them).
type StoredSnapshot struct {
	Anchor SnapshotAnchor
	Data   []byte
}

// ErrNoSnapshot is the error of ReadSnapshot when no stored snapshot
// checks out against its anchor in the decision stream (the reason is
// wrapped with it).
var ErrNoSnapshot = errors.New("no stored snapshot checks out against its anchor in the decision stream")

// errReplaced means the snapshot object was replaced (or deleted) while it
// was read: storing a new version purges the old one's chunks.
var errReplaced = errors.New("it was replaced while read")

// ReadSnapshot reads the stored snapshot of h's topology and checks it as
// a coordinator does before restoring it: its position is the last
// decision of its input and carries its chain value, its anchor is a
// checkpointed decision claiming its input and state hash, and its bytes
// hash to that (SnapshotAnchor). Any failure is ErrNoSnapshot with the
// reason. A snapshot replaced while it was read (a live coordinator stores
// one every so often) is read again, up to five times. Without a deadline
// in ctx, a read is bounded by 10 s plus a second per 4 MiB of the
// snapshot.
//
// The archive (sealing and removing segments) and the read model of the
// state API and the web board (package api) read the snapshot so; the
// coordinator reads it while it starts reading the streams after it, and
// the auditor reads it chunk by chunk to report what it finds: both check
// it alike.
func ReadSnapshot(ctx context.Context, h *Handles) (*StoredSnapshot, error) {
	for i := 0; ; i++ {
		snap, err := readSnapshot(ctx, h)
		if !errors.Is(err, errReplaced) || i == 4 {
			return snap, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Duration(50<<i) * time.Millisecond):
		}
	}
}

// SnapshotReadTimeout bounds the read of a snapshot of size bytes: 10 s,
// plus a second for every 4 MiB (a replicated store on slow disks reads
// tens of MiB per second), at most an hour more.
func SnapshotReadTimeout(size uint64) time.Duration {
	return 10*time.Second + time.Duration(min(size>>22, 3600))*time.Second
}

func readSnapshot(ctx context.Context, h *Handles) (*StoredSnapshot, error) {
	info, err := h.Snapshots.GetInfo(ctx, SnapshotObject)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoSnapshot, Classify(err))
	}
	if _, ok := ctx.Deadline(); !ok {
		// The client bounds a read without a deadline by its default
		// timeout (5 s), too short for a large snapshot.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, SnapshotReadTimeout(info.Size))
		defer cancel()
	}
	data, err := h.Snapshots.GetBytes(ctx, SnapshotObject)
	if err != nil {
		if again, ierr := h.Snapshots.GetInfo(ctx, SnapshotObject); ierr == nil && again.NUID != info.NUID {
			return nil, fmt.Errorf("%w: %w (run again)", ErrNoSnapshot, errReplaced) // its chunks went with it
		}
		return nil, fmt.Errorf("%w: %w", ErrNoSnapshot, Classify(err))
	}
	again, err := h.Snapshots.GetInfo(ctx, SnapshotObject)
	if err != nil || again.NUID != info.NUID {
		return nil, fmt.Errorf("%w: %w (run again)", ErrNoSnapshot, errReplaced)
	}
	a, err := CheckAnchored(ctx, h.Out, info.Headers, data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoSnapshot, err)
	}
	return &StoredSnapshot{Anchor: a, Data: data}, nil
}

// CheckAnchored checks a snapshot's headers and bytes against the decision
// stream out, as a coordinator does: its position is the last decision of
// its input and carries its chain value, its anchor is a checkpointed
// decision claiming its input and state hash, and its bytes hash to that.
func CheckAnchored(ctx context.Context, out MsgGetter, hdr nats.Header, data []byte) (SnapshotAnchor, error) {
	a, err := ParseSnapshotHeaders(hdr)
	if err != nil {
		return a, err
	}
	if err := a.CheckPosition(ctx, out); err != nil {
		return a, err
	}
	if err := a.CheckAnchor(ctx, out); err != nil {
		return a, err
	}
	return a, a.CheckBytes(data)
}
