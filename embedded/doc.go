// Package embedded runs nats-server with JetStream inside the calling
// process: the server of tenure serve, tenure demo, tenure cluster's
// nodes, audits of a data directory, the benchmarks and the tests.
//
// It is the only package of Tenure that imports nats-server (tests
// aside). The packages a worker or an operator tool imports (events,
// follow, worker, ops) and streams, the topology they share, never import
// it, so that a worker binary carries no server (DESIGN.md §2):
// TestWorkerSideDoesNotLinkServer fails, naming the chain of imports, when
// one of them comes to depend on nats-server.
//
// Start locks its DataDir (streams.LockDir) before anything touches it
// and Shutdown releases it; a process that starts nats-server processes of
// its own locks their store directories and hands each lock to its child
// (streams.DirLock.File, streams.InheritLock), which passes it on in
// Config.Lock. ConfigFilePartitions reads the input partition mapping of a
// nats-server configuration file, so that a server is not started for
// another partition count than its configuration's.
package embedded
