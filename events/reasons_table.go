package events

// Reasons. The set is closed: PROTOCOL.md documents each code.
const (
	ReasonOk                        Reason = "ok"                          // accepted as asked
	ReasonCappedByLifetime          Reason = "capped_by_lifetime"          // accepted; expires_at capped at issued_at + max_lifetime
	ReasonOfferWithdrawn            Reason = "offer_withdrawn"             // cancel of an offer not yet ACKed: the offer ends CANCELLED
	ReasonConflictAffirmed          Reason = "conflict_affirmed"           // resolve affirm: the named holder keeps the lease, the conflict is cleared
	ReasonLeaseRevoked              Reason = "lease_revoked"               // resolve revoke: the lease ends REVOKED, the conflict is cleared
	ReasonConflictCleared           Reason = "conflict_cleared"            // resolve revoke of a lease no longer live: only the conflict is cleared
	ReasonSettled                   Reason = "settled"                     // resolve settle: an unresolved job gets its terminal outcome
	ReasonLeaseExpired              Reason = "lease_expired"               // the lease reached (or had reached) expires_at without a terminal result
	ReasonExpiredCancelUnreconciled Reason = "expired_cancel_unreconciled" // the lease expired while cancellation was requested and not reconciled
	ReasonAckDeadlinePassed         Reason = "ack_deadline_passed"         // no ACK arrived before ack_deadline
	ReasonCancelTimeout             Reason = "cancel_timeout"              // cancellation was not reconciled before the cancel deadline (also the answer to a result sent after it)
	ReasonBadSubject                Reason = "bad_subject"                 // the subject is not tenure.in.<role>.<actor>.<job>.<verb> with valid tokens
	ReasonWrongRole                 Reason = "wrong_role"                  // this role may not publish this verb
	ReasonWrongPartition            Reason = "wrong_partition"             // the job belongs to another partition of a partitioned deployment
	ReasonSyntaxError               Reason = "syntax_error"                // the body is not valid JSON
	ReasonNotObject                 Reason = "not_object"                  // the body is not a JSON object
	ReasonUnknownField              Reason = "unknown_field"               // a field this input kind does not have
	ReasonDuplicateKey              Reason = "duplicate_key"               // a key appears twice
	ReasonCaseVariantKey            Reason = "case_variant_key"            // a key differs from a known field only in case
	ReasonInvalidUtf8               Reason = "invalid_utf8"                // a string is not valid UTF-8 (or holds a lone surrogate)
	ReasonControlChar               Reason = "control_char"                // a string holds a control character
	ReasonTrailingData              Reason = "trailing_data"               // data follows the JSON object
	ReasonMissingField              Reason = "missing_field"               // a required field is absent
	ReasonWrongType                 Reason = "wrong_type"                  // a field has the wrong JSON type
	ReasonNullValue                 Reason = "null_value"                  // a value is null (anywhere, nested values included)
	ReasonBadNumber                 Reason = "bad_number"                  // a number is not a plain integer (fraction, exponent, leading zero, -0)
	ReasonBadDuration               Reason = "bad_duration"                // a duration is negative, zero or longer than 30 days
	ReasonBadSequence               Reason = "bad_sequence"                // a sequence or generation is 0 or above 2^53-1
	ReasonBadValue                  Reason = "bad_value"                   // a value is outside its documented range
	ReasonBadToken                  Reason = "bad_token"                   // an id is not 1 to 64 characters of [A-Za-z0-9_-] (or is the reserved _)
	ReasonBadEnum                   Reason = "bad_enum"                    // a value is not one of the documented names
	ReasonBadTime                   Reason = "bad_time"                    // sent_at is not an RFC 3339 time from 1678-01-01 to 2262-04-11T23:47:16.854775807Z
	ReasonTooLarge                  Reason = "too_large"                   // the body, a text or a batch is over its documented limit
	ReasonTooDeep                   Reason = "too_deep"                    // objects or arrays nest deeper than the format allows
	ReasonUnsupportedVersion        Reason = "unsupported_version"         // v is not 1
	ReasonIdentityMismatch          Reason = "identity_mismatch"           // the body names another actor or job than the subject
	ReasonBadPolicy                 Reason = "bad_policy"                  // the policy's limits contradict each other
	ReasonNoSuchJob                 Reason = "no_such_job"                 // the job has never had a lease
	ReasonNoSuchLease               Reason = "no_such_lease"               // no lease with this id and generation exists for the job
	ReasonStaleGeneration           Reason = "stale_generation"            // the generation is older than the job's current one
	ReasonFutureGeneration          Reason = "future_generation"           // the generation is newer than the job's current one
	ReasonHolderMismatch            Reason = "holder_mismatch"             // the lease belongs to another holder and is no longer live
	ReasonOwnershipConflict         Reason = "ownership_conflict"          // another holder claims the job's live generation: the job is blocked until resolve
	ReasonConflictPending           Reason = "conflict_pending"            // the job has an unresolved ownership conflict
	ReasonNotAcked                  Reason = "not_acked"                   // the lease has not been ACKed yet
	ReasonNotOffered                Reason = "not_offered"                 // ACK of a lease that was acquired, not offered: there is nothing to ACK
	ReasonLeaseEnded                Reason = "lease_ended"                 // the lease already ended (result, release, revoke or withdrawn offer)
	ReasonCancelRequested           Reason = "cancel_requested"            // cancellation was requested: the lease may not be extended or released
	ReasonAckAfterDeadline          Reason = "ack_after_deadline"          // the ACK arrived after ack_deadline
	ReasonRenewAfterExpiry          Reason = "renew_after_expiry"          // the renewal arrived at or after expires_at
	ReasonProgressAfterExpiry       Reason = "progress_after_expiry"       // the progress report arrived at or after expires_at
	ReasonResultAfterExpiry         Reason = "result_after_expiry"         // the result arrived at or after expires_at
	ReasonCancelAckAfterExpiry      Reason = "cancel_ack_after_expiry"     // the cancel ACK arrived after the lease ended (expiry or cancel timeout)
	ReasonReleaseAfterExpiry        Reason = "release_after_expiry"        // the release arrived at or after expires_at
	ReasonLateRenew                 Reason = "late_renew"                  // the renew sequence is lower than the accepted one
	ReasonLateProgress              Reason = "late_progress"               // the progress sequence is lower than the accepted one
	ReasonProgressAfterCancel       Reason = "progress_after_cancel"       // progress reported after cancellation was requested
	ReasonSequenceReused            Reason = "sequence_reused"             // the accepted sequence was sent again with other content
	ReasonDuplicateAck              Reason = "duplicate_ack"               // the ACK was already accepted
	ReasonDuplicateRenew            Reason = "duplicate_renew"             // this renew sequence was already accepted
	ReasonDuplicateProgress         Reason = "duplicate_progress"          // this progress sequence was already accepted
	ReasonDuplicateCancel           Reason = "duplicate_cancel"            // cancellation was already requested
	ReasonDuplicateCancelAck        Reason = "duplicate_cancel_ack"        // the cancel ACK was already accepted
	ReasonDuplicateResult           Reason = "duplicate_result"            // the same terminal result was already accepted
	ReasonDuplicateRelease          Reason = "duplicate_release"           // the lease was already released
	ReasonResultConflicts           Reason = "result_conflicts"            // another terminal result was already accepted
	ReasonSuccessAfterCancel        Reason = "success_after_cancel"        // SUCCESS after a cancel request: reconcile with CANCELLED or FAILED
	ReasonNoCancelRequested         Reason = "no_cancel_requested"         // cancel ACK without a cancel request
	ReasonLeaseHeld                 Reason = "lease_held"                  // the job has a live lease
	ReasonJobUnresolved             Reason = "job_unresolved"              // the job is UNRESOLVED: an operator must settle it first
	ReasonJobClosed                 Reason = "job_closed"                  // the job ended COMPLETED or CANCELLED and takes no new lease
	ReasonMaxGenerations            Reason = "max_generations"             // the job reached the policy's max_generations
	ReasonDurationOutOfPolicy       Reason = "duration_out_of_policy"      // the asked duration is outside the policy's min/max lease
	ReasonNoLiveLease               Reason = "no_live_lease"               // the job has no live lease to act on
	ReasonNothingToResolve          Reason = "nothing_to_resolve"          // nothing for this action: affirm needs a conflict, revoke a conflict or a live lease, settle an UNRESOLVED job
	ReasonAffirmMismatch            Reason = "affirm_mismatch"             // affirm names another lease, generation or holder than the live one
	ReasonRulesInForce              Reason = "rules_in_force"              // a rules input for a revision at or below the one in force: nothing changes
	ReasonBadCheckpoint             Reason = "bad_checkpoint"              // a checkpoint names an input sequence that is not before it
	ReasonRetentionPassed           Reason = "retention_passed"            // the job's last lease ended retain_ms ago: it leaves the projection, its id is free again
	// revision 4 on: queues
	ReasonDuplicateSubmit Reason = "duplicate_submit" // the job was already submitted with the same body: nothing changes
	ReasonSubmitConflicts Reason = "submit_conflicts" // the job was already submitted with another body (the detail names the first field that differs)
	ReasonJobExists       Reason = "job_exists"       // submit of a job id that is a job outside any queue
	ReasonJobQueued       Reason = "job_queued"       // offer or acquire of a queue job: its queue offers it to workers that pull
	ReasonDequeued        Reason = "dequeued"         // cancel of a QUEUED job: it ends CANCELLED without another attempt
	ReasonAttemptFailed   Reason = "attempt_failed"   // the attempt's result was FAILED and retryable
	ReasonOfferDeclined   Reason = "offer_declined"   // the offered worker released the offer: the job is queued again at once, the attempt not counted
	ReasonReleased        Reason = "released"         // the holder released the lease: the job is queued again at once, the attempt not counted
	ReasonRetried         Reason = "retried"          // resolve retry: a DEAD job is queued again with a fresh attempt budget
	ReasonDiscarded       Reason = "discarded"        // resolve discard: a DEAD job leaves the projection, its id is free again
	// revision 8 on: flow control
	ReasonDuplicateUniqueKey Reason = "duplicate_unique_key" // submit naming a unique key another job of the queue holds (duplicate_of names it): nothing changes
	ReasonUniqueKeyHeld      Reason = "unique_key_held"      // retry of a DEAD job whose unique key another job of the queue holds now (duplicate_of names it)
	// revision 9 on: concurrency keys
	ReasonLimitsFull Reason = "limits_full" // a limit input for a key without a limit while MaxLimits limits are in force: nothing changes
	// revision 10 on: schedules
	ReasonNoSuchSchedule Reason = "no_such_schedule" // a schedule's pause, resume or delete naming no schedule: nothing changes
	ReasonSchedulesFull  Reason = "schedules_full"   // a schedule's set of a new id while MaxSchedules schedules are defined: nothing changes
	ReasonFireLate       Reason = "fire_late"        // schedule_missed: due times that passed unfired (the deployment was down, the fold reached them over the grace late, or a set replaced the schedule before a tick reached them)
	ReasonPausedThrough  Reason = "paused_through"   // schedule_missed: due times that passed while the schedule was paused (recorded at its resume, or at a set that replaces it)
)

var reasonDocs = []struct {
	Reason Reason
	Doc    string
}{
	{ReasonOk, "accepted as asked"},
	{ReasonCappedByLifetime, "accepted; expires_at capped at issued_at + max_lifetime"},
	{ReasonOfferWithdrawn, "cancel of an offer not yet ACKed: the offer ends CANCELLED"},
	{ReasonConflictAffirmed, "resolve affirm: the named holder keeps the lease, the conflict is cleared"},
	{ReasonLeaseRevoked, "resolve revoke: the lease ends REVOKED, the conflict is cleared"},
	{ReasonConflictCleared, "resolve revoke of a lease no longer live: only the conflict is cleared"},
	{ReasonSettled, "resolve settle: an unresolved job gets its terminal outcome"},
	{ReasonLeaseExpired, "the lease reached (or had reached) expires_at without a terminal result"},
	{ReasonExpiredCancelUnreconciled, "the lease expired while cancellation was requested and not reconciled"},
	{ReasonAckDeadlinePassed, "no ACK arrived before ack_deadline"},
	{ReasonCancelTimeout, "cancellation was not reconciled before the cancel deadline (also the answer to a result sent after it)"},
	{ReasonBadSubject, "the subject is not tenure.in.<role>.<actor>.<job>.<verb> with valid tokens"},
	{ReasonWrongRole, "this role may not publish this verb"},
	{ReasonWrongPartition, "the job belongs to another partition of a partitioned deployment"},
	{ReasonSyntaxError, "the body is not valid JSON"},
	{ReasonNotObject, "the body is not a JSON object"},
	{ReasonUnknownField, "a field this input kind does not have"},
	{ReasonDuplicateKey, "a key appears twice"},
	{ReasonCaseVariantKey, "a key differs from a known field only in case"},
	{ReasonInvalidUtf8, "a string is not valid UTF-8 (or holds a lone surrogate)"},
	{ReasonControlChar, "a string holds a control character"},
	{ReasonTrailingData, "data follows the JSON object"},
	{ReasonMissingField, "a required field is absent"},
	{ReasonWrongType, "a field has the wrong JSON type"},
	{ReasonNullValue, "a value is null (anywhere, nested values included)"},
	{ReasonBadNumber, "a number is not a plain integer (fraction, exponent, leading zero, -0)"},
	{ReasonBadDuration, "a duration is negative, zero or longer than 30 days"},
	{ReasonBadSequence, "a sequence or generation is 0 or above 2^53-1"},
	{ReasonBadValue, "a value is outside its documented range"},
	{ReasonBadToken, "an id is not 1 to 64 characters of [A-Za-z0-9_-] (or is the reserved _)"},
	{ReasonBadEnum, "a value is not one of the documented names"},
	{ReasonBadTime, "sent_at is not an RFC 3339 time from 1678-01-01 to 2262-04-11T23:47:16.854775807Z"},
	{ReasonTooLarge, "the body, a text or a batch is over its documented limit"},
	{ReasonTooDeep, "objects or arrays nest deeper than the format allows"},
	{ReasonUnsupportedVersion, "v is not 1"},
	{ReasonIdentityMismatch, "the body names another actor or job than the subject"},
	{ReasonBadPolicy, "the policy's limits contradict each other"},
	{ReasonNoSuchJob, "the job has never had a lease"},
	{ReasonNoSuchLease, "no lease with this id and generation exists for the job"},
	{ReasonStaleGeneration, "the generation is older than the job's current one"},
	{ReasonFutureGeneration, "the generation is newer than the job's current one"},
	{ReasonHolderMismatch, "the lease belongs to another holder and is no longer live"},
	{ReasonOwnershipConflict, "another holder claims the job's live generation: the job is blocked until resolve"},
	{ReasonConflictPending, "the job has an unresolved ownership conflict"},
	{ReasonNotAcked, "the lease has not been ACKed yet"},
	{ReasonNotOffered, "ACK of a lease that was acquired, not offered: there is nothing to ACK"},
	{ReasonLeaseEnded, "the lease already ended (result, release, revoke or withdrawn offer)"},
	{ReasonCancelRequested, "cancellation was requested: the lease may not be extended or released"},
	{ReasonAckAfterDeadline, "the ACK arrived after ack_deadline"},
	{ReasonRenewAfterExpiry, "the renewal arrived at or after expires_at"},
	{ReasonProgressAfterExpiry, "the progress report arrived at or after expires_at"},
	{ReasonResultAfterExpiry, "the result arrived at or after expires_at"},
	{ReasonCancelAckAfterExpiry, "the cancel ACK arrived after the lease ended (expiry or cancel timeout)"},
	{ReasonReleaseAfterExpiry, "the release arrived at or after expires_at"},
	{ReasonLateRenew, "the renew sequence is lower than the accepted one"},
	{ReasonLateProgress, "the progress sequence is lower than the accepted one"},
	{ReasonProgressAfterCancel, "progress reported after cancellation was requested"},
	{ReasonSequenceReused, "the accepted sequence was sent again with other content"},
	{ReasonDuplicateAck, "the ACK was already accepted"},
	{ReasonDuplicateRenew, "this renew sequence was already accepted"},
	{ReasonDuplicateProgress, "this progress sequence was already accepted"},
	{ReasonDuplicateCancel, "cancellation was already requested"},
	{ReasonDuplicateCancelAck, "the cancel ACK was already accepted"},
	{ReasonDuplicateResult, "the same terminal result was already accepted"},
	{ReasonDuplicateRelease, "the lease was already released"},
	{ReasonResultConflicts, "another terminal result was already accepted"},
	{ReasonSuccessAfterCancel, "SUCCESS after a cancel request: reconcile with CANCELLED or FAILED"},
	{ReasonNoCancelRequested, "cancel ACK without a cancel request"},
	{ReasonLeaseHeld, "the job has a live lease"},
	{ReasonJobUnresolved, "the job is UNRESOLVED: an operator must settle it first"},
	{ReasonJobClosed, "the job ended COMPLETED or CANCELLED and takes no new lease"},
	{ReasonMaxGenerations, "the job reached the policy's max_generations"},
	{ReasonDurationOutOfPolicy, "the asked duration is outside the policy's min/max lease"},
	{ReasonNoLiveLease, "the job has no live lease to act on"},
	{ReasonNothingToResolve, "nothing for this action: affirm needs a conflict, revoke a conflict or a live lease, settle an UNRESOLVED job"},
	{ReasonAffirmMismatch, "affirm names another lease, generation or holder than the live one"},
	{ReasonRulesInForce, "a rules input for a revision at or below the one in force: nothing changes"},
	{ReasonBadCheckpoint, "a checkpoint names an input sequence that is not before it"},
	{ReasonRetentionPassed, "the job's last lease ended retain_ms ago: it leaves the projection, its id is free again"},
	{ReasonDuplicateSubmit, "the job was already submitted with the same body: nothing changes"},
	{ReasonSubmitConflicts, "the job was already submitted with another body (the detail names the first field that differs)"},
	{ReasonJobExists, "submit of a job id that is a job outside any queue"},
	{ReasonJobQueued, "offer or acquire of a queue job: its queue offers it to workers that pull"},
	{ReasonDequeued, "cancel of a QUEUED job: it ends CANCELLED without another attempt"},
	{ReasonAttemptFailed, "the attempt's result was FAILED and retryable"},
	{ReasonOfferDeclined, "the offered worker released the offer: the job is queued again at once, the attempt not counted"},
	{ReasonReleased, "the holder released the lease: the job is queued again at once, the attempt not counted"},
	{ReasonRetried, "resolve retry: a DEAD job is queued again with a fresh attempt budget"},
	{ReasonDiscarded, "resolve discard: a DEAD job leaves the projection, its id is free again"},
	{ReasonDuplicateUniqueKey, "submit naming a unique key another job of the queue holds (duplicate_of names it): nothing changes"},
	{ReasonUniqueKeyHeld, "retry of a DEAD job whose unique key another job of the queue holds now (duplicate_of names it)"},
	{ReasonLimitsFull, "a limit input for a key without a limit while 1,024 limits are in force: nothing changes"},
	{ReasonNoSuchSchedule, "a schedule's pause, resume or delete naming no schedule: nothing changes"},
	{ReasonSchedulesFull, "a schedule's set of a new id while 1,024 schedules are defined: nothing changes"},
	{ReasonFireLate, "schedule_missed: due times that passed unfired (the deployment was down, the fold reached them over the grace late, or a set replaced the schedule before a tick reached them)"},
	{ReasonPausedThrough, "schedule_missed: due times that passed while the schedule was paused (recorded at its resume, or at a set that replaces it)"},
}
