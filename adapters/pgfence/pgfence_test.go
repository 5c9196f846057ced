package pgfence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/maknow/tenure/adapters/pgfence"
	"github.com/maknow/tenure/fence"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/worker"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// newStore starts a PostgreSQL server (or skips) and returns a migrated
// Store on it with an accounts table: a and b, 100 each.
func newStore(t *testing.T, opts ...pgfence.Option) (*pgfence.Store, *pgxpool.Pool) {
	t.Helper()
	pg := testutil.StartPostgres(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	fx, err := pgfence.New(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := fx.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fx.Migrate(ctx); err != nil { // twice: idempotent
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL); INSERT INTO accounts VALUES ('a', 100), ('b', 100)`); err != nil {
		t.Fatal(err)
	}
	return fx, pool
}

func lease(job, id string, gen uint64, deadline time.Time) fence.Fixed {
	return fence.Fixed{T: fence.Token{Job: job, LeaseID: id, Generation: gen}, Deadline: deadline}
}

func transfer(ctx context.Context, n int64) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance - $1 WHERE id = 'a'`, n); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $1 WHERE id = 'b'`, n)
		return err
	}
}

func balances(t *testing.T, pool *pgxpool.Pool) (a, b int64) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT balance FROM accounts WHERE id='a'), (SELECT balance FROM accounts WHERE id='b')`).Scan(&a, &b); err != nil {
		t.Fatal(err)
	}
	return a, b
}

func refusedAs(t *testing.T, what string, err error, reason fence.Reason) *fence.RefusedError {
	t.Helper()
	var re *fence.RefusedError
	if !errors.As(err, &re) || re.Reason != reason {
		t.Fatalf("%s: %v, want a %s refusal", what, err, reason)
	}
	return re
}

// Every attack on the fence is refused, rolls back the writes made in the
// transaction, and is recorded; the effects that were committed are the
// receipts.
func TestFence(t *testing.T) {
	fx, pool := newStore(t)
	ctx := context.Background()
	soon := time.Now().Add(time.Minute)
	g1 := lease("j1", "L10-aaaa", 1, soon)
	c, err := fx.Do(ctx, g1, "step-1", transfer(ctx, 10))
	if err != nil || c.Position == 0 {
		t.Fatalf("first write: %v %v", c, err)
	}
	// Generation 2 claims the job: generation 1's next write is stale.
	g2 := lease("j1", "L20-bbbb", 2, soon)
	if err := fx.Claim(ctx, g2.T); err != nil {
		t.Fatal(err)
	}
	re := refusedAs(t, "generation 1 after generation 2 claimed", func() error { _, err := fx.Do(ctx, g1, "step-2", transfer(ctx, 10)); return err }(), fence.ReasonStale)
	if re.Held != g2.T || !errors.Is(re, worker.ErrStaleGeneration) || !errors.Is(re, worker.ErrLostAuthority) {
		t.Fatalf("stale refusal %v: held %v", re, re.Held)
	}
	for _, c := range []struct {
		name string
		l    fence.Fixed
		want fence.Reason
	}{
		{"another lease id for generation 2", lease("j1", "L20-bbbc", 2, soon), fence.ReasonMismatch},
		{"generation 2's lease id with generation 3", lease("j1", "L20-bbbb", 3, soon), fence.ReasonMismatch},
		{"a later lease with generation 2", lease("j1", "L30-cccc", 2, soon), fence.ReasonMismatch},
		{"an older lease with a higher generation", lease("j1", "L15-dddd", 7, soon), fence.ReasonStale},
		{"generation 2 past its deadline", lease("j1", "L20-bbbb", 2, time.Now().Add(-time.Millisecond)), fence.ReasonExpired},
	} {
		_, err := fx.Do(ctx, c.l, "step-x", transfer(ctx, 1000))
		refusedAs(t, c.name, err, c.want)
	}
	// A replay of step-1: by another lease, and by the one that made it.
	if _, err := fx.Do(ctx, g2, "step-1", transfer(ctx, 10)); !errors.Is(err, fence.ErrReplay) || fence.CommittedBy(err, g2.T) {
		t.Fatalf("replay by generation 2: %v", err)
	}
	if c, err := fx.Do(ctx, g2, "step-2", transfer(ctx, 5)); err != nil {
		t.Fatalf("generation 2's write: %v %v", c, err)
	}
	if _, err := fx.Do(ctx, g2, "step-2", transfer(ctx, 5)); !fence.CommittedBy(err, g2.T) {
		t.Fatalf("a retried step-2: %v, want a replay naming generation 2", err)
	}
	if a, b := balances(t, pool); a != 85 || b != 115 {
		t.Fatalf("balances %d %d, want 85 115: a refused write was committed", a, b)
	}
	// The job id used again after its retirement: generation 1 of a later lease.
	if _, err := fx.Do(ctx, lease("j1", "L90-eeee", 1, soon), "step-3", transfer(ctx, 1)); err != nil {
		t.Fatalf("a new life of j1: %v", err)
	}
	// Bad tokens and effect ids never reach the database.
	for _, l := range []fence.Fixed{lease("j1", "L20-bbbb", 1<<53, soon), lease("j1", "L20-bbbb", 1<<63, soon),
		lease("j1", "L20-bbbb", 1<<64-1, soon), lease("j1", "L9007199254740992-x", 3, soon), lease("j.1", "L20-b", 2, soon), lease("j1", "M20", 2, soon)} {
		if _, err := fx.Do(ctx, l, "e", transfer(ctx, 1000)); !errors.Is(err, fence.ErrBadToken) {
			t.Errorf("%v: %v, want ErrBadToken", l.T, err)
		}
		if err := fx.Claim(ctx, l.T); !errors.Is(err, fence.ErrBadToken) {
			t.Errorf("claim %v: %v, want ErrBadToken", l.T, err)
		}
	}
	for _, e := range []string{"", "a b", strings.Repeat("e", fence.MaxEffectLen+1), "é"} {
		if _, err := fx.Do(ctx, g2, e, transfer(ctx, 1000)); !errors.Is(err, fence.ErrBadEffect) {
			t.Errorf("effect %q: %v", e, err)
		}
	}
	// fn's error: nothing committed, returned as it is.
	boom := errors.New("boom")
	if _, err := fx.Do(ctx, lease("j1", "L90-eeee", 1, soon), "step-4", func(pgx.Tx) error { return boom }); err != boom {
		t.Fatalf("fn's error: %v", err)
	}
	var rs []fence.Receipt
	if err := fx.Receipts(ctx, 0, func(r fence.Receipt) error { rs = append(rs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, r := range rs {
		if err := r.Check(); err != nil {
			t.Errorf("receipt %+v: %v", r, err)
		}
		got = append(got, r.Token().String()+" "+r.Effect)
	}
	want := []string{"j1/L10-aaaa/1 step-1", "j1/L20-bbbb/2 step-2", "j1/L90-eeee/1 step-3"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("receipts %q, want %q", got, want)
	}
	refusals, err := fx.Refusals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(refusals) != 8 {
		t.Errorf("%d refusals recorded, want 8: %+v", len(refusals), refusals)
	}
}

// The protocol's largest generation and lease sequence, 2^53-1, are stored
// and read back exactly (PostgreSQL's BIGINT is signed).
func TestLimits(t *testing.T) {
	fx, _ := newStore(t)
	ctx := context.Background()
	top := lease("j", "L9007199254740991-z", fence.MaxGeneration, time.Now().Add(time.Minute))
	if _, err := fx.Do(ctx, top, "e", func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	h, err := fx.Held(ctx, "j")
	if err != nil || h != fence.HeldOf(top.T) {
		t.Fatalf("held %+v %v", h, err)
	}
	var r fence.Receipt
	if err := fx.Receipts(ctx, 0, func(x fence.Receipt) error { r = x; return nil }); err != nil {
		t.Fatal(err)
	}
	if r.Token() != top.T {
		t.Fatalf("receipt %+v", r)
	}
	// Below it: stale, whatever its generation says.
	if _, err := fx.Do(ctx, lease("j", "L9007199254740990-z", fence.MaxGeneration, time.Now().Add(time.Minute)), "f", func(pgx.Tx) error { return nil }); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("below the top: %v", err)
	}
}

// Generations racing for one job: whatever the interleaving, the
// database never commits an older lease's effect after a newer one's.
func TestRace(t *testing.T) {
	fx, _ := newStore(t)
	ctx := context.Background()
	const gens = 8
	var wg sync.WaitGroup
	for g := uint64(1); g <= gens; g++ {
		wg.Go(func() {
			l := lease("race", "L"+string(rune('0'+g))+"-t", g, time.Now().Add(time.Minute))
			for i := range 20 {
				_, err := fx.Do(ctx, l, "e"+string(rune('0'+g))+"-"+string(rune('a'+i)), func(tx pgx.Tx) error { return nil })
				if err != nil && !errors.Is(err, fence.ErrStale) {
					t.Errorf("generation %d: %v", g, err)
				}
			}
		})
	}
	wg.Wait()
	last := uint64(0)
	if err := fx.Receipts(ctx, 0, func(r fence.Receipt) error {
		if r.Generation < last {
			t.Errorf("generation %d committed at %d after generation %d", r.Generation, r.Position, last)
		}
		last = r.Generation
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A replay is refused before fn runs: an effect whose own writes have
// unique keys (a row per job) fails on them otherwise, and its attempt
// is retried for ever (the drain of 10,000 jobs found one job DEAD after
// 100 attempts so, its first commit's result lost with a killed worker).
func TestReplayBeforeFn(t *testing.T) {
	fx, pool := newStore(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE once (job text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	soon := time.Now().Add(time.Minute)
	insert := func(tx pgx.Tx) error { _, err := tx.Exec(ctx, `INSERT INTO once VALUES ('j')`); return err }
	g1, g2 := lease("j", "L10-a", 1, soon), lease("j", "L20-b", 2, soon)
	if _, err := fx.Do(ctx, g1, "effect", insert); err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err := fx.Do(ctx, g2, "effect", func(tx pgx.Tx) error { ran = true; return insert(tx) })
	if !errors.Is(err, fence.ErrReplay) || ran {
		t.Fatalf("the next generation's replay: %v (fn ran: %v), want a replay refusal before fn", err, ran)
	}
	if _, err := fx.Do(ctx, g2, "effect", insert); !errors.Is(err, fence.ErrReplay) {
		t.Fatalf("again: %v", err)
	}
}
