package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/embedded"
)

// The coordinator id of `tenure serve` stays the same across restarts on
// one data directory (it changed on every start, churning the status
// subject and the metric labels) and differs between data directories.
// Real processes, so that each start has a process id of its own.
func TestCoordinatorIDKeptInDataDir(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs serve processes; not in -short")
	}
	bin := tenureBinary(t)
	idRE := regexp.MustCompile(`"coordinator":"([A-Za-z0-9_-]+)"`)
	urlRE := regexp.MustCompile(`"nats_url":"(nats://[^"]+)"`)
	// serve starts serve on dir, waits until it says where to connect,
	// checks that its status subject answers, stops it with SIGTERM and
	// returns its id.
	serve := func(dir string) string {
		t.Helper()
		p := startTenure(t, bin, "serve", "--data", dir, "--listen", "127.0.0.1:-1", "--sync", "interval", "--log-format", "json")
		line := waitServing(t, p.stderr, p.done, regexp.MustCompile(`(\{[^\n]*tenure serving[^\n]*\})`))
		id, url := idRE.FindStringSubmatch(line), urlRE.FindStringSubmatch(line)
		if id == nil || url == nil {
			t.Fatalf("no coordinator id or url in %s", line)
		}
		nc, err := nats.Connect(url[1])
		if err != nil {
			t.Fatal(err)
		}
		resp, err := nc.Request("tenure.status."+id[1], nil, 5*time.Second)
		nc.Close()
		if err != nil {
			t.Fatalf("tenure.status.%s: %v", id[1], err)
		}
		if !strings.Contains(string(resp.Data), `"id":"`+id[1]+`"`) {
			t.Fatalf("tenure.status.%s answered %s", id[1], resp.Data)
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.exit(t, 20*time.Second); code != 0 {
			t.Fatalf("serve exited %d:\n%s", code, p.stderr.String())
		}
		return id[1]
	}
	a, b := t.TempDir(), t.TempDir()
	first := serve(a)
	if !regexp.MustCompile(`^c-[A-Za-z0-9_-]*-[a-z2-7]{10}$`).MatchString(first) {
		t.Errorf("id %q: want c-<host>-<10 random base-32 characters>", first)
	}
	if again := serve(a); again != first {
		t.Errorf("restarted on the same data directory: id %q, was %q", again, first)
	}
	kept, err := os.ReadFile(filepath.Join(a, coordinatorIDFile))
	if err != nil || string(kept) != first+"\n" {
		t.Errorf("%s holds %q (%v), want %q", coordinatorIDFile, kept, err, first+"\n")
	}
	if other := serve(b); other == first {
		t.Errorf("two data directories share the id %q", first)
	}
}

// serve --nats-url --data DIR keeps its id in DIR as well, and locks DIR:
// a second serve on it (which would share the id, and so take the first
// one's leadership entry) exits 1 at once naming the directory.
func TestCoordinatorIDWithNATSURL(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	dir := t.TempDir()
	args := []string{"--nats-url", srv.ClientURL(), "--data", dir, "--no-heads", "--log-format", "json"}
	idRE := regexp.MustCompile(`tenure serving[^\n]*"coordinator":"([A-Za-z0-9_-]+)"`)
	log, stop := serveArgsNoID(t, args...)
	first := waitLog(t, log, idRE)
	var stderr bytes.Buffer
	if code := run(context.Background(), append([]string{"serve"}, args...), io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "data directory "+dir+" is in use by") {
		t.Errorf("a second serve on %s: exit %d:\n%s", dir, code, stderr.String())
	}
	stop()
	log, stop = serveArgsNoID(t, args...)
	if again := waitLog(t, log, idRE); again != first {
		t.Errorf("restarted with --nats-url on the same --data: id %q, was %q", again, first)
	}
	stop()
}

// serveArgsNoID runs tenure serve with args (and no --id) in this process
// until the returned stop.
func serveArgsNoID(t *testing.T, args ...string) (*syncBuffer, func()) {
	t.Helper()
	log := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"serve"}, args...), io.Discard, log) }()
	waitServing(t, log, done, regexpServing)
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Errorf("serve did not stop")
		}
	}
	t.Cleanup(stop)
	return log, stop
}
