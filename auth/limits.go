package auth

// Limits says what the generated server permissions cannot enforce, as
// observed with nats-server v2.15.2 (auth/limits_test.go pins each point).
// `tenure auth init` prints it.
const Limits = `What server permissions cannot enforce:
- Nats-Msg-Id: the server cannot restrict header values, and the duplicate
  window of TENURE_IN is stream-wide. A worker can publish, on its own
  subject, a message with another publisher's future Nats-Msg-Id. Ids must be
  unguessable (the SDK's are "<id>-<random UUID>"), and the first attempt of
  an input that comes back "duplicate" is a collision: the Go SDK resends it
  under a fresh id (a bare client must do the same). The coordinator's tick
  ids are predictable (tick-<coordinator>-<deadline>-<attempt>): a worker can
  pre-publish them for a deadline it knows, which delays derived decisions
  (expired, ack_missed, unresolved) until the next stored input, but cannot
  change them, since inputs are judged by their stored time.
- Message bodies: a body naming another actor is refused by the fold
  (identity_mismatch), not by the server; oversize bodies (up to the server's
  max_payload) are stored and rejected (too_large); publish rates are not
  limited.
- Consumer names are one subject token: a worker may pull from, or read the
  info of, any consumer on TENURE_OUT whose name it knows (it gets whatever
  that consumer delivers). Consumer names are not listed to workers and
  Tenure's own consumers have random names (tenure_<uuid>); never give a durable consumer on
  TENURE_OUT a guessable name on a server where workers connect.
- $JS.API.STREAM.INFO.TENURE_OUT (which the SDK needs) accepts a subjects
  filter: a worker can list every decision subject with its message count,
  that is the addressees, job ids and decision kinds of all (never a body).
- A consumer's configuration is in the request body: a worker can create
  push consumers, on its own decisions only, delivering to any subject
  outside tenure.out.> that a core client subscribes to (streams and the
  JetStream API do not receive such deliveries), and any number of
  consumers (bound them with account JetStream limits).
- Dispatchers and operators may delete any consumer on TENURE_OUT (their
  own short-lived consumers are cleaned up that way), workers' consumers
  (which the SDK replaces without a gap) and durable ones included.
  Workers may not delete consumers: the SDK leaves a consumer it replaced
  or stopped to the server, which removes it after 5 idle minutes.
- The coordinator user writes TENURE_OUT: what it writes is trusted (the
  expected-last-sequence fence stops a second writer, not a wrong one);
  replaying the log (tenure audit) is the check.`
