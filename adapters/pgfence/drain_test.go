package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/adapters/pgfence"
	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/fence"
	"github.com/maknow/tenure/internal/drain"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/worker"
)

// drainHooks is the effect of a drain worker process on PostgreSQL
// (WorkerConfig.Extra: "dsn", and "mode"): fenced, each attempt's job is
// claimed before its handler (worker.WithEffects) and its effect is one
// fenced transaction, a row of drain_effects; unfenced, what a resource
// without a fence does: the row is written whatever the lease, with a
// receipt of it in drain_unfenced.
func drainHooks(cfg drain.WorkerConfig) (drain.Hooks, func(), error) {
	ctx := context.Background()
	pcfg, err := pgxpool.ParseConfig(cfg.Extra["dsn"])
	if err != nil {
		return drain.Hooks{}, nil, err
	}
	pcfg.MaxConns = int32(cfg.Concurrency + 2)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return drain.Hooks{}, nil, err
	}
	fx, err := pgfence.New(pool)
	if err != nil {
		pool.Close()
		return drain.Hooks{}, nil, err
	}
	switch cfg.Extra["mode"] {
	case "fenced":
		return drain.Hooks{
			Options: []worker.RunOption{worker.WithEffects(fx)},
			Effect: func(ctx context.Context, _ *nats.Conn, j *worker.Job) error {
				_, err := pgfence.From(ctx).Do(ctx, "effect", func(tx pgx.Tx) error {
					t := j.Lease.Token()
					_, err := tx.Exec(ctx, `INSERT INTO drain_effects (job, lease_id, generation) VALUES ($1, $2, $3)`, t.Job, t.LeaseID, int64(t.Generation))
					return err
				})
				if errors.Is(err, fence.ErrReplay) {
					return nil // in place: an earlier attempt committed it, in its authority
				}
				return err
			},
		}, pool.Close, nil
	case "unfenced":
		return drain.Hooks{
			Effect: func(ctx context.Context, _ *nats.Conn, j *worker.Job) error {
				t := j.Lease.Token()
				_, err := pool.Exec(ctx, `INSERT INTO drain_unfenced (job, effect, lease_id, generation) VALUES ($1, 'effect', $2, $3)`, t.Job, t.LeaseID, int64(t.Generation))
				return err
			},
		}, pool.Close, nil
	}
	pool.Close()
	return drain.Hooks{}, nil, fmt.Errorf("drain: mode %q", cfg.Extra["mode"])
}

// carelessWork is the paused worker's longest attempt: long enough that,
// when it is paused, most of its attempts are in their handlers (their
// claims, made before, take several round trips to the database).
const carelessWork = 160 * time.Millisecond

// drainStore starts PostgreSQL with the fence's tables and the drain's.
func drainStore(t *testing.T) (*testutil.Postgres, *pgfence.Store, *pgxpool.Pool) {
	pg := testutil.StartPostgres(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	fx, err := pgfence.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := fx.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
CREATE TABLE drain_effects (job text PRIMARY KEY, lease_id text NOT NULL, generation bigint NOT NULL);
CREATE TABLE drain_unfenced (position bigserial PRIMARY KEY, job text NOT NULL, effect text NOT NULL, lease_id text NOT NULL,
	generation bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	return pg, fx, pool
}

// The drain (internal/drain: three worker processes, SIGKILLs, a careless
// worker SIGSTOPped past its leases) against PostgreSQL through the
// fence: every job COMPLETED by exactly one SUCCESS, its effect committed
// exactly once, by a lease that held authority then by the log's clock
// (the audit of the effect receipts finds nothing), and the paused
// worker's stale writes refused by the database and counted.
func TestDrainPostgres(t *testing.T) {
	pg, fx, pool := drainStore(t)
	ctx := context.Background()
	staleSeen := func() bool { // a refusal of the paused worker's writes, once it is resumed
		refusals, err := fx.Refusals(ctx)
		return err == nil && slices.ContainsFunc(refusals, func(rf pgfence.Refusal) bool {
			return rf.Reason == fence.ReasonStale || rf.Reason == fence.ReasonExpired
		})
	}
	out := drain.Run(t, drain.Options{Jobs: drain.Size(t), Extra: map[string]string{"dsn": pg.DSN, "mode": "fenced"}, CarelessWork: carelessWork, StaleSeen: staleSeen})
	r := drain.CheckEnds("drain", out.Jobs, out.Decisions)
	for _, f := range r.Findings.Items {
		t.Error(f)
	}
	var lines []fence.ReceiptLine
	if err := fx.Receipts(ctx, 0, func(rc fence.Receipt) error {
		lines = append(lines, fence.ReceiptLine{Receipt: rc, File: "tenure_effects", Line: int(rc.Position)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	eff := audit.CheckEffectsOf(out.Decisions, lines, 0, 20)
	for _, f := range eff.Findings.Items {
		t.Errorf("effect: %s: %s: %s", f.Origin, f.Kind, f.Problem)
	}
	per := map[string]int{}
	for _, l := range lines {
		per[l.Job]++
	}
	for _, j := range out.Jobs {
		if per[j] != 1 {
			t.Errorf("job %s: %d effects committed", j, per[j])
		}
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM drain_effects`).Scan(&rows); err != nil || rows != len(out.Jobs) {
		t.Errorf("drain_effects holds %d rows (%v), want %d", rows, err, len(out.Jobs))
	}
	refusals, err := fx.Refusals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	by := map[fence.Reason]int{}
	for _, rf := range refusals {
		by[rf.Reason]++
	}
	if by[fence.ReasonStale]+by[fence.ReasonExpired] == 0 {
		t.Errorf("no stale write was refused (%v): the paused careless worker's handlers did not write after losing their leases", by)
	}
	if out.Kills == 0 || out.Pauses == 0 || r.Failed == 0 {
		t.Errorf("the faults did not happen: %d kills, %d pauses, %d failures", out.Kills, out.Pauses, r.Failed)
	}
	t.Logf("drain (postgres, fenced): jobs=%d completed=%d in %v (%.0f jobs/s); faults: kills=%d pauses=%d; offers=%d failed=%d other ends %v; "+
		"effects committed=%d (audit: %d confirmed, %d findings); refused: stale=%d expired=%d replay=%d mismatch=%d; inputs=%d decisions=%d",
		r.Jobs, r.Completed, out.Elapsed.Round(1e6), float64(r.Jobs)/out.Elapsed.Seconds(), out.Kills, out.Pauses, r.Offers, r.Failed, r.Ended,
		len(lines), eff.Confirmed, eff.Findings.Count, by[fence.ReasonStale], by[fence.ReasonExpired], by[fence.ReasonReplay], by[fence.ReasonMismatch],
		out.Inputs, len(out.Decisions))
}

// The same drain with the fence disabled (what a resource without one
// does: every write is committed, whatever the lease): the audit of the
// receipts fails, naming the stale commits (the paused worker's, after
// its leases ended or a newer generation started; effects committed
// twice).
func TestDrainUnfenced(t *testing.T) {
	pg, _, pool := drainStore(t)
	ctx := context.Background()
	jobs := min(drain.Size(t), 500)
	staleSeen := func() bool { // an effect committed twice: the paused worker's, once it is resumed
		var n int
		return pool.QueryRow(ctx, `SELECT count(*) FROM drain_unfenced`).Scan(&n) == nil && n > jobs
	}
	out := drain.Run(t, drain.Options{Jobs: jobs, Extra: map[string]string{"dsn": pg.DSN, "mode": "unfenced"}, CarelessWork: carelessWork, StaleSeen: staleSeen})
	rows, err := pool.Query(ctx, `SELECT position, job, effect, lease_id, generation, committed_at FROM drain_unfenced ORDER BY position`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (fence.ReceiptLine, error) {
		l := fence.ReceiptLine{File: "drain_unfenced", Receipt: fence.Receipt{V: 1, Resource: "postgres drain_unfenced"}}
		var pos, gen int64
		var at time.Time
		err := row.Scan(&pos, &l.Job, &l.Effect, &l.LeaseID, &gen, &at)
		l.Position, l.Generation, l.CommittedAt, l.Line = uint64(pos), uint64(gen), at.UnixNano(), int(pos)
		return l, err
	})
	if err != nil {
		t.Fatal(err)
	}
	eff := audit.CheckEffectsOf(out.Decisions, lines, 0, -1)
	if eff.Findings.Count == 0 {
		t.Fatalf("the audit found no stale commit in %d effects without a fence", len(lines))
	}
	var named []string
	for _, f := range eff.Findings.Items {
		switch f.Kind {
		case audit.EffectNoAuthority, audit.EffectAfterNewer, audit.EffectTwice, audit.EffectOutOfOrder:
		default:
			t.Errorf("finding of kind %s: %s", f.Kind, f.Problem)
		}
		if len(named) < 10 {
			named = append(named, fmt.Sprintf("%s: %s: %s", f.Origin, f.Kind, f.Problem))
		}
	}
	t.Logf("drain (postgres, no fence): %d effects committed for %d jobs; the audit: %d findings %v, e.g.\n  %s",
		len(lines), len(out.Jobs), eff.Findings.Count, eff.Kinds, strings.Join(named, "\n  "))
}
