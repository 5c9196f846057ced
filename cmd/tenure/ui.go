package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/api"
	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/ui"
)

// uiFlags are the web UI's flags, shared by `tenure ui` and `tenure serve`.
type uiFlags struct {
	http       string
	actions    bool
	as         string
	asSet      bool
	tokenFiles fileList
	tokenDir   string
	credential string
	secure     bool
	metrics    *ui.Metrics
}

func (u *uiFlags) register(fs *flag.FlagSet, httpDefault, httpHelp, tokenDirHelp string) {
	fs.StringVar(&u.http, "http", httpDefault, httpHelp)
	fs.BoolVar(&u.actions, "ui-actions", false, "allow operator actions (cancel, revoke, affirm, settle, retry, discard) from the web UI, to operator sessions; each is an input judged like any other (default: read-only)")
	fs.Func("ui-as", "ops identity (actor token) of the web UI's operator actions (default "+ui.DefaultActor+"; with --ui-credential, the credential's name)", func(s string) error {
		u.as, u.asSet = s, true
		return nil
	})
	fs.Var(&u.tokenFiles, "ui-token-file", "a board token file (tenure auth init writes "+ui.OperatorTokenFile+" and "+ui.ViewerTokenFile+"): the board opens to its token, with its role; repeatable. Instead of --ui-token-dir")
	fs.StringVar(&u.tokenDir, "ui-token-dir", "", tokenDirHelp)
	fs.StringVar(&u.credential, "ui-credential", "", "with --ui-actions: the credential file of the ops user the actions publish as (tenure auth init's board"+auth.CredentialSuffix+"); its name is the actions' actor")
	fs.BoolVar(&u.secure, "ui-secure-cookie", false, "mark the board's session cookie Secure although this server speaks plain HTTP: for a proxy that ends TLS in front of it")
}

func (u *uiFlags) check() error {
	if u.actions && u.http == "" {
		return fmt.Errorf("%w: --ui-actions needs --http", errUsage)
	}
	if u.credential != "" && !u.actions {
		return fmt.Errorf("%w: --ui-credential is the credential of --ui-actions", errUsage)
	}
	if u.as == "" && !u.asSet {
		u.as = ui.DefaultActor
	}
	if !events.ValidToken(u.as) {
		return fmt.Errorf("%w: --ui-as must be 1 to 64 of [A-Za-z0-9_-], got %q", errUsage, u.as)
	}
	if len(u.tokenFiles) > 0 && u.tokenDir != "" {
		return fmt.Errorf("%w: --ui-token-file and --ui-token-dir are exclusive", errUsage)
	}
	return nil
}

// tokens reads the board's tokens: the --ui-token-file files, or the
// pair kept in --ui-token-dir (or defaultDir), made there on the first
// start. It returns the files read, operator's first.
func (u *uiFlags) tokens(defaultDir string, log *slog.Logger) ([]ui.Token, []string, error) {
	if len(u.tokenFiles) > 0 {
		var out []ui.Token
		for _, f := range u.tokenFiles {
			t, err := ui.ReadTokenFile(f)
			if err != nil {
				return nil, nil, fmt.Errorf("--ui-token-file: %w", err)
			}
			out = append(out, t)
		}
		return out, u.tokenFiles, nil
	}
	dir := u.tokenDir
	if dir == "" {
		dir = defaultDir
	}
	if dir == "" {
		return nil, nil, fmt.Errorf("%w: the web UI needs a credential: give --ui-token-file FILE (tenure auth init writes them) or --ui-token-dir DIR (made there)", errUsage)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("--ui-token-dir: %w", err)
	}
	toks, made, err := ui.EnsureTokenFiles(dir)
	if err != nil {
		return nil, nil, err
	}
	if len(made) > 0 {
		log.Info("made the web UI's tokens (mode 0600): give their contents to those who may log in", "files", strings.Join(made, " "))
	}
	return toks, []string{filepath.Join(dir, ui.OperatorTokenFile), filepath.Join(dir, ui.ViewerTokenFile)}, nil
}

// coordinatorMetrics returns the observer to give the coordinators of this
// process (of a deployment of count partitions): the UI's metrics when the
// UI runs, none otherwise.
func (u *uiFlags) coordinatorMetrics(count uint32) coordinator.Metrics {
	if u.http == "" {
		return nil
	}
	if u.metrics == nil {
		u.metrics = ui.NewMetricsFor(count)
	}
	return u.metrics
}

// uiRun is a running web UI.
type uiRun struct {
	cancel context.CancelFunc
	done   chan error // receives the server's end, then is closed
	err    error
}

// stop stops the UI and waits for it.
func (r *uiRun) stop() {
	r.cancel()
	for err := range r.done {
		r.err = err
	}
}

// start listens on --http and serves the UI of the deployment of top with
// count partitions (0: unpartitioned) until ctx ends or stop; status
// reports the coordinators. Its tokens are those of --ui-token-file or
// --ui-token-dir (default tokenDir); with --ui-credential its actions
// publish on a connection of their own to url, as that credential's user.
// Without --http it does nothing (nil).
func (u *uiFlags) start(ctx context.Context, nc *nats.Conn, url, tokenDir string, top streams.Topology, count uint32, model *api.Model, status func(context.Context) ([]ui.CoordinatorStatus, error), log *slog.Logger) (*uiRun, error) {
	if u.http == "" {
		return nil, nil
	}
	if u.metrics == nil {
		u.metrics = ui.NewMetricsFor(count)
	}
	tokens, files, err := u.tokens(tokenDir, log)
	if err != nil {
		return nil, err
	}
	var actionsNC *nats.Conn
	if u.credential != "" {
		cred, err := auth.ReadCredential(u.credential)
		if err != nil {
			return nil, fmt.Errorf("--ui-credential: %w", err)
		}
		if cred.Role != auth.RoleOperator && cred.Role != auth.RoleDispatcher {
			return nil, fmt.Errorf("%w: --ui-credential %s is a %s's: the actions need an operator's or dispatcher's (tenure auth init's board%s)", errUsage, u.credential, cred.Role, auth.CredentialSuffix)
		}
		if u.asSet && u.as != cred.Name {
			return nil, fmt.Errorf("%w: --ui-as %s, but --ui-credential is %s's: the actions publish as the credential's user", errUsage, u.as, cred.Name)
		}
		u.as = cred.Name
		if actionsNC, err = cred.Connect(url, nats.Name("tenure-ui-actions-"+cred.Name)); err != nil {
			return nil, fmt.Errorf("--ui-credential %s: %w", u.credential, err)
		}
	}
	closeActions := func() {
		if actionsNC != nil {
			actionsNC.Close()
		}
	}
	srv, err := ui.New(ui.Config{
		Conn: nc, Topology: top, Partitions: count, Status: status, Metrics: u.metrics,
		Actions: u.actions, ActorID: u.as, ActionsConn: actionsNC, Tokens: tokens, SecureCookies: u.secure, Logger: log,
		Model: model,
	})
	if err != nil {
		closeActions()
		return nil, err
	}
	ln, err := net.Listen("tcp", u.http)
	if err != nil {
		closeActions()
		return nil, fmt.Errorf("--http: %w", err)
	}
	mode := "read-only"
	if u.actions {
		mode = "operator actions enabled as ops/" + u.as
	}
	if count > 0 {
		log = log.With("partitions", count)
	}
	// Where the tokens are, never what they are.
	log.Info("web UI on http://"+ln.Addr().String()+"/: log in with the token in "+files[0], "http", ln.Addr().String(), "mode", mode, "token_files", strings.Join(files, " "))
	ctx, cancel := context.WithCancel(ctx)
	r := &uiRun{cancel: cancel, done: make(chan error, 1)}
	go func() {
		defer close(r.done)
		defer closeActions()
		if err := srv.Serve(ctx, ln); err != nil {
			log.Error("web UI stopped", "err", err)
			r.done <- fmt.Errorf("web UI: %w", err)
		}
	}()
	return r, nil
}

// startLocal is start for `tenure serve --http`: /healthz and /metrics
// report the coordinators cs of this process (one, or one per partition of
// a deployment of count partitions), as their status endpoints do.
func (u *uiFlags) startLocal(ctx context.Context, nc *nats.Conn, url, tokenDir string, cs []*coordinator.Coordinator, top streams.Topology, count uint32, model *api.Model, log *slog.Logger) (stop func(), err error) {
	if u.http == "" {
		return func() {}, nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	status := func(ctx context.Context) ([]ui.CoordinatorStatus, error) {
		sts := make([]ui.CoordinatorStatus, 0, len(cs))
		for _, c := range cs {
			sts = append(sts, currentStatus(ctx, js, c))
		}
		return sts, nil
	}
	r, err := u.start(ctx, nc, url, tokenDir, top, count, model, status, log)
	if err != nil {
		return nil, err
	}
	return r.stop, nil
}

var uiCmd = &command{
	name:    "ui",
	summary: "serve the web UI (lease board, job timelines, anomalies, audit), /healthz and /metrics",
	usage:   "tenure ui [flags]",
	help: `Serves the web UI (lease board, job pages, anomalies, audit), /healthz and
/metrics for a running Tenure, reading its streams. The pages are embedded in
the binary: no external resource is loaded. A partitioned deployment (the
partition count its streams record) is followed in every partition: one
board of the jobs of all partitions. The UI opens only to a token (viewer:
no lease id, no payload; operator: everything, and the actions with
--ui-actions): name its files with --ui-token-file (tenure auth init writes
them; tenure serve --http makes them in its data directory), or make them
with --ui-token-dir.`,
	run: runUI,
}

// runUI is `tenure ui`: the web UI on its own, for a running Tenure.
func runUI(ctx context.Context, fs *flag.FlagSet, args []string, _, stderr io.Writer) error {
	var conn connFlags
	conn.register(fs, "NATS server (default nats://127.0.0.1:4222, the local embedded one)")
	var u uiFlags
	u.register(fs, "127.0.0.1:8080", "address to serve the web UI on",
		"directory of the board's token files ("+ui.OperatorTokenFile+", "+ui.ViewerTokenFile+"), made there if missing: e.g. a local tenure serve's data directory, which makes them too (one of --ui-token-dir and --ui-token-file is required)")
	prefix := fs.String("prefix", streams.DefaultPrefix, "stream name prefix of the topology")
	statusWait := fs.Duration("status-wait", 300*time.Millisecond, "how long /healthz and /metrics collect the coordinators' status answers")
	logFormat := fs.String("log-format", "text", "text (coloured on a terminal) or json")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parse(fs, args); err != nil {
		return err
	}
	if u.http == "" {
		return fmt.Errorf("%w: --http is required", errUsage)
	}
	if err := u.check(); err != nil {
		return err
	}
	if len(u.tokenFiles) == 0 && u.tokenDir == "" {
		return fmt.Errorf("%w: the web UI needs a credential: --ui-token-file FILE (tenure auth init writes %s and %s; tenure serve --http makes them in its data directory) or --ui-token-dir DIR (made there)", errUsage, ui.OperatorTokenFile, ui.ViewerTokenFile)
	}
	if !validPrefix(*prefix) {
		return fmt.Errorf("%w: invalid --prefix %q: want 1 to 64 of [A-Za-z0-9_-]", errUsage, *prefix)
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	defaultURL(&conn)
	nc, err := conn.connect("tenure-ui")
	if err != nil {
		return err
	}
	defer nc.Close()
	top := streams.Topology{Prefix: *prefix}
	count, err := discover(ctx, nc, top, log)
	if err != nil || ctx.Err() != nil {
		return err
	}
	r, err := u.start(ctx, nc, conn.url, "", top, count, nil, ui.StatusFromService(nc, *statusWait), log)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err := <-r.done:
		if err != nil {
			r.cancel()
			return err
		}
	}
	r.stop()
	return r.err
}

// discover finds the partition count of the deployment of top
// (streams.Discover), waiting for its streams to exist: `tenure ui` may
// start before `tenure serve` has created them. It returns ctx's end as nil
// with count 0.
func discover(ctx context.Context, nc *nats.Conn, top streams.Topology, log *slog.Logger) (uint32, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, fmt.Errorf("jetstream: %w", err)
	}
	for waited := false; ; waited = true {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := streams.Discover(dctx, js, top)
		cancel()
		if err == nil {
			if waited {
				log.Info("deployment found", "partitions", n)
			}
			return n, nil
		}
		if !waited {
			log.Warn("waiting for the deployment's streams", "err", err)
		}
		select {
		case <-ctx.Done():
			return 0, nil
		case <-time.After(time.Second):
		}
	}
}
