package ui

import (
	"testing"
	"time"

	"github.com/maknow/tenure/events"
)

// tenure_loop_pause_max_seconds is the longest pause of all the turns
// reported for a partition, however many times ForPartition is asked for
// its series, and each partition has its own.
func TestLoopPauseMax(t *testing.T) {
	m := NewMetricsFor(2)
	p0, p1 := events.Partition{Index: 0, Count: 2}, events.Partition{Index: 1, Count: 2}
	m.ForPartition(p0).LoopPause(3 * time.Millisecond)
	m.ForPartition(p0).LoopPause(time.Millisecond)
	m.ForPartition(p1).LoopPause(2 * time.Millisecond)
	m.ForPartition(p0).LoopPause(2 * time.Millisecond)
	got := map[string]float64{}
	var observed uint64
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			switch mf.GetName() {
			case "tenure_loop_pause_max_seconds":
				got[s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
			case "tenure_loop_pause_seconds":
				observed += s.GetHistogram().GetSampleCount()
			}
		}
	}
	if got["0"] != 0.003 || got["1"] != 0.002 || observed != 4 {
		t.Fatalf("longest pauses by partition %v, %d turns observed; want 0.003 and 0.002, 4", got, observed)
	}
}
