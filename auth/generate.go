package auth

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// DefaultURL is the server URL written into credentials when Options.URL is
// empty: the address `tenure serve` listens on by default; DefaultTLSURL
// with Options.TLS.
const (
	DefaultURL    = "nats://127.0.0.1:4222"
	DefaultTLSURL = "tls://127.0.0.1:4222"
)

// Names of the shared files Generate writes.
const (
	ServerConfigFile = "server.conf"
	CAFile           = "ca.pem"
	CAKeyFile        = "ca-key.pem"
	ServerCertFile   = "server-cert.pem"
	ServerKeyFile    = "server-key.pem"
)

// Suffixes of the per-actor files, after the actor's name. An actor name has
// no dot, so they never collide with each other or with the shared files.
const (
	CredentialSuffix = ".creds.json" // Credential as JSON
	NKeySuffix       = ".nk"         // nkey seed (Options.NKeys)
	CertSuffix       = ".cert.pem"   // client certificate (Options.TLS)
	KeySuffix        = ".key.pem"    // client private key (Options.TLS)
)

// FileMode is the mode of every file Generate writes (secrets and the rest
// alike); the directory is created with mode 0700.
const FileMode os.FileMode = 0o600

// Options configures Generate.
type Options struct {
	// Dir is where the files go (required). Paths written into server.conf
	// and into the credentials are absolute paths in Dir.
	Dir string
	// Actors are the users to create, one per actor; names are unique across
	// all roles (a name is also a decision addressee and an inbox prefix).
	Actors []Actor
	// StreamPrefix of the topology, default streams.DefaultPrefix.
	StreamPrefix string
	// Partitions is the partition count of a partitioned deployment
	// (PROTOCOL.md §18), at most events.MaxPartitions; 0, the default, is
	// the unpartitioned deployment. With partitions the permissions cover
	// every partition's streams and buckets (PartitionedPermissionsFor),
	// and server.conf maps six-token input subjects to their partition
	// (events.InputMapping) in the account of its users.
	Partitions uint32
	// URL is the server URL written into the credentials, default DefaultURL.
	URL string
	// NKeys authenticates users with nkeys (a seed file per actor) instead
	// of bcrypt-hashed random passwords.
	NKeys bool
	// TLS generates a CA, a server certificate and a client certificate per
	// actor, and a tls block in server.conf.
	TLS bool
	// TLSVerify (with TLS) makes the server require a client certificate
	// signed by the CA (verify: true). Without it the client certificates
	// are written but optional.
	TLSVerify bool
	// TLSHosts are DNS names or IP addresses the server certificate is valid
	// for, besides DefaultTLSHosts.
	TLSHosts []string
	// BcryptCost of the password hashes, default bcrypt.DefaultCost.
	BcryptCost int
	// Now is the start of the certificates' validity (less an hour of
	// slack), default time.Now().
	Now time.Time
	// WorkerLimits bound what each worker's account may take of the server;
	// zero fields take DefaultWorkerLimits'.
	WorkerLimits WorkerLimits
	// Quotas, when not nil, give every worker an intake stream bounded by
	// these limits (streams.Quotas, PROTOCOL.md §4.2; its Workers are the
	// worker actors): the coordinators' credentials may then read and
	// purge the intake streams, the administrator's create and update
	// them, and QuotasFile records them for tenure genesis --quotas.
	// Unpartitioned deployments only.
	Quotas *streams.Quotas
	// StoreLimit, when positive, is the JetStream file storage the
	// deployment's account may use (max_file in server.conf): the limit
	// the coordinator keeps its headroom against (coordinator.Config
	// StorageReserve). Keep it below the server's max_file_store.
	StoreLimit int64
}

// QuotasFile is the file of Options.Quotas, the JSON of streams.Quotas.
const QuotasFile = "quotas.json"

// WorkerLimits are the limits of each worker's account (nats-server account
// limits): one worker can exhaust only its own.
type WorkerLimits struct {
	// MaxConnections is how many connections the worker may have open.
	MaxConnections int
	// MaxSubscriptions is how many subscriptions, over all its connections.
	MaxSubscriptions int
	// MaxPayload is the largest message (headers included) it may publish,
	// in bytes: the server refuses a larger one (the client library first,
	// since the server announces it), so no worker can flood the input
	// stream, or the coordinator reading it, with huge bodies.
	MaxPayload int
}

// DefaultWorkerLimits: 16 connections, 1,024 subscriptions, and the largest
// input body (events.MaxInputBytes, 64 KiB) plus 4 KiB of headers.
var DefaultWorkerLimits = WorkerLimits{MaxConnections: 16, MaxSubscriptions: 1024, MaxPayload: events.MaxInputBytes + 4<<10}

func (l WorkerLimits) withDefaults() WorkerLimits {
	d := DefaultWorkerLimits
	if l.MaxConnections == 0 {
		l.MaxConnections = d.MaxConnections
	}
	if l.MaxSubscriptions == 0 {
		l.MaxSubscriptions = d.MaxSubscriptions
	}
	if l.MaxPayload == 0 {
		l.MaxPayload = d.MaxPayload
	}
	return l
}

// File is one generated file, Name relative to the bundle's Dir.
type File struct {
	Name string
	Data []byte
}

// Bundle is everything Generate produced, in memory until Write.
type Bundle struct {
	Dir         string       // absolute
	Files       []File       // server.conf first, then TLS files, then per actor
	Credentials []Credential // one per actor, in Options.Actors order
	TLS         bool
	TLSVerify   bool
	Partitions  uint32 // Options.Partitions
	// Quotas are the intake streams' limits (Options.Quotas with the
	// workers), nil without quotas or without workers.
	Quotas     *streams.Quotas
	StoreLimit int64 // Options.StoreLimit
}

// Generate validates opts and builds the server configuration, credentials
// and certificates. It writes nothing: call Bundle.Write.
func Generate(opts Options) (*Bundle, error) {
	if opts.Dir == "" {
		return nil, errors.New("auth: no output directory")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("auth: output directory: %w", err)
	}
	if err := checkQuotable(dir); err != nil {
		return nil, err
	}
	if err := ValidateActors(opts.Actors); err != nil {
		return nil, err
	}
	if opts.StreamPrefix != "" && !validPrefix(opts.StreamPrefix) {
		return nil, fmt.Errorf("auth: invalid stream prefix %q: want 1 to 64 of [A-Za-z0-9_-]", opts.StreamPrefix)
	}
	if opts.Partitions > events.MaxPartitions {
		return nil, fmt.Errorf("auth: %d partitions: at most %d", opts.Partitions, events.MaxPartitions)
	}
	if opts.TLSVerify && !opts.TLS {
		return nil, errors.New("auth: TLSVerify needs TLS")
	}
	for _, h := range opts.TLSHosts {
		if h == "" || strings.ContainsAny(h, " \t\r\n,\"\\") {
			return nil, fmt.Errorf("auth: invalid TLS host %q", h)
		}
	}
	switch {
	case opts.URL != "":
	case opts.TLS:
		opts.URL = DefaultTLSURL
	default:
		opts.URL = DefaultURL
	}
	if opts.BcryptCost == 0 {
		opts.BcryptCost = bcrypt.DefaultCost
	}
	if opts.BcryptCost < bcrypt.MinCost || opts.BcryptCost > bcrypt.MaxCost {
		return nil, fmt.Errorf("auth: bcrypt cost %d: want %d to %d", opts.BcryptCost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	lim := opts.WorkerLimits.withDefaults()
	if lim.MaxConnections < 1 || lim.MaxSubscriptions < 1 || lim.MaxPayload < 1024 {
		return nil, fmt.Errorf("auth: worker limits %+v: want at least one connection, one subscription and 1024 bytes of payload", lim)
	}

	b := &Bundle{Dir: dir, TLS: opts.TLS, TLSVerify: opts.TLSVerify, Partitions: opts.Partitions}
	path := func(name string) string { return filepath.Join(dir, name) }
	var users []confUser
	var actorFiles []File
	var ca *keyPair
	var tlsFiles []File
	if opts.TLS {
		if ca, err = newCA(opts.Now, "Tenure CA"); err != nil {
			return nil, err
		}
		hosts := slices.Compact(append(slices.Clone(DefaultTLSHosts), opts.TLSHosts...))
		srv, err := newLeaf(opts.Now, ca, "tenure-server", true, hosts)
		if err != nil {
			return nil, err
		}
		tlsFiles = append(tlsFiles,
			File{CAFile, ca.cert}, File{CAKeyFile, ca.key},
			File{ServerCertFile, srv.cert}, File{ServerKeyFile, srv.key})
	}
	var quotas *streams.Quotas
	if opts.Quotas != nil {
		if opts.Partitions > 0 {
			return nil, errors.New("auth: quotas are for unpartitioned deployments")
		}
		q := *opts.Quotas
		q.Workers = nil
		for _, a := range opts.Actors {
			if a.Role == RoleWorker {
				q.Workers = append(q.Workers, a.Name)
			}
		}
		if len(q.Workers) > 0 {
			if err := q.Validate(); err != nil {
				return nil, err
			}
			quotas = &q
		}
	}
	b.Quotas, b.StoreLimit = quotas, opts.StoreLimit
	for _, a := range opts.Actors {
		perms, err := PartitionedPermissionsFor(a, opts.StreamPrefix, opts.Partitions)
		if err != nil {
			return nil, err
		}
		if quotas != nil {
			perms = withIntakes(perms, a.Role, opts.StreamPrefix, quotas.Workers)
		}
		c := Credential{Name: a.Name, Role: a.Role, URL: opts.URL, InboxPrefix: InboxPrefix(a.Name), Permissions: perms}
		u := confUser{name: a.Name, worker: a.Role == RoleWorker, perms: perms}
		if u.worker {
			c.Account = WorkerAccount(a.Name, opts.StreamPrefix)
			c.JetStreamAPIPrefix = streams.Topology{Prefix: opts.StreamPrefix}.WorkerAPIPrefix()
		} else {
			c.Account = DeploymentAccount(opts.StreamPrefix)
		}
		if opts.NKeys {
			kp, err := nkeys.CreateUser()
			if err != nil {
				return nil, fmt.Errorf("auth: nkey for %s: %w", a.Name, err)
			}
			seed, err := kp.Seed()
			if err != nil {
				return nil, fmt.Errorf("auth: nkey for %s: %w", a.Name, err)
			}
			pub, err := kp.PublicKey()
			if err != nil {
				return nil, fmt.Errorf("auth: nkey for %s: %w", a.Name, err)
			}
			actorFiles = append(actorFiles, File{a.Name + NKeySuffix, append(seed, '\n')})
			c.NKeySeedFile, c.NKeyPublic = path(a.Name+NKeySuffix), pub
			u.nkey = pub
		} else {
			pw, err := newPassword()
			if err != nil {
				return nil, err
			}
			hash, err := bcrypt.GenerateFromPassword([]byte(pw), opts.BcryptCost)
			if err != nil {
				return nil, fmt.Errorf("auth: hash password of %s: %w", a.Name, err)
			}
			c.User, c.Password = a.Name, pw
			u.user, u.password = a.Name, string(hash)
		}
		if opts.TLS {
			leaf, err := newLeaf(opts.Now, ca, a.Name, false, nil)
			if err != nil {
				return nil, err
			}
			actorFiles = append(actorFiles, File{a.Name + CertSuffix, leaf.cert}, File{a.Name + KeySuffix, leaf.key})
			c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = path(CAFile), path(a.Name+CertSuffix), path(a.Name+KeySuffix)
		}
		data, err := json.MarshalIndent(c, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("auth: credential of %s: %w", a.Name, err)
		}
		actorFiles = append(actorFiles, File{a.Name + CredentialSuffix, append(data, '\n')})
		b.Credentials = append(b.Credentials, c)
		users = append(users, u)
	}
	var conf confTLS
	if opts.TLS {
		conf = confTLS{on: true, cert: path(ServerCertFile), key: path(ServerKeyFile), ca: path(CAFile), verify: opts.TLSVerify}
	}
	b.Files = append(b.Files, File{ServerConfigFile, renderConfig(users, opts.StreamPrefix, lim, conf, opts.Partitions, opts.StoreLimit, opts.Now)})
	if quotas != nil {
		data, err := json.MarshalIndent(quotas, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("auth: quotas: %w", err)
		}
		b.Files = append(b.Files, File{QuotasFile, append(data, '\n')})
	}
	b.Files = append(b.Files, tlsFiles...)
	b.Files = append(b.Files, actorFiles...)
	return b, nil
}

// ValidateActors checks that there is at least one actor, that every name is
// a valid actor token and every role known, and that names are unique
// across roles.
func ValidateActors(actors []Actor) error {
	if len(actors) == 0 {
		return errors.New("auth: no actors")
	}
	seen := map[string]Role{}
	for _, a := range actors {
		if !events.ValidToken(a.Name) {
			return fmt.Errorf("auth: invalid actor name %q: want 1 to %d of [A-Za-z0-9_-], not %q", a.Name, events.MaxTokenLen, events.NoJob)
		}
		if _, err := a.Role.inputRole(); err != nil {
			return err
		}
		if r, dup := seen[a.Name]; dup {
			return fmt.Errorf("auth: actor name %q used twice (%s and %s): names are unique across roles", a.Name, r, a.Role)
		}
		seen[a.Name] = a.Role
	}
	return nil
}

// validPrefix is the rule of streams.Topology.Prefix.
func validPrefix(s string) bool {
	return s != "" && (s == events.NoJob || events.ValidToken(s))
}

// newPassword is 32 random bytes, base64url: 43 characters.
func newPassword() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("auth: password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// ExistError reports files that Write would overwrite without force.
type ExistError struct {
	Paths []string
}

// Error lists the files.
func (e *ExistError) Error() string {
	return fmt.Sprintf("auth: %d file(s) exist, not overwriting without force: %s", len(e.Paths), strings.Join(e.Paths, ", "))
}

// Write writes the bundle's files into its Dir (created with mode 0700 if
// missing), each with mode 0600. If any of them exists already and force is
// false, it writes nothing and returns an *ExistError; with force it
// replaces them (each file atomically, through a temporary file and a
// rename). Other files in Dir are left alone, including those of a previous
// run for actors no longer listed.
func (b *Bundle) Write(force bool) error {
	if err := os.MkdirAll(b.Dir, 0o700); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if !force {
		var exist []string
		for _, f := range b.Files {
			p := filepath.Join(b.Dir, f.Name)
			if _, err := os.Lstat(p); err == nil {
				exist = append(exist, p)
			} else if !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("auth: %w", err)
			}
		}
		if len(exist) > 0 {
			return &ExistError{Paths: exist}
		}
	}
	for _, f := range b.Files {
		if err := writeFile(filepath.Join(b.Dir, f.Name), f.Data); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	name := tmp.Name()
	fail := func(err error) error {
		_ = tmp.Close()
		_ = os.Remove(name)
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	if err := tmp.Chmod(FileMode); err != nil {
		return fail(err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(name, path); err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	return nil
}

// Credential returns the credential of actor name, if the bundle has it.
func (b *Bundle) Credential(name string) (Credential, bool) {
	for _, c := range b.Credentials {
		if c.Name == name {
			return c, true
		}
	}
	return Credential{}, false
}

// ServerConfigPath is the absolute path of the bundle's server.conf.
func (b *Bundle) ServerConfigPath() string { return filepath.Join(b.Dir, ServerConfigFile) }
