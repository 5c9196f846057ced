package coordinator

import (
	"context"
	"fmt"
	"sync"

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
}

// NewGroup creates the coordinators of every partition of a deployment of
// count partitions from cfg (count 0: one coordinator, unpartitioned).
// cfg.Topology.Partition is ignored; each coordinator gets its own. All of
// them share cfg.Conn: JetStream traffic of several partitions multiplexes
// well over one connection.
func NewGroup(cfg Config, count uint32) (*Group, error) {
	if count > events.MaxPartitions {
		return nil, fmt.Errorf("coordinator: %d partitions: at most %d", count, events.MaxPartitions)
	}
	g := &Group{}
	for _, t := range cfg.Topology.Partitions(count) {
		c := cfg
		c.Topology = t
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
// good (ErrDivergence, or a topology it cannot create): then it stops the
// others and returns that error, naming the partition.
func (g *Group) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
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
