// Package verdict is the error type of Tenure's clients: the worker SDK
// (package worker) and the operator client (package ops) both return a
// coordinator's verdict that did not accept their input as an *Error, and
// errors.Is matches it against the sentinels of this package. worker and
// ops re-export them under their own names (worker.VerdictError and
// ops.RejectedError are this Error; worker.ErrRejected is ErrRejected and so
// on), so a program that uses both asks one question of either:
//
//	if errors.Is(err, verdict.ErrLostAuthority) { ... } // or worker.ErrLostAuthority
//	var ve *verdict.Error // or *worker.VerdictError, *ops.RejectedError
//	if errors.As(err, &ve) { log(ve.Kind, ve.Reason, ve.Detail) }
//
// # Matching
//
// An *Error matches ErrNotAccepted when its kind is not an accepted one
// (every verdict an ops call returns as an error; ops.ErrRejected is
// ErrNotAccepted), and the sentinels its decision's kind and reason map to:
//
//	kind              reason                                   matches
//	stale             any                                      ErrStaleGeneration, ErrLostAuthority
//	lost_authority    renew_after_expiry, lease_expired        ErrLostAuthority, ErrExpired
//	lost_authority    cancel_requested                         ErrLostAuthority, ErrCancelRequested
//	lost_authority    stale_generation                         ErrLostAuthority, ErrStaleGeneration
//	lost_authority    any other                                ErrLostAuthority
//	conflict          any                                      ErrConflict, ErrLostAuthority
//	rejected          lease_held                               ErrRejected, ErrLeaseHeld
//	rejected          cancel_requested, success_after_cancel   ErrRejected, ErrCancelRequested
//	rejected          any other                                ErrRejected
//	duplicate         any                                      ErrDuplicate
//	late              ack_after_deadline, *_after_expiry       ErrLate, ErrExpired, ErrLostAuthority
//	late              progress_after_cancel                    ErrLate, ErrCancelRequested
//	late              cancel_timeout                           ErrLate, ErrCancelRequested, ErrLostAuthority
//	late              lease_ended                              ErrLate, ErrLostAuthority
//	late              late_renew, late_progress                ErrLate
//	expired           any                                      ErrExpired, ErrLostAuthority
//	ack_missed        any                                      ErrExpired, ErrLostAuthority
//	unresolved        expired_cancel_unreconciled              ErrLostAuthority, ErrCancelRequested, ErrExpired
//	unresolved        cancel_timeout                           ErrLostAuthority, ErrCancelRequested
//	cancel_requested  offer_withdrawn                          ErrCancelRequested, ErrLostAuthority
//	cancel_requested  ok                                       ErrCancelRequested
//	resolved          lease_revoked, settled                   ErrLostAuthority
//
// The table says what the decision says about the lease it concerns,
// whoever asked: an operator's cancel naming an older generation
// (stale/stale_generation) matches ErrStaleGeneration, and an offer to a
// job with a live lease (rejected/lease_held) matches ErrRejected and
// ErrLeaseHeld, as a worker's acquire would. ErrLostAuthority on an
// operator's verdict is about the lease it named, not about the operator.
//
// The table is keyed by kind and reason only: Role changes the message,
// never what an Error matches.
//
// ErrNoVerdict is for the clients' own errors: the verdict was not learned
// before the call's deadline (the input may or may not have been judged).
// The other sentinels of the worker SDK (ErrLeaseEnded, ErrClosed,
// ErrSequenceExhausted) stay in package worker: no verdict maps to them.
package verdict
