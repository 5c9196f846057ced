package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

// hostileStory is aStory (rules revision 1, whose lease ids anyone can
// compute) with a hostile worker h1 at work from input 17 on, while w3
// holds j3 (lease L16, 500 ms): claims of other workers' jobs under wrong
// lease ids, a stale claim (counted on j1's lease, changing nothing else),
// bad inputs, and a lease of its own that expires.
func hostileStory(t *testing.T) *story {
	s := aStory(t)
	s.in(10*time.Millisecond, "worker.h1.j3.renew", `{"v":1,"lease_id":"L999","generation":1,"renew_seq":1}`)                       // 17: no_such_lease
	s.in(10*time.Millisecond, "worker.h1.j3.progress", `{"v":1,"lease_id":"L16","generation":2,"progress_seq":1,"value":1}`)        // 18: future_generation
	s.in(10*time.Millisecond, "worker.h1.j1.result", `{"v":1,"lease_id":"L999","generation":1,"outcome":"SUCCESS"}`)                // 19: stale, counted
	s.in(10*time.Millisecond, "worker.h1.j3.offer", `{"v":1,"holder":"h1"}`)                                                        // 20: wrong_role
	s.in(10*time.Millisecond, "worker.h1._.renew", `{"v":1,"leases":[{"job":"j3","lease_id":"L15","generation":1,"renew_seq":1}]}`) // 21: no_such_lease
	s.in(10*time.Millisecond, "worker.h1.h1-own-1.acquire", `{"v":1,"lease_ms":200}`)                                               // 22: L22, its own
	s.in(10*time.Millisecond, "worker.h1.h1-own-1.progress", `{"v":1,"lease_id":"L22","generation":1,"progress_seq":1,"value":5}`)  // 23: its own, accepted
	s.tick(time.Second)                                                                                                             // 24: expires j3 and h1-own-1
	return s
}

// allAttacks are records of every attack type, as the hostile worker
// writes them.
func allAttacks() []AttackRecord {
	var out []AttackRecord
	for _, typ := range AttackTypes {
		r := AttackRecord{Hostile: "h1", Type: typ, Published: 1, Stored: 1}
		if typ == AttackBoard {
			r.Board = &BoardProbe{Boards: 1, Reached: 1, Open: []OpenAnswer{{URL: "http://127.0.0.1:1/metrics", Body: "tenure_active_leases 1\n"}}}
		}
		out = append(out, r)
	}
	return out
}

func hostileClients(s *story, recs ...AttackRecord) *Clients {
	c := s.clients()
	c.Hostile, c.Attacks = []string{"h1"}, append(allAttacks(), recs...)
	return c
}

// finalLine renders the report of one environment checked by r and returns
// its last line.
func finalLine(t *testing.T, r *Result) string {
	t.Helper()
	er := &EnvReport{Name: "single", Hostiles: 1, Attacks: AttackTypes, Final: &Check1{Result: r, Log: &Log{}, AuditErr: errors.New("not run")}}
	er.noteRound(er.Final)
	var b bytes.Buffer
	(&Report{Envs: []*EnvReport{er}, ByKind: map[string]int{}, Faults: map[string]int{}}).write(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	return lines[len(lines)-1]
}

func TestHostileClean(t *testing.T) {
	s := hostileStory(t)
	r := Check(s.log(s.fold()), hostileClients(s, AttackRecord{Hostile: "h1", Type: AttackTickIDs,
		Leases: []OwnLease{{Job: "h1-own-1", LeaseID: "L22", ExpiresAt: storedAt(s, 22) + int64(200*time.Millisecond)}}},
		AttackRecord{Hostile: "h1", Type: AttackFlood, At: storedAt(s, 23), Dur: int64(10 * time.Millisecond)})) // j3's expiry follows it
	wantClean(t, r)
	h := r.Hostile
	if !h.OK() {
		t.Fatalf("findings on a clean log: %q", h.Findings.Items)
	}
	st := h.Stats
	if st.Inputs != 7 || st.OnOthers != 5 || st.Counters["stale"] != 1 || len(st.Counters) != 1 {
		t.Errorf("stats: inputs %d, on others' jobs %d, counters %v", st.Inputs, st.OnOthers, st.Counters)
	}
	if st.Verdicts["lost_authority/no_such_lease"] != 2 || st.Verdicts["granted/ok"] != 1 || st.Verdicts["rejected/wrong_role"] != 1 {
		t.Errorf("verdicts %v", st.Verdicts)
	}
	if st.OwnLeases != 1 || st.OwnExpired != 1 || st.MaxExpiryDelay <= 0 {
		t.Errorf("own leases %d, expired %d, delay %v", st.OwnLeases, st.OwnExpired, st.MaxExpiryDelay)
	}
	if st.OthersExpired != 2 || st.ExpiredNear[AttackFlood] != 1 || len(st.ExpiredNear) != 1 {
		t.Errorf("others' leases expired %d, near attacks %v", st.OthersExpired, st.ExpiredNear)
	}
	if st.ByType[AttackTickIDs].Attacks != 2 || len(st.ByType) != len(AttackTypes) {
		t.Errorf("by type %v", st.ByType)
	}
	if line := finalLine(t, r); !strings.HasSuffix(line, " hostile=ok") {
		t.Errorf("final line %q", line)
	}
	// The same log without a record of every attack type: nothing was
	// achieved, but not everything was tried.
	c := s.clients()
	c.Hostile = []string{"h1"}
	if line := finalLine(t, Check(s.log(s.fold()), c)); !strings.HasSuffix(line, fmt.Sprintf(" hostile=FAIL(%d)", len(AttackTypes))) {
		t.Errorf("final line without attacks %q", line)
	}
}

// The board attack fails the hostile check when a board answered a
// request without a credential, when /healthz or /metrics showed a lease id
// of the log (w3's live L16), or when no request reached a board.
func TestHostileBoard(t *testing.T) {
	s := hostileStory(t)
	ds := s.fold()
	for _, c := range []struct {
		probe *BoardProbe
		want  string
	}{
		{&BoardProbe{Boards: 2, Reached: 10, Answered: []string{"GET http://127.0.0.1:1/api/jobs (no credential): 200"}}, "GET http://127.0.0.1:1/api/jobs (no credential): 200, without a credential"},
		{&BoardProbe{Boards: 2, Reached: 10, Open: []OpenAnswer{{URL: "http://127.0.0.1:1/healthz", Body: `{"job":"j3","lease":"L16"}`}}}, "http://127.0.0.1:1/healthz, open to anyone, shows lease id L16"},
		{&BoardProbe{Boards: 2}, "reached no board"},
		{nil, "recorded no answer"},
	} {
		c2 := hostileClients(s)
		for i := range c2.Attacks {
			if c2.Attacks[i].Type == AttackBoard {
				c2.Attacks[i].Board = c.probe
			}
		}
		r := Check(s.log(ds), c2)
		if r.Hostile.OK() || !slices.ContainsFunc(r.Hostile.Findings.Items, func(f string) bool { return strings.Contains(f, c.want) }) {
			t.Errorf("%+v: findings %q, want one with %q", c.probe, r.Hostile.Findings.Items, c.want)
		}
		if line := finalLine(t, r); !strings.Contains(line, " hostile=FAIL(") {
			t.Errorf("%+v: final line %q", c.probe, line)
		}
	}
}

// storedAt is the stored time of input seq of s.
func storedAt(s *story, seq uint64) int64 { return s.inputs[seq-1].Time }

// A hostile input that takes another worker's lease fails the hostile
// check, and the final line says hostile=FAIL: a claim under the right
// lease id (guessable under rules revision 1) records an ownership conflict
// on w3's live lease, from the fold itself; and decisions tampered into
// accepting h1's claims (a renewal taking the lease over, a result ending
// it).
func TestHostileTookLease(t *testing.T) {
	s := hostileStory(t)
	ds := s.fold()
	// The real fold: h1 names w3's lease L16.
	s2 := aStory(t)
	s2.in(10*time.Millisecond, "worker.h1.j3.renew", `{"v":1,"lease_id":"L16","generation":1,"renew_seq":1}`)
	r := Check(s2.log(s2.fold()), hostileClients(s2))
	if r.Hostile.Findings.Count != 2 || !strings.Contains(r.Hostile.Findings.Items[0], `job j3 frozen in an ownership conflict with h1, "w3"'s lease (generation 1) claimed by it`) ||
		!strings.Contains(r.Hostile.Findings.Items[1], `conflict/ownership_conflict of job j3) caused by h1's input 17`) ||
		!strings.Contains(r.Hostile.Findings.Items[1], `changed "w3"'s lease`) {
		t.Errorf("ownership conflict: %q", r.Hostile.Findings.Items)
	}
	if line := finalLine(t, r); !strings.HasSuffix(line, " hostile=FAIL(2)") {
		t.Errorf("final line %q", line)
	}

	// Tampered: h1's renewal of j3 accepted, h1 the new holder.
	i := find(t, ds, 17, events.KindLostAuthority)
	bad := tamper(t, ds, i, func(d *events.Decision) {
		d.Kind, d.Reason, d.Detail = events.KindRenewed, events.ReasonOk, ""
		d.Job.Holder, d.Job.Generation = "h1", 2
	})
	r = Check(s.log(bad), hostileClients(s))
	if r.Hostile.Findings.Count == 0 || !strings.Contains(r.Hostile.Findings.Items[0], `(renewed/ok of job j3) caused by h1's input 17 on tenure.in.worker.h1.j3.renew: accepted on a job of another actor (holder "w3", generation 1)`) {
		t.Errorf("lease taken: %q", r.Hostile.Findings.Items)
	}
	if line := finalLine(t, r); !strings.Contains(line, " hostile=FAIL(") {
		t.Errorf("final line %q", line)
	}
	// Tampered: h1's claim of w3's lease in a batch renew ends it.
	i = find(t, ds, 21, events.KindLostAuthority)
	bad = tamper(t, ds, i, func(d *events.Decision) {
		d.Kind, d.Reason, d.Detail = events.KindReleased, events.ReasonOk, ""
		d.Job.State, d.Job.EndedAt = events.StateReleased, d.At
	})
	r = Check(s.log(bad), hostileClients(s))
	items := strings.Join(r.Hostile.Findings.Items, "\n")
	if !strings.Contains(items, "accepted on a job of another actor") || !strings.Contains(items, `w3's ACTIVE lease of job j3 (generation 1) ended by input 21 of worker h1`) {
		t.Errorf("lease ended: %q", r.Hostile.Findings.Items)
	}
	// Only counters changed is no finding; a changed expiry is.
	i = find(t, ds, 17, events.KindLostAuthority)
	bad = tamper(t, ds, i, func(d *events.Decision) { d.Job.Late++ })
	if r := Check(s.log(bad), hostileClients(s)); !r.Hostile.OK() || r.Hostile.Stats.Counters["late"] != 1 {
		t.Errorf("counter raised: %q, counters %v", r.Hostile.Findings.Items, r.Hostile.Stats.Counters)
	}
	bad = tamper(t, ds, i, func(d *events.Decision) { d.Job.ExpiresAt += int64(time.Hour) })
	if r := Check(s.log(bad), hostileClients(s)); r.Hostile.Findings.Count == 0 || !strings.Contains(r.Hostile.Findings.Items[0], `changed "w3"'s lease`) {
		t.Errorf("expiry moved: %q", r.Hostile.Findings.Items)
	}
}

// Only its holder, time, a dispatcher or operator ends a lease: not
// another worker, hostile or not.
func TestHostileEndedByStranger(t *testing.T) {
	s := hostileStory(t)
	ds := s.fold()
	// Input 8, w1's stale result on j1 (w2's generation 2), accepted as
	// ending w2's lease.
	i := find(t, ds, 8, events.KindStale)
	bad := tamper(t, ds, i, func(d *events.Decision) {
		d.Kind, d.Reason, d.Detail = events.KindCompleted, events.ReasonOk, ""
		d.Job.State, d.Job.Result, d.Job.EndedAt = events.StateCompleted, events.OutcomeSuccess, d.At
	})
	r := Check(s.log(bad), hostileClients(s))
	if r.Hostile.Findings.Count != 1 || !strings.Contains(r.Hostile.Findings.Items[0], "w2's ACTIVE lease of job j1 (generation 2) ended by input 8 of worker w1") {
		t.Errorf("ended by a stranger: %q", r.Hostile.Findings.Items)
	}
}

// The catalogue's expectations are checked against the stored inputs and
// their verdicts.
func TestHostileExpectations(t *testing.T) {
	s := hostileStory(t)
	s.store("worker.h1.j3.renew", `{"v":1}`, "h1-pending", false) // stored after the last decision: not folded yet
	rec := AttackRecord{Hostile: "h1", Type: AttackBadInput, Expect: []Expect{
		{MsgID: "h1-20", Case: "role/worker-offer", Verdict: "rejected/wrong_role"},
		{MsgID: "h1-17", Case: "protocol/renew-guessed-lease"},
		{MsgID: "h1-18", Case: "wrong/expectation", Verdict: "rejected/too_large"},
		{MsgID: "h1-19", Case: "refused/other-worker", Refused: true},
		{MsgID: "h1-never", Case: "refused/ops-role", Refused: true},
		{MsgID: "h1-lost", Case: "size/body-max-payload", Verdict: "rejected/too_large"},
		{MsgID: "h1-pending", Case: "subject/x", Verdict: "rejected/bad_subject"},
	}}
	hog := AttackRecord{Hostile: "h1", Type: AttackConsumerHog, Targets: []string{"tw_h1_0", "hog7"}}
	ds := s.fold()
	ds = ds[:len(ds)-1] // the pending input's verdict
	r := Check(s.log(ds), hostileClients(s, rec, hog))
	st := r.Hostile.Stats
	if st.Cases != 7 || st.CasesAsExpected != 2 || st.CasesRefused != 1 || st.CasesNotStored != 1 || st.CasesPending != 1 {
		t.Errorf("cases %d: as expected %d, refused %d, not stored %d, pending %d", st.Cases, st.CasesAsExpected, st.CasesRefused, st.CasesNotStored, st.CasesPending)
	}
	items := strings.Join(r.Hostile.Findings.Items, "\n")
	for _, want := range []string{
		"h1's input 18 (wrong/expectation): verdicts [lost_authority/future_generation], want exactly rejected/too_large",
		"h1's input 19 (refused/other-worker, Msg-Id h1-19) was stored: the server must refuse it",
		`h1 created consumer "hog7" on the decision stream`,
	} {
		if !strings.Contains(items, want) {
			t.Errorf("no finding %q in:\n%s", want, items)
		}
	}
	if r.Hostile.Findings.Count != 3 {
		t.Errorf("%d findings, want 3:\n%s", r.Hostile.Findings.Count, items)
	}
}

// revStory is a log opened under rules revision rev (input 1, with a lease
// key: lease ids L<seq>-<MAC>) and the default policy (input 2).
func revStory(t *testing.T, rev uint32) *story {
	s := &story{t: t, now: testutil.ScenarioBase}
	in := events.Input{Verb: events.VerbRules, Revision: rev}
	in.LeaseKey[0] = 7
	s.store("coord.c1._.rules", string(events.AppendInputBody(nil, &in)), "", false)
	s.store("coord.c1._.policy", string(defaultPolicy), "", false)
	return s
}

// verdictOf returns the decision of kind of input seq of s's fold.
func verdictOf(t *testing.T, s *story, seq uint64, kind events.Kind) events.Decision {
	t.Helper()
	ds := s.fold()
	d, _ := events.DecodeDecision(ds[find(t, ds, seq, kind)].Data)
	return d
}

// The learned-lease attack: h1 acquires w1's held job j1 (lease_held),
// claims it under a wrong lease id (no_such_lease) and acquires the queued
// job q1 (job_queued), each an input whose verdicts must withhold the
// lease id and the payload (Expect.Withheld). Under rules revision 5 they
// do and the check passes. Under revision 4 they told h1 w1's lease id and
// q1's payload: the check fails on each of the three, and h1's claim under
// the id it learned froze j1 in an ownership conflict and w1's next renewal
// was refused conflict_pending, two findings more.
func TestHostileLearnedLease(t *testing.T) {
	for _, rev := range []uint32{events.Revision5, events.Revision4} {
		t.Run(fmt.Sprintf("revision %d", rev), func(t *testing.T) {
			s := revStory(t, rev)
			s.in(time.Second, "worker.w1.j1.acquire", `{"v":1,"lease_ms":5000}`) // 3
			s.in(10*time.Millisecond, "ops.disp.q1.submit", `{"v":1,"queue":"chaos-q","payload":"secret-1"}`)
			s.in(10*time.Millisecond, "worker.h1.j1.acquire", `{"v":1,"lease_ms":1}`) // 5
			s.in(10*time.Millisecond, "worker.h1.j1.renew", `{"v":1,"lease_id":"L3-AAAAAAAAAAAAAAAAAAAAAA","generation":1,"renew_seq":1}`)
			s.in(10*time.Millisecond, "worker.h1.q1.acquire", `{"v":1,"lease_ms":1}`) // 7
			held := verdictOf(t, s, 5, events.KindRejected)
			if held.Reason != events.ReasonLeaseHeld || verdictOf(t, s, 7, events.KindRejected).Reason != events.ReasonJobQueued {
				t.Fatalf("verdicts %s, %s", held.Reason, verdictOf(t, s, 7, events.KindRejected).Reason)
			}
			rec := AttackRecord{Hostile: "h1", Type: AttackLearnedLease, Learned: &LearnProbe{Verdicts: 3}, Expect: []Expect{
				{MsgID: "h1-5", Case: "learned-lease/acquire-held", Withheld: true},
				{MsgID: "h1-6", Case: "learned-lease/renew-wrong-lease", Withheld: true},
				{MsgID: "h1-7", Case: "learned-lease/acquire-queued", Withheld: true},
			}}
			if id := held.Job.LeaseID; id != "" { // learned: claimed
				rec.Learned.LeaseIDs, rec.Learned.Claims = []string{id}, 1
				s.in(10*time.Millisecond, "worker.h1.j1.renew", fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":1,"renew_seq":1}`, id))
				w1 := verdictOf(t, s, 3, events.KindGranted).Job.LeaseID
				s.in(10*time.Millisecond, "worker.w1.j1.renew", fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":1,"renew_seq":1}`, w1))
			}
			r := Check(s.log(s.fold()), hostileClients(s, rec))
			st := r.Hostile.Stats
			items := strings.Join(r.Hostile.Findings.Items, "\n")
			if rev >= events.Revision5 {
				if !r.Hostile.OK() || st.LearnInputs != 3 || st.LearnLeaks != 0 || st.LearnVerdicts != 3 {
					t.Errorf("findings %q; learn inputs %d, leaks %d, verdicts %d", r.Hostile.Findings.Items, st.LearnInputs, st.LearnLeaks, st.LearnVerdicts)
				}
				if line := finalLine(t, r); !strings.HasSuffix(line, " hostile=ok") {
					t.Errorf("final line %q", line)
				}
				return
			}
			for _, want := range []string{
				`h1's input 5 (learned-lease/acquire-held): decision 5 (rejected/lease_held of job j1) told h1 the lease id "` + held.Job.LeaseID + `" of "w1"'s lease (rules revision 4): need to know`,
				`h1's input 6 (learned-lease/renew-wrong-lease): decision 6 (lost_authority/no_such_lease of job j1) told h1 the lease id`,
				`h1's input 7 (learned-lease/acquire-queued): decision 7 (rejected/job_queued of job q1) told h1 the payload of a job never offered to it`,
				`job j1 frozen in an ownership conflict with h1, "w1"'s lease (generation 1) claimed by it`,
				`w1's input 9 on job j1 refused conflict_pending: its lease frozen by h1`,
			} {
				if !strings.Contains(items, want) {
					t.Errorf("no finding %q in:\n%s", want, items)
				}
			}
			if st.LearnInputs != 3 || st.LearnLeaks != 3 || st.Frozen != 1 || st.FrozenVerdicts != 1 || st.LearnedIDs != 1 {
				t.Errorf("learn inputs %d, leaks %d, frozen %d (%d verdicts), learned ids %d", st.LearnInputs, st.LearnLeaks, st.Frozen, st.FrozenVerdicts, st.LearnedIDs)
			}
			if line := finalLine(t, r); !strings.Contains(line, " hostile=FAIL(") {
				t.Errorf("final line %q", line)
			}
		})
	}
}

// queueStory is a queue under rules revision 5: disp submits q1 and q2
// (attempts maxAttempts), h1 announces 256 slots and is offered both,
// declines q1 (a strike: withdrawn offer_declined, held for 1 s) and ACKs
// q2 and lets it expire 2 s later (lease_expired: a second strike), then w1
// announces, is offered both and, with complete, completes them.
func queueStory(t *testing.T, maxAttempts int, complete bool) (*story, AttackRecord) {
	s := revStory(t, events.Revision5)
	for _, q := range []string{"q1", "q2"} {
		s.in(10*time.Millisecond, "ops.disp."+q+".submit", fmt.Sprintf(`{"v":1,"queue":"chaos-q","max_attempts":%d,"backoff_ms":100,"lease_ms":1000,"ack_timeout_ms":500,"payload":"secret"}`, maxAttempts))
	}
	at := s.now + int64(10*time.Millisecond)
	pull := s.in(10*time.Millisecond, "worker.h1._.pull", `{"v":1,"queue":"chaos-q","slots":256,"ttl_ms":60000}`) // 5
	var offers []events.Decision
	for _, m := range s.fold() {
		if d, _ := events.DecodeDecision(m.Data); d.Cause == pull && d.Kind == events.KindAssigned {
			offers = append(offers, d)
		}
	}
	if len(offers) != 2 {
		t.Fatalf("%d offers to h1", len(offers))
	}
	claim := func(d events.Decision) string {
		return fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":%d}`, d.Job.LeaseID, d.Job.Generation)
	}
	s.in(10*time.Millisecond, "worker.h1."+offers[0].Job.ID+".release", claim(offers[0]))
	s.in(10*time.Millisecond, "worker.h1."+offers[1].Job.ID+".ack", claim(offers[1]))
	s.tick(2 * time.Second) // 8: expires h1's lease
	pull = s.in(10*time.Millisecond, "worker.w1._.pull", `{"v":1,"queue":"chaos-q","slots":2,"ttl_ms":60000}`)
	offers = offers[:0]
	for _, m := range s.fold() {
		if d, _ := events.DecodeDecision(m.Data); d.Cause == pull && d.Kind == events.KindAssigned {
			offers = append(offers, d)
		}
	}
	for _, o := range offers {
		s.in(10*time.Millisecond, "worker.w1."+o.Job.ID+".ack", claim(o))
		if complete {
			s.in(10*time.Millisecond, "worker.w1."+o.Job.ID+".result", fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":%d,"outcome":"SUCCESS"}`, o.Job.LeaseID, o.Job.Generation))
		}
	}
	return s, AttackRecord{Hostile: "h1", Type: AttackQueueDecline, At: at, Queue: &QueueProbe{Queue: "chaos-q", Announced: 1, Offers: 2, Refusals: 2}}
}

// The queue checks: h1's refusals cost it a strike and q1 and q2 nothing,
// both completed once by w1 (clean). A job sent DEAD (an attempt budget
// of one, spent by h1's expiry), a job completed twice, a job never
// completed once the workload has drained, and refusals without a
// withdrawal that carries a strike each fail the check.
func TestHostileQueues(t *testing.T) {
	s, rec := queueStory(t, 3, true)
	ds := s.fold()
	c := hostileClients(s, rec)
	c.Drained = true
	r := Check(s.log(ds), c)
	wantClean(t, r)
	st := r.Hostile.Stats
	if !r.Hostile.OK() || st.QueueJobs != 2 || st.QueueCompleted != 2 || st.QueueDead != 0 || st.HostileOffers != 2 ||
		st.HostileWithdrawn != 2 || st.HostileMaxStrikes != 2 || st.HostileMaxHeld != 2 {
		t.Errorf("clean: findings %q; stats %+v", r.Hostile.Findings.Items, st)
	}

	want := func(name string, r *Result, substr string) {
		t.Helper()
		if r.Hostile.OK() || !slices.ContainsFunc(r.Hostile.Findings.Items, func(f string) bool { return strings.Contains(f, substr) }) {
			t.Errorf("%s: findings %q, want one with %q", name, r.Hostile.Findings.Items, substr)
		}
		if line := finalLine(t, r); !strings.Contains(line, " hostile=FAIL(") {
			t.Errorf("%s: final line %q", name, line)
		}
	}
	// DEAD: one attempt, spent by h1's expiry.
	s1, rec1 := queueStory(t, 1, true)
	r = Check(s1.log(s1.fold()), hostileClients(s1, rec1))
	want("dead", r, "queue job q2 ended DEAD after attempt 1 of 1, last holder h1 (its attempts ended: h1 lease_expired)")
	if r.Hostile.Stats.QueueDead != 1 {
		t.Errorf("dead: %d", r.Hostile.Stats.QueueDead)
	}
	// Completed twice: w1's ACK of q1 tampered into a completion.
	i := -1
	for k := range ds {
		if d, _ := events.DecodeDecision(ds[k].Data); d.Kind == events.KindAcked && d.Job.ID == "q1" && d.Actor == "w1" {
			i = k
		}
	}
	if i < 0 {
		t.Fatal("no ACK of q1 by w1")
	}
	bad := tamper(t, ds, i, func(d *events.Decision) {
		d.Kind, d.Job.State, d.Job.Result = events.KindCompleted, events.StateCompleted, events.OutcomeSuccess
	})
	want("twice", Check(s.log(bad), hostileClients(s, rec)), "queue job q1 completed a second time (by w1; w1 before)")
	// Never completed: w1 ACKs and stops. Not a finding before the
	// workload drained.
	s2, rec2 := queueStory(t, 3, false)
	if r := Check(s2.log(s2.fold()), hostileClients(s2, rec2)); !r.Hostile.OK() {
		t.Errorf("not drained: %q", r.Hostile.Findings.Items)
	}
	c2 := hostileClients(s2, rec2)
	c2.Drained = true
	want("never", Check(s2.log(s2.fold()), c2), "queue job q1 was submitted and never completed: ACTIVE")
	// Refusals the record reports after every withdrawal.
	late := rec
	late.At = s.now + int64(time.Second)
	want("no strike", Check(s.log(ds), hostileClients(s, late)), "h1's queue-decline attack of round 0 refused 2 of its 2 offers, and no withdrawal of its announcement with a strike followed")
}
