package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/internal/cluster"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/worker"
)

// ClusterConfig configures `tenure bench --cluster`.
type ClusterConfig struct {
	Partitions []uint32      // partition counts to measure, default 1, 2, 4
	Nodes      int           // nats-server nodes, default 3 (R3 streams)
	Workers    int           // SDK workers, default 8
	Leases     int           // leases per worker, default 512 (8 x 512 in flight, as the raw baseline keeps unacknowledged)
	Window     time.Duration // measuring window per count, default 10 s
	Tenure     string        // the tenure binary for the processes (default: this executable)
	NatsServer string        // a nats-server binary for the nodes (default: `tenure cluster node`)
	Dir        string        // where the clusters live (default: a temporary directory, removed)
	Log        io.Writer     // progress (nil: none)
}

func (c ClusterConfig) withDefaults() ClusterConfig {
	if len(c.Partitions) == 0 {
		c.Partitions = []uint32{1, 2, 4}
	}
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if c.Workers == 0 {
		c.Workers = 8
	}
	if c.Leases == 0 {
		c.Leases = 512
	}
	if c.Window == 0 {
		c.Window = 10 * time.Second
	}
	return c
}

// ClusterPoint is the measurement of one partition count.
type ClusterPoint struct {
	Partitions uint32  `json:"partitions"`
	TenurePerS float64 `json:"tenure_renewals_per_s"` // renewal verdicts stored per second, every partition together
	RawPerS    float64 `json:"raw_per_s"`             // raw JetStream: ~200-byte async publishes stored per second into as many R3 streams, as many in flight as Tenure's leases
	Ratio      float64 `json:"ratio"`                 // TenurePerS / RawPerS
	// The same with messages shaped like a renewal verdict (its body and
	// stored header set, a fresh Nats-Msg-Id each): one verdict's write,
	// without the input or the fold.
	RawShapedPerS float64 `json:"raw_shaped_per_s"`
	ShapedRatio   float64 `json:"shaped_ratio"` // TenurePerS / RawShapedPerS
	// CPU time of every process (the nodes, tenure serve, this one's
	// workers or publishers) per unit stored, and the cores Tenure's run
	// kept busy: on two cores, throughput is cores / CPU per unit.
	TenureCPUUs float64 `json:"tenure_cpu_us"`
	TenureCores float64 `json:"tenure_cores"`
	// TenureCPUUs split: the nodes, tenure serve (the coordinators), this
	// process (the SDK workers).
	TenureNodesCPUUs   float64 `json:"tenure_nodes_cpu_us"`
	TenureServeCPUUs   float64 `json:"tenure_serve_cpu_us"`
	TenureWorkersCPUUs float64 `json:"tenure_workers_cpu_us"`
	RawCPUUs           float64 `json:"raw_cpu_us"`
	RawShapedCPUUs     float64 `json:"raw_shaped_cpu_us"`
	RenewErrors        int64   `json:"renew_errors"`
}

// ClusterResult is the result of `tenure bench --cluster`.
type ClusterResult struct {
	Nodes   int            `json:"nodes"`
	Workers int            `json:"workers"`
	Leases  int            `json:"leases"`
	Points  []ClusterPoint `json:"points"`
}

// Cluster measures, for each partition count, a fresh local cluster
// (cluster.Up: Nodes real nats-server processes on loopback, R3 streams,
// sync_interval always, one `tenure serve --partitions` process): SDK
// workers renewing their leases in a closed loop (the SDK coalesces due
// renewals into one batch per partition), and the raw JetStream baseline
// on the same cluster, async publishes into as many R3 streams as there
// are partitions. Every process shares this machine's cores.
func Cluster(ctx context.Context, cfg ClusterConfig) (*ClusterResult, error) {
	cfg = cfg.withDefaults()
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}
	res := &ClusterResult{Nodes: cfg.Nodes, Workers: cfg.Workers, Leases: cfg.Leases}
	for _, p := range cfg.Partitions {
		dir := cfg.Dir
		if dir == "" {
			d, err := os.MkdirTemp("", "tenure-bench-cluster")
			if err != nil {
				return nil, err
			}
			defer os.RemoveAll(d)
			dir = d
		}
		dir = fmt.Sprintf("%s/p%d", dir, p)
		logf("cluster: %d nodes, %d partitions: starting", cfg.Nodes, p)
		pt, err := clusterPoint(ctx, cfg, p, dir, logf)
		if err != nil {
			return nil, fmt.Errorf("bench --cluster, %d partitions: %w", p, err)
		}
		logf("cluster: %d partitions: %.0f renewals/s, raw %.0f msgs/s (ratio %.2f)", p, pt.TenurePerS, pt.RawPerS, pt.Ratio)
		res.Points = append(res.Points, pt)
	}
	return res, nil
}

func clusterPoint(ctx context.Context, cfg ClusterConfig, parts uint32, dir string, logf func(string, ...any)) (ClusterPoint, error) {
	pt := ClusterPoint{Partitions: parts}
	c, err := cluster.Up(ctx, cluster.Config{Dir: dir, Nodes: cfg.Nodes, Partitions: parts, Coordinators: 1,
		Tenure: cfg.Tenure, NatsServer: cfg.NatsServer, ServeArgs: []string{"--snapshot-every", "-1"}})
	if err != nil {
		return pt, err
	}
	defer c.Close()
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1))
	if err != nil {
		return pt, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return pt, err
	}

	// Tenure: SDK workers renewing every lease in a closed loop.
	leases, closeAll, err := acquireMany(ctx, c.URL(), cfg.Workers, cfg.Leases)
	defer closeAll()
	if err != nil {
		return pt, err
	}
	logf("  %d leases acquired by %d SDK workers", len(leases), cfg.Workers)
	outs := streams.Topology{}.Partitions(parts)
	stored := func() (uint64, error) {
		var n uint64
		for _, t := range outs {
			s, err := js.Stream(ctx, t.DecisionStream())
			if err != nil {
				return 0, err
			}
			info, err := s.Info(ctx)
			if err != nil {
				return 0, err
			}
			n += info.State.LastSeq
		}
		return n, nil
	}
	cctx, cancel := context.WithCancel(ctx)
	var nerr atomic.Int64
	var wg sync.WaitGroup
	for _, l := range leases {
		wg.Go(func() {
			for cctx.Err() == nil {
				if err := l.Renew(cctx); err != nil && cctx.Err() == nil {
					nerr.Add(1)
					if errors.Is(err, worker.ErrLostAuthority) {
						return
					}
				}
			}
		})
	}
	time.Sleep(cfg.Window / 5) // warm-up
	n0, err := stored()
	if err != nil {
		cancel()
		wg.Wait()
		return pt, err
	}
	t0, cpu0 := time.Now(), cpuSplit(c)
	time.Sleep(cfg.Window)
	n1, err := stored()
	el, cpu1 := time.Since(t0), cpuSplit(c)
	cancel()
	wg.Wait()
	if err != nil {
		return pt, err
	}
	pt.TenurePerS = float64(n1-n0) / el.Seconds()
	pt.RenewErrors = nerr.Load()
	perUnit := func(d time.Duration) float64 { return ratio(d.Seconds()/el.Seconds()*1e6, pt.TenurePerS) }
	pt.TenureNodesCPUUs = perUnit(cpu1.nodes - cpu0.nodes)
	pt.TenureServeCPUUs = perUnit(cpu1.serve - cpu0.serve)
	pt.TenureWorkersCPUUs = perUnit(cpu1.self - cpu0.self)
	all := cpu1.nodes + cpu1.serve + cpu1.self - cpu0.nodes - cpu0.serve - cpu0.self
	pt.TenureCores = all.Seconds() / el.Seconds()
	pt.TenureCPUUs = perUnit(all)

	// The template of the shaped baseline: the last verdict stored.
	shape, err := lastVerdict(ctx, js, outs[0].DecisionStream())
	if err != nil {
		return pt, err
	}
	inflight := cfg.Workers * cfg.Leases
	var cores float64
	if pt.RawPerS, cores, err = rawCluster(ctx, c, js, parts, inflight, nil, cfg.Window, "BENCH_RAW_"); err != nil {
		return pt, err
	}
	pt.RawCPUUs = ratio(cores*1e6, pt.RawPerS)
	if pt.RawShapedPerS, cores, err = rawCluster(ctx, c, js, parts, inflight, shape, cfg.Window, "BENCH_SHAPED_"); err != nil {
		return pt, err
	}
	pt.RawShapedCPUUs = ratio(cores*1e6, pt.RawShapedPerS)
	pt.Ratio = ratio(pt.TenurePerS, pt.RawPerS)
	pt.ShapedRatio = ratio(pt.TenurePerS, pt.RawShapedPerS)
	return pt, nil
}

// rawCluster is the raw JetStream baseline on the cluster at url: as many
// R3 streams as partitions (named prefix<k>), one async publisher each on a
// connection of its own, together keeping inflight messages unacknowledged
// (as many as Tenure's leases); ~200-byte messages without headers, or,
// with shape, messages shaped like shape (its body and header set, a fresh
// Nats-Msg-Id each). The rate is that of the messages stored; cores, the
// CPU time every process of the cluster and this one used per second of it.
func rawCluster(ctx context.Context, c *cluster.Cluster, js jetstream.JetStream, parts uint32, inflight int, shape *nats.Msg, window time.Duration, prefix string) (rate, cores float64, err error) {
	url := c.URL()
	body := make([]byte, 200)
	for i := range body {
		body[i] = 'x'
	}
	if shape != nil {
		body = shape.Data
	}
	var raws []jetstream.Stream
	for k := range parts {
		name := prefix + strconv.Itoa(int(k))
		s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"bench." + name},
			Replicas: 3, Storage: jetstream.FileStorage})
		if err != nil {
			return 0, 0, err
		}
		raws = append(raws, s)
	}
	pending := max(1, inflight/int(parts))
	rctx, rcancel := context.WithCancel(ctx)
	var rwg sync.WaitGroup
	var firstErr atomic.Value
	for k := range parts {
		rwg.Go(func() {
			pnc, err := nats.Connect(url)
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			defer pnc.Close()
			pjs, err := jetstream.New(pnc, jetstream.WithPublishAsyncMaxPending(pending))
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			subj := "bench." + prefix + strconv.Itoa(int(k))
			for n := uint64(0); rctx.Err() == nil; n++ {
				m := &nats.Msg{Subject: subj, Data: body}
				if shape != nil {
					m.Header = shapedHeader(shape.Header, n)
					delete(m.Header, "Nats-Expected-Last-Sequence") // several publishers' acks race; the id stays
				}
				if _, err := pjs.PublishMsgAsync(m, jetstream.WithStallWait(10*time.Second)); err != nil && rctx.Err() == nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
			select {
			case <-pjs.PublishAsyncComplete():
			case <-time.After(10 * time.Second):
			}
		})
	}
	rawStored := func() (uint64, error) {
		var n uint64
		for _, s := range raws {
			info, err := s.Info(ctx)
			if err != nil {
				return 0, err
			}
			n += info.State.LastSeq
		}
		return n, nil
	}
	time.Sleep(window / 5)
	r0, err := rawStored()
	if err != nil {
		rcancel()
		rwg.Wait()
		return 0, 0, err
	}
	t0, cpu0 := time.Now(), clusterCPU(c)
	time.Sleep(window)
	r1, err := rawStored()
	el, cpu1 := time.Since(t0), clusterCPU(c)
	rcancel()
	rwg.Wait()
	if err != nil {
		return 0, 0, err
	}
	if e, ok := firstErr.Load().(error); ok {
		return 0, 0, fmt.Errorf("raw publish: %w", e)
	}
	for _, s := range raws { // the next baseline has the nodes to itself
		_ = js.DeleteStream(ctx, s.CachedInfo().Config.Name)
	}
	return float64(r1-r0) / el.Seconds(), (cpu1 - cpu0).Seconds() / el.Seconds(), nil
}

// clusterCPU is the CPU time (user and system) used so far by c's nodes and
// coordinators and by this process (the workers, the raw publishers): on
// Linux, from /proc; elsewhere this process's alone.
func clusterCPU(c *cluster.Cluster) time.Duration {
	t := cpuSplit(c)
	return t.nodes + t.serve + t.self
}

// cpuUse is the CPU time used so far by a cluster's nodes, by its tenure
// serve processes, and by this process.
type cpuUse struct{ nodes, serve, self time.Duration }

func cpuSplit(c *cluster.Cluster) cpuUse {
	u := cpuUse{self: cpuTime()}
	for _, p := range c.Nodes {
		u.nodes += procCPU(p.Pid())
	}
	for _, p := range c.Coordinators {
		u.serve += procCPU(p.Pid())
	}
	return u
}

// procCPU is the CPU time process pid has used (utime and stime of
// /proc/<pid>/stat, in clock ticks of 10 ms, the value Linux gives every
// architecture's USER_HZ); 0 if it cannot be read.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count the fields after its closing one.
	k := strings.LastIndexByte(string(b), ')')
	if k < 0 {
		return 0
	}
	f := strings.Fields(string(b[k+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64) // field 14
	st, err2 := strconv.ParseUint(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}
