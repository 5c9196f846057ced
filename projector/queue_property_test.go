package projector_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"pgregory.net/rapid"
)

// TestQueueProperties drives queues (revision 4) with random schedules:
// dispatchers submitting (and resubmitting) jobs to two queues, workers
// announcing capacity, ACKing, failing, releasing, expiring, sending stale
// and late messages about earlier attempts, operators cancelling, revoking,
// retrying and discarding, and the policy's retention and max_generations
// changing. After every input it checks the invariants of PROTOCOL.md §22:
//
//   - no job is offered while a lease of it is live, and no worker holds
//     more of a queue's live leases than its standing announcement allows
//     at the moment it is offered one;
//   - a job's counted attempts never exceed its budget, and offers that
//     are never ACKed do not count: no job goes DEAD by missed ACKs;
//   - every submitted job is QUEUED, OFFERED, ACTIVE, COMPLETED, FAILED,
//     DEAD, CANCELLED or UNRESOLVED, never lost: it stays in the
//     projection until a retired decision says it left;
//   - matching is complete: after an input, no queue has a ready job and a
//     free slot unless the projector reports it Due (its offer limit);
//   - no input causes more than events.MaxDecisionsPerInput decisions, and
//     each has exactly one verdict (a batch renew one per lease): all its
//     other decisions are derived (PROTOCOL.md §15);
//
// and at the end that a replay with a snapshot and restore every few
// inputs gives the same decisions byte for byte, and that the state hash
// rebuilt from the decisions alone (RebuildHash, as the audit does) is the
// fold's.
func TestQueueProperties(t *testing.T) {
	for _, c := range []struct {
		name        string
		fire, offer int
	}{{"limits", 0, 0}, {"fire1-offer1", 1, 1}} {
		t.Run(c.name, func(t *testing.T) { queueProperties(t, c.fire, c.offer) })
	}
}

type qlease struct {
	job, lease string
	gen        uint64
}

func queueProperties(t *testing.T, fireLimit, offerLimit int) {
	jobs := []string{"j0", "j1", "j2", "j3", "j4", "j5"}
	queues := []string{"q1", "q2"}
	workers := []string{"w1", "w2", "w3"}
	rapid.Check(t, func(t *rapid.T) {
		p := projector.New()
		if fireLimit > 0 {
			projector.SetFireLimit(p, fireLimit)
		}
		if offerLimit > 0 {
			projector.SetOfferLimit(p, offerLimit)
		}
		var raws []events.Raw
		var encoded [][]byte
		var all []events.Decision
		now := testutil.ScenarioBase
		step := func(role events.Role, actor, job string, in events.Input) []events.Decision {
			in.Role, in.Actor, in.Job = role, actor, job
			raw := events.Raw{Seq: uint64(len(raws) + 1), Time: now, Subject: events.InputSubject(role, actor, job, in.Verb), Body: events.AppendInputBody(nil, &in)}
			raws = append(raws, raw)
			ds, err := p.Step(raw)
			if err != nil {
				t.Fatalf("step %d: %v", raw.Seq, err)
			}
			if len(ds) > events.MaxDecisionsPerInput {
				t.Fatalf("input %d caused %d decisions", raw.Seq, len(ds))
			}
			verdicts, want := 0, 1
			if in.Verb == events.VerbRenew {
				want = len(in.Leases)
			}
			for i := range ds {
				if !ds[i].Kind.Derived() {
					verdicts++
				}
			}
			if verdicts != want { // PROTOCOL.md §15: every other decision is derived
				t.Fatalf("input %d has %d verdicts, want %d:\n%s", raw.Seq, verdicts, want, describeAll(ds))
			}
			for i := range ds {
				encoded = append(encoded, events.AppendDecision(nil, &ds[i]))
			}
			all = append(all, ds...)
			return slices.Clone(ds) // Step reuses its slice
		}
		step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision4, LeaseKey: propLeaseKey})
		pol := events.DefaultPolicy()
		pol.AckTimeout, pol.DefaultLease, pol.MinLease, pol.CancelTimeout = 300*ms, 600*ms, 100*ms, 500*ms
		step(events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbPolicy, Policy: pol})

		var seen []qlease           // every lease offered: workers message current and old ones
		exists := map[string]bool{} // jobs in the projection, decision by decision
		present := map[string]bool{}
		type cap struct {
			slots uint64
			until int64
		}
		caps := map[[2]string]cap{} // (queue, worker) -> announcement
		steps := rapid.IntRange(1, 120).Draw(t, "steps")
		for range steps {
			now += rapid.SampledFrom([]int64{0, 0, 1, 50, 200, 400, 900, 2500}).Draw(t, "gap") * ms
			before := map[string]events.Job{}
			for _, id := range jobs {
				if j, ok := p.Job(id); ok {
					before[id] = j
				}
			}
			var ds []events.Decision
			lease := func() qlease {
				if len(seen) == 0 {
					return qlease{job: rapid.SampledFrom(jobs).Draw(t, "job"), lease: "L1-x", gen: 1}
				}
				return seen[rapid.IntRange(0, len(seen)-1).Draw(t, "lease")]
			}
			worker := rapid.SampledFrom(workers).Draw(t, "worker")
			switch rapid.IntRange(0, 13).Draw(t, "op") {
			case 0, 1:
				in := events.Input{Verb: events.VerbSubmit, Queue: rapid.SampledFrom(queues).Draw(t, "queue"),
					Priority: int64(rapid.IntRange(0, 2).Draw(t, "prio")), MaxAttempts: uint64(rapid.IntRange(0, 3).Draw(t, "attempts")),
					BackoffMS: int64(rapid.SampledFrom([]int{0, 1, 100}).Draw(t, "backoff")), BackoffMax: 200}
				ds = step(events.RoleOps, rapid.SampledFrom([]string{"d1", "d2"}).Draw(t, "submitter"), rapid.SampledFrom(jobs).Draw(t, "job"), in)
			case 2, 3:
				in := events.Input{Verb: events.VerbPull, Queue: rapid.SampledFrom(queues).Draw(t, "queue"),
					Slots: uint64(rapid.IntRange(0, 3).Draw(t, "slots")), TTLMS: int64(rapid.SampledFrom([]int{500, 3000}).Draw(t, "ttl"))}
				ds = step(events.RoleWorker, worker, events.NoJob, in)
			case 4, 5:
				l := lease()
				ds = step(events.RoleWorker, worker, l.job, events.Input{Verb: events.VerbAck, LeaseID: l.lease, Generation: l.gen})
			case 6:
				l := lease()
				ds = step(events.RoleWorker, worker, events.NoJob, events.Input{Verb: events.VerbRenew,
					Leases: []events.LeaseRef{{Job: l.job, LeaseID: l.lease, Generation: l.gen, RenewSeq: uint64(rapid.IntRange(1, 3).Draw(t, "rs"))}}})
			case 7, 8:
				l := lease()
				out := rapid.SampledFrom([]events.Outcome{events.OutcomeSuccess, events.OutcomeFailed, events.OutcomeFailed, events.OutcomeCancelled}).Draw(t, "outcome")
				in := events.Input{Verb: events.VerbResult, LeaseID: l.lease, Generation: l.gen, Outcome: out}
				in.Permanent = out == events.OutcomeFailed && rapid.IntRange(0, 3).Draw(t, "permanent") == 0
				ds = step(events.RoleWorker, worker, l.job, in)
			case 9:
				l := lease()
				ds = step(events.RoleWorker, worker, l.job, events.Input{Verb: events.VerbRelease, LeaseID: l.lease, Generation: l.gen})
			case 10:
				ds = step(events.RoleOps, "admin", rapid.SampledFrom(jobs).Draw(t, "job"), events.Input{Verb: events.VerbCancel})
			case 11:
				act := rapid.SampledFrom([]events.Action{events.ActionRetry, events.ActionDiscard, events.ActionRevoke}).Draw(t, "action")
				ds = step(events.RoleOps, "admin", rapid.SampledFrom(jobs).Draw(t, "job"), events.Input{Verb: events.VerbResolve, Action: act})
			case 12:
				pol.Retain = rapid.SampledFrom([]int64{0, 0, 1000 * ms}).Draw(t, "retain")
				pol.MaxGenerations = uint64(rapid.SampledFrom([]int{2, 1000}).Draw(t, "maxgen"))
				ds = step(events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbPolicy, Policy: pol})
			default:
				ds = step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
			}
			for len(ds) > 0 && p.Due() { // the coordinator ticks while something is due
				ds = append(ds, step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})...)
				if len(raws) > 10_000 {
					t.Fatal("stays due")
				}
			}

			// The invariants, decision by decision.
			live := map[string]events.Job{}
			for id, j := range before {
				if j.State.Live() {
					live[id] = j
				}
			}
			held := map[[2]string]int{}
			for _, j := range before {
				if j.State.Live() && j.Queue != "" {
					held[[2]string{j.Queue, j.Holder}]++
				}
			}
			for _, d := range ds {
				j := d.Job
				if d.Kind == events.KindCapacitySet || d.Kind == events.KindWithdrawn {
					if d.Capacity.Slots == 0 {
						delete(caps, [2]string{d.Capacity.Queue, d.Addressee})
					} else {
						caps[[2]string{d.Capacity.Queue, d.Addressee}] = cap{d.Capacity.Slots, d.Capacity.Until}
					}
				}
				if j.ID == events.NoJob {
					continue
				}
				// Every decision about a job that exists carries its
				// projection (RebuildHash and the audit rely on it).
				if !j.Exists() && exists[j.ID] {
					t.Fatalf("%s: a decision about the existing job %s without its projection", describeAll([]events.Decision{d}), j.ID)
				}
				exists[j.ID] = j.Exists() && d.Kind != events.KindRetired
				if d.Kind == events.KindDead && d.Reason == events.ReasonAckDeadlinePassed {
					t.Fatalf("%s: offers never ACKed sent a job DEAD", describeAll([]events.Decision{d}))
				}
				if j.Queue != "" && j.Attempt > j.MaxAttempts {
					t.Fatalf("%s: attempt %d of a budget of %d", describeAll([]events.Decision{d}), j.Attempt, j.MaxAttempts)
				}
				if prev, ok := live[j.ID]; ok && prev.Queue != "" && (!j.State.Live() || j.Generation != prev.Generation) {
					held[[2]string{prev.Queue, prev.Holder}]--
				}
				if d.Kind == events.KindOffered || d.Kind == events.KindAssigned {
					if prev, ok := live[j.ID]; ok && prev.Generation != j.Generation && prev.State.Live() {
						t.Fatalf("%s offered while generation %d is live; the input:\n%s", describeAll([]events.Decision{d}), prev.Generation, describeAll(ds))
					}
					if d.Kind == events.KindAssigned {
						k := [2]string{j.Queue, j.Holder}
						c, ok := caps[k]
						if !ok || c.until <= d.At || uint64(held[k]) >= c.slots {
							t.Fatalf("%s: offered to %s holding %d with announcement %+v (standing %v)", describeAll([]events.Decision{d}), j.Holder, held[k], c, ok)
						}
						held[k]++
					}
					seen = append(seen, qlease{job: j.ID, lease: j.LeaseID, gen: j.Generation})
				}
				if j.State.Live() {
					live[j.ID] = j
				} else {
					delete(live, j.ID)
				}
				switch {
				case d.Kind == events.KindRetired:
					delete(present, j.ID)
				case d.Kind == events.KindSubmitted:
					present[j.ID] = true
				}
			}
			for id := range present {
				j, ok := p.Job(id)
				if !ok {
					t.Fatalf("submitted job %s lost from the projection without a retired decision", id)
				}
				switch j.State {
				case events.StateQueued, events.StateOffered, events.StateActive, events.StateCompleted, events.StateFailed,
					events.StateDead, events.StateCancelled, events.StateUnresolved:
				default:
					t.Fatalf("queue job %s in state %s", id, j.State)
				}
			}
			// Snapshots off the fold (Freeze) are the fold's Snapshot.
			if rapid.IntRange(0, 4).Draw(t, "freeze") == 0 {
				got, err := p.Freeze().Encode()
				if err != nil {
					t.Fatalf("freeze: %v", err)
				}
				if string(got) != string(p.Snapshot()) {
					t.Fatalf("after input %d the frozen snapshot differs from Snapshot", len(raws))
				}
			}
			if !p.Due() && projector.Matchable(p) {
				t.Fatalf("after input %d a queue has a ready job and a free slot, and nothing is due", len(raws))
			}
		}

		// Replay with a snapshot and restore every few inputs.
		every := rapid.IntRange(1, 7).Draw(t, "restore every")
		q := projector.New()
		var got [][]byte
		for i, raw := range raws {
			if i%every == 0 {
				r := projector.New()
				if err := r.Restore(q.Snapshot()); err != nil {
					t.Fatalf("restore before %d: %v", raw.Seq, err)
				}
				q = r
			}
			if fireLimit > 0 {
				projector.SetFireLimit(q, fireLimit)
			}
			if offerLimit > 0 {
				projector.SetOfferLimit(q, offerLimit)
			}
			ds, err := q.Step(raw)
			if err != nil {
				t.Fatal(err)
			}
			for j := range ds {
				got = append(got, events.AppendDecision(nil, &ds[j]))
			}
		}
		if len(got) != len(encoded) {
			t.Fatalf("replay with restores: %d decisions, want %d", len(got), len(encoded))
		}
		for i := range got {
			if string(got[i]) != string(encoded[i]) {
				t.Fatalf("replay with restores differs at decision %d:\n got  %s\n want %s", i, got[i], encoded[i])
			}
		}
		if q.StateHash() != p.StateHash() {
			t.Fatal("state hash differs after the replay with restores")
		}

		// The state the decisions describe is the fold's.
		latest := map[string]events.Job{}
		latestCaps := map[[2]string]projector.Capacity{}
		var policy *events.Policy
		for i := range all {
			d := &all[i]
			switch {
			case d.Kind == events.KindRetired:
				latest[d.Job.ID] = events.Job{ID: d.Job.ID}
			case d.Job.ID != events.NoJob && d.Job.Exists():
				latest[d.Job.ID] = d.Job
			case d.Kind == events.KindCapacitySet || d.Kind == events.KindWithdrawn:
				latestCaps[[2]string{d.Capacity.Queue, d.Addressee}] = projector.Capacity{Worker: d.Addressee, Capacity: *d.Capacity, Seq: d.Cause}
			case d.Kind == events.KindPolicySet:
				policy = d.Policy
			}
		}
		last := all[len(all)-1]
		rules := p.Rules()
		h, err := projector.RebuildHash(nil, last.Cause, last.At, policy, &rules, maps.Values(latest), maps.Values(latestCaps))
		if err != nil {
			t.Fatal(err)
		}
		if h != p.StateHash() {
			ids := slices.Sorted(maps.Keys(latest))
			t.Fatalf("the state rebuilt from the decisions differs from the fold's (jobs %v)", fmt.Sprint(ids))
		}
	})
}
