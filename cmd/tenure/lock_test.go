package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

// tenureProc is a tenure process started by a test.
type tenureProc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan int // its exit status
}

// startTenure starts bin with args; it is SIGKILLed in t.Cleanup if still
// running.
func startTenure(t *testing.T, bin string, args ...string) *tenureProc {
	t.Helper()
	p := &tenureProc{cmd: exec.Command(bin, args...), stderr: &syncBuffer{}, done: make(chan int, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.stderr, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.done <- p.cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
		}
	})
	return p
}

// exit waits for the process to exit and returns its status.
func (p *tenureProc) exit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case code := <-p.done:
		p.done <- code
		return code
	case <-time.After(timeout):
		t.Fatalf("%v still running after %v:\n%s", p.cmd.Args, timeout, p.stderr.String())
		return 0
	}
}

// serveProc starts `tenure serve` on dir and waits until its coordinator
// is live; it returns the process and the client URL.
func serveProc(t *testing.T, bin, dir, id string) (*tenureProc, string) {
	t.Helper()
	p := startTenure(t, bin, "serve", "--data", dir, "--listen", "127.0.0.1:-1", "--id", id, "--log-format", "json")
	url := waitServing(t, p.stderr, p.done, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := testutil.Poll(30*time.Second, func() error { return statusLive(nc, "tenure.status."+id) }); err != nil {
		t.Fatalf("coordinator %s not live: %v\n%s", id, err, p.stderr.String())
	}
	return p, url
}

// acquire publishes an acquire of job by worker (a lease of 10 minutes)
// with a plain JetStream publish and returns its verdict from TENURE_OUT.
func acquire(t *testing.T, url, worker, job string) events.Decision {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(ctx, "tenure.in.worker."+worker+"."+job+".acquire", []byte(`{"v":1,"lease_ms":600000}`))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, "TENURE_OUT", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"tenure.out." + worker + "." + job + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(20 * time.Second))
		if err != nil {
			t.Fatalf("no verdict for %s/%s: %v", worker, job, err)
		}
		d, err := events.DecodeDecision(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		if d.Cause == ack.Sequence {
			return d
		}
	}
}

// storeTree lists every file and directory under dir with its mode,
// size and modification time.
func storeTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
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

// TestServeRefusesDataDirInUse is issue "Nothing bricks a deployment",
// part 2, on real processes: a second `tenure serve` on the data
// directory of a running one (on another port, on the same port, through
// a symlinked path) exits 1 with one line naming the directory and the
// holder and saying what to do, and writes nothing into the directory;
// the first keeps serving. After the first is SIGKILLed, a new serve
// starts on the directory at once, and the lease granted before is still
// there.
func TestServeRefusesDataDirInUse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three serve processes; not in -short")
	}
	bin := tenureBinary(t)
	dir := filepath.Join(t.TempDir(), "data")
	first, url := serveProc(t, bin, dir, "c1")
	if d := acquire(t, url, "w1", "j1"); d.Kind != events.KindGranted {
		t.Fatalf("first acquire: %+v", d)
	}
	before := storeTree(t, dir)

	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(strings.TrimPrefix(url, "nats://"), ":")
	want := func(data string) *regexp.Regexp {
		return regexp.MustCompile(`^tenure: data directory ` + regexp.QuoteMeta(data) + ` is in use by pid ` + strconv.Itoa(first.cmd.Process.Pid) +
			` \(` + regexp.QuoteMeta(bin) + ` serve --data ` + regexp.QuoteMeta(dir) + ` .*\) on host .*, since \S+: stop that process, or serve with another --data directory\n$`)
	}
	for _, c := range []struct{ name, data, listen string }{
		{"another port", dir, "127.0.0.1:-1"},
		{"the same port", dir, "127.0.0.1:" + port},
		{"a symlinked path", link, "127.0.0.1:-1"},
	} {
		second := startTenure(t, bin, "serve", "--data", c.data, "--listen", c.listen, "--id", "c2")
		if code := second.exit(t, 30*time.Second); code != 1 {
			t.Fatalf("second serve on %s: exit %d, want 1:\n%s", c.name, code, second.stderr.String())
		}
		if re := want(c.data); !re.MatchString(second.stderr.String()) {
			t.Errorf("second serve on %s: stderr %q, want %v", c.name, second.stderr.String(), re)
		}
		if after := storeTree(t, dir); after != before {
			t.Fatalf("second serve on %s changed the data directory:\nbefore:\n%s\nafter:\n%s", c.name, before, after)
		}
	}
	// The first one serves on: a new lease, and the held one stays held.
	if d := acquire(t, url, "w2", "j2"); d.Kind != events.KindGranted {
		t.Fatalf("acquire after the refused serves: %+v", d)
	}
	if d := acquire(t, url, "w3", "j1"); d.Kind != events.KindRejected || d.Reason != events.ReasonLeaseHeld {
		t.Fatalf("j1 taken by another worker: %+v", d)
	}

	// SIGKILL: the lock goes with the process, its lock file stays.
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.exit(t, 30*time.Second)
	if _, err := os.Stat(filepath.Join(dir, "tenure.lock")); err != nil {
		t.Fatalf("the lock file: %v", err)
	}
	third, url := serveProc(t, bin, dir, "c3")
	if d := acquire(t, url, "w4", "j1"); d.Kind != events.KindRejected || d.Reason != events.ReasonLeaseHeld || d.Job.Holder != "w1" {
		t.Fatalf("after the restart, j1 is not w1's: %+v", d)
	}
	if err := third.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := third.exit(t, 30*time.Second); code != 0 {
		t.Fatalf("serve exited %d on SIGTERM:\n%s", code, third.stderr.String())
	}
}
