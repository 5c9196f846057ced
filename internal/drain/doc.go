// Package drain is the end-to-end drain of a queue (PROTOCOL.md §22) by
// worker processes under faults, and its checks.
//
// Run (harness.go) is the drain itself, for the tests of this package and
// of the adapters' (adapters/pgfence runs it against PostgreSQL, with
// Hooks that make each attempt's effect a fenced transaction, and once
// without the fence, to show the audit of its effect receipts naming the
// stale commits). The test (drain_test.go) starts an embedded nats-server and a
// coordinator in its own process, three worker processes (the test binary
// run again as RunWorker: the worker SDK's Run, on a connection journaled
// by a chaos.Tap, with handlers that fail at random, retryably), and
// submits N jobs to one queue. While the workers drain the queue it
// SIGKILLs them one at a time (each is restarted under its id) and
// SIGSTOPs one for longer than its leases, then SIGCONTs it. Every handler
// that succeeds writes its job's side effect to a Store, with its lease's
// fencing token, before it returns; the Store admits a write through a
// worker.Fence, so that a handler that lost its lease and writes after a
// newer attempt of its job wrote is refused.
//
// Once every job has ended, Check requires, from the decision stream and
// the Store's writes alone: every job COMPLETED, by exactly one SUCCESS;
// the Store's effect of each job written by the attempt that completed it;
// no write accepted after a newer generation's, and every refusal a stale
// write. chaos.Check runs over the same log and the clients' journals: no
// acknowledged input lost, none stored that no client sent, no two holders
// at once, no accepted effect of a stale generation, decisions equal to
// the fold of the input stream.
package drain
