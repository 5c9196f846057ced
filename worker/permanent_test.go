package worker

import (
	"errors"
	"fmt"
	"testing"
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
