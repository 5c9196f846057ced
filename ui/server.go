package ui

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/maknow/tenure/api"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/streams"
)

//go:embed assets
var assetFS embed.FS

// DefaultActor is the default ops identity of operator actions.
const DefaultActor = "ui"

// Config configures a UI server.
type Config struct {
	// Conn is the connection to the NATS server or cluster (required).
	Conn *nats.Conn
	// Topology names the streams (streams.Topology{} by default); its
	// Partition is ignored: Partitions says which streams there are.
	Topology streams.Topology
	// Partitions is the partition count of the deployment (0:
	// unpartitioned), as streams.Discover finds it. With N partitions the
	// UI follows the decision streams of all N and merges them into one
	// board.
	Partitions uint32
	// Status reports the coordinators, for /healthz and /metrics (one
	// answer serves the requests of a second). Nil asks the "tenure" NATS
	// micro service (StatusFromService).
	Status func(context.Context) ([]CoordinatorStatus, error)
	// Metrics are served on /metrics (nil: NewMetrics()). Give the same
	// Metrics to the coordinator of this process, if any.
	Metrics *Metrics
	// Tokens are the credentials that open the board, each granting its
	// role (NewToken, ReadTokenFile, EnsureTokenFiles): at least one. The
	// server keeps only their SHA-256.
	Tokens []Token
	// SessionTTL is how long a login lasts (default DefaultSessionTTL).
	SessionTTL time.Duration
	// SecureCookies marks the session cookie Secure even on a request
	// that did not come over TLS: for a board behind a proxy that ends
	// TLS. (A request over TLS always gets a Secure cookie.)
	SecureCookies bool
	// Actions enables operator actions (cancel, revoke, affirm, settle, retry, discard)
	// from the job page, for sessions of the operator role; each is an
	// input published as the ops actor ActorID, judged by the coordinator
	// like any other. Off by default: the UI is read-only.
	Actions bool
	// ActorID is the ops identity of actions (default DefaultActor).
	ActorID string
	// ActionsConn is the connection the actions publish on (default
	// Conn): under `tenure auth init`'s permissions, a connection of an
	// ops user whose name is ActorID (tenure serve --ui-credential), since
	// the coordinator's user may publish no ops input.
	ActionsConn *nats.Conn
	// StandbyMaxBehind is how many decisions a standby coordinator may be
	// behind the decision stream and still be ready (warm); default
	// DefaultStandbyMaxBehind.
	StandbyMaxBehind int
	// FeedSize is how many anomalies the feed keeps (default DefaultAnomalyFeed).
	FeedSize int
	// MaxHistory is how many of a job's latest decisions its page shows
	// (default DefaultMaxHistory).
	MaxHistory int
	// FlushInterval is how often changes are pushed to pages (default DefaultFlushInterval).
	FlushInterval time.Duration
	// Logger receives the server's log (nil: none).
	Logger *slog.Logger
	// Model is the read model the board shows, when another reader keeps
	// it up to date: in tenure serve, the state API's (api.Server.Model,
	// run by api.Server.Run), so that the process holds one read model,
	// and the board and the API agree. The board attaches its view to it
	// (api.Model.Attach), which must be before it is fed; Run then does
	// not read the streams. Nil: the board makes a read model of its own
	// and Run follows the streams into it (api.Follow).
	Model *api.Model
}

// Server is Tenure's web UI: the board, job pages, the anomalies feed and
// the audit page, their JSON API and live updates, /healthz and /metrics.
// Create it with New and run it with Serve (or Run plus Handler).
type Server struct {
	cfg     Config
	topos   []streams.Topology // every partition's (one when unpartitioned)
	js      jetstream.JetStream
	log     *slog.Logger
	model   *model
	hub     *hub
	metrics *Metrics
	access  *access
	ops     *ops.Client
	results *api.Results // the workers' accounts of results (their details), read from the input streams
	owns    bool         // the read model is the board's own: Run feeds it
	handler http.Handler
	done    chan struct{}
	stop    sync.Once

	auditMu   sync.Mutex // held while an audit runs
	lastMu    sync.Mutex
	lastAudit *AuditResult

	statusMu sync.Mutex
	statusAt time.Time
	statusV  []CoordinatorStatus
	statusE  error
}

// New checks cfg and builds the server; it reads nothing yet.
func New(cfg Config) (*Server, error) {
	if cfg.Conn == nil {
		return nil, errors.New("ui: no NATS connection")
	}
	if cfg.ActorID == "" {
		cfg.ActorID = DefaultActor
	}
	if cfg.StandbyMaxBehind <= 0 {
		cfg.StandbyMaxBehind = DefaultStandbyMaxBehind
	}
	if cfg.MaxHistory <= 0 {
		cfg.MaxHistory = DefaultMaxHistory
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Partitions > events.MaxPartitions {
		return nil, fmt.Errorf("ui: %d partitions: at most %d", cfg.Partitions, events.MaxPartitions)
	}
	cfg.Topology.Partition = events.Partition{}
	if err := cfg.Topology.Validate(); err != nil {
		return nil, fmt.Errorf("ui: %w", err)
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("ui: jetstream: %w", err)
	}
	acc, err := newAccess(cfg.Tokens, cfg.SessionTTL, cfg.SecureCookies)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, topos: cfg.Topology.Partitions(cfg.Partitions), js: js, log: cfg.Logger, metrics: cfg.Metrics, access: acc, done: make(chan struct{})}
	if s.cfg.Status == nil {
		s.cfg.Status = StatusFromService(cfg.Conn, 300*time.Millisecond)
	}
	s.cfg.Status = s.cachedStatus(s.cfg.Status)
	if cfg.Actions {
		conn := cfg.ActionsConn
		if conn == nil {
			conn = cfg.Conn
		}
		if s.ops, err = ops.New(conn, cfg.ActorID, ops.WithPrefix(cfg.Topology.Prefix)); err != nil {
			return nil, fmt.Errorf("ui: %w", err)
		}
	}
	am := cfg.Model
	if am == nil {
		am, s.owns = api.NewModel(cfg.Partitions), true
	} else if am.Partitions() != cfg.Partitions {
		return nil, fmt.Errorf("ui: a read model of %d partitions for a deployment of %d", am.Partitions(), cfg.Partitions)
	}
	s.model = newModelOf(cfg.FeedSize, am)
	s.model.obs = s.metrics
	s.results = api.NewResults(js, cfg.Topology, am)
	s.metrics.attach(s.model, s.cfg.Status)
	s.hub = newHub(s.model, cfg.FlushInterval)
	s.hub.details = func(rows []Row) { s.withDetails(context.Background(), rows) }
	s.handler = s.routes()
	return s, nil
}

// cachedStatus shares one answer of f between the requests of one second.
func (s *Server) cachedStatus(f func(context.Context) ([]CoordinatorStatus, error)) func(context.Context) ([]CoordinatorStatus, error) {
	return func(ctx context.Context) ([]CoordinatorStatus, error) {
		s.statusMu.Lock()
		defer s.statusMu.Unlock()
		if time.Since(s.statusAt) < time.Second {
			return append([]CoordinatorStatus(nil), s.statusV...), s.statusE
		}
		s.statusV, s.statusE = f(ctx)
		s.statusAt = time.Now()
		return append([]CoordinatorStatus(nil), s.statusV...), s.statusE
	}
}

// Handler is the HTTP handler of every page, API endpoint, /healthz and
// /metrics, each behind its access check (the package doc). Pages get live
// updates only while Run (or Serve) runs.
func (s *Server) Handler() http.Handler { return s.handler }

// Run pushes the read model's changes to the pages until ctx ends, and,
// unless the read model is another reader's (Config.Model), follows the
// decision streams (every partition's) into it (api.Follow: from the first
// decision, or from the stored snapshot when the streams' first segments
// were removed), waiting for the streams to exist and resuming each
// partition where it stopped after errors.
func (s *Server) Run(ctx context.Context) error {
	defer s.stop.Do(func() { close(s.done) })
	var wg sync.WaitGroup
	wg.Go(func() { s.hub.run(ctx) })
	if s.owns {
		wg.Go(func() { api.Follow(ctx, s.js, s.cfg.Topology, s.model.am, s.log.With("in", "ui")) })
	}
	wg.Wait()
	return nil
}

// Serve runs the server on ln until ctx ends: Run, and HTTP on ln, shut
// down gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(ctx) })
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = hs.Shutdown(sctx)
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	sub, _ := fs.Sub(assetFS, "assets")
	index, _ := fs.ReadFile(sub, "index.html")
	page := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(index)
	}
	mux.HandleFunc("GET /{$}", page)
	mux.HandleFunc("GET /jobs/{id}", page)
	mux.HandleFunc("GET /anomalies", page)
	mux.HandleFunc("GET /audit", page)
	files := http.FileServerFS(sub)
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})))
	mux.HandleFunc("GET /api/config", s.serveConfig)
	mux.HandleFunc("GET /api/jobs", s.serveJobs)
	mux.HandleFunc("GET /api/jobs/{id}", s.serveJob)
	mux.HandleFunc("POST /api/jobs/{id}/action", s.serveAction)
	mux.HandleFunc("GET /api/anomalies", s.serveAnomalies)
	mux.HandleFunc("GET /api/queues", s.serveQueues)
	mux.HandleFunc("POST /api/queues/{queue}/dead", s.serveDeadAction)
	mux.HandleFunc("GET /api/events", s.serveEvents)
	mux.HandleFunc("GET /api/audit", s.serveLastAudit)
	mux.HandleFunc("POST /api/audit", s.serveAudit)
	mux.HandleFunc("GET /healthz", s.serveHealth)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("GET /login", s.serveLogin)
	mux.HandleFunc("POST /login", s.serveLogin)
	mux.HandleFunc("POST /logout", s.serveLogout)
	// Every request but /healthz, /metrics and the login page's needs a
	// credential; state-changing ones (actions, audits, the logout) must
	// come from this site's pages, with the session's CSRF token.
	return securityHeaders(s.guard(mux))
}

func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("X-Frame-Options", "DENY")
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// uiConfig is GET /api/config: what the pages need to know.
type uiConfig struct {
	// Role is the session's (viewer or operator); CSRF the token its
	// state-changing requests send in CSRFHeader (absent for a bearer
	// token, which needs none).
	Role    BoardRole `json:"role"`
	CSRF    string    `json:"csrf,omitempty"`
	Actions bool      `json:"actions"`
	Actor   string    `json:"actor,omitempty"`
	Page    int       `json:"page_size"`
	MaxPage int       `json:"max_page_size"`
	Input   string    `json:"input_stream"`    // partitioned: partition 0's
	Output  string    `json:"decision_stream"` // partitioned: partition 0's
	// Partitions is the partition count (absent when unpartitioned);
	// Inputs and Outputs name every partition's streams, in order.
	Partitions uint32   `json:"partitions,omitempty"`
	Inputs     []string `json:"input_streams,omitempty"`
	Outputs    []string `json:"decision_streams,omitempty"`
}

func (s *Server) serveConfig(w http.ResponseWriter, r *http.Request) {
	p, _ := who(r)
	c := uiConfig{Role: p.role, Actions: s.cfg.Actions && p.role == Operator, Page: DefaultPageSize, MaxPage: MaxPageSize,
		Input: s.topos[0].InputStream(), Output: s.topos[0].DecisionStream(), Partitions: s.cfg.Partitions}
	if s.cfg.Partitions > 0 {
		for _, t := range s.topos {
			c.Inputs, c.Outputs = append(c.Inputs, t.InputStream()), append(c.Outputs, t.DecisionStream())
		}
	}
	if p.session != "" {
		c.CSRF = s.access.csrf(p.session)
	}
	if c.Actions {
		c.Actor = s.cfg.ActorID
	}
	writeJSON(w, http.StatusOK, c)
}

func intParam(v string, def int) int {
	if n, err := strconv.Atoi(v); err == nil {
		return n
	}
	return def
}

// serveJobs is GET /api/jobs: one page of the board. Parameters: state
// (comma-separated; LIVE is OFFERED and ACTIVE), holder, queue, q (part of
// the job id), blocked=1, sort (id, -id, deadline, updated, holder, state,
// anomalies), offset, limit (at most MaxPageSize).
func (s *Server) serveJobs(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	q := Query{
		Holder: v.Get("holder"), Queue: v.Get("queue"), Job: v.Get("q"), Blocked: v.Get("blocked") == "1",
		Sort: v.Get("sort"), Offset: intParam(v.Get("offset"), 0), Limit: intParam(v.Get("limit"), DefaultPageSize),
	}
	if st := v.Get("state"); st != "" {
		q.States = strings.Split(st, ",")
	}
	page := s.model.page(q, time.Now())
	if viewerOnly(r) {
		page = page.redacted()
	} else {
		s.withDetails(r.Context(), page.Rows)
	}
	writeJSON(w, http.StatusOK, page)
}

// serveJob is GET /api/jobs/{id}: the job page's data; ?after=SEQ for only
// the decisions after decision stream sequence SEQ (of the job's
// partition's decision stream, in a partitioned deployment).
//
// A job not on the board is 404, except for a request with after: that is
// a page following a job it loaded, and the job left the board since
// (retired: a discarded job is, in the input that discarded it). That is
// an answer, not an error of the request: 200 {"gone":true}, so that the
// page says so without a failed request in its console (on two loaded
// cores the board's browser test caught the 404 whenever the page's
// update raced the job's retirement).
func (s *Server) serveJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !events.ValidToken(id) {
		writeError(w, http.StatusBadRequest, "invalid job id")
		return
	}
	after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	h, ok, err := s.history(r.Context(), id, after, viewerOnly(r))
	switch {
	case !ok && r.URL.Query().Has("after"):
		writeJSON(w, http.StatusOK, struct {
			Gone bool  `json:"gone"`
			Now  int64 `json:"now"`
		}{true, time.Now().UnixMilli()})
	case !ok:
		writeError(w, http.StatusNotFound, "no decision about job "+id)
	case err != nil:
		writeError(w, http.StatusBadGateway, err.Error())
	default:
		h.Now = time.Now().UnixMilli()
		writeJSON(w, http.StatusOK, h)
	}
}

// serveQueues is GET /api/queues: the queues view (QueuesPage); with
// parameter queue, that queue's stats and workers.
func (s *Server) serveQueues(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("queue")
	if name == "" {
		writeJSON(w, http.StatusOK, s.model.queuesPage(time.Now()))
		return
	}
	p, ok := s.model.queuePage(name, time.Now())
	if !ok {
		writeError(w, http.StatusNotFound, "no queue "+name)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// serveAnomalies is GET /api/anomalies: the feed, newest first, with the
// jobs that need an operator. Parameters: before, after, job, kind, limit.
func (s *Server) serveAnomalies(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	before, _ := strconv.ParseUint(v.Get("before"), 10, 64)
	after, _ := strconv.ParseUint(v.Get("after"), 10, 64)
	q := AnomalyQuery{Before: before, After: after, Job: v.Get("job"), Kind: v.Get("kind"), Limit: intParam(v.Get("limit"), DefaultPageSize)}
	page := s.model.anomalies(q, time.Now())
	if viewerOnly(r) {
		page = page.redacted()
	} else {
		s.withDetails(r.Context(), page.Blocked)
	}
	writeJSON(w, http.StatusOK, page)
}

// detailTimeout bounds the reads of workers' results for one answer.
const detailTimeout = 3 * time.Second

// withDetails fills in, for an operator's answer, the worker's detail of
// the latest result of each row that has one (api.Results: read from the
// result input once, then kept in the read model). A detail that cannot
// be read now is left out, and logged.
func (s *Server) withDetails(ctx context.Context, rows []Row) {
	var ids []string
	for _, r := range rows {
		if r.ResultInput != 0 && r.ResultDetail == "" {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, detailTimeout)
	defer cancel()
	got, err := s.results.Fill(ctx, ids)
	if err != nil {
		s.log.Warn("ui: reading workers' results", "err", err)
	}
	for i := range rows {
		if w, ok := got[rows[i].ID]; ok && w.Input == rows[i].ResultInput {
			rows[i].ResultDetail = w.Detail
		}
	}
}
