// Package bench is `tenure bench`: in one process and one run, it measures a
// raw JetStream baseline and Tenure side by side on the same embedded
// nats-server configuration, and reports both with their ratio (DESIGN.md
// §10). Every Tenure figure that has a baseline is a ratio against a baseline
// measured in the same run, so the figures hold on a shared, noisy machine.
//
// The scenarios:
//
//  1. Pipeline. Baseline: a consumer reads each input of a stream in order and
//     appends one ~200-byte message per input to a second stream, no logic;
//     the inputs are published asynchronously by another connection, which
//     keeps a fixed number of them unanswered (it counts the answers in
//     process). Tenure: simulated workers on one connection renew many
//     leases through the wire protocol, each lease again as soon as its
//     verdict is stored (read in process from the coordinator's Stats), with
//     as many leases in flight; the coordinator folds every input and
//     appends every verdict. The headline renews a worker's due leases in
//     batch renews, as the SDK does under load; then one lease per input;
//     then SDK workers end to end, each also consuming its verdicts from the
//     decision stream (which the baseline's publisher does not do). The SDK
//     path's fair baselines (issue 20): publishers on their own connections
//     that read their answers from the output stream as SDK workers do,
//     with 200-byte answers, then with answers shaped like the last renewal
//     verdict the SDK run stored (its body and stored headers).
//  2. One-at-a-time latency. Baseline: publish an input, wait until its reply
//     is stored and seen by the publisher's consumer. Tenure: Lease.Renew, the
//     verdict's round trip through the SDK. Also the expiry latency: from a
//     lease's expires_at to its expired decision being stored, on an idle
//     system, driven by the coordinator's ticks.
//  3. Replay. Baseline: an in-order read of the N-message input stream.
//     Tenure: audit.Run, the replay-and-verify of the N-input log.
//  4. The fold alone (decode included) on one core.
//  5. Resident bytes per tracked job with 1,000,000 jobs in the projection.
//  6. Cold restart of the coordinator over the N-input log, from its stored
//     snapshot and without one.
//  7. Expiry storms (issue "Nothing bricks a deployment"): N leases (100,000
//     and 1,000,000) granted by a live coordinator, which stops; the server
//     restarts in the run's sync mode and every lease falls due; a new
//     coordinator finds them all due at its first tick. Tenure: the time
//     from it being live to the last expired decision stored, and that each
//     lease expired exactly once. Baseline: one publisher storing N
//     messages of an expired decision's size into a fresh stream with the
//     decision stream's configuration, asynchronously and in atomic
//     batches (the better of the two counts).
//  8. Receipts (issue 15, "An audit that cannot be fooled"): SDK workers end
//     to end as in the pipeline's last run, with receipts off and on in the
//     same run: two sets of workers on one server and coordinator, one
//     keeping no receipts, the other a receipt.File per worker in the run's
//     directory; one set renews at a time, in 16 short alternating windows
//     (off, on, on, off, on, off, off, on, twice) so that the machine's drift
//     cancels. The ratio is on / off; the receipt files are read back
//     afterwards (every line a valid receipt) and give the receipts written
//     per second. It runs after the pipeline (--only receipts alone).
//  9. Queues (issue 31; queue.go): jobs through submit, pull and result,
//     submitted with package ops and run with worker.Run, against a raw
//     JetStream work queue with as many pull workers and handlers; then the
//     skeleton (queueskel.go): raw JetStream carrying the messages a Tenure
//     job makes, shaped as the Tenure run's, and doing nothing else, which
//     measures what the message design leaves Tenure's code at most.
//
// Cluster is `tenure bench --cluster`: on a local cluster of real nodes, SDK
// workers against raw R3 publishes with as many units in flight, raw
// messages of 200 bytes and shaped like verdicts, and the CPU time every
// process spends per unit stored.
//
// Run returns a Result; WriteTable and WriteJSON print it.
package bench
