package auth_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// Under tenure auth init's permissions, a brand-new deployment before its
// coordinator goes live: the input stream exists (made by the coordinator
// user, as Coordinator.Run does) in genesis. A worker's own input finds no
// stream and is not stored; the genesis subjects (rules and policy of the
// coordinator role) are refused to a worker and a dispatcher by their
// permissions; then the coordinator, with its own credential, stores its
// rules and policy, widens the stream and goes live, and the worker's
// input is stored after them.
func TestGenesisUnderPermissions(t *testing.T) {
	t.Parallel()
	b := generate(t, auth.Options{})
	srv := testutil.StartServer(t, testutil.ConfigFile(b.ServerConfigPath()))
	e := &env{b: b, srv: srv, url: srv.ClientURL()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	coord := connect(t, b, e.url, "coord")
	if _, err := streams.Ensure(ctx, coord.js, streams.Topology{}, 600*time.Millisecond); err != nil {
		t.Fatalf("Ensure as the coordinator: %v", err)
	}
	w1 := connect(t, b, e.url, "w1")
	const acquire = "tenure.in.worker.w1.gen-1.acquire"
	if _, err := w1.js.Publish(ctx, acquire, []byte(`{"v":1,"lease_ms":60000}`)); !errors.Is(streams.Classify(err), streams.ErrNoResponders) {
		t.Fatalf("w1's acquire in genesis: %v, want no responders", err)
	}
	refused(t, w1, "w1", "tenure.in.coord.w1._.rules", "tenure.in.coord.w1._.policy", "tenure.in.coord.coord._.rules")
	disp := connect(t, b, e.url, "disp")
	refused(t, disp, "disp", "tenure.in.coord.disp._.rules", "tenure.in.coord.disp._.policy")
	e.coord = coord // e.read's connection until the coordinator runs
	if got := e.read(t, "TENURE_IN"); len(got) != 0 {
		t.Fatalf("the input stream in genesis holds %d inputs", len(got))
	}

	e.startCoordinator(t, coordinator.Config{})
	ack, err := w1.js.Publish(ctx, acquire, []byte(`{"v":1,"lease_ms":60000}`))
	if err != nil {
		t.Fatalf("w1's acquire after genesis: %v", err)
	}
	in := e.read(t, "TENURE_IN")
	if ack.Sequence != 3 || len(in) < 3 || in[0].subject != "tenure.in.coord.coord._.rules" || in[1].subject != "tenure.in.coord.coord._.policy" ||
		!strings.HasPrefix(in[2].subject, "tenure.in.worker.w1.") {
		t.Fatalf("w1's acquire stored as input %d; the log: %v", ack.Sequence, in)
	}
	coord.errs.noViolations(t, "coord")
}
