package ui

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
)

// Metrics holds Tenure's Prometheus metrics, served on /metrics in the
// Prometheus text format by the standard client library.
//
// Three sources feed them:
//
//   - the coordinator of this process, when there is one (`tenure serve
//     --http`): Metrics implements coordinator.Metrics, so give it to
//     coordinator.Config.Metrics. tenure_inputs_folded_total,
//     tenure_fold_lag_seconds, tenure_append_latency_seconds,
//     tenure_decisions_appended_total, tenure_loop_pause_seconds (a
//     histogram of the live loop's turns) and tenure_loop_pause_max_seconds
//     (the longest turn since the process started) come from there;
//   - the coordinators' status (Config.Status), read at every scrape:
//     tenure_coordinator_* (leadership, folded and stored positions, fold
//     lag in inputs, snapshot age, lost authority), labelled by coordinator;
//   - the UI's read model of the decision stream: tenure_decisions_total by
//     kind and reason, tenure_lease_expiries_total, tenure_active_leases,
//     tenure_jobs by state, tenure_jobs_blocked, tenure_ui_decision_seq;
//     and per queue (PROTOCOL.md §22.8) tenure_queue_refusals_total by
//     queue and reason (the withdrawn decisions: offer_declined, released,
//     ack_deadline_passed, lease_expired) and tenure_queue_workers_held
//     (the workers its standing holds now). They are labelled by queue,
//     never by worker: the workers are the state API's and the board's
//     (the queue's workers), and a worker id is no label of a bounded set.
//
// In a partitioned deployment the metrics of one partition's streams carry
// a "partition" label as well: tenure_coordinator_* and tenure_leader (one
// coordinator per partition, labelled by coordinator and partition),
// tenure_ui_decision_seq (one per partition's decision stream), and the
// series of this process's coordinators (NewMetricsFor, ForPartition). The
// counts of jobs and decisions are over every partition.
//
// The Go runtime and process collectors are registered too.
type Metrics struct {
	reg *prometheus.Registry

	// The coordinator-side series: labelled by partition when partitioned
	// (ForPartition), without labels otherwise.
	inputsFolded  *prometheus.CounterVec
	foldLag       *prometheus.GaugeVec
	appendLatency *prometheus.HistogramVec
	appended      *prometheus.CounterVec
	loopPause     *prometheus.HistogramVec
	loopPauseMax  *prometheus.GaugeVec
	partitioned   bool
	base          *coordSeries // unpartitioned: the series of Metrics's own methods

	decisions  *prometheus.CounterVec
	expiries   prometheus.Counter
	refusals   *prometheus.CounterVec
	sseClients prometheus.Gauge

	mu     sync.Mutex
	byKind map[kindReason]prometheus.Counter
	byPart map[string]*coordSeries // partitioned: the series of each partition label
	model  *model
	status func(context.Context) ([]CoordinatorStatus, error)
}

type kindReason struct {
	kind   events.Kind
	reason events.Reason
}

var _ coordinator.PartitionMetrics = (*Metrics)(nil)

// NewMetrics returns the metrics of an unpartitioned deployment on a new
// registry.
func NewMetrics() *Metrics { return NewMetricsFor(0) }

// NewMetricsFor returns the metrics of a deployment of partitions
// partitions (0: unpartitioned) on a new registry. Partitioned, the series
// of this process's coordinators (tenure_inputs_folded_total,
// tenure_fold_lag_seconds, tenure_append_latency_seconds,
// tenure_decisions_appended_total, tenure_loop_pause_seconds,
// tenure_loop_pause_max_seconds) carry a "partition" label: give the
// Metrics to coordinator.NewGroup, which hands each partition's coordinator
// ForPartition(its partition).
func NewMetricsFor(partitions uint32) *Metrics {
	var labels []string
	if partitions > 0 {
		labels = []string{"partition"}
	}
	m := &Metrics{
		reg:         prometheus.NewRegistry(),
		partitioned: partitions > 0,
		inputsFolded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_inputs_folded_total",
			Help: "Inputs folded by this process's coordinator (standby and live).",
		}, labels),
		foldLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tenure_fold_lag_seconds",
			Help: "Time from the storage of the last input folded by this process's coordinator to its fold; 0 once it has folded the last input stored (caught up).",
		}, labels),
		appendLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tenure_append_latency_seconds",
			Help:    "Time from the publish of a decision to its acknowledgement by the decision stream.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18), // 50µs .. 6.5s
		}, labels),
		appended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_decisions_appended_total",
			Help: "Decisions appended by this process's coordinator and acknowledged by the stream.",
		}, labels),
		loopPause: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tenure_loop_pause_seconds",
			Help:    "Time one turn of this process's live coordinator loop took (fold, appends handed over, snapshot encoding...): time it received no input.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 20), // 10µs .. 5.2s
		}, labels),
		loopPauseMax: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tenure_loop_pause_max_seconds",
			Help: "Longest turn of this process's live coordinator loop since the process started: the longest time it received no input.",
		}, labels),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_decisions_total",
			Help: "Decisions in the decision stream, by kind and reason (read from the stream by the UI).",
		}, []string{"kind", "reason"}),
		expiries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tenure_lease_expiries_total",
			Help: "Leases that reached expires_at without a terminal result (expired decisions).",
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_queue_refusals_total",
			Help: "Workers' refusals of a queue's jobs (withdrawn decisions: an offer declined, a lease released, an ACK missed, a lease left to expire), by queue and reason.",
		}, []string{"queue", "reason"}),
		sseClients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tenure_ui_live_pages",
			Help: "Pages following live updates (server-sent event streams open).",
		}),
		byKind: make(map[kindReason]prometheus.Counter),
		byPart: make(map[string]*coordSeries),
	}
	if !m.partitioned {
		m.base = m.series() // exported from the start, at 0
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.inputsFolded, m.foldLag, m.appendLatency, m.appended, m.loopPause, m.loopPauseMax,
		m.decisions, m.expiries, m.refusals, m.sseClients,
		(*stateCollector)(m),
	)
	return m
}

// Registry is the registry the metrics are registered on; add your own
// collectors to it.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// InputFolded implements coordinator.Metrics (partitioned: with an empty
// partition label; a Group's coordinators use ForPartition).
func (m *Metrics) InputFolded(seq uint64, stored time.Time, decisions int) {
	m.own().InputFolded(seq, stored, decisions)
}

// CaughtUp implements coordinator.CatchUpMetrics.
func (m *Metrics) CaughtUp(seq uint64) { m.own().CaughtUp(seq) }

// DecisionAppended implements coordinator.Metrics.
func (m *Metrics) DecisionAppended(latency time.Duration) { m.own().DecisionAppended(latency) }

// LoopPause implements coordinator.Metrics.
func (m *Metrics) LoopPause(d time.Duration) { m.own().LoopPause(d) }

// own is the series of Metrics's own methods.
func (m *Metrics) own() *coordSeries {
	if m.partitioned {
		return m.seriesOf("")
	}
	return m.base
}

// ForPartition implements coordinator.PartitionMetrics: the series of
// partition p's coordinator (without a label when the Metrics are not
// partitioned).
func (m *Metrics) ForPartition(p events.Partition) coordinator.Metrics {
	if !m.partitioned {
		return m.base
	}
	return m.seriesOf(p.Token()) // exported from now on, at 0
}

// coordSeries are the series of one coordinator (or of the coordinators of
// one partition label).
type coordSeries struct {
	folded, appended prometheus.Counter
	lag              prometheus.Gauge
	latency, pause   prometheus.Observer
	pauseMaxG        prometheus.Gauge
	pauseMu          sync.Mutex
	pauseMax         atomic.Int64 // nanoseconds; written under pauseMu
}

func (m *Metrics) series(labels ...string) *coordSeries {
	return &coordSeries{
		folded: m.inputsFolded.WithLabelValues(labels...), appended: m.appended.WithLabelValues(labels...),
		lag: m.foldLag.WithLabelValues(labels...), latency: m.appendLatency.WithLabelValues(labels...),
		pause: m.loopPause.WithLabelValues(labels...), pauseMaxG: m.loopPauseMax.WithLabelValues(labels...),
	}
}

// seriesOf is the series of one partition label, the same every call (so
// that the longest pause is the longest of all its coordinators' turns).
func (m *Metrics) seriesOf(label string) *coordSeries {
	m.mu.Lock()
	defer m.mu.Unlock()
	cs, ok := m.byPart[label]
	if !ok {
		cs = m.series(label)
		m.byPart[label] = cs
	}
	return cs
}

// InputFolded implements coordinator.Metrics.
func (c *coordSeries) InputFolded(_ uint64, stored time.Time, _ int) {
	c.folded.Inc()
	c.lag.Set(max(time.Since(stored).Seconds(), 0))
}

// CaughtUp implements coordinator.CatchUpMetrics: folded up to the end of
// the log, the coordinator lags by nothing, however old the last input it
// folded (an idle coordinator that caught up after a restart kept that
// input's age, and an alert on it fired).
func (c *coordSeries) CaughtUp(uint64) { c.lag.Set(0) }

// DecisionAppended implements coordinator.Metrics.
func (c *coordSeries) DecisionAppended(latency time.Duration) {
	c.appended.Inc()
	c.latency.Observe(latency.Seconds())
}

// LoopPause implements coordinator.Metrics.
func (c *coordSeries) LoopPause(d time.Duration) {
	c.pause.Observe(d.Seconds())
	if int64(d) <= c.pauseMax.Load() {
		return // perf: the common case takes no lock
	}
	c.pauseMu.Lock()
	if int64(d) > c.pauseMax.Load() {
		c.pauseMax.Store(int64(d))
		c.pauseMaxG.Set(d.Seconds())
	}
	c.pauseMu.Unlock()
}

// observe counts one decision of the stream (called under the model's lock).
func (m *Metrics) observe(d *events.Decision) {
	k := kindReason{d.Kind, d.Reason}
	m.mu.Lock()
	c, ok := m.byKind[k]
	if !ok {
		c = m.decisions.WithLabelValues(d.Kind.String(), string(d.Reason))
		m.byKind[k] = c
	}
	m.mu.Unlock()
	c.Inc()
	if d.Kind == events.KindExpired {
		m.expiries.Inc()
	}
	if d.Kind == events.KindWithdrawn && d.Capacity != nil {
		m.refusals.WithLabelValues(d.Capacity.Queue, string(d.Reason)).Inc()
	}
}

// attach makes the scrape-time metrics read md and status.
func (m *Metrics) attach(md *model, status func(context.Context) ([]CoordinatorStatus, error)) {
	m.mu.Lock()
	m.model, m.status = md, status
	m.mu.Unlock()
}

// stateCollector reports, at scrape time, the read model's jobs and the
// coordinators' status.
type stateCollector Metrics

// coordDescs are the descriptors of the metrics of one coordinator (of
// one partition, when labelled by partition too).
type coordDescs struct {
	live, folded, stored, lagInputs, snapAge, snapSeq, lost, sessions, leader *prometheus.Desc
	dropped, snapRefused                                                      *prometheus.Desc
	storUsed, storLimit, storReserve, storShort, storLow, intakeHeld, purged  *prometheus.Desc
}

func newCoordDescs(labels ...string) coordDescs {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, labels, nil) }
	return coordDescs{
		live:        d("tenure_coordinator_live", "1 if the coordinator holds leadership and appends decisions, 0 if it stands by."),
		folded:      d("tenure_coordinator_input_seq", "Sequence of the last input the coordinator folded."),
		stored:      d("tenure_coordinator_decision_seq", "Sequence of the last decision the coordinator appended or verified."),
		lagInputs:   d("tenure_coordinator_fold_lag_inputs", "Inputs stored but not folded yet by the coordinator."),
		snapAge:     d("tenure_coordinator_snapshot_age_seconds", "Age of the coordinator's latest snapshot (absent before the first)."),
		snapSeq:     d("tenure_coordinator_snapshot_input_seq", "Last input covered by the coordinator's latest snapshot."),
		lost:        d("tenure_coordinator_lost_authority_total", "Appends refused because another writer had authority."),
		storUsed:    d("tenure_storage_used_bytes", "JetStream storage the deployment's account uses, as the live coordinator last read it."),
		storLimit:   d("tenure_storage_limit_bytes", "The deployment's storage limit (0: none known)."),
		storReserve: d("tenure_storage_reserve_bytes", "Free bytes below which the coordinator empties no intake stream (workers' inputs are refused once their intakes are full)."),
		storShort:   d("tenure_storage_short", "1 while free storage is below the reserve: workers' inputs are refused for space."),
		storLow:     d("tenure_storage_low", "1 while free storage is below the warning level (or short)."),
		intakeHeld:  d("tenure_intake_workers_held", "Workers whose intake holds folded inputs not emptied yet (past their rate, or storage short)."),
		purged:      d("tenure_intake_purged_total", "Inputs the live coordinator emptied from intake streams."),
		sessions:    d("tenure_coordinator_sessions_total", "Times the coordinator synchronised from the streams."),
		leader:      d("tenure_leader", "The coordinator named by the leadership entry (value 1)."),
		dropped: d("tenure_coordinator_dropped_total",
			"Messages that reached the coordinator's inboxes without being the server's answer to it (a delivery of another stream or consumer, a reply to no append): dropped, never folded."),
		snapRefused: d("tenure_coordinator_snapshots_refused_total",
			"Stored snapshots the coordinator refused: not anchored in the decision stream, or not what their anchor says."),
	}
}

var (
	descActive  = prometheus.NewDesc("tenure_active_leases", "Jobs whose current lease is ACTIVE.", nil, nil)
	descJobs    = prometheus.NewDesc("tenure_jobs", "Jobs by the state of their current lease.", []string{"state"}, nil)
	descBlocked = prometheus.NewDesc("tenure_jobs_blocked", "Jobs waiting for an operator: a pending ownership conflict, UNRESOLVED or DEAD.", nil, nil)
	descUISeq   = prometheus.NewDesc("tenure_ui_decision_seq", "Decision stream sequence the UI's read model has reached.", nil, nil)
	descUISeqP  = prometheus.NewDesc("tenure_ui_decision_seq", "Decision stream sequence the UI's read model has reached.", []string{"partition"}, nil)
	descCoord   = newCoordDescs("coordinator")
	descCoordP  = newCoordDescs("coordinator", "partition")
	descHeld    = prometheus.NewDesc("tenure_queue_workers_held", "Workers a queue offers nothing now because their standing holds them after a refusal (PROTOCOL.md §22.8), by queue.", []string{"queue"}, nil)
)

// Describe implements prometheus.Collector. It describes nothing: the
// collector is unchecked, because its label sets depend on the deployment
// (a partition label when partitioned), which NewMetrics does not know.
func (c *stateCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	md, status := c.model, c.status
	c.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if md != nil {
		md.mu.RLock()
		states, blockedN, count := md.am.StateCounts(), len(md.blocked), md.count
		pos, seqs, _ := md.positions()
		type queueHeld struct {
			queue string
			n     int
		}
		var held []queueHeld
		md.am.QueuesHeld(time.Now(), func(q string, n int) { held = append(held, queueHeld{q, n}) })
		md.mu.RUnlock()
		for _, h := range held {
			gauge(descHeld, float64(h.n), h.queue)
		}
		gauge(descActive, float64(states[events.StateActive]))
		for st := events.StateOffered; st <= events.StateDead; st++ { // QUEUED and DEAD: queue jobs (rules revision 4)
			gauge(descJobs, float64(states[st]), st.String())
		}
		gauge(descBlocked, float64(blockedN))
		if count == 0 {
			gauge(descUISeq, float64(pos))
		}
		for k, seq := range seqs {
			gauge(descUISeqP, float64(seq), events.Partition{Index: uint32(k), Count: count}.Token())
		}
	}
	if status == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sts, _ := status(ctx)
	// A coordinator is one series per partition it serves (one when
	// unpartitioned), the leader one per partition.
	type key struct{ id, part string }
	leaders, seen := make(map[key]bool), make(map[key]bool)
	for _, st := range sts {
		k := key{st.ID, st.Partition}
		if seen[k] {
			continue
		}
		seen[k] = true
		d, labels := descCoord, []string{st.ID}
		if st.Partition != "" {
			d, labels = descCoordP, []string{st.ID, st.Partition}
		}
		live := 0.0
		if st.Live {
			live = 1
		}
		gauge(d.live, live, labels...)
		gauge(d.folded, float64(st.InputsFolded), labels...)
		gauge(d.stored, float64(st.DecisionsStored), labels...)
		gauge(d.lagInputs, float64(st.Lag), labels...)
		if !st.SnapshotAt.IsZero() {
			gauge(d.snapAge, time.Since(st.SnapshotAt).Seconds(), labels...)
			gauge(d.snapSeq, float64(st.SnapshotSeq), labels...)
		}
		ch <- prometheus.MustNewConstMetric(d.lost, prometheus.CounterValue, float64(st.LostAuthority), labels...)
		if sg := st.Storage; sg != nil {
			b := func(v bool) float64 {
				if v {
					return 1
				}
				return 0
			}
			gauge(d.storUsed, float64(sg.Used), labels...)
			gauge(d.storLimit, float64(sg.Limit), labels...)
			gauge(d.storReserve, float64(sg.Reserve), labels...)
			gauge(d.storShort, b(sg.State == coordinator.StorageShort), labels...)
			gauge(d.storLow, b(sg.State == coordinator.StorageShort || sg.State == coordinator.StorageLow), labels...)
			gauge(d.intakeHeld, float64(sg.Held), labels...)
			ch <- prometheus.MustNewConstMetric(d.purged, prometheus.CounterValue, float64(sg.Purged), labels...)
		}
		ch <- prometheus.MustNewConstMetric(d.sessions, prometheus.CounterValue, float64(st.Sessions), labels...)
		ch <- prometheus.MustNewConstMetric(d.dropped, prometheus.CounterValue, float64(st.Dropped), labels...)
		ch <- prometheus.MustNewConstMetric(d.snapRefused, prometheus.CounterValue, float64(st.SnapshotsRefused), labels...)
		if l := (key{st.Leader, st.Partition}); st.Leader != "" && !leaders[l] {
			leaders[l] = true
			if st.Partition != "" {
				gauge(d.leader, 1, st.Leader, st.Partition)
			} else {
				gauge(d.leader, 1, st.Leader)
			}
		}
	}
}

var (
	_ coordinator.CatchUpMetrics = (*Metrics)(nil)
	_ coordinator.CatchUpMetrics = (*coordSeries)(nil)
)
