package sim

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A mutation deliberately breaks Tenure (edits of one source file, each an
// exact text that must occur once, built with go test -c -overlay: the
// code itself has no hook for this); the simulator must find it within its
// seeds.
type simMutation struct {
	name  string
	file  string // relative to the repository
	edits [][2]string
	seeds int    // the seeds it may take
	want  string // a finding's text
}

var simMutations = []simMutation{
	{
		name: "fence-removed",
		file: "coordinator/append.go",
		edits: [][2]string{
			// Appends without the expected last sequence: a deposed or
			// paused coordinator's decisions are stored after the new
			// leader's.
			{"			set(3, headerExpectSeq, strconv.FormatUint(after, 10))\n", ""},
		},
		seeds: 400,
	},
	{
		name: "renew-at-expiry",
		file: "projector/projector.go",
		edits: [][2]string{
			// Deadlines fire once past, not at their instant: a renewal
			// stored exactly at expires_at finds the lease still ACTIVE.
			{"for n := 0; len(p.heap) > 0 && p.heap[0].deadline <= p.now; n++ {", "for n := 0; len(p.heap) > 0 && p.heap[0].deadline < p.now; n++ {"},
			{"j.heapIdx >= 0 && j.deadline <= p.now {", "j.heapIdx >= 0 && j.deadline < p.now {"},
		},
		seeds: 400,
		want:  "at or after its lease's expires_at",
	},
	{
		name: "snapshot-unanchored",
		file: "snapshot/reader.go",
		edits: [][2]string{
			// The stored snapshot restored on its headers' word: its
			// bytes not checked against its anchored state hash, nor its
			// state against its headers' input.
			{"	if err := checkBytes(a, s.Data); err != nil {\n\t\treturn s, err", "	if err := checkBytes(a, s.Data); false && err != nil {\n\t\treturn s, err"},
			{"	if p.LastSeq() != s.Anchor.InputSeq {", "	if false && p.LastSeq() != s.Anchor.InputSeq {"},
		},
		seeds: 400,
	},
	{
		name: "wrong-waiter",
		file: "worker/worker.go",
		edits: [][2]string{
			// A verdict nobody awaits (its PubAck not back yet, or its
			// caller gone) handed to whichever waiter there is, whatever
			// its input, instead of stashed for its own caller.
			{"		for _, wt := range w.waiters[k] {\n			if !wt.wants(&d) {\n", "		ws := w.waiters[k]\n		for k2, ws2 := range w.waiters {\n			if len(ws) == 0 {\n				k, ws = k2, ws2\n			}\n		}\n		for _, wt := range ws {\n			if false && !wt.wants(&d) {\n"},
		},
		seeds: 400,
		want:  "sdk call: ", // the wrong-waiter oracle's (checkCalls)
	},
	{
		name: "ops-wrong-waiter",
		file: "ops/reader.go",
		edits: [][2]string{
			// The same in package ops: a verdict nobody awaits (its
			// caller gone, or its PubAck not back yet) handed to
			// whichever call waits, instead of stashed for its own.
			{"	for _, w := range c.waiters[k] {\n		if !w.wants(&d) {\n", "	ws := c.waiters[k]\n	for k2, ws2 := range c.waiters {\n		if len(ws) == 0 {\n			k, ws = k2, ws2\n		}\n	}\n	for _, w := range ws {\n		if false && !w.wants(&d) {\n"},
		},
		seeds: 800,
		want:  "ops call: ", // checkOpsCalls
	},
	{
		name: "reader-waits-on-session",
		file: "coordinator/reader.go",
		edits: [][2]string{
			// The hang 45e6d70 fixed: a reader's handler waits on the
			// session's context, so a session that stops a reader whose
			// buffer is full (a snapshot refused after its readers read
			// ahead of it, on a long backlog) waits for ever. Found by the
			// backlog restarts (Plan.Backlog).
			{"	ctx, cancel := context.WithCancel(ctx)\n	ch := make(chan stored, buf)\n", "	_, cancel := context.WithCancel(ctx)\n	ch := make(chan stored, buf)\n"},
		},
		seeds: 800,
		want:  "has 0 verdicts", // checkVerdicts: the coordinators hung
	},
	{
		name: "run-at-ignored",
		file: "projector/queue.go",
		edits: [][2]string{
			// A job scheduled for later (run_at) ready at once.
			{"	case j.RunAt > p.now:\n		j.ReadyAt = j.RunAt\n", "	case j.RunAt > p.now:\n		j.ReadyAt = p.now\n"},
		},
		seeds: 400,
		want:  "before its run_at",
	},
	{
		name: "attempt-past-budget",
		file: "projector/queue.go",
		edits: [][2]string{
			// One attempt more than the job's max_attempts before it is
			// DEAD.
			{"	} else if j.Attempt >= j.MaxAttempts {\n", "	} else if j.Attempt > j.MaxAttempts {\n"},
		},
		seeds: 400,
		want:  "attempts of",
	},
	{
		name: "revoke-ignored",
		file: "worker/lease.go",
		edits: [][2]string{
			// The SDK ignores an operator's revoke of its lease: its
			// handler runs on and writes after the revoke reached it (the
			// other side of the effects oracle's exception for a revoke
			// that had not reached its holder yet).
			{"if d.Reason == events.ReasonLeaseRevoked || d.Reason == events.ReasonSettled {", "if d.Reason == events.ReasonSettled {"},
		},
		seeds: 800, // found by seed 240 on 3b434a3
		want:  "began before",
	},
}

var failingSeed = regexp.MustCompile(`seed (\d+): \d+ coordinators`)

// TestSimMutations builds the simulator once per mutation and requires it
// to find each within its seeds; it logs the seed that found it (make sim
// prints them: TESTING.md records them).
func TestSimMutations(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the simulator once per mutation")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := func(name string, overlay map[string]string) string {
		t.Helper()
		bin := filepath.Join(dir, name)
		args := []string{"test", "-c", "-o", bin}
		if overlay != nil {
			b, _ := json.Marshal(map[string]any{"Replace": overlay})
			ov := filepath.Join(dir, name+".json")
			if err := os.WriteFile(ov, b, 0o644); err != nil {
				t.Fatal(err)
			}
			args = append(args, "-overlay", ov)
		}
		cmd := exec.Command("go", append(args, "./internal/sim")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, out)
		}
		return bin
	}
	for _, m := range simMutations {
		t.Run(m.name, func(t *testing.T) {
			src := filepath.Join(root, m.file)
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			text := string(b)
			for _, e := range m.edits {
				if n := strings.Count(text, e[0]); n != 1 {
					t.Fatalf("%s holds %q %d times, want once: the mutation no longer fits the code", m.file, e[0], n)
				}
				text = strings.Replace(text, e[0], e[1], 1)
			}
			mutated := filepath.Join(dir, m.name+".go")
			if err := os.WriteFile(mutated, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			bin := build(m.name, map[string]string{src: mutated})
			var args []string
			args = append(args, "-test.run", "^TestSim$", "-seeds", strconvI(m.seeds))
			out, err := exec.Command(bin, args...).CombinedOutput()
			var ee *exec.ExitError
			if err == nil || !errors.As(err, &ee) {
				t.Fatalf("the simulator did not find %s in %d seeds (%v)", m.name, m.seeds, err)
			}
			seed := failingSeed.FindStringSubmatch(string(out))
			if seed == nil {
				t.Fatalf("the mutated simulator failed, not with a finding:\n%.3000s", out)
			}
			if m.want != "" && !strings.Contains(string(out), m.want) {
				t.Fatalf("found, but not as %q:\n%.3000s", m.want, out)
			}
			t.Logf("%s: found by seed %s", m.name, seed[1])
		})
	}
}

func strconvI(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
