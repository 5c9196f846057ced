package testutil

import (
	"testing"
	"time"
)

// WaitFor waits until cond holds, checking it every few milliseconds, and
// fails the test (naming what it waited for) if it does not hold within
// timeout. It is the one waiting helper of the tests: they wait on the
// event they expect, with a deadline, never for a fixed time.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
