package coordinator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
)

// A renewal whose update was applied but whose reply never came (a
// timeout under load) is not a lost leadership: the next renewal, refused
// for a wrong revision, reads the entry back, finds it names this
// coordinator at a later revision, and holds that revision. Before, any
// failed update ended the live session ("leadership lost"), and under an
// expiry storm on loaded cores a late KV reply did (issue 29). An entry
// that names another coordinator, or is gone, is a lost leadership.
func TestRenewalOfAnUnansweredUpdate(t *testing.T) {
	_, _, js := newServer(t)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "TEST_LEADER", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	held, err := kv.Create(ctx, coordinator.LeaderKey, []byte("c1"))
	if err != nil {
		t.Fatal(err)
	}
	// c1's update applied, its reply lost: the entry moved on without c1
	// knowing.
	applied, err := kv.Update(ctx, coordinator.LeaderKey, []byte("c1"), held)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := coordinator.RenewOnce(ctx, kv, "c1", held)
	if err != nil || rev != applied {
		t.Fatalf("renewal after an unanswered update: revision %d, %v; want %d held", rev, err, applied)
	}
	// And it renews on from there.
	next, err := coordinator.RenewOnce(ctx, kv, "c1", rev)
	if err != nil || next <= rev {
		t.Fatalf("the next renewal: revision %d, %v", next, err)
	}
	// Another coordinator took the entry: lost.
	taken, err := kv.Update(ctx, coordinator.LeaderKey, []byte("c2"), next)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coordinator.RenewOnce(ctx, kv, "c1", next); err == nil || !strings.Contains(err.Error(), `names "c2"`) {
		t.Fatalf("renewal of an entry c2 took: %v, want lost", err)
	}
	// Gone: lost.
	if err := kv.Delete(ctx, coordinator.LeaderKey, jetstream.LastRevision(taken)); err != nil {
		t.Fatal(err)
	}
	if _, err := coordinator.RenewOnce(ctx, kv, "c1", taken); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("renewal of a deleted entry: %v, want lost", err)
	}
}
