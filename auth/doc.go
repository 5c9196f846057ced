// Package auth generates a nats-server authorization for Tenure: one NATS
// user per actor (worker, dispatcher, operator, coordinator, archivist,
// administrator), each bound by server permissions to the subjects of its
// role and identity, their
// credentials, and optionally a private CA with server and client TLS
// certificates. It is what `tenure auth init` writes.
//
// # Why permissions
//
// Tenure takes a publisher's identity from the subject of its input
// (tenure.in.<role>.<actor>.<job>.<verb>, PROTOCOL.md §4): the NATS server
// cannot stamp the authenticated user into a stored message. The identity is
// therefore only as good as the publish permissions that bind each user to
// its own subjects. Generate builds those permissions; PermissionsFor returns
// them for one actor, so that they can be reviewed or reused in another
// configuration (JWT/operator mode, a hand-written file).
//
// # What each role may do
//
// Stream names below are those of the default prefix TENURE (TENURE_IN,
// TENURE_OUT, the KV bucket TENURE_LEADER with stream KV_TENURE_LEADER, the
// object store TENURE_SNAPSHOTS with stream OBJ_TENURE_SNAPSHOTS). Every
// JetStream API subject was checked against nats-server v2.15.2
// (server/jetstream_api.go).
//
// # Accounts
//
// The generated server.conf has one NATS account for the deployment
// (DeploymentAccount, "TENURE": JetStream, the streams and buckets, the
// coordinators, dispatchers and operators) and one account per worker
// (WorkerAccount, "TENURE_W_<w>"), so that nothing a worker does can use
// up what others need: each worker's account has limits of its own
// (WorkerLimits: connections, subscriptions, payload), and imports from the
// deployment's account only the services of WorkerImports, which the
// deployment's account exports (Exports).
//
// A worker <w>, in its own account, may publish
//
//	tenure.in.worker.<w>.>                                              its inputs (imported: PubAcks come back)
//	JS.TENURE.API.CONSUMER.CREATE.TENURE_OUT.tw_<w>_<i>.tenure.out.<w>.>  its consumers, filtered to its own decisions only
//	JS.TENURE.API.CONSUMER.INFO.TENURE_OUT.tw_<w>_<i>
//	JS.TENURE.API.CONSUMER.DELETE.TENURE_OUT.tw_<w>_<i>
//	JS.TENURE.API.CONSUMER.MSG.NEXT.TENURE_OUT.tw_<w>_<i>                 pull from them
//
// for i from 0 to events.WorkerConsumers-1, and no stream info: a stream
// info request may carry a subjects filter, and its answer would list
// every decision subject (tenure.out.<addressee>.<job>.<kind>) with its
// count, the job ids and worker names of the whole deployment; NATS
// cannot restrict a request's body. The SDK learns where to start reading
// from the answer to its first consumer's creation (deliver policy new)
// and finds the deployment by looking up its first consumer name
// (streams.DiscoverWorker). It may subscribe to its own reply
// inbox _INBOX_<w>.> and to the coordinators' signed chain heads,
// tenure.heads and tenure.heads.* (PROTOCOL.md §20.3), which its account
// imports as streams (HeadStreams: messages flow one way, to the worker,
// so that it can keep heads as witnesses; it cannot publish them). Its account imports those JetStream API subjects
// of the deployment's account under the worker API prefix JS.TENURE.API
// (streams.Topology.WorkerAPIPrefix; the worker SDK finds it, a bare
// client uses jetstream.NewWithAPIPrefix or nats --js-api-prefix): in an
// account without JetStream the plain $JS.API subjects answer "JetStream
// not enabled for account". It cannot subscribe to decisions (their reply
// subjects are the coordinator's append inboxes), use another consumer
// name (a stream's consumers are a shared resource), read or pull another
// consumer, get messages, or administer anything.
//
// A dispatcher or operator <d> (input role "ops") may publish
// tenure.in.ops.<d>.> (but a dispatcher no schedule input,
// tenure.in.ops.<d>.*.schedule[.*]: a schedule submits in its setter's
// name for as long as it stands, after the credential that set it is
// revoked, so only operators set them), create, read and delete consumers on TENURE_OUT
// with any filter (the ops client deletes its short-lived consumer after
// each call), get decisions by sequence or subject (STREAM.MSG.GET,
// DIRECT.GET), send requests to the coordinators' "tenure" micro service
// ($SRV.*, $SRV.*.tenure, $SRV.*.tenure.*, tenure.status.*, and the state
// API tenure.api.>: job projections and queue stats, PROTOCOL.md §23), and subscribe
// to _INBOX_<d>.>, tenure.out.> and the chain heads tenure.heads and
// tenure.heads.* (an auditor's `tenure heads`). It has no stream
// administration: STREAM.DELETE, PURGE, UPDATE and MSG.DELETE are denied,
// and so is publishing on tenure.out.>, tenure.heads and tenure.heads.*.
//
// A coordinator <c> may publish tenure.in.coord.<c>.> (ticks, the default
// policy), tenure.out.> (decisions) and tenure.heads (its signed chain
// heads; tenure.heads.<k> for each partition k when partitioned); use the JetStream API on its four
// streams only (create, info, message get, direct get, consumers with their
// acks and flow control); update the KV_TENURE_LEADER stream (the bucket's
// TTL follows --leader-ttl) and purge the OBJ_TENURE_SNAPSHOTS one
// (replacing a snapshot purges the old object's chunks), its only stream
// administration; put to $KV.TENURE_LEADER.> and $O.TENURE_SNAPSHOTS.>;
// serve its micro service; and answer requests (allow_responses). Deleting
// any stream or any stream's messages, and updating or purging TENURE_IN
// or TENURE_OUT, is refused.
//
// No coordinator may update its log's streams because NATS permissions
// cannot limit what an update sets: a credential that may update TENURE_IN
// can give it a maximum count with discard old or a maximum age (which
// removes inputs, DenyPurge or not), a small maximum count (which makes
// every input fail), sources or a seal. The one update a deployment needs,
// the end of the input stream's genesis (streams.EndGenesis, PROTOCOL.md
// §1.1: a new input stream takes only the coordinators' rules and policy
// inputs until they are stored, then tenure.in.>), is the administrator's
// (below): the coordinator stores its rules and policy and waits
// (coordinator.GenesisAdmin, which tenure serve chooses for a credential
// of this package whose permissions lack the update), and `tenure genesis`
// with the administrator's credential widens the stream. Detection backs
// the prevention: the live coordinator subscribes to the stream-updated
// advisories of TENURE_IN and TENURE_OUT ($JS.EVENT.ADVISORY.STREAM.UPDATED.
// TENURE_IN and .TENURE_OUT, in its subscribe permissions) and re-reads
// their configuration on an interval, and refuses (state refused, nothing
// more appended) as soon as it is less safe than its start accepts; every
// start (streams.Ensure) and every audit (streams.Handles.Verify) checks it
// too. It subscribes to _INBOX_<c>.>, its micro service subjects,
// tenure.status.<c>, those advisories and the state API's tenure.api.>
// (tenure serve answers it), which it may also request.
//
// The administrator <adm> (tenure auth init --admin, default "admin"; the
// operator's key of the deployment's streams, not for daily use) may read
// TENURE_IN, TENURE_OUT, KV_TENURE_LEADER and OBJ_TENURE_SNAPSHOTS (info,
// message and direct gets, consumers with their acks and flow control),
// list the stream names, and update those four streams: the end of genesis
// (`tenure genesis`) and the stream edits an operator decides on (a live
// coordinator refuses one that makes its log less safe). It publishes no
// input, no decision and no chain head, and may delete no stream, purge
// none (the archivist's right) and delete no message. It subscribes to
// _INBOX_<adm>.> only.
//
// No worker may request the state API: a job's projection carries its
// lease id, and a worker told another worker's live lease id could claim
// it and freeze the job in an ownership conflict, which unguessable lease
// ids exist to prevent. A worker's account imports nothing of it and its
// publish permissions name nothing of it (APISubjects).
//
// An archivist <a> (tenure auth init --archivists a; the operators'
// credential of tenure log, package archive) publishes no input and no
// decision. It may read TENURE_IN, TENURE_OUT and OBJ_TENURE_SNAPSHOTS
// (info, message get, direct get, consumers with their acks and flow
// control), look up KV_TENURE_LEADER, put to $O.TENURE_SNAPSHOTS.> (tenure
// log restore), and purge TENURE_IN, TENURE_OUT and OBJ_TENURE_SNAPSHOTS:
// it is the only role with a purge of the log, which package archive makes
// only below a segment it archived and verified, on streams created for log
// retention. Stream deletes, updates and single-message deletes are denied
// to it as to everybody but the administrator, who may update streams. It
// subscribes to _INBOX_<a>.> only.
//
// Nobody can roll up TENURE_IN or TENURE_OUT: the streams deny it by
// configuration (streams.Topology), which also denies deletes and, unless
// they were created for log retention (streams.Topology.LogRetention),
// purges.
//
// # Partitioned deployments
//
// With Options.Partitions N (`tenure auth init --partitions N`, for `tenure
// serve --partitions N`, PROTOCOL.md §18) every JetStream API permission above
// is given on the streams and buckets of each partition instead:
// TENURE_P<k>_OUT for workers (consumers filtered to tenure.out.<w>.> only)
// and dispatchers, TENURE_P<k>_IN, TENURE_P<k>_OUT, KV_TENURE_P<k>_LEADER and
// OBJ_TENURE_P<k>_SNAPSHOTS for the coordinator, for k from 0 to N-1
// (PartitionedPermissionsFor). Everybody but workers keeps stream info on
// TENURE_OUT, which streams.Discover looks up first; a worker may instead
// send the look-ups of its first consumer name on TENURE_OUT and on
// TENURE_P<N>_OUT, which its account does not import (they get "no
// responders" at once: that is how streams.DiscoverWorker tells a
// partitioned deployment and counts its partitions). Dispatchers may also request
// tenure.status.*.* and coordinators subscribe to tenure.status.<c>.*, the
// per-partition status endpoints. The publish subjects do not change:
// tenure.in.<role>.<id>.> covers the seven-token partition form, and
// tenure.out.> stays the coordinator's. The generated server.conf also
// carries the input mapping, in every account (mappings are per account),
// so that six-token inputs are stored in their job's partition on a
// standalone server.
// embedded.Start with Partitions adds the same mapping again, which replaces
// the file's: the two never conflict, and with different counts the embedded
// server's wins.
//
// # Inbox prefixes
//
// Every user may subscribe only to its own inbox prefix, _INBOX_<name>, so
// that it cannot read another client's replies (PubAcks, JetStream API
// answers, pulled messages). A client must therefore connect with that
// prefix: nats.CustomInboxPrefix("_INBOX_w1") in Go (Credential.Connect
// does it, adding a random token: streams.PrivateInboxPrefix), --inbox-prefix
// _INBOX_w1 with the nats CLI and the tenure commands (which add the token
// too). A client that keeps the default _INBOX prefix gets no replies.
//
// # The threat model
//
// Limits (which `tenure auth init` prints) says what the server enforces,
// what Tenure itself enforces, and what remains: a worker's own quota
// (or, without quotas, publish rates),
// Nats-Msg-Id values (the worker SDK resends an input whose first attempt
// collides with another publisher's id), push consumers' deliver subjects,
// and the content of what the coordinator
// writes (which the audit checks).
//
// # Files
//
// Generate builds everything in memory; Bundle.Write writes it, every file
// with mode 0600, and refuses to overwrite an existing file unless forced
// (then every secret and certificate is new: restart the server with the new
// server.conf and hand out the new credentials).
package auth
