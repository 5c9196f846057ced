package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
// coordinator reads it (ReadSnapshotObject) once it has checked its
// anchor and started reading the streams after it, and the auditor reads
// it chunk by chunk to report what it finds: all check it alike.
func ReadSnapshot(ctx context.Context, h *Handles) (*StoredSnapshot, error) {
	return ReadSnapshotFrom(ctx, h.Snapshots, h.Out)
}

// SnapshotObjects is what reading the stored snapshot needs of its object
// store (a jetstream.ObjectStore has it; so does the simulator's model).
type SnapshotObjects interface {
	GetInfo(ctx context.Context, name string, opts ...jetstream.GetObjectInfoOpt) (*jetstream.ObjectInfo, error)
	GetBytes(ctx context.Context, name string, opts ...jetstream.GetObjectOpt) ([]byte, error)
}

// ReadSnapshotFrom is ReadSnapshot of the snapshot in objs, anchored in
// the decision stream out.
func ReadSnapshotFrom(ctx context.Context, objs SnapshotObjects, out MsgGetter) (*StoredSnapshot, error) {
	info, data, err := ReadSnapshotObject(ctx, objs)
	if err != nil {
		return nil, err
	}
	a, err := CheckAnchored(ctx, out, info.Headers, data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoSnapshot, err)
	}
	return &StoredSnapshot{Anchor: a, Data: data}, nil
}

// ReadSnapshotObject reads the stored snapshot object whole, unchecked: its
// description and its bytes, of one version (a snapshot replaced while it
// was read is read again, up to five times, and never mixed). Errors are
// ErrNoSnapshot with the reason (jetstream.ErrObjectNotFound: none stored).
func ReadSnapshotObject(ctx context.Context, objs SnapshotObjects) (*jetstream.ObjectInfo, []byte, error) {
	for i := 0; ; i++ {
		info, data, err := readSnapshotObject(ctx, objs)
		if !errors.Is(err, errReplaced) || i == 4 {
			return info, data, err
		}
		select {
		case <-ctx.Done():
			return nil, nil, err
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

func readSnapshotObject(ctx context.Context, objs SnapshotObjects) (*jetstream.ObjectInfo, []byte, error) {
	info, err := objs.GetInfo(ctx, SnapshotObject)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrNoSnapshot, Classify(err))
	}
	if _, ok := ctx.Deadline(); !ok {
		// The client bounds a read without a deadline by its default
		// timeout (5 s), too short for a large snapshot.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, SnapshotReadTimeout(info.Size))
		defer cancel()
	}
	data, err := objs.GetBytes(ctx, SnapshotObject)
	if err != nil {
		if again, ierr := objs.GetInfo(ctx, SnapshotObject); ierr == nil && again.NUID != info.NUID {
			return nil, nil, fmt.Errorf("%w: %w (run again)", ErrNoSnapshot, errReplaced) // its chunks went with it
		}
		return nil, nil, fmt.Errorf("%w: %w", ErrNoSnapshot, Classify(err))
	}
	again, err := objs.GetInfo(ctx, SnapshotObject)
	if err != nil || again.NUID != info.NUID {
		return nil, nil, fmt.Errorf("%w: %w (run again)", ErrNoSnapshot, errReplaced)
	}
	return info, data, nil
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
