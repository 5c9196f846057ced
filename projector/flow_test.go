package projector_test

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
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
	f.step(at, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision8, LeaseKey: propLeaseKey})
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

// TestBatchesAndFlow: a log at rules revision 8 takes both revision 7's
// batches and revision 8's scheduled jobs and unique keys, side by side in
// one queue; under revision 7 a submit naming run_at, delay_ms, unique_key
// or unique_for_ms is refused as it was below 7 (rejected/unknown_field),
// and nothing of it is in the projection.
func TestBatchesAndFlow(t *testing.T) {
	for _, rev := range []uint32{events.Revision7, events.Revision8} {
		f := &folder{t: t, p: projector.New()}
		f.step(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: rev, LeaseKey: propLeaseKey})
		ds := f.step(0, events.RoleOps, "d1", events.NoJob, events.Input{Verb: events.VerbSubmit, Batch: []events.Input{
			{Job: "a", Verb: events.VerbSubmit, Queue: "q"}, {Job: "b", Verb: events.VerbSubmit, Queue: "q"}}})
		if len(ds) != 2 || ds[0].Kind != events.KindSubmitted || ds[1].Kind != events.KindSubmitted || ds[1].Job.ID != "b" {
			t.Fatalf("revision %d: a batch submit: %s", rev, describeAll(ds))
		}
		for _, in := range []events.Input{
			{Verb: events.VerbSubmit, Queue: "q", DelayMS: 1000, UniqueKey: "k"},
			{Verb: events.VerbSubmit, Queue: "q", RunAt: testutil.ScenarioBase + 2e9},
			{Verb: events.VerbSubmit, Queue: "q", UniqueKey: "k", UniqueForMS: 5000},
		} {
			ds = f.step(0, events.RoleOps, "d1", "c", in)
			if rev == events.Revision8 {
				break
			}
			if len(ds) != 1 || ds[0].Kind != events.KindRejected || ds[0].Reason != events.ReasonUnknownField {
				t.Fatalf("revision 7: %+v: %s, want rejected/unknown_field", in, describeAll(ds))
			}
			if _, ok := f.p.Job("c"); ok {
				t.Fatalf("revision 7: job c exists after a refused submit")
			}
		}
		if rev == events.Revision7 {
			continue
		}
		if len(ds) != 1 || ds[0].Kind != events.KindSubmitted || ds[0].Job.ReadyAt != testutil.ScenarioBase+1e9 || ds[0].Job.UniqueKey != "k" {
			t.Fatalf("revision 8: a scheduled submit with a unique key: %s", describeAll(ds))
		}
		ds = f.step(0, events.RoleOps, "d1", "d", events.Input{Verb: events.VerbSubmit, Queue: "q", UniqueKey: "k"})
		if len(ds) != 1 || ds[0].Reason != events.ReasonDuplicateUniqueKey || ds[0].DuplicateOf != "c" {
			t.Fatalf("revision 8: d names c's key: %s", describeAll(ds))
		}
		// A worker's pull is offered the batch's jobs now, c only at its time.
		ds = f.step(0, events.RoleWorker, "w1", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q", Slots: 3, TTLMS: 600000})
		var offered []string
		for _, d := range ds {
			if d.Kind == events.KindAssigned {
				offered = append(offered, d.Job.ID)
			}
		}
		if len(offered) != 2 || offered[0] != "a" || offered[1] != "b" {
			t.Fatalf("revision 8: the pull at 0s offered %v, want [a b]", offered)
		}
		ds = f.step(1e9, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
		offered = offered[:0]
		for _, d := range ds {
			if d.Kind == events.KindAssigned {
				offered = append(offered, d.Job.ID)
			}
		}
		if len(offered) != 1 || offered[0] != "c" {
			t.Fatalf("revision 8: the tick at 1s offered %v, want [c]: %s", offered, describeAll(ds))
		}
		if err := new(projector.Projector).Restore(f.p.Snapshot()); err != nil {
			t.Fatalf("revision 8: restore: %v", err)
		}
	}
}

// TestSnapshotFormatOfRevisions: a fold at rules revision 7 (batches)
// snapshots in format 5, as revision 6 did; one at revision 8 (flow
// control) in format 6. Each restores; a format 5 snapshot naming revision
// 8, or a format 6 one naming 7, is refused (its checksum made right).
func TestSnapshotFormatOfRevisions(t *testing.T) {
	for _, c := range []struct {
		rev, other uint32
		magic      string
	}{{events.Revision7, events.Revision8, "TNRSNAP5"}, {events.Revision8, events.Revision7, "TNRSNAP6"},
		{events.Revision8, events.Revision9, "TNRSNAP6"}, {events.Revision9, events.Revision8, "TNRSNAP7"}} {
		f := &folder{t: t, p: projector.New()}
		f.step(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: c.rev, LeaseKey: propLeaseKey})
		f.step(0, events.RoleOps, "d1", events.NoJob, events.Input{Verb: events.VerbSubmit, Batch: []events.Input{
			{Job: "a", Verb: events.VerbSubmit, Queue: "q"}, {Job: "b", Verb: events.VerbSubmit, Queue: "q"}}})
		if c.rev >= events.Revision8 {
			f.step(0, events.RoleOps, "d1", "c", events.Input{Verb: events.VerbSubmit, Queue: "q", DelayMS: 1000, UniqueKey: "k"})
		}
		if c.rev >= events.Revision9 {
			// Format 7: the limits (a bucket too), and a job's concurrency key.
			f.step(0, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbLimit, Queue: "q", ConcurrencyKey: "ck", MaxActive: 1, HasMaxActive: true})
			f.step(0, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbLimit, Queue: "q", Rate: 3, PeriodMS: 1000})
			f.step(0, events.RoleOps, "d1", "d", events.Input{Verb: events.VerbSubmit, Queue: "q", ConcurrencyKey: "ck"})
			f.step(0, events.RoleWorker, "w1", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q", Slots: 1, TTLMS: 600000}) // a token spent
		}
		snap := f.p.Snapshot()
		if string(snap[:8]) != c.magic || snap[8] != byte(c.rev) {
			t.Fatalf("revision %d: snapshot starts %q %d, want %q %d", c.rev, snap[:8], snap[8], c.magic, c.rev)
		}
		r := new(projector.Projector)
		if err := r.Restore(snap); err != nil {
			t.Fatalf("revision %d: restore: %v", c.rev, err)
		}
		if string(r.Snapshot()) != string(snap) {
			t.Fatalf("revision %d: the restored state snapshots otherwise", c.rev)
		}
		bad := append([]byte(nil), snap[:len(snap)-4]...)
		bad[8] = byte(c.other)
		bad = binary.BigEndian.AppendUint32(bad, crc32.Checksum(bad, crc32.MakeTable(crc32.Castagnoli)))
		if err := new(projector.Projector).Restore(bad); !errors.Is(err, projector.ErrBadSnapshot) {
			t.Fatalf("a format %s snapshot naming revision %d: Restore = %v, want ErrBadSnapshot", c.magic, c.other, err)
		}
	}
}
