package sim

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"testing/synctest"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "run this seed alone (its plan and findings printed)")
	seedsFlag = flag.Int("seeds", 0, "how many seeds to run from -from (default: SIM_SEEDS, or 200)")
	fromFlag  = flag.Uint64("from", 1, "the first seed of a run of -seeds")
	lostFlag  = flag.Bool("lost", false, "crashes that lose the streams' unsynced tails in the swarm (as SIM_LOST=1)")
)

func seeds() (from uint64, n int) {
	if *lostFlag {
		LostTails = true
	}
	if *seedFlag != 0 {
		return *seedFlag, 1
	}
	n = *seedsFlag
	if n == 0 {
		if v := os.Getenv("SIM_SEEDS"); v != "" {
			fmt.Sscan(v, &n)
		}
	}
	if n == 0 {
		n = 200
	}
	return *fromFlag, n
}

// runSeed runs one seed in a bubble of its own.
func runSeed(t *testing.T, seed uint64) *Report {
	var rep *Report
	synctest.Test(t, func(t *testing.T) { rep = Run(Draw(seed)) })
	return rep
}

// TestSim runs the seeds (SIM_SEEDS, -seeds, or -seed N alone): every
// oracle must find nothing. A failing seed is printed with the command
// that replays it.
func TestSim(t *testing.T) {
	from, n := seeds()
	var reps []*Report
	failed := 0
	for seed := from; seed < from+uint64(n); seed++ {
		rep := runSeed(t, seed)
		reps = append(reps, rep)
		if !rep.OK() {
			failed++
			t.Errorf("%s\n  findings:\n    %s\n  replay: go test ./internal/sim -run 'TestSim$' -seed %d -v\n  coordinators' log:\n    %s",
				rep.Plan, strings.Join(rep.Findings, "\n    "), seed, strings.Join(rep.Log, "\n    "))
			if failed >= 3 {
				break
			}
		}
		if *seedFlag != 0 {
			t.Logf("%s\n%d inputs, %d decisions, %d effects, %v simulated; faults %v; seen %v", rep.Plan, rep.Inputs, rep.Decisions, rep.Effects, rep.SimTime, rep.Faults, rep.Seen)
		}
	}
	var b strings.Builder
	Coverage(reps, &b)
	t.Logf("%d seeds from %d\n%s", len(reps), from, b.String())
}

// A seed replays: every choice of the simulator (the plan, the net's
// order, its delays and faults) is the seed's. The coordinators' own
// goroutines are still scheduled by the Go runtime where two of them act
// at one instant of the bubble's clock, and so are the SDK's (Run's
// handlers, its batched ACKs and results, its renewer coalescing the
// renewals due together), so not every seed stores the same inputs and
// decisions byte for byte (TESTING.md, "Replaying a seed"): at least half
// of the seeds without queues must, which a generator shared across
// goroutines, or a wall clock read, would break. Those with queues seldom
// do (Run's goroutines publish into one connection at one instant, in the
// runtime's order): their rate is logged, not required.
func TestSimReplays(t *testing.T) {
	const n = 20
	var same, runs [2]int // [0]: without queues, [1]: with
	for seed := uint64(1); seed <= n; seed++ {
		a, b := runSeed(t, seed), runSeed(t, seed)
		q := 0
		if a.Plan.Queues > 0 {
			q = 1
		}
		runs[q]++
		if a.Digest == b.Digest && a.Inputs == b.Inputs && a.Decisions == b.Decisions {
			same[q]++
		}
	}
	t.Logf("%d of %d seeds without queues and %d of %d with replayed byte for byte", same[0], runs[0], same[1], runs[1])
	if 2*same[0] < runs[0] {
		t.Errorf("only %d of %d seeds without queues replayed byte for byte, want half", same[0], runs[0])
	}
}
