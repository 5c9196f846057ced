// Package streams holds Tenure's JetStream topology as code, client
// connection settings and the mapping of JetStream API errors onto
// Tenure's own sentinels. It is a client of JetStream and does not link
// nats-server: the server runs in package embedded, so that the worker-side
// packages that import streams stay free of it (DESIGN.md §2).
//
// The topology (DESIGN.md §3, §7) is two streams and two buckets:
//
//   - the input stream (TENURE_IN), every input event as published, append
//     only: no deletes, no purges, no roll-ups, no per-message TTLs, no
//     message schedules, no limits;
//   - the decision stream (TENURE_OUT), written only by the coordinator under
//     the same lock-down, each append fenced by Nats-Expected-Last-Sequence;
//   - the leader KV bucket (TENURE_LEADER), whose entries expire so that a
//     dead leader's key vanishes;
//   - the snapshot Object Store (TENURE_SNAPSHOTS).
//
// Ensure creates what is missing and refuses, with a *ConfigMismatchError, a
// stream whose existing configuration is less safe than the topology asks
// for; it never loosens or tightens an existing stream itself. Open only looks
// things up and is what read-only tools such as auditors use.
//
// A new input stream starts in genesis (Topology.GenesisSubjects): it takes
// only the coordinators' rules and policy inputs, so that a brand-new log
// starts with them, until it is widened (EndGenesis: by the coordinator
// when its credential may update the stream, else by the administrator's
// tenure genesis) to every input subject. Ensure, Open and Verify accept
// it in either state. Handles.Check reads both streams' configuration again
// and checks it as Ensure does: the live coordinator's watch of a change.
//
// One process per data directory (DESIGN.md §7): LockDir takes an
// exclusive lock on a directory, an flock(2) on its lock file
// (LockFileName) that the kernel drops when the holder dies, and writes
// the holder (pid, command line, host, time) into the file; a second
// locker gets a *LockedError naming it. embedded.Start locks its DataDir
// before anything touches it and Shutdown releases it; a process that
// starts nats-server processes of its own locks their store directories
// and hands each lock to its child (DirLock.File, InheritLock).
//
// Classify turns JetStream API errors into errors that match ErrLostAuthority,
// ErrStreamNotFound, ErrNoLeader, ErrNoResponders and ErrTransient with
// errors.Is, by API error code and sentinel identity, never by message text.
package streams
