package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// TestMain removes the binary tenureBinary built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// tenureBinary builds the tenure command once per test binary, for tests
// that run it as a process of its own (to SIGKILL it).
func tenureBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tenure-bin")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "tenure")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// serveProcess is `tenure serve` running as a child process.
type serveProcess struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan int
}

// startServe runs tenure serve on dir and port and waits until it says
// where to connect.
func startServe(t *testing.T, dir string, port int, args ...string) *serveProcess {
	t.Helper()
	p := &serveProcess{log: &syncBuffer{}, done: make(chan int, 1)}
	args = append([]string{"serve", "--data", dir, "--listen", "127.0.0.1:" + strconv.Itoa(port), "--id", "c1"}, args...)
	p.cmd = exec.Command(tenureBinary(t), args...)
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
	t.Cleanup(func() { p.kill(t) })
	waitServing(t, p.log, p.done, regexp.MustCompile(`(connect workers to) nats://`))
	return p
}

// kill SIGKILLs the process and waits for it.
func (p *serveProcess) kill(t *testing.T) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Errorf("serve did not die")
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// stormLeases is how many leases the expiry storm lets fall due at once
// (TENURE_STORM_LEASES overrides it: `TENURE_STORM_LEASES=1000000 go test
// -run TestExpiryStorm ./cmd/tenure/` is the million).
func stormLeases(t *testing.T) int {
	if s := os.Getenv("TENURE_STORM_LEASES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("TENURE_STORM_LEASES=%q", s)
		}
		return n
	}
	return 100_000
}

// The expiry storm of issue "Nothing bricks a deployment", end to end on
// real processes: 100,000 leases acquired while a coordinator runs, which
// is then SIGKILLed; they all fall due while it is down, so its successor
// finds every one of them due at its first tick (an input that fired them
// all used to cause more than 65,535 decisions: their n/of counters
// wrapped, the append of a repeated Nats-Msg-Id was refused, and every
// restart refused to go live). It is SIGKILLed again half way through
// appending the expiries, and restarted (with --sync interval: a SIGKILLed
// process loses nothing the server acknowledged, only a machine crash
// would). Every lease must expire exactly
// once, no input may cause more than events.MaxDecisionsPerInput
// decisions, and tenure audit must find the log clean.
func TestExpiryStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 leases")
	}
	n := stormLeases(t)
	dir, port := t.TempDir(), freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	serve := startServe(t, dir, port, "--sync", "interval")
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// n acquires of 3 s leases, as fast as the stream takes them.
	const lease = 3 * time.Second
	body := []byte(`{"v":1,"lease_ms":` + strconv.FormatInt(lease.Milliseconds(), 10) + `}`)
	for i := range n {
		if _, err := js.PublishAsync(fmt.Sprintf("tenure.in.worker.w%d.storm-%d.acquire", i%16, i), body, jetstream.WithStallWait(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		t.Fatal("acquires not acknowledged")
	}
	acquired := time.Now()
	in, err := js.Stream(ctx, "TENURE_IN")
	if err != nil {
		t.Fatal(err)
	}
	out, err := js.Stream(ctx, "TENURE_OUT")
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := func(s jetstream.Stream) uint64 {
		t.Helper()
		var seq uint64
		if err := testutil.Poll(time.Minute, func() error { // an error: the server is restarting
			info, err := s.Info(ctx)
			if err == nil {
				seq = info.State.LastSeq
			}
			return err
		}); err != nil {
			t.Fatalf("stream info: %v", err)
		}
		return seq
	}
	inputs := lastSeq(in)
	if inputs < uint64(n) {
		t.Fatalf("input stream holds %d inputs, %d were acknowledged", inputs, n)
	}
	serve.kill(t)

	// Every lease falls due while no coordinator runs (time must pass
	// here: the test is of expiries that fell due in the outage).
	time.Sleep(time.Until(acquired.Add(lease + 500*time.Millisecond)))
	serve = startServe(t, dir, port, "--sync", "interval")
	// grants: every input so far has exactly one decision (rules, policy,
	// grants); then the expiries come, MaxFiredPerInput per tick.
	killAt := inputs + uint64(n)/3
	var stored uint64
	if err := testutil.Poll(5*time.Minute, func() error {
		if stored = lastSeq(out); stored < killAt {
			return errNotYet
		}
		return nil
	}); err != nil {
		t.Fatalf("the decision stream stays at %d (waiting for %d):\n%s", stored, killAt, serve.log.String())
	}
	serve.kill(t)
	t.Logf("SIGKILLed with at least %d decisions stored (%d inputs, %d leases: about %d decisions in all)", stored, inputs, n, inputs+uint64(n)+uint64(n)/events.MaxFiredPerInput+1)
	serve = startServe(t, dir, port, "--sync", "interval")

	// Read every decision back until each lease has expired.
	expired := make(map[string]int, n)
	var decisions uint64
	cons, err := out.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	timeout := time.AfterFunc(5*time.Minute, it.Stop) // Next returns then
	defer timeout.Stop()
	for len(expired) < n {
		m, err := it.Next()
		if err != nil {
			t.Fatalf("%d of %d leases expired after %d decisions: %v\n%s", len(expired), n, decisions, err, serve.log.String())
		}
		decisions++
		var cause uint64
		var idx, of uint32
		if _, err := fmt.Sscanf(m.Headers().Get(events.HeaderCause)+" "+m.Headers().Get(events.HeaderIndex), "%d %d/%d", &cause, &idx, &of); err != nil {
			t.Fatalf("decision %d headers: %v", decisions, err)
		}
		if of > events.MaxDecisionsPerInput {
			t.Fatalf("input %d caused %d decisions, more than %d", cause, of, events.MaxDecisionsPerInput)
		}
		d, err := events.DecodeDecision(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		if d.Kind == events.KindExpired {
			expired[d.Job.ID]++
			if expired[d.Job.ID] > 1 {
				t.Fatalf("%s expired twice", d.Job.ID)
			}
		}
	}
	it.Stop()
	t.Logf("%d leases expired, %d decisions read", len(expired), decisions)

	// The log audits clean.
	var stdout, stderr syncBuffer
	if code := run(ctx, []string{"audit", "--nats-url", url}, &stdout, &stderr); code != 0 {
		t.Fatalf("audit exit %d:\n%s\n%s", code, stdout.String(), stderr.String())
	}
}
