package events

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Queue jobs (revision 4) and capacities in decisions: the canonical bytes
// of PROTOCOL.md §22.6 and §22.2, and the round trip encode, decode (fast
// path and encoding/json alike), equal, encode to the same bytes.
func TestQueueDecisionsRoundTrip(t *testing.T) {
	const ms = int64(time.Millisecond)
	at := time.Date(2026, 12, 1, 10, 0, 0, 500e6, time.UTC).UnixNano()
	queued := Job{ID: "mail-1", State: StateQueued, Queue: "emails", Submitter: "disp", Priority: 3,
		MaxAttempts: 5, Backoff: 1000 * ms, BackoffMax: 3600000 * ms, SubmittedAt: at, SubmitSeq: 12, ReadyAt: at,
		Payload: `{"to":"a@b.example"}`, HasPayload: true}
	offered := queued
	offered.LeaseID, offered.Generation, offered.Holder = "L14-abc", 1, "w1"
	offered.State, offered.AckState, offered.Duration = StateOffered, AckPending, 30000*ms
	offered.IssuedAt, offered.AckDeadline, offered.ReadyAt, offered.Attempt = at+2e9, at+32e9, 0, 1
	offered.AttemptLease, offered.AttemptAck = 30000*ms, 5000*ms
	requeued := offered
	requeued.State, requeued.AckState, requeued.EndedAt = StateQueued, AckMissed, at+32e9
	requeued.ReadyAt, requeued.LastReason = at+32e9+987*ms, ReasonAckDeadlinePassed
	dead := requeued
	dead.State, dead.ReadyAt, dead.Attempt, dead.MaxAttempts = StateDead, 0, 5, 5
	withPayload := func(j Job, p string, has bool) Job { j.Payload, j.HasPayload = p, has; return j }

	for _, c := range []struct {
		name string
		d    Decision
		want string // the canonical bytes, when pinned
	}{
		{name: "submitted_generation_0",
			d: Decision{Cause: 12, Of: 1, At: at, Kind: KindSubmitted, Reason: ReasonOk, Role: RoleOps, Actor: "disp", Verb: VerbSubmit, Addressee: "disp", Job: queued},
			want: `{"v":1,"cause":12,"n":0,"of":1,"at":"2026-12-01T10:00:00.5Z","kind":"submitted","accepted":true,"reason":"ok",` +
				`"input":{"role":"ops","actor":"disp","verb":"submit"},"addressee":"disp",` +
				`"job":{"id":"mail-1","lease_id":"","generation":0,"holder":"","state":"QUEUED","ack_state":"NONE","lease_ms":0,` +
				`"renew_seq":0,"progress_seq":0,"progress_value":0,"cancel_requested":false,"cancel_acked":false,"lease_expired":false,"conflict":false,` +
				`"stale":0,"late":0,"late_progress":0,"duplicates":0,"conflicts":0,` +
				`"queue":"emails","submitter":"disp","priority":3,"turn":0,"attempt":0,"max_attempts":5,"backoff_ms":1000,"backoff_max_ms":3600000,` +
				`"submitted_at":"2026-12-01T10:00:00.5Z","submit_seq":12,"ready_at":"2026-12-01T10:00:00.5Z","payload":"{\"to\":\"a@b.example\"}"}}`},
		{name: "capacity_set",
			d: Decision{Cause: 13, Of: 1, At: at, Kind: KindCapacitySet, Reason: ReasonOk, Role: RoleWorker, Actor: "w1", Verb: VerbPull, Addressee: "w1",
				Job: Job{ID: NoJob}, Capacity: &Capacity{Queue: "emails", Slots: 4, Until: at + 30e9}},
			want: `{"v":1,"cause":13,"n":0,"of":1,"at":"2026-12-01T10:00:00.5Z","kind":"capacity_set","accepted":true,"reason":"ok",` +
				`"input":{"role":"worker","actor":"w1","verb":"pull"},"addressee":"w1","job":{"id":"_","state":"NONE"},` +
				`"capacity":{"queue":"emails","slots":4,"until":"2026-12-01T10:00:30.5Z"}}`},
		{name: "capacity_withdrawn",
			d: Decision{Cause: 14, Of: 1, At: at, Kind: KindCapacitySet, Reason: ReasonOk, Role: RoleWorker, Actor: "w1", Verb: VerbPull, Addressee: "w1",
				Job: Job{ID: NoJob}, Capacity: &Capacity{Queue: "emails", Until: at}}},
		{name: "offered_assigned",
			d: Decision{Cause: 14, N: 1, Of: 2, At: at + 2e9, Kind: KindAssigned, Reason: ReasonOk, Role: RoleCoord, Actor: "c1", Verb: VerbTick, Addressee: "w1", Job: offered},
			want: `{"v":1,"cause":14,"n":1,"of":2,"at":"2026-12-01T10:00:02.5Z","kind":"assigned","accepted":false,"reason":"ok",` +
				`"input":{"role":"coord","actor":"c1","verb":"tick"},"addressee":"w1",` +
				`"job":{"id":"mail-1","lease_id":"L14-abc","generation":1,"holder":"w1","state":"OFFERED","ack_state":"PENDING","lease_ms":30000,` +
				`"issued_at":"2026-12-01T10:00:02.5Z","ack_deadline":"2026-12-01T10:00:32.5Z",` +
				`"renew_seq":0,"progress_seq":0,"progress_value":0,"cancel_requested":false,"cancel_acked":false,"lease_expired":false,"conflict":false,` +
				`"stale":0,"late":0,"late_progress":0,"duplicates":0,"conflicts":0,` +
				`"queue":"emails","submitter":"disp","priority":3,"turn":0,"attempt":1,"max_attempts":5,"backoff_ms":1000,"backoff_max_ms":3600000,` +
				`"attempt_lease_ms":30000,"attempt_ack_timeout_ms":5000,"submitted_at":"2026-12-01T10:00:00.5Z","submit_seq":12,` +
				`"payload":"{\"to\":\"a@b.example\"}"}}`},
		{name: "requeued_no_payload",
			d: Decision{Cause: 20, Of: 2, N: 1, At: at + 33e9, Kind: KindRequeued, Reason: ReasonAckDeadlinePassed, Role: RoleCoord, Actor: "c1", Verb: VerbTick, Addressee: "w1",
				Job: withPayload(requeued, "", false)}},
		{name: "requeued_empty_payload",
			d: Decision{Cause: 20, Of: 2, N: 1, At: at + 33e9, Kind: KindRequeued, Reason: ReasonAckDeadlinePassed, Role: RoleCoord, Actor: "c1", Verb: VerbTick, Addressee: "w1",
				Job: withPayload(requeued, "", true)}},
		{name: "dead_control_chars",
			d: Decision{Cause: 40, Of: 2, N: 1, At: at + 90e9, Kind: KindDead, Reason: ReasonLeaseExpired, Role: RoleCoord, Actor: "c1", Verb: VerbTick, Addressee: "w1",
				Job: withPayload(dead, "a\x00b\x01\x1f\x7f\n\t\r\"\\/", true)}},
		{name: "dead_non_ascii",
			d: Decision{Cause: 40, Of: 2, N: 1, At: at + 90e9, Kind: KindDead, Reason: ReasonAttemptFailed, Role: RoleWorker, Actor: "w1", Verb: VerbResult, Addressee: "w1",
				Job: withPayload(dead, "é😀 日本 \u2028\u2029 \ufffd", true)}},
		{name: "payload_max",
			d: Decision{Cause: 41, Of: 1, At: at, Kind: KindSubmitted, Reason: ReasonOk, Role: RoleOps, Actor: "disp", Verb: VerbSubmit, Addressee: "disp",
				Job: withPayload(queued, strings.Repeat("\x01é", MaxPayloadBytes/3), true)}},
		{name: "resolved_retried",
			d: Decision{Cause: 50, Of: 1, At: at + 99e9, Kind: KindResolved, Reason: ReasonRetried, Role: RoleOps, Actor: "admin", Verb: VerbResolve, Addressee: "w1",
				Job: func() Job { j := dead; j.State, j.Attempt, j.ReadyAt = StateQueued, 0, at+99e9; return j }()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := AppendDecision(nil, &c.d)
			if c.want != "" && string(b) != c.want {
				t.Fatalf("encoding\n got %s\nwant %s", b, c.want)
			}
			if !json.Valid(b) {
				t.Fatalf("invalid JSON: %s", b)
			}
			if !checkFast(t, b) && plainText(c.d.Detail) {
				t.Fatalf("the fast path refused a canonical encoding:\n%s", b)
			}
			got, err := DecodeDecision(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.d) {
				t.Fatalf("round trip of %s\n got %+v\nwant %+v", b, got, c.d)
			}
			if again := AppendDecision(nil, &got); string(again) != string(b) {
				t.Fatalf("re-encoded differently:\n%s\n%s", b, again)
			}
			// A generic JSON reader reads the payload the fold holds.
			var generic struct {
				Job struct {
					Payload *string `json:"payload"`
				} `json:"job"`
			}
			if err := json.Unmarshal(b, &generic); err != nil {
				t.Fatal(err)
			}
			if p := generic.Job.Payload; (p != nil) != c.d.Job.HasPayload || p != nil && *p != c.d.Job.Payload {
				t.Fatalf("encoding/json reads payload %v, want %q (present %v)", p, c.d.Job.Payload, c.d.Job.HasPayload)
			}
		})
	}
}

// A payload's escapes are appendString's, deterministic: '"', '\\' and the
// control characters (as \u00xx), nothing else (non-ASCII is UTF-8 as is).
func TestAppendStringEscapes(t *testing.T) {
	for in, want := range map[string]string{
		"":                 `""`,
		"plain / text":     `"plain / text"`,
		"\"\\":             `"\"\\"`,
		"\x00\x01\x1f\x7f": `"\u0000\u0001\u001f\u007f"`,
		"\n\t\r\b\f":       `"\u000a\u0009\u000d\u0008\u000c"`,
		"é😀\u2028\ufffd日本": "\"é😀\u2028\ufffd日本\"",
		" ~":               `" ~"`,
	} {
		if got := string(appendString(nil, in)); got != want {
			t.Errorf("appendString(%q) = %s, want %s", in, got, want)
		}
		var back string
		if err := json.Unmarshal(appendString(nil, in), &back); err != nil || back != in {
			t.Errorf("appendString(%q) reads back as %q (%v)", in, back, err)
		}
	}
}

// FuzzQueuePayloadDecision: any valid UTF-8 payload of a queue job
// round-trips through a decision, and both decoders read it alike.
func FuzzQueuePayloadDecision(f *testing.F) {
	for _, s := range []string{"", "x", "a\x00\x7f\n\"\\", "é😀 日本", "\u2028", `{"k":[1,"v"]}`, "\\u0041", strings.Repeat("z", MaxPayloadBytes)} {
		f.Add(s, uint64(0))
		f.Add(s, uint64(3))
	}
	f.Fuzz(func(t *testing.T, p string, gen uint64) {
		if !utf8.ValidString(p) {
			return // decoded payloads are valid UTF-8
		}
		d := Decision{Cause: 1, Of: 1, Kind: KindSubmitted, Reason: ReasonOk, Role: RoleOps, Actor: "disp", Verb: VerbSubmit, Addressee: "disp",
			Job: Job{ID: "j", Generation: gen, State: StateQueued, Queue: "q", Submitter: "disp", MaxAttempts: 3, Payload: p, HasPayload: true}}
		b := AppendDecision(nil, &d)
		if !checkFast(t, b) {
			t.Fatalf("fast path refused %s", b)
		}
		got, err := DecodeDecision(b)
		if err != nil || !reflect.DeepEqual(got, d) {
			t.Fatalf("round trip of %s: %+v, %v", b, got, err)
		}
	})
}

// DecodeJob reads back what AppendJob writes, for every job a decision
// round trip covers, queue jobs included.
func TestDecodeJob(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		d := randomDecision(rng)
		b := AppendJob(nil, &d.Job)
		j, err := DecodeJob(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if got := AppendJob(nil, &j); string(got) != string(b) {
			t.Fatalf("DecodeJob then AppendJob:\n got  %s\n want %s", got, b)
		}
	}
	if _, err := DecodeJob([]byte(`{"id":"x","state":"SLEEPING"}`)); err == nil {
		t.Fatal("an unknown state decoded")
	}
}
