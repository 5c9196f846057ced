package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/archive"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// The soak (--only soak, never in the default run): jobs pushed through
// their whole life (acquire, a batch renew of 256 leases, progress, a
// SUCCESS result) through one coordinator whose policy retires a job
// (SoakRetain, one second by default) after its lease ended (rules revision 3, retain_ms). At each of
// SoakPoints points it records what a year of this would grow: the
// process's resident memory (the embedded server, the coordinator and the
// load generator are one process), the jobs in the projection, the
// snapshot's size, the live loop's longest turn, the streams' sizes, and
// the time a restarted coordinator takes to be live again (it is
// restarted at every point, from its latest snapshot). The streams are
// created for retention of the log (streams.Topology.LogRetention): at each
// point, before the restart, the soak seals the segment up to the stored
// snapshot (archive.Archive: exported, read back, folded, compared with
// the streams), removes it from the streams (archive.Remove) and, to stay
// within this machine's disk, then discards the data files of every
// segment but the last (whose snapshot and records the next segment is
// checked against); their manifests stay, so the chain is still checked.

// Soak is the soak's result.
type Soak struct {
	Jobs   float64     `json:"jobs"`     // jobs pushed through their whole life
	PerS   float64     `json:"per_s"`    // jobs per second over the whole soak (points included)
	Inputs float64     `json:"inputs"`   // inputs stored
	Points []SoakPoint `json:"points"`   // one per point, the last at the end
	OK     float64     `json:"ok"`       // 1 when every job was retired by the end and every point's coordinator kept one session
	MaxJob float64     `json:"max_job"`  // the most jobs in the projection at a point
	Retain float64     `json:"retain_s"` // the policy's retention
}

// SoakPoint is one measurement of the soak.
type SoakPoint struct {
	Seen        float64 `json:"seen"`          // jobs begun so far
	Kept        float64 `json:"kept"`          // jobs in the projection
	RSSMB       float64 `json:"rss_mb"`        // the process's resident memory
	HeapMB      float64 `json:"heap_mb"`       // the Go heap's live objects (all of the process)
	SnapshotMB  float64 `json:"snapshot_mb"`   // the stored snapshot's size
	EncodeMS    float64 `json:"encode_ms"`     // the last snapshot's encoding (off the loop)
	PauseMS     float64 `json:"pause_ms"`      // the live loop's longest turn since the previous point
	InMB        float64 `json:"in_mb"`         // the input stream's size
	OutMB       float64 `json:"out_mb"`        // the decision stream's size
	RestartS    float64 `json:"restart_s"`     // a coordinator started again: from start to live
	RestartFold float64 `json:"restart_folds"` // inputs it folded after its snapshot
	// The Go runtime over the process since the previous point (runtimeWindow):
	// how long runnable goroutines waited for a core (p99 and the longest),
	// the longest stop-the-world pause of the collector, and the CPU time
	// spent in its mark assists.
	SchedP99MS float64 `json:"sched_p99_ms"`
	SchedMaxMS float64 `json:"sched_max_ms"`
	GCPauseMS  float64 `json:"gc_pause_max_ms"`
	AssistS    float64 `json:"gc_assist_cpu_s"`
	ArchiveS   float64 `json:"archive_s"`   // sealing the segment (export, read-back, fold, compare)
	ArchiveMB  float64 `json:"archive_mb"`  // the segment's files
	RemoveS    float64 `json:"remove_s"`    // removing it (checks and purges)
	FirstInput float64 `json:"first_input"` // the input stream's first sequence after the removal
	ElapsedS   float64 `json:"elapsed_s"`   // since the soak began
}

const soakBatch = events.MaxBatch // jobs per chunk: one batch renew each

func (b *runner) soak(ctx context.Context) error {
	n := b.cfg.SoakJobs
	points := max(b.cfg.SoakPoints, 1)
	dir := b.newDir("soak")
	srv, err := b.startServer(dir, false)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	top := streams.Topology{LogRetention: true}
	retained := func(c *coordinator.Config) {
		c.Topology = top
		if b.cfg.SoakSnapshotEvery > 0 {
			c.SnapshotEvery = b.cfg.SoakSnapshotEvery
		}
	}
	co, err := b.startCoordinator(srv, retained)
	if err != nil {
		return err
	}
	defer func() {
		if co != nil {
			_ = co.stop()
		}
	}()
	if err := co.waitLive(30 * time.Second); err != nil {
		return err
	}
	nc, err := connect(srv.ClientURL(), "bench-soak")
	if err != nil {
		return err
	}
	defer nc.Close()
	var pubErr atomic.Value
	js, err := asyncJS(nc, 8192, &pubErr)
	if err != nil {
		return err
	}
	archiveRoot := dir + "/archive"
	acfg := archive.Config{JS: js, Topology: top, Root: archiveRoot}

	// The retention: one second after a job's lease ended.
	pol := events.DefaultPolicy()
	pol.Retain = int64(b.cfg.SoakRetain.Truncate(time.Millisecond))
	in := events.Input{Verb: events.VerbPolicy, Policy: pol}
	if _, err := js.Publish(ctx, events.InputSubject(events.RoleOps, "bench", events.NoJob, events.VerbPolicy), events.AppendInputBody(nil, &in)); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	// The lease key is in the rules input (input 1): with it the soak
	// computes each lease id from its acquire's sequence, as an auditor
	// would, instead of reading the grants back.
	raw, err := js.Stream(ctx, top.InputStream())
	if err != nil {
		return err
	}
	m1, err := raw.GetMsg(ctx, 1)
	if err != nil {
		return err
	}
	var rin events.Input
	if err := events.DecodeInput(m1.Subject, m1.Data, &rin); err != nil || rin.Verb != events.VerbRules {
		return fmt.Errorf("input 1 is not the rules input (%v)", err)
	}
	rules := projector.Rules{Revision: rin.Revision, LeaseKey: rin.LeaseKey}

	res := &Soak{Retain: b.cfg.SoakRetain.Seconds()}
	var rt runtimeWindow
	rt.take() // the window of the first point starts with the load
	b.res.Soak = res
	t0 := time.Now()
	publish := func(subj string, body []byte) (jetstream.PubAckFuture, error) {
		return js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: body}, jetstream.WithStallWait(time.Minute))
	}
	// waitFolded waits until the coordinator folded every input stored.
	waitFolded := func() error {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(10 * time.Minute):
			return fmt.Errorf("publishes not acknowledged: %w", errTimeout)
		}
		last, err := lastSeq(ctx, js, top.InputStream())
		if err != nil {
			return err
		}
		for co.c.Stats().InputsFolded < last {
			select {
			case err := <-co.done:
				return fmt.Errorf("coordinator stopped: %v", err)
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
		return nil
	}
	point := func(seen int) error {
		if err := waitFolded(); err != nil {
			return err
		}
		p := SoakPoint{Seen: float64(seen), Kept: float64(co.c.Stats().Jobs), PauseMS: ms(co.m.takePause()), ElapsedS: time.Since(t0).Seconds(),
			EncodeMS: ms(co.c.Stats().SnapshotEncode)}
		p.SchedP99MS, p.SchedMaxMS, p.GCPauseMS, p.AssistS = rt.take()
		// The stored snapshot now (sealing takes a while, in which the
		// jobs retire and an idle coordinator snapshots its near-empty
		// projection).
		if obs, err := js.ObjectStore(ctx, top.SnapshotBucket()); err == nil {
			if info, err := obs.GetInfo(ctx, streams.SnapshotObject); err == nil {
				p.SnapshotMB = float64(info.Size) / (1 << 20)
			}
		}
		// Retention of the log: seal, remove, discard.
		at := time.Now()
		ar, err := archive.Archive(ctx, acfg)
		if errors.Is(err, archive.ErrNoSnapshot) {
			ar, err = &archive.Result{}, nil // none stored yet: nothing to seal
		}
		if err != nil {
			return fmt.Errorf("archive: %w", err)
		}
		p.ArchiveS = time.Since(at).Seconds()
		if ar.Segment != nil {
			m := ar.Segment.Manifest
			p.ArchiveMB = float64(m.Inputs.Bytes+m.Decisions.Bytes+m.Snapshot.Bytes) / (1 << 20)
			at = time.Now()
			rm, err := archive.Remove(ctx, acfg, 0)
			if err != nil {
				return fmt.Errorf("remove: %w", err)
			}
			p.RemoveS, p.FirstInput = time.Since(at).Seconds(), float64(rm.FirstInput)
			for _, old := range ar.Segments[:len(ar.Segments)-1] {
				for _, f := range []string{archive.InputsFile, archive.DecisionsFile, archive.SnapshotFile} {
					if err := os.Remove(filepath.Join(old.Dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
						return err
					}
				}
			}
		}
		p.RSSMB, p.HeapMB = rssMB(), heapMB()
		for _, s := range []struct {
			name string
			dst  *float64
		}{{top.InputStream(), &p.InMB}, {top.DecisionStream(), &p.OutMB}} {
			st, err := js.Stream(ctx, s.name)
			if err != nil {
				return err
			}
			info, err := st.Info(ctx)
			if err != nil {
				return err
			}
			*s.dst = float64(info.State.Bytes) / (1 << 20)
		}
		if co.c.Stats().Sessions != 1 {
			res.OK = -1
		}
		// A restart, from the latest snapshot.
		if err := co.stop(); err != nil {
			return err
		}
		co = nil
		start := time.Now()
		if co, err = b.startCoordinator(srv, retained); err != nil {
			return err
		}
		if err := co.waitLive(5 * time.Minute); err != nil {
			return err
		}
		p.RestartS = time.Since(start).Seconds()
		p.RestartFold = float64(co.c.Stats().InputsFolded - co.c.Stats().SnapshotSeq)
		res.Points = append(res.Points, p)
		res.MaxJob = max(res.MaxJob, p.Kept)
		b.logf("  soak: %d jobs begun, %d kept, RSS %.0f MB (heap %.0f), snapshot %.2f MB encoded in %.1f ms, longest turn %.1f ms (runnable goroutines waited %.1f ms at p99, %.0f ms at most; GC pauses %.1f ms at most, assists %.1f CPU s), streams %.0f + %.0f MB from input %d, segment %.0f MB sealed in %.1f s and removed in %.1f s, restart %.2f s (%d inputs folded)",
			seen, int(p.Kept), p.RSSMB, p.HeapMB, p.SnapshotMB, p.EncodeMS, p.PauseMS, p.SchedP99MS, p.SchedMaxMS, p.GCPauseMS, p.AssistS, p.InMB, p.OutMB, int(p.FirstInput), p.ArchiveMB, p.ArchiveS, p.RemoveS, p.RestartS, int(p.RestartFold))
		return nil
	}

	next := n / points
	var leases []events.LeaseRef
	var body []byte
	acks := make([]jetstream.PubAckFuture, 0, soakBatch)
	for begun := 0; begun < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		if e, ok := pubErr.Load().(error); ok {
			return fmt.Errorf("publish: %w", e)
		}
		chunk := min(soakBatch, n-begun)
		worker := "w" + itoa((begun/soakBatch)%16)
		acks = acks[:0]
		for i := range chunk {
			job := "soak-" + itoa(begun+i)
			f, err := publish(events.InputSubject(events.RoleWorker, worker, job, events.VerbAcquire), []byte(`{"v":1,"lease_ms":60000}`))
			if err != nil {
				return err
			}
			acks = append(acks, f)
		}
		leases = leases[:0]
		for i, f := range acks {
			select {
			case ack := <-f.Ok():
				job := "soak-" + itoa(begun+i)
				leases = append(leases, events.LeaseRef{Job: job, LeaseID: projector.LeaseID(rules, events.Partition{}, ack.Sequence, job), Generation: 1, RenewSeq: 1})
			case err := <-f.Err():
				return fmt.Errorf("acquire: %w", err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		rin := events.Input{Verb: events.VerbRenew, Leases: leases}
		if _, err := publish(events.InputSubject(events.RoleWorker, worker, events.NoJob, events.VerbRenew), events.AppendInputBody(nil, &rin)); err != nil {
			return err
		}
		for _, l := range leases {
			body = append(body[:0], `{"v":1,"lease_id":"`...)
			body = append(body, l.LeaseID...)
			body = append(body, `","generation":1,"progress_seq":1,"value":50}`...)
			if _, err := publish(events.InputSubject(events.RoleWorker, worker, l.Job, events.VerbProgress), append([]byte(nil), body...)); err != nil {
				return err
			}
			body = append(body[:0], `{"v":1,"lease_id":"`...)
			body = append(body, l.LeaseID...)
			body = append(body, `","generation":1,"outcome":"SUCCESS"}`...)
			if _, err := publish(events.InputSubject(events.RoleWorker, worker, l.Job, events.VerbResult), append([]byte(nil), body...)); err != nil {
				return err
			}
		}
		begun += chunk
		// Keep the stored inputs within reach of the fold, as workers
		// waiting for their verdicts would.
		for {
			last, err := lastSeq(ctx, js, top.InputStream())
			if err != nil {
				return err
			}
			if last < co.c.Stats().InputsFolded+stormWindow {
				break
			}
			select {
			case err := <-co.done:
				return fmt.Errorf("coordinator stopped: %v", err)
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(2 * time.Millisecond):
			}
		}
		if begun >= next || begun == n {
			if err := point(begun); err != nil {
				return err
			}
			next += n / points
		}
	}
	// Past the retention of the last jobs: a tick retires them.
	time.Sleep(b.cfg.SoakRetain + 500*time.Millisecond)
	if err := waitFolded(); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for co.c.Stats().Jobs != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	res.Jobs = float64(n)
	res.PerS = float64(n) / time.Since(t0).Seconds()
	if last, err := lastSeq(ctx, js, top.InputStream()); err == nil {
		res.Inputs = float64(last)
	}
	if res.OK == 0 && co.c.Stats().Jobs == 0 {
		res.OK = 1
	} else {
		res.OK = 0
	}
	b.logf("  soak: %d jobs in %.0f s (%.0f/s), %.0f inputs; %d jobs left in the projection at the end", n, time.Since(t0).Seconds(), res.PerS, res.Inputs, co.c.Stats().Jobs)
	if b.cfg.SoakPlot != "" {
		if err := os.WriteFile(b.cfg.SoakPlot, SoakSVG(res), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// rssMB is the process's resident set size (Linux; 0 elsewhere).
func rssMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// heapMB is the Go heap's live object bytes (as of the last GC).
func heapMB() float64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return float64(s[0].Value.Uint64()) / (1 << 20)
}

// SoakSVG draws the soak's points: four panels against the jobs begun
// (resident memory, jobs kept, snapshot size, restart time), each with its
// own scale from 0.
func SoakSVG(s *Soak) []byte {
	const w, h, pad = 360, 200, 40
	panels := []struct {
		title string
		v     func(p SoakPoint) float64
	}{
		{"resident memory (MB)", func(p SoakPoint) float64 { return p.RSSMB }},
		{"jobs in the projection", func(p SoakPoint) float64 { return p.Kept }},
		{"snapshot (MB)", func(p SoakPoint) float64 { return p.SnapshotMB }},
		{"restart to live (s)", func(p SoakPoint) float64 { return p.RestartS }},
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", 2*w, 2*h+20)
	fmt.Fprintf(&sb, `<text x="8" y="14">tenure bench --only soak: %.0f jobs, retain %g s; x: jobs begun (0 to %.0f)</text>`+"\n", s.Jobs, s.Retain, s.Jobs)
	xmax := 1.0
	for _, p := range s.Points {
		xmax = max(xmax, p.Seen)
	}
	for i, pn := range panels {
		ox, oy := float64((i%2)*w), float64(20+(i/2)*h)
		ymax := 0.0
		for _, p := range s.Points {
			ymax = max(ymax, pn.v(p))
		}
		if ymax == 0 {
			ymax = 1
		}
		ymax *= 1.1
		fmt.Fprintf(&sb, `<rect x="%.0f" y="%.0f" width="%d" height="%d" fill="none" stroke="#ccc"/>`+"\n", ox+pad, oy+10, w-pad-10, h-pad-10)
		fmt.Fprintf(&sb, `<text x="%.0f" y="%.0f">%s</text>`+"\n", ox+pad, oy+h-12, pn.title)
		fmt.Fprintf(&sb, `<text x="%.0f" y="%.0f" text-anchor="end">%.3g</text>`+"\n", ox+pad-4, oy+18, ymax)
		fmt.Fprintf(&sb, `<text x="%.0f" y="%.0f" text-anchor="end">0</text>`+"\n", ox+pad-4, oy+h-pad)
		var pts []string
		for _, p := range s.Points {
			x := ox + pad + (p.Seen/xmax)*float64(w-pad-10)
			y := oy + 10 + (1-pn.v(p)/ymax)*float64(h-pad-10)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(&sb, `<circle cx="%.1f" cy="%.1f" r="2" fill="#1f77b4"/>`+"\n", x, y)
		}
		fmt.Fprintf(&sb, `<polyline fill="none" stroke="#1f77b4" points="%s"/>`+"\n", strings.Join(pts, " "))
	}
	sb.WriteString("</svg>\n")
	return []byte(sb.String())
}

// runtimeWindow measures, from one soak point to the next, what the Go
// runtime did to the whole process: how long runnable goroutines waited
// for a core (/sched/latencies), the longest stop-the-world pause of the
// collector, and the CPU time goroutines spent assisting it (an allocating
// goroutine, the live loop included, is made to mark while a collection
// runs). They tell a turn of the loop that was descheduled or drafted into
// the collector from one that worked that long.
type runtimeWindow struct {
	lat, pause *metrics.Float64Histogram
	assist     float64
}

var runtimeNames = []string{"/sched/latencies:seconds", "/sched/pauses/total/gc:seconds", "/cpu/classes/gc/mark/assist:cpu-seconds"}

func (w *runtimeWindow) take() (schedP99, schedMax, pauseMax, assist float64) {
	s := make([]metrics.Sample, len(runtimeNames))
	for i, n := range runtimeNames {
		s[i].Name = n
	}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram || s[1].Value.Kind() != metrics.KindFloat64Histogram || s[2].Value.Kind() != metrics.KindFloat64 {
		return 0, 0, 0, 0
	}
	lat, pause, as := s[0].Value.Float64Histogram(), s[1].Value.Float64Histogram(), s[2].Value.Float64()
	schedP99, schedMax = histDelta(w.lat, lat, 0.99)
	_, pauseMax = histDelta(w.pause, pause, 1)
	assist = as - w.assist
	w.lat, w.pause, w.assist = copyHist(lat), copyHist(pause), as
	return schedP99 * 1e3, schedMax * 1e3, pauseMax * 1e3, assist
}

func copyHist(h *metrics.Float64Histogram) *metrics.Float64Histogram {
	return &metrics.Float64Histogram{Counts: append([]uint64(nil), h.Counts...), Buckets: h.Buckets}
}

// histDelta returns the upper bound of the bucket holding quantile q of
// what cur counted since prev (nil: since the start), and that of its
// highest non-empty bucket (a finite bound: the last bucket's lower one).
func histDelta(prev, cur *metrics.Float64Histogram, q float64) (float64, float64) {
	var total uint64
	d := make([]uint64, len(cur.Counts))
	for i, c := range cur.Counts {
		d[i] = c
		if prev != nil && i < len(prev.Counts) {
			d[i] -= prev.Counts[i]
		}
		total += d[i]
	}
	if total == 0 {
		return 0, 0
	}
	bound := func(i int) float64 {
		if b := cur.Buckets[i+1]; !math.IsInf(b, 1) {
			return b
		}
		return cur.Buckets[i]
	}
	var quant, highest float64
	var seen uint64
	want := uint64(math.Ceil(q * float64(total)))
	for i, c := range d {
		if c == 0 {
			continue
		}
		seen += c
		if quant == 0 && seen >= want {
			quant = bound(i)
		}
		highest = bound(i)
	}
	return quant, highest
}
