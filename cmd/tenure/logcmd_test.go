package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/internal/testutil"
)

// serveForLog runs tenure serve with args (embedded, snapshots every 5
// inputs) and returns its URL, a connection and its stop.
func serveForLog(t *testing.T, args ...string) (string, *nats.Conn, func()) {
	t.Helper()
	var stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	args = append([]string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:-1", "--sync", "interval", "--id", "c1",
		"--snapshot-every", "5", "--snapshot-interval", "1h"}, args...)
	go func() { done <- run(ctx, args, &bytes.Buffer{}, &stderr) }()
	url := waitLog(t, &stderr, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		nc.Close()
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exited %d:\n%s", code, stderr.String())
			}
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop")
		}
	}
	t.Cleanup(stop)
	return url, nc, stop
}

// acquireAndSnapshot publishes n acquires and waits until the coordinator
// stored a snapshot at or after the last but 10.
func acquireAndSnapshot(t *testing.T, nc *nats.Conn, from, n int) {
	t.Helper()
	js, _ := jetstream.New(nc)
	var last uint64
	for i := range n {
		ack, err := js.Publish(context.Background(), fmt.Sprintf("tenure.in.worker.w1.j%d.acquire", from+i), []byte(`{"v":1,"lease_ms":600000}`))
		if err != nil {
			t.Fatal(err)
		}
		last = ack.Sequence
	}
	if err := testutil.Poll(20*time.Second, func() error {
		resp, err := nc.Request("tenure.status.c1", nil, time.Second)
		if err != nil {
			return err
		}
		var st struct {
			Live bool   `json:"live"`
			Snap uint64 `json:"snapshot_input_seq"`
		}
		if json.Unmarshal(resp.Data, &st) == nil && st.Live && st.Snap+10 >= last {
			return nil
		}
		return fmt.Errorf("%s", resp.Data)
	}); err != nil {
		t.Fatalf("no snapshot near input %d: %v", last, err)
	}
}

// README's retention of the log, through the commands: tenure serve
// --log-retention, then tenure log archive (twice: the second changes
// nothing), tenure log remove, tenure log status, and tenure audit with
// and without the archive, all exit 0 and say what they did; on a
// deployment created without --log-retention, remove exits 1 and says why.
func TestLogCommands(t *testing.T) {
	url, nc, _ := serveForLog(t, "--log-retention")
	ctx := context.Background()
	dir := t.TempDir()
	cmd := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, append(args, "--nats-url", url), &out, &errb); code != want {
			t.Fatalf("tenure %s: exit %d, want %d\n%s\n%s", strings.Join(args, " "), code, want, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	acquireAndSnapshot(t, nc, 0, 0) // live: the streams exist
	// No snapshot yet (the first comes after 5 inputs here, a minute by
	// default): archive says so, not "object not found".
	if out := cmd(1, "log", "archive", "--archive", dir); !strings.Contains(out, "no snapshot stored yet") || strings.Contains(out, "not found") {
		t.Fatalf("archive before the first snapshot: %s", out)
	}
	cmd(0, "policy", "--max-lease", "20m")
	acquireAndSnapshot(t, nc, 0, 30)
	if out := cmd(0, "log", "archive", "--archive", dir); !strings.Contains(out, "sealed segment 1: inputs 1..") {
		t.Fatalf("archive: %s", out)
	}
	if out := cmd(0, "log", "archive", "--archive", dir); !strings.Contains(out, "up to date: 1 segments") {
		t.Fatalf("archive again: %s", out)
	}
	if out := cmd(0, "log", "status", "--archive", dir); !strings.Contains(out, "log retention") || !strings.Contains(out, "removable") {
		t.Fatalf("status: %s", out)
	}
	if out := cmd(0, "log", "remove", "--archive", dir); !strings.Contains(out, "removed through segment 1") {
		t.Fatalf("remove: %s", out)
	}
	if out := cmd(0, "log", "status", "--archive", dir); strings.Contains(out, "removable") {
		t.Fatalf("status after remove: %s", out)
	}
	// The policy set in the removed segment is still the one in force,
	// read from the decision stream (its last policy_set decision stays).
	if out := cmd(0, "policy", "show"); !strings.Contains(out, "max_lease_ms=1200000") {
		t.Fatalf("policy show after remove: %s", out)
	}
	acquireAndSnapshot(t, nc, 30, 10)
	if out := cmd(0, "audit", "--archive", dir); !strings.Contains(out, "OK") {
		t.Fatalf("audit --archive: %s", out)
	}
	cmd(0, "audit")
	cmd(2, "log", "remove")
	cmd(2, "audit", "--archive", dir, "--from", "5")

	url2, nc2, _ := serveForLog(t)
	url = url2
	acquireAndSnapshot(t, nc2, 0, 20)
	dir2 := t.TempDir()
	cmd(0, "log", "archive", "--archive", dir2)
	// Nothing is removable from streams that deny purges: status says so
	// instead of offering what remove then refuses.
	if out := cmd(0, "log", "status", "--archive", dir2); strings.Contains(out, "removable    inputs") || !strings.Contains(out, "removable    nothing: the streams deny purges") {
		t.Fatalf("status without retention: %s", out)
	}
	if out := cmd(1, "log", "remove", "--archive", dir2); !strings.Contains(out, "without log retention") {
		t.Fatalf("remove without retention: %s", out)
	}
}

// tenure serve --log-retention on a deployment created without it exits 1
// at once, saying why and what to do, as README says (it stayed up,
// refusing, until stopped); the same serve without the flag goes live.
func TestServeLogRetentionOnAnOldDeployment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"serve", "--data", dir, "--listen", "127.0.0.1:-1", "--sync", "interval", "--id", "c1"}
	serve := func(extra ...string) (*syncBuffer, chan int, context.CancelFunc) {
		var logs syncBuffer
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		go func() { done <- run(ctx, append(args, extra...), &bytes.Buffer{}, &logs) }()
		t.Cleanup(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Error("serve did not stop")
			}
		})
		return &logs, done, cancel
	}
	logs, done, cancel := serve()
	waitServing(t, logs, done, liveLine)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exit %d:\n%s", code, logs)
	}
	done <- 0 // for the cleanup

	logs, done, _ = serve("--log-retention")
	select {
	case code := <-done:
		done <- code
		if code != 1 || !strings.Contains(logs.String(), "created without") || !strings.Contains(logs.String(), "run without --log-retention") {
			t.Fatalf("serve --log-retention on an old deployment: exit %d, want 1 saying why and what to do:\n%s", code, logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve --log-retention on an old deployment still runs after 30 s, want it to exit 1:\n%s", logs)
	}
}
