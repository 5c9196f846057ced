package auth

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/streams"
)

// Credential is what one actor needs to connect, as written (JSON) to
// <name>.creds.json. Exactly one of User/Password and NKeySeedFile is set.
// The file holds the password in clear text: it is written with mode 0600
// and must be kept secret (the server only has its bcrypt hash).
type Credential struct {
	Name         string `json:"name"`
	Role         Role   `json:"role"`
	URL          string `json:"url"`
	User         string `json:"user,omitempty"`
	Password     string `json:"password,omitempty"`
	NKeySeedFile string `json:"nkey_seed_file,omitempty"`
	NKeyPublic   string `json:"nkey_public,omitempty"`
	// InboxPrefix is the only reply inbox the user may subscribe to.
	InboxPrefix string `json:"inbox_prefix"`
	// Account is the NATS account of the user: the deployment's
	// (DeploymentAccount) for coordinators, dispatchers and operators, one
	// of its own (WorkerAccount) for a worker.
	Account string `json:"account"`
	// JetStreamAPIPrefix, for a worker, is the prefix under which its
	// account reaches the deployment's JetStream API
	// (jetstream.NewWithAPIPrefix; nats --js-api-prefix); "" for the others,
	// who use $JS.API. The worker SDK finds it by itself.
	JetStreamAPIPrefix string `json:"js_api_prefix,omitempty"`
	TLSCAFile          string `json:"tls_ca_file,omitempty"`
	TLSCertFile        string `json:"tls_cert_file,omitempty"`
	TLSKeyFile         string `json:"tls_key_file,omitempty"`
	// Permissions are the user's server permissions, for reference.
	Permissions Permissions `json:"permissions"`
}

// ReadCredential reads a <name>.creds.json file written by Bundle.Write.
func ReadCredential(path string) (Credential, error) {
	var c Credential
	data, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("auth: %w", err)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("auth: credential %s: %w", path, err)
	}
	return c, nil
}

// ConnectConfig is the credential as a streams.ConnectConfig. Connect with
// it and with the option nats.CustomInboxPrefix(c.InboxPrefix) (or use
// Connect, which does both).
func (c Credential) ConnectConfig() streams.ConnectConfig {
	return streams.ConnectConfig{
		URL: c.URL, Name: string(c.Role) + "-" + c.Name,
		User: c.User, Password: c.Password, NKeySeedFile: c.NKeySeedFile,
		TLSCAFile: c.TLSCAFile, TLSCertFile: c.TLSCertFile, TLSKeyFile: c.TLSKeyFile,
	}
}

// Connect connects to url (c.URL if empty) as this actor, with its inbox
// prefix followed by a random token (streams.PrivateInboxPrefix), through
// streams.Connect; extra options are applied last.
func (c Credential) Connect(url string, extra ...nats.Option) (*nats.Conn, error) {
	cfg := c.ConnectConfig()
	if url != "" {
		cfg.URL = url
	}
	return streams.Connect(cfg, append([]nats.Option{nats.CustomInboxPrefix(streams.PrivateInboxPrefix(c.InboxPrefix))}, extra...)...)
}

// Flags are the tenure command-line connection flags of this actor (with
// the URL), e.g. --nats-url nats://127.0.0.1:4222 --user w1 --password ...
// --inbox-prefix _INBOX_w1.
//
// Deprecated: they put the password on a command line, which ps shows to
// every local user; give tenure commands --creds-json <name>.creds.json
// (the file Bundle.Write writes) instead.
func (c Credential) Flags() []string {
	f := []string{"--nats-url", c.URL}
	if c.NKeySeedFile != "" {
		f = append(f, "--nkey", c.NKeySeedFile)
	} else {
		f = append(f, "--user", c.User, "--password", c.Password)
	}
	f = append(f, "--inbox-prefix", c.InboxPrefix)
	if c.TLSCAFile != "" {
		f = append(f, "--tlsca", c.TLSCAFile)
	}
	if c.TLSCertFile != "" {
		f = append(f, "--tlscert", c.TLSCertFile, "--tlskey", c.TLSKeyFile)
	}
	return f
}
