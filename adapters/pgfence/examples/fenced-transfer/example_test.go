package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/coordinator/coordtest"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/fence"
	"github.com/maknow/tenure/internal/chaos"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ops"
)

// argsEnv, set, makes the test binary this command, with the arguments
// it holds (JSON).
const argsEnv = "TENURE_EXAMPLE_ARGS"

func TestMain(m *testing.M) {
	if a := os.Getenv(argsEnv); a != "" {
		var args []string
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			os.Exit(2)
		}
		main2(args)
		return
	}
	os.Exit(m.Run())
}

func main2(args []string) {
	os.Args = append([]string{"fenced-transfer"}, args...)
	main()
	os.Exit(0)
}

// proc is a worker process of the tour, its output read line by line.
type proc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
}

func start(t *testing.T, args ...string) *proc {
	js, _ := json.Marshal(args)
	p := &proc{cmd: exec.Command(os.Args[0], "-test.run=^$")}
	p.cmd.Env = append(os.Environ(), argsEnv+"="+string(js))
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = os.Stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
	})
	return p
}

// await waits for a line matching re and returns it.
func (p *proc) await(t *testing.T, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var got string
	testutil.WaitFor(t, 30*time.Second, "a line matching "+re, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, l := range p.lines {
			if rx.MatchString(l) {
				got = l
				return true
			}
		}
		return false
	})
	return got
}

// The README's tour, step by step: w1 paused past its lease, w2 makes the
// transfer, w1's stale transfer refused; the money moved once; the audit
// of the effect receipts is clean.
func TestTour(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	pg := testutil.StartPostgres(t)
	srv := testutil.StartServer(t)
	cnc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cnc.Close)
	coordtest.RunGroup(t, coordinator.Config{ID: "c1", Conn: cnc}, 0, 15*time.Second)
	ctx := context.Background()
	cmd := func(args ...string) string {
		var b bytes.Buffer
		if err := run(ctx, append([]string{"-dsn", pg.DSN}, args...), &b); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return b.String()
	}
	cmd("setup")
	common := []string{"-dsn", pg.DSN, "-nats", srv.ClientURL()}
	w1 := start(t, append(common, "-id", "w1", "-think", "3s", "worker")...)
	w1.await(t, "^w1: ready$")
	nc, _ := testutil.Connect(t, srv.ClientURL())
	op, err := ops.New(nc, "op1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.Submit(ctx, "t-1", "transfers", ops.WithPayload("a b 10"), ops.WithLease(time.Second), ops.WithAckTimeout(time.Second)); err != nil {
		t.Fatal(err)
	}
	w1.await(t, `^w1: t-1: moving 10 from a to b under lease t-1/L\d+-[A-Za-z0-9_-]+/1$`)
	if err := w1.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	w2 := start(t, append(common, "-id", "w2", "worker")...)
	w2.await(t, `^w2: t-1: moving 10 from a to b under lease t-1/L\d+-[A-Za-z0-9_-]+/2$`)
	w2.await(t, `^w2: t-1: moved 10 from a to b$`)
	if err := w1.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	line := w1.await(t, `^w1: t-1: refused by the database: `)
	if !regexp.MustCompile(`^w1: t-1: refused by the database: fence: stale: t-1/L\d+-\S+/1 effect transfer: the resource admitted the newer lease t-1/L\d+-\S+/2$`).MatchString(line) {
		t.Fatalf("w1 says %q", line)
	}
	if got := cmd("balances"); got != "a 90\nb 10\n" {
		t.Fatalf("balances %q", got)
	}
	var rs bytes.Buffer
	rs.WriteString(cmd("receipts"))
	lines, err := fence.ReadReceipts(&rs, "effects.jsonl")
	if err != nil || len(lines) != 1 {
		t.Fatalf("receipts %v %v", lines, err)
	}
	_, js := testutil.Connect(t, srv.ClientURL())
	lg, err := chaos.ReadLog(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ds []events.Decision
	for _, m := range lg.Decisions {
		d, err := events.DecodeDecision(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	if e := audit.CheckEffectsOf(ds, lines, 0, -1); e.Findings.Count != 0 || e.Confirmed != 1 {
		t.Fatalf("audit of the effects: %+v", e)
	}
	// The README says what the tour showed.
	for _, s := range []string{"-think 3s worker", "kill -STOP $W1", "kill -CONT $W1", "w2: t-1: moved 10 from a to b",
		"w1: t-1: refused by the database: fence: stale: t-1/L5-.../1 effect transfer: the resource admitted the newer lease t-1/L9-.../2",
		"--payload 'a b 10' --lease 1s --ack-timeout 1s", "effects:     0 (1 receipts given, 1 confirmed)"} {
		if !strings.Contains(string(readme), s) {
			t.Errorf("README.md does not say %q", s)
		}
	}
}
