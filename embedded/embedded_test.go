package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

const leaderTTL = 5 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestEmbeddedRestartKeepsAckedMessages: every acknowledged input survives a
// shutdown and a new server on the same data directory, in both sync modes.
func TestEmbeddedRestartKeepsAckedMessages(t *testing.T) {
	for _, sync := range []bool{true, false} {
		t.Run(fmt.Sprintf("SyncAlways=%v", sync), func(t *testing.T) {
			const n = 50
			dir := t.TempDir()
			ctx := testCtx(t)
			var opts []testutil.Option
			if sync {
				opts = append(opts, testutil.SyncAlways())
			}

			srv := testutil.StartServerIn(t, dir, opts...)
			_, js := testutil.Connect(t, srv.ClientURL())
			if _, err := streams.Ensure(ctx, js, streams.Topology{}, leaderTTL); err != nil {
				t.Fatal(err)
			}
			if _, err := streams.EndGenesis(ctx, js, streams.Topology{}); err != nil { // no coordinator: inputs by hand
				t.Fatal(err)
			}
			for i := 1; i <= n; i++ {
				ack, err := js.Publish(ctx, "tenure.in.worker.w1.j1.progress", []byte(fmt.Sprint(i)))
				if err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
				if ack.Sequence != uint64(i) {
					t.Fatalf("publish %d acked as sequence %d", i, ack.Sequence)
				}
			}
			srv.Shutdown()
			if _, err := os.Stat(filepath.Join(dir, "jetstream")); err != nil {
				t.Errorf("store not under DataDir/jetstream: %v", err)
			}

			srv = testutil.StartServerIn(t, dir, opts...)
			_, js = testutil.Connect(t, srv.ClientURL())
			h, err := streams.Open(ctx, js, streams.Topology{})
			if err != nil {
				t.Fatalf("Open after restart: %v", err)
			}
			info, err := h.In.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Msgs != n || info.State.FirstSeq != 1 || info.State.LastSeq != n {
				t.Fatalf("after restart: %+v, want %d messages 1..%d", info.State, n, n)
			}
			for i := uint64(1); i <= n; i++ {
				m, err := h.In.GetMsg(ctx, i)
				if err != nil {
					t.Fatalf("get %d: %v", i, err)
				}
				if string(m.Data) != fmt.Sprint(i) {
					t.Fatalf("message %d = %q", i, m.Data)
				}
			}
			if err := h.Verify(streams.Topology{}); err != nil {
				t.Errorf("Verify after restart: %v", err)
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	if _, err := embedded.Start(embedded.Config{Port: -1}); err == nil {
		t.Error("started without DataDir")
	}

	// A taken port is reported at once, not after the ready timeout.
	srv := testutil.StartServer(t)
	_, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Port: srv.Port()})
	if err == nil {
		t.Fatal("started on a port in use")
	}

	bad := filepath.Join(t.TempDir(), "bad.conf")
	if err := os.WriteFile(bad, []byte("port: {{{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Port: -1, ConfigFile: bad}); err == nil {
		t.Error("started with a broken config file")
	}
}

// TestEmbeddedConfigFile merges an authorization block from a config file and
// connects through Connect with and without the credentials.
func TestEmbeddedConfigFile(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "auth.conf")
	if err := os.WriteFile(conf, []byte("authorization { user: alice, password: s3cret }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testutil.StartServer(t, testutil.ConfigFile(conf))

	if nc, err := streams.Connect(streams.ConnectConfig{URL: srv.ClientURL()}); err == nil {
		nc.Close()
		t.Fatal("connected without credentials")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("unauthenticated connect = %v, want nats.ErrAuthorization", err)
	}

	nc, err := streams.Connect(streams.ConnectConfig{URL: srv.ClientURL(), Name: "t", User: "alice", Password: "s3cret"})
	if err != nil {
		t.Fatalf("connect with credentials: %v", err)
	}
	defer nc.Close()
	if !strings.HasPrefix(srv.ClientURL(), "nats://127.0.0.1:") {
		t.Errorf("ClientURL = %s", srv.ClientURL())
	}
}

func TestEmbeddedLogger(t *testing.T) {
	for _, notices := range []bool{false, true} {
		rec := &recorder{}
		srv, err := embedded.Start(embedded.Config{
			DataDir: t.TempDir(), Port: -1,
			Logger: slog.New(rec), LogNotices: notices,
		})
		if err != nil {
			t.Fatal(err)
		}
		srv.Shutdown()
		srv.Shutdown() // idempotent
		infos := rec.count(slog.LevelInfo)
		if notices && infos == 0 {
			t.Error("LogNotices: no notice forwarded")
		}
		if !notices && infos != 0 {
			t.Errorf("%d notices forwarded without LogNotices", infos)
		}
	}
}

// recorder is a slog.Handler that counts records by level.
type recorder struct {
	mu     sync.Mutex
	levels []slog.Level
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.levels = append(r.levels, rec.Level)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }
func (r *recorder) count(l slog.Level) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, x := range r.levels {
		if x == l {
			n++
		}
	}
	return n
}

// ConfigFilePartitions finds the count of the input partition mapping that
// tenure auth init and tenure cluster up write, and reports a file without
// one as such.
func TestConfigFilePartitions(t *testing.T) {
	dir := t.TempDir()
	for i, c := range []struct {
		text  string
		count uint32
		found bool
	}{
		{"max_payload: 1048576\n", 0, false},
		{mappingConf(4), 4, true},
		{mappingConf(1024), 1024, true},
		{"mappings {\n  \"tenure.in.*.*.*.*\": \"tenure.in.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{wildcard(4)}}.{{ partition( 7 , 3 ) }}\"\n}\n", 7, true},
	} {
		p := filepath.Join(dir, fmt.Sprintf("%d.conf", i))
		if err := os.WriteFile(p, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		n, found, err := embedded.ConfigFilePartitions(p)
		if err != nil || n != c.count || found != c.found {
			t.Errorf("file %d: %d %v %v, want %d %v", i, n, found, err, c.count, c.found)
		}
	}
	if _, _, err := embedded.ConfigFilePartitions(filepath.Join(dir, "missing.conf")); err == nil {
		t.Error("a missing file is no error")
	}
}

func mappingConf(partitions uint32) string {
	src, dst := events.InputMapping(partitions)
	return fmt.Sprintf("mappings {\n  %q: %q\n}\n", src, dst)
}

// treeOf lists every file under dir with its size and modification time.
func treeOf(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d %d\n", path, info.Mode(), info.Size(), info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A second server on a data directory in use is refused with a
// *LockedError before it touches the store, even on the same port (where
// it used to recover the store, then fail to bind); the first keeps
// serving; after its Shutdown the directory can be served again.
func TestStartLocksDataDir(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	srv := testutil.StartServerIn(t, dir, testutil.SyncAlways())
	_, js := testutil.Connect(t, srv.ClientURL())
	if _, err := streams.Ensure(ctx, js, streams.Topology{}, leaderTTL); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.EndGenesis(ctx, js, streams.Topology{}); err != nil { // no coordinator: inputs by hand
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "tenure.in.worker.w1.j1.progress", []byte("1")); err != nil {
		t.Fatal(err)
	}
	before := treeOf(t, dir)

	for _, port := range []int{-1, srv.Port()} {
		_, err := embedded.Start(embedded.Config{DataDir: dir, Port: port, ReadyTimeout: 10 * time.Second})
		var le *streams.LockedError
		if !errors.As(err, &le) {
			t.Fatalf("second server on port %d: %v, want a *LockedError", port, err)
		}
		if le.Holder.PID != os.Getpid() || !strings.Contains(err.Error(), dir) {
			t.Errorf("second server: %v", err)
		}
	}
	// The store's own directory is no data directory.
	if _, err := embedded.Start(embedded.Config{DataDir: filepath.Join(dir, "jetstream"), Port: -1}); err == nil ||
		!strings.Contains(err.Error(), "is the JetStream store of the data directory") {
		t.Errorf("a server on DIR/jetstream: %v", err)
	}
	// A lock of another directory is not DataDir's.
	other, err := streams.LockDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := embedded.Start(embedded.Config{DataDir: dir, Port: -1, Lock: other}); err == nil || errors.As(err, new(*streams.LockedError)) {
		t.Errorf("a server with another directory's lock: %v", err)
	}
	if after := treeOf(t, dir); after != before {
		t.Errorf("the refused servers changed the data directory:\n%s\n%s", before, after)
	}
	if _, err := js.Publish(ctx, "tenure.in.worker.w1.j1.progress", []byte("2")); err != nil {
		t.Fatalf("the first server stopped serving: %v", err)
	}

	srv.Shutdown()
	srv = testutil.StartServerIn(t, dir)
	_, js = testutil.Connect(t, srv.ClientURL())
	h, err := streams.Open(ctx, js, streams.Topology{})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := h.In.Info(ctx); err != nil || info.State.Msgs != 2 {
		t.Fatalf("after restart: %+v %v, want the 2 inputs", info, err)
	}
}

// SyncAlways reports the sync mode the server runs with: Config.SyncAlways,
// or a configuration file's sync_interval when Config leaves it off (what
// tenure serve tells its coordinator, coordinator.AppendMode).
func TestSyncAlways(t *testing.T) {
	if srv := testutil.StartServer(t); srv.SyncAlways() {
		t.Errorf("default server: SyncAlways true")
	}
	if srv := testutil.StartServer(t, testutil.SyncAlways()); !srv.SyncAlways() {
		t.Errorf("SyncAlways server: SyncAlways false")
	}
	conf := filepath.Join(t.TempDir(), "sync.conf")
	if err := os.WriteFile(conf, []byte("jetstream { sync_interval: always }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if srv := testutil.StartServer(t, testutil.ConfigFile(conf)); !srv.SyncAlways() {
		t.Errorf("server whose file says sync_interval always: SyncAlways false")
	}
}
