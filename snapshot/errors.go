package snapshot

import (
	"errors"
	"fmt"
)

// The kinds of failure of a Reader: an *Error's Kind is one of them, and
// errors.Is(err, ErrX) matches it.
var (
	// ErrNone: no snapshot is stored (yet).
	ErrNone = errors.New("no snapshot stored")
	// ErrUnreadable: the object store or the decision stream did not
	// answer, or not in time (a cluster electing its leaders, a replica
	// behind): nothing is known to be wrong with the snapshot; try again
	// later.
	ErrUnreadable = errors.New("the stored snapshot could not be read")
	// ErrReplaced: the snapshot was replaced (or deleted) while it was
	// read, every time it was tried (a live coordinator stores one every
	// so often).
	ErrReplaced = errors.New("the stored snapshot was replaced while it was read")
	// ErrCorrupt: the stored object does not match its own metadata (its
	// size or its digest), or its metadata names no object.
	ErrCorrupt = errors.New("the stored snapshot object is corrupt")
	// ErrUnanchored: the snapshot's headers name no anchor in the
	// decision stream (one stored by an older Tenure, or not by Tenure); it
	// is never restored.
	ErrUnanchored = errors.New("the stored snapshot has no anchor")
	// ErrMismatch: the snapshot is not what its anchor and headers say:
	// the decision stream contradicts its position, chain value or anchor,
	// its bytes do not hash to the anchored state hash, or its state
	// covers another input than its headers say. A finding about the
	// snapshot (a *streams.AnchorError is in the chain when the decision
	// stream says so).
	ErrMismatch = errors.New("the stored snapshot is not what its anchor says")
	// ErrFormat: the snapshot's bytes do not restore: a format or a rules
	// revision this Tenure does not know (a newer Tenure's), or bytes that
	// are no snapshot (projector.ErrBadSnapshot is in the chain).
	ErrFormat = errors.New("the stored snapshot does not restore")
)

// Error is why a Reader did not return a snapshot that checks out.
type Error struct {
	// Kind is one of ErrNone, ErrUnreadable, ErrReplaced, ErrCorrupt,
	// ErrUnanchored, ErrMismatch, ErrFormat.
	Kind error
	// Reason says what was found, or what did not answer.
	Reason string
	// Err is the cause, if any (a JetStream error, a
	// *streams.AnchorError, projector.ErrBadSnapshot).
	Err error
}

// Error returns the kind and the reason.
func (e *Error) Error() string {
	if e.Reason == "" {
		return "snapshot: " + e.Kind.Error()
	}
	return "snapshot: " + e.Kind.Error() + ": " + e.Reason
}

// Unwrap returns the kind and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

func newErr(kind, cause error, format string, args ...any) *Error {
	return &Error{Kind: kind, Reason: fmt.Sprintf(format, args...), Err: cause}
}
