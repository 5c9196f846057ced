package chaos

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/bcrypt"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/streams"
)

// The environments run as a deployment configured by `tenure auth init`
// (auth.Generate): every nats-server runs the generated accounts, the
// coordinators, the dispatcher, the workers and the hostile worker connect
// with their own credentials (coordinators and dispatcher in the
// deployment's account, each worker in an account of its own), so that the
// hostile worker holds exactly what a worker of a real deployment holds.
//
// The orchestrator itself (reads of both streams for the checks, the audit,
// status requests, stream leader stepdowns) is the operator of the test
// bench, not a participant: it connects as one more user of the
// deployment's account without permissions (adminUser), which auth.Generate
// has no role for; envAuth adds it to the generated accounts block.

// adminUser is the orchestrator's user in the deployment's account.
const adminUser = "chaos-orchestrator"

// adminName is the deployment's administrator (auth.RoleAdmin), whose
// credential ends the genesis of the input stream (tenure genesis).
const adminName = "admin"

// envAuth is the generated configuration of one environment.
type envAuth struct {
	b        *auth.Bundle
	accounts string // server.conf as generated, plus the orchestrator's user
	password string // the orchestrator's
}

// newEnvAuth generates credentials for the actors in dir/auth, with urls
// written into them (the cheapest bcrypt cost: every connection checks a
// hash).
func newEnvAuth(dir, urls string, actors []auth.Actor) (*envAuth, error) {
	if !slices.ContainsFunc(actors, func(a auth.Actor) bool { return a.Role == auth.RoleAdmin }) {
		// The administrator, as tenure auth init writes it: it ends the
		// genesis of every new deployment (env.endGenesis).
		actors = append(slices.Clone(actors), auth.Actor{Name: adminName, Role: auth.RoleAdmin})
	}
	// With the quotas tenure auth init writes by default (tenure genesis
	// applies them): every worker, the hostile ones too, through its own
	// intake stream.
	q := &streams.Quotas{MaxBytes: streams.DefaultQuotaBytes, MaxMsgs: streams.DefaultQuotaMsgs,
		BytesPerS: streams.DefaultQuotaBytesPerS, MsgsPerS: streams.DefaultQuotaMsgsPerS}
	b, err := auth.Generate(auth.Options{Dir: filepath.Join(dir, "auth"), Actors: actors, URL: urls, BcryptCost: bcrypt.MinCost, Quotas: q})
	if err != nil {
		return nil, fmt.Errorf("chaos: auth: %w", err)
	}
	if err := b.Write(true); err != nil {
		return nil, fmt.Errorf("chaos: auth: %w", err)
	}
	conf, err := os.ReadFile(b.ServerConfigPath())
	if err != nil {
		return nil, fmt.Errorf("chaos: auth: %w", err)
	}
	var pw [24]byte
	_, _ = rand.Read(pw[:]) // never fails (crypto/rand)
	a := &envAuth{b: b, password: base64.RawURLEncoding.EncodeToString(pw[:])}
	// The deployment's account opens with its users list.
	marker := fmt.Sprintf("  %q: {\n    jetstream: enabled\n    users: [\n", auth.DeploymentAccount(""))
	if strings.Count(string(conf), marker) != 1 {
		return nil, fmt.Errorf("chaos: auth: %s: the deployment's account (%q) not found where expected", b.ServerConfigPath(), marker)
	}
	user := fmt.Sprintf("      { user: %q, password: %q }\n", adminUser, a.password)
	a.accounts = strings.Replace(string(conf), marker, marker+user, 1)
	return a, nil
}

// credentialPath is the file of actor name's credential.
func (a *envAuth) credentialPath(name string) string {
	return filepath.Join(a.b.Dir, name+auth.CredentialSuffix)
}

// adminOption authenticates the orchestrator.
func (a *envAuth) adminOption() nats.Option { return nats.UserInfo(adminUser, a.password) }

// adminFlags are the tenure command-line flags of the orchestrator's user.
func (a *envAuth) adminFlags() []string {
	return []string{"--user", adminUser, "--password", a.password}
}

// connectCredential connects with the credential in file path (url, if not
// empty, instead of the one in it) and the extra options.
func connectCredential(path, url string, extra ...nats.Option) (*nats.Conn, auth.Credential, error) {
	c, err := auth.ReadCredential(path)
	if err != nil {
		return nil, c, err
	}
	nc, err := c.Connect(url, extra...)
	return nc, c, err
}

// endGenesis runs `tenure genesis` with the administrator's credential, as
// an operator does on a brand-new deployment: it waits for the first
// coordinator's rules and policy and widens the input stream.
func (e *env) endGenesis(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, e.cfg.Tenure, "genesis", "--credential", e.auth.credentialPath(adminName),
		"--nats-url", e.urls, "--timeout", "80s").CombinedOutput()
	if err != nil {
		return fmt.Errorf("chaos: %s: tenure genesis: %w: %s", e.name, err, out)
	}
	return nil
}
