package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// Defaults of Config.
const (
	DefaultHost         = "127.0.0.1"
	DefaultPort         = 4222
	DefaultReadyTimeout = time.Minute
)

// Config configures an in-process nats-server with JetStream.
//
// Fields left at their zero value take the value of ConfigFile, if given and
// if it sets them, else the defaults documented below. Fields that are set
// override the file.
type Config struct {
	// DataDir is required. The JetStream store lives in DataDir/jetstream; it
	// overrides any store_dir of ConfigFile. Start locks DataDir
	// (streams.LockDir) before anything else touches it, and creates it (mode
	// 0700) if it is missing.
	DataDir string
	// Lock is the lock of DataDir when the caller has taken it already
	// (streams.InheritLock in a child process its parent passed the lock
	// to); nil: Start takes it. Either way the Server owns it: Shutdown,
	// or a failed start, releases it.
	Lock *streams.DirLock
	// Host to listen on for clients, default DefaultHost ("127.0.0.1").
	Host string
	// Port to listen on for clients, default DefaultPort (4222); -1 picks a
	// random free port (tests).
	Port int
	// SyncAlways makes the server fsync every write before acknowledging it
	// (nats-server's sync_interval: always). Without it the server flushes
	// on its own interval (two minutes by default, or the ConfigFile's
	// sync_interval): faster, but acknowledged writes of the last interval
	// can be lost on power loss or an OS crash (not on a process crash).
	SyncAlways bool
	// ConfigFile is an optional nats-server configuration file (accounts,
	// authorization, TLS, limits, ...) that the fields above are merged into.
	ConfigFile string
	// ServerName, default: the server's generated id.
	ServerName string
	// MaxMemory and MaxStore bound JetStream's memory and file storage in
	// bytes; 0 leaves the server's default (derived from the machine).
	MaxMemory, MaxStore int64
	// ReadyTimeout bounds how long Start waits for the server to accept
	// connections, including the recovery of the JetStream store.
	// Default DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Logger receives the server's log; nil discards it. By default only
	// warnings and errors are forwarded.
	Logger *slog.Logger
	// LogNotices also forwards the server's notices, at slog.LevelInfo.
	LogNotices bool
	// Partitions, when not 0, adds to every account the subject mapping
	// that routes six-token input subjects to their partition
	// (events.InputMapping), so that partition-unaware clients can publish
	// to a partitioned deployment of that many partitions.
	Partitions uint32
}

// Server is a running in-process nats-server with JetStream enabled.
type Server struct {
	srv  *server.Server
	lock *streams.DirLock
	once sync.Once
}

// Start starts a nats-server in this process and waits until it accepts
// connections with JetStream enabled. The server installs no signal
// handlers; the caller owns it and must call Shutdown.
//
// The first thing it does is to lock DataDir: when another process (or
// another Server of this one) holds the lock, it returns the
// *streams.LockedError of streams.LockDir, having created and changed
// nothing.
func Start(cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		if cfg.Lock != nil {
			_ = cfg.Lock.Close()
		}
		return nil, errors.New("embedded: start server: DataDir is required")
	}
	lock, err := lockDataDir(cfg)
	if err != nil {
		return nil, err
	}
	e, err := start(cfg, lock.Dir())
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	e.lock = lock
	return e, nil
}

// lockDataDir is cfg.Lock, checked to be the lock of cfg.DataDir, or the
// lock it takes on cfg.DataDir.
func lockDataDir(cfg Config) (*streams.DirLock, error) {
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("embedded: start server: %w", err)
	}
	if cfg.Lock != nil {
		a, aerr := os.Stat(cfg.Lock.Dir())
		b, berr := os.Stat(dir)
		if aerr != nil || berr != nil || !os.SameFile(a, b) {
			_ = cfg.Lock.Close()
			return nil, fmt.Errorf("embedded: start server: Lock is the lock of %s, not of DataDir %s", cfg.Lock.Dir(), dir)
		}
		return cfg.Lock, nil
	}
	// DIR/jetstream is the store of data directory DIR: as a data
	// directory of its own, it would get a second store inside the first.
	if filepath.Base(dir) == "jetstream" {
		if _, err := os.Lstat(filepath.Join(filepath.Dir(dir), streams.LockFileName)); err == nil {
			return nil, fmt.Errorf("embedded: start server: %s is the JetStream store of the data directory %s, not a data directory: use %s", dir, filepath.Dir(dir), filepath.Dir(dir))
		}
	}
	return streams.LockDir(dir)
}

func start(cfg Config, dataDir string) (*Server, error) {
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		var err error
		if opts, err = server.ProcessConfigFile(cfg.ConfigFile); err != nil {
			return nil, fmt.Errorf("embedded: start server: read config %s: %w", cfg.ConfigFile, err)
		}
	}
	switch {
	case cfg.Host != "":
		opts.Host = cfg.Host
	case opts.Host == "":
		opts.Host = DefaultHost
	}
	switch {
	case cfg.Port != 0:
		opts.Port = cfg.Port
	case opts.Port == 0:
		opts.Port = DefaultPort
	}
	if cfg.ServerName != "" {
		opts.ServerName = cfg.ServerName
	}
	opts.JetStream = true
	opts.StoreDir = dataDir
	if cfg.SyncAlways {
		opts.SyncAlways = true
	}
	if cfg.MaxMemory != 0 {
		opts.JetStreamMaxMemory = cfg.MaxMemory
	}
	if cfg.MaxStore != 0 {
		opts.JetStreamMaxStore = cfg.MaxStore
	}
	opts.NoSigs = true
	opts.NoLog = true
	opts.DisableJetStreamBanner = true

	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded: start server: %w", err)
	}
	if cfg.Partitions > 0 {
		if err := addInputMapping(srv, opts, cfg.Partitions); err != nil {
			srv.Shutdown()
			return nil, fmt.Errorf("embedded: start server: %w", err)
		}
	}
	log := &serverLogger{log: cfg.Logger, notices: cfg.LogNotices}
	srv.SetLoggerV2(log, opts.Debug, opts.Trace, false)

	// Start returns once the client listener runs, or early after a fatal
	// error (which the server reports only through its logger).
	srv.Start()
	timeout := cfg.ReadyTimeout
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	fail := func(err error) (*Server, error) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embedded: start server: %w", err)
	}
	if err := log.fatalErr(); err != nil {
		return fail(err)
	}
	if !srv.ReadyForConnections(timeout) {
		if err := log.fatalErr(); err != nil {
			return fail(err)
		}
		return fail(fmt.Errorf("not ready for connections after %v", timeout))
	}
	if !srv.JetStreamEnabled() {
		return fail(errors.New("jetstream is not enabled"))
	}
	return &Server{srv: srv}, nil
}

// SyncAlways reports whether the server fsyncs every write before it
// acknowledges it (sync_interval always), as it runs: Config.SyncAlways or
// its configuration file's setting.
func (e *Server) SyncAlways() bool {
	c := e.srv.JetStreamConfig()
	return c != nil && c.SyncAlways
}

// ClientURL is the URL clients connect to, e.g. "nats://127.0.0.1:4222"; a
// wildcard listen address is given as the loopback address.
func (e *Server) ClientURL() string {
	u, err := url.Parse(e.srv.ClientURL())
	if err != nil {
		return e.srv.ClientURL()
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		loop := "127.0.0.1"
		if ip.To4() == nil {
			loop = "::1"
		}
		u.Host = net.JoinHostPort(loop, u.Port())
	}
	return u.String()
}

// Port is the client port the server listens on (useful after Port -1).
func (e *Server) Port() int {
	u, err := url.Parse(e.srv.ClientURL())
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(u.Port())
	return p
}

// Server is the underlying nats-server, for what this package does not wrap.
func (e *Server) Server() *server.Server { return e.srv }

// Shutdown stops the server gracefully (flushing the JetStream store),
// waits until it has stopped, then releases the lock of the data
// directory. It may be called more than once.
func (e *Server) Shutdown() {
	e.once.Do(func() {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
		if e.lock != nil {
			_ = e.lock.Close()
		}
	})
}

// serverLogger adapts nats-server's Logger to log/slog and remembers the first
// fatal error, which the server reports in no other way.
type serverLogger struct {
	log     *slog.Logger
	notices bool

	mu    sync.Mutex
	fatal error
}

func (l *serverLogger) Noticef(format string, v ...any) {
	if l.notices {
		l.emit(slog.LevelInfo, format, v)
	}
}
func (l *serverLogger) Warnf(format string, v ...any)  { l.emit(slog.LevelWarn, format, v) }
func (l *serverLogger) Errorf(format string, v ...any) { l.emit(slog.LevelError, format, v) }
func (l *serverLogger) Debugf(format string, v ...any) { l.emit(slog.LevelDebug, format, v) }
func (l *serverLogger) Tracef(format string, v ...any) { l.emit(slog.LevelDebug-4, format, v) }

func (l *serverLogger) Fatalf(format string, v ...any) {
	l.mu.Lock()
	if l.fatal == nil {
		l.fatal = fmt.Errorf(format, v...)
	}
	l.mu.Unlock()
	l.emit(slog.LevelError, format, v)
}

func (l *serverLogger) fatalErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatal
}

func (l *serverLogger) emit(level slog.Level, format string, v []any) {
	if l.log == nil || !l.log.Enabled(context.Background(), level) {
		return
	}
	l.log.Log(context.Background(), level, fmt.Sprintf(format, v...), slog.String("component", "nats-server"))
}

// addInputMapping adds the partition mapping of inputs to the global account
// and to every account of the configuration but the system account.
func addInputMapping(srv *server.Server, opts *server.Options, partitions uint32) error {
	if partitions > events.MaxPartitions {
		return fmt.Errorf("%d partitions: at most %d", partitions, events.MaxPartitions)
	}
	src, dst := events.InputMapping(partitions)
	accs := []*server.Account{srv.GlobalAccount()}
	for _, a := range opts.Accounts {
		if a.Name != opts.SystemAccount && a.Name != server.DEFAULT_SYSTEM_ACCOUNT && a.Name != server.DEFAULT_GLOBAL_ACCOUNT {
			if acc, err := srv.LookupAccount(a.Name); err == nil {
				accs = append(accs, acc)
			}
		}
	}
	for _, a := range accs {
		if err := a.AddMapping(src, dst); err != nil {
			return fmt.Errorf("input partition mapping in account %s: %w", a.Name, err)
		}
	}
	return nil
}

// configPartition finds the partition count of an input partition mapping
// (events.InputMapping: "{{partition(N,3)}}") in a configuration file.
var configPartition = regexp.MustCompile(`\{\{\s*partition\(\s*(\d+)\s*,\s*3\s*\)\s*\}\}`)

// ConfigFilePartitions reads the partition count of the input partition
// mapping (events.InputMapping, as tenure auth init --partitions and
// tenure cluster up write it) in a nats-server configuration file; found
// is false when the file has none. A server started for another count
// than its configuration's would route inputs to the other count's
// partitions, or, unpartitioned, to partition subjects no stream stores:
// callers that know the count compare (tenure serve refuses to start).
func ConfigFilePartitions(path string) (count uint32, found bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false, fmt.Errorf("embedded: read config %s: %w", path, err)
	}
	m := configPartition.FindSubmatch(b)
	if m == nil {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(string(m[1]), 10, 32)
	if err != nil {
		return 0, false, fmt.Errorf("embedded: config %s: partition count %s: %w", path, m[1], err)
	}
	return uint32(n), true, nil
}
