package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RequirePostgres is the environment variable that makes a missing
// PostgreSQL server a test failure instead of a skip (.ci/run sets it).
const RequirePostgres = "TENURE_REQUIRE_POSTGRES"

// Postgres is a PostgreSQL server a test started in a directory of its
// own, reached through a Unix socket there (no TCP port).
type Postgres struct {
	Dir string // the socket directory (the data directory is Dir/data)
	// DSN connects as the superuser "tenure" to the database "postgres":
	// "host=<Dir> port=5432 user=tenure dbname=postgres sslmode=disable".
	DSN string
	cmd *exec.Cmd
}

// PostgresBin finds the directory of PostgreSQL's initdb and postgres:
// $TENURE_POSTGRES_BIN, Debian's /usr/lib/postgresql/<newest>/bin, or the
// PATH; "" if none.
func PostgresBin() string {
	if d := os.Getenv("TENURE_POSTGRES_BIN"); d != "" {
		return d
	}
	vers, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(vers, func(i, j int) bool { return pgVersion(vers[i]) > pgVersion(vers[j]) })
	if len(vers) > 0 {
		return filepath.Dir(vers[0])
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("postgres"); err == nil {
			return filepath.Dir(p)
		}
	}
	return ""
}

func pgVersion(p string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
	return n
}

// StartPostgres starts a PostgreSQL server for t (initdb, then postgres,
// listening on a Unix socket in a new directory only), stopped and removed
// when t ends. Where there is none it skips t, saying what to install,
// unless $TENURE_REQUIRE_POSTGRES is 1, which makes that a failure.
// PostgreSQL refuses to run as root: a test run as root runs it as the
// user postgres (Debian's package makes it), or nobody.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	bin := PostgresBin()
	if bin == "" {
		if os.Getenv(RequirePostgres) == "1" {
			t.Fatalf("%s=1 but no PostgreSQL server found (initdb and postgres: /usr/lib/postgresql/*/bin, $TENURE_POSTGRES_BIN or the PATH)", RequirePostgres)
		}
		t.Skip("no PostgreSQL server: install one (apt-get install postgresql) to run this test; " + RequirePostgres + "=1 makes this a failure")
	}
	dir, err := os.MkdirTemp("", "tenure-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = unprivileged(t)
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	run := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(filepath.Join(bin, name), args...)
		c.Dir = dir
		c.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
		c.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
		return c
	}
	if out, err := run("initdb", "-D", data, "-U", "tenure", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	logPath := filepath.Join(dir, "postgres.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the server has its own descriptor
	readLog := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	p := &Postgres{Dir: dir, DSN: "host=" + dir + " port=5432 user=tenure dbname=postgres sslmode=disable"}
	p.cmd = run("postgres", "-D", data, "-k", dir, "-c", "listen_addresses=", "-c", "max_connections=200")
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("postgres: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-exited
		}
	})
	// postmaster.pid's eighth line says "ready" once it accepts connections.
	if err := Poll(60*time.Second, func() error {
		select {
		case <-exited:
			t.Fatalf("postgres exited: %s", readLog())
		default:
		}
		b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
		if err != nil {
			return err
		}
		if lines := strings.Split(string(b), "\n"); len(lines) < 8 || strings.TrimSpace(lines[7]) != "ready" {
			return fmt.Errorf("postmaster.pid: %q", b)
		}
		return nil
	}); err != nil {
		t.Fatalf("postgres did not start: %v\n%s", err, readLog())
	}
	return p
}

// unprivileged is the credential PostgreSQL runs under when the test runs
// as root: the user postgres, or nobody.
func unprivileged(t testing.TB) *syscall.Credential {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 == nil && err2 == nil {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		}
	}
	t.Fatal("running as root, and neither the user postgres nor nobody exists to run PostgreSQL as")
	return nil
}
