package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// floodRounds is how many rounds the flood scenario runs: each a quiet
// window, one flooded within the quota, a quiet one, and one flooded
// beyond it.
const floodRounds = 2

// floodWorker is the flooding worker's id (its intake stream:
// TENURE_INTAKE_flood).
const floodWorker = "flood"

// flood is scenario 10 (issue "A flood costs only the flooder"): on a
// deployment with the quotas tenure auth init writes by default
// (streams.DefaultQuota*: each worker's intake stream bounded, drained
// into the input stream at its rates), an honest SDK worker renews one
// lease, one renewal at a time, measuring each round trip, while one
// worker floods its own intake in every other window:
//
//   - within its quota: it fills half its backlog at once, then sends at
//     nine tenths of its rates, half its bytes as inputs of the largest
//     size the protocol allows, the rest as small ones, so that it is
//     (almost) never refused: the most one worker can put through;
//   - beyond it: two connections publish as fast as the server answers
//     (large inputs on one, small ones on the other), most of them
//     refused over the quota: what the quota cannot stop, the server's
//     work to refuse them (the flooder runs in this process, on the same
//     cores, which a real flooder would not).
//
// The honest round trips of each kind of window against those of the
// quiet windows, same run, same deployment, alternating so that the
// machine's noise falls on all: flood_honest_rtt_p99_ratio (within the
// quota; the target at most 3) and flood_over_rtt_p99_ratio.
func (b *runner) flood(ctx context.Context) error {
	srv, err := b.startServer(b.newDir("flood"), false)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := connect(srv.ClientURL(), "bench-flood-admin")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// As tenure genesis does with auth init's quotas.json: the topology,
	// then the intake streams, before the coordinator goes live.
	top := streams.Topology{}
	if _, err := streams.Ensure(ctx, js, top, coordinator.DefaultLeaderTTL); err != nil {
		return err
	}
	q := streams.Quotas{Workers: []string{"w0", floodWorker},
		MaxBytes: streams.DefaultQuotaBytes, MaxMsgs: streams.DefaultQuotaMsgs,
		BytesPerS: streams.DefaultQuotaBytesPerS, MsgsPerS: streams.DefaultQuotaMsgsPerS}
	if _, err := streams.ApplyQuotas(ctx, js, top, q); err != nil {
		return err
	}
	co, err := b.startCoordinator(srv, nil)
	if err != nil {
		return err
	}
	defer co.stop()
	if err := co.waitLive(30 * time.Second); err != nil {
		return err
	}
	leases, closeAll, err := acquireMany(ctx, srv.ClientURL(), 1, 1)
	defer closeAll()
	if err != nil {
		return err
	}
	l := leases[0]
	// The honest worker keeps within its own quota: it renews at half its
	// rate (125 renewals a second with the defaults, far more than a
	// worker renewing its leases a third of the way through needs).
	// Renewing back to back, a round trip of a few milliseconds is over
	// the rate, and the quota refused the honest worker too once its
	// backlog (500 inputs) was full: the full run failed so.
	gap := time.Duration(float64(time.Second) * 2 / float64(q.MsgsPerS))
	next := time.Now()
	renew := func() (time.Duration, error) {
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		t0 := time.Now()
		next = t0.Add(gap)
		err := l.Renew(ctx)
		return time.Since(t0), err
	}
	warm, n := b.samples()
	for range warm {
		if _, err := renew(); err != nil {
			return err
		}
	}
	per := max(n/(2*floodRounds), 10) // samples per window
	var quiet, within, over []time.Duration
	var in, out floodCounts
	stop := b.profile("flood")
	defer stop()
	for w := range 4 * floodRounds {
		var end func() error
		into := &quiet
		switch w % 4 {
		case 1:
			into, end = &within, b.startFlood(ctx, srv.ClientURL(), q, &in, false)
		case 3:
			into, end = &over, b.startFlood(ctx, srv.ClientURL(), q, &out, true)
		}
		for range per {
			rtt, err := renew()
			*into = append(*into, rtt)
			if err != nil {
				if end != nil {
					_ = end()
				}
				return fmt.Errorf("honest renewal (window %d): %w", w, err)
			}
		}
		if end != nil {
			if err := end(); err != nil {
				return err
			}
		}
	}
	if out.refused.Load() == 0 {
		return errors.New("the flood beyond the quota was never refused: it measured no flood")
	}
	if in.stored.Load() == 0 {
		return errors.New("the flood within the quota stored nothing")
	}
	r := b.res
	r.FloodQuietRTTP50, r.FloodQuietRTTP99 = us(percentile(quiet, 50)), us(percentile(quiet, 99))
	r.FloodRTTP50, r.FloodRTTP99 = us(percentile(within, 50)), us(percentile(within, 99))
	r.FloodRatio = ratio(r.FloodRTTP99, r.FloodQuietRTTP99)
	r.FloodOverRTTP99 = us(percentile(over, 99))
	r.FloodOverRatio = ratio(r.FloodOverRTTP99, r.FloodQuietRTTP99)
	r.FloodStoredPerS = ratio(float64(in.stored.Load()), in.secs)
	r.FloodOverRefusedPerS = ratio(float64(out.refused.Load()), out.secs)
	b.logf("  honest renewal, quiet:              p50 %.0f µs, p99 %.0f µs (%d samples)", r.FloodQuietRTTP50, r.FloodQuietRTTP99, len(quiet))
	b.logf("  honest renewal, flood within quota: p50 %.0f µs, p99 %.0f µs (%d samples): p99 x%.2f", r.FloodRTTP50, r.FloodRTTP99, len(within), r.FloodRatio)
	b.logf("  honest renewal, flood beyond quota: p99 %.0f µs (%d samples): p99 x%.2f", r.FloodOverRTTP99, len(over), r.FloodOverRatio)
	b.logf("  the flooder within its quota: %.0f inputs/s stored (%d refused); beyond it: %.0f/s refused, %.0f/s stored (quota: %d inputs, %d bytes of backlog; %d inputs/s, %d bytes/s)",
		r.FloodStoredPerS, in.refused.Load(), r.FloodOverRefusedPerS, ratio(float64(out.stored.Load()), out.secs), q.MaxMsgs, q.MaxBytes, q.MsgsPerS, q.BytesPerS)
	return nil
}

// floodCounts are a kind of flood's publishes over its windows.
type floodCounts struct {
	stored, refused atomic.Int64
	secs            float64 // its windows' time
}

// floodSmall is the small flood input: a result of a job the flooder
// holds no lease of (each is folded to a lost_authority verdict); the
// large one is the same with a detail that makes it the largest input
// the protocol allows.
var floodSmall = []byte(`{"v":1,"lease_id":"L1-AAAAAAAAAAAAAAAAAAAAAA","generation":1,"outcome":"FAILED"}`)

func floodLarge() []byte {
	large := append([]byte(nil), floodSmall[:len(floodSmall)-1]...)
	large = append(large, `,"detail":"`...)
	for len(large) < events.MaxInputBytes-2 {
		large = append(large, 'x')
	}
	return append(large, `"}`...)
}

// startFlood starts the flooder, within its quota q or beyond it (see
// flood), and returns the function that stops it, adds its counts to fl,
// and fails when one of its publishes failed otherwise than over its
// quota.
func (b *runner) startFlood(ctx context.Context, url string, q streams.Quotas, fl *floodCounts, beyond bool) func() error {
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var failed atomic.Value
	t0 := time.Now()
	large := floodLarge()
	// Within the quota: each connection's burst at the start and its
	// pace after it (inputs per second).
	largePerS := 0.9 * float64(q.BytesPerS) / 2 / float64(len(large))
	smallPerS := 0.9*float64(q.MsgsPerS) - largePerS
	burst := [2]int{int(float64(q.MaxBytes) / 4 / float64(len(large))), int(q.MaxMsgs / 4)}
	pace := [2]float64{largePerS, smallPerS}
	for i, body := range [][]byte{large, floodSmall} {
		wg.Go(func() {
			nc, err := connect(url, "bench-flooder")
			if err != nil {
				failed.CompareAndSwap(nil, err)
				return
			}
			defer nc.Close()
			js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
			if err != nil {
				failed.CompareAndSwap(nil, err)
				return
			}
			var pending sync.WaitGroup
			start := time.Now()
			for k := 0; fctx.Err() == nil; k++ {
				if !beyond && k >= burst[i] {
					// Paced: input k leaves at start + (k - burst) / pace.
					due := start.Add(time.Duration(float64(k-burst[i]) / pace[i] * float64(time.Second)))
					if d := time.Until(due); d > 0 {
						select {
						case <-fctx.Done():
							continue
						case <-time.After(d):
						}
					}
				}
				f, err := js.PublishAsync("tenure.in.worker."+floodWorker+".f"+strconv.Itoa(i)+"-"+strconv.Itoa(k%1000)+".result", body)
				if err != nil {
					select { // the client's own back-pressure
					case <-js.PublishAsyncComplete():
					case <-time.After(time.Millisecond):
					}
					continue
				}
				pending.Go(func() {
					select {
					case <-f.Ok():
						fl.stored.Add(1)
					case err := <-f.Err():
						if streams.QuotaRefusal(err) {
							fl.refused.Add(1)
						} else {
							failed.CompareAndSwap(nil, err)
						}
					}
				})
			}
			pending.Wait()
		})
	}
	return func() error {
		cancel()
		wg.Wait()
		fl.secs += time.Since(t0).Seconds()
		if err, _ := failed.Load().(error); err != nil {
			return fmt.Errorf("the flooder: %w", err)
		}
		return nil
	}
}
