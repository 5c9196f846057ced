package streams_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

func TestConnect(t *testing.T) {
	srv := testutil.StartServer(t)
	nc, err := streams.Connect(streams.ConnectConfig{URL: "nats://127.0.0.1:1," + srv.ClientURL(), Name: "tenure-test"})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer nc.Close()
	if nc.Opts.MaxReconnect != -1 || nc.Opts.ReconnectWait != streams.ReconnectWait ||
		nc.Opts.ReconnectBufSize != streams.ReconnectBufSize || nc.Opts.Name != "tenure-test" {
		t.Errorf("options = reconnects %d wait %v buf %d name %q",
			nc.Opts.MaxReconnect, nc.Opts.ReconnectWait, nc.Opts.ReconnectBufSize, nc.Opts.Name)
	}

	// Extra options come last and win.
	nc2, err := streams.Connect(streams.ConnectConfig{URL: srv.ClientURL()}, nats.MaxReconnects(3))
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	if nc2.Opts.MaxReconnect != 3 {
		t.Errorf("extra option not applied: MaxReconnect = %d", nc2.Opts.MaxReconnect)
	}
}

func TestConnectErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  streams.ConnectConfig
	}{
		{"two auth methods", streams.ConnectConfig{User: "a", Password: "b", Token: "t"}},
		{"cert without key", streams.ConnectConfig{TLSCertFile: "c.pem"}},
		{"missing nkey seed", streams.ConnectConfig{NKeySeedFile: "/nonexistent/seed.nk"}},
	} {
		if nc, err := streams.Connect(tc.cfg); err == nil {
			nc.Close()
			t.Errorf("%s: connected", tc.name)
		}
	}
	_, err := streams.Connect(streams.ConnectConfig{URL: "nats://127.0.0.1:1"})
	if !errors.Is(err, nats.ErrNoServers) {
		t.Errorf("unreachable server = %v, want nats.ErrNoServers", err)
	}
}
