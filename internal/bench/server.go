package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/streams"
)

// startServer starts an embedded server on dir in the run's sync mode (or
// in interval mode when lazy is set: building large logs only).
func (b *runner) startServer(dir string, lazy bool) (*embedded.Server, error) {
	return embedded.Start(embedded.Config{
		DataDir: dir, Host: "127.0.0.1", Port: -1, ServerName: "tenure-bench",
		SyncAlways: b.cfg.Sync == SyncAlways && !lazy,
	})
}

func connect(url, name string) (*nats.Conn, error) {
	return streams.Connect(streams.ConnectConfig{URL: url, Name: name})
}

// asyncJS is a JetStream context on nc for asynchronous publishes, at most
// pending of them outstanding; the first publish that fails
// asynchronously is kept in failed (a nil load: none).
func asyncJS(nc *nats.Conn, pending int, failed *atomic.Value) (jetstream.JetStream, error) {
	return jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(pending),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			failed.CompareAndSwap(nil, err)
		}))
}

// coord is a coordinator running in the background.
type coord struct {
	c      *coordinator.Coordinator
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
	m      *appendMetrics
}

// appendMetrics observes the coordinator's appends: the decisions of one
// append are reported one after the other with the same latency, which
// tells the appends apart.
type appendMetrics struct {
	mu        sync.Mutex
	decisions int
	appends   int
	latency   time.Duration // sum over appends
	last      time.Duration
	inputs    int
	foldLag   time.Duration // sum over inputs: from stored to folded
	pause     time.Duration // the longest turn of the live loop (takePause)
}

func (m *appendMetrics) InputFolded(_ uint64, stored time.Time, _ int) {
	m.mu.Lock()
	m.inputs++
	m.foldLag += time.Since(stored)
	m.mu.Unlock()
}

func (m *appendMetrics) DecisionAppended(lat time.Duration) {
	m.mu.Lock()
	m.decisions++
	if lat != m.last {
		m.appends++
		m.latency += lat
		m.last = lat
	}
	m.mu.Unlock()
}

// LoopPause implements coordinator.Metrics: the longest turn of the live
// loop is kept (takePause).
func (m *appendMetrics) LoopPause(d time.Duration) {
	m.mu.Lock()
	m.pause = max(m.pause, d)
	m.mu.Unlock()
}

// takePause returns the longest turn of the live loop since the last call.
func (m *appendMetrics) takePause() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.pause
	m.pause = 0
	return d
}

// take returns and resets the counts: decisions, appends, mean append
// latency, mean fold lag.
func (m *appendMetrics) take() (int, int, time.Duration, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, a, l, lag := m.decisions, m.appends, m.latency, m.foldLag
	var ml time.Duration
	if m.inputs > 0 {
		ml = lag / time.Duration(m.inputs)
	}
	m.decisions, m.appends, m.latency, m.inputs, m.foldLag = 0, 0, 0, 0, 0
	if a == 0 {
		return d, a, 0, ml
	}
	return d, a, l / time.Duration(a), ml
}

// startCoordinator starts a coordinator of srv on its own connection, with
// the configuration tenure serve runs with its embedded server (the default
// one, batching at once when srv syncs always: coordinator.AppendMode) but
// for mod.
func (b *runner) startCoordinator(srv *embedded.Server, mod func(*coordinator.Config)) (*coord, error) {
	nc, err := connect(srv.ClientURL(), "bench-coordinator")
	if err != nil {
		return nil, err
	}
	m := &appendMetrics{}
	cfg := coordinator.Config{ID: "bench-c1", Conn: nc, Metrics: m}
	if srv.SyncAlways() {
		cfg.AppendMode = coordinator.AppendBatched
	}
	cfg.Logger = b.cfg.CoordinatorLog
	if mod != nil {
		mod(&cfg)
	}
	c, err := coordinator.New(cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &coord{c: c, nc: nc, cancel: cancel, done: make(chan error, 1), m: m}
	go func() { r.done <- c.Run(ctx) }()
	return r, nil
}

// waitLive waits until the coordinator is live.
func (r *coord) waitLive(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !r.c.Stats().Live {
		select {
		case err := <-r.done:
			return fmt.Errorf("coordinator stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("coordinator not live after %v: %w", timeout, errTimeout)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

func (r *coord) stop() error {
	r.cancel()
	err := <-r.done
	r.nc.Close()
	return err
}

// lastSeq is a stream's last sequence.
func lastSeq(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

// baselineStream is the configuration of a baseline stream: Tenure's own
// stream configuration (file storage, the same limits and lock-down), on
// other subjects. Nothing in it is tuned down.
func baselineStream(name, subject string) jetstream.StreamConfig {
	cfg := streams.Topology{Prefix: name}.InputConfig()
	cfg.Name = name
	cfg.Subjects = []string{subject}
	cfg.Description = "tenure bench baseline"
	return cfg
}

// percentile returns the p-th percentile (0..100) by the nearest-rank method.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	k := int(float64(len(s))*p/100+0.9999999) - 1
	k = max(0, min(k, len(s)-1))
	return s[k]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// payload returns n bytes of JSON-ish filler.
func payload(n int, tag string) []byte {
	b := make([]byte, 0, n)
	b = append(b, `{"v":1,"tag":"`...)
	b = append(b, tag...)
	b = append(b, `","pad":"`...)
	for len(b) < n-2 {
		b = append(b, 'x')
	}
	return append(b, '"', '}')
}

func itoa(i int) string { return strconv.Itoa(i) }

// followFromNow returns an ordered consumer of stream's messages on
// filter stored after now: from the stream's next sequence, read before
// it returns. Not DeliverNewPolicy: nats.go's ordered consumer keeps the
// deliver policy it was created with until it has delivered a message,
// so one reset before its first (a missed heartbeat, a reconnection)
// would start after the stream's last message at the reset, and every
// answer stored in between would be lost for good. A publisher of the
// SDK path's fair baseline whose first answers were lost so never got a
// token back, and the baseline measured 0 answers per second with sync
// always (issue 31).
func followFromNow(ctx context.Context, js jetstream.JetStream, stream string, filters ...string) (jetstream.Consumer, error) {
	next, err := lastSeq(ctx, js, stream)
	if err != nil {
		return nil, err
	}
	return js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: next + 1})
}
