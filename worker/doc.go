// Package worker is Tenure's Go worker SDK: acquire or accept leases, keep
// them renewed, report progress and results, and stop working the moment
// authority is lost.
//
//	w, err := worker.Connect(nc, "w1")
//	defer w.Close()
//	l, err := w.Acquire(ctx, "job-42", worker.WithLeaseDuration(30*time.Second))
//	if errors.Is(err, worker.ErrLeaseHeld) { ... } // someone else runs it
//	// do the work under l.Context(); pass l.Token() to every side effect
//	err = l.Progress(ctx, 50)
//	err = l.Complete(ctx, events.OutcomeSuccess, "")
//
// # Verdicts, not acks
//
// Every call publishes one input on tenure.in.worker.<id>.<job>.<verb> with
// a JetStream publish, learns the input's stream sequence from the PubAck,
// and returns the coordinator's verdict on it: the decision addressed to
// this worker (tenure.out.<id>.<job>.<kind>) whose cause is that sequence.
// The worker reads those decisions through one consumer (a follow.Follower,
// which replaces it without a gap if it is lost), created by Connect before
// anything is published, so that a verdict that overtakes its
// PubAck is kept until its caller asks. Offers, cancellation requests and
// the decisions fired by time (expired, unresolved) arrive on the same
// consumer.
//
// Each input has a Nats-Msg-Id "<id>-<random UUID>". A publish whose outcome
// is unknown (timeout, reconnect) is retried with the same Msg-Id and body,
// so the input stream stores it once and it gets one verdict. A renewal
// whose verdict was not learned is retried with the same renew_seq (if the
// first attempt was stored after all, the retry's verdict is
// duplicate_renew, which the lease takes as the acceptance it is).
//
// # Renewals coalesce
//
// Leases renew automatically, every RenewFraction of their duration, and
// on demand (Lease.Renew). All renewals of a Worker go through one renewer
// that keeps at most two renewal inputs awaiting their verdicts: when the
// worker is idle a renewal leaves at once, alone
// (tenure.in.worker.<id>.<job>.renew); under load, the renewals that fall due
// while the inputs in flight are being judged leave together in one batch
// renew (tenure.in.worker.<id>._.renew, up to 256 leases). Each lease is
// still judged on its own and gets its own verdict. A worker holding many
// leases thus stores one input, not one per lease, for each round of
// renewals, which is what makes durable (fsync-per-write) storage keep up.
//
// # Partitioned deployments
//
// Nothing changes for the caller: Connect finds out itself whether the
// deployment is partitioned (streams.Discover; the count is recorded in the
// streams) and, if it is, follows every partition's decision stream with a
// consumer of its own (tenure.out.<id>.> matches the partitioned
// decision subjects, tenure.out.<id>.<job>.<kind>.<k>). Each input goes to
// its job's partition, tenure.in.worker.<id>.<job>.<verb>.<k> with k the
// FNV-32a hash of the job modulo the partition count, and its verdict is
// matched by partition and sequence: every partition numbers its inputs
// itself. Renewals coalesce per partition (a batch renew names leases of
// one partition, and is sent to that partition's subject with job token
// "_"), with at most two renewal inputs in flight per partition. Offers and
// every other decision arrive from all partitions; their order is each
// partition's.
//
// # Authority
//
// A Lease's Context is cancelled, with a cause, the moment the worker must
// assume it no longer holds the lease: a refused renewal, a cancellation
// request, an expired or revoked lease, a newer generation, an ownership
// conflict, or the local deadline passing. The local deadline is
// conservative: when a grant, ACK or renewal is accepted, it is the local
// time just before that input was first published plus the duration the
// coordinator granted (expires_at minus the decision's time). Since the
// coordinator judged the input after it was published, its expiry is never
// earlier; a renewal whose verdict is not learned before the local deadline
// therefore cancels the context (ErrExpired and ErrNoVerdict) rather than
// let the worker run past a lease it may have lost.
//
// Pass Lease.Token (job, lease id, generation) with every side effect; a
// resource guarded by a Fence refuses tokens older than the newest it has
// seen, so even a paused worker that resumes cannot write over its
// successor.
//
// # Errors
//
// A verdict that does not accept the operation is returned as a
// *VerdictError: package verdict's Error, the type ops returns as well, so
// that one errors.Is or errors.As works on the errors of both clients. Its
// Is maps the decision's kind and reason to the sentinels below (the same
// values as package verdict's; errors.Is(err, worker.ErrLostAuthority) is
// the one question that matters before any side effect), and every verdict
// whose kind is not an accepted one matches ErrNotAccepted:
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
// Errors of the SDK itself wrap ErrNoVerdict (the verdict was not learned in
// time: the input may or may not have been judged), ErrClosed, ErrExpired
// (local deadline) and ErrLeaseEnded (the worker completed or released the
// lease); they name the operation and the lease.
//
// # Goroutines
//
// A Worker owns one goroutine that hands offers to Offers(), one renewer
// (and one goroutine per renewal input in flight), plus the ordered
// consumer's; each Lease owns its renew loop, which exits when the lease
// ends or authority is lost. Close stops them all and waits for them.
package worker
