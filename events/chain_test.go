package events

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// The chain value is the SHA-256 of exactly the bytes PROTOCOL.md §20
// lists, built here independently of Chainer.
func TestChainValue(t *testing.T) {
	var prev Chain
	for i := range prev {
		prev[i] = byte(i)
	}
	subject, body := "tenure.out.worker.w1.j1", []byte(`{"v":1,"kind":"granted"}`)
	var b []byte
	b = append(b, "tenure chain v1\x00"...)
	b = append(b, prev[:]...)
	b = binary.BigEndian.AppendUint64(b, 7)
	b = binary.BigEndian.AppendUint64(b, 5)
	b = binary.BigEndian.AppendUint32(b, 1)
	b = binary.BigEndian.AppendUint32(b, 2)
	b = binary.BigEndian.AppendUint32(b, uint32(len(subject)))
	b = append(b, subject...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	b = append(b, body...)
	want := Chain(sha256.Sum256(b))
	if got := NextChain(prev, 7, 5, 1, 2, subject, body); got != want {
		t.Fatalf("chain %s, want %s", got, want)
	}
	// One Chainer reused gives the same values.
	c := NewChainer()
	for range 3 {
		if got := c.Next(prev, 7, 5, 1, 2, subject, body); got != want {
			t.Fatalf("reused chainer: %s, want %s", got, want)
		}
	}
	// Every field counts.
	for name, got := range map[string]Chain{
		"prev":    NextChain(Chain{}, 7, 5, 1, 2, subject, body),
		"seq":     NextChain(prev, 8, 5, 1, 2, subject, body),
		"cause":   NextChain(prev, 7, 6, 1, 2, subject, body),
		"n":       NextChain(prev, 7, 5, 0, 2, subject, body),
		"of":      NextChain(prev, 7, 5, 1, 3, subject, body),
		"subject": NextChain(prev, 7, 5, 1, 2, subject+"x", body),
		"body":    NextChain(prev, 7, 5, 1, 2, subject, append([]byte(nil), body[:len(body)-1]...)),
		// Lengths are framed: moving a byte from subject to body differs.
		"framing": NextChain(prev, 7, 5, 1, 2, subject[:len(subject)-1], append([]byte{subject[len(subject)-1]}, body...)),
	} {
		if got == want {
			t.Errorf("changing %s leaves the chain value unchanged", name)
		}
	}
}

func TestParseChain(t *testing.T) {
	c := NextChain(Chain{}, 1, 1, 0, 1, "s", nil)
	s := c.String()
	if len(s) != 64 || strings.ToLower(s) != s {
		t.Fatalf("String %q: want 64 lower-case hex digits", s)
	}
	if got, ok := ParseChain(s); !ok || got != c {
		t.Fatalf("ParseChain(%q) = %s, %v", s, got, ok)
	}
	for _, bad := range []string{"", s[:63], s + "0", strings.ToUpper(s), "g" + s[1:]} {
		if _, ok := ParseChain(bad); ok {
			t.Errorf("ParseChain(%q) accepted", bad)
		}
	}
	if !(Chain{}).IsZero() || c.IsZero() {
		t.Fatal("IsZero")
	}
}

// BenchmarkChainNext is the chain's cost per decision of the size the
// coordinator stores (a ~950-byte body, a job's subject).
func BenchmarkChainNext(b *testing.B) {
	subject := "tenure.out.worker.w12.job-123456.renewed"
	body := []byte(strings.Repeat("x", 950))
	c := NewChainer()
	var prev Chain
	b.SetBytes(int64(len(chainDomain) + ChainLen + 8 + 8 + 4 + 4 + 4 + len(subject) + 4 + len(body)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		prev = c.Next(prev, uint64(i+1), uint64(i), 0, 1, subject, body)
	}
}

// BenchmarkParseChain is the parse of a decision's Tenure-Chain header.
func BenchmarkParseChain(b *testing.B) {
	s := NextChain(Chain{}, 1, 1, 0, 1, "s", nil).String()
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseChain(s); !ok {
			b.Fatal(s)
		}
	}
}

// ChainCheck: a header is required when the revision says so or once one
// was seen; a value must read and match.
func TestChainCheck(t *testing.T) {
	var right Chain
	right[0] = 0xab // letters, for the upper-case case
	other := right
	other[1] = 1
	type step struct {
		header   string
		required bool
		want     ChainErrorKind // 0: checks out
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"revision 1 without headers", []step{{"", false, 0}, {"", false, 0}}},
		{"required and missing", []step{{"", true, ChainMissing}}},
		{"headers stop part way", []step{{right.String(), false, 0}, {"", false, ChainMissing}}},
		{"unreadable", []step{{"zz", false, ChainUnreadable}, {"", false, ChainMissing}}},
		{"upper case", []step{{strings.ToUpper(right.String()), false, ChainUnreadable}}},
		{"broken", []step{{other.String(), true, ChainBroken}}},
		{"right", []step{{right.String(), true, 0}, {right.String(), false, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c ChainCheck
			for i, s := range tc.steps {
				err := c.Check(s.header, right, s.required)
				var ce *ChainError
				switch {
				case s.want == 0 && err != nil:
					t.Fatalf("step %d: %v, want none", i, err)
				case s.want != 0 && (!errors.As(err, &ce) || ce.Kind != s.want):
					t.Fatalf("step %d: %v, want kind %d", i, err, s.want)
				}
			}
		})
	}
}
