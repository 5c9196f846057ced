package follow

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// PullInfo describes an outstanding request, as the pull hook sees it.
type PullInfo = pullInfo

// StartWithPullHook is Start with a hook told of the outstanding requests
// after each one is sent (on the Follower's goroutine).
func StartWithPullHook(ctx context.Context, js jetstream.JetStream, cfg Config, handle func(context.Context, Msg), hook func([]PullInfo)) *Follower {
	return start(ctx, js, cfg, handle, hook)
}

// Inbox is the current consumer's inbox (its requests' replies are
// Inbox().<id>), "" when there is none.
func (f *Follower) Inbox() string {
	f.obsMu.Lock()
	defer f.obsMu.Unlock()
	return f.obsIn
}

// ConsumerName is the current consumer's name, "" when there is none.
func (f *Follower) ConsumerName() string {
	f.obsMu.Lock()
	defer f.obsMu.Unlock()
	return f.obsName
}

// Outstanding is the reply subjects of the outstanding requests.
func (f *Follower) Outstanding() []string {
	f.obsMu.Lock()
	defer f.obsMu.Unlock()
	return append([]string(nil), f.obsReqs...)
}

// SetLargeRoom sets what a request for one large message asks for beyond
// the server's max_payload, and returns a function that restores it.
func SetLargeRoom(n int) (restore func()) {
	old := largeRoom
	largeRoom = n
	return func() { largeRoom = old }
}

// FailedCreates is how many attempts at creating a consumer failed.
func (f *Follower) FailedCreates() int { return int(f.failedCreates.Load()) }

// Lookups is how many look-ups of its consumer (after a status claiming
// it deleted, or a missed heartbeat) the Follower has concluded.
func (f *Follower) Lookups() int { return int(f.lookups.Load()) }

// Deletes is how many deletions of a consumer the Follower has begun
// (each is sent in the background).
func (f *Follower) Deletes() int { return int(f.deletes.Load()) }
