package projector_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

// folder steps a projector through inputs it builds, with increasing
// sequences, failing the test on a broken contract.
type folder struct {
	t   *testing.T
	p   *projector.Projector
	seq uint64
	max int // most decisions of one input so far
	all []events.Decision
	// discard leaves all empty (long runs).
	discard bool
}

func (f *folder) step(at int64, role events.Role, actor, job string, in events.Input) []events.Decision {
	f.t.Helper()
	in.Role, in.Actor, in.Job = role, actor, job
	f.seq++
	ds, err := f.p.Step(events.Raw{Seq: f.seq, Time: testutil.ScenarioBase + at,
		Subject: events.InputSubject(role, actor, job, in.Verb), Body: events.AppendInputBody(nil, &in)})
	if err != nil {
		f.t.Fatal(err)
	}
	f.max = max(f.max, len(ds))
	for i := range ds {
		if int(ds[i].N) != i || int(ds[i].Of) != len(ds) {
			f.t.Fatalf("input %d: decision %d says %d of %d", f.seq, i, ds[i].N, ds[i].Of)
		}
	}
	if !f.discard {
		f.all = append(f.all, ds...)
	}
	return ds
}

// expiries folds, under revision rev, n leases that all expire at +10s, then
// at +20s a batch renew of the last 256 of them by their holder (every one
// due), then ticks until no deadline is due. It returns the folder and the
// number of ticks it took.
func expiries(t *testing.T, rev uint32, n int) (*folder, int) {
	f := &folder{t: t, p: projector.New()}
	if rev >= events.Revision2 {
		f.step(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: rev, LeaseKey: propLeaseKey})
	}
	ids := make([]string, n)
	for i := range ids {
		job := fmt.Sprintf("job-%07d", i)
		ds := f.step(0, events.RoleWorker, "w1", job, events.Input{Verb: events.VerbAcquire, LeaseMS: 10_000})
		ids[i] = ds[len(ds)-1].Job.LeaseID
	}
	var batch []events.LeaseRef
	for i := n - events.MaxBatch; i < n; i++ {
		batch = append(batch, events.LeaseRef{Job: fmt.Sprintf("job-%07d", i), LeaseID: ids[i], Generation: 1, RenewSeq: 1})
	}
	ds := f.step(20*1e9, events.RoleWorker, "w1", events.NoJob, events.Input{Verb: events.VerbRenew, Leases: batch})
	verdicts := 0
	for _, d := range ds {
		if !d.Kind.Derived() {
			verdicts++
			if d.Kind != events.KindLostAuthority || d.Reason != events.ReasonRenewAfterExpiry {
				t.Fatalf("renew of a due lease: %s/%s", d.Kind, d.Reason)
			}
		}
	}
	if verdicts != events.MaxBatch {
		t.Fatalf("%d verdicts for a batch of %d", verdicts, events.MaxBatch)
	}
	ticks := 0
	for f.p.Due() {
		f.step(20*1e9, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
		ticks++
		if ticks > n {
			t.Fatal("deadlines stay due")
		}
	}
	return f, ticks
}

// Revision 2 bounds the decisions of one input (events.MaxDecisionsPerInput)
// however many deadlines fall due at once, carries the rest to later
// inputs, and still expires every lease exactly once, with the verdicts and
// final projections of revision 1 (which fires everything at once).
func TestDecisionsPerInputBound(t *testing.T) {
	const n = 3000 // more than MaxFiredPerInput + MaxBatch
	f2, ticks := expiries(t, events.Revision2, n)
	if want := events.MaxFiredPerInput + 2*events.MaxBatch; f2.max != want {
		// The batch renew at +20s fires MaxFiredPerInput deadlines from the
		// queue, then each of its 256 jobs (not among them) its own
		// deadline and its verdict: revision 2's bound, exactly.
		t.Fatalf("most decisions of one input: %d, want exactly %d", f2.max, want)
	}
	if want := (n - events.MaxFiredPerInput - events.MaxBatch + events.MaxFiredPerInput - 1) / events.MaxFiredPerInput; ticks != want {
		t.Fatalf("%d ticks to fire the rest, want %d", ticks, want)
	}
	f1, _ := expiries(t, events.Revision1, n)
	if f1.max != n+events.MaxBatch {
		t.Fatalf("revision 1: most decisions of one input %d, want %d", f1.max, n+events.MaxBatch)
	}
	expired := func(f *folder) map[string]int {
		m := map[string]int{}
		for _, d := range f.all {
			if d.Kind == events.KindExpired {
				m[d.Job.ID]++
			}
		}
		return m
	}
	e1, e2 := expired(f1), expired(f2)
	if len(e2) != n {
		t.Fatalf("revision 2 expired %d of %d leases", len(e2), n)
	}
	for id, c := range e2 {
		if c != 1 || e1[id] != 1 {
			t.Fatalf("job %s expired %d times under revision 2, %d under revision 1", id, c, e1[id])
		}
	}
	for i := range n {
		id := fmt.Sprintf("job-%07d", i)
		j1, _ := f1.p.Job(id)
		j2, _ := f2.p.Job(id)
		j1.LeaseID, j2.LeaseID = "", ""
		if j1 != j2 {
			t.Fatalf("job %s ends\n revision 1 %+v\n revision 2 %+v", id, j1, j2)
		}
	}
}

// 100,000 leases falling due at once (a coordinator restarting after an
// outage) take ceil(100,000 / MaxFiredPerInput) ticks of at most
// MaxFiredPerInput+1 decisions each.
func TestManyDueAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 leases")
	}
	const n = 100_000
	f := &folder{t: t, p: projector.New()}
	f.step(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision2, LeaseKey: propLeaseKey})
	for i := range n {
		f.step(0, events.RoleWorker, "w1", fmt.Sprintf("j%d", i), events.Input{Verb: events.VerbAcquire, LeaseMS: 1000})
	}
	f.max, f.all = 0, nil
	ticks := 0
	for {
		f.step(2e9, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
		ticks++
		if !f.p.Due() {
			break
		}
	}
	if want := (n + events.MaxFiredPerInput - 1) / events.MaxFiredPerInput; ticks != want {
		t.Fatalf("%d ticks, want %d", ticks, want)
	}
	if f.max != events.MaxFiredPerInput+1 {
		t.Fatalf("most decisions of one tick: %d, want %d", f.max, events.MaxFiredPerInput+1)
	}
	if got := len(f.all) - ticks; got != n {
		t.Fatalf("%d expiries, want %d", got, n)
	}
}

// Revision 3 with a retention: every lease that expires is retired once its
// retention passes, each exactly once, within the bound of one input
// (events.MaxDecisionsPerInput, reached exactly by a batch renew of due
// leases whose retirement their expiry makes due), and the projection ends
// empty: its memory is bounded by the jobs not yet retired.
func TestRetentionBound(t *testing.T) {
	const n = 3000
	f := &folder{t: t, p: projector.New()}
	f.step(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision3, LeaseKey: propLeaseKey})
	pol := events.DefaultPolicy()
	pol.Retain = 1e6 // 1 ms
	f.step(0, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbPolicy, Policy: pol})
	ids := make([]string, n)
	for i := range ids {
		ds := f.step(0, events.RoleWorker, "w1", fmt.Sprintf("job-%07d", i), events.Input{Verb: events.VerbAcquire, LeaseMS: 10_000})
		ids[i] = ds[len(ds)-1].Job.LeaseID
	}
	if f.p.Len() != n {
		t.Fatalf("%d jobs, want %d", f.p.Len(), n)
	}
	var batch []events.LeaseRef
	for i := n - events.MaxBatch; i < n; i++ {
		batch = append(batch, events.LeaseRef{Job: fmt.Sprintf("job-%07d", i), LeaseID: ids[i], Generation: 1, RenewSeq: 1})
	}
	ds := f.step(20*1e9, events.RoleWorker, "w1", events.NoJob, events.Input{Verb: events.VerbRenew, Leases: batch})
	if want := events.MaxFiredPerInput + 3*events.MaxBatch; len(ds) != want { // revision 3's bound
		t.Fatalf("the batch renew caused %d decisions, want exactly %d", len(ds), want)
	}
	for _, d := range ds {
		if !d.Kind.Derived() && (d.Kind != events.KindLostAuthority || d.Reason != events.ReasonNoSuchJob) {
			t.Fatalf("renew of a lease retired first: %s/%s, want lost_authority/no_such_job", d.Kind, d.Reason)
		}
	}
	for ticks := 0; f.p.Due(); ticks++ {
		f.step(20*1e9, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
		if ticks > n {
			t.Fatal("deadlines stay due")
		}
	}
	expired, retired := map[string]int{}, map[string]int{}
	for _, d := range f.all {
		switch d.Kind {
		case events.KindExpired:
			expired[d.Job.ID]++
		case events.KindRetired:
			retired[d.Job.ID]++
			if d.Job.State != events.StateExpired || d.At < d.Job.EndedAt+pol.Retain {
				t.Fatalf("retired %s at %d in state %s, ended %d", d.Job.ID, d.At, d.Job.State, d.Job.EndedAt)
			}
		}
	}
	if len(expired) != n || len(retired) != n {
		t.Fatalf("%d jobs expired and %d retired, want %d each", len(expired), len(retired), n)
	}
	for id, c := range retired {
		if c != 1 || expired[id] != 1 {
			t.Fatalf("job %s expired %d and retired %d times", id, expired[id], c)
		}
	}
	if f.p.Len() != 0 || f.max > events.MaxDecisionsPerInput {
		t.Fatalf("%d jobs left, most decisions of one input %d", f.p.Len(), f.max)
	}
	if _, ok := f.p.NextDeadline(); ok {
		t.Fatal("a deadline left with no job")
	}
}

// Revision 4 reaches events.MaxDecisionsPerInput exactly: a batch renew
// stored when 400 queue offers' ACK deadlines and the expiries of the 256
// leases it names are all due. Firing stops at the ACK deadline whose three
// decisions (ack_missed, requeued, the worker's announcement withdrawn)
// cross 1,024; each renewed lease's job then expires, ends DEAD (a budget
// of one), is retired (a retention of 1 ms) and the renewal finds no job;
// and the jobs requeued by the missed ACKs fill another worker's 256 free
// slots.
func TestQueueDecisionsBound(t *testing.T) {
	f := &folder{t: t, p: projector.New(), discard: true}
	f.step(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision4, LeaseKey: propLeaseKey})
	pol := events.DefaultPolicy()
	pol.Retain = 1e6
	f.step(0, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbPolicy, Policy: pol})
	for i := range 400 {
		f.step(0, events.RoleOps, "d1", fmt.Sprintf("a-%03d", i), events.Input{Verb: events.VerbSubmit, Queue: "q", AckTimeoutMS: 2000})
		ds := f.step(0, events.RoleWorker, fmt.Sprintf("wa-%03d", i), events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q", Slots: 1, TTLMS: events.MaxCapacityTTL})
		if len(ds) != 2 || ds[1].Kind != events.KindAssigned {
			t.Fatalf("pull %d: %d decisions", i, len(ds))
		}
	}
	for i := range events.MaxBatch {
		f.step(0, events.RoleOps, "d1", fmt.Sprintf("b-%03d", i), events.Input{Verb: events.VerbSubmit, Queue: "q", MaxAttempts: 1, LeaseMS: 5000, AckTimeoutMS: 60000})
	}
	ds := f.step(0, events.RoleWorker, "wb", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q", Slots: events.MaxSlots, TTLMS: events.MaxCapacityTTL})
	if len(ds) != 1+events.MaxBatch {
		t.Fatalf("wb's pull: %d decisions", len(ds))
	}
	var batch []events.LeaseRef
	for _, d := range slices.Clone(ds[1:]) {
		if v := f.step(0, events.RoleWorker, "wb", d.Job.ID, events.Input{Verb: events.VerbAck, LeaseID: d.Job.LeaseID, Generation: 1}); v[0].Kind != events.KindAcked {
			t.Fatalf("ack %s: %s", d.Job.ID, v[0].Kind)
		}
		batch = append(batch, events.LeaseRef{Job: d.Job.ID, LeaseID: d.Job.LeaseID, Generation: 1, RenewSeq: 1})
	}
	if ds := f.step(0, events.RoleWorker, "big", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q", Slots: events.MaxSlots, TTLMS: events.MaxCapacityTTL}); len(ds) != 1 {
		t.Fatalf("big's pull: %d decisions", len(ds))
	}
	ds = f.step(20e9, events.RoleWorker, "wb", events.NoJob, events.Input{Verb: events.VerbRenew, Leases: batch})
	if len(ds) != events.MaxDecisionsPerInput {
		t.Fatalf("the batch renew caused %d decisions, want exactly %d", len(ds), events.MaxDecisionsPerInput)
	}
	count := map[events.Kind]int{}
	for _, d := range ds {
		count[d.Kind]++
	}
	const fired = (events.MaxFiredPerInput + 2) / 3
	want := map[events.Kind]int{
		events.KindAckMissed: fired, events.KindRequeued: fired, events.KindWithdrawn: fired,
		events.KindExpired: events.MaxBatch, events.KindDead: events.MaxBatch, events.KindRetired: events.MaxBatch,
		events.KindLostAuthority: events.MaxBatch, events.KindAssigned: events.MaxOffersPerInput,
	}
	if !maps.Equal(count, want) {
		t.Fatalf("decisions by kind %v, want %v", count, want)
	}
	// The rest is carried to the next inputs, bounded too.
	for ticks := 0; f.p.Due(); ticks++ {
		if ds := f.step(20e9, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick}); len(ds) > events.MaxDecisionsPerInput {
			t.Fatalf("a tick caused %d decisions", len(ds))
		}
		if ticks > 100 {
			t.Fatal("stays due")
		}
	}
}

// A worker announcing capacity on ever new queue names (any worker may)
// takes memory only while its announcements stand: once they expire, the
// next input sweeps them, and nothing of them is left.
func TestPullsOnManyQueuesAreSwept(t *testing.T) {
	f := &folder{t: t, p: projector.New(), discard: true}
	f.step(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision4, LeaseKey: propLeaseKey})
	const n = 100_000
	for i := range n {
		f.step(0, events.RoleWorker, "w-evil", events.NoJob, events.Input{Verb: events.VerbPull, Queue: fmt.Sprintf("q%06d", i), Slots: events.MaxSlots, TTLMS: 1000})
	}
	if got := projector.QueueCount(f.p); got != n {
		t.Fatalf("%d queues indexed while the announcements stand, want %d", got, n)
	}
	// The same announcement again and again takes no more memory than one
	// (its expiry moves on when it is swept).
	for range 1000 {
		f.step(0, events.RoleWorker, "w-evil", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q000000", Slots: 1, TTLMS: 1000})
	}
	if got := projector.CapacityEntries(f.p); got != n {
		t.Fatalf("%d expiries held for %d announcements", got, n)
	}
	f.step(2e9, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
	if q, e := projector.QueueCount(f.p), projector.CapacityEntries(f.p); q != 0 || e != 0 {
		t.Fatalf("after the announcements expired: %d queues and %d expiries left", q, e)
	}
	if got := len(f.p.Snapshot()); got > 200 {
		t.Fatalf("a snapshot of %d bytes with nothing in it", got)
	}
}

// Revision 6 (fair firing): with 10,000 leases due at once, a worker's
// input stored among the ticks that fire them causes only its own verdict
// (and its own job's expiry), never a share of the others' expiries; the
// ticks fire every one, each exactly once. Under revision 5 the same
// worker input fires events.MaxFiredPerInput of them before its verdict.
func TestFairFiring(t *testing.T) {
	const n = 10_000
	for _, rev := range []uint32{events.Revision5, events.Revision6} {
		t.Run(fmt.Sprintf("rev%d", rev), func(t *testing.T) {
			f := &folder{t: t, p: projector.New()}
			f.step(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: rev, LeaseKey: propLeaseKey})
			for i := range n {
				f.step(0, events.RoleWorker, "w1", fmt.Sprintf("j%d", i), events.Input{Verb: events.VerbAcquire, LeaseMS: 1000})
			}
			ds := f.step(0, events.RoleWorker, "w2", "h", events.Input{Verb: events.VerbAcquire, LeaseMS: 60_000})
			lease := ds[len(ds)-1].Job.LeaseID
			f.all = nil
			expired := map[string]int{}
			worst := 0
			for i := uint64(1); f.p.Due() || i == 1; i++ {
				f.step(2e9, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
				// A renewal of w2's own lease between every two ticks.
				ds := f.step(2e9, events.RoleWorker, "w2", "h", events.Input{Verb: events.VerbRenew, LeaseID: lease, Generation: 1, RenewSeq: i})
				worst = max(worst, len(ds))
				if v := ds[len(ds)-1]; v.Kind != events.KindRenewed {
					t.Fatalf("renewal %d: %s/%s", i, v.Kind, v.Reason)
				}
			}
			for _, d := range f.all {
				if d.Kind == events.KindExpired {
					expired[d.Job.ID]++
				}
			}
			for id, k := range expired {
				if k != 1 {
					t.Fatalf("%s expired %d times", id, k)
				}
			}
			if len(expired) != n {
				t.Fatalf("%d of %d leases expired", len(expired), n)
			}
			switch {
			case rev >= events.Revision6 && worst != 1:
				t.Errorf("revision %d: a renewal caused %d decisions, want its verdict alone", rev, worst)
			case rev < events.Revision6 && worst != events.MaxFiredPerInput+1:
				t.Errorf("revision %d: a renewal caused at most %d decisions, want %d", rev, worst, events.MaxFiredPerInput+1)
			}
		})
	}
}
