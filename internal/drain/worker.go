package drain

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/internal/chaos"
	"github.com/maknow/tenure/worker"
)

// WorkerConfig configures a drain worker process (RunWorker).
type WorkerConfig struct {
	URL         string        // the NATS server
	ID          string        // worker id
	Queue       string        // the queue to drain
	Journal     string        // journal file of the connection's inputs and PubAcks (chaos.Tap)
	Store       string        // subject of the Store's write requests
	Concurrency int           // handlers at once (worker.WithConcurrency)
	CapacityTTL time.Duration // worker.WithCapacityTTL
	FailRate    float64       // probability that an attempt fails (retryably) before its effect
	MaxWork     time.Duration // each attempt works a random time up to this
	Seed        uint64
	// Careless handlers neither stop working when their context ends nor
	// look at it before they write: like a process paused between its
	// check and its write, they write after losing their lease, which
	// only the Store's fence stops.
	Careless     bool
	Logger       *slog.Logger      `json:"-"`
	ReportErrors bool              // log the SDK's asynchronous errors (ErrorHandler) at Info, not Debug
	Extra        map[string]string // for the worker's Hooks (Options.Extra)
}

// Hooks change what a drain worker's attempts do.
type Hooks struct {
	// Effect writes an attempt's effect (default: WriteEffect to the
	// Store, with the lease's token). A refused effect is its error.
	Effect func(ctx context.Context, nc *nats.Conn, j *worker.Job) error
	// Options are added to worker.Run's (worker.WithEffects, ...).
	Options []worker.RunOption
}

// RunWorker is the body of a drain worker process: worker.Run on the
// queue, on a connection journaled by a chaos.Tap, until ctx ends. Each
// attempt works a random time (stopping if its context ends, unless
// Careless), fails at
// random with probability FailRate, and otherwise writes the job's effect
// to the Store with its lease's fencing token, then returns nil (SUCCESS).
// A refused write (a newer attempt wrote: this one lost its lease) is the
// attempt's error.
func RunWorker(ctx context.Context, cfg WorkerConfig) error { return RunWorkerWith(ctx, cfg, Hooks{}) }

// RunWorkerWith is RunWorker with hooks.
func RunWorkerWith(ctx context.Context, cfg WorkerConfig, hooks Hooks) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger.With("worker", cfg.ID)
	j, err := chaos.OpenJournal(cfg.Journal)
	if err != nil {
		return err
	}
	defer j.Close()
	tap := chaos.NewTap(j)
	nc, err := nats.Connect(cfg.URL, tap.Option(), nats.Name("drain-"+cfg.ID),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(8<<20))
	if err != nil {
		return fmt.Errorf("drain: worker %s: connect: %w", cfg.ID, err)
	}
	defer nc.Close()
	level := slog.LevelDebug
	if cfg.ReportErrors {
		level = slog.LevelInfo
	}
	w, err := worker.Connect(nc, cfg.ID, worker.WithErrorHandler(func(err error) { log.Log(ctx, level, "sdk", "err", err) }))
	if err != nil {
		return fmt.Errorf("drain: worker %s: %w", cfg.ID, err)
	}
	defer w.Close()
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xd2a1))
	draw := func() (time.Duration, bool) {
		mu.Lock()
		defer mu.Unlock()
		return time.Duration(rng.Int64N(int64(cfg.MaxWork) + 1)), rng.Float64() < cfg.FailRate
	}
	err = w.Run(ctx, cfg.Queue, func(ctx context.Context, j *worker.Job) error {
		work, fail := draw()
		if cfg.Careless {
			time.Sleep(work)
		} else {
			t := time.NewTimer(work)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		if fail {
			return fmt.Errorf("drain: injected failure of %s, attempt %d", j.ID, j.Attempt)
		}
		if ctx.Err() != nil && !cfg.Careless { // a careful handler looks before it writes; the fence covers the rest
			return context.Cause(ctx)
		}
		if hooks.Effect != nil {
			ectx := ctx
			if cfg.Careless { // writes whatever its lease says: only the resource stops it
				ectx = context.WithoutCancel(ctx)
			}
			return hooks.Effect(ectx, nc, j)
		}
		return WriteEffect(nc, cfg.Store, cfg.ID, j.Lease.Token(), 5*time.Second)
	}, append([]worker.RunOption{worker.WithConcurrency(cfg.Concurrency), worker.WithCapacityTTL(cfg.CapacityTTL)}, hooks.Options...)...)
	if err := tap.Err(); err != nil {
		return fmt.Errorf("drain: worker %s: journal: %w", cfg.ID, err)
	}
	return err
}
