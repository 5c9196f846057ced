package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/worker"
)

// Control is what the orchestrator tells its worker processes, through a
// file they poll: the batch of jobs to work on now. When the batch changes,
// workers finish the leases of the old one at once and take no new ones.
type Control struct {
	Batch int      `json:"batch"`
	Jobs  []string `json:"jobs"`
}

// WriteControl replaces the control file at path atomically.
func WriteControl(path string, c Control) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("chaos: control: %w", err)
	}
	return os.Rename(tmp, path)
}

func readControl(path string) (Control, error) {
	var c Control
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	return c, json.Unmarshal(b, &c)
}

// WorkerConfig configures a chaos worker process (RunWorker).
type WorkerConfig struct {
	URL string // NATS server URLs, comma-separated
	// Credential is the worker's credential file (auth.Credential, from
	// tenure auth init): its user, inbox prefix and, when URL is empty,
	// its URL. Empty: connect without authentication.
	Credential string
	ID         string        // worker id
	Journal    string        // journal file: every input sent and PubAck received
	Control    string        // control file to poll
	Lease      time.Duration // lease duration asked for
	Slots      int           // leases acquired and worked on at once (offers come on top)
	// Queue is the queue whose jobs it runs besides (worker.Run, QueueSlots
	// at once; "": none).
	Queue      string
	QueueSlots int
	Seed       uint64
	Logger     *slog.Logger
}

// RunWorker is the body of a chaos worker process: with the worker SDK, on
// a connection whose wire is journaled (Tap), it keeps acquiring jobs of the
// current batch, renewing (the SDK does), reporting progress and completing,
// failing or releasing them; it accepts, declines or ignores offers;
// reconciles cancellation requests; and after losing authority it
// sometimes carries on like a careless worker would (progress and result
// from the old lease), which the coordinator must refuse unless the lease
// is still its own. It returns when ctx ends.
func RunWorker(ctx context.Context, cfg WorkerConfig) error {
	if cfg.Slots <= 0 {
		cfg.Slots = 2
	}
	if cfg.QueueSlots <= 0 {
		cfg.QueueSlots = 2
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	j, err := OpenJournal(cfg.Journal)
	if err != nil {
		return err
	}
	defer j.Close()
	tap := NewTap(j)
	opts := []nats.Option{tap.Option(), nats.Name("chaos-worker-" + cfg.ID),
		nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond), nats.RetryOnFailedConnect(true),
		nats.ReconnectBufSize(8 << 20)}
	var nc *nats.Conn
	if cfg.Credential != "" {
		nc, _, err = connectCredential(cfg.Credential, cfg.URL, opts...)
	} else {
		nc, err = nats.Connect(cfg.URL, opts...)
	}
	if err != nil {
		return fmt.Errorf("chaos: worker %s: connect: %w", cfg.ID, err)
	}
	defer nc.Close()
	log := cfg.Logger.With("worker", cfg.ID)
	var w *worker.Worker
	for {
		// A publish attempt lost in a fault (a stream leader change, a
		// server killed) is retried after PublishTimeout: keep it well under
		// the lease, or a result held up by one lost attempt ends its lease
		// later than the lease's own duration would.
		w, err = worker.Connect(nc, cfg.ID, worker.WithPublishTimeout(max(cfg.Lease/2, 100*time.Millisecond)),
			worker.WithErrorHandler(func(err error) { log.Debug("sdk", "err", err) }))
		if err == nil {
			break
		}
		log.Debug("worker not connected yet", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	cw := &chaosWorker{cfg: cfg, w: w, log: log, busy: make(map[string]bool), done: make(map[string]bool),
		changed: make(chan struct{}), seed: rand.New(rand.NewPCG(cfg.Seed, 0x7e4e))}
	var wg sync.WaitGroup
	wg.Go(func() { cw.watchControl(ctx) })
	for range cfg.Slots {
		rng := cw.newRand()
		wg.Go(func() { cw.slot(ctx, rng) })
	}
	wg.Go(func() { cw.offers(ctx) })
	if cfg.Queue != "" {
		wg.Go(func() { cw.queue(ctx) })
	}
	<-ctx.Done()
	_ = w.Close() // ends the SDK calls in flight and closes Offers()
	wg.Wait()
	if err := tap.Err(); err != nil {
		return fmt.Errorf("chaos: worker %s: journal: %w", cfg.ID, err)
	}
	return nil
}

type chaosWorker struct {
	cfg WorkerConfig
	w   *worker.Worker
	log *slog.Logger

	mu      sync.Mutex
	ctl     Control
	changed chan struct{} // closed when ctl changes
	busy    map[string]bool
	done    map[string]bool // closed jobs (completed, cancelled, or blocked)
	seed    *rand.Rand
}

func (cw *chaosWorker) newRand() *rand.Rand {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return rand.New(rand.NewPCG(cw.seed.Uint64(), cw.seed.Uint64()))
}

func (cw *chaosWorker) current() (Control, <-chan struct{}) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.ctl, cw.changed
}

func (cw *chaosWorker) watchControl(ctx context.Context) {
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	for {
		if c, err := readControl(cw.cfg.Control); err == nil {
			cw.mu.Lock()
			if c.Batch != cw.ctl.Batch || !slices.Equal(c.Jobs, cw.ctl.Jobs) {
				cw.ctl = c
				close(cw.changed)
				cw.changed = make(chan struct{})
			}
			cw.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pick marks and returns a job of the batch that this worker is not
// working on and has not seen closed.
func (cw *chaosWorker) pick(ctl Control, rng *rand.Rand) (string, bool) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	var free []string
	for _, j := range ctl.Jobs {
		if !cw.busy[j] && !cw.done[j] {
			free = append(free, j)
		}
	}
	if len(free) == 0 {
		return "", false
	}
	j := free[rng.IntN(len(free))]
	cw.busy[j] = true
	return j, true
}

func (cw *chaosWorker) unbusy(job string, closed bool) {
	cw.mu.Lock()
	delete(cw.busy, job)
	if closed {
		cw.done[job] = true
	}
	cw.mu.Unlock()
}

func (cw *chaosWorker) jitter(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

func sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-wake:
	case <-t.C:
	}
}

// slot acquires jobs and works on them, one at a time.
func (cw *chaosWorker) slot(ctx context.Context, rng *rand.Rand) {
	L := cw.cfg.Lease
	for ctx.Err() == nil {
		ctl, changed := cw.current()
		job, ok := cw.pick(ctl, rng)
		if !ok {
			sleep(ctx, changed, 50*time.Millisecond)
			continue
		}
		l, err := cw.w.Acquire(ctx, job, worker.WithLeaseDuration(L))
		var ve *worker.VerdictError
		closed := false
		switch {
		case err == nil:
			closed = cw.work(ctx, l, ctl.Batch, rng)
		case errors.Is(err, worker.ErrLeaseHeld):
			sleep(ctx, changed, cw.jitter(rng, L/8, L/4))
		case errors.As(err, &ve):
			closed = true // closed, unresolved, conflict: not for this batch any more
		default:
			cw.log.Debug("acquire", "job", job, "err", err)
			sleep(ctx, changed, 100*time.Millisecond)
		}
		cw.unbusy(job, closed)
	}
}

// work runs one lease: a few progress steps, then a result or a release.
// It reports whether the job is closed for good.
func (cw *chaosWorker) work(ctx context.Context, l *worker.Lease, batch int, rng *rand.Rand) bool {
	L := cw.cfg.Lease
	steps := 2 + rng.IntN(4)
	for i := 1; i < steps; i++ {
		ctl, changed := cw.current()
		if ctl.Batch != batch {
			break // the batch moved on: finish now
		}
		t := time.NewTimer(cw.jitter(rng, L/4, L/2))
		select {
		case <-ctx.Done():
		case <-l.CancelRequested():
		case <-l.Context().Done():
		case <-changed:
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil {
			return false
		}
		select {
		case <-l.CancelRequested():
			return cw.reconcile(ctx, l)
		default:
		}
		if l.Context().Err() != nil {
			cw.zombie(ctx, l, rng)
			return false
		}
		if err := l.Progress(ctx, i*100/steps); err != nil {
			cw.log.Debug("progress", "lease", l.Token().String(), "err", err)
		}
	}
	if l.Context().Err() != nil {
		select {
		case <-l.CancelRequested():
			return cw.reconcile(ctx, l)
		default:
		}
		cw.zombie(ctx, l, rng)
		return false
	}
	switch r := rng.Float64(); {
	case r < 0.75:
		return cw.retry(ctx, func() error { return l.Complete(ctx, events.OutcomeSuccess, "") })
	case r < 0.9:
		cw.retry(ctx, func() error { return l.Complete(ctx, events.OutcomeFailed, "chaos") })
	default:
		cw.retry(ctx, func() error { return l.Release(ctx) })
	}
	return false
}

// retry calls op until it returns something other than ErrNoVerdict (at
// most three times) and reports whether it succeeded.
func (cw *chaosWorker) retry(ctx context.Context, op func() error) bool {
	for range 3 {
		err := op()
		if err == nil {
			return true
		}
		if !errors.Is(err, worker.ErrNoVerdict) || ctx.Err() != nil {
			cw.log.Debug("lease operation", "err", err)
			return false
		}
	}
	return false
}

// reconcile answers a cancellation request: ACK it, then result CANCELLED.
func (cw *chaosWorker) reconcile(ctx context.Context, l *worker.Lease) bool {
	cw.retry(ctx, func() error { return l.AckCancel(ctx) })
	return cw.retry(ctx, func() error { return l.Complete(ctx, events.OutcomeCancelled, "cancelled") })
}

// zombie is what a careless worker does after losing authority: half the
// time it reports progress and success on the old lease anyway.
func (cw *chaosWorker) zombie(ctx context.Context, l *worker.Lease, rng *rand.Rand) {
	cw.log.Info("authority lost", "lease", l.Token().String(), "cause", context.Cause(l.Context()).Error())
	if rng.IntN(2) == 0 {
		return
	}
	err1 := l.Progress(ctx, 99)
	err2 := l.Complete(ctx, events.OutcomeSuccess, "zombie")
	cw.log.Info("zombie effects sent", "lease", l.Token().String(), "progress", errString(err1), "result", errString(err2))
}

func errString(err error) string {
	if err == nil {
		return "accepted"
	}
	return err.Error()
}

// offers accepts most offers (at most two at once), declines some and
// ignores a few, so that their ACK deadline passes.
func (cw *chaosWorker) offers(ctx context.Context) {
	rng := cw.newRand()
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	defer wg.Wait()
	for o := range cw.w.Offers() {
		ctl, _ := cw.current()
		r := rng.Float64()
		switch {
		case r < 0.1:
			continue
		case r < 0.2 || !slices.Contains(ctl.Jobs, o.Job):
			if err := o.Decline(ctx); err != nil {
				cw.log.Debug("decline", "job", o.Job, "err", err)
			}
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			_ = o.Decline(ctx)
			continue
		}
		orng := cw.newRand()
		wg.Go(func() {
			defer func() { <-sem }()
			cw.mu.Lock()
			cw.busy[o.Job] = true
			cw.mu.Unlock()
			closed := false
			if l, err := o.Accept(ctx); err == nil {
				closed = cw.work(ctx, l, ctl.Batch, orng)
			}
			cw.unbusy(o.Job, closed)
		})
	}
}

// queue runs the jobs of the queue (worker.Run): each takes a moment
// (an eighth to a third of a lease) and succeeds. The queue jobs' checks (checkQueues) require every one to
// end COMPLETED, once, by an honest worker. Run announces the capacity
// and announces again after a withdrawal; when a fault made it return
// (its announcement refused), it starts again.
func (cw *chaosWorker) queue(ctx context.Context) {
	L := cw.cfg.Lease
	rng := cw.newRand()
	var mu sync.Mutex
	pause := func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return cw.jitter(rng, L/8, L/3)
	}
	h := func(jctx context.Context, _ *worker.Job) error {
		t := time.NewTimer(pause())
		defer t.Stop()
		select {
		case <-jctx.Done():
			return context.Cause(jctx) // lost or shutting down: Run reports nothing or releases
		case <-t.C:
		}
		return nil
	}
	for ctx.Err() == nil {
		err := cw.w.Run(ctx, cw.cfg.Queue, h, worker.WithConcurrency(max(cw.cfg.QueueSlots, 1)))
		if ctx.Err() != nil || errors.Is(err, worker.ErrClosed) {
			return
		}
		cw.log.Info("queue run ended", "err", errString(err))
		sleep(ctx, nil, 200*time.Millisecond)
	}
}

// journalPath is the journal of client id in dir.
func journalPath(dir, id string) string { return filepath.Join(dir, "journal-"+id+".jsonl") }
