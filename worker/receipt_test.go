package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/receipt"
)

// With receipts on, the SDK keeps a receipt of every input of the worker's
// the stream acknowledged (its stored subject and body) and of every
// decision addressed to it (its stored sequence, cause and chain value),
// exactly as stored.
func TestReceipts(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var got []receipt.Receipt
	keep := receipt.Func(func(r receipt.Receipt) error {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		return nil
	})
	w := e.worker("w1", WithReceipts(keep))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := w.Acquire(ctx, "j1", WithLeaseDuration(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Progress(ctx, 50); err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, events.OutcomeSuccess, ""); err != nil {
		t.Fatal(err)
	}
	e.caughtUp()
	var mine, addressed []msg
	for _, m := range e.readStream("TENURE_IN") {
		if strings.HasPrefix(m.subject, "tenure.in.worker.w1.") {
			mine = append(mine, m)
		}
	}
	for _, m := range e.readStream("TENURE_OUT") {
		if strings.HasPrefix(m.subject, "tenure.out.w1.") {
			addressed = append(addressed, m)
		}
	}
	// Every decision addressed to w1 was read before its verdict returned
	// (the verdicts are among them): wait for the receipts of all.
	testutil.WaitFor(t, 10*time.Second, "every receipt", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= len(mine)+len(addressed)
	})
	mu.Lock()
	defer mu.Unlock()
	ins, decs := map[uint64]receipt.Receipt{}, map[uint64]receipt.Receipt{}
	for _, r := range got {
		if err := r.Check(); err != nil || r.By != "worker w1" {
			t.Fatalf("receipt %+v: %v", r, err)
		}
		switch r.Kind {
		case receipt.KindInput:
			ins[r.Seq] = r
		case receipt.KindDecision:
			decs[r.Seq] = r
		}
	}
	if len(mine) != 3 || len(ins) != len(mine) || len(decs) != len(addressed) || len(got) != len(mine)+len(addressed) {
		t.Fatalf("%d inputs, %d decisions addressed to w1; receipts: %d of inputs, %d of decisions, %d in all", len(mine), len(addressed), len(ins), len(decs), len(got))
	}
	for _, m := range mine {
		sum := sha256.Sum256(m.data)
		if r := ins[m.seq]; r.Stream != "TENURE_IN" || r.Subject != m.subject || r.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("input %d %s: receipt %+v", m.seq, m.subject, r)
		}
	}
	for _, m := range addressed {
		r := decs[m.seq]
		if r.Stream != "TENURE_OUT" || r.Chain == "" || r.Chain != m.header.Get(events.HeaderChain) || r.Cause == 0 {
			t.Errorf("decision %d: receipt %+v, chain header %q", m.seq, r, m.header.Get(events.HeaderChain))
		}
	}
}
