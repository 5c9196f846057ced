package main

import (
	"errors"
	"testing"

	"github.com/maknow/tenure/follow"
)

// sdkError is a test's SDK error handler: a consumer replaced (a heartbeat
// missed on two loaded cores; the Follower goes on after the last message
// handed over, nothing lost) is logged, any other report fails the test.
func sdkError(t testing.TB, who string, err error) {
	if errors.Is(err, follow.ErrReplacing) {
		t.Logf("%s: %v (recovered)", who, err)
		return
	}
	t.Errorf("%s: %v", who, err)
}
