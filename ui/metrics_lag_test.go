package ui

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/internal/testutil"
)

// tenure_fold_lag_seconds of a coordinator that caught up is 0, although
// the last input it folded had waited: here three inputs stored while no
// coordinator ran, folded by the next one at its start, after which
// nothing arrives. (It stayed at that input's age, on an idle coordinator
// at the end of its log, and an alert on it fired.)
func TestFoldLagZeroOnceCaughtUp(t *testing.T) {
	t.Parallel()
	srv := testutil.StartServer(t)
	nc, js := testutil.Connect(t, srv.ClientURL())
	start := func(m *Metrics) (*coordinator.Coordinator, func()) {
		c, err := coordinator.New(coordinator.Config{ID: "c1", Conn: nc, Metrics: m, LeaderTTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { _ = c.Run(ctx) })
		testutil.WaitFor(t, 20*time.Second, "the coordinator live", func() bool { return c.Stats().Live })
		return c, func() { cancel(); wg.Wait() }
	}
	_, stop := start(NewMetrics())
	stop()
	var last uint64
	for _, job := range []string{"a", "b", "c"} {
		ack, err := js.Publish(context.Background(), "tenure.in.worker.w1."+job+".acquire", []byte(`{"v":1,"lease_ms":600000}`))
		if err != nil {
			t.Fatal(err)
		}
		last = ack.Sequence
	}
	m := NewMetrics()
	c, stop := start(m)
	defer stop()
	testutil.WaitFor(t, 20*time.Second, "the inputs folded", func() bool { return c.Stats().InputsFolded >= last })
	if lag, ok := gathered(t, m, "tenure_fold_lag_seconds")[""]; !ok || lag != 0 {
		t.Fatalf("tenure_fold_lag_seconds %v once caught up, want 0", lag)
	}
	if n := gathered(t, m, "tenure_inputs_folded_total")[""]; n < 3 {
		t.Fatalf("tenure_inputs_folded_total %v, want the three inputs at least", n)
	}
}
