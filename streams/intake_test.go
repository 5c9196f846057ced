package streams_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// sourcedWithin publishes a worker input to w's intake and returns how long
// it took to appear in the input stream (failing after 30 s).
func sourcedWithin(t *testing.T, js jetstream.JetStream, w string) time.Duration {
	t.Helper()
	ctx := testCtx(t)
	top := streams.Topology{}
	in, err := js.Stream(ctx, top.InputStream())
	if err != nil {
		t.Fatal(err)
	}
	before, err := in.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	ack, err := js.Publish(ctx, "tenure.in.worker."+w+".j1.acquire", []byte(`{"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stream != top.IntakeStream(w) {
		t.Fatalf("stored by %s, want %s", ack.Stream, top.IntakeStream(w))
	}
	testutil.WaitFor(t, 30*time.Second, "the input sourced into "+top.InputStream(), func() bool {
		info, err := in.Info(ctx)
		return err == nil && info.State.LastSeq > before.State.LastSeq
	})
	return time.Since(t0)
}

// ApplyQuotas makes the intake streams before the input stream sources
// them when their subjects do not overlap (at the end of genesis, and when
// workers are added): the server sets each source up at once. Before, the
// input stream was given its sources first, the server found no stream
// to source, and set the source up again only after its retry back-off
// (10 s and more): every worker input of a new deployment waited that long
// for its verdict (cmd/tenure TestAuthServeUIActions, whose acquire then
// timed out, and its retry was refused lease_held).
func TestApplyQuotasSourcesAtOnce(t *testing.T) {
	js := startJS(t)
	ctx := testCtx(t)
	top := streams.Topology{}
	if _, err := streams.Ensure(ctx, js, top, leaderTTL); err != nil {
		t.Fatal(err)
	}
	// Enough workers that making their intakes takes longer than the
	// server waits before its first set-up of a source (100 to 200 ms).
	var ws []string
	for i := range 64 {
		ws = append(ws, fmt.Sprintf("w%d", i))
	}
	q := streams.Quotas{Workers: ws, MaxBytes: 1 << 20, MaxMsgs: 1000, BytesPerS: 1 << 20, MsgsPerS: 1000}
	// From genesis straight to the quota form.
	if _, err := streams.ApplyQuotas(ctx, js, top, q); err != nil {
		t.Fatal(err)
	}
	// The server's back-off after a failed source set-up is 10 s: an
	// input sourced in less than 5 s was sourced at once.
	d := sourcedWithin(t, js, ws[len(ws)-1])
	t.Logf("sourced after %v", d)
	if d > 5*time.Second {
		t.Errorf("%s's input reached the input stream after %v: its source was set up after a retry", ws[len(ws)-1], d)
	}
	// A worker added later.
	q.Workers = []string{"late"}
	if _, err := streams.ApplyQuotas(ctx, js, top, q); err != nil {
		t.Fatal(err)
	}
	if d := sourcedWithin(t, js, "late"); d > 5*time.Second {
		t.Errorf("late's input reached the input stream after %v: its source was set up after a retry", d)
	}
	in, err := js.Stream(ctx, top.InputStream())
	if err != nil {
		t.Fatal(err)
	}
	if got := top.Intakes(in.CachedInfo().Config); len(got) != len(ws)+1 {
		t.Errorf("the input stream sources %d intakes, want %d", len(got), len(ws)+1)
	}
}
