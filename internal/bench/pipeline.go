package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/worker"
)

// pipeline is scenario 1: the baseline pipeline, then Tenure with the same
// number of units in flight: simulated workers speaking the wire protocol,
// flow-controlled in process as the baseline's publisher is (the headline
// figure, renewals coalesced into batch renews as the SDK does under load;
// then one lease per input), and finally SDK workers end to end, which also
// consume their verdicts.
func (b *runner) pipeline(ctx context.Context) error {
	inflight := b.cfg.PipelineWorkers * b.cfg.PipelineLeases
	base, err := b.baselinePipeline(ctx, inflight, nil)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	r := b.res
	r.BaselinePipelinePerS, r.PipelineInflight = base, float64(inflight)
	r.BaselinePipelineCPUUs = b.lastCPU / base * 1e6
	b.logf("  baseline pipeline: %.0f inputs/s answered (%d in flight), %.2f cores busy: %.1f µs CPU each", base, inflight, b.lastCPU, r.BaselinePipelineCPUUs)

	ten, inputs, _, err := b.wirePipeline(ctx, true)
	if err != nil {
		return fmt.Errorf("tenure: %w", err)
	}
	r.TenurePipelinePerS, r.TenureInputsPerS = ten, inputs
	r.PipelineRatio = ratio(ten, base)
	r.TenurePipelineCPUUs = b.lastCPU / ten * 1e6
	b.logf("  tenure pipeline:   %.0f renewals/s accepted (%.0f batch renew inputs/s), %.2f cores busy: %.1f µs CPU each; ratio %.2f", ten, inputs, b.lastCPU, r.TenurePipelineCPUUs, r.PipelineRatio)

	single, _, singleShape, err := b.wirePipeline(ctx, false)
	if err != nil {
		return fmt.Errorf("tenure, one lease per input: %w", err)
	}
	r.TenureSinglePerS, r.SinglePipelineRatio = single, ratio(single, base)
	b.logf("  tenure, one lease per input: %.0f renewals/s, %.2f cores busy: %.1f µs CPU each; ratio %.2f", single, b.lastCPU, b.lastCPU/single*1e6, r.SinglePipelineRatio)

	shaped, err := b.baselinePipeline(ctx, inflight, singleShape)
	if err != nil {
		return fmt.Errorf("baseline, answers shaped like verdicts: %w", err)
	}
	r.BaselineShapedPerS, r.SingleShapedRatio = shaped, ratio(single, shaped)
	b.logf("  baseline, answers shaped like verdicts: %.0f inputs/s answered, %.2f cores busy; one lease per input's ratio to it %.2f", shaped, b.lastCPU, r.SingleShapedRatio)

	sdk, errs, shape, err := b.sdkPipeline(ctx)
	if err != nil {
		return fmt.Errorf("tenure through the SDK: %w", err)
	}
	r.TenureSDKPerS, r.SDKPipelineRatio, r.TenureRenewErrors = sdk, ratio(sdk, base), float64(errs)
	b.logf("  tenure through the SDK, verdicts consumed: %.0f renewals/s (%d errors), %.2f cores busy: %.1f µs CPU each; ratio %.2f", sdk, errs, b.lastCPU, b.lastCPU/sdk*1e6, r.SDKPipelineRatio)

	fair, err := b.baselineSDKPipeline(ctx, nil)
	if err != nil {
		return fmt.Errorf("baseline whose publishers read their answers: %w", err)
	}
	r.BaselineSDKPipelinePerS, r.SDKFairRatio = fair, ratio(sdk, fair)
	b.logf("  baseline, %d publishers reading their answers: %.0f inputs/s answered and read, %.2f cores busy; the SDK's ratio to it %.2f", b.cfg.PipelineWorkers, fair, b.lastCPU, r.SDKFairRatio)

	sdkShaped, err := b.baselineSDKPipeline(ctx, shape)
	if err != nil {
		return fmt.Errorf("baseline whose answers are shaped like verdicts: %w", err)
	}
	r.BaselineSDKShapedPerS, r.SDKShapedRatio = sdkShaped, ratio(sdk, sdkShaped)
	r.DecisionBytes, r.DecisionHeaderBytes = float64(len(shape.Data)), float64(headerBytes(shapedHeader(shape.Header, 0)))
	b.logf("  the same, answers shaped like verdicts (%d-byte body, %d bytes of headers): %.0f inputs/s answered and read, %.2f cores busy; the SDK's ratio to it %.2f",
		len(shape.Data), int(r.DecisionHeaderBytes), sdkShaped, b.lastCPU, r.SDKShapedRatio)
	return nil
}

// window measures the growth of the streams' last sequences over the
// measured window, after the warm-up (start, if set, runs when it begins).
func (b *runner) window(ctx context.Context, js jetstream.JetStream, stream1, stream2 string, start func()) ([]float64, error) {
	return b.windowOf(ctx, js, stream1, stream2, start, b.cfg.PipelineWarmup, b.cfg.PipelineDuration)
}

// windowOf is window with a warm-up and a measured window of its own.
func (b *runner) windowOf(ctx context.Context, js jetstream.JetStream, stream1, stream2 string, start func(), warmup, measured time.Duration) ([]float64, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(warmup):
	}
	streamsToWatch := []string{stream1}
	if stream2 != "" {
		streamsToWatch = append(streamsToWatch, stream2)
	}
	if start != nil {
		start()
	}
	first := make([]uint64, len(streamsToWatch))
	for i, s := range streamsToWatch {
		seq, err := lastSeq(ctx, js, s)
		if err != nil {
			return nil, err
		}
		first[i] = seq
	}
	t0, c0 := time.Now(), cpuTime()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(measured):
	}
	b.lastCPU = (cpuTime() - c0).Seconds() / time.Since(t0).Seconds()
	rates := make([]float64, len(streamsToWatch))
	for i, s := range streamsToWatch {
		seq, err := lastSeq(ctx, js, s)
		if err != nil {
			return nil, err
		}
		rates[i] = float64(seq-first[i]) / time.Since(t0).Seconds()
	}
	return rates, nil
}

// baselinePipeline: a publisher connection keeps `inflight` inputs
// published and not yet answered; a consumer connection reads them in order
// and appends one 200-byte message per input. The rate is that of the
// answers stored.
//
// With shape (a verdict as stored), each answer is shaped like it, as in
// baselineSDKPipeline.
func (b *runner) baselinePipeline(ctx context.Context, inflight int, shape *nats.Msg) (float64, error) {
	name := "baseline-pipeline"
	if shape != nil {
		name = "baseline-pipeline-shaped"
	}
	srv, err := b.startServer(b.newDir(name), false)
	if err != nil {
		return 0, err
	}
	defer srv.Shutdown()
	ncP, err := connect(srv.ClientURL(), "bench-baseline-publisher")
	if err != nil {
		return 0, err
	}
	defer ncP.Close()
	ncC, err := connect(srv.ClientURL(), "bench-baseline-consumer")
	if err != nil {
		return 0, err
	}
	defer ncC.Close()

	tokens := make(chan struct{}, inflight)
	for range inflight {
		tokens <- struct{}{}
	}
	jsP, err := jetstream.New(ncP, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return 0, err
	}
	jsC, err := jetstream.New(ncC, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncAckHandler(func(jetstream.JetStream, *nats.Msg, *jetstream.PubAck) {
			tokens <- struct{}{}
		}))
	if err != nil {
		return 0, err
	}
	if _, err := jsP.CreateStream(ctx, baselineStream("BASE_IN", "base.in.>")); err != nil {
		return 0, err
	}
	if _, err := jsP.CreateStream(ctx, baselineStream("BASE_OUT", "base.out.>")); err != nil {
		return 0, err
	}
	stop := b.profile(strings.Replace(name, "baseline-pipeline", "pipeline-baseline", 1))
	defer stop()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The consumer: read in order, append one message per input.
	cons, err := jsC.OrderedConsumer(cctx, "BASE_IN", jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, err
	}
	out := payload(200, "answer")
	var consErr atomic.Value
	var answers uint64 // the consumer's answers so far: its stream's last sequence
	cc, err := cons.Consume(func(m jetstream.Msg) {
		am := &nats.Msg{Subject: "base.out.w1.job.renewed", Data: out}
		if shape != nil {
			am.Data, am.Header = shape.Data, shapedHeader(shape.Header, answers)
		}
		answers++
		if _, err := jsC.PublishMsgAsync(am, jetstream.WithStallWait(30*time.Second)); err != nil {
			consErr.Store(err)
		}
	}, jetstream.PullMaxMessages(1024))
	if err != nil {
		return 0, err
	}
	defer cc.Stop()

	// The publisher: asynchronous, at most `inflight` unanswered.
	var wg sync.WaitGroup
	wg.Go(func() {
		in := payload(100, "input")
		for cctx.Err() == nil {
			select {
			case <-tokens:
			case <-cctx.Done():
				return
			}
			if _, err := jsP.PublishAsync("base.in.worker.w1.job.renew", in, jetstream.WithStallWait(30*time.Second)); err != nil {
				if cctx.Err() == nil {
					consErr.Store(err)
				}
				return
			}
		}
	})
	rates, err := b.window(ctx, jsP, "BASE_OUT", "", nil)
	cancel()
	wg.Wait()
	if err != nil {
		return 0, err
	}
	if e, ok := consErr.Load().(error); ok {
		return 0, e
	}
	return rates[0], nil
}

// tenureServer starts a server and a coordinator for one of Tenure's runs.
func (b *runner) tenureServer(name string) (*embedded.Server, *coord, error) {
	srv, err := b.startServer(b.newDir(name), false)
	if err != nil {
		return nil, nil, err
	}
	co, err := b.startCoordinator(srv, nil)
	if err != nil {
		srv.Shutdown()
		return nil, nil, err
	}
	if err := co.waitLive(30 * time.Second); err != nil {
		_ = co.stop()
		srv.Shutdown()
		return nil, nil, err
	}
	return srv, co, nil
}

// measure runs the measured window of a Tenure run and reports the
// coordinator's own view of it.
func (b *runner) measure(ctx context.Context, name string, js jetstream.JetStream, co *coord) ([]float64, error) {
	top := streams.Topology{}
	stopTrace := func() {}
	rates, err := b.window(ctx, js, top.DecisionStream(), top.InputStream(), func() {
		co.m.take()
		stopTrace = b.trace(name)
		if b.cfg.ProfileDir != "" && b.cfg.Trace {
			time.AfterFunc(time.Second, func() {
				if f, err := os.Create(filepath.Join(b.cfg.ProfileDir, name+".goroutines")); err == nil {
					_ = pprof.Lookup("goroutine").WriteTo(f, 1)
					f.Close()
				}
			})
		}
	})
	stopTrace()
	if d, a, lat, lag := co.m.take(); a > 0 {
		b.logf("    coordinator: inputs folded %v after being stored; appends of %.0f decisions on average, %v each",
			lag.Round(10*time.Microsecond), float64(d)/float64(a), lat.Round(10*time.Microsecond))
	}
	return rates, err
}

// wirePipeline: PipelineWorkers simulated workers, on one publisher
// connection as the baseline's, each holding PipelineLeases leases, renew
// every lease again as soon as its previous renewal is decided (its input
// folded and every decision of it stored: the coordinator's Stats, read in
// process, as the baseline's publisher counts answers in process). batched,
// a worker renews all its due leases in batch renews of up to 256, as the SDK
// does under load; otherwise one lease per input. The rate is that of the
// verdicts stored; shape is the last verdict stored (lastVerdict).
func (b *runner) wirePipeline(ctx context.Context, batched bool) (verdicts, inputs float64, shape *nats.Msg, err error) {
	name := "pipeline-tenure"
	if !batched {
		name = "pipeline-tenure-single"
	}
	srv, co, err := b.tenureServer(name)
	if err != nil {
		return 0, 0, nil, err
	}
	defer srv.Shutdown()
	defer co.stop()
	nc, err := connect(srv.ClientURL(), "bench-workers")
	if err != nil {
		return 0, 0, nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return 0, 0, nil, err
	}
	// Acquire every lease.
	type lease struct {
		job, id  string
		renewSeq uint64
	}
	nw, nl := b.cfg.PipelineWorkers, b.cfg.PipelineLeases
	leases := make([][]lease, nw)
	futures := make([][]jetstream.PubAckFuture, nw)
	for w := range nw {
		leases[w] = make([]lease, nl)
		for k := range nl {
			job := fmt.Sprintf("job-%d-%d", w, k)
			leases[w][k].job = job
			f, err := js.PublishMsgAsync(&nats.Msg{
				Subject: events.InputSubject(events.RoleWorker, fmt.Sprintf("w%d", w), job, events.VerbAcquire),
				Data:    []byte(`{"v":1,"lease_ms":3600000}`),
			}, jetstream.WithStallWait(30*time.Second))
			if err != nil {
				return 0, 0, nil, err
			}
			futures[w] = append(futures[w], f)
		}
	}
	var last uint64
	seqs := make([][]uint64, nw) // each acquire's input sequence
	for w := range nw {
		seqs[w] = make([]uint64, nl)
		for k, f := range futures[w] {
			select {
			case ack := <-f.Ok():
				seqs[w][k] = ack.Sequence
				last = max(last, ack.Sequence)
			case err := <-f.Err():
				return 0, 0, nil, err
			case <-time.After(time.Minute):
				return 0, 0, nil, fmt.Errorf("acquire: %w", errTimeout)
			}
		}
	}
	for co.c.Stats().InputsFolded < last {
		if err := ctx.Err(); err != nil {
			return 0, 0, nil, err
		}
		time.Sleep(time.Millisecond)
	}
	// Each lease's id, from its grant (under the current rules a lease id
	// is keyed, PROTOCOL.md §14: nobody can derive it from the sequence).
	granted, grants, err := grantedLeases(ctx, js, streams.Topology{}.DecisionStream())
	if err != nil {
		return 0, 0, nil, err
	}
	for w := range nw {
		for k := range nl {
			id, ok := granted[seqs[w][k]]
			if !ok {
				return 0, 0, nil, fmt.Errorf("acquire of %s (input %d) not granted", leases[w][k].job, seqs[w][k])
			}
			leases[w][k].id = id
		}
	}
	b.logf("  %d leases acquired by %d simulated workers", nw*nl, nw)

	stop := b.profile(name)
	defer stop()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := range nw {
		wg.Go(func() {
			actor := fmt.Sprintf("w%d", w)
			type sent struct {
				f    jetstream.PubAckFuture
				seq  uint64
				from int // leases[from:to] of this worker
				to   int
			}
			// Leases are renewed in order, in rounds: the due ones are a
			// prefix of the worker's ring.
			var inFlight []sent
			due, next := nl, 0
			in := events.Input{Role: events.RoleWorker, Actor: actor, Verb: events.VerbRenew}
			var body []byte
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for cctx.Err() == nil {
				for due > 0 {
					n := 1
					if batched {
						n = min(due, events.MaxBatch, nl-next)
					}
					in.Leases = in.Leases[:0]
					for k := next; k < next+n; k++ {
						l := &leases[w][k]
						l.renewSeq++
						in.Leases = append(in.Leases, events.LeaseRef{Job: l.job, LeaseID: l.id, Generation: 1, RenewSeq: l.renewSeq})
					}
					job := events.NoJob
					if n == 1 {
						r := in.Leases[0]
						job, in.LeaseID, in.Generation, in.RenewSeq = r.Job, r.LeaseID, r.Generation, r.RenewSeq
					}
					in.Job = job
					body = events.AppendInputBody(body[:0], &in)
					f, err := js.PublishMsgAsync(&nats.Msg{
						Subject: events.InputSubject(events.RoleWorker, actor, job, events.VerbRenew),
						Data:    append([]byte(nil), body...),
					}, jetstream.WithStallWait(30*time.Second))
					if err != nil {
						if cctx.Err() == nil {
							failed.CompareAndSwap(nil, err)
						}
						return
					}
					inFlight = append(inFlight, sent{f: f, from: next, to: next + n})
					due -= n
					next = (next + n) % nl
				}
				select {
				case <-cctx.Done():
					return
				case <-tick.C:
				}
				folded := co.c.Stats().InputsFolded
				for len(inFlight) > 0 {
					h := &inFlight[0]
					if h.seq == 0 {
						select {
						case ack := <-h.f.Ok():
							h.seq = ack.Sequence
						case err := <-h.f.Err():
							failed.CompareAndSwap(nil, err)
							return
						default:
						}
					}
					if h.seq == 0 || h.seq > folded {
						break
					}
					due += h.to - h.from
					inFlight = inFlight[1:]
				}
			}
		})
	}
	rates, err := b.measure(ctx, name, js, co)
	cancel()
	wg.Wait()
	if err != nil {
		return 0, 0, nil, err
	}
	if e, ok := failed.Load().(error); ok {
		return 0, 0, nil, e
	}
	// Every verdict a renewal: nothing was refused.
	if st := co.c.Stats(); st.LostAuthority != 0 {
		return 0, 0, nil, fmt.Errorf("the coordinator lost authority %d times", st.LostAuthority)
	}
	// Every verdict a renewal (the rate counts the decisions stored).
	if err := checkRenewed(ctx, js, streams.Topology{}.DecisionStream(), grants, 2000); err != nil {
		return 0, 0, nil, err
	}
	if shape, err = lastVerdict(ctx, js, streams.Topology{}.DecisionStream()); err != nil {
		return 0, 0, nil, err
	}
	return rates[0], rates[1], shape, nil
}

// grantedLeases reads the decision stream and returns the lease id of every
// granted acquire by its input's sequence, and the stream's last sequence
// read.
func grantedLeases(ctx context.Context, js jetstream.JetStream, stream string) (ids map[uint64]string, last uint64, err error) {
	out, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, 0, err
	}
	info, err := out.Info(ctx)
	if err != nil {
		return nil, 0, err
	}
	ids = make(map[uint64]string)
	var bad error
	err = readDecisions(ctx, js, stream, 1, info.State.LastSeq, false, func(m jetstream.Msg, _ *jetstream.MsgMetadata) {
		d, err := events.DecodeDecision(m.Data())
		switch {
		case err != nil:
			bad = cmp.Or(bad, fmt.Errorf("decision: %w", err))
		case d.Kind == events.KindGranted:
			ids[d.Cause] = d.Job.LeaseID
		}
	})
	if err = cmp.Or(err, bad); err != nil {
		return nil, 0, err
	}
	return ids, info.State.LastSeq, nil
}

// checkRenewed fails unless each of the last n decisions of stream after
// sequence after (the grants) is a renewal verdict: the pipeline's rate
// counts the decisions stored, which must be renewals, not refusals.
func checkRenewed(ctx context.Context, js jetstream.JetStream, stream string, after, n uint64) error {
	out, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	info, err := out.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.LastSeq <= after {
		return fmt.Errorf("no decision after the grants: no renewal was decided")
	}
	for seq := info.State.LastSeq; seq > after && seq+n > info.State.LastSeq; seq-- {
		m, err := out.GetMsg(ctx, seq)
		if err != nil {
			return fmt.Errorf("decision %d: %w", seq, err)
		}
		d, err := events.DecodeDecision(m.Data)
		if err != nil {
			return fmt.Errorf("decision %d: %w", seq, err)
		}
		if d.Kind != events.KindRenewed {
			return fmt.Errorf("decision %d is %s/%s, not a renewal: the pipeline's renewals were refused", seq, d.Kind, d.Reason)
		}
	}
	return nil
}

// sdkPipeline: PipelineWorkers SDK workers, each on its own connection,
// each holding PipelineLeases leases, renew every one of them in a closed
// loop (Lease.Renew; the SDK coalesces the renewals that are due together
// into batch renews), each learning its verdicts from the decision stream.
// The rate is that of the verdicts stored.
//
// shape is the last verdict the run stored (its subject, body and headers as
// stored), the template of the shaped baseline's answers.
func (b *runner) sdkPipeline(ctx context.Context) (verdicts float64, errs int64, shape *nats.Msg, err error) {
	const name = "pipeline-tenure-sdk"
	srv, co, err := b.tenureServer(name)
	if err != nil {
		return 0, 0, nil, err
	}
	defer srv.Shutdown()
	defer co.stop()
	nc, err := connect(srv.ClientURL(), "bench-admin")
	if err != nil {
		return 0, 0, nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, 0, nil, err
	}
	leases, closeAll, err := acquireMany(ctx, srv.ClientURL(), b.cfg.PipelineWorkers, b.cfg.PipelineLeases)
	defer closeAll()
	if err != nil {
		return 0, 0, nil, err
	}
	b.logf("  %d leases acquired by %d SDK workers", len(leases), b.cfg.PipelineWorkers)

	stop := b.profile(name)
	defer stop()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var nerr atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for _, l := range leases {
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
	rates, err := b.measure(ctx, name, js, co)
	cancel()
	wg.Wait()
	if err != nil {
		return 0, 0, nil, err
	}
	if e, ok := firstErr.Load().(error); ok {
		b.logf("  first renewal error: %v", e)
	}
	shape, err = lastVerdict(ctx, js, streams.Topology{}.DecisionStream())
	if err != nil {
		return 0, 0, nil, err
	}
	return rates[0], nerr.Load(), shape, nil
}

// lastVerdict is the last renewal verdict of stream (a decision stream
// Tenure's renewals were just appended to), within its last 1,000
// messages, as stored: subject, body and headers.
func lastVerdict(ctx context.Context, js jetstream.JetStream, stream string) (*nats.Msg, error) {
	var found *nats.Msg
	err := scanBack(ctx, js, stream, 1000, func(m *nats.Msg) bool {
		if d, err := events.DecodeDecision(m.Data); err == nil && d.Kind == events.KindRenewed {
			found = m
		}
		return found != nil
	})
	if err == nil && found == nil {
		err = fmt.Errorf("no renewal verdict among the last 1,000 decisions of %s", stream)
	}
	return found, err
}

// shapedHeader is the header set of tmpl with the values of the answer
// appended after `last` answers: its own message id, cause and expected
// last sequence; other values as in tmpl, but no atomic batch headers.
func shapedHeader(tmpl nats.Header, last uint64) nats.Header {
	h := make(nats.Header, len(tmpl))
	n := strconv.FormatUint(last+1, 10)
	for k, v := range tmpl {
		switch k {
		case "Nats-Msg-Id":
			h[k] = []string{"answer-" + n}
		case "Nats-Expected-Last-Sequence":
			h[k] = []string{strconv.FormatUint(last, 10)}
		case events.HeaderCause:
			h[k] = []string{n}
		case "Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Batch-Commit":
			// Stored with a verdict appended in an atomic batch; a single
			// append (the stand-in's) carries none.
		default:
			h[k] = v
		}
	}
	return h
}

// headerBytes is the size of h as NATS encodes it (NATS/1.0 line, one
// "key: value" line per value, the blank line).
func headerBytes(h nats.Header) int {
	n := len("NATS/1.0\r\n") + 2
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// acquireMany connects nWorkers SDK workers and acquires perWorker leases of
// one hour for each, concurrently.
func acquireMany(ctx context.Context, url string, nWorkers, perWorker int) ([]*worker.Lease, func(), error) {
	return acquireSet(ctx, url, "", nWorkers, perWorker, nil)
}

// acquireSet is acquireMany for workers <prefix>w<i> holding the jobs
// <prefix>job-<k>, worker i connected with the options opts(i) (if opts is
// not nil) besides its verdict timeout.
func acquireSet(ctx context.Context, url, prefix string, nWorkers, perWorker int, opts func(i int) []worker.Option) ([]*worker.Lease, func(), error) {
	var ws []*worker.Worker
	var ncs []*nats.Conn
	closeAll := func() {
		for _, w := range ws {
			_ = w.Close()
		}
		for _, nc := range ncs {
			nc.Close()
		}
	}
	for i := range nWorkers {
		nc, err := connect(url, "bench-worker")
		if err != nil {
			return nil, closeAll, err
		}
		ncs = append(ncs, nc)
		o := []worker.Option{worker.WithVerdictTimeout(60 * time.Second)}
		if opts != nil {
			o = append(o, opts(i)...)
		}
		w, err := worker.Connect(nc, fmt.Sprintf("%sw%d", prefix, i), o...)
		if err != nil {
			return nil, closeAll, err
		}
		ws = append(ws, w)
	}
	leases := make([]*worker.Lease, nWorkers*perWorker)
	sem := make(chan struct{}, 512)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for i := range leases {
		w := ws[i%nWorkers]
		job := fmt.Sprintf("%sjob-%d", prefix, i)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			l, err := w.Acquire(ctx, job, worker.WithLeaseDuration(time.Hour))
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			leases[i] = l
		})
	}
	wg.Wait()
	if e, ok := firstErr.Load().(error); ok {
		return nil, closeAll, fmt.Errorf("acquire: %w", e)
	}
	return leases, closeAll, nil
}

// baselineSDKPipeline is the fair baseline of the SDK path (issue 20):
// PipelineWorkers publishers, each on its own connection as SDK workers
// are, each keeping PipelineLeases inputs published and not yet answered,
// and each learning its answers as SDK workers learn their verdicts: from
// the output stream, through an ordered consumer filtered to its own
// subjects, created before it publishes. A consumer connection (the
// coordinator's stand-in) reads the inputs in order and appends one
// 200-byte answer per input on the publisher's subject. An input counts
// once its publisher has read its answer.
//
// With shape (a verdict as stored), each answer is shaped like it: its body,
// and its header set with values of the answer's own (a fresh Nats-Msg-Id,
// which enters the stream's duplicate window, the expected last sequence
// of a single writer, the cause); without, a 200-byte body and no headers.
func (b *runner) baselineSDKPipeline(ctx context.Context, shape *nats.Msg) (float64, error) {
	name := "baseline-sdk"
	if shape != nil {
		name = "baseline-sdk-shaped"
	}
	srv, err := b.startServer(b.newDir(name), false)
	if err != nil {
		return 0, err
	}
	defer srv.Shutdown()
	ncC, err := connect(srv.ClientURL(), "bench-baseline-consumer")
	if err != nil {
		return 0, err
	}
	defer ncC.Close()
	var failed atomic.Value
	jsC, err := asyncJS(ncC, 4096, &failed)
	if err != nil {
		return 0, err
	}
	if _, err := jsC.CreateStream(ctx, baselineStream("BASE_IN", "base.in.>")); err != nil {
		return 0, err
	}
	if _, err := jsC.CreateStream(ctx, baselineStream("BASE_OUT", "base.out.>")); err != nil {
		return 0, err
	}
	stop := b.profile("pipeline-" + name)
	defer stop()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	// The coordinator's stand-in: one answer per input, on the
	// publisher's own subject (base.in.<w>.renew -> base.out.<w>.renewed).
	in, err := jsC.OrderedConsumer(cctx, "BASE_IN", jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, err
	}
	answer := payload(200, "answer")
	var answers uint64 // the stand-in's answers so far: its stream's last sequence
	cc, err := in.Consume(func(m jetstream.Msg) {
		w := strings.TrimSuffix(strings.TrimPrefix(m.Subject(), "base.in."), ".renew")
		am := &nats.Msg{Subject: "base.out." + w + ".renewed", Data: answer}
		if shape != nil {
			am.Data, am.Header = shape.Data, shapedHeader(shape.Header, answers)
		}
		answers++
		if _, err := jsC.PublishMsgAsync(am, jetstream.WithStallWait(30*time.Second)); err != nil && cctx.Err() == nil {
			failed.CompareAndSwap(nil, err)
		}
	}, jetstream.PullMaxMessages(1024))
	if err != nil {
		return 0, err
	}
	defer cc.Stop()

	var answered atomic.Int64
	for i := range b.cfg.PipelineWorkers {
		id := fmt.Sprintf("w%d", i)
		nc, err := connect(srv.ClientURL(), "bench-baseline-"+id)
		if err != nil {
			return 0, err
		}
		defer nc.Close()
		js, err := asyncJS(nc, 4096, &failed)
		if err != nil {
			return 0, err
		}
		tokens := make(chan struct{}, b.cfg.PipelineLeases)
		for range b.cfg.PipelineLeases {
			tokens <- struct{}{}
		}
		out, err := followFromNow(cctx, js, "BASE_OUT", "base.out."+id+".>")
		if err != nil {
			return 0, err
		}
		oc, err := out.Consume(func(jetstream.Msg) {
			answered.Add(1)
			select {
			case tokens <- struct{}{}:
			default:
			}
		}, jetstream.PullMaxMessages(1024))
		if err != nil {
			return 0, err
		}
		defer oc.Stop()
		wg.Go(func() {
			input := payload(100, "input")
			subject := "base.in." + id + ".renew"
			for {
				select {
				case <-tokens:
				case <-cctx.Done():
					return
				}
				if _, err := js.PublishAsync(subject, input, jetstream.WithStallWait(30*time.Second)); err != nil {
					if cctx.Err() == nil {
						failed.CompareAndSwap(nil, err)
					}
					return
				}
			}
		})
	}
	select {
	case <-time.After(b.cfg.PipelineWarmup):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	c0, t0, cpu0 := answered.Load(), time.Now(), cpuTime()
	select {
	case <-time.After(b.cfg.PipelineDuration):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	c1, el := answered.Load(), time.Since(t0).Seconds()
	b.lastCPU = (cpuTime() - cpu0).Seconds() / el
	cancel()
	if e, ok := failed.Load().(error); ok {
		return 0, e
	}
	// No answer in the window is a figure too (0): with --sync always on a
	// disk that others share, per-message fsyncs can stall for seconds.
	return float64(c1-c0) / el, nil
}
