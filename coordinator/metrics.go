package coordinator

import (
	"time"

	"github.com/maknow/tenure/events"
)

// Metrics observes the coordinator's work for monitoring (Config.Metrics;
// nil observes nothing). Its methods are called from the coordinator's loop,
// one at a time: they must be fast and must not block.
type Metrics interface {
	// InputFolded is called after each input is folded (standby or live),
	// with its sequence, the timestamp the stream stored with it, and how
	// many decisions the fold derived from it.
	InputFolded(seq uint64, stored time.Time, decisions int)
	// DecisionAppended is called when the decision stream acknowledges an
	// appended decision, with the time from the publish to the
	// acknowledgement.
	DecisionAppended(latency time.Duration)
}

// PartitionMetrics is a Metrics that tells the partitions of a Group apart:
// NewGroup gives each partition's coordinator ForPartition(its partition)
// instead of Config.Metrics itself (whose methods are then called by
// several coordinators at once).
type PartitionMetrics interface {
	Metrics
	ForPartition(p events.Partition) Metrics
}
