package coordinator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/events"
)

// Group runs, in one process, a coordinator for each partition of a
// partitioned deployment: each one a warm standby or the live single
// writer of its partition, with its own leadership entry and its own
// fence, exactly as a lone coordinator. Several processes running a Group
// over the same deployment share the partitions: whichever holds a
// partition's leadership writes it, the others stand by, and when a process
// dies its partitions move to the others once their leadership entries
// expire (LeaderTTL).
type Group struct {
	coords []*Coordinator
	cfg    Config

	mu        sync.Mutex
	members   int       // processes seen running a Group of this deployment (heartbeats)
	lastYield time.Time // when a partition was last handed over
}

// memberPrefix is the key prefix of the processes' heartbeats in partition
// 0's leadership bucket (whose values expire after LeaderTTL).
const memberPrefix = "member."

// NewGroup creates the coordinators of every partition of a deployment of
// count partitions from cfg (count 0: one coordinator, unpartitioned).
// cfg.Topology.Partition is ignored; each coordinator gets its own. All of
// them share cfg.Conn: JetStream traffic of several partitions multiplexes
// well over one connection.
func NewGroup(cfg Config, count uint32) (*Group, error) {
	if count > events.MaxPartitions {
		return nil, fmt.Errorf("coordinator: %d partitions: at most %d", count, events.MaxPartitions)
	}
	cfg = cfg.withDefaults()
	g := &Group{cfg: cfg, members: 1}
	for _, t := range cfg.Topology.Partitions(count) {
		c := cfg
		c.Topology = t
		if pm, ok := cfg.Metrics.(PartitionMetrics); ok && t.Partition.Partitioned() {
			c.Metrics = pm.ForPartition(t.Partition)
		}
		if count > 1 {
			c.yield = g.yield
		}
		co, err := New(c)
		if err != nil {
			return nil, err
		}
		g.coords = append(g.coords, co)
	}
	return g, nil
}

// Coordinators returns the coordinators, in partition order.
func (g *Group) Coordinators() []*Coordinator { return g.coords }

// Stats returns the statistics of every coordinator, in partition order.
func (g *Group) Stats() []Stats {
	st := make([]Stats, len(g.coords))
	for i, c := range g.coords {
		st[i] = c.Stats()
	}
	return st
}

// Run runs every coordinator until ctx ends (nil) or one of them fails for
// good (ErrDivergence, ErrInputGap, or a topology it cannot create): then
// it stops the others and returns that error, naming the partition.
func (g *Group) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	if len(g.coords) > 1 {
		wg.Add(1)
		go func() { defer wg.Done(); g.heartbeat(ctx) }()
	}
	for _, c := range g.coords {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(ctx); err != nil {
				once.Do(func() {
					if p := c.cfg.Topology.Partition; p.Partitioned() {
						err = fmt.Errorf("%s: %w", p, err)
					}
					first = err
					cancel()
				})
			}
		}()
	}
	wg.Wait()
	return first
}

// Balancing. Every process running a Group over a partitioned deployment
// puts a heartbeat ("member.<id>", expiring after LeaderTTL) in partition
// 0's leadership bucket and counts the others'. A process that is live on
// more than its share (the partition count divided by the processes,
// rounded up) hands over its highest-numbered live partition, one at a
// time and at most once every three leadership lifetimes (a heartbeat older
// than two heartbeat periods does not count): the coordinator
// steps down (deleting its leadership entry, so a standby elsewhere takes
// the partition at once) and waits two lifetimes before standing by again.
// If no other process takes it, it takes it back then. Safety does not
// depend on any of this: the decision stream's fence does not change.

// yield tells the live coordinator c whether to hand its partition over.
func (g *Group) yield(c *Coordinator) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.members <= 1 || clock.Since(g.cfg.Clock, g.lastYield) < 3*g.cfg.LeaderTTL {
		return false
	}
	share := (len(g.coords) + g.members - 1) / g.members
	var live []*Coordinator
	for _, co := range g.coords {
		if co.live.Load() {
			live = append(live, co)
		}
	}
	if len(live) <= share || live[len(live)-1] != c {
		return false
	}
	g.lastYield = clock.OrReal(g.cfg.Clock).Now()
	return true
}

// heartbeat keeps this process's member entry and counts the members.
func (g *Group) heartbeat(ctx context.Context) {
	js, err := jetstream.New(g.cfg.Conn)
	if err != nil {
		return
	}
	bucket := g.coords[0].cfg.Topology.LeaderBucket()
	key := memberPrefix + g.cfg.ID
	t := clock.OrReal(g.cfg.Clock).NewTicker(max(g.cfg.LeaderTTL/3, 50*time.Millisecond))
	defer t.Stop()
	var kv jetstream.KeyValue
	for {
		func() {
			rctx, cancel := context.WithTimeout(ctx, max(g.cfg.LeaderTTL/3, time.Second))
			defer cancel()
			if kv == nil {
				if kv, err = js.KeyValue(rctx, bucket); err != nil {
					kv = nil
					return // the coordinators create it
				}
			}
			rev, err := kv.Put(rctx, key, []byte(g.cfg.ID))
			if err != nil {
				return
			}
			mine, err := kv.GetRevision(rctx, key, rev)
			if err != nil {
				return
			}
			lister, err := kv.ListKeysFiltered(rctx, memberPrefix+"*")
			if err != nil {
				return
			}
			var keys []string
			for k := range lister.Keys() {
				keys = append(keys, k)
			}
			// A member counts while its heartbeat is fresh, judged by the
			// server's timestamps (its entry against the one just put): a
			// killed process stops counting within about two heartbeats,
			// before its leadership entries expire, so that the process
			// taking its partitions over does not hand them on.
			n := 0
			for _, k := range keys {
				e, err := kv.Get(rctx, k)
				if err == nil && mine.Created().Sub(e.Created()) <= 2*max(g.cfg.LeaderTTL/3, 50*time.Millisecond) {
					n++
				}
			}
			g.mu.Lock()
			g.members = max(n, 1)
			g.mu.Unlock()
		}()
		select {
		case <-ctx.Done():
			if kv != nil { // a clean stop leaves the membership at once
				dctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = kv.Delete(dctx, key)
				cancel()
			}
			return
		case <-t.C():
		}
	}
}
