package testutil

import (
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/streams"
)

// Option adjusts the configuration of a test server.
type Option func(*embedded.Config)

// SyncAlways makes the server fsync every write before acknowledging it, as
// in production's default. Test servers are lazy otherwise, for speed.
func SyncAlways() Option {
	return func(c *embedded.Config) { c.SyncAlways = true }
}

// ConfigFile merges a nats-server configuration file (accounts, permissions,
// ...) into the test server's configuration.
func ConfigFile(path string) Option {
	return func(c *embedded.Config) { c.ConfigFile = path }
}

// Partitions adds the input partition mapping of a deployment of n
// partitions (embedded.Config.Partitions).
func Partitions(n uint32) Option {
	return func(c *embedded.Config) { c.Partitions = n }
}

// Port listens on port instead of a random free one (a test restarting a
// server where its clients reconnect).
func Port(port int) Option {
	return func(c *embedded.Config) { c.Port = port }
}

// Logger forwards the server's warnings and errors to l.
func Logger(l *slog.Logger) Option {
	return func(c *embedded.Config) { c.Logger = l }
}

// StartServer starts an embedded nats-server with JetStream on 127.0.0.1 and
// a random port, storing in a fresh t.TempDir(). It fails the test if the
// server does not start, and shuts it down in t.Cleanup.
func StartServer(t testing.TB, opts ...Option) *embedded.Server {
	t.Helper()
	return StartServerIn(t, t.TempDir(), opts...)
}

// StartServerIn is StartServer with a data directory of the caller's
// choosing, so that a test can stop a server and start another on the same
// store. The server is shut down in t.Cleanup (Shutdown may also be called
// earlier).
func StartServerIn(t testing.TB, dir string, opts ...Option) *embedded.Server {
	t.Helper()
	cfg := embedded.Config{
		DataDir:      dir,
		Host:         "127.0.0.1",
		Port:         -1,
		ServerName:   "tenure-test",
		ReadyTimeout: 30 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	e, err := embedded.Start(cfg)
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// Connect connects a client to url and opens its JetStream context. It fails
// the test on error and closes the connection in t.Cleanup.
func Connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := streams.Connect(streams.ConnectConfig{URL: url, Name: t.Name()})
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("testutil: jetstream: %v", err)
	}
	return nc, js
}
