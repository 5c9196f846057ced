package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/receipt"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/worker"
)

// receiptOrder is the order of the receipts scenario's measured windows:
// false is receipts off, true on. Off, on, on, off, then on, off, off, on,
// twice, cancels a drift of the machine that is linear or quadratic over
// eight windows, and each pair of windows (1-2, 3-4, ...) has one of each.
var receiptOrder = []bool{
	false, true, true, false, true, false, false, true,
	false, true, true, false, true, false, false, true,
}

// receipts is scenario 8 (issue 15, "the cost"): SDK workers end to end,
// as in the pipeline's last run, with receipts off and on in the same run,
// on one server and coordinator. Two sets of PipelineWorkers SDK workers
// holding PipelineLeases leases each: set "off" keeps no receipts, set
// "on" keeps a receipt of every acknowledged input and every decision
// received, each worker in a receipt.File of its own in the run's
// directory (as each worker process would). One set renews at a time, in
// closed loops (Lease.Renew): each set once for PipelineWarmup, not
// measured, then in the 16 windows of receiptOrder, each a quarter of
// PipelineWarmup of warm-up (the other set's renewals in flight drain)
// then a quarter of PipelineDuration measured on the decision stream
// (verdicts stored): this machine's throughput moves by half from one
// window of seconds to the next, so many short alternating windows say
// more than two long ones.
// Afterwards every receipt file is read back: every line must be a valid
// receipt, and the lines written during the measured windows give the
// receipts written per second.
func (b *runner) receipts(ctx context.Context) error {
	const name = "receipts"
	srv, co, err := b.tenureServer(name)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	defer co.stop()
	nc, err := connect(srv.ClientURL(), "bench-admin")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	nw, nl := b.cfg.PipelineWorkers, b.cfg.PipelineLeases
	dir := b.newDir("receipts")
	paths := make([]string, nw)
	files := make([]*receipt.File, nw)
	closeFiles := func() error {
		var errs []error
		for _, f := range files {
			if f != nil {
				errs = append(errs, f.Close())
			}
		}
		return errors.Join(errs...)
	}
	defer closeFiles()
	for i := range nw {
		paths[i] = filepath.Join(dir, fmt.Sprintf("on-w%d.receipts", i))
		if files[i], err = receipt.OpenFile(paths[i]); err != nil {
			return err
		}
	}
	// A receipt the SDK could not keep is reported to the worker's error
	// handler: the run would measure less than it claims.
	var keepErrs atomic.Int64
	var keepErr atomic.Value
	onOpts := func(i int) []worker.Option {
		return []worker.Option{worker.WithReceipts(files[i]), worker.WithErrorHandler(func(err error) {
			if strings.Contains(err.Error(), "receipt") {
				keepErrs.Add(1)
				keepErr.CompareAndSwap(nil, err)
			}
		})}
	}
	off, closeOff, err := acquireSet(ctx, srv.ClientURL(), "off-", nw, nl, nil)
	defer closeOff()
	if err != nil {
		return fmt.Errorf("receipts off: %w", err)
	}
	on, closeOn, err := acquireSet(ctx, srv.ClientURL(), "on-", nw, nl, onOpts)
	defer closeOn()
	if err != nil {
		return fmt.Errorf("receipts on: %w", err)
	}
	b.logf("  %d leases acquired by %d SDK workers without receipts, %d by %d keeping receipts (%s)", len(off), nw, len(on), nw, dir)

	type window struct {
		on         bool
		rate, cpu  float64 // verdicts stored per second; cores busy
		secs       float64
		from, upto []int64 // the receipt files' sizes when the window began and ended
	}
	sizes := func() []int64 {
		s := make([]int64, nw)
		for i, p := range paths {
			if fi, err := os.Stat(p); err == nil {
				s[i] = fi.Size()
			}
		}
		return s
	}
	var nerr atomic.Int64
	var firstErr atomic.Value
	// run renews every lease of set in closed loops for a window (warm-up,
	// then measured).
	run := func(name string, set []*worker.Lease, warmup, measured time.Duration) (window, error) {
		var w window
		stop := b.profile(name)
		defer stop()
		cctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for _, l := range set {
			wg.Go(func() {
				for cctx.Err() == nil {
					if err := l.Renew(cctx); err != nil {
						if cctx.Err() != nil {
							return
						}
						nerr.Add(1)
						firstErr.CompareAndSwap(nil, err)
						if errors.Is(err, worker.ErrLostAuthority) {
							return
						}
					}
				}
			})
		}
		var t0 time.Time
		rates, err := b.windowOf(ctx, js, streams.Topology{}.DecisionStream(), "", func() {
			w.from, t0 = sizes(), time.Now()
		}, warmup, measured)
		w.upto, w.secs, w.cpu = sizes(), time.Since(t0).Seconds(), b.lastCPU
		cancel()
		wg.Wait()
		if err != nil {
			return w, err
		}
		w.rate = rates[0]
		return w, nil
	}
	// Both sets once, to warm up.
	for _, set := range [][]*worker.Lease{off, on} {
		if _, err := run("receipts-warmup", set, b.cfg.PipelineWarmup/2, b.cfg.PipelineWarmup/2); err != nil {
			return err
		}
	}
	var wins []window
	for k, isOn := range receiptOrder {
		set, state := off, "off"
		if isOn {
			set, state = on, "on"
		}
		w, err := run(fmt.Sprintf("receipts-%d-%s", k+1, state), set, b.cfg.PipelineWarmup/4, b.cfg.PipelineDuration/4)
		if err != nil {
			return err
		}
		w.on = isOn
		wins = append(wins, w)
		b.logf("    window %d, receipts %s: %.0f renewals/s, %.2f cores busy: %.1f µs CPU each", k+1, state, w.rate, w.cpu, ratio(w.cpu, w.rate)*1e6)
	}
	closeOn()
	closeOff()
	if err := closeFiles(); err != nil {
		return err
	}
	if e, ok := keepErr.Load().(error); ok {
		return fmt.Errorf("%d receipts not kept, the first: %w", keepErrs.Load(), e)
	}
	if e, ok := firstErr.Load().(error); ok {
		b.logf("  first renewal error: %v", e)
	}

	// Read every receipt back; count the lines written in the windows.
	var lines, inWindows, inputs, decisions, size int64
	for i, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		size += int64(len(data))
		rs, err := receipt.Read(bytes.NewReader(data), p)
		if err != nil {
			return err
		}
		for _, l := range rs {
			if l.Err != nil {
				return fmt.Errorf("%s: %w", l.Origin(), l.Err)
			}
			switch l.Kind {
			case receipt.KindInput:
				inputs++
			case receipt.KindDecision:
				decisions++
			}
		}
		lines += int64(len(rs))
		for _, w := range wins {
			if w.on {
				inWindows += int64(bytes.Count(data[w.from[i]:w.upto[i]], []byte{'\n'}))
			}
		}
	}
	if lines == 0 || inWindows == 0 {
		return fmt.Errorf("no receipt written in %s", dir)
	}
	var rate, cpu, secs [2]float64 // [off, on]: sums over the windows
	var n [2]float64
	for _, w := range wins {
		k := 0
		if w.on {
			k = 1
		}
		rate[k] += w.rate
		cpu[k] += ratio(w.cpu, w.rate) * 1e6 // a window of no renewal (a starved machine) adds nothing, not +Inf
		secs[k] += w.secs
		n[k]++
	}
	// The ratio of each pair of windows, one of each state, shows the
	// spread.
	lo, hi := 0.0, 0.0
	for k := 0; k+1 < len(wins); k += 2 {
		a, c := wins[k], wins[k+1]
		if a.on {
			a, c = c, a
		}
		q := ratio(c.rate, a.rate)
		if k == 0 || q < lo {
			lo = q
		}
		if k == 0 || q > hi {
			hi = q
		}
	}
	r := b.res
	r.SDKReceiptsRatioMin, r.SDKReceiptsRatioMax = lo, hi
	r.SDKReceiptsOffPerS, r.SDKReceiptsOnPerS = rate[0]/n[0], rate[1]/n[1]
	r.SDKReceiptsRatio = ratio(r.SDKReceiptsOnPerS, r.SDKReceiptsOffPerS)
	r.SDKReceiptsOffCPUUs, r.SDKReceiptsOnCPUUs = cpu[0]/n[0], cpu[1]/n[1]
	r.SDKReceiptsWrittenPerS = float64(inWindows) / secs[1]
	r.SDKReceiptsPerVerdict = ratio(r.SDKReceiptsWrittenPerS, r.SDKReceiptsOnPerS)
	r.SDKReceiptsLines, r.SDKReceiptsBytes = float64(lines), float64(size)
	r.SDKReceiptsErrors = float64(nerr.Load())
	b.logf("  SDK end to end, receipts off: %.0f renewals/s (%.1f µs CPU each); on: %.0f renewals/s (%.1f µs CPU each); ratio %.3f (pairs of windows: %.2f to %.2f)",
		r.SDKReceiptsOffPerS, r.SDKReceiptsOffCPUUs, r.SDKReceiptsOnPerS, r.SDKReceiptsOnCPUUs, r.SDKReceiptsRatio, lo, hi)
	b.logf("  receipts: %.0f written/s while measured (%.2f per verdict); %d in all (%d of inputs, %d of decisions, every one valid), %.1f MB in %d files; %d renewals not accepted",
		r.SDKReceiptsWrittenPerS, r.SDKReceiptsPerVerdict, lines, inputs, decisions, float64(size)/1e6, nw, nerr.Load())
	return nil
}
