package auth

// Limits is the threat model of a deployment configured by Generate: what
// the server enforces, what Tenure itself enforces, and what remains, as
// observed with nats-server v2.15.2 (auth/limits_test.go and
// auth/attack_test.go pin each point). `tenure auth init` prints it.
const Limits = `What the server enforces (each worker is in an account of its own):
- A worker publishes only its own inputs (tenure.in.worker.<id>.>) and
  reaches, under the worker API prefix (JS.TENURE.API), only its own four
  consumers on each decision stream (names tw_<id>_0..3, filtered to
  tenure.out.<id>.>): create, read, pull, delete. No stream info (whose
  subjects filter would list every decision subject: job ids, worker
  names), no other consumer name, no other filter, no stream
  administration, no message get, no core subscription to decisions (whose
  reply subjects would show the coordinator's inboxes), nothing of another
  worker's account.
- Each worker's account has limits of its own: connections (16),
  subscriptions (1,024) and payload (64 KiB of body + 4 KiB of headers:
  the client refuses a bigger message, the server disconnects one that
  sends it), so one worker exhausts only its own.
- Dispatchers, operators and coordinators share the deployment's account,
  with the permissions of their role. Only they may request the state API
  (tenure.api.>: job projections, which carry lease ids, and queue stats);
  a worker's request is refused.

What Tenure enforces:
- Identity is the subject's: a body naming another actor is rejected
  (identity_mismatch).
- Lease ids are unguessable (rules revision 2): a worker cannot name, and
  so cannot claim or freeze, a lease it was not told. (A claim of an older
  generation is judged stale before its lease id is checked: any worker
  can raise the stale evidence counter of another job's live lease; the
  lease itself is unchanged.)
- Its readers accept only what the server delivered to their own consumer
  (the stream and consumer named in each delivery's ack reply), on inboxes
  of 128 random bits; anything else aimed at them is dropped and counted
  (tenure status: dropped). The coordinator's append replies likewise.
- The coordinator's own inputs (ticks, rules, checkpoints) carry
  unpredictable Nats-Msg-Ids: nobody can store one first to make the stream
  drop it.
- The coordinator folds in bounded slices (leadership, replies and ticks are
  served between them) and reads inputs with pull requests bounded by bytes:
  a flood is folded or rejected, never a resynchronisation loop.

What remains:
- Quotas (Options.Quotas, tenure auth init's default; PROTOCOL.md §4.2)
  bound each worker's inputs: its intake stream refuses what passes its
  backlog (worker.ErrQuota), the coordinator empties it no faster than the
  worker's rate, and not at all while storage is short (below its
  reserve), so one worker's flood fills neither the disk nor the fold's
  queue. What remains is a worker's own quota: its backlog at once, then
  its rate. Without quotas (--no-quotas, a partitioned deployment) publish
  rates are not limited: a worker can fill the input stream (and the disk)
  and delay every verdict behind its inputs. Watch the inputs per actor;
  revoke the worker's credential.
- Nats-Msg-Id: the duplicate window of TENURE_IN is stream-wide; a worker
  can store, on its own subject, a message with another publisher's future
  Nats-Msg-Id. Ids must be unguessable (the SDK's are "<id>-<random
  UUID>"), and the first attempt of an input that comes back "duplicate" is
  a collision: the Go SDK resends it under a fresh id (a bare client must
  do the same).
- A consumer's configuration is in the request body: a worker can make one
  of its own consumers push its own decisions to any subject of the
  deployment's account outside tenure.out.> (the server refuses a cycle).
  Streams and the JetStream API ignore such deliveries; core subscribers
  get them: Tenure's inboxes cannot be named and drop them, the status
  endpoint ignores them and answers from a cache at most once a second,
  and the state API (tenure.api.>) drops them unanswered. tenure serve
  answers status, $SRV and the state API, and watches the stream
  advisories, on a connection of its own with bounded pending limits: a
  flood there is dropped and counted on it, never slowing the
  coordinator's appends.
- Four consumers per worker on each decision stream, on a stream limited
  to 100,000 consumers (streams.DecisionMaxConsumers; an older deployment's
  stream has the server's default of 1,000: raise it with nats stream edit
  --max-consumers). The consumer of a worker process that died holds its
  name for 30 seconds.
- Dispatchers and operators are trusted with the deployment's account: they
  may delete any consumer on TENURE_OUT (workers' included, which the SDK
  recreates without a gap), read every decision, and share connection and
  subscription limits with the coordinators (none).
- No coordinator may update, purge or delete messages of TENURE_IN or
  TENURE_OUT (an update could trim its own log): the end of a new input
  stream's genesis is the administrator's (tenure genesis), and a live
  coordinator refuses, at once, a stream changed into a less safe
  configuration by anyone.
- The coordinator user writes TENURE_OUT: what it writes is trusted (the
  expected-last-sequence fence stops a second writer, not a wrong one);
  replaying the log (tenure audit) is the check.`
