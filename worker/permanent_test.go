package worker

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/maknow/tenure/events"
)

func TestPermanent(t *testing.T) {
	base := errors.New("malformed payload")
	p := Permanent(base)
	if !errors.Is(p, ErrPermanent) || !errors.Is(p, base) || p.Error() != "malformed payload" {
		t.Fatalf("Permanent(%v) = %v: want it to match ErrPermanent and wrap it, with its message", base, p)
	}
	if wrapped := fmt.Errorf("job x: %w", p); !errors.Is(wrapped, ErrPermanent) {
		t.Fatal("a wrapped Permanent error does not match ErrPermanent")
	}
	if Permanent(nil) != ErrPermanent {
		t.Fatal("Permanent(nil) is not ErrPermanent")
	}
	if errors.Is(base, ErrPermanent) {
		t.Fatal("Permanent marked its argument")
	}
}

// A result's detail is the error's text made acceptable to the decoder:
// control characters become spaces, invalid UTF-8 U+FFFD, and it is cut to
// events.MaxTextLen bytes without splitting a character.
func TestDetailOf(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain", "plain"},
		{"line 1\nline 2\ttab\x7f", "line 1 line 2 tab "},
		{"bad \xff byte", "bad \uFFFD byte"},
		{strings.Repeat("a", 300), strings.Repeat("a", events.MaxTextLen)},
		{strings.Repeat("a", 255) + "é", strings.Repeat("a", 255)},        // é is 2 bytes: not cut in half
		{strings.Repeat("a", 254) + "日本", strings.Repeat("a", 254)},       // 日 is 3 bytes
		{strings.Repeat("a", 253) + "日本", strings.Repeat("a", 253) + "日"}, // exactly 256
	} {
		got := detailOf(errors.New(c.in))
		if got != c.want || !utf8.ValidString(got) || len(got) > events.MaxTextLen {
			t.Errorf("detailOf(%q) = %q, want %q", c.in, got, c.want)
		}
		in := events.Input{Role: events.RoleWorker, Actor: "w1", Job: "j", Verb: events.VerbResult,
			LeaseID: "L1", Generation: 1, Outcome: events.OutcomeFailed, Text: got}
		var back events.Input
		if err := events.DecodeInput(events.InputSubject(events.RoleWorker, "w1", "j", events.VerbResult), events.AppendInputBody(nil, &in), &back); err != nil || back.Text != got {
			t.Errorf("detail %q: the decoder says %v", got, err)
		}
	}
}
