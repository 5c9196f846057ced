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
// that keeps at most four renewal inputs awaiting their verdicts: when the
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
// deployment is partitioned (streams.DiscoverWorker: the partition
// streams its consumer look-ups find) and, if it is, follows every partition's decision stream with a
// consumer of its own (tenure.out.<id>.> matches the partitioned
// decision subjects, tenure.out.<id>.<job>.<kind>.<k>). Each input goes to
// its job's partition, tenure.in.worker.<id>.<job>.<verb>.<k> with k the
// FNV-32a hash of the job modulo the partition count, and its verdict is
// matched by partition and sequence: every partition numbers its inputs
// itself. Renewals coalesce per partition (a batch renew names leases of
// one partition, and is sent to that partition's subject with job token
// "_"), with at most four renewal inputs in flight per partition. Offers and
// every other decision arrive from all partitions; their order is each
// partition's.
//
// # Queues: Run
//
// Run takes the jobs of a queue (PROTOCOL.md §22), in the manner of River
// and asynq: the worker pulls, the queue's fold offers, a handler runs.
//
//	err := w.Run(ctx, "thumbnails", func(ctx context.Context, j *worker.Job) error {
//		if bad(j.Payload) {
//			return worker.Permanent(errors.New("bad payload")) // FAILED, not retried
//		}
//		return render(ctx, j.Payload, j.Lease.Token()) // nil: SUCCESS; an error: retried after a backoff
//	}, worker.WithConcurrency(4))
//
// Run announces capacity with pull inputs on
// tenure.in.worker.<id>._.pull: slots is the most of the queue's live
// leases the worker holds (the concurrency), so announcing the same
// number again is harmless, and it announces again every third of the ttl
// (WithCapacityTTL) so that its capacity never lapses while it runs; a
// worker that vanishes stops getting offers when the ttl runs out. It
// accepts the offers the queue makes (assigned decisions) and runs the
// handler on each in a goroutine of its own, with the lease's context,
// which a cancellation request, an expiry or a revocation cancels with its
// cause, and which the end of Run's ctx cancels too (ErrRunStopped). The
// handler's return becomes the attempt's result: nil SUCCESS, an error
// FAILED (retried after a backoff until max_attempts, then DEAD), an error
// matching ErrPermanent FAILED without retry, a panic FAILED; after a
// cancellation request the worker reconciles with CANCELLED; after any
// other loss of authority nothing is reported. Offers of other queues and
// offers made by a dispatcher reach Offers() or the Run of their queue, so
// one Worker can run several queues, one Run each.
//
// Run's ACKs and results coalesce as renewals do: a worker keeps at most
// four ACK inputs and four result inputs awaiting their verdicts (per
// partition); idle, each leaves at once, alone, and under load those that
// fall due meanwhile leave together, in one batch ack or batch result of
// up to 256 leases (rules revision 7, PROTOCOL.md §22.9), each lease
// judged and answered on its own: one input stored for many jobs. An
// input whose verdicts were not learned is sent again under its Msg-Id
// until the offer's ACK deadline (the lease's expiry, for a result). A
// coordinator whose log is below revision 7 refuses batches (bad_subject):
// the worker then sends each ACK and result alone.
//
// Shutdown (ctx ends): the capacity is withdrawn (slots 0) before anything
// else is sent, offers that arrive after are declined, the handlers'
// contexts are cancelled and Run waits for them; a handler that returns an
// error after that has its lease released, which is not counted as an
// attempt (the job is retried at once, by another worker). Run then
// returns nil. A graceful stop (WithDrain, River's Stop next to ctx's
// StopAndCancel) withdraws the capacity and declines new offers the same
// way, but lets the running handlers finish, up to the drain's timeout,
// before it cancels them. A worker process should drain at its first
// SIGTERM or SIGINT: a process killed with its announcement standing is
// offered jobs until the offers time out, which a restart under the same
// id then waits for (examples/queue-worker). WithResultHandler is told
// how each attempt ended, for a log line per outcome.
//
// A worker restarted under the same id after a crash inherits what its
// previous process left: the queue counts that process's live leases
// against the new announcement's slots until they expire (each expiry
// counts as an attempt), and offers made to the previous announcement
// before the new Run starts reach Offers(), where, unread, they lapse at
// their ACK deadline (counted too). Start Run right after Connect.
//
// In a partitioned deployment each partition matches its own jobs, and a
// pull goes to one partition. Run announces to every partition, to
// partition k slots = the leases of k it holds + its free slots overall
// (a lease its coordinator ended is no longer held, even while its
// handler runs; a handler that returned frees its slot at once); so every
// partition may offer each free slot, and Run keeps its concurrency by
// declining the surplus: it first lowers that partition's announcement
// (so the declined job is not offered to it again), then releases the
// offer, which is not counted as an attempt and goes back to its queue at
// once. Announcements are corrected whenever the slots to announce
// change, one pull in flight per partition. Each job accepted in one
// partition thus may cost a decline in each of the others while the
// worker is full: the price of partitions that do not share a view of the
// worker's capacity.
//
// # Tracing
//
// With WithTracing (or OpenTelemetry's global TracerProvider and
// propagator installed), Run starts a span per handler run (tracing.SpanRun),
// a child of the trace context the offer carried (the submit's), and hands
// the handler a ctx holding it; the lease's ACK, renewals, progress and
// result carry its context in their traceparent header, and so does any
// input sent with a ctx holding a span. Offer.TraceContext gives an
// offer's. The SDK links the OpenTelemetry API only: with nothing
// installed, nothing is recorded or propagated (PROTOCOL.md §27).
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
// successor. Package fence and its adapters (adapters/pgfence,
// adapters/sqlitefence, fence/kvfence, fence/httpfence) carry the rule to
// real resources: Run's WithEffects binds each attempt to one before its
// handler runs (the job is claimed there, so an older lease's writes are
// refused from then on), and a refusal matches ErrLostAuthority with
// ErrStaleGeneration or ErrExpired, as a verdict would.
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
//
// Run owns one announcer per partition and one goroutine per offer it
// takes (its ACK, its handler, its result) or declines; they exit when
// Run's ctx ends, and Run waits for them before it returns. Close does not
// wait for a Run: it cancels it (Run then returns ErrClosed once its
// handlers have returned).
package worker
