package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/maknow/tenure/events"
)

// Report is what a run found.
type Report struct {
	Seed      uint64
	Schedules int
	ByKind    map[string]int // schedules by kind
	Faults    map[string]int // faults injected, by type
	Problems  []string       // things the orchestration noticed (informational)
	Envs      []*EnvReport
	Elapsed   time.Duration

	mu     sync.Mutex
	start  time.Time
	total  int
	failed []string // schedules after which a check failed
}

// EnvReport is what one environment (single server or cluster) found.
type EnvReport struct {
	Name  string
	Lease time.Duration // the workers' lease duration
	Final *Check1       // the checks after the last schedule, workers stopped
	// Worst counts over the checks after every schedule and the final one.
	Rounds                                           int
	Lost, Phantom, DoubleHolders, StaleEffects, Gaps int
	Liveness, AuditFailures                          int
	Hostiles                                         int      // hostile workers
	AttackRounds                                     int      // rounds of attacks opened
	Attacks                                          []string // the attack types they make
	Hostile                                          int      // hostile findings, worst round
	AuditCLI                                         error    // `tenure audit` run as a process at the end
	Stops                                            []stopped
	Exits                                            []string       // unexpected process exits
	CoordLog                                         map[string]int // coordinator log events
	Panics                                           []string

	killed []int // cluster nodes killed, in order
}

type stopped struct {
	worker string
	at     time.Time // when it was stopped
	d      time.Duration
	held   []events.Job
}

func newReport(cfg *Config) *Report {
	return &Report{Seed: cfg.Seed, ByKind: make(map[string]int), Faults: make(map[string]int), start: time.Now()}
}

func (r *Report) fault(kind string) {
	r.mu.Lock()
	r.Faults[kind]++
	r.mu.Unlock()
}

func (r *Report) problem(s string) {
	r.mu.Lock()
	r.Problems = append(r.Problems, s)
	r.mu.Unlock()
}

func (er *EnvReport) noteRound(c *Check1) {
	er.Rounds++
	r := c.Result
	er.Lost = max(er.Lost, r.Lost.Count)
	er.Phantom = max(er.Phantom, r.Phantom.Count)
	er.DoubleHolders = max(er.DoubleHolders, r.DoubleHolders.Count)
	er.StaleEffects = max(er.StaleEffects, r.StaleEffects.Count)
	er.Gaps = max(er.Gaps, r.Gaps.Count)
	er.Liveness = max(er.Liveness, c.Liveness.Count)
	er.Hostile = max(er.Hostile, r.Hostile.Findings.Count)
	if !c.AuditOK() {
		er.AuditFailures++
	}
}

// readCoordinatorLogs counts what the coordinators logged (JSON lines) and
// finds panics in every process log.
func (er *EnvReport) readCoordinatorLogs(dir string, ids []string) {
	er.CoordLog = make(map[string]int)
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		coord := slices.Contains(ids, strings.TrimSuffix(filepath.Base(path), ".log"))
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") {
				er.Panics = append(er.Panics, filepath.Base(path)+": "+line)
			}
			if !coord {
				continue
			}
			var l struct {
				Msg string `json:"msg"`
			}
			if json.Unmarshal([]byte(line), &l) != nil {
				continue
			}
			switch m := l.Msg; {
			case m == "live":
				er.CoordLog["went live"]++
			case strings.HasPrefix(m, "lost authority"):
				er.CoordLog["fenced: append refused, stood by"]++
			case m == "resynchronising":
				er.CoordLog["resynchronised"]++
			case m == "restored snapshot":
				er.CoordLog["snapshot restored"]++
			case strings.Contains(m, "folding from the start"):
				er.CoordLog["snapshot not usable"]++
			case m == "refusing to go live":
				er.CoordLog["refused to go live (divergence)"]++
			}
		}
		f.Close()
	}
}

// OK reports whether every check passed everywhere.
func (r *Report) OK() bool {
	if len(r.failed) > 0 {
		return false
	}
	for _, e := range r.Envs {
		if e.Final == nil || !e.Final.OK() || e.Lost+e.Phantom+e.DoubleHolders+e.StaleEffects+e.Gaps+e.Liveness+e.AuditFailures+e.hostileFailures() > 0 ||
			e.AuditCLI != nil || len(e.Panics) > 0 || e.CoordLog["refused to go live (divergence)"] > 0 {
			return false
		}
	}
	return true
}

// missingAttacks are the attack types the hostile workers of the
// environment never ran (none when it has no hostile worker).
func (er *EnvReport) missingAttacks() []string {
	if er.Hostiles == 0 {
		return nil
	}
	var out []string
	for _, t := range er.Attacks {
		if er.Final == nil || er.Final.Result.Hostile.Stats.ByType[t] == nil {
			out = append(out, t)
		}
	}
	return out
}

// hostileFailures counts the hostile findings of the worst round and the
// attack types not run: hostile=ok means every attack was made and none
// achieved anything.
func (er *EnvReport) hostileFailures() int { return er.Hostile + len(er.missingAttacks()) }

// Totals of the final line.
func (r *Report) totals() (lost, phantom, double, stale, gaps, live, hostile int, auditOK bool) {
	auditOK = true
	for _, e := range r.Envs {
		hostile += e.hostileFailures()
		lost += e.Lost
		phantom += e.Phantom
		double += e.DoubleHolders
		stale += e.StaleEffects
		gaps += e.Gaps
		live += e.Liveness
		auditOK = auditOK && e.AuditFailures == 0 && e.AuditCLI == nil && e.Final != nil && e.Final.AuditOK()
	}
	return
}

func counts(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var b []string
	for _, k := range keys {
		b = append(b, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(b) == 0 {
		return "none"
	}
	return strings.Join(b, ", ")
}

// write prints the report, ending with the one-line summary.
func (r *Report) write(w io.Writer) {
	fmt.Fprintf(w, "\nchaos report (seed %d, %v)\n", r.Seed, r.Elapsed.Round(time.Second))
	fmt.Fprintf(w, "  schedules      %d: %s\n", r.Schedules, counts(r.ByKind))
	fmt.Fprintf(w, "  faults         %s\n", counts(r.Faults))
	exits, resyncs := 0, 0
	for _, e := range r.Envs {
		exits += len(e.Exits)
		resyncs += e.CoordLog["resynchronised"]
	}
	fmt.Fprintf(w, "  restarts       coordinator processes %d, nats-server %d, cluster nodes %d, after unexpected exits %d; coordinator resynchronisations %d\n",
		r.Faults["coordinator restart"], r.Faults["nats-server restart"], r.Faults["cluster node restart"], exits, resyncs)
	for _, e := range r.Envs {
		fmt.Fprintf(w, "  [%s, lease %v]\n", e.Name, e.Lease)
		if e.Final == nil {
			fmt.Fprintf(w, "    not checked: the environment did not finish\n")
			continue
		}
		st := e.Final.Result.Stats
		fmt.Fprintf(w, "    inputs       attempted %d, acknowledged %d, stored %d (clients %d; coordinators: %s), folded %d, lost %d, phantom %d\n",
			st.Attempted, st.Acked, st.Stored, st.StoredClient, counts(st.Coordinator), st.Folded, e.Lost, e.Phantom)
		fmt.Fprintf(w, "                 stored without a PubAck read by the client %d, one Msg-Id stored twice %d\n", st.StoredUnacked, st.DedupFailures)
		fmt.Fprintf(w, "    decisions    %d: %s\n", st.Decisions, counts(st.Kinds))
		fmt.Fprintf(w, "    rejections   %s\n", counts(st.Rejections))
		fmt.Fprintf(w, "    expiries     expired %d, ack_missed %d, unresolved %d; leases created %d, highest generation %d\n",
			st.Kinds["expired"], st.Kinds["ack_missed"], st.Kinds["unresolved"], st.GenerationsNew, st.MaxGeneration)
		fmt.Fprintf(w, "    dispatcher   %s\n", counts(st.Ops))
		fmt.Fprintf(w, "    coordinators %s\n", counts(e.CoordLog))
		fmt.Fprintf(w, "    exits        %d unexpected process exits", len(e.Exits))
		if len(e.Exits) > 0 {
			fmt.Fprintf(w, " (first: %s)", e.Exits[0])
		}
		fmt.Fprintln(w)
		for _, s := range e.Stops {
			fmt.Fprintf(w, "    worker stop  %s\n", describeStop(s, e.Final.Log))
		}
		ends := make(map[string]int)
		cancelled := 0
		for _, j := range e.Final.Result.Jobs {
			ends[j.State.String()]++
			if j.Cancelled {
				cancelled++
			}
		}
		fmt.Fprintf(w, "    jobs         %d (%s), cancellation requested on %d\n", len(e.Final.Result.Jobs), counts(ends), cancelled)
		fmt.Fprintf(w, "    liveness     after each of %d checks, every job not cancelled ended within 2 lease durations (%v) after the faults stopped: %s\n",
			e.Rounds, 2*e.Lease, verdictWord(e.Liveness == 0))
		writeHostile(w, e)
		fmt.Fprintf(w, "    checks       worst of %d rounds: lost %d, phantom %d, double holders %d, stale effects %d, gaps %d, audit failures %d, liveness %d, hostile %d\n",
			e.Rounds, e.Lost, e.Phantom, e.DoubleHolders, e.StaleEffects, e.Gaps, e.AuditFailures, e.Liveness, e.Hostile)
		if a := e.Final.Audit; a != nil {
			fmt.Fprintf(w, "    audit        %d inputs replayed, %d decisions verified, %d problems; tenure audit (process): %s\n",
				a.Inputs, a.Verified, a.Problems(), errWord(e.AuditCLI))
		}
		for _, f := range findingLines(e.Final) {
			fmt.Fprintf(w, "    %s\n", f)
		}
		for _, p := range e.Panics {
			fmt.Fprintf(w, "    PANIC        %s\n", p)
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  note: %s\n", p)
	}
	for _, f := range r.failed {
		fmt.Fprintf(w, "  FAILED after %s\n", f)
	}
	lost, phantom, double, stale, gaps, live, hostile, auditOK := r.totals()
	fmt.Fprintf(w, "chaos: liveness=%s\n", verdictWord(live == 0))
	audit := "ok"
	if !auditOK {
		audit = "FAIL"
	}
	hostileWord := "ok"
	switch {
	case hostile > 0:
		hostileWord = fmt.Sprintf("FAIL(%d)", hostile)
	case !slices.ContainsFunc(r.Envs, func(e *EnvReport) bool { return e.Hostiles > 0 }):
		hostileWord = "off" // no hostile worker ran: nothing was tried
	}
	fmt.Fprintf(w, "chaos: schedules=%d lost=%d phantom=%d double_holders=%d stale_effects=%d gaps=%d audit=%s hostile=%s\n",
		r.Schedules, lost, phantom, double, stale, gaps, audit, hostileWord)
}

func errWord(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// findingLines lists the findings of one round of checks, one line each.
func findingLines(c *Check1) []string {
	var out []string
	r := c.Result
	for _, f := range []struct {
		name string
		f    Findings
	}{{"lost", r.Lost}, {"phantom", r.Phantom}, {"double holder", r.DoubleHolders}, {"stale effect", r.StaleEffects}, {"gap", r.Gaps}, {"liveness", c.Liveness},
		{"hostile", r.Hostile.Findings}} {
		for _, it := range f.f.Items {
			out = append(out, f.name+": "+it)
		}
		if f.f.Count > len(f.f.Items) {
			out = append(out, fmt.Sprintf("%s: %d findings in all", f.name, f.f.Count))
		}
	}
	if c.AuditErr != nil {
		out = append(out, fmt.Sprintf("audit: could not run: %v", c.AuditErr))
	} else if !c.Audit.OK() {
		out = append(out, fmt.Sprintf("audit: %d problems (mismatches %d, missing %d, extra %d, orphans %d, holes %d, chain %d, lockdown %q, hashes equal %v)",
			c.Audit.Problems(), c.Audit.Mismatches.Count, c.Audit.Missing.Count, c.Audit.Extra.Count, c.Audit.Orphans.Count,
			c.Audit.Holes.Count, c.Audit.Chain.Count, c.Audit.Lockdown, c.Audit.HashesEqual()))
	}
	return out
}

// describeStop says what became of the leases a stopped worker held, from
// the decision stream: how and when (after the SIGSTOP) each ended, who
// got the job next, and how many of the worker's later inputs about it were
// refused (its zombie effects).
func describeStop(s stopped, l *Log) string {
	var parts []string
	for _, h := range s.held {
		ended, next, refused := "", "", 0
		for i := range l.Decisions {
			d, err := events.DecodeDecision(l.Decisions[i].Data)
			if err != nil || d.Job.ID != h.ID {
				continue
			}
			switch {
			case ended == "" && d.Job.Generation == h.Generation && !d.Job.State.Live():
				ended = fmt.Sprintf("%s/%s %v after the stop", d.Kind, d.Reason, time.Duration(d.At-s.at.UnixNano()).Round(time.Millisecond))
			case (d.Kind == events.KindGranted || d.Kind == events.KindAcked) && d.Job.Generation > h.Generation && next == "":
				next = fmt.Sprintf("generation %d to %s", d.Job.Generation, d.Job.Holder)
			case ended != "" && d.Actor == s.worker && !d.Kind.Accepted() && !d.Kind.Derived():
				refused++
			}
		}
		p := fmt.Sprintf("%s g%d ended %s", h.ID, h.Generation, ended)
		if ended == "" {
			p = fmt.Sprintf("%s g%d did not end", h.ID, h.Generation)
		}
		if next != "" {
			p += ", then " + next
		}
		p += fmt.Sprintf(", %d later inputs of %s refused", refused, s.worker)
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		parts = []string{"no lease held when stopped"}
	}
	return fmt.Sprintf("%s stopped %v: %s", s.worker, s.d.Round(time.Millisecond), strings.Join(parts, "; "))
}

// writeHostile writes the hostile section of an environment: the attacks
// by type and what they got, the verdicts of the hostile inputs, and what
// they did to the jobs of others.
func writeHostile(w io.Writer, e *EnvReport) {
	if e.Hostiles == 0 {
		return
	}
	h := e.Final.Result.Hostile
	st := h.Stats
	n := 0
	for _, t := range st.ByType {
		n += t.Attacks
	}
	fmt.Fprintf(w, "    hostile      %d hostile worker(s), each with the credentials of a worker: %d attacks in %d rounds, %d hostile inputs stored; findings: worst round %d",
		e.Hostiles, n, e.AttackRounds, st.Inputs, e.Hostile)
	if m := e.missingAttacks(); len(m) > 0 {
		fmt.Fprintf(w, "; NOT RUN: %s", strings.Join(m, ", "))
	}
	fmt.Fprintln(w)
	for _, typ := range AttackTypes {
		t := st.ByType[typ]
		if t == nil {
			if slices.Contains(e.Attacks, typ) {
				fmt.Fprintf(w, "      %-16s NOT RUN\n", typ)
			} else {
				fmt.Fprintf(w, "      %-16s not asked for (--attacks)\n", typ)
			}
			continue
		}
		fmt.Fprintf(w, "      %-16s %d attacks: %d sent, %d stored, %d refused by the server or the client, %d without an answer",
			typ, t.Attacks, t.Published, t.Stored, t.Refused, t.Unanswered)
		switch typ {
		case AttackBadInput:
			fmt.Fprintf(w, "; catalogue cases %d: %d judged as the catalogue says, %d refused by the server as they must be, %d not stored, %d not folded yet",
				st.Cases, st.CasesAsExpected, st.CasesRefused, st.CasesNotStored, st.CasesPending)
		case AttackLeaseGuess:
			fmt.Fprintf(w, "; on %d jobs of other workers", len(t.Targets))
		case AttackConsumerHog:
			fmt.Fprintf(w, "; %d consumers created (its own names only), %d messages pulled", t.Consumers, t.Pulled)
		case AttackForgedDelivery:
			fmt.Fprintf(w, "; %d push consumers created, aimed at %d subjects of the deployment", t.Consumers, len(t.Targets))
		case AttackTickIDs:
			delay := "-"
			if st.OwnExpired > 0 {
				delay = st.MaxExpiryDelay.Round(time.Millisecond).String()
			}
			fmt.Fprintf(w, "; %d leases of its own, %d expired, the latest expiry stored %s after its expires_at", st.OwnLeases, st.OwnExpired, delay)
		case AttackFlood:
			fmt.Fprintf(w, "; %d refused over its quota", t.Quota)
		case AttackBoard:
			fmt.Fprintf(w, "; %d requests reached a board without a credential, %d answered with anything but the refusal; %d answers of /healthz and /metrics searched for lease ids",
				st.BoardReached, st.BoardAnswered, st.BoardOpen)
		case AttackLearnedLease:
			fmt.Fprintf(w, "; %d inputs of a non-holder, %d of whose verdicts told it another's lease id or payload; its records: %d verdicts read, %d lease ids and %d payloads learned, %d claims under them",
				st.LearnInputs, st.LearnLeaks, st.LearnVerdicts, st.LearnedIDs, st.LearnedPayloads, st.LearnClaims)
		case AttackQueueDecline, AttackQueueRelease, AttackQueueNoAck, AttackQueueExpire:
			fmt.Fprintf(w, "; %d announcements, %d offers got and refused, %d withdrawals read",
				t.Queue.Announced, t.Queue.Offers, t.Queue.Withdrawn)
		}
		fmt.Fprintln(w)
		if len(t.Errors) > 0 {
			fmt.Fprintf(w, "      %-16s answers: %s\n", "", truncate(counts(t.Errors), 300))
		}
		if typ == AttackForgedDelivery && len(t.Targets) > 0 {
			fmt.Fprintf(w, "      %-16s aimed at: %s\n", "", truncate(counts(t.Targets), 300))
		}
	}
	fmt.Fprintf(w, "    hostile verdicts %s\n", truncate(counts(st.Verdicts), 400))
	fmt.Fprintf(w, "    on others'   %d verdicts of hostile inputs on jobs of other actors; evidence counters of their leases raised: %s; hostile findings: %d\n",
		st.OnOthers, counts(st.Counters), h.Findings.Count)
	fmt.Fprintf(w, "    queue        %d jobs submitted to %s, %d completed, %d DEAD, %d FAILED; the hostile workers got %d offers, held at most %d live leases at once, and %d withdrawals after refusals (strikes up to %d); %d jobs frozen by hostile claims\n",
		st.QueueJobs, ChaosQueue, st.QueueCompleted, st.QueueDead, st.QueueFailed, st.HostileOffers, st.HostileMaxHeld, st.HostileWithdrawn, st.HostileMaxStrikes, st.Frozen)
	near := 0
	for _, n := range st.ExpiredNear {
		near += n
	}
	fmt.Fprintf(w, "    cost         %d leases of other actors expired, %d of them during an attack or within 1 s after it (%s)\n",
		st.OthersExpired, near, counts(st.ExpiredNear))
}

// truncate cuts s to n bytes, with an ellipsis.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
