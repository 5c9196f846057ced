package fence_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/fence"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/worker"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

func tok(job, lease string, gen uint64) fence.Token {
	return fence.Token{Job: job, LeaseID: lease, Generation: gen}
}

// The fence's rule, case by case: the attacks the brief names (a lower
// generation, another lease id for the same generation, a job mismatch)
// and a retired job id used again.
func TestAdmit(t *testing.T) {
	held := fence.HeldOf(tok("j", "L40-abc", 3))
	for _, c := range []struct {
		name string
		t    fence.Token
		want fence.Reason // "" admitted
	}{
		{"the same lease", tok("j", "L40-abc", 3), ""},
		{"the next generation", tok("j", "L55-def", 4), ""},
		{"a generation far ahead", tok("j", "L56-def", fence.MaxGeneration), ""},
		{"an older lease", tok("j", "L12-xyz", 2), fence.ReasonStale},
		{"an older lease claiming a higher generation", tok("j", "L12-xyz", 9), fence.ReasonStale},
		{"the same sequence, another tag", tok("j", "L40-abd", 3), fence.ReasonMismatch},
		{"the same lease id, another generation", tok("j", "L40-abc", 4), fence.ReasonMismatch},
		{"the same lease id, a lower generation", tok("j", "L40-abc", 2), fence.ReasonMismatch},
		{"a later lease with the same generation", tok("j", "L60-ghi", 3), fence.ReasonMismatch},
		{"a later lease with a lower generation", tok("j", "L60-ghi", 2), fence.ReasonMismatch},
		{"the job used again after its retirement", tok("j", "L90-jkl", 1), ""},
	} {
		err := fence.Admit(held, c.t)
		var re *fence.RefusedError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want admitted", c.name, err)
		case c.want != "" && !errors.As(err, &re):
			t.Errorf("%s: %v, want refused %s", c.name, err, c.want)
		case c.want != "" && re.Reason != c.want:
			t.Errorf("%s: %v, want reason %s", c.name, err, c.want)
		}
	}
	if err := fence.Admit(fence.Held{}, tok("j", "L1", 1)); err != nil {
		t.Errorf("nothing held: %v", err)
	}
	if err := fence.CheckJob(tok("j", "L1", 1), "k"); !errors.Is(err, fence.ErrMismatch) {
		t.Errorf("a token of another job: %v", err)
	}
}

// A refusal matches the SDK's sentinels as a verdict would.
func TestRefusedIs(t *testing.T) {
	stale := fence.Admit(fence.HeldOf(tok("j", "L9-a", 2)), tok("j", "L3-a", 1))
	for _, s := range []error{fence.ErrRefused, fence.ErrStale, worker.ErrStaleGeneration, worker.ErrLostAuthority} {
		if !errors.Is(stale, s) {
			t.Errorf("stale refusal %v does not match %v", stale, s)
		}
	}
	if errors.Is(stale, worker.ErrExpired) || errors.Is(stale, fence.ErrReplay) {
		t.Errorf("stale refusal matches too much")
	}
	now := time.Unix(100, 0)
	exp := fence.CheckDeadline(tok("j", "L9-a", 2), now, now)
	for _, s := range []error{fence.ErrRefused, fence.ErrDeadline, worker.ErrExpired, worker.ErrLostAuthority} {
		if !errors.Is(exp, s) {
			t.Errorf("expired refusal %v does not match %v", exp, s)
		}
	}
	if err := fence.CheckDeadline(tok("j", "L9-a", 2), now, now.Add(-1)); err != nil {
		t.Errorf("before the deadline: %v", err)
	}
	if err := fence.CheckDeadline(tok("j", "L9-a", 2), time.Time{}, now); err != nil {
		t.Errorf("no deadline: %v", err)
	}
	t9 := tok("j", "L9-a", 2)
	replay := &fence.RefusedError{Reason: fence.ReasonReplay, Token: t9, Held: t9, Effect: "e"}
	if !errors.Is(replay, fence.ErrReplay) || errors.Is(replay, worker.ErrLostAuthority) || !fence.CommittedBy(replay, t9) ||
		fence.CommittedBy(replay, tok("j", "L10-a", 3)) {
		t.Errorf("replay %v", replay)
	}
	if !strings.Contains(stale.Error(), "L9-a") {
		t.Errorf("the refusal does not name the lease held: %v", stale)
	}
}

// Tokens at and past the limits of the protocol's integers: generations
// and lease sequences stop at 2^53-1, which every adapter stores in a
// signed 64-bit column.
func TestTokenLimits(t *testing.T) {
	ok := []string{"j/L1/1", "j/L9007199254740991-tag/9007199254740991", "a-b_c/L12-0FMQ6F4uKWTSoQx6pHrB5g/7"}
	for _, s := range ok {
		tk, err := fence.ParseToken(s)
		if err != nil || tk.String() != s {
			t.Errorf("%s: %v %v", s, tk, err)
		}
	}
	bad := []string{
		"j/L1/0", "j/L1/9007199254740992", "j/L1/18446744073709551615", "j/L1/18446744073709551616", "j/L1/-1", "j/L1/+1", "j/L1/01",
		"j/L0/1", "j/L9007199254740992/1", "j/L18446744073709551616/1", "j/L01-x/1", "j/L-x/1", "j/L1-/1", "j/X1/1", "j/L/1",
		"j/Lx1/1", "/L1/1", "j//1", "j/L1", "j/L1/1/1", "j.k/L1/1", "j/L1.2/1", strings.Repeat("j", 65) + "/L1/1",
	}
	for _, s := range bad {
		if tk, err := fence.ParseToken(s); !errors.Is(err, fence.ErrBadToken) {
			t.Errorf("%s: %v %v, want ErrBadToken", s, tk, err)
		}
	}
	if err := tok("j", "L1", 1<<63).Check(); !errors.Is(err, fence.ErrBadToken) {
		t.Errorf("generation 2^63: %v", err)
	}
	if seq, ok := fence.LeaseSeq("L9007199254740991"); !ok || seq != 1<<53-1 {
		t.Errorf("LeaseSeq max: %d %v", seq, ok)
	}
}

// Receipts read back what was written; a bad line is a line with an
// error, never a stop.
func TestReceipts(t *testing.T) {
	rs := []fence.Receipt{
		{V: 1, Resource: "postgres t", Job: "j1", LeaseID: "L5-x", Generation: 2, Effect: "transfer", Position: 17, CommittedAt: 1767225600123456789, Deadline: 1767225601000000000, By: "w\"1\n"},
		{V: 1, Resource: "r", Job: "j2", LeaseID: "L9007199254740991", Generation: fence.MaxGeneration, Effect: "e", Position: 1<<63 - 1, CommittedAt: 1},
	}
	var b strings.Builder
	if err := fence.WriteReceipts(&b, rs); err != nil {
		t.Fatal(err)
	}
	b.WriteString("\n{\"v\":1}\n{\"v\":1,\"resource\":\"r\",\"job\":\"j\",\"lease_id\":\"L1\",\"generation\":1,\"effect\":\"e\",\"position\":1,\"committed_at\":1,\"extra\":1}\n")
	b.WriteString(`{"v":1,"resource":"r","job":"j","lease_id":"L1","generation":9007199254740992,"effect":"e","position":1,"committed_at":1}` + "\n")
	b.WriteString(`{"v":1,"resource":"r","job":"j","lease_id":"L1","generation":1,"effect":"a b","position":1,"committed_at":1}` + "\n")
	lines, err := fence.ReadReceipts(strings.NewReader(b.String()), "f")
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 6 {
		t.Fatalf("%d lines", len(lines))
	}
	for i, r := range rs {
		if lines[i].Err != nil || lines[i].Receipt != r {
			t.Errorf("line %d: %+v %v, want %+v", i, lines[i].Receipt, lines[i].Err, r)
		}
	}
	for i := 2; i < 6; i++ {
		if lines[i].Err == nil {
			t.Errorf("%s: no error for a bad receipt", lines[i].Origin())
		}
	}
	if lines[2].Origin() != "f:4" {
		t.Errorf("origin %s", lines[2].Origin())
	}
}
