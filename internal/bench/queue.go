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
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Scenario 9, queues (PROTOCOL.md §22): jobs through their whole life,
// submit -> pull -> result, in a closed loop of QueueInflight jobs: a
// dispatcher submits a new job whenever one completes. Tenure: submit
// inputs, QueueWorkers SDK workers each running worker.Run with a
// concurrency of QueueConcurrency and a handler that returns nil at once,
// completions counted from the decision stream (a completed decision
// stored: the job's whole life decided and on disk). The raw baseline, in
// the same run: a JetStream work-queue stream (Tenure's stream settings,
// work-queue retention), the same number of pull workers, each message
// acknowledged with a double ack (the ack confirmed by the server, as
// Tenure's result is confirmed by its verdict), completions counted when
// the ack is confirmed. Both report jobs per second and the time from the
// publish of a job to the start of its handler.

// queueLoad is what one side of the scenario measured.
type queueLoad struct {
	perS     float64
	startP50 time.Duration
	startP99 time.Duration
	samples  int
}

// queues runs each side twice: loaded (QueueInflight jobs in the loop:
// the throughput, and the start latency under load, which the loop's
// window dominates) and alone (one job at a time: the start latency of
// the path itself).
func (b *runner) queues(ctx context.Context) error {
	side := func(name string, run func(context.Context, int) (queueLoad, error)) (loaded, alone queueLoad, err error) {
		if loaded, err = run(ctx, b.cfg.QueueInflight); err != nil {
			return loaded, alone, fmt.Errorf("%s: %w", name, err)
		}
		if alone, err = run(ctx, 1); err != nil {
			return loaded, alone, fmt.Errorf("%s, one job at a time: %w", name, err)
		}
		b.logf("  %s: %.0f jobs/s with %d in the loop (start p50 %v, p99 %v); one at a time: start p50 %v, p99 %v (%d samples)", name,
			loaded.perS, b.cfg.QueueInflight, loaded.startP50.Round(time.Millisecond), loaded.startP99.Round(time.Millisecond),
			alone.startP50.Round(10*time.Microsecond), alone.startP99.Round(10*time.Microsecond), alone.samples)
		return loaded, alone, nil
	}
	base, baseAlone, err := side("raw work queue", b.baselineQueue)
	if err != nil {
		return err
	}
	ten, tenAlone, err := side("tenure queue", func(ctx context.Context, inflight int) (queueLoad, error) {
		return b.tenureQueue(ctx, inflight, "")
	})
	if err != nil {
		return err
	}
	// The same loaded loop with one hostile worker beside the honest ones,
	// in each of its modes (rules revision 5: PROTOCOL.md §22.8).
	r := b.res
	r.QueueHostileRatio = -1
	for _, mode := range HostileModes {
		h, err := b.tenureQueue(ctx, b.cfg.QueueInflight, mode)
		if err != nil {
			return fmt.Errorf("tenure queue with a worker that does %s: %w", mode, err)
		}
		q := 0.0
		if ten.perS > 0 {
			q = h.perS / ten.perS
		}
		b.logf("  tenure queue with a worker that does %s: %.0f jobs/s, %.2f of the run without it", mode, h.perS, q)
		r.QueueHostile = append(r.QueueHostile, QueueHostile{Mode: mode, PerS: h.perS, Ratio: q})
		if r.QueueHostileRatio < 0 || q < r.QueueHostileRatio {
			r.QueueHostileRatio = q
		}
	}
	if base.perS == 0 && ten.perS == 0 {
		return errors.New("no job completed in either measured window")
	}
	r.BaselineQueuePerS, r.TenureQueuePerS = base.perS, ten.perS
	if base.perS > 0 {
		r.QueueRatio = ten.perS / base.perS
	}
	r.BaselineQueueStartP50, r.BaselineQueueStartP99 = ms(baseAlone.startP50), ms(baseAlone.startP99)
	r.TenureQueueStartP50, r.TenureQueueStartP99 = ms(tenAlone.startP50), ms(tenAlone.startP99)
	r.BaselineQueueLoadedP99, r.TenureQueueLoadedP99 = ms(base.startP99), ms(ten.startP99)
	r.QueueInflight = float64(b.cfg.QueueInflight)
	return nil
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

func (b *runner) runWindow(ctx context.Context, l *loadWindow) (queueLoad, error) {
	select {
	case <-time.After(b.cfg.QueueWarmup):
	case <-ctx.Done():
		return queueLoad{}, ctx.Err()
	}
	l.measure.Store(true)
	c0, t0 := l.done.Load(), time.Now()
	select {
	case <-time.After(b.cfg.QueueDuration):
	case <-ctx.Done():
		return queueLoad{}, ctx.Err()
	}
	c1, t1 := l.done.Load(), time.Now()
	l.measure.Store(false)
	l.mu.Lock()
	defer l.mu.Unlock()
	// No job completed in the window is a figure too (0): with --sync
	// always on a disk others share, fsyncs can stall for seconds.
	return queueLoad{perS: float64(c1-c0) / t1.Sub(t0).Seconds(),
		startP50: percentile(l.starts, 50), startP99: percentile(l.starts, 99), samples: len(l.starts)}, nil
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
	stop := b.profile(name)
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
	res, err := b.runWindow(ctx, l)
	cancel()
	if e, ok := failed.Load().(error); ok && err == nil {
		err = e
	}
	return res, err
}

// HostileModes are the modes of the hostile worker of the queue scenario:
// it announces 256 slots every 100 ms and declines every offer, ACKs and
// releases it, never ACKs it, or ACKs it and never renews (the lease
// expires).
var HostileModes = []string{"decline", "release", "never-ack", "ack-expire"}

// tenureQueue runs the Tenure side; with hostile (one of HostileModes),
// a worker of that mode runs beside the honest ones (and the profile is
// not taken).
func (b *runner) tenureQueue(ctx context.Context, inflight int, hostile string) (queueLoad, error) {
	name := "queue-tenure"
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
	var failed atomic.Value
	jsP, err := asyncJS(ncP, 4096, &failed)
	if err != nil {
		return queueLoad{}, err
	}
	if hostile == "" {
		stop := b.profile(name)
		defer stop()
	}
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

	// Completions: completed decisions stored, read in order.
	top := streams.Topology{}
	cons, err := jsP.OrderedConsumer(cctx, top.DecisionStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.DecisionPrefix + ".*.*." + events.KindCompleted.String()}, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return queueLoad{}, err
	}
	cc, err := cons.Consume(func(jetstream.Msg) {
		l.done.Add(1)
		select {
		case tokens <- struct{}{}:
		default:
		}
	}, jetstream.PullMaxMessages(1024))
	if err != nil {
		return queueLoad{}, err
	}
	defer cc.Stop()

	var herr atomic.Int64
	handler := func(_ context.Context, j *worker.Job) error {
		if t, ok := sentAt(j.Payload); ok {
			l.started(t)
		} else {
			herr.Add(1)
		}
		return nil
	}
	for i := range b.cfg.QueueWorkers {
		nc, err := connect(srv.ClientURL(), fmt.Sprintf("bench-queue-worker-%d", i))
		if err != nil {
			return queueLoad{}, err
		}
		defer nc.Close()
		w, err := worker.Connect(nc, fmt.Sprintf("qw%d", i))
		if err != nil {
			return queueLoad{}, err
		}
		defer w.Close()
		wg.Go(func() {
			if err := w.Run(cctx, "bench", handler, worker.WithConcurrency(b.cfg.QueueConcurrency)); err != nil && cctx.Err() == nil {
				failed.CompareAndSwap(nil, err)
			}
		})
	}
	if hostile != "" {
		if err := b.hostileQueueWorker(cctx, &wg, srv.ClientURL(), hostile); err != nil {
			return queueLoad{}, err
		}
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-tokens:
			case <-cctx.Done():
				return
			}
			in := events.Input{Verb: events.VerbSubmit, Queue: "bench", LeaseMS: 60000,
				Payload: strconv.FormatInt(time.Now().UnixNano(), 10), HasPayload: true}
			body := events.AppendInputBody(nil, &in) // kept by the client until its PubAck
			job := "j" + strconv.Itoa(i)
			if _, err := jsP.PublishMsgAsync(&nats.Msg{Subject: events.InputSubject(events.RoleOps, "disp", job, events.VerbSubmit), Data: body},
				jetstream.WithStallWait(30*time.Second)); err != nil {
				if cctx.Err() == nil {
					failed.CompareAndSwap(nil, err)
				}
				return
			}
		}
	})
	res, err := b.runWindow(ctx, l)
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
