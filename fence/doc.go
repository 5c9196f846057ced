// Package fence carries a lease's authority to the resource its job
// writes to, and keeps the proof that it held (PROTOCOL.md §14, §25).
//
// A worker paused past its lease (a GC pause, a SIGSTOP, a VM migrated)
// wakes up believing it still holds it, and writes. Tenure has already
// given the job to a newer generation; only the resource can refuse the
// stale write, by checking the lease's fencing token against the newest
// it has seen for the job. This package is what every adapter shares:
//
//   - Token, the fencing token (job, lease id, generation), and the order
//     of a job's leases: by the input sequence in the lease id
//     (L<seq>-<tag>), which only grows, across retirements of the job id
//     too (PROTOCOL.md §13.1), generation by generation within one life;
//   - Admit, the rule every adapter applies under its own lock: a token
//     older than the lease the resource holds for the job is refused
//     (stale), one that contradicts it (the same lease sequence with
//     another id or generation, a later lease whose generation does not
//     follow) is refused (mismatch); and RefusedError, the typed refusal,
//     which errors.Is matches against worker.ErrStaleGeneration,
//     worker.ErrExpired and worker.ErrLostAuthority as a coordinator's
//     verdict would;
//   - Lease and Binder, what worker.Run's WithEffects and an adapter
//     exchange, so that a handler gets a fenced transaction or client for
//     its lease without plumbing: Run binds each attempt before its
//     handler runs, and the adapter claims the job at the resource then,
//     so that from the moment a new generation starts, the older one's
//     writes are refused whether or not the newer one has written yet;
//   - Receipt, the effect receipt: what a resource committed (job, lease
//     id, generation, effect id, the resource's commit position and its
//     clock's time), as JSON lines that `tenure audit --effects FILE`
//     checks against the log: every effect committed under a lease while
//     that lease held authority by the log's clock, at most one commit
//     per effect id, none after a later generation started, and a job's
//     leases in order at each resource.
//
// The adapters live beside it: adapters/pgfence (PostgreSQL, its own Go
// module), adapters/sqlitefence (SQLite, its own module), fence/kvfence
// (NATS KV) and fence/httpfence (an HTTP middleware and client).
//
// What a fence cannot do: a worker may present only the token it was
// given, but a resource cannot check that a token was given at all (the
// lease key is in the input stream): a forged token is the audit's to
// find (its lease is not in the log). And a stale holder whose lease ran
// out before any newer generation started is refused only by the
// deadline check, which compares the resource's clock with the lease's
// local deadline (the worker's clock): keep clocks synchronized, and let
// the audit check the commit times against the log's.
package fence
