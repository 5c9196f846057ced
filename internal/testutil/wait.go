package testutil

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// WaitFor waits until cond holds, checking it at once, then after 1 ms,
// 2 ms, ... and every 10 ms from then on, and fails the test, naming what
// it waited for, if it does not hold within timeout. It is the one waiting
// helper of the tests: they wait on the event they expect, with a
// deadline, never for a fixed time. It is Poll for a condition that needs
// no more than its name said on a failure.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if Poll(timeout, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}) != nil {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

var errNotYet = errors.New("not yet")

// Poll is WaitFor's loop on its own: it calls check at once, then after
// 1 ms, 2 ms, ... and every 10 ms from then on, until check returns nil,
// and then returns nil; if check still fails once timeout has passed, Poll
// returns check's last error, wrapped with the timeout. check's error says
// why the event awaited has not happened yet (the state it saw). Poll is
// for a test that says itself what failed (with that error, a log, or a
// state read only then) and for a wait outside the test's goroutine, where
// a test must not end with Fatal: the caller decides what to do with the
// error. check may itself end the test (t.Fatal, when Poll runs in the
// test's goroutine) if waiting on makes no sense, e.g. a process it waits
// for has exited.
func Poll(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for pause := time.Millisecond; ; pause = min(2*pause, 10*time.Millisecond) {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		time.Sleep(pause)
	}
}
