package chaos

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
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
	if line := finalLine(t, Check(s.log(s.fold()), c)); !strings.HasSuffix(line, " hostile=FAIL(7)") {
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
	if r.Hostile.Findings.Count != 1 || !strings.Contains(r.Hostile.Findings.Items[0], `conflict/ownership_conflict of job j3) caused by h1's input 17`) ||
		!strings.Contains(r.Hostile.Findings.Items[0], `changed "w3"'s lease`) {
		t.Errorf("ownership conflict: %q", r.Hostile.Findings.Items)
	}
	if line := finalLine(t, r); !strings.HasSuffix(line, " hostile=FAIL(1)") {
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
