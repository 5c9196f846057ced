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
