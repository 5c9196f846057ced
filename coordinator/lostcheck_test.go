package coordinator_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// On a real server, the check that the input stream still holds the last
// input folded (every leadership renewal) finds it, as the coordinator's
// reader read it: 20 renewals of the leadership entry (counted by its
// revisions, not waited for by the clock) never find an input lost. (A
// check that compared what a direct get answers with what the reader
// delivered in another form, its time say, would resynchronise at every
// renewal.) A leadership lost to a loaded machine is not what this tests:
// only a resynchronisation for a lost input fails it.
func TestInputKeptOnServer(t *testing.T) {
	srv, _, js := newServer(t)
	var logs testutil.LockedBuffer
	r := startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) {
		c.LeaderTTL = 300 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	for i := range 20 {
		publish(t, js, events.RoleWorker, "w1", fmt.Sprintf("j%d", i), events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
	}
	waitCaughtUp(t, js, r)
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, streams.Topology{}.LeaderBucket())
	if err != nil {
		t.Fatal(err)
	}
	revision := func() uint64 {
		e, err := kv.Get(ctx, "leader")
		if err != nil {
			return 0
		}
		return e.Revision()
	}
	from := revision()
	testutil.WaitFor(t, time.Minute, "20 renewals of the leadership entry", func() bool { return revision() >= from+20 })
	if l := logs.String(); strings.Contains(l, "lost inputs") {
		t.Fatalf("a renewal's check found an input lost on a server that lost none:\n%s", l)
	}
}
