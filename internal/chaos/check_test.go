package chaos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// story is a synthetic log: inputs stored at chosen times, the journals of
// the clients that sent them, and the decisions of the fold.
type story struct {
	t       *testing.T
	now     int64
	inputs  []Message
	entries []Entry
}

func newStory(t *testing.T) *story {
	s := &story{t: t, now: testutil.ScenarioBase}
	policy := events.AppendInputBody(nil, &events.Input{Verb: events.VerbPolicy, Policy: events.DefaultPolicy()})
	s.store("coord.c1._.policy", string(policy), "", false)
	return s
}

// store appends an input after advancing the clock; with client, as sent
// and acknowledged by its actor (Msg-Id "<actor>-<seq>").
func (s *story) store(subject, body, msgID string, client bool) uint64 {
	seq := uint64(len(s.inputs) + 1)
	subject = "tenure.in." + subject
	h := nats.Header{}
	if client && msgID == "" {
		msgID = strings.Split(subject, ".")[3] + "-" + strconv.FormatUint(seq, 10)
	}
	if msgID != "" {
		h.Set(nats.MsgIdHdr, msgID)
	}
	s.inputs = append(s.inputs, Message{Seq: seq, Time: s.now, Subject: subject, Data: []byte(body), Header: h})
	if client {
		sha := BodySHA([]byte(body))
		s.entries = append(s.entries,
			Entry{Kind: EntrySent, At: s.now, Subject: subject, MsgID: msgID, BodySHA: sha, Len: len(body)},
			Entry{Kind: EntryAck, At: s.now, Subject: subject, MsgID: msgID, BodySHA: sha, Len: len(body), Stream: "TENURE_IN", Seq: seq})
	}
	return seq
}

// in stores a client input d after the previous one.
func (s *story) in(d time.Duration, subject, body string) uint64 {
	s.now += int64(d)
	return s.store(subject, body, "", true)
}

func (s *story) tick(d time.Duration) {
	s.now += int64(d)
	s.store("coord.c1._.tick", `{"v":1}`, fmt.Sprintf("tick-c1-%d-0", s.now), false)
}

// fold derives the decisions as the coordinator stores them.
func (s *story) fold() []Message {
	p := projector.New()
	var out []Message
	for _, in := range s.inputs {
		ds, err := p.Step(events.Raw{Seq: in.Seq, Time: in.Time, Subject: in.Subject, Body: in.Data})
		if err != nil {
			s.t.Fatal(err)
		}
		for i := range ds {
			m := decisionMsg(uint64(len(out)+1), &ds[i])
			m.Time = in.Time + int64(time.Millisecond) // stored just after its input
			out = append(out, m)
		}
	}
	return out
}

func decisionMsg(seq uint64, d *events.Decision) Message {
	h := nats.Header{}
	h.Set(events.HeaderCause, strconv.FormatUint(d.Cause, 10))
	h.Set(events.HeaderIndex, fmt.Sprintf("%d/%d", d.N, d.Of))
	return Message{Seq: seq, Subject: events.DecisionSubject(d), Data: events.AppendDecision(nil, d), Header: h}
}

func (s *story) log(ds []Message) *Log {
	return &Log{Inputs: slices.Clone(s.inputs), Decisions: ds, InputLast: uint64(len(s.inputs)), DecisionLast: uint64(len(ds))}
}

func (s *story) clients() *Clients {
	return &Clients{Entries: slices.Clone(s.entries), Coordinators: []string{"c1", "c2"}}
}

// aStory is a log with a bit of everything: acquire, renewals, progress,
// an expiry while the holder was away, a new generation, the old holder's
// stale messages, an offer, a batch renew, a cancellation.
func aStory(t *testing.T) *story {
	s := newStory(t)
	s.in(time.Second, "worker.w1.j1.acquire", `{"v":1,"lease_ms":1000}`) // 2: L2 g1
	s.in(300*time.Millisecond, "worker.w1.j1.renew", `{"v":1,"lease_id":"L2","generation":1,"renew_seq":1}`)
	s.in(300*time.Millisecond, "worker.w1.j1.progress", `{"v":1,"lease_id":"L2","generation":1,"progress_seq":1,"value":10}`)
	s.tick(1500 * time.Millisecond)                                               // 5: expires L2
	s.in(100*time.Millisecond, "worker.w2.j1.acquire", `{"v":1,"lease_ms":1000}`) // 6: L6 g2
	s.in(100*time.Millisecond, "worker.w1.j1.renew", `{"v":1,"lease_id":"L2","generation":1,"renew_seq":2}`)
	s.in(10*time.Millisecond, "worker.w1.j1.result", `{"v":1,"lease_id":"L2","generation":1,"outcome":"SUCCESS"}`)
	s.in(100*time.Millisecond, "ops.disp.j2.offer", `{"v":1,"holder":"w1","lease_ms":1000,"ack_timeout_ms":500}`) // 9: L9
	s.in(100*time.Millisecond, "worker.w1.j2.ack", `{"v":1,"lease_id":"L9","generation":1}`)
	s.in(100*time.Millisecond, "worker.w2._.renew", `{"v":1,"leases":[{"job":"j1","lease_id":"L6","generation":2,"renew_seq":1}]}`)
	s.in(100*time.Millisecond, "ops.disp.j2.cancel", `{"v":1}`)
	s.in(100*time.Millisecond, "worker.w1.j2.cancel_ack", `{"v":1,"lease_id":"L9","generation":1}`)
	s.in(100*time.Millisecond, "worker.w1.j2.result", `{"v":1,"lease_id":"L9","generation":1,"outcome":"CANCELLED"}`)
	s.in(100*time.Millisecond, "worker.w2.j1.result", `{"v":1,"lease_id":"L6","generation":2,"outcome":"SUCCESS"}`)
	s.in(100*time.Millisecond, "worker.w3.j3.acquire", `{"v":1,"lease_ms":500}`)
	return s
}

func wantClean(t *testing.T, r *Result) {
	t.Helper()
	for name, f := range map[string]Findings{"lost": r.Lost, "phantom": r.Phantom, "double holders": r.DoubleHolders, "stale effects": r.StaleEffects, "gaps": r.Gaps} {
		if f.Count != 0 {
			t.Errorf("%s: %d findings on a clean log: %q", name, f.Count, f.Items)
		}
	}
}

func TestCheckCleanLog(t *testing.T) {
	s := aStory(t)
	ds := s.fold()
	r := Check(s.log(ds), s.clients())
	wantClean(t, r)
	if !r.OK() {
		t.Fatal("not OK")
	}
	st := r.Stats
	if st.Stored != 16 || st.StoredClient != 14 || st.Coordinator["tick"] != 1 || st.Coordinator["policy"] != 1 || st.Folded != 16 || st.Attempted != 14 || st.Acked != 14 {
		t.Errorf("stats %+v", st)
	}
	if st.Kinds["expired"] != 1 || st.Rejections["lost_authority/stale_generation"] != 1 || st.Rejections["stale/stale_generation"] != 1 || st.MaxGeneration != 2 {
		t.Errorf("kinds %v, rejections %v, max generation %d", st.Kinds, st.Rejections, st.MaxGeneration)
	}
	// A pending tail (decisions not stored yet) is not a gap.
	if r := Check(s.log(ds[:len(ds)-1]), s.clients()); !r.OK() {
		t.Errorf("pending tail: %+v", r.Gaps)
	}
	// j3 is still ACTIVE: not live in time; j1 ended in time; j2 was cancelled.
	f := Liveness(r, "j", s.now)
	if f.Count != 1 || !strings.Contains(f.Items[0], "j3 is still ACTIVE") {
		t.Errorf("liveness: %+v", f)
	}
	s.tick(time.Second) // expires j3
	r = Check(s.log(s.fold()), s.clients())
	if f := Liveness(r, "j", s.now+int64(time.Millisecond)); f.Count != 0 {
		t.Errorf("liveness after the expiry: %+v", f)
	}
	if f := Liveness(r, "j", s.now-int64(2*time.Second)); f.Count != 2 || !strings.Contains(f.Items[0], "job j1: the decision ending it (COMPLETED) was stored at") {
		t.Errorf("liveness with an earlier deadline: %+v", f)
	}
}

// tamper re-encodes decision i of ds after mod.
func tamper(t *testing.T, ds []Message, i int, mod func(d *events.Decision)) []Message {
	t.Helper()
	out := slices.Clone(ds)
	d, err := events.DecodeDecision(out[i].Data)
	if err != nil {
		t.Fatal(err)
	}
	mod(&d)
	out[i] = decisionMsg(out[i].Seq, &d)
	return out
}

// find returns the index of the first decision of kind caused by input cause.
func find(t *testing.T, ds []Message, cause uint64, kind events.Kind) int {
	t.Helper()
	for i := range ds {
		d, _ := events.DecodeDecision(ds[i].Data)
		if d.Cause == cause && d.Kind == kind {
			return i
		}
	}
	t.Fatalf("no %s decision of input %d", kind, cause)
	return -1
}

func TestCheckDoubleHolder(t *testing.T) {
	s := aStory(t)
	ds := s.fold()
	// w2's grant of generation 2 while w1's generation 1 still runs: its
	// lease issued before generation 1's expiry.
	i := find(t, ds, 6, events.KindGranted)
	bad := tamper(t, ds, i, func(d *events.Decision) { d.At -= int64(time.Second) })
	r := Check(s.log(bad), s.clients())
	if r.DoubleHolders.Count != 1 || !strings.Contains(r.DoubleHolders.Items[0], "job j1: generation 1 (w1") {
		t.Errorf("double holders: %+v", r.DoubleHolders)
	}
	if r.Gaps.Count == 0 {
		t.Error("a tampered decision must also differ from the fold")
	}
	// A generation whose holder changes.
	i = find(t, ds, 10, events.KindAcked)
	bad = tamper(t, ds, i, func(d *events.Decision) { d.Job.Holder = "w9" })
	if r := Check(s.log(bad), s.clients()); r.DoubleHolders.Count == 0 {
		t.Errorf("holder change not found: %+v", r.DoubleHolders)
	}
}

func TestCheckStaleEffect(t *testing.T) {
	s := aStory(t)
	ds := s.fold()
	// Input 7, w1's renewal of generation 1 after generation 2 was
	// granted, accepted as if it held the lease.
	i := find(t, ds, 7, events.KindLostAuthority)
	bad := tamper(t, ds, i, func(d *events.Decision) { d.Kind, d.Reason, d.Detail = events.KindRenewed, events.ReasonOk, "" })
	r := Check(s.log(bad), s.clients())
	if r.StaleEffects.Count == 0 || !strings.Contains(strings.Join(r.StaleEffects.Items, "\n"), "names generation 1, generation 2 exists") {
		t.Errorf("stale effects: %+v", r.StaleEffects)
	}
	// Input 8, the stale result, accepted on a projection of generation 1.
	i = find(t, ds, 8, events.KindStale)
	bad = tamper(t, ds, i, func(d *events.Decision) {
		d.Kind, d.Reason, d.Detail = events.KindCompleted, events.ReasonOk, ""
		d.Job.Generation, d.Job.Holder = 1, "w1"
	})
	r = Check(s.log(bad), s.clients())
	if r.StaleEffects.Count == 0 || !strings.Contains(r.StaleEffects.Items[0], "accepted on generation 1, generation 2 exists") {
		t.Errorf("stale effects: %+v", r.StaleEffects)
	}
	// Progress accepted after the lease's expiry.
	i = find(t, ds, 4, events.KindProgressed)
	bad = tamper(t, ds, i, func(d *events.Decision) { d.At += int64(5 * time.Second) })
	r = Check(s.log(bad), s.clients())
	if r.StaleEffects.Count == 0 || !strings.Contains(r.StaleEffects.Items[0], "the lease expired at") {
		t.Errorf("stale effects: %+v", r.StaleEffects)
	}
}

func TestCheckGaps(t *testing.T) {
	s := aStory(t)
	ds := s.fold()
	renumber := func(ms []Message) []Message {
		out := slices.Clone(ms)
		for i := range out {
			out[i].Seq = uint64(i + 1)
		}
		return out
	}
	cases := map[string]struct {
		ds   []Message
		want string
	}{
		"sequence gap":       {append(slices.Clone(ds[:6]), ds[7:]...), "decision stream jumps from 6 to 8"},
		"input skipped":      {renumber(append(slices.Clone(ds[:6]), ds[7:]...)), "inputs 6 to 6 have no decision"},
		"input partly":       {renumber(append(slices.Clone(ds[:5]), ds[6:]...)), "input 5 has 1 of its 2 decisions"},
		"cause backwards":    {renumber(append(append(slices.Clone(ds[:6]), ds[7], ds[6]), ds[8:]...)), "goes backwards"},
		"differs from fold":  {tamper(t, ds, 3, func(d *events.Decision) { d.Job.ProgressValue = 99 }), "differs from the fold"},
		"header disagrees":   {withHeader(ds, 2, events.HeaderIndex, "1/2"), "headers"},
		"duplicate decision": {renumber(append(slices.Clone(ds[:4]), ds[3:]...)), "after"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := Check(s.log(c.ds), s.clients())
			if r.Gaps.Count == 0 || !strings.Contains(strings.Join(r.Gaps.Items, "\n"), c.want) {
				t.Errorf("gaps: %+v, want %q", r.Gaps, c.want)
			}
		})
	}
	// An input missing from the input stream.
	l := s.log(ds)
	l.Inputs = append(l.Inputs[:3], l.Inputs[4:]...)
	if r := Check(l, s.clients()); r.Gaps.Count == 0 || !strings.Contains(r.Gaps.Items[0], "input stream jumps from 3 to 5") {
		t.Errorf("input gap: %+v", r.Gaps)
	}
}

func withHeader(ds []Message, i int, k, v string) []Message {
	out := slices.Clone(ds)
	h := nats.Header{}
	for key, vals := range out[i].Header {
		h[key] = slices.Clone(vals)
	}
	h.Set(k, v)
	out[i].Header = h
	return out
}

func TestCheckLost(t *testing.T) {
	s := aStory(t)
	ds := s.fold()
	// The stream holds another body where an acknowledged input was.
	l := s.log(ds)
	l.Inputs[2].Data = []byte(`{"v":1,"lease_id":"L2","generation":1,"renew_seq":9}`)
	r := Check(l, s.clients())
	if r.Lost.Count != 1 || !strings.Contains(r.Lost.Items[0], "input 3 was acknowledged") {
		t.Errorf("lost: %+v", r.Lost)
	}
	// An acknowledged input beyond the end of the stream.
	c := s.clients()
	c.Entries = append(c.Entries, Entry{Kind: EntryAck, At: s.now + 1, Subject: "tenure.in.worker.w1.j9.acquire", MsgID: "w1-x", BodySHA: "00", Stream: "TENURE_IN", Seq: 99})
	r = Check(s.log(ds), c)
	if r.Lost.Count != 1 || !strings.Contains(r.Lost.Items[0], "input 99") {
		t.Errorf("lost: %+v", r.Lost)
	}
	// ... unless it was acknowledged after the streams were read.
	c.AckedBefore = s.now + 1
	if r := Check(s.log(ds), c); r.Lost.Count != 0 {
		t.Errorf("lost with AckedBefore: %+v", r.Lost)
	}
}

func TestCheckPhantom(t *testing.T) {
	s := aStory(t)
	s.store("worker.w1.j5.acquire", `{"v":1}`, "w1-never-sent", false)
	s.store("worker.w1.j6.acquire", `{"v":1}`, "", false)
	s.store("coord.c9._.tick", `{"v":1}`, "tick-c9-1-0", false)
	s.store("coord.c1._.tick", `{"v":1,"sent_at":"2026-01-01T00:00:00Z"}`, "tick-c1-1-0", false)
	// Sent with this Msg-Id, but not this body.
	s.entries = append(s.entries, Entry{Kind: EntrySent, Subject: "tenure.in.worker.w2.j7.acquire", MsgID: "w2-7", BodySHA: BodySHA([]byte(`{"v":1}`))})
	s.store("worker.w2.j7.acquire", `{"v":1,"lease_ms":500}`, "w2-7", false)
	// Sent, never acknowledged (the PubAck was lost): not a phantom.
	s.entries = append(s.entries, Entry{Kind: EntrySent, Subject: "tenure.in.worker.w2.j8.acquire", MsgID: "w2-8", BodySHA: BodySHA([]byte(`{"v":1}`))})
	s.store("worker.w2.j8.acquire", `{"v":1}`, "w2-8", false)
	r := Check(s.log(s.fold()), s.clients())
	if r.Phantom.Count != 5 {
		t.Errorf("phantom: %d, want 5: %q", r.Phantom.Count, r.Phantom.Items)
	}
	if r.Stats.StoredUnacked != 1 {
		t.Errorf("stored without ack: %d", r.Stats.StoredUnacked)
	}
	if r.Lost.Count+r.Gaps.Count+r.DoubleHolders.Count+r.StaleEffects.Count != 0 {
		t.Errorf("other findings: %+v", r)
	}
}

// What coordinators append is theirs: the rules and default policy opening
// an empty log (inputs 1 and 2, fenced, without a Msg-Id), ticks, later
// rules and checkpoints with their "<verb>-<coordinator>-<random>" ids.
// Anything else on a coordinator's subjects is a phantom.
func TestCheckCoordinatorInputs(t *testing.T) {
	s := &story{t: t, now: testutil.ScenarioBase}
	rules := func() string {
		in := events.Input{Verb: events.VerbRules, Revision: events.CurrentRevision}
		in.LeaseKey[0] = 7
		return string(events.AppendInputBody(nil, &in))
	}
	checkpoint := string(events.AppendInputBody(nil, &events.Input{Verb: events.VerbCheckpoint, CheckpointSeq: 3}))
	s.store("coord.c1._.rules", rules(), "", false)
	s.store("coord.c1._.policy", string(defaultPolicy), "", false)
	s.in(time.Second, "worker.w1.j1.acquire", `{"v":1,"lease_ms":1000}`)
	s.store("coord.c2._.checkpoint", checkpoint, "checkpoint-c2-0123456789abcdef0123456789abcdef", false)
	s.now += int64(2 * time.Second)
	s.store("coord.c1._.tick", `{"v":1}`, "tick-c1-0123456789abcdef0123456789abcdef", false)
	s.store("coord.c2._.rules", rules(), "rules-c2-0123456789abcdef0123456789abcdef", false)
	r := Check(s.log(s.fold()), s.clients())
	wantClean(t, r)
	if c := r.Stats.Coordinator; c["rules"] != 2 || c["policy"] != 1 || c["tick"] != 1 || c["checkpoint"] != 1 {
		t.Errorf("coordinator inputs %v", c)
	}
	s.store("coord.c1._.rules", rules(), "", false)                                       // no Msg-Id after input 1
	s.store("coord.c1._.policy", string(defaultPolicy), "", false)                        // the default policy, later
	s.store("coord.c1._.checkpoint", checkpoint, "checkpoint-c2-0123456789abcdef", false) // another coordinator's id
	s.store("coord.c1._.tick", `{"v":1}`, "c1-1", false)                                  // not a tick id
	s.store("coord.c1._.tick", `{"v":1,"sent_at":"2026-01-01T00:00:00Z"}`, "tick-c1-1", false)
	r = Check(s.log(s.fold()), s.clients())
	if r.Phantom.Count != 5 {
		t.Errorf("phantom: %d, want 5: %q", r.Phantom.Count, r.Phantom.Items)
	}
}

// With quotas a worker's PubAck names its intake stream: the check finds
// the input by the Nats-Stream-Source header the server stored with it,
// and reports one that is not there as lost.
func TestCheckLostThroughIntake(t *testing.T) {
	s := aStory(t)
	s.in(time.Millisecond, "worker.w1.j1.acquire", `{"v":1}`)
	ds := s.fold()
	// The input as sourced from w1's intake, where it was input 7.
	e := &s.entries[len(s.entries)-1]
	e.Stream, e.Seq = "TENURE_INTAKE_w1", 7
	l := s.log(ds)
	m := &l.Inputs[len(l.Inputs)-1]
	m.Header.Set(streams.HeaderStreamSource, "TENURE_INTAKE_w1 7 > > tenure.in.worker.w1.j1.acquire")
	if r := Check(l, s.clients()); r.Lost.Count != 0 {
		t.Errorf("sourced input: lost %+v", r.Lost)
	}
	// Another intake sequence: not in the input stream.
	m.Header.Set(streams.HeaderStreamSource, "TENURE_INTAKE_w1 8 > > tenure.in.worker.w1.j1.acquire")
	if r := Check(l, s.clients()); r.Lost.Count != 1 || !strings.Contains(r.Lost.Items[0], "input 7 of TENURE_INTAKE_w1") {
		t.Errorf("input missing from the input stream: lost %+v", r.Lost)
	}
	// Acknowledged by its intake at or after SourcedBefore: maybe not
	// sourced yet, not judged; before it, lost.
	c := s.clients()
	c.SourcedBefore = e.At
	if r := Check(l, c); r.Lost.Count != 0 {
		t.Errorf("an intake's acknowledgement at SourcedBefore: lost %+v", r.Lost)
	}
	c.SourcedBefore = e.At + 1
	if r := Check(l, c); r.Lost.Count != 1 {
		t.Errorf("an intake's acknowledgement before SourcedBefore: lost %+v, want it counted", r.Lost)
	}
}
