package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// Scenario 9, queues (PROTOCOL.md §22): jobs through their whole life,
// submit -> pull -> result, the way users run them. Tenure: a dispatcher
// submits with package ops (SubmitMany for the loaded loops, Submit one
// job at a time), QueueWorkers SDK workers each run worker.Run with a
// concurrency of QueueConcurrency and a handler that returns nil at once;
// a job counts as done when its worker learns that its SUCCESS result was
// accepted (the completed decision stored: the job's whole life decided
// and on disk; worker.WithResultHandler). The raw baseline, in the same
// run: a JetStream work-queue stream (Tenure's stream settings, work-queue
// retention), the same number of pull workers and handlers, each message
// acknowledged with a double ack (the ack confirmed by the server, as
// Tenure's result is by its verdict), done when the ack is confirmed; its
// publisher publishes asynchronously, pipelined. Both report jobs per
// second, the time from the submit (publish) to the handler's start, the
// CPU time of the process per job, the fsyncs the process made per job
// (perf, fsync.go) and its durable writes per job (messages stored, acks
// and, for Tenure, the coordinator's appends: with sync always each is
// one fsync). No quotas: the deployment is the embedded one tenure serve
// runs without tenure auth init, as in every other scenario.

// queueLoad is what one run of one side measured.
type queueLoad struct {
	jobs    int64 // done in the measured window
	perS    float64
	samples []time.Duration // submit to handler start, of the jobs started in the window
	cpuUs   float64         // CPU time of the process per job done
	fsyncs  float64         // fsync system calls of the process per job done (-1: not measured)
	writes  float64         // durable writes per job done (messages stored, acks, appends)
	// Tenure's: inputs stored per job, decisions per append.
	inputs, perAppend float64
}

func (q *queueLoad) p(pct float64) time.Duration { return percentile(q.samples, pct) }

// queues runs each side loaded (QueueInflight jobs in a closed loop: the
// throughput, and the start latency under load, which the loop's window
// dominates: Little's law) and idle (one job at a time: the start latency
// of the path itself); Tenure loaded twice more, with single submits
// (Submit, QueueDispatchers at once) and with a hostile worker of each
// mode. Every run must complete jobs and measure start latencies: one
// that produced none fails the scenario.
func (b *runner) queues(ctx context.Context) error {
	r := b.res
	type run struct {
		name string
		do   func(context.Context) (queueLoad, error)
		out  *queueLoad
	}
	var base, baseIdle, ten, tenIdle, tenSingle, tenFlow, skel, skelIdle, skelGrouped queueLoad
	runs := []run{
		{"raw work queue, loaded", func(ctx context.Context) (queueLoad, error) { return b.baselineQueue(ctx, b.cfg.QueueInflight) }, &base},
		{"raw work queue, one job at a time", func(ctx context.Context) (queueLoad, error) { return b.baselineQueue(ctx, 1) }, &baseIdle},
		{"tenure, SubmitMany, loaded", func(ctx context.Context) (queueLoad, error) {
			return b.tenureQueue(ctx, b.cfg.QueueInflight, submitMany, "")
		}, &ten},
		{"tenure, Submit, one job at a time", func(ctx context.Context) (queueLoad, error) { return b.tenureQueue(ctx, 1, submitOne, "") }, &tenIdle},
		{"skeleton (raw JetStream carrying Tenure's messages), loaded", func(ctx context.Context) (queueLoad, error) {
			return b.skeletonQueue(ctx, b.cfg.QueueInflight, b.queueShapes, false)
		}, &skel},
		{"skeleton, one job at a time", func(ctx context.Context) (queueLoad, error) { return b.skeletonQueue(ctx, 1, b.queueShapes, false) }, &skelIdle},
		{"skeleton, an input's decisions to one addressee in one message, loaded", func(ctx context.Context) (queueLoad, error) {
			return b.skeletonQueue(ctx, b.cfg.QueueInflight, b.queueShapes, true)
		}, &skelGrouped},
		{"tenure, Submit, loaded", func(ctx context.Context) (queueLoad, error) {
			return b.tenureQueue(ctx, b.cfg.QueueInflight, submitOne, "")
		}, &tenSingle},
		{"tenure, Submit, loaded, concurrency keys and a rate limit in force", func(ctx context.Context) (queueLoad, error) {
			return b.tenureQueue(ctx, b.cfg.QueueInflight, submitFlow, "")
		}, &tenFlow},
	}
	for _, x := range runs {
		q, err := x.do(ctx)
		if err == nil {
			err = q.check()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", x.name, err)
		}
		*x.out = q
		b.logf("  %s: %.0f jobs/s; start p50 %v p99 %v p99.9 %v (%d samples); %.1f µs CPU, %s fsyncs, %.2f durable writes per job%s", x.name, q.perS,
			q.p(50).Round(10*time.Microsecond), q.p(99).Round(10*time.Microsecond), q.p(99.9).Round(10*time.Microsecond), len(q.samples),
			q.cpuUs, fsyncText(q.fsyncs), q.writes, tenureText(q))
	}
	r.BaselineQueuePerS, r.TenureQueuePerS, r.TenureQueueSubmitPerS = base.perS, ten.perS, tenSingle.perS
	r.QueueRatio, r.QueueSubmitRatio = ratio(ten.perS, base.perS), ratio(tenSingle.perS, base.perS)
	r.TenureQueueFlowPerS, r.QueueFlowRatio = tenFlow.perS, ratio(tenFlow.perS, tenSingle.perS)
	r.BaselineQueueStartP50, r.BaselineQueueStartP99, r.BaselineQueueStartP999 = ms(baseIdle.p(50)), ms(baseIdle.p(99)), ms(baseIdle.p(99.9))
	r.TenureQueueStartP50, r.TenureQueueStartP99, r.TenureQueueStartP999 = ms(tenIdle.p(50)), ms(tenIdle.p(99)), ms(tenIdle.p(99.9))
	r.BaselineQueueLoadedP50, r.BaselineQueueLoadedP99, r.BaselineQueueLoadedP999 = ms(base.p(50)), ms(base.p(99)), ms(base.p(99.9))
	r.TenureQueueLoadedP50, r.TenureQueueLoadedP99, r.TenureQueueLoadedP999 = ms(ten.p(50)), ms(ten.p(99)), ms(ten.p(99.9))
	r.QueueStartP99Ratio = ratio(r.TenureQueueStartP99, r.BaselineQueueStartP99)
	r.QueueLoadedP99Ratio = ratio(r.TenureQueueLoadedP99, r.BaselineQueueLoadedP99)
	r.BaselineQueueCPUUs, r.TenureQueueCPUUs, r.TenureQueueSubmitCPUUs = base.cpuUs, ten.cpuUs, tenSingle.cpuUs
	r.BaselineQueueFsyncs, r.TenureQueueFsyncs, r.TenureQueueSubmitFsyncs = base.fsyncs, ten.fsyncs, tenSingle.fsyncs
	r.BaselineQueueWrites, r.TenureQueueWrites, r.TenureQueueSubmitWrites = base.writes, ten.writes, tenSingle.writes
	r.TenureQueueInputsPerJob, r.TenureQueuePerAppend = ten.inputs, ten.perAppend
	r.QueueSamplesIdle, r.QueueSamplesLoaded = float64(min(len(baseIdle.samples), len(tenIdle.samples))), float64(min(len(base.samples), len(ten.samples)))
	r.QueueInflight = float64(b.cfg.QueueInflight)
	r.SkeletonQueuePerS, r.QueueSkeletonRatio, r.SkeletonQueueRawRatio = skel.perS, ratio(ten.perS, skel.perS), ratio(skel.perS, base.perS)
	r.SkeletonQueueStartP50, r.SkeletonQueueStartP99, r.SkeletonQueueLoadedP99 = ms(skelIdle.p(50)), ms(skelIdle.p(99)), ms(skel.p(99))
	r.SkeletonQueueStartRatio = ratio(r.SkeletonQueueStartP99, r.BaselineQueueStartP99)
	r.SkeletonQueueCPUUs, r.SkeletonQueueWrites, r.SkeletonQueueInputs = skel.cpuUs, skel.writes, skel.inputs
	r.SkeletonGroupedPerS, r.SkeletonGroupedRawRatio = skelGrouped.perS, ratio(skelGrouped.perS, base.perS)
	r.SkeletonGroupedCPUUs, r.SkeletonGroupedWrites = skelGrouped.cpuUs, skelGrouped.writes

	// The same loaded loop with one hostile worker beside the honest ones,
	// in each of its modes (rules revision 5: PROTOCOL.md §22.8).
	r.QueueHostileRatio = -1
	for _, mode := range HostileModes {
		h, err := b.tenureQueue(ctx, b.cfg.QueueInflight, submitMany, mode)
		if err == nil && h.jobs == 0 {
			err = errors.New("no job completed in the measured window")
		}
		if err != nil {
			return fmt.Errorf("tenure queue with a worker that does %s: %w", mode, err)
		}
		q := ratio(h.perS, ten.perS)
		b.logf("  tenure queue with a worker that does %s: %.0f jobs/s, %.2f of the run without it", mode, h.perS, q)
		r.QueueHostile = append(r.QueueHostile, QueueHostile{Mode: mode, PerS: h.perS, Ratio: q})
		if r.QueueHostileRatio < 0 || q < r.QueueHostileRatio {
			r.QueueHostileRatio = q
		}
	}
	return nil
}

// check fails a run that measured nothing: no job done, no start latency,
// no CPU time, no durable write. A figure of zero is a broken measurement
// here, never a result. (Fsyncs may be zero with sync interval, which
// syncs on a timer; not measured, -1, when perf is not available.)
func (q *queueLoad) check() error {
	switch {
	case q.jobs == 0 || q.perS == 0:
		return errors.New("no job completed in the measured window")
	case len(q.samples) == 0:
		return errors.New("no handler started in the measured window: no start latency measured")
	case q.cpuUs <= 0:
		return errors.New("no CPU time measured")
	case q.writes <= 0:
		return errors.New("no durable write counted")
	}
	return nil
}

func fsyncText(f float64) string {
	if f < 0 {
		return "(not measured)"
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

func tenureText(q queueLoad) string {
	if q.inputs == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.2f inputs per job, %.1f decisions per append)", q.inputs, q.perAppend)
}

// loadWindow counts completions through a warm-up and a measured window
// and collects the start latencies of the jobs started in the measured
// one.
type loadWindow struct {
	done    atomic.Int64
	measure atomic.Bool
	mu      sync.Mutex
	starts  []time.Duration
}

func (l *loadWindow) started(sent time.Time) {
	if l.measure.Load() {
		d := time.Since(sent)
		l.mu.Lock()
		l.starts = append(l.starts, d)
		l.mu.Unlock()
	}
}

// sampled is how many start latencies the measured window collected.
func (l *loadWindow) sampled() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.starts)
}

// queueCounts are the running counts of one side, read at both ends of
// the measured window: its durable writes (messages stored, acks,
// appends), and for Tenure the inputs stored, the decisions stored and the
// coordinator's appends.
type queueCounts struct {
	writes, inputs, decisions, appends uint64
}

// runWindow waits out the warm-up, then measures for QueueDuration: the
// jobs done, the start latencies, the process's CPU time and fsyncs, and
// the counts (counts, read at both ends of the window).
func (b *runner) runWindow(ctx context.Context, l *loadWindow, counts func() (queueCounts, error)) (queueLoad, error) {
	select {
	case <-time.After(b.cfg.QueueWarmup):
	case <-ctx.Done():
		return queueLoad{}, ctx.Err()
	}
	k0, err := counts()
	if err != nil {
		return queueLoad{}, err
	}
	fs := startFsyncs(b.cfg.QueueDuration)
	l.measure.Store(true)
	c0, t0, cpu0 := l.done.Load(), time.Now(), cpuTime()
	select {
	case <-time.After(b.cfg.QueueDuration):
	case <-ctx.Done():
		return queueLoad{}, ctx.Err()
	}
	// A window in which no job completed or no handler started measured
	// nothing. On a loaded machine a short window (the tests' 300 ms,
	// beside another suite) can pass so: it goes on until one did, for
	// up to ten times its length (and at least 30 s); a window that still
	// measured nothing fails the run (check). The fsyncs were counted
	// over the planned window only: not measured when it was extended.
	extended := false
	for limit := t0.Add(max(10*b.cfg.QueueDuration, 30*time.Second)); (l.done.Load() == c0 || l.sampled() == 0) && time.Now().Before(limit); {
		extended = true
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return queueLoad{}, ctx.Err()
		}
	}
	c1, el, cpu := l.done.Load(), time.Since(t0).Seconds(), cpuTime()-cpu0
	l.measure.Store(false)
	k1, err := counts()
	if err != nil {
		return queueLoad{}, err
	}
	n, ferr := fs.wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	q := queueLoad{jobs: c1 - c0, perS: float64(c1-c0) / el, samples: append([]time.Duration(nil), l.starts...), fsyncs: -1}
	if q.jobs > 0 {
		q.cpuUs = cpu.Seconds() * 1e6 / float64(q.jobs)
		q.writes = float64(k1.writes-k0.writes) / float64(q.jobs)
		q.inputs = float64(k1.inputs-k0.inputs) / float64(q.jobs)
		if ferr == nil && !extended {
			q.fsyncs = float64(n) / float64(q.jobs)
		}
	}
	if extended {
		b.logf("    nothing measured in the planned %v: the window was extended to %v (fsyncs not counted)", b.cfg.QueueDuration, time.Duration(el*float64(time.Second)).Round(time.Millisecond))
	}
	if a := k1.appends - k0.appends; a > 0 {
		q.perAppend = float64(k1.decisions-k0.decisions) / float64(a)
	}
	if ferr != nil {
		b.logf("    fsyncs not counted: %v", ferr)
	}
	return q, nil
}

// sentAt is the publish time a job carries (Unix ns in decimal).
func sentAt(s string) (time.Time, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return time.Unix(0, n), err == nil
}

func (b *runner) baselineQueue(ctx context.Context, inflight int) (queueLoad, error) {
	const name = "queue-baseline"
	srv, err := b.startServer(b.newDir(name), false)
	if err != nil {
		return queueLoad{}, err
	}
	defer srv.Shutdown()
	ncP, err := connect(srv.ClientURL(), "bench-queue-dispatcher")
	if err != nil {
		return queueLoad{}, err
	}
	defer ncP.Close()
	var failed atomic.Value
	jsP, err := asyncJS(ncP, 4096, &failed)
	if err != nil {
		return queueLoad{}, err
	}
	sc := baselineStream("BASE_WQ", "base.wq.>")
	sc.Retention = jetstream.WorkQueuePolicy
	st, err := jsP.CreateStream(ctx, sc)
	if err != nil {
		return queueLoad{}, err
	}
	slots := b.cfg.QueueWorkers * b.cfg.QueueConcurrency
	if _, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: slots, AckWait: time.Minute}); err != nil {
		return queueLoad{}, err
	}
	stop := b.profile(name + profileSuffix(inflight))
	defer stop()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := &loadWindow{}
	tokens := make(chan struct{}, inflight)
	for range inflight {
		tokens <- struct{}{}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range b.cfg.QueueWorkers {
		nc, err := connect(srv.ClientURL(), fmt.Sprintf("bench-queue-worker-%d", i))
		if err != nil {
			return queueLoad{}, err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return queueLoad{}, err
		}
		cons, err := js.Consumer(cctx, "BASE_WQ", "workers")
		if err != nil {
			return queueLoad{}, err
		}
		// Concurrency handlers per worker, each taking the next message,
		// running the (empty) handler and acknowledging it, as Run does.
		msgs, err := cons.Messages(jetstream.PullMaxMessages(b.cfg.QueueConcurrency))
		if err != nil {
			return queueLoad{}, err
		}
		defer msgs.Stop()
		for range b.cfg.QueueConcurrency {
			wg.Go(func() {
				for {
					m, err := msgs.Next()
					if err != nil {
						return
					}
					if t, ok := sentAt(string(m.Data())); ok {
						l.started(t)
					}
					if err := m.DoubleAck(cctx); err != nil {
						if cctx.Err() == nil {
							failed.CompareAndSwap(nil, err)
						}
						return
					}
					l.done.Add(1)
					tokens <- struct{}{}
				}
			})
		}
	}
	wg.Go(func() {
		for {
			select {
			case <-tokens:
			case <-cctx.Done():
				return
			}
			if _, err := jsP.PublishAsync("base.wq.job", strconv.AppendInt(nil, time.Now().UnixNano(), 10), jetstream.WithStallWait(30*time.Second)); err != nil {
				if cctx.Err() == nil {
					failed.CompareAndSwap(nil, err)
				}
				return
			}
		}
	})
	// Durable writes: the messages stored and the acks (each acked message
	// is removed from the work queue: a delete the store writes).
	counts := func() (queueCounts, error) {
		info, err := st.Info(ctx)
		if err != nil {
			return queueCounts{}, err
		}
		return queueCounts{writes: info.State.LastSeq + uint64(l.done.Load())}, nil
	}
	res, err := b.runWindow(ctx, l, counts)
	cancel()
	if e, ok := failed.Load().(error); ok && err == nil {
		err = e
	}
	return res, err
}

func profileSuffix(inflight int) string {
	if inflight == 1 {
		return "-idle"
	}
	return ""
}

// freedSlots is the slot a dispatcher just took from tokens and those
// freed meanwhile, taken too: at most events.MaxBatch in all.
func freedSlots(tokens chan struct{}) int {
	n := 1
	for n < events.MaxBatch {
		select {
		case <-tokens:
			n++
		default:
			return n
		}
	}
	return n
}

// HostileModes are the modes of the hostile worker of the queue scenario:
// it announces 256 slots every 100 ms and declines every offer, ACKs and
// releases it, never ACKs it, or ACKs it and never renews (the lease
// expires).
var HostileModes = []string{"decline", "release", "never-ack", "ack-expire"}

// How the Tenure side's dispatcher submits.
const (
	submitMany = iota // ops.SubmitMany of the jobs whose slots freed meanwhile (up to 256 a call), QueueDispatchers calls at once
	submitOne         // ops.Submit of one job, QueueDispatchers at once (one job at a time when the loop holds one)
	// submitFlow is submitOne with flow control in force (rules revision
	// 9): each job names one of flowKeys concurrency keys, each limited to
	// flowMaxActive live jobs, and the queue has a rate limit of
	// flowRate a second: limits the matcher checks at every offer, set
	// high enough that the load, not they, sets the pace.
	submitFlow
)

const (
	flowKeys      = 64
	flowMaxActive = 64
	flowRate      = 1_000_000
)

// queueDispatchers is how many goroutines of the dispatcher submit at once.
const queueDispatchers = 4

// tenureQueue runs the Tenure side with inflight jobs in the loop, the
// dispatcher submitting by how (submitMany, submitOne); with hostile (one
// of HostileModes), a worker of that mode runs beside the honest ones (and
// the profile is not taken).
func (b *runner) tenureQueue(ctx context.Context, inflight, how int, hostile string) (queueLoad, error) {
	name := "queue-tenure" + profileSuffix(inflight)
	if how == submitOne && inflight > 1 {
		name += "-submit"
	}
	if how == submitFlow {
		name += "-flow"
	}
	if hostile != "" {
		name += "-hostile-" + hostile
	}
	srv, co, err := b.tenureServer(name)
	if err != nil {
		return queueLoad{}, err
	}
	defer srv.Shutdown()
	defer co.stop()
	ncP, err := connect(srv.ClientURL(), "bench-queue-dispatcher")
	if err != nil {
		return queueLoad{}, err
	}
	defer ncP.Close()
	disp, err := ops.New(ncP, "disp", ops.WithTimeout(30*time.Second))
	if err != nil {
		return queueLoad{}, err
	}
	defer disp.Close()
	js, err := jetstream.New(ncP)
	if err != nil {
		return queueLoad{}, err
	}
	if how == submitFlow {
		for k := range flowKeys {
			if _, err := disp.SetLimit(ctx, events.Limit{Queue: "bench", ConcurrencyKey: "k" + strconv.Itoa(k), MaxActive: flowMaxActive, HasMaxActive: true}); err != nil {
				return queueLoad{}, fmt.Errorf("limit of key k%d: %w", k, err)
			}
		}
		if _, err := disp.SetLimit(ctx, events.Limit{Queue: "bench", Rate: flowRate, PeriodMS: 1000}); err != nil {
			return queueLoad{}, fmt.Errorf("the queue's rate limit: %w", err)
		}
	}
	if hostile == "" {
		stop := b.profile(name)
		defer stop()
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var failed atomic.Value
	fail := func(err error) {
		if cctx.Err() == nil {
			failed.CompareAndSwap(nil, err)
		}
	}
	l := &loadWindow{}
	tokens := make(chan struct{}, inflight)
	for range inflight {
		tokens <- struct{}{}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	var herr atomic.Int64
	handler := func(_ context.Context, j *worker.Job) error {
		if t, ok := sentAt(j.Payload); ok {
			l.started(t)
		} else {
			herr.Add(1)
		}
		return nil
	}
	// A job is done when its worker learns that its SUCCESS was accepted.
	done := worker.WithResultHandler(func(_ *worker.Job, res worker.Result) {
		if res.Outcome != events.OutcomeSuccess || res.ReportErr != nil {
			fail(fmt.Errorf("an attempt ended %s", res))
			return
		}
		l.done.Add(1)
		select {
		case tokens <- struct{}{}:
		default:
		}
	})
	for i := range b.cfg.QueueWorkers {
		nc, err := connect(srv.ClientURL(), fmt.Sprintf("bench-queue-worker-%d", i))
		if err != nil {
			return queueLoad{}, err
		}
		defer nc.Close()
		w, err := worker.Connect(nc, fmt.Sprintf("qw%d", i), worker.WithErrorHandler(func(err error) {
			if !errors.Is(err, worker.ErrClosed) {
				b.logf("    worker qw%d: %v", i, err)
			}
		}))
		if err != nil {
			return queueLoad{}, err
		}
		defer w.Close()
		wg.Go(func() {
			if err := w.Run(cctx, "bench", handler, worker.WithConcurrency(b.cfg.QueueConcurrency), done); err != nil {
				fail(err)
			}
		})
	}
	if hostile != "" {
		if err := b.hostileQueueWorker(cctx, &wg, srv.ClientURL(), hostile); err != nil {
			return queueLoad{}, err
		}
	}
	var next atomic.Int64 // job ids
	for range min(queueDispatchers, inflight) {
		wg.Go(func() {
			for {
				select {
				case <-tokens:
				case <-cctx.Done():
					return
				}
				n := 1
				if how == submitFlow {
					id := next.Add(1)
					key := "k" + strconv.FormatInt(id%flowKeys, 10)
					if _, err := disp.Submit(cctx, "j"+strconv.FormatInt(id, 10), "bench", ops.WithLease(time.Minute),
						ops.WithPayload(strconv.FormatInt(time.Now().UnixNano(), 10)), ops.WithConcurrencyKey(key)); err != nil {
						fail(err)
						return
					}
					continue
				}
				if how == submitMany {
					n = freedSlots(tokens)
				}
				now := strconv.FormatInt(time.Now().UnixNano(), 10)
				if how == submitOne {
					if _, err := disp.Submit(cctx, "j"+strconv.FormatInt(next.Add(1), 10), "bench", ops.WithLease(time.Minute), ops.WithPayload(now)); err != nil {
						fail(err)
						return
					}
					continue
				}
				jobs := make([]ops.SubmitJob, n)
				for i := range jobs {
					jobs[i] = ops.SubmitJob{ID: "j" + strconv.FormatInt(next.Add(1), 10), Queue: "bench",
						Options: ops.SubmitOptions{Lease: time.Minute, Payload: now, HasPayload: true}}
				}
				if _, err := disp.SubmitMany(cctx, jobs); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	// Durable writes: the inputs stored and the coordinator's appends (a
	// single decision or an atomic batch: one write each).
	top := streams.Topology{}
	var appends uint64 // since the start: the metrics give them since the last take
	counts := func() (queueCounts, error) {
		in, err := lastSeq(ctx, js, top.InputStream())
		if err != nil {
			return queueCounts{}, err
		}
		_, a, _, _ := co.m.take()
		appends += uint64(a)
		return queueCounts{writes: in + appends, inputs: in, decisions: co.c.Stats().DecisionsStored, appends: appends}, nil
	}
	res, err := b.runWindow(ctx, l, counts)
	if err == nil && how == submitMany && hostile == "" && inflight > 1 {
		// The skeleton's runs copy this run's messages, taken while it
		// still runs (its shutdown's releases are no shape of a job's).
		if b.queueShapes, err = captureQueueShapes(ctx, js, top); err != nil {
			err = fmt.Errorf("the shapes of its messages: %w", err)
		} else {
			b.logf("    its last inputs, by verb: %s", b.queueShapes.mix)
		}
	}
	cancel()
	if e, ok := failed.Load().(error); ok && err == nil {
		err = e
	}
	if n := herr.Load(); n > 0 && err == nil {
		err = fmt.Errorf("%d handlers got a job without the payload the dispatcher submitted", n)
	}
	return res, err
}

// hostileQueueWorker starts worker qh in mode on the bench queue: it
// announces 256 slots every 100 ms, and treats every offer the queue makes
// it by its mode, until ctx ends.
func (b *runner) hostileQueueWorker(ctx context.Context, wg *sync.WaitGroup, url, mode string) error {
	nc, err := connect(url, "bench-queue-hostile")
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return err
	}
	w, err := worker.Connect(nc, "qh", worker.WithErrorHandler(func(error) {}))
	if err != nil {
		nc.Close()
		return err
	}
	wg.Go(func() {
		defer nc.Close()
		defer w.Close()
		pull := events.AppendInputBody(nil, &events.Input{Verb: events.VerbPull, Queue: "bench", Slots: 256, TTLMS: 60000})
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			_, _ = js.PublishAsync(events.InputSubject(events.RoleWorker, "qh", events.NoJob, events.VerbPull), pull)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case o, ok := <-w.Offers():
				if !ok {
					return
				}
				switch mode {
				case "decline":
					_ = o.Decline(ctx)
				case "release":
					if l, err := o.Accept(ctx); err == nil {
						_ = l.Release(ctx)
					}
				case "ack-expire": // a bare ACK: nothing renews the lease
					body := events.AppendInputBody(nil, &events.Input{Verb: events.VerbAck, LeaseID: o.LeaseID, Generation: o.Generation})
					_, _ = js.PublishAsync(events.InputSubject(events.RoleWorker, "qh", o.Job, events.VerbAck), body)
				}
			}
		}
	})
	return nil
}
