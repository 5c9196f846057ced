package coordinator_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/hostile"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

func inSubject(role, actor, job, verb string) string {
	return events.InputPrefix + "." + role + "." + actor + "." + job + "." + verb
}

// TestHostileInputs publishes a catalogue of malformed and hostile inputs,
// raw, to the input stream of a running coordinator, with valid traffic
// between every two of them, and checks that each gets exactly one precise,
// non-accepted verdict, that none changes any state it should not, that the
// valid traffic is all accepted, and that the coordinator neither stops nor
// restarts.
func TestHostileInputs(t *testing.T) {
	started := time.Now()
	srv, _, js := newServer(t)
	// A leadership lifetime of 5 s, not the helpers' 600 ms: the test
	// asserts that the coordinator never resynchronises, and on two loaded
	// cores a renewal of 600 ms may miss (sessions 3 after the setup, with
	// no hostile input yet); a hostile input that made it resynchronise
	// still would.
	r := startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) { c.LeaderTTL = 5 * time.Second })
	testutil.WaitFor(t, 10*time.Second, "the coordinator to go live", func() bool { return r.c.Stats().Live })
	ctx := context.Background()

	pub := func(subject string, body []byte) uint64 {
		t.Helper()
		ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: body})
		if err != nil {
			t.Fatalf("publish %q (%d bytes): %v", subject, len(body), err)
		}
		return ack.Sequence
	}
	// Setup: the real jobs the protocol-misuse cases aim at, and the jobs
	// of the valid traffic. Each must be accepted.
	const leaseMS = 600000 // ten minutes: nothing expires during the test
	accept := func(subject, body string, want events.Kind) events.Decision {
		t.Helper()
		seq := pub(subject, []byte(body))
		v := verdict(decisionsFor(t, js, seq))
		if v.Kind != want {
			t.Fatalf("setup %s %s: %s/%s, want %s", subject, body, v.Kind, v.Reason, want)
		}
		return v
	}
	w1 := func(job, verb string) string { return inSubject("worker", "w-1", job, verb) }
	acquire := fmt.Sprintf(`{"v":1,"lease_ms":%d}`, leaseMS)
	var fx hostile.Fixtures
	fx.Active = accept(w1("fx-active", "acquire"), acquire, events.KindGranted).Job.LeaseID
	fx.Old = accept(w1("fx-gen2", "acquire"), acquire, events.KindGranted).Job.LeaseID
	accept(w1("fx-gen2", "release"), fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":1}`, fx.Old), events.KindReleased)
	fx.New = accept(w1("fx-gen2", "acquire"), acquire, events.KindGranted).Job.LeaseID
	fx.Done = accept(w1("fx-done", "acquire"), acquire, events.KindGranted).Job.LeaseID
	accept(w1("fx-done", "result"), fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":1,"outcome":"SUCCESS"}`, fx.Done), events.KindCompleted)
	fx.Offer = accept(inSubject("ops", "disp", "fx-offer", "offer"),
		fmt.Sprintf(`{"v":1,"holder":"w-3","lease_ms":%d,"ack_timeout_ms":%d}`, leaseMS, leaseMS), events.KindOffered).Job.LeaseID
	fx.Victim = accept(w1("fx-victim", "acquire"), acquire, events.KindGranted).Job.LeaseID
	// fx-queued: a queue job no worker has announced capacity for (rules
	// revision 4): it stays QUEUED.
	accept(inSubject("ops", "disp", "fx-queued", "submit"), `{"v":1,"queue":"fx-q","payload":"p"}`, events.KindSubmitted)
	fixtureJobs := []string{"fx-active", "fx-gen2", "fx-done", "fx-offer", "fx-victim", "fx-queued"}
	const trafficJobs = 8
	trLease := make([]string, trafficJobs)
	trSeq := make([]uint64, trafficJobs)
	for i := range trafficJobs {
		trLease[i] = accept(w1(fmt.Sprintf("tr-%d", i), "acquire"), acquire, events.KindGranted).Job.LeaseID
	}
	waitCaughtUp(t, js, r)
	if st := r.c.Stats(); !st.Live || st.Sessions != 1 {
		t.Fatalf("after setup: live %v, sessions %d", st.Live, st.Sessions)
	}
	before := latestProjections(t, decodeAll(t, readStream(t, js, "TENURE_OUT")))

	// The catalogue.
	cases := hostile.Cases()
	names := make(map[string]bool)
	for _, c := range cases {
		key := c.Cat + "/" + c.Name
		if names[key] {
			t.Fatalf("case %s twice", key)
		}
		names[key] = true
		if c.Kind.Accepted() || c.Kind.Derived() || !c.Reason.Known() {
			t.Fatalf("case %s expects %s/%s: not a non-accepted verdict with a known reason", key, c.Kind, c.Reason)
		}
	}
	if len(cases) < 85 {
		t.Fatalf("only %d cases", len(cases))
	}

	// Publish it all at once, with valid traffic between every two cases: a
	// fresh job acquired, and a traffic job renewed.
	type validInput struct {
		job  string
		kind events.Kind
	}
	valid := make(map[uint64]validInput)
	caseSeq := make([]uint64, len(cases))
	bySeq := make(map[uint64]int)
	renewTraffic := func(i int) {
		job := fmt.Sprintf("tr-%d", i%trafficJobs)
		trSeq[i%trafficJobs]++
		seq := pub(w1(job, "renew"), fmt.Appendf(nil, `{"v":1,"lease_id":%q,"generation":1,"renew_seq":%d}`, trLease[i%trafficJobs], trSeq[i%trafficJobs]))
		valid[seq] = validInput{job, events.KindRenewed}
	}
	for i, c := range cases {
		job := fmt.Sprintf("acq-%03d", i)
		valid[pub(w1(job, "acquire"), []byte(acquire))] = validInput{job, events.KindGranted}
		renewTraffic(i)
		caseSeq[i] = pub(c.Subject, fx.Expand(c.Body))
		bySeq[caseSeq[i]] = i
	}
	for i := range trafficJobs { // every traffic job still renews after it all
		renewTraffic(i)
	}
	published := time.Since(started)
	waitCaughtUp(t, js, r)

	// One read of the decision stream, grouped by cause.
	all := decodeAll(t, readStream(t, js, "TENURE_OUT"))
	byCause := make(map[uint64][]events.Decision)
	for _, d := range all {
		byCause[d.Cause] = append(byCause[d.Cause], d)
	}
	// Walk the decisions in order, following every job's projection: each
	// case's verdict must carry its job's previous projection, changed only
	// as the case allows; each valid input must be accepted.
	proj := make(map[string]events.Job)
	prevOf := func(id string) events.Job {
		if j, ok := proj[id]; ok {
			return j
		}
		return events.Job{ID: id}
	}
	lastValid := make(map[string]events.Job)
	byReason := make(map[events.Reason]int)
	failed := 0
	for _, d := range all {
		if d.Job.ID == events.NoJob {
			continue
		}
		prev := prevOf(d.Job.ID)
		// Need to know (rules revision 5): no verdict of a hostile case
		// tells its sender a lease id or payload of a lease it does not
		// hold; the fields withheld are those of the projection before.
		if _, isCase := bySeq[d.Cause]; isCase && d.Role != events.RoleOps && d.Role != events.RoleCoord &&
			d.Job.Exists() && d.Addressee != d.Job.Holder && (d.Job.LeaseID != "" || d.Job.HasPayload) {
			t.Errorf("decision %d/%d of input %d (%s/%s of job %s) tells %s the lease id or payload of %s's lease",
				d.N, d.Of, d.Cause, d.Kind, d.Reason, d.Job.ID, d.Addressee, d.Job.Holder)
		}
		if !d.Job.Reveal(&prev) {
			t.Errorf("decision %d/%d of input %d: job %s withheld, not revealed by the projection before", d.N, d.Of, d.Cause, d.Job.ID)
		}
		proj[d.Job.ID] = d.Job
		if d.Kind.Derived() {
			t.Errorf("decision %d/%d of input %d: unexpected %s/%s of job %s", d.N, d.Of, d.Cause, d.Kind, d.Reason, d.Job.ID)
			continue
		}
		if v, ok := valid[d.Cause]; ok {
			if v.kind == events.KindGranted {
				if want := (events.Job{ID: d.Job.ID}); !sameJob(prev, want) {
					t.Errorf("valid acquire of %s: the job existed before: %s", v.job, events.AppendJob(nil, &prev))
				}
			}
			lastValid[d.Job.ID] = d.Job
			continue
		}
		i, ok := bySeq[d.Cause]
		if !ok {
			continue // setup
		}
		c := cases[i]
		if d.Job.ID != c.Job {
			continue // reported below: filed under the wrong job
		}
		want := prev
		if c.Change != nil {
			c.Change(&want)
		}
		if !sameJob(d.Job, want) {
			failed++
			t.Errorf("case %s/%s (input %d) changed job %s:\n before %s\n after  %s\n want   %s", c.Cat, c.Name, d.Cause, c.Job,
				events.AppendJob(nil, &prev), events.AppendJob(nil, &d.Job), events.AppendJob(nil, &want))
		}
	}
	for seq, v := range valid {
		ds := byCause[seq]
		if len(ds) != 1 || ds[0].Kind != v.kind || ds[0].Reason != events.ReasonOk || ds[0].Job.ID != v.job {
			t.Errorf("valid input %d on %s: %s, want exactly one %s/ok", seq, v.job, describeDecisions(ds), v.kind)
		}
	}
	for i, c := range cases {
		seq := caseSeq[i]
		ds := byCause[seq]
		var verdicts []events.Decision
		for _, d := range ds {
			if !d.Kind.Derived() {
				verdicts = append(verdicts, d)
			}
		}
		bug := ""
		if c.Bug != "" {
			bug = " [KNOWN BUG: " + c.Bug + "]"
		}
		switch {
		case len(ds) == 0:
			t.Errorf("case %s/%s (input %d): no decision at all: silently dropped%s", c.Cat, c.Name, seq, bug)
		case int(ds[0].Of) != len(ds):
			t.Errorf("case %s/%s (input %d): %d of %d decisions stored%s", c.Cat, c.Name, seq, len(ds), ds[0].Of, bug)
		case len(verdicts) != 1:
			t.Errorf("case %s/%s (input %d): %d verdicts (%s), want exactly one%s", c.Cat, c.Name, seq, len(verdicts), describeDecisions(ds), bug)
		case verdicts[0].Kind != c.Kind || verdicts[0].Reason != c.Reason:
			t.Errorf("case %s/%s (input %d): %s (detail %q), want %s/%s%s", c.Cat, c.Name, seq,
				describeDecisions(verdicts), verdicts[0].Detail, c.Kind, c.Reason, bug)
		case verdicts[0].Job.ID != c.Job:
			t.Errorf("case %s/%s (input %d): verdict filed under job %q, want %q%s", c.Cat, c.Name, seq, verdicts[0].Job.ID, c.Job, bug)
		default:
			byReason[c.Reason]++
			continue
		}
		failed++
	}

	// Before and after: the fixtures changed only by the counters the
	// misuse cases legitimately bumped; every traffic job is exactly as its
	// last accepted input left it.
	after := proj
	for _, id := range fixtureJobs {
		want := before[id]
		for _, c := range cases {
			if c.Job == id && c.Change != nil {
				c.Change(&want)
			}
		}
		if got := after[id]; !sameJob(got, want) {
			t.Errorf("fixture %s:\n before %s\n after  %s\n want   %s", id,
				events.AppendJob(nil, ptr(before[id])), events.AppendJob(nil, &got), events.AppendJob(nil, &want))
		}
	}
	for id, last := range lastValid {
		if got := after[id]; !sameJob(got, last) {
			t.Errorf("traffic job %s changed after its last valid input:\n valid %s\n now   %s", id,
				events.AppendJob(nil, &last), events.AppendJob(nil, &got))
		}
	}
	// An independent fold of the stored inputs holds exactly the jobs of
	// the setup and the valid traffic, as the decisions describe them: no
	// hostile input created a job.
	p := projector.New()
	for _, m := range readStream(t, js, "TENURE_IN") {
		if _, err := p.Step(events.Raw{Seq: m.seq, Time: m.time, Subject: m.subject, Body: m.data}); err != nil {
			t.Fatal(err)
		}
	}
	wantJobs := len(fixtureJobs) + trafficJobs + len(cases)
	if p.Len() != wantJobs {
		t.Errorf("the fold holds %d jobs, want %d (fixtures, traffic, acquired)", p.Len(), wantJobs)
	}
	for _, id := range slices.Sorted(maps.Keys(after)) {
		j, ok := p.Job(id)
		real := after[id].Exists()
		switch {
		case ok != real:
			t.Errorf("job %s: in the fold %v, exists in the decisions %v", id, ok, real)
		case ok && !sameJob(j, after[id]):
			t.Errorf("job %s: fold %s, decisions %s", id, events.AppendJob(nil, &j), events.AppendJob(nil, ptr(after[id])))
		}
	}

	// The coordinator is still the same live session.
	st := r.c.Stats()
	if !st.Live || st.Sessions != 1 || st.LostAuthority != 0 {
		t.Errorf("coordinator after the catalogue: live %v, sessions %d (want 1), lost authority %d", st.Live, st.Sessions, st.LostAuthority)
	}
	select {
	case err := <-r.done:
		t.Errorf("coordinator Run returned: %v", err)
		r.done <- err
	default:
	}
	checkChain(t, js)

	reasons := slices.Sorted(maps.Keys(byReason))
	var sb strings.Builder
	for _, rs := range reasons {
		fmt.Fprintf(&sb, " %s=%d", rs, byReason[rs])
	}
	fmt.Printf("TestHostileInputs: %d cases, %d as expected, %d failed, %d valid inputs interleaved (published in %v, total %v); by reason:%s\n",
		len(cases), len(cases)-failed, failed, len(valid), published.Round(time.Millisecond), time.Since(started).Round(time.Millisecond), sb.String())
}

func ptr[T any](v T) *T { return &v }

// sameJob compares projections by their canonical encoding.
func sameJob(a, b events.Job) bool {
	return bytes.Equal(events.AppendJob(nil, &a), events.AppendJob(nil, &b))
}

func decodeAll(t testing.TB, ms []msg) []events.Decision {
	t.Helper()
	out := make([]events.Decision, 0, len(ms))
	for _, m := range ms {
		d, err := events.DecodeDecision(m.data)
		if err != nil {
			t.Fatalf("decision %d: %v", m.seq, err)
		}
		out = append(out, d)
	}
	return out
}

// latestProjections is every job's projection in its latest decision.
func latestProjections(t testing.TB, ds []events.Decision) map[string]events.Job {
	t.Helper()
	out := make(map[string]events.Job)
	for _, d := range projector.LatestByJob(ds) {
		out[d.Job.ID] = d.Job
	}
	return out
}

func describeDecisions(ds []events.Decision) string {
	if len(ds) == 0 {
		return "none"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.Kind.String() + "/" + string(d.Reason) + " on " + d.Job.ID
	}
	return strings.Join(parts, ", ")
}
