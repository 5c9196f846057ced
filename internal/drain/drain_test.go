package drain

import (
	"flag"
	"os"
	"testing"
	"time"

	"github.com/maknow/tenure/internal/testutil"
)

// TestMain runs the worker processes the drain starts (this binary again,
// with WorkerEnv set) instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv(WorkerEnv) != "" {
		os.Exit(WorkerMain(nil))
	}
	os.Exit(m.Run())
}

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

var jobsFlag = flag.Int("drain.jobs", 0, "jobs the drain submits (default: $TENURE_DRAIN_JOBS, else 1000; 10000 for the long run)")

// drainJobs is the size of the drain: -drain.jobs, $TENURE_DRAIN_JOBS, or
// 1000 (200 with -short).
func drainJobs(t *testing.T) int {
	if *jobsFlag > 0 {
		return *jobsFlag
	}
	return Size(t)
}

// The drain with the NATS Store: every job ends COMPLETED by exactly one
// SUCCESS, the side-effect store keeps the effect of the attempt that
// completed each job and accepted no write after a newer generation's
// (Check), and chaos.Check finds nothing in the log and the clients'
// journals (Run).
func TestDrain(t *testing.T) {
	out := Run(t, Options{Jobs: drainJobs(t), Store: true})
	r := Check(queue, out.Jobs, out.Decisions, out.Writes)
	for _, f := range r.Findings.Items {
		t.Error(f)
	}
	if r.Findings.Count > len(r.Findings.Items) {
		t.Errorf("... %d findings in all", r.Findings.Count)
	}
	if out.Kills == 0 || out.Pauses == 0 || r.Failed == 0 {
		t.Errorf("the faults did not happen: %d kills, %d pauses, %d failures", out.Kills, out.Pauses, r.Failed)
	}
	if r.Stale == 0 {
		t.Errorf("no stale write was refused: the paused careless worker's handlers did not write after losing their leases")
	}
	t.Logf("drain: jobs=%d completed=%d in %v (%.0f jobs/s); faults: kills=%d pauses=%d; offers=%d failed=%d other ends %v; "+
		"effect writes=%d accepted=%d refused_stale=%d reruns=%d; inputs=%d decisions=%d",
		r.Jobs, r.Completed, out.Elapsed.Round(time.Millisecond), float64(r.Jobs)/out.Elapsed.Seconds(), out.Kills, out.Pauses, r.Offers, r.Failed, r.Ended,
		r.Writes, r.Accepted, r.Stale, r.Reruns, out.Inputs, len(out.Decisions))
}
