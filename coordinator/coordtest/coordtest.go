// Package coordtest runs coordinators for the tests of other packages: a
// coordinator.Group started, stopped and checked with the test, and waited
// for until every partition is live.
package coordtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/internal/testutil"
)

// RunGroup creates a Group of cfg over count partitions and runs it until
// the test ends; t.Cleanup stops it and fails the test if Run returned an
// error or did not stop within 15 s. It returns once every partition has a
// live coordinator, failing the test after within.
func RunGroup(t testing.TB, cfg coordinator.Config, count uint32, within time.Duration) *coordinator.Group {
	t.Helper()
	g := StartGroup(t, cfg, count)
	WaitLive(t, g, within)
	return g
}

// StartGroup is RunGroup without the wait for every partition to be live
// (for a group whose genesis an administrator ends: WaitLive after).
func StartGroup(t testing.TB, cfg coordinator.Config, count uint32) *coordinator.Group {
	t.Helper()
	g, err := coordinator.NewGroup(cfg, count)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("coordinator group: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("coordinator group did not stop")
		}
	})
	return g
}

// WaitLive waits until every partition of g has a live coordinator,
// failing the test after within.
func WaitLive(t testing.TB, g *coordinator.Group, within time.Duration) {
	t.Helper()
	testutil.WaitFor(t, within, fmt.Sprintf("all %d partitions live", len(g.Coordinators())), func() bool {
		live := 0
		for _, st := range g.Stats() {
			if st.Live {
				live++
			}
		}
		return live == len(g.Coordinators())
	})
}
