package testutil

import (
	"testing"
	"time"
)

// WaitFor waits until cond holds, checking it at once, then after 1 ms,
// 2 ms, ... and every 10 ms from then on, and fails the test, naming what
// it waited for, if it does not hold within timeout. It is the one waiting
// helper of the tests: they wait on the event they expect, with a
// deadline, never for a fixed time.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 10*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
			return
		}
		time.Sleep(pause)
	}
}
