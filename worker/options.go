package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/fence"
	"github.com/maknow/tenure/receipt"
)

// Defaults of Options and LeaseOptions.
const (
	DefaultStreamPrefix   = "TENURE"         // streams TENURE_IN and TENURE_OUT
	DefaultVerdictTimeout = 10 * time.Second // publish plus verdict, per call
	DefaultPublishTimeout = 2 * time.Second  // one publish attempt
	DefaultOfferBuffer    = 256              // offers queued for Offers()
	DefaultRenewFraction  = 1.0 / 3          // renew after this fraction of the lease duration
	// MinPublishTimeout is the shortest a lease's input may make one
	// publish attempt (see Options.PublishTimeout).
	MinPublishTimeout = 100 * time.Millisecond
)

// Options configures a Worker. Set them with the Option functions.
type Options struct {
	// StreamPrefix names the input (<prefix>_IN) and decision (<prefix>_OUT)
	// streams, as the coordinator's topology does; in a partitioned
	// deployment, those of every partition (<prefix>_P<k>_IN, _OUT).
	StreamPrefix string
	// VerdictTimeout bounds one call: the publish with its retries and the
	// wait for the verdict. A shorter deadline on the call's ctx wins.
	VerdictTimeout time.Duration
	// PublishTimeout bounds one publish attempt; a timed-out attempt is
	// retried with the same Nats-Msg-Id.
	//
	// The inputs of a lease (its renewals, progress, result, release and
	// cancel ACK, and the acquire asking for it) bound each attempt further
	// by half the time left before the lease's local deadline (Acquire: the
	// duration it asks for; an offer's Accept and Decline: its ACK deadline), but not below MinPublishTimeout (nor above
	// PublishTimeout): an attempt lost in transit (a stream leader change,
	// a server restart) is retried while the lease can still be saved, and
	// a renewal's attempt does not wait past the lease. Half leaves as
	// much time for the retry as the attempt had. The floor keeps attempts
	// longer than a PubAck takes on a loaded server: shorter ones would
	// time out before their own PubAck, retry after retry. Past the
	// deadline, attempts take MinPublishTimeout; the whole call is still
	// bounded by VerdictTimeout.
	PublishTimeout time.Duration
	// OfferBuffer is how many offers wait for Offers() to be read; when it
	// is full the oldest is dropped (and reported to ErrorHandler): an offer
	// nobody accepts lapses at its ACK deadline anyway.
	OfferBuffer int
	// ErrorHandler receives asynchronous errors: the decision consumer's,
	// undecodable decisions, dropped offers, receipts not kept. Nil
	// ignores them.
	ErrorHandler func(error)
	// Receipts, when set, keeps a receipt (package receipt, PROTOCOL.md
	// §20.2) of every input whose append the input stream acknowledged
	// and of every decision addressed to this worker it received, with
	// its chain value: `tenure audit --receipts` later proves with them
	// that the log still holds what the worker was told.
	Receipts receipt.Sink
	// Clock is the clock of the renew loops and of the local deadlines of
	// leases and offers (nil: the real clock). The timeouts of one call
	// (VerdictTimeout, PublishTimeout) are those of its contexts, and
	// run on the real clock. Tests set a clock.Fake.
	Clock clock.Clock
	// TracerProvider records the spans of Run's handler runs (tracing.SpanRun,
	// PROTOCOL.md §27); nil: OpenTelemetry's global one, which records
	// nothing until the program installs one. The SDK links no exporter.
	TracerProvider trace.TracerProvider
	// Propagator writes the trace context of a call's ctx (or of the
	// lease's span of its run) into the headers of each input, and reads
	// the one an offer carries; nil: OpenTelemetry's global one, which
	// propagates nothing until the program sets one (typically
	// propagation.TraceContext{}).
	Propagator propagation.TextMapPropagator
}

// WithTracing sets Options.TracerProvider and Options.Propagator (either
// may be nil: OpenTelemetry's global one).
func WithTracing(tp trace.TracerProvider, prop propagation.TextMapPropagator) Option {
	return func(o *Options) error {
		o.TracerProvider, o.Propagator = tp, prop
		return nil
	}
}

// publishTimeout is the timeout of one publish attempt made at now of an
// input of a lease whose local deadline is deadline (zero: an input of no
// lease), base being Options.PublishTimeout: see there.
func publishTimeout(base time.Duration, deadline, now time.Time) time.Duration {
	if deadline.IsZero() {
		return base
	}
	return min(base, max(deadline.Sub(now)/2, MinPublishTimeout))
}

// Option sets one of Options.
type Option func(*Options) error

// WithStreamPrefix sets Options.StreamPrefix.
func WithStreamPrefix(prefix string) Option {
	return func(o *Options) error {
		if prefix == "" {
			return errors.New("empty stream prefix")
		}
		o.StreamPrefix = prefix
		return nil
	}
}

// WithVerdictTimeout sets Options.VerdictTimeout.
func WithVerdictTimeout(d time.Duration) Option {
	return func(o *Options) error {
		if d <= 0 {
			return fmt.Errorf("verdict timeout %v: want > 0", d)
		}
		o.VerdictTimeout = d
		return nil
	}
}

// WithPublishTimeout sets Options.PublishTimeout.
func WithPublishTimeout(d time.Duration) Option {
	return func(o *Options) error {
		if d <= 0 {
			return fmt.Errorf("publish timeout %v: want > 0", d)
		}
		o.PublishTimeout = d
		return nil
	}
}

// WithOfferBuffer sets Options.OfferBuffer.
func WithOfferBuffer(n int) Option {
	return func(o *Options) error {
		if n < 1 {
			return fmt.Errorf("offer buffer %d: want >= 1", n)
		}
		o.OfferBuffer = n
		return nil
	}
}

// WithReceipts sets Options.Receipts: for instance receipt.OpenFile's
// File (JSON lines), or a receipt.Func.
func WithReceipts(s receipt.Sink) Option {
	return func(o *Options) error {
		o.Receipts = s
		return nil
	}
}

// WithClock sets Options.Clock (nil: the real clock).
func WithClock(c clock.Clock) Option {
	return func(o *Options) error {
		o.Clock = c
		return nil
	}
}

// WithErrorHandler sets Options.ErrorHandler.
func WithErrorHandler(h func(error)) Option {
	return func(o *Options) error {
		o.ErrorHandler = h
		return nil
	}
}

// LeaseOptions configures one lease. Set them with the LeaseOption functions.
type LeaseOptions struct {
	// Duration is the lease duration asked for by Acquire (lease_ms); zero
	// takes the policy's default. Accept ignores it: the offer fixed it.
	Duration time.Duration
	// RenewFraction is the fraction of the lease duration between automatic
	// renewals, in (0, 1). Renewal failures are retried sooner.
	RenewFraction float64
	// RenewErrorHandler, if set, is called by the renew loop with every
	// renewal that failed: a *VerdictError, or an error matching
	// ErrNoVerdict. It runs on the renew loop: it must not block.
	RenewErrorHandler func(l *Lease, err error)

	// trace is the trace context the lease's inputs carry when their ctx
	// has none (PROTOCOL.md §27): the offer's, or Run's span of the run.
	trace trace.SpanContext

	// beforeRenew is a test hook, called by the renew loop after it decided
	// to renew and before it publishes: blocking in it simulates a process
	// paused between its authority check and its write.
	beforeRenew func()
}

// LeaseOption sets one of LeaseOptions.
type LeaseOption func(*LeaseOptions) error

// WithLeaseDuration sets LeaseOptions.Duration (whole milliseconds).
func WithLeaseDuration(d time.Duration) LeaseOption {
	return func(o *LeaseOptions) error {
		if d < time.Millisecond {
			return fmt.Errorf("lease duration %v: want >= 1ms", d)
		}
		o.Duration = d
		return nil
	}
}

// WithRenewFraction sets LeaseOptions.RenewFraction.
func WithRenewFraction(f float64) LeaseOption {
	return func(o *LeaseOptions) error {
		if !(f > 0 && f < 1) {
			return fmt.Errorf("renew fraction %v: want in (0, 1)", f)
		}
		o.RenewFraction = f
		return nil
	}
}

// WithRenewErrorHandler sets LeaseOptions.RenewErrorHandler.
func WithRenewErrorHandler(h func(l *Lease, err error)) LeaseOption {
	return func(o *LeaseOptions) error {
		o.RenewErrorHandler = h
		return nil
	}
}

func leaseOptions(opts []LeaseOption) (LeaseOptions, error) {
	lo := LeaseOptions{RenewFraction: DefaultRenewFraction}
	for _, o := range opts {
		if err := o(&lo); err != nil {
			return lo, fmt.Errorf("worker: %w", err)
		}
	}
	return lo, nil
}

// Defaults of RunOptions.
const (
	DefaultConcurrency = 1                                            // handlers running at once
	DefaultCapacityTTL = events.DefaultCapacityTTL * time.Millisecond // how long one announcement stands
)

// RunOptions configures one Run. Set them with the RunOption functions.
type RunOptions struct {
	// Concurrency is the most handlers Run runs at once, 1 to
	// events.MaxSlots: the slots it announces (PROTOCOL.md §22.2).
	Concurrency int
	// CapacityTTL is how long each announcement stands (ttl_ms), whole
	// milliseconds up to events.MaxCapacityTTL ms. Run announces again
	// every third of it, so that two announcements in a row may be lost
	// before the queue stops offering.
	CapacityTTL time.Duration
	// Drain, when not nil, is the signal of a graceful stop (WithDrain):
	// when it ends, Run stops taking jobs, withdraws its capacity and lets
	// the running handlers finish, for up to DrainTimeout (0: for as long
	// as they take), before it cancels them; Run's ctx ending still
	// cancels them at once.
	Drain context.Context
	// DrainTimeout is how long a drain lets the handlers run before their
	// contexts are cancelled; 0 waits for them until Run's ctx ends.
	DrainTimeout time.Duration
	// OnResult, when not nil, is told how each attempt Run ran ended: what
	// it reported to the coordinator, or why it reported nothing
	// (WithResultHandler). It is called from the attempt's goroutine,
	// after the report's verdict, and must not block for long.
	OnResult func(*Job, Result)
	// Effects, when set, binds each attempt to a resource before its
	// handler runs (package fence): the adapter claims the job there, so
	// that an older lease's writes are refused from then on, and the
	// handler's ctx carries the fenced transaction or client
	// (pgfence.From(ctx), ...). A Bind that fails fails the attempt
	// without running the handler.
	Effects fence.Binder
}

// RunOption sets one of RunOptions.
type RunOption func(*RunOptions) error

// WithConcurrency sets RunOptions.Concurrency.
func WithConcurrency(n int) RunOption {
	return func(o *RunOptions) error {
		if n < 1 || n > events.MaxSlots {
			return fmt.Errorf("concurrency %d: want 1 to %d", n, events.MaxSlots)
		}
		o.Concurrency = n
		return nil
	}
}

// WithCapacityTTL sets RunOptions.CapacityTTL.
func WithCapacityTTL(d time.Duration) RunOption {
	return func(o *RunOptions) error {
		if d < time.Millisecond || d > events.MaxCapacityTTL*time.Millisecond || d%time.Millisecond != 0 {
			return fmt.Errorf("capacity ttl %v: want whole milliseconds from 1ms to %v", d, events.MaxCapacityTTL*time.Millisecond)
		}
		o.CapacityTTL = d
		return nil
	}
}

// WithDrain makes Run stop gracefully when stop ends, as River's Stop does
// (its ctx ending stays the StopAndCancel): Run stops taking jobs at once
// (it withdraws its capacity on every partition, a pull of 0 slots, and
// declines the offers that arrive from then on), lets the running
// handlers finish and reports their results as usual, and after timeout
// (0: never) cancels the contexts of those still running, with a cause
// matching ErrRunStopped, as a shutdown does. Run returns nil once every
// handler has returned and its result was reported. A worker process
// wires its first SIGTERM or SIGINT to stop and a second one to Run's ctx
// (examples/queue-worker).
func WithDrain(stop context.Context, timeout time.Duration) RunOption {
	return func(o *RunOptions) error {
		if stop == nil {
			return errors.New("drain: nil context")
		}
		if timeout < 0 {
			return fmt.Errorf("drain timeout %v: want 0 or more", timeout)
		}
		o.Drain, o.DrainTimeout = stop, timeout
		return nil
	}
}

// WithResultHandler sets RunOptions.OnResult: f is told how each attempt
// ended, for a log line per outcome (not only per start).
func WithResultHandler(f func(*Job, Result)) RunOption {
	return func(o *RunOptions) error {
		o.OnResult = f
		return nil
	}
}

// WithEffects sets RunOptions.Effects.
func WithEffects(b fence.Binder) RunOption {
	return func(o *RunOptions) error {
		o.Effects = b
		return nil
	}
}

func runOptions(opts []RunOption) (RunOptions, error) {
	ro := RunOptions{Concurrency: DefaultConcurrency, CapacityTTL: DefaultCapacityTTL}
	for _, o := range opts {
		if err := o(&ro); err != nil {
			return ro, fmt.Errorf("worker: run: %w", err)
		}
	}
	return ro, nil
}
