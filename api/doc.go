// Package api is Tenure's state on request: a request-reply API on NATS
// micro endpoints, under tenure.api., answered from a read model of the
// decision streams (PROTOCOL.md §23 is the wire contract):
//
//	tenure.api.job.get     {"job":ID}                            the job's projection (JobReply)
//	tenure.api.job.list    {"queue","state","after","limit"}     a page of jobs, by id (JobsReply)
//	tenure.api.queue.get   {"queue":NAME}                        one queue's stats and workers (QueueReply)
//	tenure.api.queue.list  {"after","limit"}                     a page of queues with their stats (QueuesReply)
//	tenure.api.job.result  {"job","input"}                       the worker's account of a result: its detail (ResultReply)
//
// `tenure serve` runs a Server and adds its endpoints to the coordinators'
// "tenure" micro service (`nats micro info tenure` lists them); the
// `tenure jobs` and `tenure queues` commands are a Client, and any NATS
// client may ask: `nats req tenure.api.job.get '{"job":"mail-1"}'`.
//
// # The read model
//
// The decision streams are the truth and the model is derived from them
// alone: Follow reads every partition's decision stream from its first
// decision (package follow) and keeps reading, into a Model: the latest
// projection of every job (each decision carries its job's whole
// projection; a retired job leaves it), job ids indexed by state and by
// queue and state, and the queues' aggregates (Queues: depth by readiness,
// live leases, ended jobs, standing announcements of capacity from
// capacity_set decisions, counts and rates of what happened). It never
// asks the coordinator: the fold's goroutine owns the fold's state, and a
// reader of it would stall it. An answer may therefore be behind the log by
// the time the read takes: every answer carries the model's position in
// the streams (Position), and a job not read yet while the model is still
// catching up is "catching up" (503), not "not found".
//
// A decision stream whose first segments were archived and removed
// (package archive) no longer holds its first decisions. Where the next
// decision the model would read is gone, Follow restores the partition
// from the coordinator's stored snapshot (package snapshot, checked
// against its anchor as a coordinator checks it before restoring it: the
// archive reads it so too) and reads on after the snapshot's last
// decision, so that the model holds what a coordinator restored from the
// same snapshot holds (Model.Restore). Such a job's last decision is
// unknown (LastDecision.Snapshot), and the queues' totals and rates count
// from the snapshot on.
//
// One process holds one Model: tenure serve's web board (package ui) is a
// View of the state API's (Model.Attach), which tells it every change, so
// that the board and the API agree and every projection is held once.
//
// The decisions do not carry a result's detail (the worker's account of
// why it failed, PROTOCOL.md §6.10): Results reads it from the result
// input, the cause of the job's latest completed decision, when it is
// asked for (job.get, job.list, job.result), and keeps it in the model.
//
// Readiness (ready_at passed), standing announcements (until ahead) and
// the rates' window are judged by the later of the server's clock and the
// latest decision's time, never going back.
//
// # Who may ask
//
// A projection carries lease ids, and a worker told another worker's live
// lease id can claim it and freeze the job in an ownership conflict (the
// attack lease ids are MACs against, PROTOCOL.md §14). The API is
// therefore for the roles trusted with the deployment's account: the
// permissions of `tenure auth init` (package auth) let dispatchers,
// operators and coordinators request tenure.api.>, and no worker (each is
// in an account of its own, which imports nothing of it; its publish
// permissions name nothing of it). A message on the API's subjects that is
// no request (no reply subject, or a reply subject of the JetStream API: a
// push consumer's delivery, which any client allowed a consumer can aim at
// any subject) is dropped unanswered and counted.
//
// # Bounds
//
// A request body is at most MaxRequestBytes (413 above, unread), one JSON
// object with only its endpoint's fields (400 otherwise). job.list returns
// at most MaxJobsLimit jobs per page, found through the indexes (a binary
// search per state and a merge: never a scan of the jobs), with a cursor
// (Next, After) for the next page; queue.list at most MaxQueuesLimit queues
// per page, by name, likewise; queue.get lists at most MaxWorkersListed
// workers. A job's answer holds its payload (at most 4096 bytes), so every
// answer stays far below the server's payload limit.
package api
