package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

// liveLine is the log line of tenure serve's coordinator going live.
var liveLine = regexp.MustCompile(`(INF live|msg=live) `)

var (
	exampleMu   sync.Mutex
	exampleBins = map[string]string{}
)

// exampleBinary builds examples/<name> once per test binary and returns
// its path.
func exampleBinary(t *testing.T, name string) string {
	t.Helper()
	exampleMu.Lock()
	defer exampleMu.Unlock()
	if p, ok := exampleBins[name]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "tenure-example")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if out, err := exec.Command("go", "build", "-o", p, "../../examples/"+name).CombinedOutput(); err != nil {
		t.Fatalf("go build examples/%s: %v\n%s", name, err, out)
	}
	exampleBins[name] = p
	return p
}

// process is a child process of a test, its output in log.
type process struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan int // its exit code, once
	code int
}

// startProcess starts bin with args and env added to the test's, and
// kills it at the end of the test if it still runs.
func startProcess(t *testing.T, env []string, bin string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), log: &syncBuffer{}, done: make(chan int, 1), code: -2}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		code := 0
		if err != nil {
			code = -1
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
		}
		p.done <- code
	}()
	t.Cleanup(func() {
		if p.code == -2 {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code (-1: killed
// by a signal).
func (p *process) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case p.code = <-p.done:
		return p.code
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v:\n%s", filepath.Base(p.cmd.Path), timeout, p.log)
		return 0
	}
}

// decisionLog reads the decision stream from its start, in order, into a
// slice the test reads with all.
type decisionLog struct {
	mu sync.Mutex
	ds []events.Decision
}

func readDecisions(t *testing.T, url string) *decisionLog {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(context.Background(), "TENURE_OUT", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l := &decisionLog{}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		d, err := events.DecodeDecision(m.Data())
		if err != nil {
			t.Errorf("decision %s: %v", m.Subject(), err)
			return
		}
		l.mu.Lock()
		l.ds = append(l.ds, d)
		l.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return l
}

func (l *decisionLog) all() []events.Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]events.Decision(nil), l.ds...)
}

// until waits until cond holds of the decisions read so far.
func (l *decisionLog) until(t *testing.T, timeout time.Duration, what string, cond func([]events.Decision) bool) {
	t.Helper()
	testutil.WaitFor(t, timeout, what, func() bool { return cond(l.all()) })
}

// lastCapacity is the last capacity_set decision of worker on queue in ds
// (nil if none).
func lastCapacity(ds []events.Decision, worker, queue string) *events.Decision {
	for i := len(ds) - 1; i >= 0; i-- {
		if d := ds[i]; d.Kind == events.KindCapacitySet && d.Actor == worker && d.Capacity != nil && d.Capacity.Queue == queue {
			return &ds[i]
		}
	}
	return nil
}

// The queue-worker example stopped by SIGTERM: it withdraws its
// announcement before it exits (0), so the job submitted next is offered
// to nobody until the same worker id, restarted, announces again, and
// then at once: the restart does not sit idle until the offers made to a
// dead process time out (the job's ACK timeout is 10 minutes). On the old
// example SIGTERM killed the process with its announcement standing.
func TestQueueWorkerExampleSIGTERM(t *testing.T) {
	t.Parallel()
	bin := exampleBinary(t, "queue-worker")
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	p := startServe(t, t.TempDir(), port, "--sync", "interval")
	waitServing(t, p.log, p.done, liveLine)
	log := readDecisions(t, url)
	env := []string{"NATS_URL=" + url}
	const id, queue = "example-queue-worker", "thumbnails"
	announced := func(ds []events.Decision) bool {
		d := lastCapacity(ds, id, queue)
		return d != nil && d.Capacity.Slots > 0
	}

	// It runs a job, and logs how it ended.
	w := startProcess(t, env, bin)
	log.until(t, 30*time.Second, "the worker's announcement", announced)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	submit := func(job string) {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := run(ctx, []string{"submit", job, "--queue", queue, "--payload", "s3://photos/" + job + ".jpg",
			"--ack-timeout", "10m", "--nats-url", url}, &out, &errOut); code != 0 {
			t.Fatalf("submit %s: exit %d\n%s%s", job, code, out.String(), errOut.String())
		}
	}
	completed := func(job string) func([]events.Decision) bool {
		return func(ds []events.Decision) bool {
			for _, d := range ds {
				if d.Job.ID == job && d.Kind == events.KindCompleted && d.Job.Result == events.OutcomeSuccess {
					return true
				}
			}
			return false
		}
	}
	submit("img-1")
	log.until(t, 30*time.Second, "img-1 completed", completed("img-1"))
	if testutil.Poll(10*time.Second, func() error {
		if !strings.Contains(w.log.String(), "img-1: attempt 1: SUCCESS") {
			return errNotYet
		}
		return nil
	}) != nil {
		t.Errorf("the worker did not log img-1's outcome:\n%s", w.log)
	}

	// SIGTERM: the announcement is withdrawn, the process exits 0.
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := w.wait(t, 30*time.Second)
	// The withdrawal was stored before the process exited; its decision
	// follows (the coordinator's, then this test's reader): on two loaded
	// cores it was not yet read when the process had exited.
	var last *events.Decision
	_ = testutil.Poll(15*time.Second, func() error {
		if last = lastCapacity(log.all(), id, queue); last == nil || last.Capacity.Slots != 0 {
			return errNotYet
		}
		return nil
	})
	if last == nil || last.Capacity.Slots != 0 {
		slots := "none"
		if last != nil {
			slots = strconv.FormatUint(last.Capacity.Slots, 10)
		}
		t.Errorf("after SIGTERM (exit %d) the worker's last announcement stands with %s slots, want it withdrawn (0):\n%s", code, slots, w.log)
	} else if code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0:\n%s", code, w.log)
	}

	// A job submitted now is offered to nobody; the restarted worker gets
	// it at once, after its own announcement.
	submit("img-2")
	w = startProcess(t, env, bin)
	log.until(t, 30*time.Second, "the restarted worker's announcement", announced)
	log.until(t, 30*time.Second, "img-2 completed", completed("img-2"))
	ds := log.all()
	restart := lastCapacity(ds, id, queue).Cause
	for _, d := range ds {
		if d.Job.ID != "img-2" {
			continue
		}
		if d.Kind == events.KindAssigned && d.Cause < restart {
			t.Errorf("img-2 offered (input %d) before the restart announced (input %d)", d.Cause, restart)
		}
		if d.Kind == events.KindAckMissed {
			t.Errorf("img-2's offer to a stopped worker timed out: %s/%s", d.Kind, d.Reason)
		}
	}
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := w.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after the second SIGTERM:\n%s", code, w.log)
	}
}

// Both examples connect with the credential file tenure auth init writes
// (--creds-json, their worker id its name), as tenure submit does; each
// runs a job to its end, logs how it ended, and exits 0 at SIGTERM.
func TestExamplesWithCredsJSON(t *testing.T) {
	t.Parallel()
	queueWorker, simpleWorker := exampleBinary(t, "queue-worker"), exampleBinary(t, "simple-worker")
	dir := t.TempDir()
	if code, _, stderr := runAuthCmd("init", "--out", dir, "--worker", "w1", "--dispatcher", "disp", "--bcrypt-cost", "4"); code != 0 {
		t.Fatalf("auth init: exit %d: %s", code, stderr)
	}
	creds := func(name string) string { return filepath.Join(dir, name+".creds.json") }
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:-1", "--sync", "interval",
			"--id", "coord", "--server-config", filepath.Join(dir, "server.conf"), "--creds-json", creds("coord")}, &bytes.Buffer{}, &logs)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	url := waitServing(t, &logs, done, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	runGenesisAs(t, dir, url)
	env := []string{"NATS_URL=" + url}

	qw := startProcess(t, env, queueWorker, "--creds-json", creds("w1"))
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"submit", "a-1", "--queue", "thumbnails", "--payload", "s3://photos/a-1.jpg",
		"--creds-json", creds("disp"), "--nats-url", url}, &out, &errOut); code != 0 {
		t.Fatalf("submit as disp: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	waitOutput(t, qw, 60*time.Second, "a-1: attempt 1: SUCCESS")
	if err := qw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := qw.wait(t, 30*time.Second); code != 0 || !strings.Contains(qw.log.String(), "worker w1 taking the jobs of queue thumbnails") {
		t.Fatalf("queue-worker: exit %d after SIGTERM, want 0, as worker w1:\n%s", code, qw.log)
	}

	sw := startProcess(t, env, simpleWorker, "--creds-json", creds("w1"))
	waitOutput(t, sw, 60*time.Second, "example-job: completed: ok")
	if err := sw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := sw.wait(t, 30*time.Second); code != 0 || !strings.Contains(sw.log.String(), "stopped") {
		t.Fatalf("simple-worker: exit %d after SIGTERM, want 0 and stopped:\n%s", code, sw.log)
	}
	for _, line := range strings.Split(sw.log.String(), "\n") {
		if strings.Contains(line, "<nil>") {
			t.Errorf("simple-worker logged %q", line)
		}
	}
}

// waitOutput waits until the process's output holds s, failing at once if
// it exits first.
func waitOutput(t *testing.T, p *process, timeout time.Duration, s string) {
	t.Helper()
	if err := testutil.Poll(timeout, func() error {
		if strings.Contains(p.log.String(), s) {
			return nil
		}
		select {
		case p.code = <-p.done:
			t.Fatalf("%s exited with %d before printing %q:\n%s", filepath.Base(p.cmd.Path), p.code, s, p.log)
		default:
		}
		return errNotYet
	}); err != nil {
		t.Fatalf("no %q in the output of %s: %v\n%s", s, filepath.Base(p.cmd.Path), err, p.log)
	}
}
