package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
)

// FuzzDecodeInput checks, for any subject and body, that DecodeInput
//   - never panics and fails only with a *DecodeError carrying a known reason;
//   - is deterministic: the same bytes give the same error (code, field and
//     detail), also when decoding into an Input left dirty by earlier use;
//   - on failure leaves only the subject's identity in the Input;
//   - accepts only valid JSON;
//   - on success round-trips: AppendInputBody re-encodes the Input to a body
//     that decodes to the identical Input and re-encodes to the same bytes.
func FuzzDecodeInput(f *testing.F) {
	for _, c := range validCases {
		f.Add(c.subject, []byte(c.body))
	}
	for _, c := range errorCases {
		f.Add(c.subject, []byte(c.body))
	}
	f.Fuzz(func(t *testing.T, subject string, body []byte) {
		orig := bytes.Clone(body)
		var in events.Input
		err := events.DecodeInput(subject, body, &in)
		if !bytes.Equal(body, orig) {
			t.Fatal("DecodeInput modified the body")
		}

		var again events.Input
		err2 := events.DecodeInput(subject, body, &again)
		dirty := events.Input{Role: events.RoleOps, Actor: "x", Job: "y", Verb: events.VerbTick, SentAt: 7, Holder: "h", LeaseID: "l",
			Generation: 1, RenewSeq: 2, ProgressSeq: 3, Value: 4, LeaseMS: 5, AckTimeoutMS: 6, Outcome: 1, Action: 1, Text: "t",
			Policy: events.DefaultPolicy(), Leases: []events.LeaseRef{{Job: "old", LeaseID: "old", Generation: 1, RenewSeq: 1, LeaseMS: 1}, {Job: "old"}},
			Queue: "q", Priority: 1, MaxAttempts: 2, BackoffMS: 3, BackoffMax: 4, Payload: "p", HasPayload: true, Slots: 5, TTLMS: 6, Permanent: true,
			RunAt: 8, DelayMS: 9, UniqueKey: "u", UniqueForMS: 10}
		err3 := events.DecodeInput(subject, body, &dirty)
		if errText(err) != errText(err2) || errText(err) != errText(err3) {
			t.Fatalf("not deterministic: %v / %v / %v", err, err2, err3)
		}
		if !sameInput(&in, &again) || !sameInput(&in, &dirty) {
			t.Fatalf("not deterministic:\n%+v\n%+v\n%+v", in, again, dirty)
		}

		// Revision 4 only adds: what revision 3 accepts decodes alike,
		// and what it rejects for another reason than an unknown verb,
		// field or name is rejected alike.
		var in3 events.Input
		err3 = events.DecodeInputAt(subject, body, events.Revision3, &in3)
		var de3 *events.DecodeError
		switch {
		case err3 == nil && (err != nil || !sameInput(&in3, &in)):
			t.Fatalf("revision 3 decodes %+v, revision 4 %+v (%v)", in3, in, err)
		case errors.As(err3, &de3) && de3.Code != events.ReasonBadSubject && de3.Code != events.ReasonUnknownField &&
			de3.Code != events.ReasonBadEnum && errText(err3) != errText(err):
			t.Fatalf("revision 3 rejects with %v, revision 4 with %v", err3, err)
		}

		if err != nil {
			var de *events.DecodeError
			if !errors.As(err, &de) || !de.Code.Known() || de.Detail == "" {
				t.Fatalf("error %#v is not a documented *DecodeError", err)
			}
			s, _ := events.ParseInputSubject(subject)
			want := events.Input{Role: s.Role, Actor: s.Actor, Job: s.Job, Verb: s.Verb}
			if !sameInput(&in, &want) {
				t.Fatalf("after %v the input holds %+v", err, in)
			}
			return
		}

		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		enc := events.AppendInputBody(nil, &in)
		var rt events.Input
		if err := events.DecodeInput(subject, enc, &rt); err != nil {
			t.Fatalf("re-encoded body %s rejected: %v (from %q)", enc, err, body)
		}
		if !sameInput(&in, &rt) {
			t.Fatalf("round trip through %s:\n%+v\n%+v", enc, in, rt)
		}
		if enc2 := events.AppendInputBody(nil, &rt); !bytes.Equal(enc, enc2) {
			t.Fatalf("not canonical:\n%s\n%s", enc, enc2)
		}
	})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// FuzzTokenRule checks that a lease_id is accepted exactly when ValidToken
// accepts it.
func FuzzTokenRule(f *testing.F) {
	for _, s := range []string{"L-1", "", "_", "__", "a b", "é", strings.Repeat("a", 64), strings.Repeat("a", 65), "A_z-09"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] == '"' || s[i] == '\\' || s[i] >= 0x7f {
				return // keep to strings that need no escaping
			}
		}
		var in events.Input
		err := events.DecodeInput(sAck, []byte(`{"v":1,"lease_id":"`+s+`","generation":1}`), &in)
		if events.ValidToken(s) {
			if err != nil || in.LeaseID != s {
				t.Fatalf("%q: %v", s, err)
			}
		} else if !errors.Is(err, events.ErrBadToken) {
			t.Fatalf("%q: %v, want bad_token", s, err)
		}
	})
}

// FuzzSentAt checks that sent_at is read exactly as time.Parse with
// time.RFC3339Nano reads it (the decoder has a fast path for the common
// form), and rejected with bad_time when time.Parse fails or the instant is
// before 1678 or has no int64 Unix nanosecond value.
func FuzzSentAt(f *testing.F) {
	for _, s := range []string{
		"2025-03-01T11:00:00Z", "2025-03-01T11:00:00.5+01:00", "2024-02-29T23:59:59.999999999-23:59",
		"2023-02-29T00:00:00Z", "2000-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2025-04-31T00:00:00Z",
		"1677-09-21T00:12:43.145224192Z", "1677-09-21T00:12:43.145224191Z", "1678-01-01T00:00:00Z", "1677-12-31T23:59:59.999999999Z",
		"2262-04-11T23:47:16.854775807Z", "2262-04-11T23:47:16.854775808Z", "0000-01-01T00:00:00Z",
		"9999-12-31T23:59:59.999999999Z", "2025-03-01T11:00:00,5Z", "2025-03-01t11:00:00z",
		"2025-03-01T24:00:00Z", "2025-03-01T11:00:60Z", "2025-03-01T11:00:00.1234567891Z",
		"2025-03-01T11:00:00.Z", "2025-03-01T11:00:00-00:00", "2025-03-01T11:00:00+24:00",
		"2025-03-01T11:00:00+01:60", "2025-03-01T11:00:00+0100", "2025-3-01T11:00:00Z", "1970-01-01T00:00:00Z",
	} {
		f.Add(s)
	}
	// The accepted range: 1678-01-01 to the end of int64 Unix nanoseconds.
	minT, maxT := time.Date(1678, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(0, math.MaxInt64)
	f.Fuzz(func(t *testing.T, s string) {
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] == '"' || s[i] == '\\' || s[i] >= 0x7f {
				return // keep to strings that need no escaping
			}
		}
		var in events.Input
		err := events.DecodeInput(sTick, []byte(`{"v":1,"sent_at":"`+s+`"}`), &in)
		tm, perr := time.Parse(time.RFC3339Nano, s)
		if perr == nil && !tm.Before(minT) && !tm.After(maxT) {
			if err != nil || in.SentAt != tm.UnixNano() {
				t.Fatalf("%q: SentAt %d, err %v; time.Parse gives %d", s, in.SentAt, err, tm.UnixNano())
			}
		} else if !errors.Is(err, events.ErrBadTime) {
			t.Fatalf("%q: err %v, want bad_time (time.Parse: %v, %v)", s, err, tm, perr)
		}
	})
}

// FuzzParseInputSubject checks ParseInputSubject against the rules of
// PROTOCOL.md §3.1, written out independently, for any string:
//   - it accepts exactly the subjects of six dot-separated tokens
//     tenure.in.<role>.<actor>.<job>.<verb> with a known role, valid actor,
//     a known verb the role may publish, and a valid job token, or "_" for
//     the job-less verbs (and a batch renew, and from revision 7 a batch
//     submit, ack or result);
//   - it rejects the others with bad_subject, or wrong_role when only the
//     role-verb combination is wrong, as a *DecodeError;
//   - an accepted subject round-trips through InputSubject, and a rejected
//     one keeps only valid tokens in the parts it returns.
func FuzzParseInputSubject(f *testing.F) {
	for _, s := range []string{
		sAck, sTick, "tenure.in.worker.w1._.renew", "tenure.in.ops.o._.policy", "tenure.in.coord.c._.policy",
		"tenure.in.worker.w1.j1.offer", "tenure.in.ops.o.j1.tick", "tenure.in.worker.w1._.ack", "tenure.in.ops.o.j._",
		"tenure.in.worker.w1.j1.acquire.x", "tenure.in.worker.w1.j1", "tenure.in.worker..j1.ack", "tenure.in.worker.w 1.j1.ack",
		"tenure.in.boss.w1.j1.ack", "tenure.out.worker.w1.j1.ack", "tenure.in.worker.w1.j1.ACK", "", ".....",
		"tenure.in.worker." + strings.Repeat("a", 65) + ".j.ack", "tenure.in.coord.c.j1.tick", "tenure.in.worker.w1.j1.steal",
		"tenure.in.coord.c._.rules", "tenure.in.coord.c._.checkpoint", "tenure.in.ops.o.j1.submit", "tenure.in.ops.o._.submit",
		"tenure.in.worker.w1._.pull", "tenure.in.worker.w1.j1.pull", "tenure.in.ops.o._.pull", "tenure.in.worker.w1.j1.submit",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		s, err := events.ParseInputSubject(subject)
		s2, err2 := events.ParseInputSubject(subject)
		if s != s2 || errText(err) != errText(err2) {
			t.Fatalf("not deterministic: %+v %v / %+v %v", s, err, s2, err2)
		}
		want := referenceSubject(subject)
		if err == nil {
			if want != "" {
				t.Fatalf("%q accepted, the rules say %s", subject, want)
			}
			if back := events.InputSubject(s.Role, s.Actor, s.Job, s.Verb); back != subject {
				t.Fatalf("%q parses to %+v, which builds %q", subject, s, back)
			}
			return
		}
		var de *events.DecodeError
		if !errors.As(err, &de) || de.Detail == "" {
			t.Fatalf("%q: error %#v is not a documented *DecodeError", subject, err)
		}
		if string(de.Code) != want {
			t.Fatalf("%q rejected with %s, the rules say %q", subject, de.Code, want)
		}
		if s.Actor != "" && !events.ValidToken(s.Actor) || s.Job != "" && s.Job != events.NoJob && !events.ValidToken(s.Job) {
			t.Fatalf("%q: rejected, but returns invalid parts %+v", subject, s)
		}
	})
}

// referenceSubject is PROTOCOL.md §3.1 as a plain table: "" for a valid
// input subject, else the reason code of its rejection.
func referenceSubject(subject string) string {
	roles := map[string][]string{
		"worker": {"acquire", "ack", "renew", "progress", "cancel_ack", "result", "release", "pull"},
		"ops":    {"offer", "cancel", "resolve", "policy", "submit"},
		"coord":  {"tick", "policy", "rules", "checkpoint"},
	}
	verbs := map[string]bool{}
	for _, vs := range roles {
		for _, v := range vs {
			verbs[v] = true
		}
	}
	token := func(s string) bool {
		if s == "_" || len(s) < 1 || len(s) > 64 {
			return false
		}
		for _, c := range s {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				return false
			}
		}
		return true
	}
	tok := strings.Split(subject, ".")
	if len(tok) != 6 || tok[0] != "tenure" || tok[1] != "in" {
		return "bad_subject"
	}
	role, actor, job, verb := tok[2], tok[3], tok[4], tok[5]
	_, roleOK := roles[role]
	jobLess := verb == "tick" || verb == "policy" || verb == "rules" || verb == "checkpoint" || verb == "pull"
	switch {
	case !roleOK, !token(actor), !verbs[verb]:
		return "bad_subject"
	case job == "_" && !jobLess && verb != "renew" && verb != "submit" && verb != "ack" && verb != "result": // batches (revision 7 but for renew)
		return "bad_subject"
	case job != "_" && (!token(job) || jobLess):
		return "bad_subject"
	}
	for _, v := range roles[role] {
		if v == verb {
			return ""
		}
	}
	return "wrong_role"
}
