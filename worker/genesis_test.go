package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// A worker of a brand-new deployment whose coordinator is not live yet:
// the input stream is in genesis, so an acquire finds no stream. The SDK
// retries it (no responders is transient); with a ctx that ends first, the
// error says so and matches streams.ErrNoResponders and ErrTransient.
// Once the coordinator is live, the retried acquire is granted.
func TestAcquireBeforeGenesisEnds(t *testing.T) {
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	if _, err := streams.Ensure(context.Background(), js, streams.Topology{}, 600*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, srv: srv, js: js}
	w := e.worker("w1")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := w.Acquire(ctx, "j1")
	if !errors.Is(err, streams.ErrNoResponders) || !errors.Is(err, streams.ErrTransient) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire in genesis: %v, want no responders (transient) and the deadline", err)
	}
	t.Logf("acquire in genesis: %v", err)

	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		l, err := w.Acquire(ctx, "j2")
		if err == nil && l.Token().Generation != 1 {
			err = errors.New("not generation 1")
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // the acquire is being retried
	e.coord = startCoordinator(t, srv.ClientURL(), "c1")
	if err := <-got; err != nil {
		t.Fatalf("acquire retried through the genesis: %v", err)
	}
	if in := e.readStream("TENURE_IN"); len(in) < 3 || in[2].subject != "tenure.in.worker.w1.j2.acquire" {
		t.Fatalf("the log: %v", in)
	}
}
