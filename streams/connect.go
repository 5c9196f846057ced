package streams

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Reconnect settings Connect applies before the caller's options.
const (
	// ReconnectWait is the pause between reconnect attempts to one server.
	ReconnectWait = 500 * time.Millisecond
	// ReconnectBufSize is how many bytes of publishes are buffered while
	// disconnected; a JetStream publish still fails without its ack.
	ReconnectBufSize = 8 << 20
)

// ConnectConfig says where and as whom to connect to NATS. At most one of
// CredsFile, NKeySeedFile, User/Password and Token may be set.
type ConnectConfig struct {
	// URL is a comma-separated list of server URLs; empty means
	// nats.DefaultURL. (Reading NATS_URL is the job of cmd.)
	URL string
	// Name identifies the connection in the server's monitoring.
	Name string
	// CredsFile is a JWT user credentials file (decentralised auth).
	CredsFile string
	// NKeySeedFile is a file holding an NKey user seed.
	NKeySeedFile string
	// User and Password authenticate with a user name and password.
	User, Password string
	// Token authenticates with a token.
	Token string
	// TLSCAFile is a PEM file of the CAs to verify the servers with.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are the client certificate and key, both or
	// neither.
	TLSCertFile, TLSKeyFile string
}

// Connect connects to NATS with cfg, reconnecting forever after a
// disconnection (MaxReconnects(-1)), with ReconnectWait between attempts and
// a ReconnectBufSize buffer. The extra options are applied last and override
// these. The initial connection is not retried: an unreachable server is an
// error.
func Connect(cfg ConnectConfig, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := cfg.options()
	if err != nil {
		return nil, fmt.Errorf("streams: connect: %w", err)
	}
	url := cfg.URL
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("streams: connect to %s: %w", url, err)
	}
	return nc, nil
}

func (cfg ConnectConfig) options() ([]nats.Option, error) {
	opts := []nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
		nats.ReconnectBufSize(ReconnectBufSize),
	}
	if cfg.Name != "" {
		opts = append(opts, nats.Name(cfg.Name))
	}
	var auth []string
	if cfg.CredsFile != "" {
		auth = append(auth, "CredsFile")
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.NKeySeedFile != "" {
		auth = append(auth, "NKeySeedFile")
		o, err := nats.NkeyOptionFromSeed(cfg.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("read nkey seed %s: %w", cfg.NKeySeedFile, err)
		}
		opts = append(opts, o)
	}
	if cfg.User != "" || cfg.Password != "" {
		auth = append(auth, "User/Password")
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.Token != "" {
		auth = append(auth, "Token")
		opts = append(opts, nats.Token(cfg.Token))
	}
	if len(auth) > 1 {
		return nil, fmt.Errorf("more than one authentication method set: %v", auth)
	}
	if cfg.TLSCAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCAFile))
	}
	switch {
	case cfg.TLSCertFile != "" && cfg.TLSKeyFile != "":
		opts = append(opts, nats.ClientCert(cfg.TLSCertFile, cfg.TLSKeyFile))
	case cfg.TLSCertFile != "" || cfg.TLSKeyFile != "":
		return nil, errors.New("TLSCertFile and TLSKeyFile must be set together")
	}
	return opts, nil
}

// PrivateInboxPrefix returns base (nats' default "_INBOX" when empty)
// followed by a token of 128 random bits: an inbox prefix for
// nats.CustomInboxPrefix under which the connection's inboxes (nats.go's
// NewInbox, the request/response and PubAck inboxes) cannot be predicted,
// even by someone who learns a NUID of this process (nats.go's inboxes end
// in one, and the NUID generator is process-wide, shared with an embedded
// nats-server). Any client can make the server send a PubAck or an API
// response to a subject it names: an inbox that cannot be named cannot be
// aimed at. Server permissions on base.> still allow it.
func PrivateInboxPrefix(base string) string {
	if base == "" {
		base = "_INBOX"
	}
	var r [16]byte
	_, _ = rand.Read(r[:]) // never fails (crypto/rand)
	return base + "." + hex.EncodeToString(r[:])
}
