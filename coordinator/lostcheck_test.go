package coordinator_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
)

// On a real server, the check that the input stream still holds the last
// input folded (every leadership renewal) finds it, as the coordinator's
// reader read it: a coordinator that renews many times stays in its first
// session. (A check that compared what a direct get answers with what the
// reader delivered in another form, its time say, would resynchronise at
// every renewal.)
func TestInputKeptOnServer(t *testing.T) {
	srv, _, js := newServer(t)
	r := startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) { c.LeaderTTL = 300 * time.Millisecond })
	for i := range 20 {
		publish(t, js, events.RoleWorker, "w1", fmt.Sprintf("j%d", i), events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
	}
	waitCaughtUp(t, js, r)
	time.Sleep(2 * time.Second) // some 20 renewals, each with its check
	waitCaughtUp(t, js, r)
	if st := r.c.Stats(); !st.Live || st.Sessions != 1 {
		t.Fatalf("after 20 renewals: live %v, %d sessions (%s); want live in its first session", st.Live, st.Sessions, st.Reason)
	}
}
