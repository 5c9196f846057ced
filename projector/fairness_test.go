package projector_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"pgregory.net/rapid"
)

// hostileMode is how the hostile announcer of TestQueueFairness treats
// what it is offered.
type hostileMode int

const (
	declineAll   hostileMode = iota // release every offer
	releaseAll                      // ACK, then release
	neverAck                        // let every offer's ACK deadline pass
	ackExpire                       // ACK, then never renew: the lease expires
	lowerDecline                    // lower its announcement, then decline (surplus)
	hostileModes
)

func (m hostileMode) String() string {
	return [...]string{"decline-all", "release-all", "never-ack", "ack-then-expire", "lower-then-decline"}[m]
}

// TestQueueFairness drives one queue (rules revision 5) with a hostile
// announcer of 256 slots in one of the modes above and honest announcers
// that ACK what they are offered and complete it, with jobs submitted at
// random times, and checks PROTOCOL.md §22.8:
//
//   - no job ends DEAD or FAILED: nobody but the hostile misbehaves, and
//     its refusals end no job (an expiry spends one attempt, and the job
//     then goes to an honest worker);
//   - an honest announcer is never left waiting: after every input (and
//     the ticks the fold asks for), no honest worker that is eligible
//     (announcement standing, not held, fewer of the queue's leases than
//     its slots and window) has a ready job it is allowed that it was not
//     offered: it gets one in the same input's matching;
//   - the hostile never holds more of the queue's live leases than its
//     window, which each refusal halves;
//   - once the hostile stops, every job ends COMPLETED, exactly once.
func TestQueueFairness(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mode := hostileMode(rapid.IntRange(0, int(hostileModes)-1).Draw(t, "mode"))
		honest := []string{"h1", "h2"}[:rapid.IntRange(1, 2).Draw(t, "honest")]
		const hostile, queue = "x", "q"
		f := newFairRig(t)
		f.honest = honest
		pol := events.DefaultPolicy()
		pol.AckTimeout, pol.DefaultLease, pol.MinLease = 300*ms, 600*ms, 100*ms
		pol.MaxGenerations = 1 // would end a queue job under revision 4 at its second offer
		f.step(events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbPolicy, Policy: pol})
		announce := func(w string, slots uint64) {
			f.step(events.RoleWorker, w, events.NoJob, events.Input{Verb: events.VerbPull, Queue: queue, Slots: slots, TTLMS: 60000})
		}
		for _, w := range append(slices.Clone(honest), hostile) {
			slots := uint64(2)
			if w == hostile {
				slots = 256
			}
			announce(w, slots)
		}
		submitted := 0
		jobs := rapid.IntRange(1, 40).Draw(t, "jobs")
		for range rapid.IntRange(0, jobs).Draw(t, "burst") { // a backlog from the start
			f.step(events.RoleOps, "d1", fmt.Sprintf("j%02d", submitted), events.Input{Verb: events.VerbSubmit, Queue: queue, MaxAttempts: 2})
			submitted++
		}
		steps := rapid.IntRange(10, 80).Draw(t, "steps")
		for i := 0; i < steps || submitted < jobs; i++ {
			// Gaps below the ACK timeout: an honest worker answers every
			// offer in time (leases, holds and the hostile's ACK deadlines
			// pass over several steps).
			f.now += rapid.SampledFrom([]int64{0, 1, 50, 120, 250}).Draw(t, "gap") * ms
			if submitted < jobs && rapid.IntRange(0, 2).Draw(t, "submit") == 0 {
				f.step(events.RoleOps, "d1", fmt.Sprintf("j%02d", submitted), events.Input{Verb: events.VerbSubmit, Queue: queue, MaxAttempts: 2})
				submitted++
			}
			// Honest workers ACK and complete what they hold, and announce
			// again when withdrawn (their standing may hold them).
			for _, w := range honest {
				f.honestRound(w, queue)
			}
			f.hostileRound(hostile, queue, mode)
			f.tickWhileDue()
			f.check(honest, hostile, queue)
		}
		// The hostile leaves; the honest workers finish everything.
		announce(hostile, 0)
		for i := 0; i < 400 && !f.allDone(); i++ {
			f.now += 250 * ms
			for _, w := range honest {
				f.honestRound(w, queue)
			}
			f.tickWhileDue()
			f.check(honest, hostile, queue)
		}
		for id, n := range f.completed {
			if n != 1 {
				t.Fatalf("job %s completed %d times", id, n)
			}
		}
		if !f.allDone() || len(f.completed) != submitted {
			t.Fatalf("%d of %d jobs completed (mode %s)", len(f.completed), submitted, mode)
		}
	})
}

// fairRig folds inputs for TestQueueFairness and follows, from the
// decisions alone, what a worker can know: the standing announcements,
// the standings, and the live leases of each worker.
type fairRig struct {
	t         *rapid.T
	p         *projector.Projector
	seq       uint64
	now       int64
	caps      map[string]events.Capacity // by worker
	standings map[string]events.Standing // by worker
	leases    map[string]events.Job      // live leases by job, as the decisions tell
	completed map[string]int
	all       []string // job ids, in submit order
	honest    []string
}

func newFairRig(t *rapid.T) *fairRig {
	f := &fairRig{t: t, p: projector.New(), now: testutil.ScenarioBase, caps: map[string]events.Capacity{},
		standings: map[string]events.Standing{}, leases: map[string]events.Job{}, completed: map[string]int{}}
	f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision5, LeaseKey: propLeaseKey})
	return f
}

func (f *fairRig) step(role events.Role, actor, job string, in events.Input) []events.Decision {
	in.Role, in.Actor, in.Job = role, actor, job
	f.seq++
	raw := events.Raw{Seq: f.seq, Time: f.now, Subject: events.InputSubject(role, actor, job, in.Verb), Body: events.AppendInputBody(nil, &in)}
	ds, err := f.p.Step(raw)
	if err != nil {
		f.t.Fatalf("step %d: %v", raw.Seq, err)
	}
	for i := range ds {
		d := &ds[i]
		if d.Standing != nil {
			f.standings[d.Addressee] = *d.Standing
		}
		if d.Capacity != nil {
			if d.Capacity.Slots == 0 {
				delete(f.caps, d.Addressee)
			} else {
				f.caps[d.Addressee] = *d.Capacity
			}
		}
		j := d.Job
		if j.ID == events.NoJob || !j.Exists() {
			continue
		}
		if d.Kind == events.KindSubmitted {
			f.all = append(f.all, j.ID)
		}
		if !d.Kind.Derived() && !d.Kind.Accepted() && slices.Contains(f.honest, d.Actor) && d.Role == events.RoleWorker {
			f.t.Fatalf("%s: an honest worker's input refused", describeAll([]events.Decision{*d}))
		}
		if d.Kind == events.KindDead || j.State == events.StateFailed {
			f.t.Fatalf("%s: a job ended DEAD or FAILED", describeAll([]events.Decision{*d}))
		}
		if d.Kind == events.KindCompleted && j.Result == events.OutcomeSuccess {
			f.completed[j.ID]++
		}
		if d.Kind == events.KindAssigned {
			v := j.Holder
			if st := f.standingOf(v); uint64(f.held(v)) >= st.Window || st.HeldUntil > f.now {
				f.t.Fatalf("%s: offered to %s holding %d with standing %+v", describeAll([]events.Decision{*d}), v, f.held(v), st)
			}
			// Every offer goes to an eligible worker holding the fewest
			// of the queue's leases: never past an honest one holding
			// fewer (honest workers refuse nothing, so every job is
			// allowed for them).
			for _, w := range f.honest {
				if w != v && f.eligible(w) && f.held(w) < f.held(v) {
					f.t.Fatalf("%s: offered to %s holding %d while %s, eligible, holds %d", describeAll([]events.Decision{*d}), v, f.held(v), w, f.held(w))
				}
			}
		}
		if j.State.Live() {
			f.leases[j.ID] = j
		} else {
			delete(f.leases, j.ID)
		}
	}
	return slices.Clone(ds)
}

func (f *fairRig) standingOf(w string) events.Standing {
	if st, ok := f.standings[w]; ok {
		return st
	}
	return events.Standing{Window: events.InitialWindow}
}

// eligible reports whether w may be offered a job of the queue now.
func (f *fairRig) eligible(w string) bool {
	c, ok := f.caps[w]
	st := f.standingOf(w)
	return ok && c.Until > f.now && st.HeldUntil <= f.now && uint64(f.held(w)) < min(c.Slots, st.Window)
}

func (f *fairRig) held(w string) int {
	n := 0
	for _, j := range f.leases {
		if j.Holder == w {
			n++
		}
	}
	return n
}

// mine returns w's live leases, in job order.
func (f *fairRig) mine(w string) []events.Job {
	var out []events.Job
	for _, id := range f.all {
		if j, ok := f.leases[id]; ok && j.Holder == w {
			out = append(out, j)
		}
	}
	return out
}

func (f *fairRig) tickWhileDue() {
	for n := 0; f.p.Due(); n++ {
		if n > 1000 {
			f.t.Fatal("stays due")
		}
		f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
	}
	// A deadline passed without input: the coordinator ticks at it.
	if d, ok := f.p.NextDeadline(); ok && d <= f.now {
		f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
	}
}

func (f *fairRig) honestRound(w, queue string) {
	for _, j := range f.mine(w) {
		if j.State == events.StateOffered {
			f.step(events.RoleWorker, w, j.ID, events.Input{Verb: events.VerbAck, LeaseID: j.LeaseID, Generation: j.Generation})
			continue
		}
		// A job takes a while: renewed (in time: every round is shorter
		// than the lease) until it completes.
		if rapid.IntRange(0, 3).Draw(f.t, "done") != 0 {
			f.step(events.RoleWorker, w, events.NoJob, events.Input{Verb: events.VerbRenew, Leases: []events.LeaseRef{{Job: j.ID, LeaseID: j.LeaseID, Generation: j.Generation, RenewSeq: j.RenewSeq + 1}}})
			continue
		}
		f.step(events.RoleWorker, w, j.ID, events.Input{Verb: events.VerbResult, LeaseID: j.LeaseID, Generation: j.Generation, Outcome: events.OutcomeSuccess})
	}
	if c, ok := f.caps[w]; !ok || c.Until <= f.now+20000*ms {
		f.step(events.RoleWorker, w, events.NoJob, events.Input{Verb: events.VerbPull, Queue: queue, Slots: 2, TTLMS: 60000})
	}
}

func (f *fairRig) hostileRound(w, queue string, mode hostileMode) {
	mine := f.mine(w)
	if mode == lowerDecline && len(mine) > 0 {
		f.step(events.RoleWorker, w, events.NoJob, events.Input{Verb: events.VerbPull, Queue: queue, Slots: 0})
	}
	for _, j := range mine {
		switch {
		case mode == declineAll && j.State == events.StateOffered, mode == lowerDecline && j.State == events.StateOffered:
			f.step(events.RoleWorker, w, j.ID, events.Input{Verb: events.VerbRelease, LeaseID: j.LeaseID, Generation: j.Generation})
		case (mode == releaseAll || mode == ackExpire) && j.State == events.StateOffered:
			f.step(events.RoleWorker, w, j.ID, events.Input{Verb: events.VerbAck, LeaseID: j.LeaseID, Generation: j.Generation})
		case mode == releaseAll && j.State == events.StateActive:
			f.step(events.RoleWorker, w, j.ID, events.Input{Verb: events.VerbRelease, LeaseID: j.LeaseID, Generation: j.Generation})
		}
	}
	if _, ok := f.caps[w]; !ok {
		f.step(events.RoleWorker, w, events.NoJob, events.Input{Verb: events.VerbPull, Queue: queue, Slots: 256, TTLMS: 60000})
	}
}

// check fails if an honest worker is eligible and a ready job it is
// allowed was not offered to it.
func (f *fairRig) check(honest []string, hostile, queue string) {
	for _, w := range honest {
		if !f.eligible(w) {
			continue
		}
		others := false
		for o, oc := range f.caps {
			if o != w && oc.Until > f.now {
				others = true
			}
		}
		for _, id := range f.all {
			j, ok := f.p.Job(id)
			if !ok || j.State != events.StateQueued || j.Conflict || j.ReadyAt > f.now {
				continue
			}
			refused := j.Holder == w && (j.LastReason == events.ReasonOfferDeclined || j.LastReason == events.ReasonReleased ||
				j.LastReason == events.ReasonAckDeadlinePassed || j.LastReason == events.ReasonLeaseExpired)
			if refused && others {
				continue
			}
			f.t.Fatalf("honest %s is eligible (holds %d, announcement %+v, standing %+v) and job %s is ready, but it was not offered it", w, f.held(w), f.caps[w], f.standingOf(w), id)
		}
	}
	_ = hostile
	_ = queue
}

func (f *fairRig) allDone() bool {
	for _, id := range f.all {
		if j, ok := f.p.Job(id); !ok || j.State != events.StateCompleted {
			return false
		}
	}
	return true
}
