// Package testutil starts real, embedded nats-servers with JetStream for
// tests and connects real nats.go clients to them. Nothing here is a mock:
// tests of the coordinator, the SDK and the streams run against the same
// server code as production, on a random port and in the test's temporary
// directory, and everything started is stopped by t.Cleanup.
package testutil
