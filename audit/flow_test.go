package audit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

// flowLog folds a log of inputs (each at its offset from
// testutil.ScenarioBase) and returns every decision.
type flowLog struct {
	t   *testing.T
	p   *projector.Projector
	seq uint64
	all []events.Decision
}

func newFlowLog(t *testing.T) *flowLog {
	l := &flowLog{t: t, p: projector.New()}
	l.in(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision8})
	return l
}

func (l *flowLog) in(at time.Duration, role events.Role, actor, job string, in events.Input) []events.Decision {
	l.t.Helper()
	in.Role, in.Actor, in.Job = role, actor, job
	l.seq++
	ds, err := l.p.Step(events.Raw{Seq: l.seq, Time: testutil.ScenarioBase + int64(at),
		Subject: events.InputSubject(role, actor, job, in.Verb), Body: events.AppendInputBody(nil, &in)})
	if err != nil {
		l.t.Fatal(err)
	}
	l.all = append(l.all, ds...)
	return ds
}

func (l *flowLog) tick(at time.Duration) []events.Decision {
	return l.in(at, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
}

func flowOf(ds []events.Decision) audit.Flow {
	t := audit.NewFlowTracker(-1)
	for i := range ds {
		t.Observe(&ds[i])
	}
	return t.Result()
}

// TestFlowScheduled: the audit counts scheduled jobs and their offers, and
// finds an offer stored before its time (a decision the fold did not make:
// here one whose time was moved back).
func TestFlowScheduled(t *testing.T) {
	l := newFlowLog(t)
	l.in(0, events.RoleOps, "d1", "a", events.Input{Verb: events.VerbSubmit, Queue: "q", RunAt: testutil.ScenarioBase + int64(10*time.Second)})
	l.in(0, events.RoleOps, "d1", "b", events.Input{Verb: events.VerbSubmit, Queue: "q", DelayMS: 5000})
	l.in(0, events.RoleOps, "d1", "c", events.Input{Verb: events.VerbSubmit, Queue: "q"})
	l.in(time.Second, events.RoleWorker, "w1", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q", Slots: 8, TTLMS: 600000})
	l.tick(5 * time.Second)
	l.tick(10 * time.Second)
	f := flowOf(l.all)
	if f.Scheduled != 2 || f.Offers != 2 || f.Findings.Count != 0 {
		t.Fatalf("clean log: %+v", f)
	}
	// Move the offer of b back before its delay passed.
	forged := append([]events.Decision(nil), l.all...)
	n := 0
	for i := range forged {
		if d := &forged[i]; d.Kind == events.KindAssigned && d.Job.ID != "c" {
			d.At -= int64(2 * time.Second)
			n++
		}
	}
	f = flowOf(forged)
	if n != 2 || f.Findings.Count != 2 || f.Findings.Items[0].Problem != audit.FlowOfferedEarly ||
		!strings.Contains(f.Findings.Items[0].Detail, "before its") {
		t.Fatalf("forged offers: %d, %+v", n, f)
	}
}

// TestFlowUnique: the audit counts unique keys and the duplicates
// refused, and finds a second holder of a key (a submitted decision the
// fold would have refused) and a refusal naming a job that did not hold
// the key.
func TestFlowUnique(t *testing.T) {
	l := newFlowLog(t)
	sub := func(at time.Duration, job, key string) []events.Decision {
		return l.in(at, events.RoleOps, "d1", job, events.Input{Verb: events.VerbSubmit, Queue: "q", UniqueKey: key, MaxAttempts: 1})
	}
	sub(0, "a", "k")
	ds := sub(0, "b", "k")
	if len(ds) != 1 || ds[0].Reason != events.ReasonDuplicateUniqueKey || ds[0].DuplicateOf != "a" {
		t.Fatalf("b: %+v", ds)
	}
	l.in(time.Second, events.RoleOps, "d1", "a", events.Input{Verb: events.VerbCancel})
	sub(2*time.Second, "b", "k")
	f := flowOf(l.all)
	if f.UniqueKeys != 1 || f.Duplicates != 1 || f.MaxHolders != 1 || f.Findings.Count != 0 {
		t.Fatalf("clean log: %+v", f)
	}
	// Forged: b's refusal names a job that never held the key, and b's
	// submit is stored before a's cancel (a still QUEUED, holding it).
	var forged []events.Decision
	for _, d := range l.all {
		switch {
		case d.Reason == events.ReasonDuplicateUniqueKey:
			d.DuplicateOf = "nobody"
		case d.Job.ID == "a" && d.Kind == events.KindCancelRequested:
			continue
		}
		forged = append(forged, d)
	}
	f = flowOf(forged)
	probs := map[audit.FlowProblem]int{}
	for _, x := range f.Findings.Items {
		probs[x.Problem]++
	}
	if probs[audit.FlowUniqueTwice] != 1 || probs[audit.FlowUniqueNotHeld] != 1 || f.MaxHolders != 2 || f.Findings.Count != 2 {
		t.Fatalf("forged: %+v", f)
	}
}

// TestFlowUniqueSeeded: an audit that starts from a snapshot knows the
// holders of unique keys then, so that a refusal after it naming one is
// no finding, and a second holder after it is.
func TestFlowUniqueSeeded(t *testing.T) {
	l := newFlowLog(t)
	l.in(0, events.RoleOps, "d1", "a", events.Input{Verb: events.VerbSubmit, Queue: "q", UniqueKey: "k"})
	snap := l.p.Snapshot()
	before := len(l.all)
	ds := l.in(time.Second, events.RoleOps, "d2", "b", events.Input{Verb: events.VerbSubmit, Queue: "q", UniqueKey: "k"})
	if len(ds) != 1 || ds[0].DuplicateOf != "a" {
		t.Fatalf("b: %+v", ds)
	}
	p := projector.New()
	if err := p.Restore(snap); err != nil {
		t.Fatal(err)
	}
	tr := audit.NewFlowTracker(-1)
	tr.Seed(p)
	for i := range l.all[before:] {
		tr.Observe(&l.all[before+i])
	}
	if f := tr.Result(); f.Findings.Count != 0 || f.Duplicates != 1 {
		t.Fatalf("seeded: %+v", f)
	}
	// The same refusal without the seed names a job the audit never saw
	// hold the key.
	if f := flowOf(l.all[before:]); f.Findings.Count != 1 || f.Findings.Items[0].Problem != audit.FlowUniqueNotHeld {
		t.Fatalf("unseeded: %+v", f)
	}
	// A second holder after the snapshot (a submitted forged from the
	// refusal) is a finding against the seeded holder.
	forged := l.all[before]
	forged.Kind, forged.Reason, forged.DuplicateOf = events.KindSubmitted, events.ReasonOk, ""
	forged.Job = events.Job{ID: "b", State: events.StateQueued, Queue: "q", Submitter: "d2", UniqueKey: "k", MaxAttempts: 3, SubmittedAt: forged.At, ReadyAt: forged.At, SubmitSeq: forged.Cause}
	tr = audit.NewFlowTracker(-1)
	tr.Seed(p)
	tr.Observe(&forged)
	if f := tr.Result(); f.Findings.Count != 1 || f.Findings.Items[0].Problem != audit.FlowUniqueTwice {
		t.Fatalf("seeded, second holder: %+v", f)
	}
}

// The summary's flow section: the scheduled jobs and the unique keys when
// a log used them, and each finding.
func TestWriteSummaryFlow(t *testing.T) {
	l := newFlowLog(t)
	l.in(0, events.RoleOps, "d1", "a", events.Input{Verb: events.VerbSubmit, Queue: "q", UniqueKey: "k", DelayMS: 1000})
	l.in(0, events.RoleOps, "d1", "b", events.Input{Verb: events.VerbSubmit, Queue: "q", UniqueKey: "k"})
	var b strings.Builder
	if err := audit.WriteSummary(&b, &audit.Report{Flow: flowOf(l.all)}, 5); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"flow:        0\n",
		"  scheduled jobs: 1 submitted, 0 offers of them\n",
		"  unique keys: 1 named, 1 submits refused as duplicates, at most 1 holder(s) of a key at once (limit 1)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the summary has no %q:\n%s", want, b.String())
		}
	}
}

// TestFlowConcurrency: the audit follows the limits of concurrency keys
// (revision 9) and the live jobs of each key, reports per key the most
// live just after an offer against the limits, and finds an offer made
// while the key was at its limit (a decision the fold did not make: here
// a job's key renamed to the limited one).
func TestFlowConcurrency(t *testing.T) {
	l := &flowLog{t: t, p: projector.New()}
	l.in(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision9})
	l.in(0, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbLimit, Queue: "q", ConcurrencyKey: "k", MaxActive: 2, HasMaxActive: true})
	for _, id := range []string{"a", "b", "c"} {
		l.in(0, events.RoleOps, "d1", id, events.Input{Verb: events.VerbSubmit, Queue: "q", ConcurrencyKey: "k"})
	}
	l.in(0, events.RoleOps, "d1", "x", events.Input{Verb: events.VerbSubmit, Queue: "q", ConcurrencyKey: "other"})
	ds := l.in(time.Second, events.RoleWorker, "w1", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q", Slots: 8, TTLMS: 600000})
	if len(ds) != 4 { // capacity_set, a, b, x
		t.Fatalf("pull: %d decisions", len(ds))
	}
	// Lowered to 1 while a and b run: nothing is revoked, nothing starts.
	l.in(time.Second, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbLimit, Queue: "q", ConcurrencyKey: "k", MaxActive: 1, HasMaxActive: true})
	a, _ := l.p.Job("a")
	l.in(2*time.Second, events.RoleWorker, "w1", "a", events.Input{Verb: events.VerbAck, LeaseID: a.LeaseID, Generation: 1})
	l.in(2*time.Second, events.RoleWorker, "w1", "a", events.Input{Verb: events.VerbResult, LeaseID: a.LeaseID, Generation: 1, Outcome: events.OutcomeSuccess})
	b, _ := l.p.Job("b")
	l.in(2*time.Second, events.RoleWorker, "w1", "b", events.Input{Verb: events.VerbAck, LeaseID: b.LeaseID, Generation: 1})
	ds = l.in(3*time.Second, events.RoleWorker, "w1", "b", events.Input{Verb: events.VerbResult, LeaseID: b.LeaseID, Generation: 1, Outcome: events.OutcomeFailed, Permanent: true})
	if ds[len(ds)-1].Kind != events.KindAssigned || ds[len(ds)-1].Job.ID != "c" {
		t.Fatalf("the end of b offers c: %s", ds[len(ds)-1].Job.ID)
	}
	f := flowOf(l.all)
	want := audit.FlowKey{Queue: "q", Key: "k", Limited: true, Limit: 1, MaxLimit: 2, Offers: 3, MaxActive: 2, MaxLive: 2}
	if f.Findings.Count != 0 || len(f.Keys) != 1 || f.Keys[0] != want {
		t.Fatalf("clean log: %+v, want the key %+v", f, want)
	}
	var out strings.Builder
	if err := audit.WriteSummary(&out, &audit.Report{Flow: f}, 5); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "concurrency key q/k: 3 offers under a limit, at most 2 live just after one (highest limit 2), at most 2 live at once; now limit 1") {
		t.Fatalf("summary:\n%s", out.String())
	}
	// x's offer, renamed into key k while a and b were live (limit 2).
	forged := append([]events.Decision(nil), l.all...)
	for i := range forged {
		if d := &forged[i]; d.Job.ID == "x" {
			d.Job.ConcurrencyKey = "k"
		}
	}
	// x, live ever after, makes c's offer one over the lowered limit too.
	f = flowOf(forged)
	if f.Findings.Count != 2 || f.Findings.Items[0].Problem != audit.FlowConcurrencyExceeded || f.Findings.Items[0].Job != "x" || f.Findings.Items[1].Job != "c" ||
		!strings.Contains(f.Findings.Items[0].Detail, "offered while 2 jobs of concurrency key k of queue q were live, limit 2") {
		t.Fatalf("forged offer: %+v", f)
	}
}

// TestFlowConcurrencySeeded: an audit that starts from a snapshot takes
// the limits and the live jobs of each key from it: an offer after it,
// while the jobs live then hold the key at its limit, is a finding.
func TestFlowConcurrencySeeded(t *testing.T) {
	l := &flowLog{t: t, p: projector.New()}
	l.in(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision9})
	l.in(0, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbLimit, Queue: "q", ConcurrencyKey: "k", MaxActive: 1, HasMaxActive: true})
	l.in(0, events.RoleOps, "d1", "a", events.Input{Verb: events.VerbSubmit, Queue: "q", ConcurrencyKey: "k"})
	l.in(0, events.RoleOps, "d1", "b", events.Input{Verb: events.VerbSubmit, Queue: "q"})
	l.in(0, events.RoleWorker, "w1", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q", Slots: 1, TTLMS: 600000})
	base := projector.New()
	if err := base.Restore(l.p.Snapshot()); err != nil {
		t.Fatal(err)
	}
	n := len(l.all)
	l.in(time.Second, events.RoleWorker, "w2", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q", Slots: 1, TTLMS: 600000})
	after := append([]events.Decision(nil), l.all[n:]...)
	if len(after) != 2 || after[1].Kind != events.KindAssigned || after[1].Job.ID != "b" {
		t.Fatalf("w2's pull: %+v", after)
	}
	after[1].Job.ConcurrencyKey = "k" // forged: b named k while a held its one place
	tr := audit.NewFlowTracker(-1)
	tr.Seed(base)
	for i := range after {
		tr.Observe(&after[i])
	}
	f := tr.Result()
	if f.Findings.Count != 1 || f.Findings.Items[0].Job != "b" || len(f.Keys) != 1 || f.Keys[0].Limit != 1 || f.Keys[0].MaxLive != 2 {
		t.Fatalf("seeded: %+v", f)
	}
}

// TestFlowRate: the audit recomputes the buckets of the rate limits
// (revision 9) from the limits and the offers, reports per limit its
// starts and the most in one period against what its bucket allows, and
// finds an offer made without a token (a decision the fold did not
// make: here one moved earlier).
func TestFlowRate(t *testing.T) {
	l := &flowLog{t: t, p: projector.New()}
	l.in(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision9})
	l.in(0, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbLimit, Queue: "q", Rate: 2, PeriodMS: 1000})
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		l.in(0, events.RoleOps, "d1", id, events.Input{Verb: events.VerbSubmit, Queue: "q"})
	}
	l.in(0, events.RoleWorker, "w1", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q", Slots: 8, TTLMS: 600000})
	for _, at := range []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond} {
		l.tick(at)
	}
	f := flowOf(l.all)
	want := audit.FlowRate{Queue: "q", Limited: true, Rate: 2, PeriodMS: 1000, Starts: 5, MaxInPeriod: 3, Allowed: 3}
	if f.Findings.Count != 0 || len(f.Rates) != 1 || f.Rates[0] != want {
		t.Fatalf("clean log: %+v, want %+v", f, want)
	}
	var out strings.Builder
	if err := audit.WriteSummary(&out, &audit.Report{Flow: f}, 5); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "rate limit of queue q: 2 per 1000 ms (in force), 5 starts, at most 3 in one period (its bucket allows 3)") {
		t.Fatalf("summary:\n%s", out.String())
	}
	// The offer at 1 s moved to 600 ms: no token then.
	forged := append([]events.Decision(nil), l.all...)
	for i := range forged {
		if d := &forged[i]; d.Kind == events.KindAssigned && d.At == testutil.ScenarioBase+int64(time.Second) {
			d.At -= int64(400 * time.Millisecond)
		}
	}
	f = flowOf(forged)
	if f.Findings.Count == 0 || f.Findings.Items[0].Problem != audit.FlowRateExceeded || f.Findings.Items[0].Job != "d" ||
		!strings.Contains(f.Findings.Items[0].Detail, "no token of the rate limit of queue q (2 per 1000 ms)") {
		t.Fatalf("forged offer: %+v", f)
	}
}
