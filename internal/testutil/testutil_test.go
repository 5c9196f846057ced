package testutil_test

import (
	"context"
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
