package fence

import (
	"context"
	"time"
)

// Lease is what an adapter needs of a lease: its token and its local
// deadline, the worker's conservative end of its authority
// (worker.Lease implements it; the deadline moves with every accepted
// renewal). A zero Expires is no deadline.
type Lease interface {
	Token() Token
	Expires() time.Time
}

// Fixed is a Lease of a token and a deadline that do not change: for a
// write made on behalf of a lease whose deadline is known (a request that
// carried both).
type Fixed struct {
	T        Token
	Deadline time.Time
}

// Token is f.T.
func (f Fixed) Token() Token { return f.T }

// Expires is f.Deadline.
func (f Fixed) Expires() time.Time { return f.Deadline }

// A Binder binds a resource to each attempt of a job that worker.Run
// runs (worker.WithEffects): Bind is called once the attempt's lease is
// held, before the handler runs, with the handler's context. It may claim
// the job at the resource (so that from then on an older lease's writes
// are refused) and returns the handler's context, carrying what the
// handler writes with (the adapter's accessor reads it: pgfence.From(ctx),
// ...). An error fails the attempt without running the handler: one
// matching ErrStale means a newer lease already claimed the job.
type Binder interface {
	Bind(ctx context.Context, l Lease) (context.Context, error)
}
