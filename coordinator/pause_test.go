package coordinator_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

// pauses is a coordinator.Metrics that keeps the loop's longest pause.
type pauses struct {
	mu    sync.Mutex
	max   time.Duration
	turns int
}

func (p *pauses) InputFolded(uint64, time.Time, int) {}
func (p *pauses) DecisionAppended(time.Duration)     {}
func (p *pauses) LoopPause(d time.Duration) {
	p.mu.Lock()
	p.max = max(p.max, d)
	p.turns++
	p.mu.Unlock()
}

// take returns the longest pause and the turns since the last take, and
// starts over.
func (p *pauses) take() (time.Duration, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, n := p.max, p.turns
	p.max, p.turns = 0, 0
	return m, n
}

// A turn of the live loop that encodes a slow snapshot is a pause at least
// as long as the encoding: the measurement covers the whole turn, not just
// the folds.
func TestSlowSnapshotIsAPause(t *testing.T) {
	const slow = 150 * time.Millisecond
	srv, _, js := newServer(t)
	pm := &pauses{}
	var mu sync.Mutex
	slowOn, taken := false, 0
	r := startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) {
		c.Metrics = pm
		c.SnapshotEvery = 5
		coordinator.SetSnapshotHook(c, func() {
			mu.Lock()
			on := slowOn
			if on {
				taken++
			}
			mu.Unlock()
			if on {
				time.Sleep(slow) // an encoding that takes this long
			}
		})
	})
	testutil.WaitFor(t, 10*time.Second, "live", func() bool { return r.c.Stats().Live })
	for i := range 4 {
		publish(t, js, events.RoleWorker, "w1", fmt.Sprintf("j%d", i), events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
	}
	waitCaughtUp(t, js, r)
	m, n := pm.take()
	t.Logf("%d turns of the loop for %d inputs, the longest %v", n, 4, m)
	if m >= slow || n == 0 {
		t.Fatalf("before any slow snapshot: longest pause %v over %d turns, want some turns, all under %v", m, n, slow)
	}
	mu.Lock()
	slowOn = true
	mu.Unlock()
	// Inputs until a snapshot is due (every 5 inputs, counted from the last
	// one, which a batch of inputs folded in one turn may have taken late).
	took := func() bool { mu.Lock(); defer mu.Unlock(); return taken > 0 }
	for i := 0; !took(); i++ {
		if i == 50 {
			t.Fatal("no snapshot taken after 50 more inputs")
		}
		publish(t, js, events.RoleWorker, "w1", fmt.Sprintf("k%d", i), events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
		waitCaughtUp(t, js, r)
	}
	// The slow turn is reported when it ends (the loop measures a turn at
	// its next select): wait for that, a report at least as long.
	var longest time.Duration
	testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("a pause of at least the snapshot turn's %v", slow), func() bool {
		d, _ := pm.take()
		longest = max(longest, d)
		return longest >= slow
	})
}
