package projector_test

import (
	"errors"
	"testing"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

// TestRestoreUniqueKeyTwice: Restore refuses a state in which two jobs of
// a queue hold one unique key (rules revision 8), and judges it on the
// projections as stored: it fires no deadline of the first holder (one
// due, whose firing would end the job and hide the breach) and emits
// nothing.
func TestRestoreUniqueKeyTwice(t *testing.T) {
	f := &folder{t: t, p: projector.New()}
	f.step(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision8, LeaseKey: propLeaseKey})
	f.step(0, events.RoleOps, "d1", "a", events.Input{Verb: events.VerbSubmit, Queue: "q", MaxAttempts: 1, UniqueKey: "k"})
	ds := f.step(0, events.RoleWorker, "w1", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q", Slots: 1, TTLMS: 600000})
	if len(ds) != 2 || ds[1].Kind != events.KindAssigned {
		t.Fatalf("pull: %+v", ds)
	}
	f.step(0, events.RoleWorker, "w1", "a", events.Input{Verb: events.VerbAck, LeaseID: ds[1].Job.LeaseID, Generation: 1})
	f.step(2e9, events.RoleOps, "d1", "b", events.Input{Verb: events.VerbSubmit, Queue: "q", UniqueKey: "other"})
	if err := new(projector.Projector).Restore(f.p.Snapshot()); err != nil {
		t.Fatalf("a valid state: %v", err)
	}
	// a's lease expired before the snapshot's time (its deadline due, not
	// fired), and b names a's key.
	a, _ := f.p.Job("a")
	a.ExpiresAt = a.AckedAt + 1e9
	projector.SetJob(f.p, a)
	b, _ := f.p.Job("b")
	b.UniqueKey = "k"
	projector.SetJob(f.p, b)
	if err := new(projector.Projector).Restore(f.p.Snapshot()); !errors.Is(err, projector.ErrBadSnapshot) {
		t.Fatalf("two holders of one key: Restore = %v, want ErrBadSnapshot", err)
	}
}

// TestUniqueForAtTheEndOfTime: a unique key held unique_for_ms (its
// longest) after a job that ended at the end of int64 nanoseconds is
// still held: the window saturates, it does not wrap into the past and
// free the key.
func TestUniqueForAtTheEndOfTime(t *testing.T) {
	f := &folder{t: t, p: projector.New()}
	at := projector.MaxTime - 1000 - testutil.ScenarioBase
	f.step(at, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision7, LeaseKey: propLeaseKey})
	f.step(at, events.RoleOps, "d1", "a", events.Input{Verb: events.VerbSubmit, Queue: "q", UniqueKey: "k", UniqueForMS: events.MaxDurationMS})
	f.step(at, events.RoleOps, "d1", "a", events.Input{Verb: events.VerbCancel})
	ds := f.step(at+500, events.RoleOps, "d1", "b", events.Input{Verb: events.VerbSubmit, Queue: "q", UniqueKey: "k"})
	if len(ds) != 1 || ds[0].Reason != events.ReasonDuplicateUniqueKey || ds[0].DuplicateOf != "a" {
		t.Fatalf("b at the end of time: %s", describeAll(ds))
	}
	if err := new(projector.Projector).Restore(f.p.Snapshot()); err != nil {
		t.Fatalf("restore at the end of time: %v", err)
	}
}
