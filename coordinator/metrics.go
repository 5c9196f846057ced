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
	// LoopPause is called after each turn of the live loop with the time
	// it took: from the moment the loop received an input, a reply, a
	// timer or a report to the moment it waits for the next one (the
	// folds, the appends handed to the client, a snapshot's encoding and
	// whatever else the turn did). For that long the loop received
	// nothing: its longest pause bounds how late an input can be taken.
	LoopPause(d time.Duration)
}

// CatchUpMetrics is a Metrics that is also told when the coordinator has
// caught up with its input stream: CaughtUp is called after InputFolded for
// an input that was the last the stream held when the server delivered it.
// A lag measured at the fold of an input that had waited (a restart that
// folds the inputs stored while it was down) is then no lag any more: the
// coordinator is at the end of the log, however old that end is.
type CatchUpMetrics interface {
	Metrics
	CaughtUp(seq uint64)
}

// PartitionMetrics is a Metrics that tells the partitions of a Group apart:
// NewGroup gives each partition's coordinator ForPartition(its partition)
// instead of Config.Metrics itself (whose methods are then called by
// several coordinators at once).
type PartitionMetrics interface {
	Metrics
	ForPartition(p events.Partition) Metrics
}
