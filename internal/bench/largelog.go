package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// largeLog builds a log of LogInputs inputs with a live coordinator (which
// stores its decisions and its snapshots as in production), then restarts
// the server in the run's sync mode and measures scenario 6 (restart) and
// scenario 3 (replay) on it.
//
// The log is written with the server in interval mode whatever the run's
// mode: both scenarios only read it, and a million fsynced appends would
// take most of the run.
func (b *runner) largeLog(ctx context.Context) error {
	dir := b.newDir("large-log")
	n := b.cfg.LogInputs
	t0 := time.Now()
	stop := b.profile("build-log")
	err := b.buildLog(ctx, dir, n)
	stop()
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	b.logf("  log of %d inputs built in %.1f s", n, time.Since(t0).Seconds())
	// The log was written a minute ago, not over hours: the kernel still
	// holds most of it as dirty pages, and writes them back during the
	// scenarios unless asked now. Writeback competes with the reads for the
	// disk, and an fsync (the coordinator's leadership entry, every append
	// with sync always) waits for the journal to carry it. A log a
	// coordinator restarts on has long been on disk: flush it first.
	t1 := time.Now()
	syscall.Sync()
	b.logf("  log flushed to disk in %.1f s", time.Since(t1).Seconds())
	srv, err := b.startServer(dir, false)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	if err := b.restart(ctx, srv); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	return b.replay(ctx, srv)
}

// buildLog writes a log of n inputs as a coordinator would have left it:
// the default policy first, then jobs acquired, renewed and reporting
// progress in turn (ten inputs per job), a tick now and then; every
// decision the fold derives from the stored inputs, appended in order with
// the coordinator's headers; and a snapshot, stored as the coordinator
// stores it, of the input that leaves DefaultSnapshotEvery inputs after it
// (the most a coordinator with the default configuration ever has to fold
// on restart; a third of the log for a small one). Writing the decisions
// directly rather than through a live coordinator takes a fraction of the
// time; the audit of scenario 3 checks that they are exactly what the
// coordinator would have stored. They are written without their
// Nats-Msg-Id: a log written in a minute would leave
// a million ids in the stream's two-minute duplicate window (rebuilt in
// memory when the server restarts, and scanned by every garbage collection
// of this process), which a log written over hours never does; nothing
// that reads the log reads that header.
func (b *runner) buildLog(ctx context.Context, dir string, n int) error {
	srv, err := b.startServer(dir, true)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := connect(srv.ClientURL(), "bench-log-builder")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
	if err != nil {
		return err
	}
	top := streams.Topology{}
	h, err := streams.Ensure(ctx, js, top, coordinator.DefaultLeaderTTL)
	if err != nil {
		return err
	}
	// A log written by WriteLog, not by a coordinator: no genesis.
	if _, err := streams.EndGenesis(ctx, js, top); err != nil {
		return err
	}
	_, _, err = WriteLog(ctx, js, top, h.Snapshots, n)
	return err
}

// WriteLog appends a synthetic log to top's streams through js (made with a
// large WithPublishAsyncMaxPending, e.g. 8192): the default policy, then n
// worker inputs over n/10 jobs (an acquire each, then alternating renewals
// and progress reports, a tick every 997 inputs); then it folds the stored
// inputs (their stored times decide) and appends every decision with the
// coordinator's headers and fence. With snapshots (non-nil) it also stores
// the snapshot a coordinator would have taken DefaultSnapshotEvery inputs
// before the end (or a third of the way from it). It returns the inputs and
// decisions written. top (unpartitioned) has empty streams. The bench's large log
// and the audit's throughput test share it.
func WriteLog(ctx context.Context, js jetstream.JetStream, top streams.Topology, snapshots jetstream.ObjectStore, n int) (inputs, decisions uint64, err error) {
	if top.Partition.Partitioned() {
		return 0, 0, fmt.Errorf("bench: WriteLog writes an unpartitioned log, not partition %s", top.Partition)
	}
	publish := func(m *nats.Msg) error {
		_, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute))
		return err
	}
	complete := func() error {
		select {
		case <-js.PublishAsyncComplete():
			return nil
		case <-time.After(10 * time.Minute):
			return fmt.Errorf("appends not acknowledged: %w", errTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Inputs 1 and 2, as a coordinator begins a log: the rules (a random
	// lease key) and the default policy.
	rules := projector.Rules{Revision: events.CurrentRevision}
	_, _ = rand.Read(rules.LeaseKey[:]) // never fails (crypto/rand)
	rin := events.Input{Verb: events.VerbRules, Revision: rules.Revision, LeaseKey: rules.LeaseKey}
	if err := publish(&nats.Msg{Subject: events.InputSubject(events.RoleCoord, "c0", events.NoJob, events.VerbRules), Data: events.AppendInputBody(nil, &rin)}); err != nil {
		return 0, 0, err
	}
	pol := events.Input{Verb: events.VerbPolicy, Policy: events.DefaultPolicy()}
	if err := publish(&nats.Msg{Subject: events.InputSubject(events.RoleCoord, "c0", events.NoJob, events.VerbPolicy), Data: events.AppendInputBody(nil, &pol)}); err != nil {
		return 0, 0, err
	}
	const first = 3 // the first worker input
	jobs := max(n/10, 1)
	var body []byte
	for i := range n {
		k, round := i%jobs, i/jobs
		job := "job-" + strconv.Itoa(k)
		w := "w" + strconv.Itoa(k%64)
		var subject string
		body = append(body[:0], `{"v":1`...)
		switch {
		case i%997 == 996:
			subject = events.InputSubject(events.RoleCoord, "c0", events.NoJob, events.VerbTick)
		case round == 0:
			subject = events.InputSubject(events.RoleWorker, w, job, events.VerbAcquire)
			body = append(body, `,"lease_ms":3600000`...)
		case round%2 == 1:
			subject = events.InputSubject(events.RoleWorker, w, job, events.VerbRenew)
			// The lease of job k was created by input first+k.
			body = fmt.Appendf(body, `,"lease_id":%q,"generation":1,"renew_seq":%d`, projector.LeaseID(rules, events.Partition{}, uint64(first+k), job), round)
		default:
			subject = events.InputSubject(events.RoleWorker, w, job, events.VerbProgress)
			body = fmt.Appendf(body, `,"lease_id":%q,"generation":1,"progress_seq":%d,"value":%d`, projector.LeaseID(rules, events.Partition{}, uint64(first+k), job), round, round%100)
		}
		body = append(body, '}')
		if err := publish(&nats.Msg{Subject: subject, Data: append([]byte(nil), body...)}); err != nil {
			return 0, 0, err
		}
	}
	if err := complete(); err != nil {
		return 0, 0, err
	}

	// Fold the stored inputs (their stored times decide) and append.
	total := uint64(n + first - 1) // rules and policy, then n
	snapAt := total - min(coordinator.DefaultSnapshotEvery, total/3)
	cons, err := js.OrderedConsumer(ctx, top.InputStream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, 0, err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return 0, 0, err
	}
	defer it.Stop()
	p := projector.New()
	var decSeq uint64
	var chain, snapChain events.Chain
	chainer := events.NewChainer()
	var snap []byte
	var snapDec, anchor uint64
	var snapHash [events.StateHashLen]byte
	for p.LastSeq() < total {
		m, err := it.Next()
		if err != nil {
			return 0, 0, err
		}
		meta, err := m.Metadata()
		if err != nil {
			return 0, 0, err
		}
		ds, err := p.Step(events.Raw{Seq: meta.Sequence.Stream, Time: meta.Timestamp.UnixNano(), Subject: m.Subject(), Body: m.Data()})
		if err != nil {
			return 0, 0, err
		}
		for i := range ds {
			d := &ds[i]
			subj, body := events.DecisionSubject(d), events.AppendDecision(nil, d)
			chain = chainer.Next(chain, decSeq+1, d.Cause, d.N, d.Of, subj, body)
			msg := &nats.Msg{Subject: subj, Data: body, Header: nats.Header{
				events.HeaderCause:              {strconv.FormatUint(d.Cause, 10)},
				events.HeaderIndex:              {strconv.Itoa(int(d.N)) + "/" + strconv.Itoa(int(d.Of))},
				events.HeaderChain:              {chain.String()},
				jetstream.ExpectedLastSeqHeader: {strconv.FormatUint(decSeq, 10)},
			}}
			if err := publish(msg); err != nil {
				return 0, 0, err
			}
			decSeq++
		}
		if p.LastSeq() == snapAt {
			snap, snapDec, snapChain = p.Snapshot(), decSeq, chain
			snapHash = sha256.Sum256(snap)
			// The checkpoint claiming its hash comes after the log's
			// inputs: input total+1, anchored by its decision.
			cin := events.Input{Verb: events.VerbCheckpoint, CheckpointSeq: snapAt, StateHash: snapHash}
			if err := publish(&nats.Msg{Subject: events.InputSubject(events.RoleCoord, "c0", events.NoJob, events.VerbCheckpoint), Data: events.AppendInputBody(nil, &cin)}); err != nil {
				return 0, 0, err
			}
			total++
		}
		if n := len(ds); snap != nil && n > 0 && ds[n-1].Kind == events.KindCheckpointed {
			anchor = decSeq
		}
	}
	if err := complete(); err != nil {
		return 0, 0, err
	}
	if snap != nil && snapshots != nil {
		meta := jetstream.ObjectMeta{Name: audit.SnapshotObject, Headers: nats.Header{}}
		meta.Headers.Set(audit.HeaderSnapshotInput, strconv.FormatUint(snapAt, 10))
		meta.Headers.Set(audit.HeaderSnapshotDecision, strconv.FormatUint(snapDec, 10))
		meta.Headers.Set(audit.HeaderSnapshotAnchor, strconv.FormatUint(anchor, 10))
		meta.Headers.Set(audit.HeaderSnapshotHash, hex.EncodeToString(snapHash[:]))
		meta.Headers.Set(audit.HeaderSnapshotChain, snapChain.String())
		if _, err := snapshots.Put(ctx, meta, bytes.NewReader(snap)); err != nil {
			return 0, 0, fmt.Errorf("store the snapshot: %w", err)
		}
	}
	return total, decSeq, nil
}

// restart is scenario 6: the time from starting a coordinator on the log
// to it being live, from its snapshot and then without one (folding and
// verifying every input and decision).
func (b *runner) restart(ctx context.Context, srv *embedded.Server) error {
	measure := func(name string, mod func(*coordinator.Config)) (float64, coordinator.Stats, error) {
		stop := b.profile(name)
		defer stop()
		t0 := time.Now()
		co, err := b.startCoordinator(srv, mod)
		if err != nil {
			return 0, coordinator.Stats{}, err
		}
		err = co.waitLive(10 * time.Minute)
		dt := time.Since(t0).Seconds()
		st := co.c.Stats()
		if serr := co.stop(); err == nil && serr != nil {
			err = serr
		}
		return dt, st, err
	}
	snap, st, err := measure("restart-snapshot", nil)
	if err != nil {
		return err
	}
	if st.SnapshotSeq == 0 {
		return fmt.Errorf("the coordinator did not restore a snapshot")
	}
	cold, _, err := measure("restart-cold", func(c *coordinator.Config) { c.SnapshotEvery = -1 })
	if err != nil {
		return err
	}
	r := b.res
	r.RestartSnapshotS, r.RestartColdS = snap, cold
	r.RestartSnapshotInputs = float64(st.InputsFolded - st.SnapshotSeq)
	b.logf("  restart from the snapshot of input %d (%d inputs after it): %.2f s; without a snapshot: %.2f s",
		st.SnapshotSeq, st.InputsFolded-st.SnapshotSeq, snap, cold)
	return nil
}

// replay is scenario 3: an in-order read of the input stream (the better
// of one before and one after the audit), then audit.Run over the log.
func (b *runner) replay(ctx context.Context, srv *embedded.Server) error {
	nc, err := connect(srv.ClientURL(), "bench-replay")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	top := streams.Topology{}
	inputs, err := lastSeq(ctx, js, top.InputStream())
	if err != nil {
		return err
	}
	decisions, err := lastSeq(ctx, js, top.DecisionStream())
	if err != nil {
		return err
	}
	// Every read is also timed in CPU (the whole process: the embedded
	// server and the readers, both on this machine's cores): on a machine
	// whose cores the reads keep busy, the ratio of the CPU per input is
	// what the ratio of the rates comes to, whatever else runs beside.
	stop := b.profile("replay-baseline")
	c0 := cpuTime()
	raw1, err := readStreams(ctx, js, top.InputStream())
	cpu1 := cpuTime() - c0
	stop()
	if err != nil {
		return err
	}
	c0 = cpuTime()
	both, err := readStreams(ctx, js, top.InputStream(), top.DecisionStream())
	cpuBoth := cpuTime() - c0
	if err != nil {
		return err
	}
	stop = b.profile("replay-audit")
	c0 = cpuTime()
	rep, err := audit.Run(ctx, audit.Config{JS: js, Topology: top})
	cpuAudit := cpuTime() - c0
	stop()
	if err != nil {
		return err
	}
	c0 = cpuTime()
	raw2, err := readStreams(ctx, js, top.InputStream())
	cpu2 := cpuTime() - c0
	if err != nil {
		return err
	}
	stop = b.profile("replay-chain")
	chain, err := chainCost(ctx, js, top.DecisionStream(), rep.ChainSeq, rep.ChainHead)
	stop()
	if err != nil {
		return fmt.Errorf("chain: %w", err)
	}
	raw := min(raw1, raw2)
	r := b.res
	r.LogInputs, r.LogDecisions = float64(inputs), float64(decisions)
	r.BaselineReplayPerS = float64(inputs) / raw.Seconds()
	r.BaselineReplay2PerS = float64(inputs) / both.Seconds()
	r.AuditReplayPerS = rep.Rate()
	r.ReplayRatio = ratio(r.AuditReplayPerS, r.BaselineReplayPerS)
	r.ReplayBothRatio = ratio(r.AuditReplayPerS, r.BaselineReplay2PerS)
	perInput := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(inputs) }
	rawCPU := cpu1 // of the faster read, as raw
	if raw2 < raw1 {
		rawCPU = cpu2
	}
	r.BaselineReplayCPUUs = perInput(rawCPU)
	r.BaselineReplay2CPUUs = perInput(cpuBoth)
	r.AuditReplayCPUUs = perInput(cpuAudit)
	r.ReplayCPURatio = ratio(r.BaselineReplayCPUUs, r.AuditReplayCPUUs)
	r.BaselineReplayCores = ratio(rawCPU.Seconds(), raw.Seconds())
	r.AuditReplayCores = ratio(cpuAudit.Seconds(), rep.Elapsed.Seconds())
	if rep.OK() && rep.Inputs == inputs {
		r.AuditOK = 1
	}
	r.ChainPerS = float64(chain.decisions) / chain.hashing.Seconds()
	r.ChainMBPerS = float64(chain.bytes) / 1e6 / chain.hashing.Seconds()
	r.AuditChainShare = ratio(chain.hashing.Seconds(), rep.Elapsed.Seconds())
	b.logf("  in-order read of %d inputs: %.0f/s (both streams, %d decisions too: %.0f inputs/s)", inputs, r.BaselineReplayPerS, decisions, r.BaselineReplay2PerS)
	b.logf("  audit replay-and-verify: %.0f inputs/s (%d verified, ok %v): ratio %.2f", r.AuditReplayPerS, rep.Verified, rep.OK(), r.ReplayRatio)
	b.logf("  CPU per input (whole process): one stream %.1f µs, both streams %.1f µs, audit %.1f µs: ratio %.2f; cores kept busy: one stream %.2f, audit %.2f",
		r.BaselineReplayCPUUs, r.BaselineReplay2CPUUs, r.AuditReplayCPUUs, r.ReplayCPURatio, r.BaselineReplayCores, r.AuditReplayCores)
	b.logf("  chain check over the %d stored decisions alone: %.0f decisions/s (%.0f MB/s hashed), %.3f s; %.1f%% of the audit's %.2f s",
		chain.decisions, r.ChainPerS, r.ChainMBPerS, chain.hashing.Seconds(), 100*r.AuditChainShare, rep.Elapsed.Seconds())
	return nil
}

// chainWork is what chainCost measured.
type chainWork struct {
	decisions uint64
	bytes     int64         // hashed
	hashing   time.Duration // the chain check alone
}

// chainCost times the check of the decision chain (PROTOCOL.md §20) over
// every decision of stream, as the audit's link does it: C(i) from C(i-1)
// and the decision's sequence, Tenure-Cause, Tenure-N, subject and body
// (events.Chainer.Next), its Tenure-Chain header parsed and compared. The
// decisions are read first, a chunk at a time into memory, and only the
// check is timed. A chunk is small enough to stay in the CPU's cache (about
// 200 KB), as a decision the audit checks was just read and compared: hashed
// from memory, a chunk of 65,536 decisions (50 MB) was checked at half the
// speed. Every value must match its header, and the last one the
// audit's chain head at headSeq.
func chainCost(ctx context.Context, js jetstream.JetStream, stream string, headSeq uint64, head events.Chain) (chainWork, error) {
	var w chainWork
	last, err := lastSeq(ctx, js, stream)
	if err != nil {
		return w, err
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return w, err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(8192))
	if err != nil {
		return w, err
	}
	defer it.Stop()
	type stored struct {
		seq, cause uint64
		n, of      uint32
		subject    string
		from, to   int // the body in the arena
		chain      string
	}
	const chunk = 256
	batch := make([]stored, 0, chunk)
	var arena []byte
	chainer := events.NewChainer()
	var prev events.Chain
	var bad uint64
	check := func() {
		t0 := time.Now()
		for i := range batch {
			d := &batch[i]
			body := arena[d.from:d.to]
			prev = chainer.Next(prev, d.seq, d.cause, d.n, d.of, d.subject, body)
			if got, ok := events.ParseChain(d.chain); !ok || got != prev {
				bad++
			}
			w.bytes += int64(len(d.subject) + len(body))
		}
		w.hashing += time.Since(t0)
		w.decisions += uint64(len(batch))
		batch, arena = batch[:0], arena[:0]
	}
	for seq := uint64(0); seq < last; {
		m, err := it.Next()
		if err != nil {
			return w, err
		}
		meta, err := m.Metadata()
		if err != nil {
			return w, err
		}
		seq = meta.Sequence.Stream
		h := m.Headers()
		d := stored{seq: seq, subject: m.Subject(), chain: h.Get(events.HeaderChain), from: len(arena)}
		d.cause, _ = strconv.ParseUint(h.Get(events.HeaderCause), 10, 64)
		if a, c, ok := strings.Cut(h.Get(events.HeaderIndex), "/"); ok {
			n, _ := strconv.ParseUint(a, 10, 32)
			of, _ := strconv.ParseUint(c, 10, 32)
			d.n, d.of = uint32(n), uint32(of)
		}
		arena = append(arena, m.Data()...)
		d.to = len(arena)
		batch = append(batch, d)
		if len(batch) == chunk {
			check()
		}
	}
	check()
	switch {
	case bad > 0:
		return w, fmt.Errorf("%d of %d decisions' %s headers differ from the chain computed", bad, w.decisions, events.HeaderChain)
	case w.decisions != headSeq || prev != head:
		return w, fmt.Errorf("chain computed to decision %d: %s; the audit's head: %s at %d", w.decisions, prev, head, headSeq)
	}
	return w, nil
}

// readStreams reads the streams in order, concurrently, through ordered
// consumers, touching each message's metadata and data; it returns the
// time to read them all.
func readStreams(ctx context.Context, js jetstream.JetStream, names ...string) (time.Duration, error) {
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for _, name := range names {
		last, err := lastSeq(ctx, js, name)
		if err != nil {
			return 0, err
		}
		wg.Go(func() {
			cons, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
			if err != nil {
				errs <- err
				return
			}
			done := make(chan struct{})
			var sum int64
			cc, err := cons.Consume(func(m jetstream.Msg) {
				meta, err := m.Metadata()
				if err != nil {
					return
				}
				sum += meta.Timestamp.UnixNano() + int64(len(m.Data()))
				if meta.Sequence.Stream == last {
					close(done)
				}
			}, jetstream.PullMaxMessages(8192))
			if err != nil {
				errs <- err
				return
			}
			select {
			case <-done:
			case <-ctx.Done():
			case <-time.After(10 * time.Minute):
				errs <- fmt.Errorf("read %s: %w", name, errTimeout)
			}
			cc.Stop()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return 0, err
	}
	return time.Since(t0), ctx.Err()
}
