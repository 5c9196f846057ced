package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/streams"
)

// DataDir is a copy of a stopped Tenure data directory, served by an
// embedded nats-server on 127.0.0.1 and a random port, so that an audit
// never touches the original: nothing the server does at start-up
// (recovering or compacting its store, writing its metadata) reaches it.
type DataDir struct {
	// Server serves the copy; connect to Server.ClientURL().
	Server *embedded.Server
	// Dir is the temporary directory holding the copy.
	Dir string
}

// DataDirConfig are the optional settings of OpenDataDir.
type DataDirConfig struct {
	// ConfigFile is a nats-server configuration file (accounts,
	// authorization) to serve the copy with; its listen address and store
	// directory are overridden.
	ConfigFile string
	// TempDir is where the copy goes (default os.TempDir()).
	TempDir string
	// Logger receives the server's warnings and errors (nil: none).
	Logger *slog.Logger
}

// OpenDataDir copies the store of the data directory src (the --data
// directory of `tenure serve`: its jetstream/) to a new temporary directory and
// starts an embedded server on the copy. Close stops the server and removes
// the copy. The directory must belong to a stopped server, since a copy
// taken while a server writes to it may be inconsistent: when a process
// holds its lock (streams.LockDir), OpenDataDir returns the
// *streams.LockedError naming it (streams.CheckDir, which writes nothing).
func OpenDataDir(src string, cfg DataDirConfig) (*DataDir, error) {
	fi, err := os.Stat(filepath.Join(src, "jetstream"))
	if err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("audit: %s is not a Tenure data directory (no jetstream/ in it)", src)
	}
	if err := streams.CheckDir(src); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	tmp, err := os.MkdirTemp(cfg.TempDir, "tenure-audit-*")
	if err != nil {
		return nil, fmt.Errorf("audit: temporary directory: %w", err)
	}
	// Only the store: not the lock, nor the coordinator's head key
	// (head.nk), which a copy would leave readable by anyone.
	dir := filepath.Join(tmp, "data")
	if err := os.CopyFS(filepath.Join(dir, "jetstream"), os.DirFS(filepath.Join(src, "jetstream"))); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("audit: copy %s: %w", src, err)
	}
	srv, err := embedded.Start(embedded.Config{
		DataDir: dir, Host: "127.0.0.1", Port: -1, ConfigFile: cfg.ConfigFile,
		ServerName: "tenure-audit", Logger: cfg.Logger,
	})
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("audit: serve the copy of %s: %w", src, err)
	}
	return &DataDir{Server: srv, Dir: tmp}, nil
}

// Close stops the server and removes the copy.
func (d *DataDir) Close() error {
	d.Server.Shutdown()
	err := os.RemoveAll(d.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
