// Package pgfence makes a stale lease holder's write fail at a PostgreSQL
// database (package fence, PROTOCOL.md §25): a fenced transaction commits
// only if the job's fence row holds no newer lease than the one writing,
// the lease's deadline has not passed by the database's clock, and the
// effect was not committed before; and each commit leaves an effect
// receipt in the same transaction, which `tenure audit --effects` checks
// against the log.
//
//	pool, _ := pgxpool.New(ctx, dsn)
//	fx, _ := pgfence.New(pool)
//	err := fx.Migrate(ctx) // the tables, once
//	err = w.Run(ctx, "transfers", func(ctx context.Context, j *worker.Job) error {
//		_, err := pgfence.From(ctx).Do(ctx, "transfer", func(tx pgx.Tx) error {
//			_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = 'a'")
//			return err
//		})
//		if fence.CommittedBy(err, j.Lease.Token()) || errors.Is(err, fence.ErrReplay) {
//			return nil // in place already
//		}
//		return err
//	}, worker.WithEffects(fx))
//
// # Tables
//
// Migrate creates three tables (prefix "tenure" unless WithPrefix):
//
//   - tenure_fence (job, lease_seq, lease_id, generation, updated_at): one
//     row per job, the newest lease admitted (fence.Held);
//   - tenure_effects (position, job, effect, lease_id, generation,
//     committed_at, deadline): the outbox of effects per (job,
//     generation), one row per committed effect, unique per (job,
//     effect), each committed at a time before its lease's deadline (a
//     CHECK constraint); position is a bigserial, in commit order for
//     each job (the fence row's lock serializes a job's commits);
//   - tenure_refusals: every refused write or claim, with its reason, for
//     operators (nothing else reads it; a worker that keeps sending stale
//     writes grows it: truncate it as you see fit).
//
// The command pgfence (cmd/pgfence) creates them and exports the
// receipts and refusals: `pgfence receipts > effects.jsonl`, then
// `tenure audit --effects effects.jsonl`.
//
// # A fenced transaction
//
// Do runs in one transaction: it locks the job's fence row (SELECT ... FOR
// UPDATE, or inserts it) and applies fence.Admit to the lease's token
// (refused: nothing runs); runs fn; then sends the effect's row and COMMIT
// in one round trip, so that the database checks the deadline
// (committed_at, the server's clock_timestamp(), before the lease's
// deadline) and commits back to back, whatever the worker does once they
// are sent. A paused worker that resumes is refused: by the fence once a
// newer lease claimed the job (worker.Run claims it before each handler,
// WithEffects), by the deadline otherwise. Generations and lease
// sequences are stored as BIGINT (signed): tokens past 2^53-1, the
// protocol's limit, are refused before anything is sent.
package pgfence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/maknow/tenure/fence"
)

// DefaultPrefix is the tables' default prefix.
const DefaultPrefix = "tenure"

// Store is a PostgreSQL database whose writes are fenced. It is safe for
// concurrent use.
type Store struct {
	pool     *pgxpool.Pool
	prefix   string
	resource string
	sql      statements
}

type statements struct {
	lock, insertFence, updateFence, insertEffect, committer, refusal, receipts, held string
}

// Option configures a Store.
type Option func(*Store) error

var prefixRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// WithPrefix names the tables <prefix>_fence, <prefix>_effects and
// <prefix>_refusals: 1 to 40 of [a-z0-9_], not starting with a digit.
func WithPrefix(p string) Option {
	return func(s *Store) error {
		if !prefixRE.MatchString(p) {
			return fmt.Errorf("pgfence: prefix %q: want 1 to 40 of [a-z0-9_], not starting with a digit", p)
		}
		s.prefix = p
		return nil
	}
}

// WithResource names the resource in the receipts (default "postgres
// <prefix>_effects"): give each database its own name, since positions
// of two databases are not comparable.
func WithResource(name string) Option {
	return func(s *Store) error {
		if name == "" {
			return errors.New("pgfence: empty resource name")
		}
		s.resource = name
		return nil
	}
}

// New returns the Store of pool's database.
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	s := &Store{pool: pool, prefix: DefaultPrefix}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.resource == "" {
		s.resource = "postgres " + s.prefix + "_effects"
	}
	p := s.prefix
	s.sql = statements{
		lock:        `SELECT lease_seq, lease_id, generation FROM ` + p + `_fence WHERE job = $1 FOR UPDATE`,
		insertFence: `INSERT INTO ` + p + `_fence (job, lease_seq, lease_id, generation) VALUES ($1, $2, $3, $4) ON CONFLICT (job) DO NOTHING`,
		updateFence: `UPDATE ` + p + `_fence SET lease_seq = $2, lease_id = $3, generation = $4, updated_at = clock_timestamp() WHERE job = $1`,
		insertEffect: `INSERT INTO ` + p + `_effects (job, effect, lease_id, generation, deadline) VALUES ($1, $2, $3, $4, $5)
			RETURNING position, committed_at`,
		committer: `SELECT lease_id, generation FROM ` + p + `_effects WHERE job = $1 AND effect = $2`,
		refusal: `INSERT INTO ` + p + `_refusals (job, lease_id, generation, effect, reason, held, detail)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		receipts: `SELECT position, job, effect, lease_id, generation, committed_at, deadline FROM ` + p + `_effects
			WHERE position > $1 ORDER BY position`,
		held: `SELECT lease_seq, lease_id, generation FROM ` + p + `_fence WHERE job = $1`,
	}
	return s, nil
}

// Resource is the name the receipts give the database.
func (s *Store) Resource() string { return s.resource }

// Migrate creates the tables if they do not exist.
func (s *Store) Migrate(ctx context.Context) error {
	p := s.prefix
	const maxInt = "9007199254740991"
	ddl := `
CREATE TABLE IF NOT EXISTS ` + p + `_fence (
	job text PRIMARY KEY,
	lease_seq bigint NOT NULL CHECK (lease_seq BETWEEN 1 AND ` + maxInt + `),
	lease_id text NOT NULL,
	generation bigint NOT NULL CHECK (generation BETWEEN 1 AND ` + maxInt + `),
	updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS ` + p + `_effects (
	position bigserial PRIMARY KEY,
	job text NOT NULL,
	effect text NOT NULL,
	lease_id text NOT NULL,
	generation bigint NOT NULL CHECK (generation BETWEEN 1 AND ` + maxInt + `),
	committed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	deadline timestamptz,
	CONSTRAINT ` + p + `_effects_once UNIQUE (job, effect),
	CONSTRAINT ` + p + `_effects_on_time CHECK (committed_at < deadline)
);
CREATE TABLE IF NOT EXISTS ` + p + `_refusals (
	id bigserial PRIMARY KEY,
	at timestamptz NOT NULL DEFAULT clock_timestamp(),
	job text NOT NULL,
	lease_id text NOT NULL,
	generation bigint NOT NULL,
	effect text NOT NULL DEFAULT '',
	reason text NOT NULL,
	held text NOT NULL DEFAULT '',
	detail text NOT NULL DEFAULT ''
);`
	if _, err := s.pool.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("pgfence: migrate: %w", err)
	}
	return nil
}

// Commit is where and when the database committed an effect.
type Commit struct {
	Position uint64
	At       time.Time // the database's clock
}

// Claim advances the job's fence to token t (or leaves it if t's lease
// holds it already): from then on an older lease's writes are refused. A
// refusal is a *fence.RefusedError (stale: a newer lease claimed the job).
func (s *Store) Claim(ctx context.Context, t fence.Token) error {
	if err := t.Check(); err != nil {
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgfence: claim %s: %w", t, err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgfence: claim %s: %w", t, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit: nothing to do
	if err := s.admit(ctx, tx, t); err != nil {
		return s.refused(ctx, conn, tx, err, "")
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgfence: claim %s: %w", t, err)
	}
	return nil
}

// Do commits fn's writes as the effect effect of lease l, fenced: see the
// package documentation. It returns the effect's commit; a
// *fence.RefusedError when the database refused it (stale, mismatch,
// expired, or replay: the effect was committed before, by the lease it
// names); fn's error as it is (nothing committed); or another error, in
// which case the commit's outcome may be unknown (Do again: a replay
// refusal naming this lease says it was committed, fence.CommittedBy).
func (s *Store) Do(ctx context.Context, l fence.Lease, effect string, fn func(tx pgx.Tx) error) (Commit, error) {
	t := l.Token()
	if err := t.Check(); err != nil {
		return Commit{}, err
	}
	if err := fence.CheckEffect(effect); err != nil {
		return Commit{}, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return Commit{}, fmt.Errorf("pgfence: %s effect %s: %w", t, effect, err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return Commit{}, fmt.Errorf("pgfence: %s effect %s: begin: %w", t, effect, err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := s.admit(ctx, tx, t); err != nil {
		return Commit{}, s.refused(ctx, conn, tx, err, effect)
	}
	// A replay is refused before fn runs (fn's own writes could fail on
	// their unique keys first): the fence row's lock orders every commit
	// of the job, so the effect's row cannot appear meanwhile.
	var committer fence.Token
	var cgen int64
	switch err := tx.QueryRow(ctx, s.sql.committer, t.Job, effect).Scan(&committer.LeaseID, &cgen); {
	case err == nil:
		committer.Job, committer.Generation = t.Job, uint64(cgen)
		return Commit{}, s.refused(ctx, conn, tx, &fence.RefusedError{Reason: fence.ReasonReplay, Token: t, Held: committer, Effect: effect}, effect)
	case !errors.Is(err, pgx.ErrNoRows):
		return Commit{}, fmt.Errorf("pgfence: %s effect %s: %w", t, effect, err)
	}
	if err := fn(tx); err != nil {
		return Commit{}, err
	}
	var deadline any
	if d := l.Expires(); !d.IsZero() {
		deadline = d
	}
	// The effect's row and the commit in one round trip: the server checks
	// the deadline and commits back to back.
	b := &pgx.Batch{}
	var c Commit
	var pos int64
	b.Queue(s.sql.insertEffect, t.Job, effect, t.LeaseID, int64(t.Generation), deadline).QueryRow(func(r pgx.Row) error {
		return r.Scan(&pos, &c.At)
	})
	b.Queue("COMMIT")
	err = tx.SendBatch(ctx, b).Close()
	var pe *pgconn.PgError
	switch {
	case err == nil:
		committed = true
		c.Position = uint64(pos)
		return c, nil
	case errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == s.prefix+"_effects_once":
		_ = tx.Rollback(ctx)
		re := &fence.RefusedError{Reason: fence.ReasonReplay, Token: t, Effect: effect}
		var gen int64
		if err := conn.QueryRow(ctx, s.sql.committer, t.Job, effect).Scan(&re.Held.LeaseID, &gen); err == nil {
			re.Held.Job, re.Held.Generation = t.Job, uint64(gen)
		}
		return Commit{}, s.refused(ctx, conn, nil, re, effect)
	case errors.As(err, &pe) && pe.Code == "23514" && pe.ConstraintName == s.prefix+"_effects_on_time":
		_ = tx.Rollback(ctx)
		re := &fence.RefusedError{Reason: fence.ReasonExpired, Token: t, Effect: effect, Deadline: l.Expires()}
		_ = conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&re.At)
		return Commit{}, s.refused(ctx, conn, nil, re, effect)
	}
	return Commit{}, fmt.Errorf("pgfence: %s effect %s: commit: %w", t, effect, err)
}

// admit locks t's job's fence row (inserting it for a job never seen)
// and applies fence.Admit, advancing the row to t.
func (s *Store) admit(ctx context.Context, tx pgx.Tx, t fence.Token) error {
	h := fence.HeldOf(t)
	for range 2 {
		var cur fence.Held
		var seq, gen int64
		err := tx.QueryRow(ctx, s.sql.lock, t.Job).Scan(&seq, &cur.LeaseID, &gen)
		if errors.Is(err, pgx.ErrNoRows) {
			tag, err := tx.Exec(ctx, s.sql.insertFence, t.Job, int64(h.Seq), h.LeaseID, int64(h.Generation))
			if err != nil {
				return fmt.Errorf("pgfence: %s: fence: %w", t, err)
			}
			if tag.RowsAffected() == 1 {
				return nil
			}
			continue // inserted by another transaction meanwhile: lock it
		}
		if err != nil {
			return fmt.Errorf("pgfence: %s: fence: %w", t, err)
		}
		cur.Seq, cur.Generation = uint64(seq), uint64(gen)
		if err := fence.Admit(cur, t); err != nil {
			return err
		}
		if cur == h {
			return nil
		}
		if _, err := tx.Exec(ctx, s.sql.updateFence, t.Job, int64(h.Seq), h.LeaseID, int64(h.Generation)); err != nil {
			return fmt.Errorf("pgfence: %s: fence: %w", t, err)
		}
		return nil
	}
	return fmt.Errorf("pgfence: %s: fence row neither found nor inserted", t)
}

// refused rolls tx back (if any) and records a refusal on conn, the
// connection the write held (best effort: a second connection could
// wait for ever on a pool that writers have exhausted); other errors
// pass through.
func (s *Store) refused(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx, err error, effect string) error {
	var re *fence.RefusedError
	if !errors.As(err, &re) {
		return err
	}
	if tx != nil {
		_ = tx.Rollback(ctx)
	}
	if re.Effect == "" {
		re.Effect = effect
	}
	held := ""
	if re.Held.LeaseID != "" {
		held = re.Held.String()
	}
	_, _ = conn.Exec(ctx, s.sql.refusal, re.Token.Job, re.Token.LeaseID, int64(re.Token.Generation), re.Effect, string(re.Reason), held, re.Detail)
	return re
}

// Held is what the fence holds for job (zero: nothing).
func (s *Store) Held(ctx context.Context, job string) (fence.Held, error) {
	var h fence.Held
	var seq, gen int64
	err := s.pool.QueryRow(ctx, s.sql.held, job).Scan(&seq, &h.LeaseID, &gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return fence.Held{}, nil
	}
	if err != nil {
		return h, fmt.Errorf("pgfence: held %s: %w", job, err)
	}
	h.Seq, h.Generation = uint64(seq), uint64(gen)
	return h, nil
}

// Receipts calls fn with the receipt of every effect committed after
// position after, in position order.
func (s *Store) Receipts(ctx context.Context, after uint64, fn func(fence.Receipt) error) error {
	rows, err := s.pool.Query(ctx, s.sql.receipts, int64(after))
	if err != nil {
		return fmt.Errorf("pgfence: receipts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		r := fence.Receipt{V: fence.ReceiptVersion, Resource: s.resource}
		var pos, gen int64
		var at time.Time
		var deadline *time.Time
		if err := rows.Scan(&pos, &r.Job, &r.Effect, &r.LeaseID, &gen, &at, &deadline); err != nil {
			return fmt.Errorf("pgfence: receipts: %w", err)
		}
		r.Position, r.Generation, r.CommittedAt = uint64(pos), uint64(gen), at.UnixNano()
		if deadline != nil {
			r.Deadline = deadline.UnixNano()
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgfence: receipts: %w", err)
	}
	return nil
}

// WriteReceipts writes every effect's receipt to w as JSON lines, for
// `tenure audit --effects`.
func (s *Store) WriteReceipts(ctx context.Context, w io.Writer) error {
	var rs []fence.Receipt
	if err := s.Receipts(ctx, 0, func(r fence.Receipt) error { rs = append(rs, r); return nil }); err != nil {
		return err
	}
	return fence.WriteReceipts(w, rs)
}

// Refusal is one refused write or claim, as recorded.
type Refusal struct {
	At     time.Time
	Token  fence.Token
	Effect string
	Reason fence.Reason
	Held   string
	Detail string
}

// Refusals returns every refusal recorded, oldest first.
func (s *Store) Refusals(ctx context.Context) ([]Refusal, error) {
	rows, err := s.pool.Query(ctx, `SELECT at, job, lease_id, generation, effect, reason, held, detail FROM `+s.prefix+`_refusals ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("pgfence: refusals: %w", err)
	}
	defer rows.Close()
	var out []Refusal
	for rows.Next() {
		var r Refusal
		var gen int64
		var reason string
		if err := rows.Scan(&r.At, &r.Token.Job, &r.Token.LeaseID, &gen, &r.Effect, &reason, &r.Held, &r.Detail); err != nil {
			return nil, fmt.Errorf("pgfence: refusals: %w", err)
		}
		r.Token.Generation, r.Reason = uint64(gen), fence.Reason(reason)
		out = append(out, r)
	}
	return out, rows.Err()
}

// Bind implements fence.Binder for worker.WithEffects: it claims the job
// for l (Claim) and returns ctx carrying the Bound that From reads.
func (s *Store) Bind(ctx context.Context, l fence.Lease) (context.Context, error) {
	if err := s.Claim(ctx, l.Token()); err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, boundKey{}, &Bound{s: s, l: l}), nil
}

type boundKey struct{}

// Bound is a Store bound to one lease.
type Bound struct {
	s *Store
	l fence.Lease
}

// From returns the Bound that Bind put in ctx; nil if none.
func From(ctx context.Context) *Bound {
	b, _ := ctx.Value(boundKey{}).(*Bound)
	return b
}

// Lease is the lease b writes for.
func (b *Bound) Lease() fence.Lease { return b.l }

// Store is b's Store.
func (b *Bound) Store() *Store { return b.s }

// Do is Store.Do for b's lease.
func (b *Bound) Do(ctx context.Context, effect string, fn func(tx pgx.Tx) error) (Commit, error) {
	return b.s.Do(ctx, b.l, effect, fn)
}
