package coordinator

// The intake gate: the live coordinator's side of the per-worker quotas
// (streams.Quotas, PROTOCOL.md §4.2) and of the storage headroom.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/streams"
)

// Storage states (StorageStats.State).
const (
	StorageOK      = "ok"      // free space above the warning level, or no limit known
	StorageLow     = "low"     // below StorageWarn: worker inputs are still taken
	StorageShort   = "short"   // below StorageReserve: no intake is emptied, so every worker's inputs are refused once its intake is full
	StorageUnknown = "unknown" // no storage limit known (no account limit, no Config.StorageLimit)
)

// StorageStats is the coordinator's view of the deployment's storage and
// of its intake streams (Stats.Storage; nil before the first reading, and
// on a coordinator that is not live).
type StorageStats struct {
	State   string `json:"state"`
	Used    int64  `json:"used_bytes"`    // what the deployment's account stores
	Limit   int64  `json:"limit_bytes"`   // the account's limit (or Config.StorageLimit); 0: none known
	Reserve int64  `json:"reserve_bytes"` // below this much free, worker inputs are refused
	Warn    int64  `json:"warn_bytes"`    // below this much free, State is low
	// Intakes is how many workers have an intake stream (quotas); 0: a
	// deployment without quotas.
	Intakes int `json:"intakes"`
	// Held is how many workers' intakes hold inputs folded but not yet
	// emptied because the worker is past its drain rate (or storage is
	// short).
	Held int `json:"held"`
	// Purged counts the inputs emptied from intakes since the coordinator
	// went live.
	Purged uint64 `json:"purged"`
	Err    string `json:"error,omitempty"` // the last reading's or purge's error
}

// gateTurn is how often the gate empties intakes; storageEvery how often
// it reads the account's storage.
const (
	gateTurn     = 50 * time.Millisecond
	storageEvery = time.Second
	refreshEvery = 5 * time.Second
)

// gate empties intake streams behind the fold at each worker's rate, and
// reads the storage. The live loop owns it: folded is called from the loop,
// run on a goroutine of the live phase.
type gate struct {
	js      jetstream.JetStream
	clk     clock.Clock
	log     *slog.Logger
	top     streams.Topology
	in      jetstream.Stream // the input stream
	limit   int64            // Config.StorageLimit
	reserve int64            // Config.StorageReserve, or its default
	warn    int64            // Config.StorageWarn, or its default

	cfgReserve, cfgWarn int64 // as configured (0: default)
	missing             bool  // a sourced intake stream did not exist yet at the last refresh (run's goroutine only)

	mu      sync.Mutex
	workers map[string]*intake
	stats   StorageStats
	short   bool
}

// intake is one worker's intake stream as the gate sees it.
type intake struct {
	streams.Intake
	s       jetstream.Stream
	bytes   float64 // tokens
	msgs    float64
	last    time.Time
	pending []folded // folded, not yet purged, oldest first
	purged  uint64   // purged below this sequence
	retry   uint64   // a purge below this failed: made again at the next turn
}

type folded struct {
	seq  uint64
	size int64
}

// newGate looks up every intake stream the input stream sources and checks
// it; nil without streams (unit tests of the loop).
func (s *session) newGate() (*gate, error) {
	c := s.c
	if c.jsb == nil {
		return nil, nil // quotas and headroom are JetStream's
	}
	h, js := c.jsb.h, c.jsb.js
	top := c.cfg.Topology
	info, err := h.In.Info(s.ctx) // as widened at the end of genesis, or edited since
	if err != nil {
		return nil, fmt.Errorf("coordinator: stream %s info: %w", top.InputStream(), streams.Classify(err))
	}
	ws := top.Intakes(info.Config)
	g := &gate{js: js, clk: c.clk, log: c.log, top: top, in: h.In, limit: c.cfg.StorageLimit,
		reserve: c.cfg.StorageReserve, warn: c.cfg.StorageWarn, cfgReserve: c.cfg.StorageReserve, cfgWarn: c.cfg.StorageWarn, workers: map[string]*intake{}}
	if err := g.add(s.ctx, ws); err != nil {
		return nil, err
	}
	g.stats = StorageStats{State: StorageUnknown}
	g.sizes()
	return g, nil
}

// add looks up and checks the intake streams of ws that the gate does not
// know yet.
func (g *gate) add(ctx context.Context, ws []string) error {
	now := g.clk.Now()
	g.missing = false
	for _, w := range ws {
		if g.known(w) {
			continue
		}
		name := g.top.IntakeStream(w)
		st, err := g.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			// Sourced before it is created (streams.ApplyQuotas narrowing
			// an input stream that took every input sets the sources
			// first): the next refresh, within storageEvery, adds it.
			g.missing = true
			continue
		}
		if err != nil {
			return fmt.Errorf("coordinator: intake stream %s: %w", name, streams.Classify(err))
		}
		in, err := g.top.CheckIntake(w, st.CachedInfo().Config)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrStreamChanged, err)
		}
		g.mu.Lock()
		g.workers[w] = &intake{Intake: in, s: st, bytes: float64(in.MaxBytes), msgs: float64(in.MaxMsgs), last: now}
		g.mu.Unlock()
	}
	return nil
}

func (g *gate) known(w string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.workers[w] != nil
}

// sizes sets the reserve and the warning level (unless configured) from
// the intakes' sizes.
func (g *gate) sizes() {
	g.mu.Lock()
	defer g.mu.Unlock()
	var sum int64
	for _, in := range g.workers {
		sum += in.MaxBytes
	}
	if g.cfgReserve == 0 {
		// Once the gate stops emptying intakes, each can still take its
		// MaxBytes, and every one of those inputs is stored twice (intake
		// and input stream) until emptied: room for that, and 16 MiB for
		// the coordinator's ticks and decisions meanwhile.
		g.reserve = 2*sum + 16<<20
	}
	if g.cfgWarn == 0 {
		g.warn = 2 * g.reserve
	}
	g.stats.Intakes, g.stats.Reserve, g.stats.Warn = len(g.workers), g.reserve, g.warn
}

// refresh adds the intakes the input stream sources now and the gate does
// not know (an administrator's tenure genesis --quotas for more workers).
func (g *gate) refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := g.in.Info(rctx)
	if err == nil {
		err = g.add(rctx, g.top.Intakes(info.Config))
	}
	if err != nil {
		g.mu.Lock()
		g.stats.Err = err.Error()
		g.mu.Unlock()
		return
	}
	g.sizes()
}

// folded records that the live loop folded input seq of worker's intake,
// of size bytes: it may be emptied from the intake once the worker's rate
// allows.
func (g *gate) folded(worker string, seq uint64, size int64) {
	g.mu.Lock()
	if in := g.workers[worker]; in != nil && seq >= in.purged {
		in.pending = append(in.pending, folded{seq, size})
	}
	g.mu.Unlock()
}

// Stats returns a copy of the gate's view.
func (g *gate) Stats() *StorageStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.stats
	st.Held = 0
	for _, in := range g.workers {
		if len(in.pending) > 0 {
			st.Held++
		}
	}
	return &st
}

// run empties intakes every gateTurn and reads the storage every
// storageEvery until ctx ends.
func (g *gate) run(ctx context.Context) {
	turn := g.clk.NewTicker(gateTurn)
	defer turn.Stop()
	g.readStorage(ctx)
	lastRead, lastRefresh := g.clk.Now(), g.clk.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-turn.C():
			if now.Sub(lastRead) >= storageEvery {
				g.readStorage(ctx)
				lastRead = now
			}
			if now.Sub(lastRefresh) >= refreshEvery || g.missing && now.Sub(lastRefresh) >= storageEvery {
				g.refresh(ctx)
				lastRefresh = now
			}
			g.drain(ctx, now)
		}
	}
}

// readStorage reads the account's storage and sets the state.
func (g *gate) readStorage(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	ai, err := g.js.AccountInfo(rctx)
	cancel()
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.stats.Err = "account info: " + streams.Classify(err).Error()
		return
	}
	g.stats.Err = ""
	g.stats.Used = int64(ai.Store)
	limit := ai.Limits.MaxStore
	if limit <= 0 {
		limit = g.limit
	}
	g.stats.Limit = max(limit, 0)
	was := g.stats.State
	free := limit - g.stats.Used
	switch {
	case limit <= 0:
		g.stats.State, g.short = StorageUnknown, false
	case free < g.reserve:
		g.stats.State, g.short = StorageShort, true
	case free < g.warn:
		g.stats.State, g.short = StorageLow, false
	default:
		g.stats.State, g.short = StorageOK, false
	}
	if was != g.stats.State && was != "" {
		lvl := slog.LevelInfo
		if g.stats.State != StorageOK && g.stats.State != StorageUnknown {
			lvl = slog.LevelWarn
		}
		g.log.Log(ctx, lvl, "storage", "state", g.stats.State, "used_bytes", g.stats.Used, "limit_bytes", limit,
			"reserve_bytes", g.reserve, "warn_bytes", g.warn,
			"meaning", map[string]string{
				StorageOK:    "worker inputs are taken",
				StorageLow:   "free space is below the warning level; worker inputs are still taken",
				StorageShort: "free space is below the reserve: no intake is emptied, so workers' inputs are refused once their intake is full; the coordinator keeps deciding what was stored",
			}[g.stats.State])
	}
}

// drain purges, for each worker, its folded inputs that its rates allow,
// unless storage is short.
func (g *gate) drain(ctx context.Context, now time.Time) {
	type purge struct {
		in  *intake
		seq uint64 // purge below this
		n   int
	}
	var todo []purge
	g.mu.Lock()
	short := g.short
	for _, in := range g.workers {
		dt := now.Sub(in.last).Seconds()
		in.last = now
		if dt > 0 {
			in.bytes = math.Min(float64(in.MaxBytes), in.bytes+dt*float64(in.BytesPerS))
			in.msgs = math.Min(float64(in.MaxMsgs), in.msgs+dt*float64(in.MsgsPerS))
		}
		if short {
			continue
		}
		if len(in.pending) == 0 {
			if in.retry > 0 {
				todo = append(todo, purge{in, in.retry, 0})
				in.retry = 0
			}
			continue
		}
		n := 0
		for _, f := range in.pending {
			size := float64(min(f.size, in.MaxBytes)) // an input larger than the burst passes on a full bucket
			if in.msgs < 1 || in.bytes < size {
				break
			}
			in.msgs--
			in.bytes -= size
			n++
		}
		if n > 0 {
			seq := in.pending[n-1].seq + 1
			in.pending = in.pending[n:]
			if len(in.pending) == 0 {
				in.pending = nil
			}
			in.purged, in.retry = seq, 0
			todo = append(todo, purge{in, seq, n})
		}
	}
	g.mu.Unlock()
	for _, p := range todo {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := p.in.s.Purge(pctx, jetstream.WithPurgeSequence(p.seq))
		cancel()
		g.mu.Lock()
		if err != nil {
			p.in.retry = max(p.in.retry, p.seq)
			g.stats.Err = fmt.Sprintf("purge %s below %d: %v", p.in.Stream, p.seq, streams.Classify(err))
		} else {
			g.stats.Purged += uint64(p.n)
		}
		g.mu.Unlock()
	}
}
