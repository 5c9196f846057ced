package kvfence_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/coordinator/coordtest"
	"github.com/maknow/tenure/fence"
	"github.com/maknow/tenure/fence/kvfence"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/worker"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

func lease(job, id string, gen uint64, dl time.Time) fence.Fixed {
	return fence.Fixed{T: fence.Token{Job: job, LeaseID: id, Generation: gen}, Deadline: dl}
}

func put(key, val string) func(*kvfence.Writes) error {
	return func(w *kvfence.Writes) error { w.Put(key, []byte(val)); return nil }
}

func value(t *testing.T, kv jetstream.KeyValue, key string) string {
	e, err := kv.Get(context.Background(), key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(e.Value())
}

// The attacks on a KV bucket: each refused, none of its keys written.
func TestFence(t *testing.T) {
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	ctx := context.Background()
	fx, err := kvfence.New(ctx, js, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvfence.New(ctx, js, "ledger"); err != nil { // again: opens it
		t.Fatal(err)
	}
	soon := time.Now().Add(time.Minute)
	g1, g2 := lease("j", "L10-a", 1, soon), lease("j", "L20-b", 2, soon)
	if _, err := fx.Do(ctx, g1, "s1", put("balance.a", "90")); err != nil {
		t.Fatal(err)
	}
	if err := fx.Claim(ctx, g2.T); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		l      fence.Fixed
		effect string
		want   error
	}{
		{"generation 1 after generation 2 claimed", g1, "s2", worker.ErrStaleGeneration},
		{"another lease id for generation 2", lease("j", "L20-c", 2, soon), "s2", fence.ErrMismatch},
		{"a later lease with generation 2", lease("j", "L30-c", 2, soon), "s2", fence.ErrMismatch},
		{"past its deadline", lease("j", "L20-b", 2, time.Now().Add(-time.Second)), "s2", worker.ErrExpired},
		{"a replay of s1", g2, "s1", fence.ErrReplay},
		{"generation 2^53", lease("j", "L20-b", 1<<53, soon), "s2", fence.ErrBadToken},
	} {
		if _, err := fx.Do(ctx, c.l, c.effect, put("balance.a", "0")); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if v := value(t, fx.KeyValue(), "balance.a"); v != "90" {
		t.Fatalf("balance.a = %q: a refused write was stored", v)
	}
	if _, err := fx.Do(ctx, g2, "s2", put("fence.j", "x")); err == nil {
		t.Fatal("an effect wrote the fence key")
	}
	top := lease("k", "L9007199254740991-z", fence.MaxGeneration, soon)
	if _, err := fx.Do(ctx, top, "s", put("balance.k", "1")); err != nil {
		t.Fatal(err)
	}
	rs, err := fx.Receipts(ctx)
	if err != nil || len(rs) != 2 || rs[0].Token() != g1.T || rs[1].Token() != top.T || rs[0].Position >= rs[1].Position {
		t.Fatalf("receipts %+v %v", rs, err)
	}
	for _, r := range rs {
		if err := r.Check(); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
}

// Racing generations: the batches' compare-and-set keeps a job's effects
// in its leases' order.
func TestRace(t *testing.T) {
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	ctx := context.Background()
	fx, err := kvfence.New(ctx, js, "race")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := uint64(1); g <= 6; g++ {
		wg.Go(func() {
			l := lease("r", "L"+string(rune('0'+g))+"-t", g, time.Now().Add(time.Minute))
			for i := range 10 {
				if _, err := fx.Do(ctx, l, string(rune('a'+g))+string(rune('a'+i)), put("v", "x")); err != nil && !errors.Is(err, fence.ErrStale) {
					t.Errorf("generation %d: %v", g, err)
				}
			}
		})
	}
	wg.Wait()
	rs, err := fx.Receipts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := uint64(0)
	for _, r := range rs {
		if r.Generation < last {
			t.Errorf("generation %d at %d after %d", r.Generation, r.Position, last)
		}
		last = r.Generation
	}
}

// A worker whose renewals stopped writes after a newer generation started
// and claimed the job through worker.Run's binding: refused.
func TestPausedWorker(t *testing.T) {
	srv := testutil.StartServer(t)
	cnc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cnc.Close)
	coordtest.RunGroup(t, coordinator.Config{ID: "c1", Conn: cnc}, 0, 15*time.Second)
	nc, js := testutil.Connect(t, srv.ClientURL())
	ctx := context.Background()
	fx, err := kvfence.New(ctx, js, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	w1, err := worker.Connect(nc, "w1")
	if err != nil {
		t.Fatal(err)
	}
	l1, err := w1.Acquire(ctx, "job", worker.WithLeaseDuration(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	b1ctx, err := fx.Bind(ctx, l1)
	if err != nil {
		t.Fatal(err)
	}
	w1.Close() // paused: no more renewals
	w2, err := worker.Connect(nc, "w2")
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	var l2 *worker.Lease
	if err := testutil.Poll(20*time.Second, func() (err error) {
		l2, err = w2.Acquire(ctx, "job", worker.WithLeaseDuration(time.Minute))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.Bind(ctx, l2); err != nil {
		t.Fatal(err)
	}
	if _, err := kvfence.From(b1ctx).Do(ctx, "pay", put("paid", "1")); !errors.Is(err, worker.ErrStaleGeneration) {
		t.Fatalf("the paused worker's write: %v", err)
	}
	if v := value(t, fx.KeyValue(), "paid"); v != "" {
		t.Fatalf("paid = %q", v)
	}
}
