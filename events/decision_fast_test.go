package events

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// randomDecision returns a decision with every field drawn at random,
// including the optional ones, odd texts and times before 1970.
func randomDecision(r *rand.Rand) Decision {
	texts := []string{"", "x", "lease_held", "a \"quoted\" text", "back\\slash", "tab\there", "ünïcode", "w-1_Z"}
	tok := func() string {
		if r.IntN(16) == 0 {
			return ""
		}
		return "t" + string(rune('a'+r.IntN(26))) + "-" + string(rune('0'+r.IntN(10)))
	}
	tm := func() int64 {
		switch r.IntN(6) {
		case 0:
			return 0
		case 1:
			return -r.Int64N(1e18)
		case 2:
			return r.Int64N(1<<63-1) / 1e9 * 1e9 // whole seconds
		}
		return r.Int64N(1<<63 - 1)
	}
	kinds := Kinds()
	d := Decision{
		Cause: r.Uint64N(1 << 53), N: r.Uint32(), Of: r.Uint32(), At: tm(),
		Kind: kinds[r.IntN(len(kinds))], Reason: Reason(tok()), Role: Role(r.IntN(4)), Actor: tok(),
		Verb: Verb(r.IntN(int(verbCount))), Addressee: tok(),
	}
	if r.IntN(3) == 0 {
		d.Detail = texts[r.IntN(len(texts))]
	}
	j := &d.Job
	j.ID = tok()
	if r.IntN(5) > 0 {
		j.LeaseID, j.Generation, j.Holder = tok(), 1+r.Uint64N(1<<53), tok()
		j.State, j.AckState, j.Result = State(r.IntN(int(stateCount))), AckState(r.IntN(7)), Outcome(r.IntN(4))
		j.Conflict, j.CancelReq, j.CancelAck, j.LeaseExpired = r.IntN(2) == 0, r.IntN(2) == 0, r.IntN(2) == 0, r.IntN(2) == 0
		if j.Conflict {
			j.ConflictWith = tok()
		}
		j.Duration = r.Int64N(1e15) / 1e6 * 1e6
		j.IssuedAt, j.ExpiresAt, j.AckDeadline, j.AckedAt, j.RenewAt, j.ProgressAt = tm(), tm(), tm(), tm(), tm(), tm()
		j.CancelAt, j.CancelBy, j.EndedAt = tm(), tm(), tm()
		j.RenewSeq, j.ProgressSeq, j.ProgressValue = r.Uint64N(1<<53), r.Uint64N(1<<53), r.Int64N(101)
		j.Stale, j.Late, j.LateProgress, j.Duplicates, j.Conflicts = r.Uint64(), uint64(r.Uint32()), r.Uint64N(100), 1<<64-1, r.Uint64()
	}
	if r.IntN(3) == 0 { // a queue job (revision 4), at generation 0 or later
		if j.Generation == 0 {
			j.State = []State{StateQueued, StateDead, StateCancelled, StateNone}[r.IntN(4)]
		}
		j.Queue, j.Submitter, j.Priority = "q"+tok(), tok(), r.Int64N(MaxPriority+1)
		j.Attempt, j.MaxAttempts = r.Uint64N(1001), 1+r.Uint64N(1000)
		j.Backoff, j.BackoffMax = r.Int64N(1e15)/1e6*1e6, r.Int64N(1e15)/1e6*1e6
		if r.IntN(2) == 0 {
			j.AttemptLease = r.Int64N(1e15) / 1e6 * 1e6
		}
		if r.IntN(2) == 0 {
			j.AttemptAck = r.Int64N(1e15) / 1e6 * 1e6
		}
		j.SubmittedAt, j.SubmitSeq, j.ReadyAt = tm(), r.Uint64N(1<<53), tm()
		if r.IntN(2) == 0 {
			j.LastReason = Reason(tok())
		}
		if r.IntN(3) > 0 {
			j.Payload, j.HasPayload = randomPayload(r), true
		}
		switch r.IntN(3) { // revision 8
		case 0:
			j.RunAt = tm()
		case 1:
			j.Delay = (1 + r.Int64N(MaxDelayMS)) * 1e6
		}
		if r.IntN(2) == 0 {
			j.UniqueKey = tok()
			if r.IntN(2) == 0 {
				j.UniqueFor = (1 + r.Int64N(MaxDurationMS)) * 1e6
			}
		}
	}
	if r.IntN(4) == 0 {
		p := DefaultPolicy()
		p.MaxGenerations = r.Uint64N(1 << 20)
		d.Policy = &p
	}
	if r.IntN(4) == 0 {
		d.Revision = 1 + r.Uint32N(1<<32-1)
	}
	if r.IntN(4) == 0 {
		c := &Checkpoint{InputSeq: r.Uint64()}
		for i := range c.StateHash {
			c.StateHash[i] = byte(r.Uint32())
		}
		d.Checkpoint = c
	}
	if r.IntN(4) == 0 {
		d.Capacity = &Capacity{Queue: "q" + tok(), Slots: r.Uint64N(MaxSlots + 1), Until: tm()}
	}
	if r.IntN(4) == 0 { // revision 5
		d.Standing = &Standing{Queue: "q" + tok(), Window: r.Uint64N(MaxWindow + 1), Strikes: r.Uint64(), HeldUntil: tm()}
	}
	if r.IntN(4) == 0 { // revision 8
		d.DuplicateOf = tok()
	}
	if r.IntN(4) == 0 { // revision 10
		sc := &Schedule{ID: "s" + tok(), Next: tm(), Due: tm()}
		if r.IntN(2) == 0 {
			sc.Cron, sc.TZ, sc.Zone, sc.Queue, sc.Actor = "*/5 * * * *", "CET-1CEST,M3.5.0,M10.5.0/3"+tok(), tok(), "q"+tok(), "a"+tok()
			sc.Missed, sc.Paused = Missed(r.IntN(2)), r.IntN(2) == 0
			sc.Template = &ScheduleTemplate{}
			if r.IntN(2) == 0 {
				sc.Anchor = tm()
			}
			if r.IntN(2) == 0 {
				sc.Template = &ScheduleTemplate{Priority: int64(r.IntN(10)), MaxAttempts: r.Uint64N(5), BackoffMS: int64(r.IntN(3)) * 1000,
					LeaseMS: int64(r.IntN(3)) * 500, UniqueKey: tok()}
				if r.IntN(2) == 0 {
					sc.Template.Payload, sc.Template.HasPayload = tok()+"\n\"x\"", true
				}
			}
		}
		if r.IntN(3) == 0 {
			sc.MissedFrom, sc.MissedTo, sc.MissedCount = tm(), tm(), r.Uint64N(MaxMissedCount)+1
		}
		d.Schedule = sc
	}
	if j.ID != "" && r.IntN(5) == 0 { // revision 5: need to know
		j.LeaseID, j.Payload, j.HasPayload, j.Withheld = "", "", false, true
	}
	return d
}

// randomPayload returns a valid UTF-8 string (as every decoded payload is)
// with, often, what needs escaping: quotes, backslashes, control
// characters, non-ASCII, U+2028.
func randomPayload(r *rand.Rand) string {
	payloads := []string{"", "x", `{"to":"a@b.example"}`, "a\\b", "\x00\x01\x1f\x7f", "line\nnext\ttab\r", "é😀 日本", "\u2028\u2029", "\ufffd", "/"}
	if r.IntN(2) == 0 {
		return payloads[r.IntN(len(payloads))]
	}
	b := make([]byte, r.IntN(64))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return strings.ToValidUTF8(string(b), "\ufffd")
}

// plainText reports whether s is encoded as is: ASCII without escapes.
func plainText(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// checkFast requires that decodeDecisionFast, when it accepts b, gives what
// encoding/json gives.
func checkFast(t *testing.T, b []byte) bool {
	t.Helper()
	var fast Decision
	if !decodeDecisionFast(b, &fast) {
		return false
	}
	slow, err := decodeDecisionJSON(b)
	if err != nil {
		t.Fatalf("fast path accepted what encoding/json rejects (%v):\n%s", err, b)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("fast and slow decodings differ for\n%s\nfast %+v\nslow %+v", b, fast, slow)
	}
	return true
}

// The fast decoder gives exactly what encoding/json gives, on canonical
// encodings (which it must accept unless the detail needs escapes or is not
// ASCII: a payload may hold anything) and on mutations of them (which it
// may refuse).
func TestDecodeDecisionFast(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	accepted := 0
	for range 20000 {
		d := randomDecision(r)
		b := AppendDecision(nil, &d)
		if checkFast(t, b) {
			accepted++
		} else if _, err := decodeDecisionJSON(b); err == nil && (ascii(b) && !hasByte(b, '\\') || plainText(d.Detail)) {
			t.Fatalf("canonical encoding refused:\n%s", b)
		}
		for range 5 {
			m := append([]byte(nil), b...)
			switch i := r.IntN(len(m)); r.IntN(3) {
			case 0:
				m[i] = "0123456789\"{},:-tfZ.e "[r.IntN(22)]
			case 1:
				m = append(m[:i], m[i+1:]...)
			default:
				m = append(m[:i], append([]byte{"0\" -9"[r.IntN(5)]}, m[i:]...)...)
			}
			checkFast(t, m)
		}
	}
	if accepted < 10000 {
		t.Fatalf("only %d of 20000 canonical encodings took the fast path", accepted)
	}
}

func FuzzDecodeDecisionFast(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		d := randomDecision(r)
		f.Add(AppendDecision(nil, &d))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkFast(t, b) })
}

func ascii(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 || c < 0x20 {
			return false
		}
	}
	return true
}

func hasByte(b []byte, c byte) bool {
	for _, x := range b {
		if x == c {
			return true
		}
	}
	return false
}

// BenchmarkDecodeDecision compares the fast path with encoding/json on a
// typical verdict (a renewal), as every worker decodes each of its verdicts.
func BenchmarkDecodeDecision(b *testing.B) {
	d := Decision{Cause: 123456, N: 0, Of: 1, At: 1_800_000_000_123_456_789, Kind: KindRenewed, Reason: ReasonOk,
		Role: RoleWorker, Actor: "w17", Verb: VerbRenew, Addressee: "w17",
		Job: Job{ID: "job-4242", LeaseID: "L1234", Generation: 1, Holder: "w17", State: StateActive, AckState: AckAcquired,
			Duration: 3600e9, IssuedAt: 1_800_000_000e9, ExpiresAt: 1_800_003_600_123_456_789, RenewSeq: 12, RenewAt: 1_800_000_000_123_456_789}}
	body := AppendDecision(nil, &d)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeDecision(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeDecisionJSON(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
