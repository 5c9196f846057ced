// Package sqlitefence makes a stale lease holder's write fail at a SQLite
// database (package fence; modernc.org/sqlite, pure Go): the embedded
// counterpart of adapters/pgfence, with the same tables, the same rule
// (fence.Admit) and the same receipts.
//
//	fx, err := sqlitefence.Open("state.db") // WAL, a busy timeout, the tables
//	err = w.Run(ctx, "q", func(ctx context.Context, j *worker.Job) error {
//		_, err := sqlitefence.From(ctx).Do(ctx, "step-1", func(tx sqlitefence.Tx) error {
//			_, err := tx.ExecContext(ctx, "UPDATE items SET done = 1 WHERE id = ?", j.ID)
//			return err
//		})
//		return err
//	}, worker.WithEffects(fx))
//
// Do takes SQLite's write lock first (BEGIN IMMEDIATE), so a database's
// fenced transactions run one at a time, across every process that opens
// the file: it reads the job's fence row and applies fence.Admit (refused:
// nothing runs), runs fn, records the effect (unique per job and effect
// id, committed_at before the lease's deadline: a CHECK constraint) and
// commits. SQLite runs in the worker's process, so the clock of the
// deadline check is the worker's and a pause between that check and the
// commit (microseconds, with the write lock held: no other lease can
// claim the job meanwhile) cannot be refused by the database; the audit
// of the receipts still sees it. Integers are SQLite's (signed 64-bit):
// tokens past 2^53-1 are refused before anything is written.
package sqlitefence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/maknow/tenure/fence"
)

// Tx is what fn of Do writes through: the connection holding the
// transaction.
type Tx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Store is a SQLite database whose writes are fenced. Safe for concurrent
// use.
type Store struct {
	db       *sql.DB
	prefix   string
	resource string
	now      func() time.Time
}

// Option configures a Store.
type Option func(*Store) error

var prefixRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// WithPrefix names the tables <prefix>_fence, <prefix>_effects and
// <prefix>_refusals (default "tenure").
func WithPrefix(p string) Option {
	return func(s *Store) error {
		if !prefixRE.MatchString(p) {
			return fmt.Errorf("sqlitefence: prefix %q: want 1 to 40 of [a-z0-9_], not starting with a digit", p)
		}
		s.prefix = p
		return nil
	}
}

// WithResource names the resource in the receipts (default "sqlite
// <prefix>_effects").
func WithResource(name string) Option {
	return func(s *Store) error {
		if name == "" {
			return errors.New("sqlitefence: empty resource name")
		}
		s.resource = name
		return nil
	}
}

// WithClock sets the clock of the commit times and deadline checks
// (tests; default time.Now).
func WithClock(now func() time.Time) Option {
	return func(s *Store) error {
		s.now = now
		return nil
	}
}

// Open opens (creating it) the database file at path with the WAL
// journal and a 10 s busy timeout, and creates the tables (Migrate).
func Open(path string, opts ...Option) (*Store, error) {
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlitefence: path %q: no ? or # (open the *sql.DB yourself for DSN options)", path)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		return nil, fmt.Errorf("sqlitefence: %w", err)
	}
	s, err := New(db, opts...)
	if err != nil {
		db.Close()
		return nil, err
	}
	if err := s.Migrate(context.Background()); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// New returns the Store of db (whose connections should have a busy
// timeout: fenced transactions wait for SQLite's write lock).
func New(db *sql.DB, opts ...Option) (*Store, error) {
	s := &Store{db: db, prefix: "tenure", now: time.Now}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.resource == "" {
		s.resource = "sqlite " + s.prefix + "_effects"
	}
	return s, nil
}

// DB is the Store's database.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Resource is the name the receipts give the database.
func (s *Store) Resource() string { return s.resource }

// Migrate creates the tables if they do not exist.
func (s *Store) Migrate(ctx context.Context) error {
	p := s.prefix
	const maxInt = "9007199254740991"
	for _, ddl := range []string{
		`CREATE TABLE IF NOT EXISTS ` + p + `_fence (
			job TEXT PRIMARY KEY,
			lease_seq INTEGER NOT NULL CHECK (lease_seq BETWEEN 1 AND ` + maxInt + `),
			lease_id TEXT NOT NULL,
			generation INTEGER NOT NULL CHECK (generation BETWEEN 1 AND ` + maxInt + `),
			updated_at INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + p + `_effects (
			position INTEGER PRIMARY KEY AUTOINCREMENT,
			job TEXT NOT NULL,
			effect TEXT NOT NULL,
			lease_id TEXT NOT NULL,
			generation INTEGER NOT NULL CHECK (generation BETWEEN 1 AND ` + maxInt + `),
			committed_at INTEGER NOT NULL,
			deadline INTEGER,
			CONSTRAINT ` + p + `_effects_once UNIQUE (job, effect),
			CONSTRAINT ` + p + `_effects_on_time CHECK (deadline IS NULL OR committed_at < deadline))`,
		`CREATE TABLE IF NOT EXISTS ` + p + `_refusals (
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			at INTEGER NOT NULL,
			job TEXT NOT NULL, lease_id TEXT NOT NULL, generation INTEGER NOT NULL,
			effect TEXT NOT NULL DEFAULT '', reason TEXT NOT NULL, held TEXT NOT NULL DEFAULT '', detail TEXT NOT NULL DEFAULT '')`,
	} {
		if _, err := s.db.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("sqlitefence: migrate: %w", err)
		}
	}
	return nil
}

// Commit is where and when the database committed an effect.
type Commit struct {
	Position uint64
	At       time.Time
}

// begin takes a connection and SQLite's write lock.
func (s *Store) begin(ctx context.Context) (*sql.Conn, func(), error) {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		c.Close()
		return nil, nil, err
	}
	done := false
	return c, func() {
		if !done {
			done = true
			_, _ = c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
			c.Close()
		}
	}, nil
}

// Claim advances the job's fence to token t: from then on an older
// lease's writes are refused. A refusal is a *fence.RefusedError.
func (s *Store) Claim(ctx context.Context, t fence.Token) error {
	if err := t.Check(); err != nil {
		return err
	}
	c, rollback, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("sqlitefence: claim %s: %w", t, err)
	}
	defer rollback()
	if err := s.admit(ctx, c, t); err != nil {
		rollback()
		return s.refused(ctx, err, "")
	}
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("sqlitefence: claim %s: %w", t, err)
	}
	return nil
}

// Do commits fn's writes as the effect effect of lease l, fenced (see the
// package documentation); its results are pgfence.Store.Do's.
func (s *Store) Do(ctx context.Context, l fence.Lease, effect string, fn func(tx Tx) error) (Commit, error) {
	t := l.Token()
	if err := t.Check(); err != nil {
		return Commit{}, err
	}
	if err := fence.CheckEffect(effect); err != nil {
		return Commit{}, err
	}
	c, rollback, err := s.begin(ctx)
	if err != nil {
		return Commit{}, fmt.Errorf("sqlitefence: %s effect %s: begin: %w", t, effect, err)
	}
	defer rollback()
	if err := s.admit(ctx, c, t); err != nil {
		rollback()
		return Commit{}, s.refused(ctx, err, effect)
	}
	// A replay is refused before fn runs (fn's own writes could fail on
	// their unique keys first); the write lock is held.
	var by fence.Token
	by.Job = t.Job
	var gen int64
	switch err := c.QueryRowContext(ctx, `SELECT lease_id, generation FROM `+s.prefix+`_effects WHERE job = ? AND effect = ?`, t.Job, effect).Scan(&by.LeaseID, &gen); {
	case err == nil:
		by.Generation = uint64(gen)
		rollback()
		return Commit{}, s.refused(ctx, &fence.RefusedError{Reason: fence.ReasonReplay, Token: t, Held: by, Effect: effect}, effect)
	case !errors.Is(err, sql.ErrNoRows):
		return Commit{}, fmt.Errorf("sqlitefence: %s effect %s: %w", t, effect, err)
	}
	if err := fn(c); err != nil {
		return Commit{}, err
	}
	now := s.now()
	deadline := l.Expires()
	if err := fence.CheckDeadline(t, deadline, now); err != nil {
		rollback()
		return Commit{}, s.refused(ctx, err, effect)
	}
	var dl any
	if !deadline.IsZero() {
		dl = deadline.UnixNano()
	}
	res, err := c.ExecContext(ctx, `INSERT INTO `+s.prefix+`_effects (job, effect, lease_id, generation, committed_at, deadline) VALUES (?, ?, ?, ?, ?, ?)`,
		t.Job, effect, t.LeaseID, int64(t.Generation), now.UnixNano(), dl)
	if err != nil {
		return Commit{}, fmt.Errorf("sqlitefence: %s effect %s: %w", t, effect, err)
	}
	pos, err := res.LastInsertId()
	if err != nil {
		return Commit{}, fmt.Errorf("sqlitefence: %s effect %s: %w", t, effect, err)
	}
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		return Commit{}, fmt.Errorf("sqlitefence: %s effect %s: commit: %w", t, effect, err)
	}
	return Commit{Position: uint64(pos), At: now}, nil
}

// admit reads the job's fence row (the write lock is held) and applies
// fence.Admit, advancing the row to t.
func (s *Store) admit(ctx context.Context, c *sql.Conn, t fence.Token) error {
	h := fence.HeldOf(t)
	var cur fence.Held
	var seq, gen int64
	err := c.QueryRowContext(ctx, `SELECT lease_seq, lease_id, generation FROM `+s.prefix+`_fence WHERE job = ?`, t.Job).Scan(&seq, &cur.LeaseID, &gen)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("sqlitefence: %s: fence: %w", t, err)
	default:
		cur.Seq, cur.Generation = uint64(seq), uint64(gen)
		if err := fence.Admit(cur, t); err != nil {
			return err
		}
		if cur == h {
			return nil
		}
	}
	_, err = c.ExecContext(ctx, `INSERT INTO `+s.prefix+`_fence (job, lease_seq, lease_id, generation, updated_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (job) DO UPDATE SET lease_seq = excluded.lease_seq, lease_id = excluded.lease_id, generation = excluded.generation, updated_at = excluded.updated_at`,
		t.Job, int64(h.Seq), h.LeaseID, int64(h.Generation), s.now().UnixNano())
	if err != nil {
		return fmt.Errorf("sqlitefence: %s: fence: %w", t, err)
	}
	return nil
}

// refused records a refusal (best effort); other errors pass through.
func (s *Store) refused(ctx context.Context, err error, effect string) error {
	var re *fence.RefusedError
	if !errors.As(err, &re) {
		return err
	}
	if re.Effect == "" {
		re.Effect = effect
	}
	held := ""
	if re.Held.LeaseID != "" {
		held = re.Held.String()
	}
	_, _ = s.db.ExecContext(ctx, `INSERT INTO `+s.prefix+`_refusals (at, job, lease_id, generation, effect, reason, held, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		s.now().UnixNano(), re.Token.Job, re.Token.LeaseID, int64(re.Token.Generation), re.Effect, string(re.Reason), held, re.Detail)
	return re
}

// Refusals counts the refusals recorded, by reason.
func (s *Store) Refusals(ctx context.Context) (map[fence.Reason]int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT reason, count(*) FROM `+s.prefix+`_refusals GROUP BY reason`)
	if err != nil {
		return nil, fmt.Errorf("sqlitefence: refusals: %w", err)
	}
	defer rows.Close()
	out := map[fence.Reason]int{}
	for rows.Next() {
		var r string
		var n int
		if err := rows.Scan(&r, &n); err != nil {
			return nil, err
		}
		out[fence.Reason(r)] = n
	}
	return out, rows.Err()
}

// Receipts calls fn with the receipt of every effect committed after
// position after, in position order.
func (s *Store) Receipts(ctx context.Context, after uint64, fn func(fence.Receipt) error) error {
	rows, err := s.db.QueryContext(ctx, `SELECT position, job, effect, lease_id, generation, committed_at, deadline FROM `+s.prefix+`_effects WHERE position > ? ORDER BY position`, int64(after))
	if err != nil {
		return fmt.Errorf("sqlitefence: receipts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		r := fence.Receipt{V: fence.ReceiptVersion, Resource: s.resource}
		var pos, gen int64
		var dl sql.NullInt64
		if err := rows.Scan(&pos, &r.Job, &r.Effect, &r.LeaseID, &gen, &r.CommittedAt, &dl); err != nil {
			return fmt.Errorf("sqlitefence: receipts: %w", err)
		}
		r.Position, r.Generation, r.Deadline = uint64(pos), uint64(gen), dl.Int64
		if err := fn(r); err != nil {
			return err
		}
	}
	return rows.Err()
}

// WriteReceipts writes every effect's receipt to w as JSON lines.
func (s *Store) WriteReceipts(ctx context.Context, w io.Writer) error {
	var rs []fence.Receipt
	if err := s.Receipts(ctx, 0, func(r fence.Receipt) error { rs = append(rs, r); return nil }); err != nil {
		return err
	}
	return fence.WriteReceipts(w, rs)
}

// Bind implements fence.Binder for worker.WithEffects: it claims the job
// for l and returns ctx carrying the Bound that From reads.
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

// Do is Store.Do for b's lease.
func (b *Bound) Do(ctx context.Context, effect string, fn func(tx Tx) error) (Commit, error) {
	return b.s.Do(ctx, b.l, effect, fn)
}
