package streams_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// On a deployment past genesis without quotas, the input stream takes
// every input subject, which the intakes' would overlap: ApplyQuotas
// narrows it and gives it its sources first, then makes the intakes, and
// nats-server's first set-up of each source (100 to 200 ms after the
// update) may come before its intake exists, or fail under load; the next
// comes after its retry back-off (10 s and more). ApplyQuotas returns only
// once every intake is sourced. Before, it returned at once, the sources
// not yet set up (cmd/tenure TestAuditReceiptsOfIntakeInputs, on a loaded
// machine: its first acquire waited more than 10 s for its verdict).
func TestApplyQuotasReturnsSourced(t *testing.T) {
	js := startJS(t)
	ctx := testCtx(t)
	top := streams.Topology{}
	if _, err := streams.Ensure(ctx, js, top, leaderTTL); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.EndGenesis(ctx, js, top); err != nil {
		t.Fatal(err)
	}
	ws := []string{"w1", "w2", "w3"}
	q := streams.Quotas{Workers: ws, MaxBytes: 1 << 20, MaxMsgs: 1000, BytesPerS: 1 << 20, MsgsPerS: 1000}
	in, err := streams.ApplyQuotas(ctx, js, top, q)
	if err != nil {
		t.Fatal(err)
	}
	info, err := in.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Sources) != len(ws) {
		t.Fatalf("%d sources, want %d", len(info.Sources), len(ws))
	}
	for _, si := range info.Sources {
		if si.Active < 0 || si.Error != nil {
			t.Errorf("ApplyQuotas returned with source %s not set up (active %v, error %v)", si.Name, si.Active, si.Error)
		}
	}
	if d := sourcedWithin(t, js, "w2"); d > 5*time.Second {
		t.Errorf("w2's input reached the input stream after %v", d)
	}
}

// WaitSourced names the intakes the input stream does not source yet.
func TestWaitSourcedNamesWhatIsMissing(t *testing.T) {
	js := startJS(t)
	ctx := testCtx(t)
	top := streams.Topology{}
	if _, err := streams.Ensure(ctx, js, top, leaderTTL); err != nil {
		t.Fatal(err)
	}
	in, err := streams.ApplyQuotas(ctx, js, top, streams.Quotas{Workers: []string{"w1"}, MaxBytes: 1 << 20, MaxMsgs: 1000, BytesPerS: 1 << 20, MsgsPerS: 1000})
	if err != nil {
		t.Fatal(err)
	}
	// (It waits the whole timeout: "nobody" is never sourced. 2 s leaves
	// a loaded machine time to answer a stream info or two.)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = streams.WaitSourced(wctx, in, top, []string{"w1", "nobody"})
	if !errors.Is(err, streams.ErrNotSourced) || !strings.Contains(err.Error(), "TENURE_INTAKE_nobody") || strings.Contains(err.Error(), "TENURE_INTAKE_w1,") {
		t.Fatalf("WaitSourced = %v, want ErrNotSourced naming TENURE_INTAKE_nobody alone", err)
	}
}
