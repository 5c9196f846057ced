package projector_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

// TestFoundSurplusAfterShorterAnnouncement is finding 1 of TESTING.md,
// found by the exhaustive check of the lease rules (internal/modelcheck,
// scope ci-queue, depth 4), fixed in rules revision 6.
//
// A worker announces on a queue with a ttl of 3 s and is offered a job;
// it announces again with a ttl of 300 ms (its announcement is not
// lowered: still 1 slot); 350 ms later it declines the offer. The
// announcement's expiry is in the sweep heap at 3 s only (pull moves an
// existing announcement's until without a new heap entry), so a
// projector that never stopped still holds the expired announcement.
// Under revision 5 surplus() read it without looking at its until: the
// decline was a refusal (a strike, a hold, a withdrawn decision) for a
// projector that never stopped, and surplus for one restored from a
// snapshot taken before the decline (a snapshot holds only the
// announcements that stand). From revision 6 on an expired announcement
// counts as withdrawn: both decide surplus. Revision 5 keeps its
// decisions, which a log of it holds (the refusal, as a coordinator that
// never stopped made it).
func TestFoundSurplusAfterShorterAnnouncement(t *testing.T) {
	for _, rev := range []uint32{events.Revision5, events.Revision6} {
		t.Run(fmt.Sprintf("rev%d", rev), func(t *testing.T) { foundSurplus(t, rev) })
	}
}

func foundSurplus(t *testing.T, rev uint32) {
	const ms = int64(1e6)
	base := testutil.ScenarioBase
	pol := events.DefaultPolicy()
	pol.AckTimeout = 400 * ms
	inputs := []events.Input{
		{Role: events.RoleCoord, Actor: "c1", Job: events.NoJob, Verb: events.VerbRules, Revision: rev, LeaseKey: propLeaseKey},
		{Role: events.RoleCoord, Actor: "c1", Job: events.NoJob, Verb: events.VerbPolicy, Policy: pol},
		{Role: events.RoleOps, Actor: "d1", Job: "a", Verb: events.VerbSubmit, Queue: "q"},
		{Role: events.RoleWorker, Actor: "w1", Job: events.NoJob, Verb: events.VerbPull, Queue: "q", Slots: 1, TTLMS: 3000},
		{Role: events.RoleWorker, Actor: "w1", Job: events.NoJob, Verb: events.VerbPull, Queue: "q", Slots: 1, TTLMS: 300},
	}
	raw := func(seq uint64, at int64, in *events.Input) events.Raw {
		return events.Raw{Seq: seq, Time: at, Subject: events.InputSubject(in.Role, in.Actor, in.Job, in.Verb), Body: events.AppendInputBody(nil, in)}
	}
	p := projector.New()
	for i := range inputs {
		if _, err := p.Step(raw(uint64(i+1), base, &inputs[i])); err != nil {
			t.Fatal(err)
		}
	}
	j, ok := p.Job("a")
	if !ok || j.State != events.StateOffered || j.Holder != "w1" {
		t.Fatalf("job a is not offered to w1: %+v", j)
	}
	restored := projector.New()
	if err := restored.Restore(p.Snapshot()); err != nil {
		t.Fatal(err)
	}
	decline := events.Input{Role: events.RoleWorker, Actor: "w1", Job: "a", Verb: events.VerbRelease, LeaseID: j.LeaseID, Generation: j.Generation}
	in := raw(6, base+350*ms, &decline)

	encode := func(ds []events.Decision) ([]byte, string, bool) {
		var b []byte
		s := ""
		refusal := false
		for i := range ds {
			b = events.AppendDecision(b, &ds[i])
			s += "    " + projector.Describe(&ds[i], base) + "\n"
			refusal = refusal || ds[i].Kind == events.KindWithdrawn
		}
		return b, s, refusal
	}
	ds, err := p.Step(in)
	if err != nil {
		t.Fatal(err)
	}
	got, gotText, refused := encode(ds)
	if rev < events.Revision6 {
		// Revision 5's decisions stay what they were (a refusal).
		if !refused {
			t.Errorf("revision %d: the decline is no refusal any more for a projector that never stopped:\n%s", rev, gotText)
		}
		return
	}
	ds, err = restored.Step(in)
	if err != nil {
		t.Fatal(err)
	}
	want, wantText, _ := encode(ds)
	if !bytes.Equal(got, want) || p.StateHash() != restored.StateHash() {
		t.Errorf("the decline of an offer after a shorter announcement expired is decided one way by a projector "+
			"that never stopped:\n%sand another by one restored from a snapshot of the same state:\n%s"+
			"(TESTING.md, finding 1: surplus() reads an expired announcement that a snapshot does not hold)", gotText, wantText)
	}
	if refused {
		t.Errorf("revision %d: the decline after the announcement expired is a refusal:\n%s", rev, gotText)
	}
}
