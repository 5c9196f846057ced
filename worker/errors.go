package worker

import (
	"errors"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/verdict"
)

// Sentinels for errors.Is. A *VerdictError matches those its decision kind
// and reason map to (see the table in the package documentation); errors the
// SDK produces itself wrap them with %w. Those a verdict can match are
// package verdict's sentinels (the same values, which ops verdicts match
// too); ErrLeaseEnded, ErrClosed and ErrSequenceExhausted are the SDK's own.
var (
	// ErrLostAuthority means the worker no longer holds the lease: it must
	// stop side effects at once. Every other authority-ending sentinel comes
	// with it, the local deadline's ErrExpired included. A cancel request
	// (ErrCancelRequested alone) does not end authority: the holder stops
	// its work, then still ACKs the request and reports the result.
	ErrLostAuthority = verdict.ErrLostAuthority
	// ErrStaleGeneration means a newer generation of the job exists (a
	// newer holder was granted the job), or a Fence refused an older token.
	ErrStaleGeneration = verdict.ErrStaleGeneration
	// ErrExpired means the lease reached its expiry: the coordinator's
	// (decision expired, or a verb judged after expires_at) or the worker's
	// own conservative local deadline.
	ErrExpired = verdict.ErrExpired
	// ErrConflict means another holder claims the same lease: the job is
	// blocked until an operator resolves it.
	ErrConflict = verdict.ErrConflict
	// ErrRejected means the coordinator refused the operation (a rule, a
	// policy limit or a malformed input); the reason says which.
	ErrRejected = verdict.ErrRejected
	// ErrNotAccepted matches every verdict whose kind is not an accepted
	// one, whatever the kind (ops.ErrRejected is the same sentinel).
	ErrNotAccepted = verdict.ErrNotAccepted
	// ErrDuplicate means the operation had already been accepted (same
	// sequence, same result) under another message.
	ErrDuplicate = verdict.ErrDuplicate
	// ErrLate means the operation arrived after the state it needed was gone
	// (after expiry, after a cancel request) or out of sequence.
	ErrLate = verdict.ErrLate
	// ErrLeaseHeld means acquire found a live lease on the job; the
	// *VerdictError's Decision.Job names its holder.
	ErrLeaseHeld = verdict.ErrLeaseHeld
	// ErrCancelRequested means an operator asked for the job's cancellation:
	// stop work, then AckCancel and Complete with OutcomeCancelled or
	// OutcomeFailed.
	ErrCancelRequested = verdict.ErrCancelRequested
	// ErrNoVerdict means the verdict was not learned in time: the input may
	// or may not have been stored and judged. A lease treats a renewal
	// without a verdict before its local deadline as lost authority.
	ErrNoVerdict = verdict.ErrNoVerdict
	// ErrLeaseEnded is the cause of a lease context after this worker ended
	// the lease itself (an accepted Complete or Release).
	ErrLeaseEnded = errors.New("worker: lease ended")
	// ErrClosed means the Worker was closed.
	ErrClosed = errors.New("worker: closed")

	// ErrQuota means the server refused an input: the worker's intake
	// stream is full (quotas, PROTOCOL.md §4.2), because the worker sent
	// more than its rate allows, or storage is short and the coordinator
	// keeps the room left for its own decisions. Nothing was stored; the
	// input may be sent again later (the refusal wraps the server's
	// error).
	ErrQuota = errors.New("worker: input refused: over the worker's quota")
	// ErrSequenceExhausted means a lease's renew or progress sequence
	// reached the protocol's largest, 2^53-1 (events.MaxSeq): the SDK sends
	// no renewal or report it would have to number past it (at a renewal a
	// millisecond, that is 285,000 years). A renewal that cannot be sent
	// ends the lease's authority, wrapping ErrLostAuthority too.
	ErrSequenceExhausted = errors.New("worker: sequence exhausted")
	// ErrPermanent marks a handler's error as permanent: Run reports the
	// attempt FAILED with "permanent":true, and the queue does not retry
	// the job (PROTOCOL.md §22.4). Wrap it (fmt.Errorf("...: %w",
	// ErrPermanent)) or use Permanent.
	ErrPermanent = errors.New("worker: permanent failure")
	// ErrRunStopped is the cause of a handler's context when the Run that
	// called it is shutting down (its ctx ended, the Worker closed, or a
	// drain's timeout passed: WithDrain), wrapping the cause of that.
	ErrRunStopped = errors.New("worker: run stopped")
	// ErrAlreadyRunning means Run was called on a queue another Run of the
	// same Worker is running: a worker has one capacity announcement per
	// queue, so one Run per queue.
	ErrAlreadyRunning = errors.New("worker: queue already run by this worker")
)

// Permanent returns err marked as permanent: its message is err's, it
// unwraps to err and it matches ErrPermanent, so that a Handler returning
// it fails the attempt without retry. Permanent(nil) is ErrPermanent.
func Permanent(err error) error {
	if err == nil {
		return ErrPermanent
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string        { return e.err.Error() }
func (e *permanentError) Unwrap() error        { return e.err }
func (e *permanentError) Is(target error) bool { return target == ErrPermanent }

// VerdictError is a verdict of the coordinator that did not accept the
// operation, or a decision that ended a lease (expired, unresolved, cancel
// requested, revoked): package verdict's Error, which ops returns too.
// Match it with errors.Is against the sentinels, or read the fields with
// errors.As.
type VerdictError = verdict.Error

// verdictError is the *VerdictError of decision d, addressed to this worker.
func verdictError(d events.Decision) *VerdictError { return verdict.New(events.RoleWorker, d) }

// errOf returns nil for an accepted verdict and a *VerdictError otherwise.
func errOf(d events.Decision) error { return verdict.Of(events.RoleWorker, d) }
