package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/fence"
	sdk "github.com/maknow/tenure/worker"
)

// tenure audit --effects: effects committed within their lease's authority
// are confirmed; one committed after its lease was released, one after a
// newer generation started, one under a lease the log never gave, one
// committed twice and one out of its leases' order are findings, each
// naming its receipt, lease and inputs; exit 1.
func TestAuditEffects(t *testing.T) {
	dir := t.TempDir()
	d := startDeployment(t, filepath.Join(dir, "data"))
	ctx := context.Background()
	w1, err := sdk.Connect(d.nc, "w1")
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	w2, err := sdk.Connect(d.nc, "w2")
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	pos := uint64(0)
	rec := func(tok fence.Token, effect string, at time.Time) fence.Receipt {
		pos++
		return fence.Receipt{V: 1, Resource: "db", Job: tok.Job, LeaseID: tok.LeaseID, Generation: tok.Generation, Effect: effect, Position: pos, CommittedAt: at.UnixNano()}
	}
	var rs []fence.Receipt
	// a: one effect, in time, by generation 1.
	la, err := w1.Acquire(ctx, "a", sdk.WithLeaseDuration(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	rs = append(rs, rec(la.Token(), "pay", time.Now()))
	if err := la.Complete(ctx, events.OutcomeSuccess, ""); err != nil {
		t.Fatal(err)
	}
	// b: generation 1 commits, is released; generation 2 starts and
	// commits; then generation 1 commits again (stale), twice.
	lb1, err := w1.Acquire(ctx, "b", sdk.WithLeaseDuration(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	rs = append(rs, rec(lb1.Token(), "step-1", time.Now()))
	if err := lb1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	afterRelease := time.Now()
	rs = append(rs, rec(lb1.Token(), "step-2", afterRelease)) // no_authority: released, no newer yet
	lb2, err := w2.Acquire(ctx, "b", sdk.WithLeaseDuration(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	rs = append(rs, rec(lb2.Token(), "step-3", time.Now()))
	rs = append(rs, rec(lb1.Token(), "step-4", time.Now()))                // after_newer_generation (and out_of_order)
	rs = append(rs, rec(lb2.Token(), "step-1", time.Now()))                // committed_twice
	forged := fence.Token{Job: "b", LeaseID: "L999-forged", Generation: 2} // unknown_lease
	rs = append(rs, rec(forged, "step-5", time.Now()))
	file := filepath.Join(dir, "effects.jsonl")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.WriteReceipts(f, rs); err != nil {
		t.Fatal(err)
	}
	f.WriteString("{\"v\":1,\"bad\":true}\n")
	f.Close()

	code, out, errOut := runAuditCmd("--nats-url", d.srv.ClientURL(), "--effects", file, "--list", "-1")
	if code != 1 {
		t.Fatalf("audit --effects: exit %d, want 1\n%s%s", code, out, errOut)
	}
	t.Logf("audit --effects:\n%s", out)
	for _, want := range []string{
		"effects:     6 (8 receipts given, 3 confirmed)",
		file + ":3: no_authority: effect step-2 of job b was committed at",
		"after its authority ended at",
		file + ":5: after_newer_generation: effect step-4 of job b was committed at",
		"after generation 2 (lease " + lb2.Token().LeaseID + ") started at",
		file + ":5: out_of_order: effect step-4 of job b by " + lb1.Token().String(),
		file + ":6: committed_twice: effect step-1 of job b was committed again by " + lb2.Token().String(),
		file + ":7: unknown_lease: effect step-5 of job b was committed under lease L999-forged",
		file + ":8: invalid: not a receipt",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the summary", want)
		}
	}
	// The clean ones alone: exit 0.
	clean := filepath.Join(dir, "clean.jsonl")
	f, _ = os.Create(clean)
	_ = fence.WriteReceipts(f, []fence.Receipt{rs[0], rs[1], rs[3]})
	f.Close()
	if code, out, errOut := runAuditCmd("--nats-url", d.srv.ClientURL(), "--effects", clean); code != 0 || !strings.Contains(out, "effects:     0 (3 receipts given, 3 confirmed)") {
		t.Fatalf("clean effects: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := runAuditCmd("--nats-url", d.srv.ClientURL(), "--effects", clean, "--from", "5"); code != 2 || !strings.Contains(errOut, "--effects") {
		t.Fatalf("--effects --from: exit %d %s", code, errOut)
	}
}
