package projector_test

import (
	"errors"
	"testing"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

// Every fixed-width number of the fold, at its limit and past it
// (issue "Nothing bricks a deployment"): times saturate at the end of int64
// nanoseconds instead of wrapping into the past, counters saturate, the
// generation stops at max_generations, and Restore refuses a state whose
// numbers no fold produces.
func TestFixedWidthLimits(t *testing.T) {
	t.Run("times at the end of int64", func(t *testing.T) {
		f := &folder{t: t, p: projector.New()}
		at := projector.MaxTime - 1000 - testutil.ScenarioBase // stored 1 µs before the end
		pol := events.DefaultPolicy()
		pol.MaxLease, pol.MaxLifetime = events.MaxDurationMS*1e6, events.MaxDurationMS*1e6
		f.step(at, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbPolicy, Policy: pol})
		ds := f.step(at, events.RoleWorker, "w1", "late-1", events.Input{Verb: events.VerbAcquire, LeaseMS: events.MaxDurationMS})
		if j := ds[0].Job; ds[0].Kind != events.KindGranted || j.ExpiresAt != projector.MaxTime {
			t.Fatalf("acquire at the end of time: %s, expires %d, want %d", ds[0].Kind, j.ExpiresAt, projector.MaxTime)
		}
		ds = f.step(at, events.RoleOps, "disp", "late-2", events.Input{Verb: events.VerbOffer, Holder: "w1", AckTimeoutMS: events.MaxDurationMS})
		if j := ds[0].Job; ds[0].Kind != events.KindOffered || j.AckDeadline != projector.MaxTime {
			t.Fatalf("offer at the end of time: %s, ack deadline %d", ds[0].Kind, j.AckDeadline)
		}
		ds = f.step(at, events.RoleOps, "disp", "late-1", events.Input{Verb: events.VerbCancel})
		if j := ds[0].Job; ds[0].Kind != events.KindCancelRequested || j.CancelBy != projector.MaxTime {
			t.Fatalf("cancel at the end of time: %s, cancel by %d", ds[0].Kind, j.CancelBy)
		}
		// Nothing is due: no deadline wrapped into the past.
		if f.p.Due() {
			t.Fatal("a deadline is due at the end of time")
		}
	})
	t.Run("counters saturate", func(t *testing.T) {
		f := &folder{t: t, p: projector.New()}
		f.step(0, events.RoleWorker, "w1", "j", events.Input{Verb: events.VerbAcquire})
		f.step(1, events.RoleWorker, "w1", "j", events.Input{Verb: events.VerbRelease, LeaseID: "L1", Generation: 1})
		f.step(2, events.RoleWorker, "w1", "j", events.Input{Verb: events.VerbAcquire})
		j, _ := f.p.Job("j")
		j.Stale, j.Late, j.LateProgress, j.Duplicates, j.Conflicts = 1<<64-1, 1<<64-1, 1<<64-1, 1<<64-1, 1<<64-1
		projector.SetJob(f.p, j)
		f.step(3, events.RoleWorker, "w1", "j", events.Input{Verb: events.VerbRenew, Leases: []events.LeaseRef{{Job: "j", LeaseID: "L1", Generation: 1, RenewSeq: 1}}})
		f.step(4, events.RoleWorker, "w2", "j", events.Input{Verb: events.VerbProgress, LeaseID: "L3", Generation: 2, ProgressSeq: 1})
		j, _ = f.p.Job("j")
		if j.Stale != 1<<64-1 || j.Conflicts != 1<<64-1 {
			t.Fatalf("counters wrapped: stale %d conflicts %d", j.Stale, j.Conflicts)
		}
	})
	t.Run("generations stop at max_generations", func(t *testing.T) {
		if testing.Short() {
			t.Skip("2^20 leases")
		}
		f := &folder{t: t, p: projector.New(), discard: true}
		pol := events.DefaultPolicy()
		pol.MaxGenerations = events.MaxGenerations
		f.step(0, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbPolicy, Policy: pol})
		for g := uint64(1); g <= events.MaxGenerations; g++ {
			ds := f.step(int64(g), events.RoleWorker, "w1", "j", events.Input{Verb: events.VerbAcquire})
			if ds[0].Kind != events.KindGranted || ds[0].Job.Generation != g {
				t.Fatalf("acquire %d: %s/%s g%d", g, ds[0].Kind, ds[0].Reason, ds[0].Job.Generation)
			}
			f.step(int64(g), events.RoleWorker, "w1", "j", events.Input{Verb: events.VerbRelease, LeaseID: ds[0].Job.LeaseID, Generation: g})
		}
		ds := f.step(1<<21, events.RoleWorker, "w1", "j", events.Input{Verb: events.VerbAcquire})
		if ds[0].Kind != events.KindRejected || ds[0].Reason != events.ReasonMaxGenerations {
			t.Fatalf("acquire past max_generations: %s/%s", ds[0].Kind, ds[0].Reason)
		}
	})
	t.Run("restore refuses numbers no fold produces", func(t *testing.T) {
		for name, bad := range map[string]func(*events.Job){
			"state":          func(j *events.Job) { j.State = 200 },
			"ack state":      func(j *events.Job) { j.AckState = 200 },
			"result":         func(j *events.Job) { j.Result = 9 },
			"generation":     func(j *events.Job) { j.Generation = events.MaxGenerations + 1 },
			"renew seq":      func(j *events.Job) { j.RenewSeq = events.MaxSeq + 1 },
			"progress seq":   func(j *events.Job) { j.ProgressSeq = 1<<64 - 1 },
			"progress value": func(j *events.Job) { j.ProgressValue = 101 },
			"duration":       func(j *events.Job) { j.Duration = -1 },
			"holder":         func(j *events.Job) { j.Holder = "a.b" },
		} {
			f := &folder{t: t, p: projector.New()}
			f.step(0, events.RoleWorker, "w1", "j", events.Input{Verb: events.VerbAcquire})
			j, _ := f.p.Job("j")
			bad(&j)
			projector.SetJob(f.p, j)
			if err := new(projector.Projector).Restore(f.p.Snapshot()); !errors.Is(err, projector.ErrBadSnapshot) {
				t.Errorf("%s: Restore = %v, want ErrBadSnapshot", name, err)
			}
		}
	})
}
