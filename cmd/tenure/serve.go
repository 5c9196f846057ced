package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lmittmann/tint"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/maknow/tenure/api"
	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/ui"
)

// connFlags are the usual NATS connection options, shared by every command
// that talks to a server. The password comes from --password-file, the
// environment (NATS_PASSWORD) or a credential file (--creds-json), so that
// it need not be on the command line; --password, which every local user
// can read in ps, is kept for compatibility and warned about.
type connFlags struct {
	url, creds, nkey, user, password, passwordFile, tlsCA, tlsCert, tlsKey, inbox string

	cred     *auth.Credential // --creds-json (or --credential), read when parsed
	credPath string
	set      map[string]bool // the connection flags given
	warn     io.Writer       // where --password's warning goes: the flag set's output
}

// passwordEnv is the environment variable a password is read from when no
// flag gives one.
const passwordEnv = "NATS_PASSWORD"

func (c *connFlags) register(fs *flag.FlagSet, urlHelp string) {
	c.set, c.warn = map[string]bool{}, fs.Output()
	str := func(p *string, name, value, usage string) {
		fs.Func(name, usage, func(v string) error { *p, c.set[name] = v, true; return nil })
		*p = value
	}
	str(&c.url, "nats-url", os.Getenv("NATS_URL"), urlHelp+" (env NATS_URL; default with --creds-json: the credential's URL)")
	credential := func(v string) error {
		cr, err := auth.ReadCredential(v)
		if err != nil {
			return err
		}
		c.cred, c.credPath, c.set["creds-json"] = &cr, v, true
		return nil
	}
	fs.Func("creds-json", "the credential `FILE` of tenure auth init (DIR/<name>.creds.json): URL, user and password or nkey seed file, inbox prefix and TLS files in one; other connection flags given override its values", credential)
	fs.Func("credential", "the same as --creds-json `FILE` (its older name)", credential)
	str(&c.creds, "creds", "", "NATS (JWT) .creds file; for the .creds.json of tenure auth init, --creds-json")
	str(&c.nkey, "nkey", "", "NATS nkey seed file")
	str(&c.user, "user", "", "NATS user")
	str(&c.passwordFile, "password-file", "", "file holding the NATS password (its first line)")
	str(&c.password, "password", "", "NATS password: visible to every local user in ps; prefer --password-file, --creds-json or env "+passwordEnv)
	str(&c.tlsCA, "tlsca", "", "CA certificate file to verify the server")
	str(&c.tlsCert, "tlscert", "", "client certificate file")
	str(&c.tlsKey, "tlskey", "", "client private key file")
	str(&c.inbox, "inbox-prefix", "", "reply inbox prefix, e.g. _INBOX_<user> when permissions allow only that (tenure auth init)")
}

// resolved is the connection configuration of the flags: the credential's
// values under the flags given, and the password from --password,
// --password-file or NATS_PASSWORD, in that order.
func (c *connFlags) resolved() (streams.ConnectConfig, string, error) {
	cfg := streams.ConnectConfig{
		URL: c.url, CredsFile: c.creds, NKeySeedFile: c.nkey,
		User: c.user, Password: c.password, TLSCAFile: c.tlsCA, TLSCertFile: c.tlsCert, TLSKeyFile: c.tlsKey,
	}
	inbox := c.inbox
	if c.set["password"] && c.set["password-file"] {
		return cfg, "", fmt.Errorf("%w: --password and --password-file are exclusive", errUsage)
	}
	if c.set["password"] && c.warn != nil {
		fmt.Fprintln(c.warn, "tenure: warning: --password is visible to every local user (ps); use --password-file, --creds-json or env "+passwordEnv)
	}
	if c.set["password-file"] {
		b, err := os.ReadFile(c.passwordFile)
		if err != nil {
			return cfg, "", fmt.Errorf("%w: --password-file: %v", errUsage, err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		cfg.Password = strings.TrimRight(line, "\r")
	}
	if cr := c.cred; cr != nil {
		if c.set["creds"] || c.set["nkey"] || c.set["user"] && cr.NKeySeedFile != "" {
			return cfg, "", fmt.Errorf("%w: --creds-json %s authenticates already: give no --creds, --nkey or --user with it", errUsage, c.credPath)
		}
		if cfg.URL == "" {
			cfg.URL = cr.URL
		}
		if !c.set["user"] {
			cfg.User = cr.User
		}
		if cfg.Password == "" && !c.set["password"] {
			cfg.Password = cr.Password
		}
		cfg.NKeySeedFile = cr.NKeySeedFile
		if !c.set["tlsca"] {
			cfg.TLSCAFile = cr.TLSCAFile
		}
		if !c.set["tlscert"] && !c.set["tlskey"] {
			cfg.TLSCertFile, cfg.TLSKeyFile = cr.TLSCertFile, cr.TLSKeyFile
		}
		if !c.set["inbox-prefix"] {
			inbox = cr.InboxPrefix
		}
	}
	if cfg.Password == "" && cfg.User != "" {
		cfg.Password = os.Getenv(passwordEnv)
	}
	return cfg, inbox, nil
}

func (c *connFlags) connect(name string, extra ...nats.Option) (*nats.Conn, error) {
	cfg, inbox, err := c.resolved()
	if err != nil {
		return nil, err
	}
	cfg.Name = name
	return streams.Connect(cfg, append([]nats.Option{nats.CustomInboxPrefix(streams.PrivateInboxPrefix(inbox))}, extra...)...)
}

// newLogger returns coloured text logs on a terminal (tint), JSON otherwise
// when asked.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: bad --log-level %q", errUsage, level)
	}
	switch format {
	case "text":
		noColor := true
		if f, ok := w.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				noColor = os.Getenv("NO_COLOR") != ""
			}
		}
		return slog.New(tint.NewTextHandler(w, &tint.Options{Level: lvl, TimeFormat: time.TimeOnly, NoColor: noColor})), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})), nil
	}
	return nil, fmt.Errorf("%w: --log-format must be text or json, not %q", errUsage, format)
}

// coordinatorIDFile is the file of a data directory that keeps the
// coordinator id of `tenure serve` on it, next to its lock file.
const coordinatorIDFile = "coordinator-id"

// hostToken is the host name reduced to token characters, at most 40 of
// them.
func hostToken() string {
	host, _ := os.Hostname()
	var b strings.Builder
	for _, r := range host {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		}
		if b.Len() >= 40 {
			break
		}
	}
	return b.String()
}

// processID is the coordinator id of a serve with no data directory of its
// own (--nats-url without --data): c-<host>-<pid>, new on every start.
func processID() string { return "c-" + hostToken() + "-" + strconv.Itoa(os.Getpid()) }

// dataDirID returns the coordinator id kept in dir (whose lock the caller
// holds), creating it on the first start: c-<host>-<10 random base-32
// characters>. So one deployment keeps its id across restarts (its status
// subject tenure.status.<id>, its metric labels, its leadership entry,
// which a restarted coordinator takes back at once), and two data
// directories, on one host or two with the same name, get different ids.
//
// The id is a name, not a secret: it is in every tick's subject and in the
// status subjects, and nothing is derived from it that a worker could use
// (leadership is a compare-and-set on the entry's revision, message ids
// and the lease key are random). The random part only keeps ids apart; a
// copy of the data directory is a copy of its id, so give a copy run
// beside the original its own --id (or remove its coordinator-id file).
func dataDirID(dir string) (string, error) {
	path := filepath.Join(dir, coordinatorIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if !events.ValidToken(id) {
			return "", fmt.Errorf("%s holds %q, not a coordinator id (1 to %d of [A-Za-z0-9_-]): fix it, remove it (a new id is made), or give --id", path, id, events.MaxTokenLen)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("coordinator id: %w", err)
	}
	id := "c-" + hostToken() + "-" + strings.ToLower(rand.Text()[:10])
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("coordinator id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("coordinator id: %w", err)
	}
	return id, nil
}

var serveCmd = &command{
	name:    "serve",
	summary: "run the coordinator (embedded nats-server by default)",
	usage:   "tenure serve [flags]",
	help: `Runs Tenure's coordinator until interrupted. By default it starts an
embedded nats-server on --listen with JetStream in --data and
sync_interval always (every input is on disk before its ack; --sync
interval is lazier, see README); with --nats-url it connects to a running
server or cluster instead. It creates the input and decision streams if
they are missing, folds every stored input in order and appends one verdict
for each, ticks when deadlines are due, snapshots the projection, and
publishes signed chain heads for auditors.

Several coordinators may serve one deployment: one is live (its leadership
is a KV entry it renews), the others fold in the background as standbys
and take over after --leader-ttl. A deployment created with --partitions N
runs one coordinator per partition in this process. --http also serves the
web UI, /healthz and /metrics; the UI opens only to a token, and serve makes
two in the data directory on its first start (board-operator.token and
board-viewer.token; the log says where).

It also answers the state API (tenure.api.>, PROTOCOL.md §23: the jobs'
projections, the queues' depth, workers and rates, for tenure jobs and
tenure queues) from a read model of the decision stream it rebuilds at
every start, from the first decision or, once the log's first segments
were removed (tenure log remove), from the stored snapshot; the web UI of
--http shows the same read model. --no-api turns the API off. The status and
$SRV endpoints, the state API and the web UI use a second connection
(tenure-service-<id>), so that a flood aimed at their subjects never
slows the coordinator's own.

On a brand-new deployment under tenure auth init (--creds-json of its
coordinator), the coordinator's credential may update no stream: once its
rules and policy are stored it waits, saying so in its status and log, for
the administrator's tenure genesis to widen the input stream, then goes
live. Later starts need nothing of it. Without authorization it widens the
stream itself. While live, a change of its streams' configuration that its
start would refuse makes it refuse at once.`,
	run: runServe,
}

func runServe(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var conn connFlags
	conn.register(fs, "connect to this NATS server or cluster instead of running the embedded one")
	data := fs.String("data", "./tenure-data", "data directory of the embedded nats-server")
	listen := fs.String("listen", "127.0.0.1:4222", "client address of the embedded nats-server (tenure cluster up's node 1 defaults to the same port: serve says so if it is taken)")
	sync := fs.String("sync", "always", "embedded server durability: always (fsync before every ack) or interval (lazier; see README)")
	serverConf := fs.String("server-config", "", "nats-server configuration file for the embedded server (authorization, TLS)")
	id := fs.String("id", "", "coordinator id: its actor token on tick and policy inputs, its status subject tenure.status.<id> (default: the id kept in the data directory's "+coordinatorIDFile+" file, made on the first start; with --nats-url and no --data, c-<host>-<pid>, new on every start)")
	leaderTTL := fs.Duration("leader-ttl", coordinator.DefaultLeaderTTL, "lifetime of the leadership entry; a standby takes over after it")
	snapEvery := fs.Int("snapshot-every", coordinator.DefaultSnapshotEvery, "inputs between snapshots (negative: never)")
	snapInterval := fs.Duration("snapshot-interval", coordinator.DefaultSnapshotInterval, "time between snapshots")
	replicas := fs.Int("replicas", 0, "stream replicas when creating the topology (default: 3 when connected to a cluster of 3 or more servers, else 1)")
	logRetention := fs.Bool("log-retention", false, "create the streams so that archived segments of the log can be removed (tenure log): chosen when the deployment is created, see README \"Retention of the log\"")
	partitions := fs.Uint("partitions", 0, "partitions of the deployment (0: unpartitioned); fixed when it is created, see README")
	logFormat := fs.String("log-format", "text", "text (coloured on a terminal) or json")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	var webUI uiFlags
	webUI.register(fs, "", "also serve the web UI, /healthz and /metrics on this address, e.g. 127.0.0.1:8080 (default: none)",
		"directory of the board's token files ("+ui.OperatorTokenFile+", "+ui.ViewerTokenFile+"), made there on the first start (default: the data directory)")
	var headFlags serveHeadFlags
	headFlags.register(fs)
	noAPI := fs.Bool("no-api", false, "do not answer the state API (tenure.api.>: jobs, queues), which keeps a read model of the decision stream in memory")
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	if *sync != "always" && *sync != "interval" {
		return fmt.Errorf("%w: --sync must be always or interval", errUsage)
	}
	if err := webUI.check(); err != nil {
		return err
	}
	dataSet := false
	fs.Visit(func(f *flag.Flag) { dataSet = dataSet || f.Name == "data" })
	// The board's tokens are kept in the data directory, unless given.
	uiTokenDir := ""
	if conn.url == "" || dataSet {
		if uiTokenDir, err = filepath.Abs(*data); err != nil {
			return err
		}
	} else if webUI.http != "" && len(webUI.tokenFiles) == 0 && webUI.tokenDir == "" {
		return fmt.Errorf("%w: --http with --nats-url and no --data: give the board's tokens (--ui-token-file FILE, as tenure auth init writes them, or --ui-token-dir DIR, where they are made)", errUsage)
	}
	if *partitions > events.MaxPartitions {
		return fmt.Errorf("%w: --partitions: at most %d", errUsage, events.MaxPartitions)
	}
	if !headFlags.off && headFlags.interval <= 0 {
		return fmt.Errorf("%w: --head-interval must be positive", errUsage)
	}
	count := uint32(*partitions)

	ownServer := conn.url == ""
	appendMode := coordinator.AppendMeasure // a server of its own: set below
	if ownServer {
		host, portStr, err := net.SplitHostPort(*listen)
		if err != nil {
			return fmt.Errorf("%w: --listen: %v", errUsage, err)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return fmt.Errorf("%w: --listen port: %v", errUsage, err)
		}
		dir, err := filepath.Abs(*data)
		if err != nil {
			return err
		}
		if *serverConf != "" {
			// The embedded server's mapping would replace the file's, while
			// the file's permissions name the other count's streams.
			n, found, err := embedded.ConfigFilePartitions(*serverConf)
			if err != nil {
				return err
			}
			if found && n != count {
				return fmt.Errorf("%w: --server-config %s is for %d partitions (its input mapping), --partitions is %d: generate it with tenure auth init --partitions %d, or serve with --partitions %d",
					errUsage, *serverConf, n, count, count, n)
			}
		}
		srv, err := embedded.Start(embedded.Config{
			DataDir: dir, Host: host, Port: port, SyncAlways: *sync == "always",
			ConfigFile: *serverConf, ServerName: "tenure", Logger: log, Partitions: count,
		})
		if err != nil {
			var le *streams.LockedError
			if !errors.As(err, &le) && portInUse(host, port) {
				return servePortTaken(host, port) // the data directory first: it is the one that matters
			}
			return dataDirInUse(err, "serve with another --data directory")
		}
		defer srv.Shutdown()
		conn.url = srv.ClientURL()
		// This process knows how its server stores: with sync always,
		// atomic batches win whatever the load (one fsync for many
		// decisions), so the coordinator batches at once instead of
		// measuring (coordinator.AppendMode). With sync interval it
		// measures: batches win for some loads (a queue's) and lose for
		// others (SDK workers' bursts of renewals), BENCHMARKS.md.
		if srv.SyncAlways() {
			appendMode = coordinator.AppendBatched
		}
		log.Info("embedded nats-server ready", "data", dir, "sync", *sync, "sync_always", srv.SyncAlways(), "appends", appendMode)
	}
	if *id == "" {
		switch {
		case ownServer:
			// The embedded server holds the directory's lock.
			dir, _ := filepath.Abs(*data)
			if *id, err = dataDirID(dir); err != nil {
				return err
			}
		case dataSet:
			// One process per data directory, and so per kept id.
			lock, err := streams.LockDir(*data)
			if err != nil {
				return dataDirInUse(err, "serve with another --data directory")
			}
			defer lock.Close()
			if *id, err = dataDirID(lock.Dir()); err != nil {
				return err
			}
		default:
			*id = processID()
			log.Info("coordinator id new on every start: give --id or --data DIR to keep one", "coordinator", *id)
		}
	} else if !events.ValidToken(*id) {
		return fmt.Errorf("%w: --id must be 1 to %d of [A-Za-z0-9_-], got %q", errUsage, events.MaxTokenLen, *id)
	}
	headSigner, err := headFlags.signer(*data, ownServer || dataSet, log)
	if err != nil {
		return err
	}
	nc, err := conn.connect("tenure-coordinator-" + *id)
	if err != nil {
		return err
	}
	defer nc.Close()
	// The responders on subjects anyone in the deployment's account can
	// reach (status, $SRV, the state API, the stream advisories: a worker
	// may aim a push consumer of its own decisions at any of them) run on
	// a connection of their own, so that a flood there is dropped on it,
	// never slowing the coordinator's appends on nc.
	svc, err := conn.connect("tenure-service-"+*id, nats.ErrorHandler(serviceErrors(log)))
	if err != nil {
		return err
	}
	defer svc.Close()

	if *replicas == 0 {
		*replicas = defaultReplicas(nc)
		log.Info("stream replicas", "replicas", *replicas, "cluster", nc.ConnectedClusterName(), "servers_known", len(nc.Servers()))
	}
	cfg := coordinator.Config{
		ID: *id, Conn: nc, Topology: streams.Topology{Replicas: *replicas, LogRetention: *logRetention}, LeaderTTL: *leaderTTL,
		SnapshotEvery: *snapEvery, SnapshotInterval: *snapInterval, Logger: log,
		Metrics: webUI.coordinatorMetrics(count), HeadSigner: headSigner, HeadInterval: headFlags.interval,
		AppendMode: appendMode, WatchConn: svc,
	}
	cfg.Genesis, cfg.GenesisCommand = genesisMode(&conn, cfg.Topology)
	if cfg.Genesis == coordinator.GenesisAdmin {
		log.Info("the input stream's genesis, on a brand-new deployment, is the administrator's: this coordinator's credential may not update streams", "command", cfg.GenesisCommand)
	}
	if count > 0 {
		g, err := coordinator.NewGroup(cfg, count)
		if err != nil {
			return err
		}
		stateAPI, err := newAPI(svc, count, *noAPI, log)
		if err != nil {
			return err
		}
		service, err := addStatusService(svc, g.Coordinators(), *id, stateAPI.srv)
		if err != nil {
			return err
		}
		defer func() { _ = service.Stop() }()
		stopUI, err := webUI.startLocal(ctx, svc, conn.url, uiTokenDir, g.Coordinators(), streams.Topology{Replicas: *replicas}, count, stateAPI.model(), log)
		if err != nil {
			return err
		}
		defer stopUI()
		stateAPI.start(ctx)
		defer stateAPI.stop()
		log.Info("tenure serving: connect workers to "+conn.url, "nats_url", conn.url, "coordinator", *id, "partitions", count,
			"inputs", "tenure.in.<role>.<actor>.<job>.<verb>[.<partition>]", "decisions", "tenure.out.<addressee>.<job>.<kind>.<partition>")
		err = g.Run(ctx)
		return stopped(ctx, err, log)
	}
	c, err := coordinator.New(cfg)
	if err != nil {
		return err
	}
	stateAPI, err := newAPI(svc, 0, *noAPI, log)
	if err != nil {
		return err
	}
	service, err := addStatusService(svc, []*coordinator.Coordinator{c}, *id, stateAPI.srv)
	if err != nil {
		return err
	}
	defer func() { _ = service.Stop() }()
	stopUI, err := webUI.startLocal(ctx, svc, conn.url, uiTokenDir, []*coordinator.Coordinator{c}, streams.Topology{Replicas: *replicas}, 0, stateAPI.model(), log)
	if err != nil {
		return err
	}
	defer stopUI()
	stateAPI.start(ctx)
	defer stateAPI.stop()
	log.Info("tenure serving: connect workers to "+conn.url, "nats_url", conn.url, "coordinator", *id,
		"inputs", "tenure.in.<role>.<actor>.<job>.<verb>", "decisions", "tenure.out.<addressee>.<job>.<kind>")
	err = c.Run(ctx)
	return stopped(ctx, err, log)
}

// stopped ends serve after the coordinators' Run returned err. A coordinator
// that refuses to go live (a log it cannot reproduce, a stream it cannot
// use) has logged why and what to do; serve then keeps its embedded server,
// status service and web UI up, so that `tenure status`, `tenure audit` and
// the board can show the operator the same, until it is stopped (exit 1).
//
// The exception is a refusal that this serve's own flags caused, with
// nothing in the log to show: --log-retention on streams created without
// it (JetStream cannot cancel DenyPurge). serve exits 1 at once, saying
// so, as README says.
func stopped(ctx context.Context, err error, log *slog.Logger) error {
	if retentionRefused(err) {
		log.Error("refusing to start: --log-retention, but the streams were created without it", "err", err, "what_to_do", coordinator.Remedy(err))
		return err
	}
	if err != nil && ctx.Err() == nil && coordinator.Remedy(err) != "" {
		log.Error("not live: serving status and audits only until stopped (Ctrl-C); `tenure status` shows why", "err", err)
		<-ctx.Done()
	}
	log.Info("tenure stopped")
	return err
}

// retentionRefused reports whether err is the refusal of --log-retention
// on streams that deny purges.
func retentionRefused(err error) bool {
	var m *streams.ConfigMismatchError
	return errors.As(err, &m) && m.Field == "DenyPurge" && m.Got == "true"
}

// dataDirInUse turns the *streams.LockedError of a data directory that
// another process holds into one line saying what to do (stop the
// holder, or what instead); other errors are returned as they are.
func dataDirInUse(err error, instead string) error {
	var le *streams.LockedError
	if !errors.As(err, &le) {
		return err
	}
	return fmt.Errorf("data directory %s is in use by %s: stop that process, or %s", le.Dir, le.Holder, instead)
}

// defaultReplicas is 3 on a cluster of at least three servers (as far as
// the connection knows them: the URLs given and those the cluster
// advertised), else 1.
func defaultReplicas(nc *nats.Conn) int {
	if nc.ConnectedClusterName() != "" && len(nc.Servers()) >= 3 {
		return 3
	}
	return 1
}

// status is what `nats micro info tenure` / `nats micro stats tenure` shows
// in the endpoint data, and what the status endpoint answers (the web UI
// reads the same object).
type status = ui.CoordinatorStatus

func currentStatus(ctx context.Context, js jetstream.JetStream, c *coordinator.Coordinator) status {
	st := status{Stats: c.Stats()}
	top := c.Topology()
	if s, err := js.Stream(ctx, top.InputStream()); err == nil {
		if info, err := s.Info(ctx); err == nil {
			st.InputStreamSeq = info.State.LastSeq
			if st.InputStreamSeq > st.InputsFolded {
				st.Lag = st.InputStreamSeq - st.InputsFolded
			}
		}
	}
	if kv, err := js.KeyValue(ctx, top.LeaderBucket()); err == nil {
		if e, err := kv.Get(ctx, "leader"); err == nil {
			st.Leader = string(e.Value())
		}
	}
	return st
}

// runningAPI is the state API of a serve (srv nil with --no-api): its
// read model, which the web UI of the process shares, and how to start
// and stop its reading of the decision streams.
type runningAPI struct {
	srv  *api.Server
	log  *slog.Logger
	stop func()
}

// newAPI makes the state API's server (package api) for a deployment of
// count partitions, unless off; start starts its read model.
func newAPI(nc *nats.Conn, count uint32, off bool, log *slog.Logger) (*runningAPI, error) {
	r := &runningAPI{log: log, stop: func() {}}
	if off {
		return r, nil
	}
	s, err := api.New(api.Config{Conn: nc, Partitions: count, Logger: log})
	if err != nil {
		return nil, err
	}
	r.srv = s
	return r, nil
}

// model is the API's read model, nil with --no-api.
func (r *runningAPI) model() *api.Model {
	if r.srv == nil {
		return nil
	}
	return r.srv.Model()
}

// start follows the decision streams into the read model (from their
// first decision, or from the stored snapshot when their first segments
// were removed) until ctx ends or stop.
func (r *runningAPI) start(ctx context.Context) {
	if r.srv == nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = r.srv.Run(ctx); close(done) }()
	r.log.Info("state API: "+api.SubjectsFilter+" (tenure jobs, tenure queues)", "subjects", api.SubjectsFilter)
	r.stop = func() { cancel(); <-done }
}

// addStatusService registers the coordinators as a NATS micro service
// "tenure" with a "status" endpoint (subject tenure.status.<id>), or, for
// the partitions of a partitioned deployment, one endpoint per partition
// ("status-p<k>", subject tenure.status.<id>.<k>), each reporting its
// partition's coordinator in its stats; and, unless apiSrv is nil, the
// state API's endpoints (tenure.api.>), whose stats are apiSrv's.
func addStatusService(nc *nats.Conn, cs []*coordinator.Coordinator, id string, apiSrv *api.Server) (micro.Service, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	// Each status costs two JetStream requests: it is computed at most once
	// a second per coordinator, however many requests come (anyone who can
	// reach the subjects, a push consumer delivering to them included).
	type cached struct {
		at time.Time
		st status
	}
	var mu sync.Mutex
	cache := map[*coordinator.Coordinator]cached{}
	stats := func(c *coordinator.Coordinator) any {
		mu.Lock()
		defer mu.Unlock()
		if e, ok := cache[c]; ok && time.Since(e.at) < time.Second {
			e.st.Stats = c.Stats() // cheap: always current
			return e.st
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st := currentStatus(ctx, js, c)
		cache[c] = cached{time.Now(), st}
		return st
	}
	byName := make(map[string]*coordinator.Coordinator, len(cs))
	for _, c := range cs {
		byName[statusEndpoint(c)] = c
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        "tenure",
		Version:     version,
		Description: "Tenure lease coordinator " + id,
		Metadata:    map[string]string{"coordinator": id},
		StatsHandler: func(e *micro.Endpoint) any {
			if c, ok := byName[e.Name]; ok {
				return stats(c)
			}
			if apiSrv != nil {
				return apiSrv.EndpointStats(e)
			}
			return nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("status service: %w", err)
	}
	for _, c := range cs {
		subject := "tenure.status." + id
		if p := c.Topology().Partition; p.Partitioned() {
			subject += "." + p.Token()
		}
		err = svc.AddEndpoint(statusEndpoint(c), micro.HandlerFunc(func(r micro.Request) {
			if strings.HasPrefix(r.Reply(), "$JS.ACK.") {
				return // a consumer's delivery aimed at the endpoint, not a request
			}
			b, _ := json.Marshal(stats(c))
			_ = r.Respond(b)
		}), micro.WithEndpointSubject(subject), micro.WithEndpointPendingLimits(servicePendingMsgs, servicePendingBytes))
		if err != nil {
			return nil, fmt.Errorf("status endpoint: %w", err)
		}
	}
	if apiSrv != nil {
		if err := apiSrv.AddEndpoints(svc); err != nil {
			_ = svc.Stop()
			return nil, err
		}
	}
	return svc, nil
}

// Pending limits of the status endpoints' subscriptions: past them, a
// flood aimed at the status subject (a push consumer delivering there) is
// dropped by the client library and counted, on the service connection.
const (
	servicePendingMsgs  = 1024
	servicePendingBytes = 4 << 20
)

// serviceErrors is the error handler of serve's service connection: a
// flood aimed at its subjects overflows their pending limits (a slow
// consumer: the client library drops and counts what is over), which it
// logs once a minute at most, with how many drops came since; other errors
// are logged as they come.
func serviceErrors(log *slog.Logger) nats.ErrHandler {
	var mu sync.Mutex
	var last time.Time
	var since int
	return func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if !errors.Is(err, nats.ErrSlowConsumer) {
			log.Warn("service connection", "err", err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		since++
		if time.Since(last) < time.Minute {
			return
		}
		subject := ""
		if sub != nil {
			subject = sub.Subject
		}
		log.Warn("service connection: messages dropped over the pending limit (a flood aimed at the status or state API subjects; the coordinator's own connection is not affected)",
			"subject", subject, "slow_consumer_events", since)
		last, since = time.Now(), 0
	}
}

// genesisMode is how the coordinators of a serve connected with conn end
// a brand-new input stream's genesis (coordinator.Config.Genesis), and the
// command their status names while they wait: with a credential of tenure
// auth init whose permissions do not allow it to update the input stream
// (every coordinator's since the administrator's role exists), the
// administrator's tenure genesis, with the administrator's credential
// beside it when there is one; otherwise the coordinator itself, which
// waits for the same command if its update is refused.
func genesisMode(conn *connFlags, top streams.Topology) (coordinator.GenesisMode, string) {
	cmd := coordinator.DefaultGenesisCommand
	cr := conn.cred
	if cr == nil {
		return coordinator.GenesisSelf, cmd
	}
	admin := filepath.Join(filepath.Dir(conn.credPath), "admin"+auth.CredentialSuffix)
	if c, err := auth.ReadCredential(admin); err == nil && c.Role == auth.RoleAdmin {
		if abs, err := filepath.Abs(admin); err == nil {
			admin = abs
		}
		cmd = "tenure genesis --creds-json " + admin
	}
	// The input stream, or partition 0's: the same right on each.
	updates := []string{"$JS.API.STREAM.UPDATE." + top.InputStream(), "$JS.API.STREAM.UPDATE." + top.Partitions(1)[0].InputStream()}
	if cr.Role == auth.RoleCoordinator && !slices.ContainsFunc(cr.Permissions.PublishAllow, func(s string) bool { return slices.Contains(updates, s) }) {
		return coordinator.GenesisAdmin, cmd
	}
	return coordinator.GenesisSelf, cmd
}

// statusEndpoint is the name of c's status endpoint.
func statusEndpoint(c *coordinator.Coordinator) string {
	if p := c.Topology().Partition; p.Partitioned() {
		return "status-p" + p.Token()
	}
	return "status"
}
