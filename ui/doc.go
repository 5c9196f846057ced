// Package ui is Tenure's web UI, served by the binary itself (`tenure serve
// --http ADDR`, or `tenure ui --nats-url URL` on its own): HTML, JavaScript
// and CSS are embedded (assets/, go:embed), with no framework, no CDN and no
// external resource, so it works offline.
//
// Pages:
//
//   - / the lease board: every job with its state, holder, generation, the
//     time left on its lease or ACK deadline (counting down), its progress,
//     and the stale, late, duplicate and conflict counters of its current
//     lease (a queue job's queue and attempts, and when it is ready);
//     filtered by state, holder, queue and job, sorted (job ids and
//     holders in natural order: batch-2 before batch-10), and paginated on
//     the server (no request returns more than MaxPageSize rows, whatever
//     the number of jobs). Above it, the queues view (PROTOCOL.md §22): every queue's depth
//     (QUEUED jobs ready, waiting out a backoff, blocked by a conflict),
//     its live leases, DEAD, COMPLETED and FAILED jobs, the workers
//     announcing capacity with their slots and free slots, and its
//     completions per second over the last minute (package api's Queues,
//     the aggregates the state API answers); a queue's name filters the
//     board to its jobs;
//   - /jobs/{id} a job page: an SVG drawing of the job's leases, one band per
//     generation from offer to end, with a mark for every decision at its
//     authoritative time (rejected messages on the band of the generation
//     they name), which zooms to one generation (?gen=N: its life from
//     offer to end spans the drawing, so that two seconds of a generation
//     are not a clump beside ten minutes of another); the evidence matrix of seed 000 §13 (projector.MatrixRow
//     of every stored decision about the job, as `tenure audit --job`
//     prints it); and every input with its verdicts;
//   - /anomalies the jobs that need an operator (pending ownership conflict,
//     UNRESOLVED) and a live feed of every verdict that was not accepted;
//   - /audit runs an audit (package audit, as `tenure audit`) on demand,
//     and counts the decisions stored since the audit on screen began.
//
// A job that never had a lease and is in no queue (generation 0: a typo
// in a job id, a refused offer, a message about a job already retired) is
// not a row of the board (a queue job is one from its submit on) and counts in none of its numbers: the coordinator keeps no
// projection of it either, and rows that no retirement would ever remove
// would otherwise pile up. Its rejections are in the anomalies feed, and
// its job page works while it is among the latest DefaultUnleased such
// jobs (by first decision; at most its last 100 to 200 decisions); a
// later lease makes it a row, with the decisions it had.
//
// Every page updates live, without reloading, through server-sent events
// (/api/events) fed by the read model; the header's indicator shows the
// state of the page's stream (every page opens one).
//
// The read model follows the decision stream from its first decision (a
// follow.Follower, which replaces a consumer lost with a cluster node).
// Every decision carries the whole projection of its job, so the board is
// the latest projection per job; a job page reads the job's decisions back
// from the decision stream by their sequences, and their inputs from the
// input stream by their causes (direct gets).
//
// A partitioned deployment (Config.Partitions, found by streams.Discover)
// is followed in every partition: one Follower per partition's decision
// stream, merged into one board of the jobs of all partitions (a job lives
// in one partition, so its row is its own partition's latest projection).
// The model keeps its position in each stream, and a follow that resumes
// resumes each partition where it stopped; it is caught up when every
// partition is. Sequences only mean something with their partition: rows,
// job pages and anomalies carry their partition ("partition" in the JSON,
// a PART column on the pages), a job page reads the streams of the job's
// partition, and ?after=SEQ is a sequence of that partition's decision
// stream. /healthz is ready only when every partition has a live
// coordinator or warm standby (saying which partitions have none), /metrics
// labels per-stream metrics with their partition, and an audit audits
// every partition. Operator actions go through package ops, which
// publishes to the job's partition.
//
// The UI is read-only by default. With Config.Actions (--ui-actions) a job
// page offers the operator actions of package ops: request a cancellation,
// revoke, affirm, settle. Each is an input published as an ops actor and
// judged by the coordinator like any other; the page shows the verdict.
// Requests that change something must come from the UI's own pages
// (http.CrossOriginProtection).
//
// /healthz answers 200 only while a coordinator is live or a warm standby,
// saying which (Health); /metrics serves Metrics in the Prometheus text
// format through the standard client library.
//
// The JSON API, used by the pages:
//
//	GET  /api/config               what the pages need (actions on or off)
//	GET  /api/jobs                 a page of the board (Query, Page)
//	GET  /api/jobs/{id}            a job page's data (History); ?after=SEQ for newer decisions only
//	POST /api/jobs/{id}/action     an operator action (ActionRequest, ActionResult)
//	GET  /api/anomalies            the anomalies feed (AnomalyQuery, AnomalyPage)
//	GET  /api/queues               the queues view (QueuesPage)
//	GET  /api/events               live updates (server-sent events)
//	GET  /api/audit, POST /api/audit   the last audit, or run one (AuditRequest, AuditResult)
package ui
