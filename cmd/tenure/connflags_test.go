package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maknow/tenure/auth"
)

// parseConn registers the connection flags on a fresh flag set, parses
// args, and returns the resolved configuration, inbox prefix and what the
// flags warned.
func parseConn(t *testing.T, args ...string) (cfgURL, user, password, nkey, tlsCA, inbox, warned string, err error) {
	t.Helper()
	var warn bytes.Buffer
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(&warn)
	var c connFlags
	c.register(fs, "server")
	if err := fs.Parse(args); err != nil {
		return "", "", "", "", "", "", warn.String(), err
	}
	cfg, in, err := c.resolved()
	return cfg.URL, cfg.User, cfg.Password, cfg.NKeySeedFile, cfg.TLSCAFile, in, warn.String(), err
}

// The password reaches the connection without the command line: from
// --password-file (its first line), from NATS_PASSWORD, or from the
// credential file of --creds-json (or its older name --credential), which also gives the URL, user, inbox
// prefix and TLS files unless a flag given overrides one. --password still
// works, with a warning that ps shows it; it and --password-file are
// exclusive, and a credential with another authentication is a usage error.
func TestConnFlagsSecrets(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("file-secret\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cred := auth.Credential{Name: "disp", Role: auth.RoleDispatcher, URL: "tls://10.0.0.1:4222", User: "disp", Password: "cred-secret",
		InboxPrefix: "_INBOX_disp", TLSCAFile: "/ca.pem"}
	credPath := filepath.Join(dir, "disp.creds.json")
	b, _ := json.Marshal(cred)
	if err := os.WriteFile(credPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NATS_URL", "")
	t.Setenv(passwordEnv, "")

	if _, user, password, _, _, _, warned, err := parseConn(t, "--user", "u", "--password-file", pw); err != nil || user != "u" || password != "file-secret" || warned != "" {
		t.Errorf("--password-file: %q %q, warned %q, %v", user, password, warned, err)
	}
	t.Setenv(passwordEnv, "env-secret")
	if _, _, password, _, _, _, _, err := parseConn(t, "--user", "u"); err != nil || password != "env-secret" {
		t.Errorf("%s: %q, %v", passwordEnv, password, err)
	}
	t.Setenv(passwordEnv, "")
	for _, flag := range []string{"--creds-json", "--credential"} {
		url, user, password, _, ca, inbox, _, err := parseConn(t, flag, credPath)
		if err != nil || url != cred.URL || user != "disp" || password != "cred-secret" || ca != "/ca.pem" || inbox != "_INBOX_disp" {
			t.Errorf("%s: %q %q %q %q %q, %v", flag, url, user, password, ca, inbox, err)
		}
	}
	if url, _, password, _, _, inbox, _, err := parseConn(t, "--creds-json", credPath, "--nats-url", "nats://x:1", "--password-file", pw, "--inbox-prefix", "_INBOX_o"); err != nil ||
		url != "nats://x:1" || password != "file-secret" || inbox != "_INBOX_o" {
		t.Errorf("--creds-json with overrides: %q %q %q, %v", url, password, inbox, err)
	}
	if _, _, password, _, _, _, warned, err := parseConn(t, "--user", "u", "--password", "argv-secret"); err != nil || password != "argv-secret" || !strings.Contains(warned, "ps") {
		t.Errorf("--password: %q, warned %q, %v", password, warned, err)
	}
	for _, args := range [][]string{
		{"--user", "u", "--password", "x", "--password-file", pw},
		{"--creds-json", credPath, "--nkey", "/seed"},
		{"--credential", credPath, "--creds", "/x.creds"},
		{"--user", "u", "--password-file", filepath.Join(dir, "missing")},
	} {
		if _, _, _, _, _, _, _, err := parseConn(t, args...); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	if _, _, _, _, _, _, _, err := parseConn(t, "--creds-json", filepath.Join(dir, "missing.json")); err == nil {
		t.Error("--creds-json of a missing file parsed")
	}
}
