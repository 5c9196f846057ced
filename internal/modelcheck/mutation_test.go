package modelcheck

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

// A mutation is a deliberately broken fold: edits of one source file of
// the projector, each an exact text that must occur once. The checker,
// built with the mutated file in place of the real one (go build
// -overlay: the projector's code is not touched, and has no hook for
// this), must report the violation named.
type mutation struct {
	name   string
	file   string // in projector/
	edits  [][2]string
	scope  string
	rule   string // the violation expected among those of the first depth that has any
	check  string
	reason string
}

var mutations = []mutation{
	{
		name: "renew-at-expiry",
		file: "projector.go",
		edits: [][2]string{
			// Deadlines fire once they are past, not at their instant: a
			// renewal stored exactly at expires_at finds the lease ACTIVE.
			{"for n := 0; len(p.heap) > 0 && p.heap[0].deadline <= p.now; n++ {", "for n := 0; len(p.heap) > 0 && p.heap[0].deadline < p.now; n++ {"},
			{"j.heapIdx >= 0 && j.deadline <= p.now {", "j.heapIdx >= 0 && j.deadline < p.now {"},
		},
		scope: "mut-lease", rule: RuleExpiry, check: "renew-at-expiry",
		reason: "a renewal accepted at expires_at",
	},
	{
		name: "stale-result",
		file: "projector.go",
		edits: [][2]string{
			// A result naming an older generation of the job, from its
			// holder, is applied to the current lease.
			{"	case gen < j.Generation:\n", "	case gen < j.Generation && p.in.Verb != events.VerbResult:\n"},
			{"	case leaseID != j.LeaseID:\n", "	case leaseID != j.LeaseID && !(p.in.Verb == events.VerbResult && gen < j.Generation):\n"},
		},
		scope: "mut-lease", rule: RuleResult, check: "binds",
		reason: "a stale generation's result accepted",
	},
	{
		name: "missed-ack-acked",
		file: "projector.go",
		edits: [][2]string{
			// An ACK after the ack deadline revives the offer.
			{"	case j.State == events.StateOffered:\n		j.State = events.StateActive\n", "	case j.State == events.StateOffered || j.State == events.StateAckMissed:\n		j.State = events.StateActive\n"},
		},
		scope: "mut-lease", rule: RuleAck, check: "missed-ack",
		reason: "a missed ACK counted as an ACK",
	},
	{
		name: "missed-ack-attempt",
		file: "projector.go",
		edits: [][2]string{
			// An offer of a queue job that was never ACKed spends an
			// attempt of the job's budget.
			{"p.attemptEnd(j, events.ReasonAckDeadlinePassed, false, true)", "p.attemptEnd(j, events.ReasonAckDeadlinePassed, true, true)"},
		},
		scope: "mut-queue", rule: RuleQueue, check: "attempts",
		reason: "a missed ACK counted as an attempt",
	},
	{
		name: "conflict-not-pending",
		file: "projector.go",
		edits: [][2]string{
			// A pending ownership conflict no longer stops the holder's claims.
			{"	case j.Conflict:\n		p.emit(j, events.KindConflict, events.ReasonConflictPending, holder)\n		return j, false\n", ""},
		},
		scope: "mut-lease", rule: RuleConflict, check: "blocks",
		reason: "an ownership conflict that does not block the holder",
	},
	{
		name: "success-after-cancel",
		file: "projector.go",
		edits: [][2]string{
			// A SUCCESS reconciles a cancel request.
			{"if j.CancelReq && in.Outcome == events.OutcomeSuccess {", "if false && j.CancelReq && in.Outcome == events.OutcomeSuccess {"},
		},
		scope: "mut-lease", rule: RuleCancel, check: "reconcile",
		reason: "a SUCCESS accepted after a cancel request",
	},
	{
		name: "progress-renews",
		file: "projector.go",
		edits: [][2]string{
			// Accepted progress extends the lease.
			{"		j.ProgressAt = p.now\n", "		j.ProgressAt = p.now\n		j.ExpiresAt = addTime(p.now, j.Duration)\n		p.schedule(j)\n"},
		},
		scope: "mut-lease", rule: RuleProgress, check: "never-renews",
		reason: "progress that renews the lease",
	},
	{
		name: "renewal-refused",
		file: "projector.go",
		edits: [][2]string{
			// After its first renewal, a lease's next renewal is taken for
			// a duplicate: nothing unsafe is accepted, a valid renewal is
			// refused (only the reference model says so).
			{"	case r.RenewSeq == j.RenewSeq:\n", "	case r.RenewSeq == j.RenewSeq || j.RenewSeq > 0 && r.RenewSeq == j.RenewSeq+1:\n"},
		},
		scope: "mut-lease", rule: RuleReference, check: "accepts",
		reason: "a valid renewal refused",
	},
}

var violationLine = regexp.MustCompile(`(?m)^violation rule=(\S+) check=(\S+) depth=(\d+): (.*)$`)

// TestMutationsCaught builds the checker once as it is and once per
// mutation, and runs each on its scope: the real fold has no violation
// there, and each mutation is reported with the violation expected.
func TestMutationsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the checker once per mutation")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := func(name string, overlay map[string]string) string {
		t.Helper()
		bin := filepath.Join(dir, name)
		args := []string{"build", "-o", bin}
		if overlay != nil {
			b, err := json.Marshal(map[string]any{"Replace": overlay})
			if err != nil {
				t.Fatal(err)
			}
			ov := filepath.Join(dir, name+".json")
			if err := os.WriteFile(ov, b, 0o644); err != nil {
				t.Fatal(err)
			}
			args = append(args, "-overlay", ov)
		}
		cmd := exec.Command("go", append(args, "./internal/modelcheck/cmd/modelcheck")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, out)
		}
		return bin
	}
	run := func(bin, scope string, stop bool) (string, int) {
		t.Helper()
		args := []string{"-scope", scope}
		if stop {
			args = append(args, "-stop")
		}
		out, err := exec.Command(bin, args...).Output()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return string(out), 0
		case errors.As(err, &ee):
			return string(out), ee.ExitCode()
		}
		t.Fatalf("run %s: %v", bin, err)
		return "", 0
	}

	clean := build("modelcheck", nil)
	for _, scope := range []string{"mut-lease", "mut-queue"} {
		out, code := run(clean, scope, false)
		if code != 0 || violationLine.MatchString(out) || !strings.Contains(out, "violations=0") {
			t.Fatalf("the real fold on scope %s: exit %d\n%s", scope, code, out)
		}
		t.Logf("real fold: %s", lastLine(out))
	}

	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			src := filepath.Join(root, "projector", m.file)
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
			out, code := run(bin, m.scope, true)
			if code != 1 {
				t.Fatalf("%s: the checker exited %d, want 1 (violations):\n%s", m.reason, code, out)
			}
			found := false
			for _, v := range violationLine.FindAllStringSubmatch(out, -1) {
				if v[1] == m.rule && v[2] == m.check {
					found = true
					t.Logf("%s: caught at depth %s: %s", m.reason, v[3], v[4])
				}
			}
			if !found {
				t.Errorf("%s: no violation %s/%s among:\n%s", m.reason, m.rule, m.check, out)
			}
		})
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
