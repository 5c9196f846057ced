// Package modelcheck is an exhaustive, explicit-state check of the lease
// rules over the real fold: it feeds projector.Projector.Step every
// interleaving of the inputs of a small scope (a few workers, one or two
// jobs, an operator, the coordinator's ticks, optionally a queue) up to a
// depth, and checks the rules of seed 000 and seed 004 (DESIGN.md §5) in
// every state it reaches and on every transition. `tenure` never links it:
// it is development tooling, run by `make check` (a scope that takes
// minutes) and by `go test` (a smaller one).
//
// # What an input is
//
// Inputs are events.Raw values built as a publisher would build them
// (events.InputSubject and events.AppendInputBody): identity comes from the
// subject tenure.in.<role>.<actor>.<job>.<verb>. Workers are omniscient:
// a worker may name the job's current lease (id and generation), the lease
// issued before it, the current lease id with the next generation, or a
// lease id that was never issued; it may send the next, the same or an
// older renew or progress sequence; a worker that does not hold the lease
// sends the same claims as its holder. The operator offers, cancels
// (naming no lease, or an old one), affirms (the holder or another),
// revokes, settles, retries and discards, and may switch the policy; with a
// queue in scope a dispatcher submits and workers announce capacity (one
// slot, for each ttl of the scope) and withdraw it; with a concurrency
// key in scope (rules revision 9) the submits name it and the operator
// sets its limit to each of the scope's values, or lifts it. Every input's stored time is the checker's
// choice, among the instants that matter: the fold's time, and just
// before, exactly at and (for ticks) just after each pending deadline (ACK
// deadlines, expiries, cancel deadlines, retirements, queue wake-ups, the
// end of a hold or of an announcement); with Scope.Past, also a time
// before the fold's, which the fold must clamp.
//
// # States
//
// Two states are the same when they agree on everything the fold's
// verdicts can depend on: the projections of the jobs with every time made
// relative to the fold's time, lease ids replaced by their place among the
// leases the workers know, input sequences (a queue job's submit, an
// announcement's) by their order; the announcements and standings; the
// policy; what the workers know (the lease issued before the current one,
// and the latest until each was told an announcement of its stands, while
// it is ahead: a projector may still hold an announcement that a later,
// shorter one replaced); and the authority the checker holds each holder
// to (below). Evidence the fold records but never reads (the counters of
// stale, late, duplicate and conflicting messages; the times of the last
// ACK, renewal, progress and cancel request; a live lease's times once it
// ended) is left out of a state's identity, and so is the sequence number
// of the last input. The
// projector reads none of those fields to decide anything, so two states
// that differ only there have the same futures up to that evidence; the
// rules are checked on the concrete decisions of every transition all the
// same. With a bounded depth the space is finite; the search is breadth
// first, so a violation is reported with a shortest input sequence.
//
// # The rules checked
//
// On every transition (one input stepped from a state) and in every state:
//
//   - one-holder: at most one holder has authority over a job at any stored
//     instant: no lease is granted, ACKed or renewed while another holder's
//     authority (the expires_at of its last accepted verdict, cut short
//     when its lease ended) runs past the input's time;
//   - generation: a job's generation never goes back (but when the job is
//     retired, and starts again at 1), a new lease is the next generation
//     under a lease id never issued before, and the lease id of a
//     generation never changes;
//   - expiry: a lease's authority ends at expires_at: nothing under a lease
//     (renewal, progress, result, release, cancel ACK) is accepted at or
//     after it, no live lease outlives its deadline after an input, and
//     each deadline fires at its own time (ended_at is the deadline);
//   - renew: a renewal is accepted only from the holder, naming the lease id
//     and generation, with a renew sequence above the last accepted one,
//     which it becomes, and extends from the input's time, bounded by the
//     policy and the lease's maximum lifetime;
//   - progress: accepted only from the holder of the ACTIVE lease, with a
//     higher sequence; the sequence never goes back; progress never
//     renews;
//   - ack: an ACK is accepted only from the holder of the OFFERED
//     generation before its ack_deadline (a missed ACK is never counted as
//     an ACK), makes the lease ACTIVE and is never completion; a result is
//     accepted only after an ACK (or an acquire);
//   - result: one terminal result per lease, from its holder, naming its
//     lease id and generation, while it is ACTIVE;
//   - stale: a verdict that does not accept its operation changes nothing
//     of the lease but its evidence counters (and a conflict's mark);
//   - conflict: a conflict arises only from another worker's claim on the
//     live lease's exact id and generation; while it is pending nothing
//     promotes the job (no ACK, renewal, progress, result, release, cancel
//     ACK, offer or acquire is accepted); only an operator's resolve
//     clears it;
//   - cancel: a cancel request never ends an ACTIVE lease by itself, nor
//     does its ACK; the lease then ends only by a FAILED or CANCELLED
//     result before cancel_by and expires_at, by an operator, or UNRESOLVED
//     at the earlier of the two deadlines, and UNRESOLVED ends only by an
//     operator's settle;
//   - verdict: every lease operation of an input gets exactly one verdict,
//     about its job, in order; every other decision is derived; each names
//     its input and the input's time;
//   - time: the input's time is max(the fold's time, its stored time);
//   - state: the projections the decisions carry are the fold's state
//     (as an auditor rebuilds it), and withheld fields are revealed by the
//     previous projection;
//   - queue: the queue offers only a QUEUED job that is ready and free of
//     conflict, to a worker with a standing announcement and a free slot;
//     a missed ACK, a declined offer or a release never spends an attempt,
//     and never ends a job DEAD; a cancelled queue job is never offered or
//     queued again;
//   - concurrency (revision 9): after an input that offered a job of the
//     scope's concurrency key under a limit, at most the limit of its jobs
//     are live (OFFERED or ACTIVE); after any other input, no more than
//     before (a limit revokes nothing, lowering it starts nothing); the
//     fold's count of them is the projections';
//   - reference: each lease operation of the model's verbs on a job outside
//     any queue is accepted exactly when the reference model of the
//     property tests (internal/leasemodel), seeded with the projection the
//     operation is judged against, says it may be: a valid operation that
//     is refused shows here, as an unsafe one that is accepted shows in the
//     rules above;
//   - determinism: stepping the same input on a second projector restored
//     from the same snapshot gives byte-identical decisions and the same
//     state hash; with Scope.Cold every new state is also reached by
//     replaying its whole input sequence on an empty projector, which must
//     give the same state hash and decisions; with Scope.Continuous every
//     transition is stepped on a projector that folded the whole input
//     sequence without a restore, and on one restored from the parent's
//     snapshot, which must agree (what a projector keeps beyond its
//     snapshot and reads shows there).
//
// A state that breaks a rule is reported with the input sequence that
// reaches it (each input with its decisions, projector.Describe) and not
// explored further; Run goes on with the others and reports the first
// (shortest) violation of each check.
package modelcheck
