package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

// fold is a projector with a clock, for folding inputs by subject and body.
type fold struct {
	t   *testing.T
	p   *projector.Projector
	seq uint64
	now int64
}

func newFold(t *testing.T) *fold {
	f := &fold{t: t, p: projector.New(), now: testutil.ScenarioBase}
	rules := events.Input{Verb: events.VerbRules, Revision: events.CurrentRevision}
	rules.LeaseKey[3] = 9
	f.step("tenure.in.coord.c1._.rules", string(events.AppendInputBody(nil, &rules)))
	f.step("tenure.in.coord.c1._.policy", string(defaultPolicy))
	return f
}

// step stores an input 1 ms after the previous one and returns a copy of
// its decisions.
func (f *fold) step(subject, body string) []events.Decision {
	f.t.Helper()
	f.seq++
	f.now += int64(time.Millisecond)
	ds, err := f.p.Step(events.Raw{Seq: f.seq, Time: f.now, Subject: subject, Body: []byte(body)})
	if err != nil {
		f.t.Fatal(err)
	}
	return append([]events.Decision(nil), ds...)
}

// accept folds an input that must be accepted and returns its verdict.
func (f *fold) accept(subject, body string) events.Decision {
	f.t.Helper()
	ds := f.step(subject, body)
	if len(ds) != 1 || !ds[0].Kind.Accepted() {
		f.t.Fatalf("%s %s: %v", subject, body, ds)
	}
	return ds[0]
}

// Every case of the catalogue gets from the fold, whatever the job it
// names (a live lease acquired or offered, a completed one, a job at its
// second generation, none), the one verdict it claims, if it claims one;
// none is accepted and none changes the lease, evidence counters aside.
func TestCatalogueVerdicts(t *testing.T) {
	f := newFold(t)
	const lease = `{"v":1,"lease_ms":600000}`
	f.accept("tenure.in.worker.w1.active.acquire", lease)
	done := f.accept("tenure.in.worker.w1.done.acquire", lease).Job
	f.accept("tenure.in.worker.w1.done.result", fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":1,"outcome":"SUCCESS"}`, done.LeaseID))
	f.accept("tenure.in.ops.disp.offered.offer", `{"v":1,"holder":"w1","lease_ms":600000,"ack_timeout_ms":600000}`)
	g1 := f.accept("tenure.in.worker.w2.gen2.acquire", lease).Job
	f.accept("tenure.in.worker.w2.gen2.release", fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":1}`, g1.LeaseID))
	f.accept("tenure.in.worker.w2.gen2.acquire", lease)

	cases := catalogue()
	names := make(map[string]bool)
	refused := 0
	for _, c := range cases {
		name := c.Cat + "/" + c.Name
		if names[name] {
			t.Errorf("case %s twice", name)
		}
		names[name] = true
		if c.Refused {
			refused++
			if strings.HasPrefix(c.Subject, "tenure.in.worker.$SELF.") {
				t.Errorf("case %s: the server lets a worker publish on its own subjects", name)
			}
			continue
		}
		if !strings.HasPrefix(c.Subject, "tenure.in.worker.$SELF.") {
			t.Errorf("case %s: %s is not the worker's own subject: the server refuses it", name, c.Subject)
		}
		if c.Kind.Accepted() || c.Kind == 0 && c.Reason != "" {
			t.Errorf("case %s claims %s/%s", name, c.Kind, c.Reason)
		}
		for _, job := range []string{"active", "done", "offered", "gen2", "nothing"} {
			guess := fmt.Sprintf("L%d-AAAAAAAAAAAAAAAAAAAAAA", f.seq)
			subject := c.expand(c.Subject, "h1", job, "w1", "c1", guess)
			body := c.expand(c.Body, "h1", job, "w1", "c1", guess)
			switch {
			case c.Pad > 0:
				body += strings.Repeat(" ", c.Pad-len(body))
			case c.Pad < 0:
				body += strings.Repeat(" ", 69632-100-len(body))
			}
			before, _ := f.p.Job(job)
			var verdicts []events.Decision
			for _, d := range f.step(subject, body) {
				if !d.Kind.Derived() {
					verdicts = append(verdicts, d)
				}
			}
			if c.Kind != 0 && (len(verdicts) != 1 || verdicts[0].Kind != c.Kind || verdicts[0].Reason != c.Reason) {
				t.Errorf("case %s on job %s: %s, want %s/%s", name, job, describe(verdicts), c.Kind, c.Reason)
			}
			for _, d := range verdicts {
				if d.Kind.Accepted() {
					t.Errorf("case %s on job %s: accepted: %s", name, job, describe(verdicts))
				}
			}
			if after, _ := f.p.Job(job); !sameLease(before, after) {
				t.Errorf("case %s changed job %s:\n before %s\n after  %s", name, job, events.AppendJob(nil, &before), events.AppendJob(nil, &after))
			}
		}
	}
	t.Logf("%d cases (%d refused by the server), each on 5 jobs", len(cases), refused)
	if len(cases) < 60 || refused < 5 {
		t.Errorf("%d cases, %d of them refused by the server: not much of a catalogue", len(cases), refused)
	}
}

func describe(ds []events.Decision) string {
	if len(ds) == 0 {
		return "no verdict"
	}
	var parts []string
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%s/%s", d.Kind, d.Reason))
	}
	return strings.Join(parts, ", ")
}
