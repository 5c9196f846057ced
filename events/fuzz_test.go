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
			Policy: events.DefaultPolicy(), Leases: []events.LeaseRef{{Job: "old", LeaseID: "old", Generation: 1, RenewSeq: 1, LeaseMS: 1}, {Job: "old"}}}
		err3 := events.DecodeInput(subject, body, &dirty)
		if errText(err) != errText(err2) || errText(err) != errText(err3) {
			t.Fatalf("not deterministic: %v / %v / %v", err, err2, err3)
		}
		if !sameInput(&in, &again) || !sameInput(&in, &dirty) {
			t.Fatalf("not deterministic:\n%+v\n%+v\n%+v", in, again, dirty)
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
