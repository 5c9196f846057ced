package snapshot

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// Objects is what reading the snapshot needs of its object store. A
// jetstream.ObjectStore has these methods, but its GetBytes waits for the
// chunks of a version replaced while it is read until its context ends:
// over JetStream, use JetStream or NewObjects. The simulator's model of
// JetStream implements them too (through coordinator.SnapshotStore).
type Objects interface {
	// GetInfo describes the stored object (jetstream.ErrObjectNotFound:
	// none).
	GetInfo(ctx context.Context, name string, opts ...jetstream.GetObjectInfoOpt) (*jetstream.ObjectInfo, error)
	// GetBytes reads the stored object whole.
	GetBytes(ctx context.Context, name string, opts ...jetstream.GetObjectOpt) ([]byte, error)
}

// Snapshot is the stored snapshot as a Reader read it.
type Snapshot struct {
	// Info describes the version of the object read (its headers, size,
	// modification time).
	Info *jetstream.ObjectInfo
	// Anchor is what its headers say: its position and, when anchored,
	// its anchor, state hash and chain value.
	Anchor streams.SnapshotAnchor
	// Data is its bytes (nil if they were not read).
	Data []byte
	// State is Data restored into a projector of the Reader's partition
	// (nil if they were not read or do not restore).
	State *projector.Projector
}

// Reader reads and checks the stored snapshot of one partition.
type Reader struct {
	// Objects is the object store that holds it (JetStream, NewObjects,
	// or the coordinator's port).
	Objects Objects
	// Decisions reads the decision stream that anchors it.
	Decisions streams.MsgGetter
	// Partition is the partition whose state it holds
	// (projector.NewPartition).
	Partition events.Partition
	// Clock times the waits between tries (nil: the real clock).
	Clock clock.Clock
	// Ahead, if not nil, is called by Read with the position and anchor
	// of a snapshot whose anchor checks out, before its bytes are read: a
	// coordinator starts reading the streams after it meanwhile. A
	// snapshot replaced before its bytes are read is read again: Ahead is
	// then called again, maybe with another position. It is never called
	// once Read has returned.
	Ahead func(streams.SnapshotAnchor)
}

// Tries and timeouts of a Reader.
const (
	// ReplacedTries is how many times a Reader reads a snapshot replaced
	// while it was read before it returns ErrReplaced (50 ms, 100 ms,
	// 200 ms... apart).
	ReplacedTries = 5
	// UnreadableTries is how many times it tries a snapshot it could not
	// read (the object store or the decision stream did not answer)
	// before it returns ErrUnreadable, UnreadableRetry apart: a cluster
	// elects a stream's leader in a few seconds.
	UnreadableTries = 4
	UnreadableRetry = time.Second
	// RequestTimeout bounds each look-up (the object's description, a
	// decision of its anchor) when ctx has no deadline.
	RequestTimeout = 5 * time.Second
)

// ReadTimeout bounds the read of the bytes of a snapshot of size bytes
// when ctx has no deadline: 10 s, plus a second for every 4 MiB (a
// replicated store on slow disks reads tens of MiB per second), at most an
// hour more.
func ReadTimeout(size uint64) time.Duration {
	return 10*time.Second + time.Duration(min(size>>22, 3600))*time.Second
}

// Read reads the stored snapshot and checks it as a coordinator does
// before restoring it, cheapest first: its headers; its position and
// anchor against the decision stream (then Ahead is called); the bytes of
// that version, against the object's own size and digest and then the
// anchored state hash; their restore, and the input the state covers. It
// returns the snapshot only if all of it checks out; otherwise an *Error
// (and, for a finding about the snapshot, what was read of it). A
// snapshot replaced while it was read, or that could not be read, is read
// again (ReplacedTries, UnreadableTries).
func (r *Reader) Read(ctx context.Context) (*Snapshot, error) {
	return r.retry(ctx, r.read)
}

// Inspect reads the stored snapshot as an auditor does: its bytes first,
// whatever its headers say, then every check Read makes. It returns what
// it read (State is set if the bytes restore, even when a check fails) and
// the findings (ErrUnanchored, ErrMismatch, ErrFormat; joined with
// errors.Join when there are several), or the *Error that kept it from
// reading the snapshot (ErrNone, ErrUnreadable, ErrReplaced, ErrCorrupt).
// The checks of the anchor stop at the first that fails (its position and
// chain value, then its anchor, then its bytes' hash).
func (r *Reader) Inspect(ctx context.Context) (*Snapshot, error) {
	return r.retry(ctx, r.inspect)
}

// Check checks a snapshot that is not (yet) stored, its headers hdr and
// its bytes data, as Read checks the stored one (an operator putting an
// archived snapshot back checks it first). The decision stream is read
// once: an error that it could not be read is ErrUnreadable.
func (r *Reader) Check(ctx context.Context, hdr nats.Header, data []byte) (*Snapshot, error) {
	s := &Snapshot{Info: &jetstream.ObjectInfo{ObjectMeta: jetstream.ObjectMeta{Name: streams.SnapshotObject, Headers: hdr}, Size: uint64(len(data))}, Data: data}
	a, err := streams.ParseSnapshotHeaders(hdr)
	s.Anchor = a
	if err != nil {
		return s, headerErr(err)
	}
	if err := r.checkAnchor(ctx, a); err != nil {
		return s, err
	}
	if err := checkBytes(a, data); err != nil {
		return s, err
	}
	return s, r.restore(s)
}

func (r *Reader) read(ctx context.Context) (*Snapshot, error) {
	info, err := r.info(ctx)
	if err != nil {
		return nil, err
	}
	s := &Snapshot{Info: info}
	a, err := streams.ParseSnapshotHeaders(info.Headers)
	s.Anchor = a
	if err != nil {
		return s, headerErr(err)
	}
	if err := r.checkAnchor(ctx, a); err != nil {
		return s, err
	}
	if r.Ahead != nil {
		r.Ahead(a)
	}
	if err := r.bytes(ctx, s); err != nil {
		return s, err
	}
	if err := checkBytes(a, s.Data); err != nil {
		return s, err
	}
	if err := r.restore(s); err != nil {
		return s, err
	}
	return s, nil
}

func (r *Reader) inspect(ctx context.Context) (*Snapshot, error) {
	info, err := r.info(ctx)
	if err != nil {
		return nil, err
	}
	s := &Snapshot{Info: info}
	if err := r.bytes(ctx, s); err != nil {
		return s, err
	}
	var findings []error
	a, err := streams.ParseSnapshotHeaders(info.Headers)
	s.Anchor = a
	switch {
	case err != nil:
		findings = append(findings, headerErr(err))
	default:
		err := r.checkAnchor(ctx, a)
		if errors.Is(err, ErrUnreadable) {
			return s, err
		}
		if err == nil {
			err = checkBytes(a, s.Data)
		}
		if err != nil {
			findings = append(findings, err)
		}
	}
	if err := r.restore(s); err != nil {
		findings = append(findings, err)
	}
	if len(findings) == 1 {
		return s, findings[0]
	}
	return s, errors.Join(findings...)
}

// retry runs read until it returns anything but ErrReplaced or
// ErrUnreadable, or the tries are spent, or ctx ends.
func (r *Reader) retry(ctx context.Context, read func(context.Context) (*Snapshot, error)) (*Snapshot, error) {
	replaced, unreadable := 0, 0
	for {
		s, err := read(ctx)
		var wait time.Duration
		switch {
		case errors.Is(err, ErrReplaced) && replaced+1 < ReplacedTries:
			wait = time.Duration(50<<replaced) * time.Millisecond
			replaced++
		case errors.Is(err, ErrUnreadable) && unreadable+1 < UnreadableTries && ctx.Err() == nil:
			wait = UnreadableRetry
			unreadable++
		default:
			return s, err
		}
		if !r.sleep(ctx, wait) {
			return s, err
		}
	}
}

func (r *Reader) sleep(ctx context.Context, d time.Duration) bool {
	t := clock.OrReal(r.Clock).NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// bound gives ctx a deadline d away if it has none.
func bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// info reads the object's description.
func (r *Reader) info(ctx context.Context) (*jetstream.ObjectInfo, error) {
	ictx, cancel := bound(ctx, RequestTimeout)
	defer cancel()
	info, err := r.Objects.GetInfo(ictx, streams.SnapshotObject)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return nil, &Error{Kind: ErrNone}
	case err != nil:
		return nil, newErr(ErrUnreadable, streams.Classify(err), "read its description: %v", err)
	}
	return info, nil
}

// headerErr is the error of headers streams.ParseSnapshotHeaders refused.
func headerErr(err error) error {
	if errors.Is(err, streams.ErrSnapshotUnanchored) {
		return &Error{Kind: ErrUnanchored, Reason: err.Error(), Err: err}
	}
	return newErr(ErrMismatch, err, "%v", err)
}

// checkAnchor checks the snapshot's position and anchor against the
// decision stream.
func (r *Reader) checkAnchor(ctx context.Context, a streams.SnapshotAnchor) error {
	for _, check := range []func(context.Context, streams.MsgGetter) error{a.CheckPosition, a.CheckAnchor} {
		cctx, cancel := bound(ctx, RequestTimeout)
		err := check(cctx, r.Decisions)
		cancel()
		var ae *streams.AnchorError
		switch {
		case errors.As(err, &ae):
			return newErr(ErrMismatch, err, "%v", err)
		case err != nil:
			return newErr(ErrUnreadable, streams.Classify(err), "%v", err)
		}
	}
	return nil
}

// checkBytes checks the bytes read against the anchored state hash.
func checkBytes(a streams.SnapshotAnchor, data []byte) error {
	if err := a.CheckBytes(data); err != nil {
		return newErr(ErrMismatch, err, "%v", err)
	}
	return nil
}

// bytes reads the bytes of the version s.Info describes into s.Data: it
// reads the object, then its description again, which must still be that
// version's.
func (r *Reader) bytes(ctx context.Context, s *Snapshot) error {
	info := s.Info
	rctx, cancel := bound(ctx, ReadTimeout(info.Size))
	data, err := r.Objects.GetBytes(rctx, streams.SnapshotObject)
	cancel()
	if ctx.Err() != nil {
		return newErr(ErrUnreadable, ctx.Err(), "read its bytes: %v", ctx.Err())
	}
	// The description again (with a deadline of its own: the read's may
	// have passed): the bytes are of the version described only if it is
	// still the one stored.
	again, ierr := r.info(ctx)
	var e *Error
	switch {
	case errors.As(err, &e):
		return e // NewObjects's
	case errors.Is(ierr, ErrNone) || ierr == nil && again.NUID != info.NUID:
		return newErr(ErrReplaced, nil, "its version %s is no longer stored", info.NUID)
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return newErr(ErrReplaced, err, "read its bytes: %v", err)
	case errors.Is(err, ErrCorrupt) || errors.Is(err, jetstream.ErrDigestMismatch) || errors.Is(err, jetstream.ErrBadObjectMeta):
		return newErr(ErrCorrupt, err, "%v", err)
	case err != nil:
		return newErr(ErrUnreadable, streams.Classify(err), "read its bytes: %v", err)
	case ierr != nil:
		return ierr
	case uint64(len(data)) != info.Size:
		return newErr(ErrCorrupt, nil, "%d bytes read, its metadata says %d", len(data), info.Size)
	}
	s.Data = data
	return nil
}

// restore restores s.Data into s.State and requires it to cover the input
// its headers say.
func (r *Reader) restore(s *Snapshot) error {
	p := projector.NewPartition(r.Partition)
	if err := p.Restore(s.Data); err != nil {
		return newErr(ErrFormat, err, "%v", err)
	}
	s.State = p
	if p.LastSeq() != s.Anchor.InputSeq {
		return newErr(ErrMismatch, nil, "it holds the state after input %d, its headers say %d", p.LastSeq(), s.Anchor.InputSeq)
	}
	return nil
}
