package worker

import (
	"errors"
	"strings"

	"github.com/maknow/tenure/events"
)

// Sentinels for errors.Is. A *VerdictError matches those its decision kind
// and reason map to (see the table in the package documentation); errors the
// SDK produces itself wrap them with %w.
var (
	// ErrLostAuthority means the worker no longer holds the lease: it must
	// stop side effects at once. Every other authority-ending sentinel comes
	// with it.
	ErrLostAuthority = errors.New("worker: lost authority")
	// ErrStaleGeneration means a newer generation of the job exists (a
	// newer holder was granted the job), or a Fence refused an older token.
	ErrStaleGeneration = errors.New("worker: stale generation")
	// ErrExpired means the lease reached its expiry: the coordinator's
	// (decision expired, or a verb judged after expires_at) or the worker's
	// own conservative local deadline.
	ErrExpired = errors.New("worker: lease expired")
	// ErrConflict means another holder claims the same lease: the job is
	// blocked until an operator resolves it.
	ErrConflict = errors.New("worker: ownership conflict")
	// ErrRejected means the coordinator refused the operation (a rule, a
	// policy limit or a malformed input); the reason says which.
	ErrRejected = errors.New("worker: rejected")
	// ErrDuplicate means the operation had already been accepted (same
	// sequence, same result) under another message.
	ErrDuplicate = errors.New("worker: duplicate")
	// ErrLate means the operation arrived after the state it needed was gone
	// (after expiry, after a cancel request) or out of sequence.
	ErrLate = errors.New("worker: late")
	// ErrLeaseHeld means acquire found a live lease on the job; the
	// *VerdictError's Decision.Job names its holder.
	ErrLeaseHeld = errors.New("worker: lease held by another holder")
	// ErrCancelRequested means an operator asked for the job's cancellation:
	// stop work, then AckCancel and Complete with OutcomeCancelled or
	// OutcomeFailed.
	ErrCancelRequested = errors.New("worker: cancellation requested")
	// ErrNoVerdict means the verdict was not learned in time: the input may
	// or may not have been stored and judged. A lease treats a renewal
	// without a verdict before its local deadline as lost authority.
	ErrNoVerdict = errors.New("worker: verdict not learned in time")
	// ErrLeaseEnded is the cause of a lease context after this worker ended
	// the lease itself (an accepted Complete or Release).
	ErrLeaseEnded = errors.New("worker: lease ended")
	// ErrClosed means the Worker was closed.
	ErrClosed = errors.New("worker: closed")
	// ErrSequenceExhausted means a lease's renew or progress sequence
	// reached the protocol's largest, 2^53-1 (events.MaxSeq): the SDK sends
	// no renewal or report it would have to number past it (at a renewal a
	// millisecond, that is 285,000 years). A renewal that cannot be sent
	// ends the lease's authority, wrapping ErrLostAuthority too.
	ErrSequenceExhausted = errors.New("worker: sequence exhausted")
)

// VerdictError is a verdict of the coordinator that did not accept the
// operation, or a decision that ended a lease (expired, unresolved, cancel
// requested, revoked). Match it with errors.Is against the sentinels, or
// read the fields with errors.As.
type VerdictError struct {
	Kind     events.Kind     // the decision's kind, e.g. events.KindLostAuthority
	Reason   events.Reason   // its reason code, e.g. events.ReasonStaleGeneration
	Detail   string          // the coordinator's deterministic detail, may be empty
	Decision events.Decision // the whole decision: Job is the job's projection after it
}

func verdictError(d events.Decision) *VerdictError {
	return &VerdictError{Kind: d.Kind, Reason: d.Reason, Detail: d.Detail, Decision: d}
}

// Error renders "worker: job <job>: <kind> (<reason>)[: detail]".
func (e *VerdictError) Error() string {
	var b strings.Builder
	b.WriteString("worker: job ")
	b.WriteString(e.Decision.Job.ID)
	b.WriteString(": ")
	b.WriteString(e.Kind.String())
	b.WriteString(" (")
	b.WriteString(string(e.Reason))
	b.WriteByte(')')
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Is reports whether target is one of the sentinels e's kind and reason map
// to (the table in the package documentation).
func (e *VerdictError) Is(target error) bool {
	for _, s := range sentinels(e.Kind, e.Reason) {
		if s == target {
			return true
		}
	}
	return false
}

// sentinels is the mapping table of the package documentation. Keep both
// in step; TestVerdictErrorMapping checks the table row by row.
func sentinels(k events.Kind, r events.Reason) []error {
	switch k {
	case events.KindStale:
		return []error{ErrStaleGeneration, ErrLostAuthority}
	case events.KindLostAuthority:
		switch r {
		case events.ReasonRenewAfterExpiry, events.ReasonLeaseExpired:
			return []error{ErrLostAuthority, ErrExpired}
		case events.ReasonCancelRequested:
			return []error{ErrLostAuthority, ErrCancelRequested}
		case events.ReasonStaleGeneration:
			return []error{ErrLostAuthority, ErrStaleGeneration}
		}
		return []error{ErrLostAuthority}
	case events.KindConflict:
		return []error{ErrConflict, ErrLostAuthority}
	case events.KindRejected:
		switch r {
		case events.ReasonLeaseHeld:
			return []error{ErrRejected, ErrLeaseHeld}
		case events.ReasonCancelRequested, events.ReasonSuccessAfterCancel:
			return []error{ErrRejected, ErrCancelRequested}
		}
		return []error{ErrRejected}
	case events.KindDuplicate:
		return []error{ErrDuplicate}
	case events.KindLate:
		switch r {
		case events.ReasonAckAfterDeadline, events.ReasonProgressAfterExpiry, events.ReasonResultAfterExpiry,
			events.ReasonReleaseAfterExpiry, events.ReasonCancelAckAfterExpiry:
			return []error{ErrLate, ErrExpired, ErrLostAuthority}
		case events.ReasonProgressAfterCancel:
			return []error{ErrLate, ErrCancelRequested}
		case events.ReasonCancelTimeout:
			return []error{ErrLate, ErrCancelRequested, ErrLostAuthority}
		case events.ReasonLeaseEnded:
			return []error{ErrLate, ErrLostAuthority}
		}
		return []error{ErrLate}
	case events.KindExpired, events.KindAckMissed:
		return []error{ErrExpired, ErrLostAuthority}
	case events.KindUnresolved:
		if r == events.ReasonExpiredCancelUnreconciled {
			return []error{ErrLostAuthority, ErrCancelRequested, ErrExpired}
		}
		return []error{ErrLostAuthority, ErrCancelRequested}
	case events.KindCancelRequested:
		if r == events.ReasonOfferWithdrawn {
			return []error{ErrCancelRequested, ErrLostAuthority}
		}
		return []error{ErrCancelRequested}
	case events.KindResolved:
		if r == events.ReasonLeaseRevoked || r == events.ReasonSettled {
			return []error{ErrLostAuthority}
		}
	}
	return nil
}

// errOf returns nil for an accepted verdict and a *VerdictError otherwise.
func errOf(d events.Decision) error {
	if d.Kind.Accepted() {
		return nil
	}
	return verdictError(d)
}
