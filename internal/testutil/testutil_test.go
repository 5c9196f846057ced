package testutil_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/internal/testutil"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

func TestStartServerAndConnect(t *testing.T) {
	srv := testutil.StartServer(t)
	nc, js := testutil.Connect(t, srv.ClientURL())
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("jetstream not usable: %v", err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if _, err := js.Publish(ctx, "t.x", []byte("x")); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

func TestStartServerInKeepsDataDir(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	srv := testutil.StartServerIn(t, dir, testutil.SyncAlways())
	_, js := testutil.Connect(t, srv.ClientURL())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	srv.Shutdown()

	srv = testutil.StartServerIn(t, dir)
	_, js = testutil.Connect(t, srv.ClientURL())
	if _, err := js.Stream(ctx, "T"); err != nil {
		t.Fatalf("stream lost across restart: %v", err)
	}
}

// fatalTB records Fatalf instead of ending the test.
type fatalTB struct {
	testing.TB
	failed string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestWaitFor(t *testing.T) {
	n := 0
	testutil.WaitFor(t, 10*time.Second, "three polls", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
	f := &fatalTB{TB: t}
	testutil.WaitFor(f, 20*time.Millisecond, "never", func() bool { return false })
	if !strings.Contains(f.failed, "waiting for never") {
		t.Fatalf("Fatalf %q, want it to name what was waited for", f.failed)
	}
}

func TestPoll(t *testing.T) {
	n := 0
	if err := testutil.Poll(10*time.Second, func() error {
		if n++; n < 3 {
			return fmt.Errorf("poll %d", n)
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Poll: %v after %d checks, want nil after 3", err, n)
	}

	// On a timeout: check's last error, wrapped with the timeout, after
	// checks spread over the timeout (not one, not a busy loop).
	last := errors.New("last")
	n = 0
	start := time.Now()
	err := testutil.Poll(50*time.Millisecond, func() error {
		n++
		return last
	})
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("Poll gave up after %v, before its timeout", took)
	}
	if !errors.Is(err, last) || err.Error() != "after 50ms: last" {
		t.Errorf("Poll after its timeout: %v, want check's last error with the timeout", err)
	}
	if n < 2 || n > 20 {
		t.Errorf("%d checks in 50 ms, want one at once, then after 1, 2, 4, 8 ms and every 10 ms", n)
	}

	// Outside the test's goroutine: the caller gets the error.
	done := make(chan error, 1)
	go func() { done <- testutil.Poll(20*time.Millisecond, func() error { return last }) }()
	if err := <-done; !errors.Is(err, last) {
		t.Errorf("Poll in another goroutine: %v", err)
	}
}
