package projector_test

import (
	"fmt"
	"testing"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/leasemodel"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"pgregory.net/rapid"
)

// The property test drives the fold with random schedules of several holders
// (pauses, duplicates, stale generations, reordered delivery: seed 000 §15)
// and checks it against a small reference model and the invariants of the
// seeds. rapid runs at least 1000 cases per `make test` (see TestMain).

const (
	ms = int64(1e6)
)

var (
	propJobs    = []string{"a", "b"}
	propHolders = []string{"w1", "w2", "w3"}
)

// The reference model is internal/leasemodel's (the exhaustive check,
// internal/modelcheck, asks it too): the minimum a reader of the seeds
// needs to say whether an operation may be accepted.

// propLeaseMS is the duration every generated lease asks for (see drawInput).
const propLeaseMS = 1000

// genInput draws the next input. It knows the leases granted so far (as a
// worker would, from decisions), and picks current, old, other holders' or
// made-up lease ids, generations and sequences.
type world struct {
	issued map[string][]issued // job -> leases ever granted, oldest first
	seq    map[string]uint64   // per holder/job sequence counter
}

type issued struct {
	lease  string
	gen    uint64
	holder string
}

func drawInput(t *rapid.T, w *world) events.Input {
	job := rapid.SampledFrom(propJobs).Draw(t, "job")
	holder := rapid.SampledFrom(propHolders).Draw(t, "holder")
	in := events.Input{Role: events.RoleWorker, Actor: holder, Job: job}
	// A claim: usually the latest lease of the job, sometimes an older one,
	// sometimes one made up.
	claim := func() (string, uint64) {
		leases := w.issued[job]
		if len(leases) == 0 || rapid.IntRange(0, 9).Draw(t, "madeup") == 0 {
			return fmt.Sprintf("L%d", rapid.IntRange(1, 40).Draw(t, "lid")), uint64(rapid.IntRange(1, 4).Draw(t, "gen"))
		}
		i := len(leases) - 1
		if rapid.IntRange(0, 3).Draw(t, "old") == 0 {
			i = rapid.IntRange(0, len(leases)-1).Draw(t, "which")
		}
		return leases[i].lease, leases[i].gen
	}
	nextSeq := func() uint64 {
		k := holder + "/" + job
		// Mostly increasing, sometimes repeated or reordered.
		switch rapid.IntRange(0, 5).Draw(t, "seqmode") {
		case 0:
			if w.seq[k] > 0 {
				return w.seq[k] // duplicate
			}
		case 1:
			if w.seq[k] > 1 {
				return uint64(rapid.IntRange(1, int(w.seq[k])-1).Draw(t, "older")) // reordered
			}
		}
		w.seq[k] += uint64(rapid.IntRange(1, 2).Draw(t, "step"))
		return w.seq[k]
	}
	switch rapid.IntRange(0, 11).Draw(t, "verb") {
	case 0:
		in.Role, in.Actor, in.Verb = events.RoleOps, "disp", events.VerbOffer
		in.Holder, in.LeaseMS, in.AckTimeoutMS = holder, propLeaseMS, 500
	case 1:
		in.Verb, in.LeaseMS = events.VerbAcquire, propLeaseMS
	case 2:
		in.Verb = events.VerbAck
		in.LeaseID, in.Generation = claim()
	case 3:
		in.Verb = events.VerbRenew
		lid, gen := claim()
		in.LeaseID, in.Generation, in.RenewSeq = lid, gen, nextSeq()
		in.Leases = []events.LeaseRef{{Job: job, LeaseID: lid, Generation: gen, RenewSeq: in.RenewSeq}}
	case 4:
		// A batch renew of every job this holder names (one input, a verdict each).
		in.Verb, in.Job = events.VerbRenew, events.NoJob
		for _, other := range propJobs {
			job = other
			lid, gen := claim()
			in.Leases = append(in.Leases, events.LeaseRef{Job: other, LeaseID: lid, Generation: gen, RenewSeq: nextSeq()})
		}
	case 5, 6:
		in.Verb = events.VerbProgress
		in.LeaseID, in.Generation = claim()
		in.ProgressSeq = nextSeq()
		in.Value = int64(in.ProgressSeq % 101)
	case 7:
		in.Verb = events.VerbResult
		in.LeaseID, in.Generation = claim()
		in.Outcome = rapid.SampledFrom([]events.Outcome{events.OutcomeSuccess, events.OutcomeFailed, events.OutcomeCancelled}).Draw(t, "outcome")
	case 8:
		in.Verb = events.VerbRelease
		in.LeaseID, in.Generation = claim()
	case 9:
		in.Role, in.Actor, in.Verb = events.RoleOps, "disp", events.VerbCancel
	case 10:
		in.Verb = events.VerbCancelAck
		in.LeaseID, in.Generation = claim()
	case 11:
		in.Role, in.Actor, in.Job, in.Verb = events.RoleCoord, "c1", events.NoJob, events.VerbTick
	}
	return in
}

// propLeaseKey is the lease key of the revision-2 runs.
var propLeaseKey = [events.LeaseKeyLen]byte{1, 2, 3}

// TestFoldProperties runs the property test under each rules revision: the
// reference model fires every due deadline before each input, so under
// revision 2 with a fire limit of 1 (a deadline carried over to later
// inputs, or fired when an input touches its job) every verdict must still
// be the model's.
func TestFoldProperties(t *testing.T) {
	for _, c := range []struct {
		name      string
		rev       uint32
		fireLimit int
	}{
		{"revision1", events.Revision1, 0},
		{"revision2", events.Revision2, 0},
		{"revision2-fire1", events.Revision2, 1},
	} {
		t.Run(c.name, func(t *testing.T) { foldProperties(t, c.rev, c.fireLimit) })
	}
}

func foldProperties(t *testing.T, rev uint32, fireLimit int) {
	rapid.Check(t, func(t *rapid.T) {
		p := projector.New()
		if fireLimit > 0 {
			projector.SetFireLimit(p, fireLimit)
		}
		first := uint64(1)
		if rev >= events.Revision2 {
			in := events.Input{Verb: events.VerbRules, Revision: rev, LeaseKey: propLeaseKey}
			ds, err := p.Step(events.Raw{Seq: 1, Time: testutil.ScenarioBase,
				Subject: events.InputSubject(events.RoleCoord, "c1", events.NoJob, events.VerbRules), Body: events.AppendInputBody(nil, &in)})
			if err != nil || len(ds) != 1 || ds[0].Kind != events.KindRulesSet {
				t.Fatalf("rules input: %v %v", err, describeAll(ds))
			}
			first = 2
		}
		m := leasemodel.New(events.DefaultPolicy())
		w := &world{issued: map[string][]issued{}, seq: map[string]uint64{}}
		now := testutil.ScenarioBase
		// authority: job -> the (holder, gen) with authority and until when.
		type auth struct {
			holder string
			gen    uint64
			until  int64
		}
		authority := map[string]auth{}
		steps := rapid.IntRange(1, 80).Draw(t, "steps")
		for seq := first; seq < first+uint64(steps); seq++ {
			// Time moves by small steps, sometimes by a pause longer than a lease.
			gap := rapid.SampledFrom([]int64{0, 1, 50, 200, 400, 900, 1500, 3000}).Draw(t, "gap")
			now += gap * ms
			in := drawInput(t, w)
			body := events.AppendInputBody(nil, &in)
			raw := events.Raw{Seq: seq, Time: now, Subject: events.InputSubject(in.Role, in.Actor, in.Job, in.Verb), Body: body}

			before := map[string]events.Job{}
			for _, id := range propJobs {
				if j, ok := p.Job(id); ok {
					before[id] = j
				}
			}
			m.Advance(now)
			want := m.Expect(&in)
			ds, err := p.Step(raw)
			if err != nil {
				t.Fatalf("step %d: %v", seq, err)
			}
			var verdicts []events.Decision
			for _, d := range ds {
				if d.Kind.Derived() {
					// Time ended this lease: authority ends at the deadline.
					a := authority[d.Job.ID]
					if a.holder == d.Job.Holder && a.gen == d.Job.Generation && d.Job.EndedAt < a.until {
						a.until = d.Job.EndedAt
						authority[d.Job.ID] = a
					}
					continue
				}
				verdicts = append(verdicts, d)
			}
			// Exactly one verdict per lease operation.
			if len(verdicts) != len(want) {
				t.Fatalf("#%d %s: %d verdicts, want %d: %v", seq, in.Verb, len(verdicts), len(want), describeAll(ds))
			}
			for i, d := range verdicts {
				if d.Kind.Accepted() != want[i] {
					t.Fatalf("#%d %s by %s on %s: fold says %s/%s, model says accepted=%v\n%s",
						seq, in.Verb, in.Actor, d.Job.ID, d.Kind, d.Reason, want[i], describeAll(ds))
				}
				j := d.Job
				if (d.Kind == events.KindOffered || d.Kind == events.KindGranted) && d.Kind.Accepted() {
					w.issued[j.ID] = append(w.issued[j.ID], issued{j.LeaseID, j.Generation, j.Holder})
					m.Issued(j.ID, j.LeaseID)
				}
				// ACK is never completion.
				if d.Kind == events.KindAcked && (j.State != events.StateActive || j.Result != events.OutcomeNone) {
					t.Fatalf("#%d: ACK changed the lease to %s/%s", seq, j.State, j.Result)
				}
				if d.Kind == events.KindCompleted && j.AckState != events.AckAcked && j.AckState != events.AckAcquired {
					t.Fatalf("#%d: completed without ACK (%s)", seq, j.AckState)
				}
				b, had := before[j.ID]
				// Progress never moves backward within a generation.
				if had && b.Generation == j.Generation && j.ProgressSeq < b.ProgressSeq {
					t.Fatalf("#%d: progress moved back from %d to %d", seq, b.ProgressSeq, j.ProgressSeq)
				}
				// Nothing rejected mutates the lease (counters and the conflict mark aside).
				if !d.Kind.Accepted() && had {
					a, c := b, j
					a.Stale, a.Late, a.LateProgress, a.Duplicates, a.Conflicts, a.Conflict, a.ConflictWith = 0, 0, 0, 0, 0, false, ""
					c.Stale, c.Late, c.LateProgress, c.Duplicates, c.Conflicts, c.Conflict, c.ConflictWith = 0, 0, 0, 0, 0, false, ""
					if derivedChanged(ds, j.ID) {
						continue
					}
					if a != c {
						t.Fatalf("#%d: rejected %s (%s) mutated the lease:\nbefore %+v\nafter  %+v", seq, d.Kind, d.Reason, b, j)
					}
				}
				// Authority from accepted decisions: never two holders at once.
				if d.Kind.Accepted() && j.State == events.StateActive && !j.CancelReq {
					prev, ok := authority[j.ID]
					if ok && (prev.holder != j.Holder || prev.gen != j.Generation) && prev.until > d.At {
						t.Fatalf("#%d: %s/g%d gets authority over %s at %d while %s/g%d holds it until %d",
							seq, j.Holder, j.Generation, j.ID, d.At, prev.holder, prev.gen, prev.until)
					}
					authority[j.ID] = auth{j.Holder, j.Generation, j.ExpiresAt}
				}
				if d.Kind.Accepted() && j.State != events.StateActive && j.State != events.StateOffered {
					if a := authority[j.ID]; a.gen == j.Generation && a.until > d.At {
						a.until = d.At
						authority[j.ID] = a
					}
				}
			}
		}
	})
}

// derivedChanged reports whether a time-derived decision in ds concerns job:
// then "before" predates a legitimate change.
func derivedChanged(ds []events.Decision, job string) bool {
	for _, d := range ds {
		if d.Kind.Derived() && d.Job.ID == job {
			return true
		}
	}
	return false
}

func describeAll(ds []events.Decision) string {
	s := ""
	for i := range ds {
		s += projector.Describe(&ds[i], testutil.ScenarioBase) + "\n"
	}
	return s
}
