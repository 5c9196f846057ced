package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/internal/testutil"
)

// A coordinator slowed by a loaded machine answers `tenure status` after the
// collection window (--wait) has passed: status goes on waiting for a first
// answer, up to --timeout, before it says that no coordinator answered (on
// two loaded cores TestAuthServePartitioned's `tenure status` once got no
// answer within the old fixed 500 ms window from a coordinator that had
// just said it was live).
func TestStatusWaitsForASlowFirstAnswer(t *testing.T) {
	srv := testutil.StartServer(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const slow = 1500 * time.Millisecond
	answer := []byte(`{"name":"tenure","endpoints":[{"name":"status","data":{"id":"slow-coord","live":true}}]}`)
	// The answer is held back in the responder's own goroutine (the test
	// stands for a process that is slow to answer, not a wait of its own).
	if _, err := nc.Subscribe("$SRV.STATS.tenure", func(m *nats.Msg) {
		go func() {
			time.Sleep(slow)
			_ = m.Respond(answer)
		}()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"status", "--nats-url", srv.ClientURL(), "--wait", "200ms", "--json"}, &out, &errb); code != 0 || !strings.Contains(out.String(), `"slow-coord"`) {
		t.Fatalf("status with an answer after %v and --wait 200ms: exit %d, want 0 and slow-coord listed:\n%s%s", slow, code, out.String(), errb.String())
	}

	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"status", "--nats-url", srv.ClientURL(), "--wait", "100ms", "--timeout", "300ms"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "no coordinator answered within 300ms") {
		t.Fatalf("status with --timeout 300ms shorter than the answer's %v: exit %d, want an error naming the timeout:\n%s%s", slow, code, out.String(), errb.String())
	}
}
