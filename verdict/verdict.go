package verdict

import (
	"errors"
	"fmt"
	"strings"

	"github.com/maknow/tenure/events"
)

// Sentinels for errors.Is; see the table in the package documentation. The
// texts are the worker SDK's, which re-exports them: its errors wrap them
// with %w and print them.
var (
	// ErrNotAccepted matches every verdict whose kind is not an accepted
	// one (ops.ErrRejected is this sentinel).
	ErrNotAccepted = errors.New("verdict: not accepted")
	// ErrLostAuthority means the holder no longer holds the lease: it must
	// stop side effects at once. Every other authority-ending sentinel comes
	// with it.
	ErrLostAuthority = errors.New("worker: lost authority")
	// ErrStaleGeneration means a newer generation of the job exists (a
	// newer holder was granted the job), or a fence refused an older token.
	ErrStaleGeneration = errors.New("worker: stale generation")
	// ErrExpired means the lease reached its expiry: the coordinator's
	// (decision expired, or a verb judged after expires_at) or the worker's
	// own conservative local deadline.
	ErrExpired = errors.New("worker: lease expired")
	// ErrConflict means another holder claims the same lease: the job is
	// blocked until an operator resolves it.
	ErrConflict = errors.New("worker: ownership conflict")
	// ErrRejected means the coordinator refused the operation (a rule, a
	// policy limit or a malformed input): decision kind rejected; the reason
	// says which.
	ErrRejected = errors.New("worker: rejected")
	// ErrDuplicate means the operation had already been accepted (same
	// sequence, same result) under another message.
	ErrDuplicate = errors.New("worker: duplicate")
	// ErrLate means the operation arrived after the state it needed was gone
	// (after expiry, after a cancel request) or out of sequence.
	ErrLate = errors.New("worker: late")
	// ErrLeaseHeld means the job has a live lease of another holder (an
	// acquire or an offer found it); the *Error's Decision.Job names the
	// holder.
	ErrLeaseHeld = errors.New("worker: lease held by another holder")
	// ErrCancelRequested means an operator asked for the job's cancellation:
	// stop work, then AckCancel and Complete with OutcomeCancelled or
	// OutcomeFailed.
	ErrCancelRequested = errors.New("worker: cancellation requested")
	// ErrNoVerdict means the verdict was not learned in time: the input may
	// or may not have been stored and judged.
	ErrNoVerdict = errors.New("worker: verdict not learned in time")
)

// Error is a verdict of the coordinator that did not accept an input, or
// a decision that ended a lease (expired, unresolved, cancel requested,
// revoked). Match it with errors.Is against the sentinels, or read the
// fields with errors.As.
type Error struct {
	Kind     events.Kind     // the decision's kind, e.g. events.KindLostAuthority
	Reason   events.Reason   // its reason code, e.g. events.ReasonStaleGeneration
	Detail   string          // the coordinator's deterministic detail, may be empty
	Decision events.Decision // the whole decision: Job is the job's projection after it
	// Role is the role of the client that received the verdict: it chooses
	// the form of the message (see Error), nothing else.
	Role events.Role
}

// New returns the Error of decision d as received by a client of role.
func New(role events.Role, d events.Decision) *Error {
	return &Error{Kind: d.Kind, Reason: d.Reason, Detail: d.Detail, Decision: d, Role: role}
}

// Of returns nil for an accepted verdict and New(role, d) otherwise.
func Of(role events.Role, d events.Decision) error {
	if d.Kind.Accepted() {
		return nil
	}
	return New(role, d)
}

// Error renders the verdict as each client always has:
//
//	worker: job <job>: <kind> (<reason>)[: <detail>]   a worker's (events.RoleWorker)
//	ops: <verb> <job>: <kind>/<reason>[ (<detail>)]     an operator's (events.RoleOps)
//
// and, for any other role, the worker's form with the prefix "verdict:".
func (e *Error) Error() string {
	if e.Role == events.RoleOps {
		s := fmt.Sprintf("ops: %s %s: %s/%s", e.Decision.Verb, e.Decision.Job.ID, e.Kind, e.Reason)
		if e.Detail != "" {
			s += " (" + e.Detail + ")"
		}
		return s
	}
	var b strings.Builder
	if e.Role == events.RoleWorker {
		b.WriteString("worker: job ")
	} else {
		b.WriteString("verdict: job ")
	}
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

// Is reports whether target is ErrNotAccepted (for a kind that is not an
// accepted one) or one of the sentinels e's kind and reason map to (the
// table in the package documentation).
func (e *Error) Is(target error) bool {
	if target == ErrNotAccepted {
		return !e.Kind.Accepted()
	}
	for _, s := range sentinels(e.Kind, e.Reason) {
		if s == target {
			return true
		}
	}
	return false
}

// sentinels returns the sentinels a verdict of kind k and reason r matches
// besides ErrNotAccepted: the table of the package documentation. Keep
// both in step; TestMapping checks the table row by row.
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
