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
//     board to its jobs, and its workers cell opens the list of its
//     workers (the state API's queue.get): each one's announcement,
//     standing (PROTOCOL.md §22.8: window, strikes, hold) and what it did
//     with the queue's jobs (offers, declines, releases, missed ACKs,
//     expiries, completions, failures), the held and most struck first, so
//     that an operator finds the worker that refuses what it is offered;
//   - /jobs/{id} a job page: an SVG drawing of the job's leases, one band per
//     generation from offer to end, with a mark for every decision at its
//     authoritative time (rejected messages on the band of the generation
//     they name), which zooms to one generation (?gen=N: its life from
//     offer to end spans the drawing, so that two seconds of a generation
//     are not a clump beside ten minutes of another); the evidence matrix of seed 000 §13 (projector.MatrixRow
//     of every stored decision about the job, as `tenure audit --job`
//     prints it); and every input with its verdicts;
//   - /anomalies the jobs that need an operator (pending ownership conflict,
//     UNRESOLVED, DEAD) and a live feed of every verdict that was not
//     accepted;
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
// The board shows package api's read model of the decision streams (an
// api.Model, of which the board's model is an api.View): in tenure serve
// the state API's (Config.Model: one read model per process, so that the
// board and tenure jobs agree), in tenure ui one of its own, which Run
// keeps up to date (api.Follow: from the first decision, or from the
// coordinator's stored snapshot when the streams' first segments were
// archived and removed). Every decision carries the whole projection of
// its job, so the board is the latest projection per job; a job page reads
// the job's decisions back from the decision stream by their sequences,
// and their inputs from the input stream by their causes (direct gets). A
// job restored from the snapshot is on the board without decisions (they
// were removed: the archive has them), marked "from the snapshot".
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
// # Access
//
// The board opens only to a credential: a token (Token: "tenure_<role>_"
// and 256 random bits from crypto/rand, in a file of mode 0600) with the
// role it grants. `tenure auth init` writes OperatorTokenFile and
// ViewerTokenFile beside its credentials; `tenure serve --http` makes the
// pair in its data directory on its first start (EnsureTokenFiles) and
// logs where they are, never what they are; --ui-token-file FILE names
// others. The server keeps the SHA-256 of each token, compares in constant
// time, and keeps sessions by the SHA-256 of their ids.
//
//   - A person logs in at /login with a token's text; the answer is a
//     session cookie (SessionCookie: HttpOnly, SameSite=Strict, Path=/,
//     Secure over TLS or with Config.SecureCookies) lasting
//     Config.SessionTTL, and POST /logout ends it. A program sends
//     Authorization: Bearer <token> instead.
//   - Without a credential every page redirects to /login (303), and every
//     other request answers 401 (with WWW-Authenticate: Bearer): the JSON
//     API, the live updates, the scripts. Only /healthz, /metrics, the login
//     page and its style sheet and icon are open.
//   - Every state-changing request (an action, an audit, the logout) must
//     come from this site: Sec-Fetch-Site, if sent, says same-origin (or
//     none), and Origin, if sent, names this host. A request with a session
//     cookie is a browser's: it must carry one of the two (a browser sends
//     Origin on every POST, so their absence is not taken for the same
//     site) and the session's CSRF token in CSRFHeader (an HMAC-SHA256 of
//     the session id under a key of the process, which the pages read from
//     GET /api/config, an answer no other site can read). A bearer token
//     without a cookie needs no CSRF token: a browser adds no Authorization
//     header by itself, and another site's page cannot add one to a request
//     here without a CORS preflight, which this server never grants; its
//     Origin, if it has one, is still checked. The login form (no session
//     yet) must come with an Origin or Sec-Fetch-Site of this site, so that
//     no other site logs a browser in with a token of its choosing.
//   - A viewer (Viewer) sees the jobs, their states, holders, generations,
//     deadlines, counters and timelines, the queues and the anomalies; no
//     lease id (a live one is a capability: whoever knows it can renew,
//     complete or claim the lease, and freeze the job in an ownership
//     conflict), no payload (it may carry a submitter's secrets), no input
//     body (a body names the lease it claims and a submit its payload), no
//     worker's detail of a result (Row.ResultDetail: free text that may be
//     as sensitive as a payload; an operator's rows have it, read from the
//     result input by api.Results, since no decision carries it): a
//     viewer's rows have no lease_id, a job page's decisions are re-encoded
//     with Hidden for the lease id and payload (the timeline draws the
//     same), and its inputs come without body (History.Redacted,
//     HistoryInput.Redacted). Audits are the operator's (their reports
//     name lease ids and input bodies, and each replays the whole log), and
//     so are actions: a viewer gets 403.
//   - An operator (Operator) sees everything, runs audits, and, with
//     Config.Actions (--ui-actions), uses the operator actions of package
//     ops on a job page: request a cancellation, revoke, affirm, settle an
//     UNRESOLVED job, retry or discard a DEAD queue job, each sent only
//     after a confirmation (a second click).
//     Each is an input published as the ops actor Config.ActorID, on
//     Config.ActionsConn (`tenure serve --ui-credential`, the ops user
//     `tenure auth init` makes for the board, since the coordinator's user
//     may publish no ops input), judged by the coordinator like any other;
//     the page shows the verdict.
//
// /healthz answers 200 only while a coordinator is live or a warm standby,
// saying which (Health); /metrics serves Metrics in the Prometheus text
// format through the standard client library. Both stay open, for probes
// and scrapers, and carry counts only: sequences, lags, jobs per state,
// decisions per kind and reason, and coordinator ids, partitions and queue
// names as labels; no job id, worker name, lease id or payload (a coordinator id is
// a name, not a secret: it is in every tick's subject).
//
// The JSON API, used by the pages:
//
//	GET  /api/config               what the pages need: the session's role and CSRF token, actions on or off
//	GET  /api/jobs                 a page of the board (Query, Page)
//	GET  /api/jobs/{id}            a job page's data (History); ?after=SEQ for newer decisions only
//	POST /api/jobs/{id}/action     an operator action (ActionRequest, ActionResult)
//	POST /api/queues/{queue}/dead  retry or discard every DEAD job of a queue (DeadActionRequest, DeadActionResult)
//	GET  /api/anomalies            the anomalies feed (AnomalyQuery, AnomalyPage)
//	GET  /api/queues               the queues view (QueuesPage); ?queue=Q one queue's, with its workers
//	GET  /api/events               live updates (server-sent events)
//	GET  /api/audit, POST /api/audit   the last audit, or run one (AuditRequest, AuditResult); operators only
//	GET  /login, POST /login       the login form, and a login (token, next): a session cookie
//	POST /logout                   the end of the session
package ui
