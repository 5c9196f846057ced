package sqlitefence_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/adapters/sqlitefence"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/coordinator/coordtest"
	"github.com/maknow/tenure/fence"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/worker"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

func open(t *testing.T) *sqlitefence.Store {
	t.Helper()
	fx, err := sqlitefence.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fx.Close() })
	if _, err := fx.DB().Exec(`CREATE TABLE items (n INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return fx
}

func lease(job, id string, gen uint64, deadline time.Time) fence.Fixed {
	return fence.Fixed{T: fence.Token{Job: job, LeaseID: id, Generation: gen}, Deadline: deadline}
}

func add(ctx context.Context) func(sqlitefence.Tx) error {
	return func(tx sqlitefence.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO items VALUES (1)`)
		return err
	}
}

func items(t *testing.T, fx *sqlitefence.Store) int {
	var n int
	if err := fx.DB().QueryRow(`SELECT count(*) FROM items`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The attacks of pgfence's TestFence, on SQLite: each refused, its writes
// rolled back, recorded.
func TestFence(t *testing.T) {
	fx := open(t)
	ctx := context.Background()
	soon := time.Now().Add(time.Minute)
	g1, g2 := lease("j", "L10-a", 1, soon), lease("j", "L20-b", 2, soon)
	if _, err := fx.Do(ctx, g1, "s1", add(ctx)); err != nil {
		t.Fatal(err)
	}
	if err := fx.Claim(ctx, g2.T); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		l    fence.Fixed
		want error
	}{
		{"generation 1 after generation 2 claimed", g1, worker.ErrStaleGeneration},
		{"another lease id for generation 2", lease("j", "L20-c", 2, soon), fence.ErrMismatch},
		{"generation 2's id with generation 3", lease("j", "L20-b", 3, soon), fence.ErrMismatch},
		{"a later lease with generation 2", lease("j", "L30-d", 2, soon), fence.ErrMismatch},
		{"past the deadline", lease("j", "L20-b", 2, time.Now().Add(-time.Millisecond)), worker.ErrExpired},
		{"a replay of s1", g2, fence.ErrReplay},
		{"generation 2^53", lease("j", "L20-b", 1<<53, soon), fence.ErrBadToken},
		{"generation 2^64-1", lease("j", "L20-b", 1<<64-1, soon), fence.ErrBadToken},
	} {
		effect := "s2"
		if c.want == fence.ErrReplay {
			effect = "s1"
		}
		if _, err := fx.Do(ctx, c.l, effect, add(ctx)); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if n := items(t, fx); n != 1 {
		t.Fatalf("%d items: a refused write was committed", n)
	}
	top := lease("k", "L9007199254740991-z", fence.MaxGeneration, soon)
	if _, err := fx.Do(ctx, top, "s", add(ctx)); err != nil {
		t.Fatal(err)
	}
	var rs []fence.Receipt
	_ = fx.Receipts(ctx, 0, func(r fence.Receipt) error { rs = append(rs, r); return nil })
	if len(rs) != 2 || rs[1].Token() != top.T || rs[0].Token() != g1.T {
		t.Fatalf("receipts %+v", rs)
	}
	by, err := fx.Refusals(ctx)
	if err != nil || by[fence.ReasonStale] != 1 || by[fence.ReasonMismatch] != 3 || by[fence.ReasonExpired] != 1 || by[fence.ReasonReplay] != 1 {
		t.Fatalf("refusals %v %v", by, err)
	}
}

// Two handles on one file, racing generations: SQLite's write lock
// serializes them, and no older lease commits after a newer one.
func TestRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	a, err := sqlitefence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := sqlitefence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := uint64(1); g <= 6; g++ {
		fx := a
		if g%2 == 0 {
			fx = b
		}
		wg.Go(func() {
			l := lease("r", "L"+string(rune('0'+g))+"-t", g, time.Now().Add(time.Minute))
			for i := range 10 {
				if _, err := fx.Do(ctx, l, string(rune('a'+g))+string(rune('a'+i)), func(sqlitefence.Tx) error { return nil }); err != nil && !errors.Is(err, fence.ErrStale) {
					t.Errorf("generation %d: %v", g, err)
				}
			}
		})
	}
	wg.Wait()
	last := uint64(0)
	_ = a.Receipts(ctx, 0, func(r fence.Receipt) error {
		if r.Generation < last {
			t.Errorf("generation %d committed at %d after %d", r.Generation, r.Position, last)
		}
		last = r.Generation
		return nil
	})
}

// A worker whose renewals stopped (its process paused: here its Worker is
// closed, so it renews nothing, while its handler goes on) writes after a
// newer generation started and claimed the job through worker.Run's
// binding: refused, with the SDK's typed error.
func TestPausedWorker(t *testing.T) {
	fx := open(t)
	srv := testutil.StartServer(t)
	cnc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cnc.Close)
	coordtest.RunGroup(t, coordinator.Config{ID: "c1", Conn: cnc}, 0, 15*time.Second)
	nc, _ := testutil.Connect(t, srv.ClientURL())
	ctx := context.Background()
	w1, err := worker.Connect(nc, "w1")
	if err != nil {
		t.Fatal(err)
	}
	l1, err := w1.Acquire(ctx, "job", worker.WithLeaseDuration(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	bctx, err := fx.Bind(ctx, l1)
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
	_, err = sqlitefence.From(bctx).Do(context.Background(), "step", add(ctx))
	if !errors.Is(err, worker.ErrStaleGeneration) || !errors.Is(err, worker.ErrLostAuthority) {
		t.Fatalf("the paused worker's write: %v, want a stale refusal", err)
	}
	if n := items(t, fx); n != 0 {
		t.Fatalf("%d items", n)
	}
}

// A replay is refused before fn runs (see pgfence's TestReplayBeforeFn).
func TestReplayBeforeFn(t *testing.T) {
	fx := open(t)
	ctx := context.Background()
	if _, err := fx.DB().Exec(`CREATE TABLE once (job TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	soon := time.Now().Add(time.Minute)
	insert := func(tx sqlitefence.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO once VALUES ('j')`)
		return err
	}
	if _, err := fx.Do(ctx, lease("j", "L10-a", 1, soon), "effect", insert); err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err := fx.Do(ctx, lease("j", "L20-b", 2, soon), "effect", func(tx sqlitefence.Tx) error { ran = true; return insert(tx) })
	if !errors.Is(err, fence.ErrReplay) || ran {
		t.Fatalf("the next generation's replay: %v (fn ran: %v), want a replay refusal before fn", err, ran)
	}
}
