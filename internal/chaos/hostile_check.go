package chaos

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/events"
)

// Attack types of the hostile worker (RunHostile).
const (
	AttackBadInput       = "bad-input"       // cases of the catalogue
	AttackLeaseGuess     = "lease-guess"     // claims of other workers' jobs under guessed lease ids
	AttackConsumerHog    = "consumer-hog"    // many consumers on the decision stream, and pulls
	AttackForgedDelivery = "forged-delivery" // push consumers and replies aimed at the deployment's subjects
	AttackTickIDs        = "tick-ids"        // the old predictable tick Msg-Ids of its own leases' deadlines
	AttackFlood          = "flood"           // many inputs, and large bodies
	AttackBoard          = "board"           // the web boards' pages and API without a credential
)

// AttackTypes lists the attack types in the report's order.
var AttackTypes = []string{AttackBadInput, AttackLeaseGuess, AttackConsumerHog, AttackForgedDelivery, AttackTickIDs, AttackFlood, AttackBoard}

// AttackRecord is what the hostile worker says about one of its attacks
// (one JSON line of its records file): what it sent and what the server
// answered. The checks do not trust it for anything but its expectations
// (Expect, Leases), which they verify against the streams.
type AttackRecord struct {
	Hostile    string         `json:"hostile"`
	Round      int            `json:"round"`
	Type       string         `json:"type"`
	At         int64          `json:"at"`     // start, Unix ns
	Dur        int64          `json:"dur_ns"` // duration
	Published  int            `json:"published"`
	Stored     int            `json:"stored"`     // PubAcks received
	Refused    int            `json:"refused"`    // permissions violations, error answers, messages the client library refused
	Unanswered int            `json:"unanswered"` // requests and publishes without an answer
	Consumers  int            `json:"consumers"`  // consumers created
	Pulled     int            `json:"pulled"`     // messages received from its consumers
	Targets    []string       `json:"targets,omitempty"`
	Errors     map[string]int `json:"errors,omitempty"` // answers and errors, by description (a few)
	Expect     []Expect       `json:"expect,omitempty"`
	Leases     []OwnLease     `json:"leases,omitempty"`
	Board      *BoardProbe    `json:"board,omitempty"` // the board attack's answers
}

// BoardProbe is what the board attack got from the web boards
// (HostileConfig.Boards): every page must send it to the login page and
// every other request answer 401, whatever it forges (a session cookie, a
// bearer or basic token, the board's own Origin, a CSRF header); /healthz
// and /metrics answer, and their bodies are kept for the checks (no lease
// id of the log may be in them).
type BoardProbe struct {
	Boards   int          `json:"boards"`             // boards it was given
	Reached  int          `json:"reached"`            // requests a board answered (any status)
	Answered []string     `json:"answered,omitempty"` // requests answered with anything but the refusal, e.g. "GET /api/jobs (no credential): 200"
	Open     []OpenAnswer `json:"open,omitempty"`     // the answers of the open endpoints
}

// OpenAnswer is the body of an open endpoint of a board (/healthz, /metrics).
type OpenAnswer struct {
	URL  string `json:"url"`
	Body string `json:"body"`
}

// Expect is what one input of an attack must get: the verdict Verdict
// ("kind/reason") if set, or, if Refused, not to be stored at all.
type Expect struct {
	MsgID   string `json:"msg_id"`
	Case    string `json:"case"`
	Verdict string `json:"verdict,omitempty"`
	Refused bool   `json:"refused,omitempty"`
}

// OwnLease is a lease the hostile worker was granted for the tick-ids
// attack.
type OwnLease struct {
	Job       string `json:"job"`
	LeaseID   string `json:"lease_id"`
	ExpiresAt int64  `json:"expires_at"`
}

// HostileResult is the outcome of the hostile checks.
type HostileResult struct {
	// Findings: what no hostile input may achieve: an accepted verdict on
	// a job of another actor; any change of another actor's lease but its
	// evidence counters (stale, late, duplicates); a live lease ended by a
	// worker other than its holder (for any lease, hostile or not: only
	// its holder, time, a dispatcher or operator may end one); a case of
	// the catalogue without its one verdict; a case the server must refuse
	// stored; a consumer on the decision stream under a name that is not
	// one of the hostile worker's own; a request of the board attack
	// answered with anything but the refusal, or a lease id of the log in
	// what the board's open endpoints answered.
	Findings Findings
	Stats    HostileStats
}

// HostileStats counts what the hostile workers did and got.
type HostileStats struct {
	Inputs   int            // hostile inputs stored
	Verdicts map[string]int // their verdicts, by "kind/reason"
	OnOthers int            // of which on jobs of other actors
	Counters map[string]int // evidence counters of other actors' leases the hostile inputs raised
	// The catalogue's cases: sent, with their one verdict, refused by the
	// server as they must be, not stored (the server refused a message too
	// big, or a fault lost it), not folded yet.
	Cases, CasesAsExpected, CasesRefused, CasesNotStored, CasesPending int
	// Own leases of the tick-ids attack, how many expired, and the longest
	// time from a lease's expires_at to the storing of its expiry.
	OwnLeases, OwnExpired int
	MaxExpiryDelay        time.Duration
	// The other actors' leases that expired, and of those, how many
	// expired during an attack or within a second after it, by attack
	// type: what the attacks cost the honest side (a flood delays the
	// verdicts stored behind it; PROTOCOL.md §4.1).
	OthersExpired int
	ExpiredNear   map[string]int
	ByType        map[string]*AttackTotals // the records, by attack type
	// The board attack's requests that a board answered, those answered
	// with anything but the refusal (findings), and the answers of the open
	// endpoints searched for lease ids.
	BoardReached, BoardAnswered, BoardOpen int
}

// AttackTotals sums the records of one attack type.
type AttackTotals struct {
	Attacks, Published, Stored, Refused, Unanswered, Consumers, Pulled int
	Errors                                                             map[string]int
	Targets                                                            map[string]int
}

// OK reports whether the hostile checks found nothing.
func (h *HostileResult) OK() bool { return h.Findings.Count == 0 }

// hostileOf returns the hostile worker whose subject subject is.
func hostileOf(subject string, hostile map[string]bool) (string, bool) {
	rest, ok := strings.CutPrefix(subject, events.InputPrefix+".worker.")
	if !ok {
		return "", false
	}
	id, _, _ := strings.Cut(rest, ".")
	return id, hostile[id]
}

// counters are the evidence counters of a lease, which claims of it may
// raise without changing it (PROTOCOL.md §6.13).
func counters(j *events.Job) map[string]uint64 {
	return map[string]uint64{"stale": j.Stale, "late": j.Late, "late_progress": j.LateProgress, "duplicates": j.Duplicates, "conflicts": j.Conflicts}
}

// sameLease reports whether a and b are the same lease in the same state,
// evidence counters aside (conflicts aside too: a claim that raises it
// also sets conflict, which is compared).
func sameLease(a, b events.Job) bool {
	a.Stale, a.Late, a.LateProgress, a.Duplicates, a.Conflicts = 0, 0, 0, 0, 0
	b.Stale, b.Late, b.LateProgress, b.Duplicates, b.Conflicts = 0, 0, 0, 0, 0
	return bytes.Equal(events.AppendJob(nil, &a), events.AppendJob(nil, &b))
}

// leaseIDShape is the form of a lease id: L<sequence>, and from rules
// revision 2 on 22 random characters after a dash.
var leaseIDShape = regexp.MustCompile(`\bL[0-9]+(?:-[A-Za-z0-9_-]{22})?`)

// checkBoards checks the board attacks' answers: every request refused (a
// page sent to the login page, the rest 401), some of them reached a
// board, and no lease id of the log in what the open endpoints answered.
func checkBoards(ds []stored, c *Clients, h *HostileResult) {
	var probes []*AttackRecord
	for i := range c.Attacks {
		if a := &c.Attacks[i]; a.Type == AttackBoard {
			probes = append(probes, a)
		}
	}
	if len(probes) == 0 {
		return
	}
	leases := make(map[string]bool)
	for i := range ds {
		if id := ds[i].d.Job.LeaseID; id != "" {
			leases[id] = true
		}
	}
	for _, a := range probes {
		if a.Board == nil {
			h.Findings.add("%s's board attack of round %d recorded no answer", a.Hostile, a.Round)
			continue
		}
		h.Stats.BoardReached += a.Board.Reached
		for _, what := range a.Board.Answered {
			h.Stats.BoardAnswered++
			h.Findings.add("%s's board attack of round %d: %s, without a credential", a.Hostile, a.Round, what)
		}
		for _, o := range a.Board.Open {
			h.Stats.BoardOpen++
			for _, id := range leaseIDShape.FindAllString(o.Body, -1) {
				if leases[id] {
					h.Findings.add("%s's board attack of round %d: %s, open to anyone, shows lease id %s", a.Hostile, a.Round, o.URL, id)
				}
			}
		}
	}
	if h.Stats.BoardReached == 0 {
		h.Findings.add("the board attacks (%d) reached no board: nothing was tried", len(probes))
	}
}

// checkHostile runs the hostile checks: over the decisions, in order,
// following every job's projection; and over the expectations of the
// hostile workers' records.
func checkHostile(l *Log, ds []stored, inputs map[uint64]*Message, c *Clients, r *Result) {
	h := &r.Hostile
	h.Stats.Verdicts, h.Stats.Counters, h.Stats.ByType, h.Stats.ExpiredNear = make(map[string]int), make(map[string]int), make(map[string]*AttackTotals), make(map[string]int)
	hostile := make(map[string]bool)
	for _, id := range c.Hostile {
		hostile[id] = true
	}
	for _, a := range c.Attacks {
		t := h.Stats.ByType[a.Type]
		if t == nil {
			t = &AttackTotals{Errors: make(map[string]int), Targets: make(map[string]int)}
			h.Stats.ByType[a.Type] = t
		}
		t.Attacks++
		t.Published += a.Published
		t.Stored += a.Stored
		t.Refused += a.Refused
		t.Unanswered += a.Unanswered
		t.Consumers += a.Consumers
		t.Pulled += a.Pulled
		for k, v := range a.Errors {
			t.Errors[k] += v
		}
		for _, s := range a.Targets {
			t.Targets[s]++
		}
	}
	if len(hostile) == 0 {
		return
	}
	bySeq := make(map[string]uint64) // the hostile inputs' Msg-Ids
	for i := range l.Inputs {
		m := &l.Inputs[i]
		if _, ok := hostileOf(m.Subject, hostile); ok {
			h.Stats.Inputs++
			if id := m.Header.Get(nats.MsgIdHdr); id != "" {
				bySeq[id] = m.Seq
			}
		}
	}

	checkBoards(ds, c, h)

	proj := make(map[string]events.Job) // every job's latest projection
	others := make(map[string]bool)     // jobs another actor named or held
	verdicts := make(map[uint64][]string)
	expired := make(map[string]int64) // lease id -> stored time of its expiry
	var lastCause uint64
	rev := uint32(events.Revision1)
	for _, s := range ds {
		d := &s.d
		lastCause = d.Cause
		m := inputs[d.Cause]
		hid, hos := "", false
		if m != nil {
			hid, hos = hostileOf(m.Subject, hostile)
		}
		j := d.Job
		hasJob := j.ID != "" && j.ID != events.NoJob
		prev, had := proj[j.ID]
		if d.Kind == events.KindRulesSet {
			rev = d.Revision
		}
		if rev >= events.Revision5 && hos && hasJob && d.Addressee == hid && j.Exists() && j.Holder != hid && (j.LeaseID != "" || j.HasPayload) {
			// Need to know (rules revision 5): a decision addressed to a
			// worker about a lease it does not hold withholds the lease
			// id, the capability to claim it, and the payload.
			h.Findings.add("decision %d (%s/%s of job %s) told %s the lease id or payload of %q's lease", s.m.Seq, d.Kind, d.Reason, j.ID, hid, j.Holder)
		}
		j.Reveal(&prev) // withheld fields: the projection before's
		what := func() string {
			return fmt.Sprintf("decision %d (%s/%s of job %s) caused by %s's input %d on %s", s.m.Seq, d.Kind, d.Reason, j.ID, hid, d.Cause, m.Subject)
		}
		if hos && !d.Kind.Derived() {
			verdict := d.Kind.String() + "/" + string(d.Reason)
			h.Stats.Verdicts[verdict]++
			verdicts[d.Cause] = append(verdicts[d.Cause], verdict)
			if hasJob && others[j.ID] {
				h.Stats.OnOthers++
				switch {
				case d.Kind.Accepted():
					h.Findings.add("%s: accepted on a job of another actor (holder %q, generation %d)", what(), prev.Holder, prev.Generation)
				case !sameLease(prev, j):
					h.Findings.add("%s: changed %q's lease:\n      before %s\n      after  %s", what(), prev.Holder, events.AppendJob(nil, &prev), events.AppendJob(nil, &j))
				default:
					after := counters(&j)
					for k, v := range counters(&prev) {
						if after[k] > v {
							h.Stats.Counters[k] += int(after[k] - v)
						}
					}
				}
			}
		}
		if !hasJob {
			continue
		}
		if had && prev.State.Live() && (!j.State.Live() || j.Generation != prev.Generation) {
			byHolder := d.Role == events.RoleWorker && d.Actor == prev.Holder
			if !d.Kind.Derived() && d.Role != events.RoleOps && d.Role != events.RoleCoord && !byHolder {
				h.Findings.add("decision %d (%s/%s): %s's %s lease of job %s (generation %d) ended by input %d of %s %s",
					s.m.Seq, d.Kind, d.Reason, prev.Holder, prev.State, j.ID, prev.Generation, d.Cause, d.Role, d.Actor)
			}
		}
		if d.Kind == events.KindExpired && hostile[j.Holder] {
			expired[j.LeaseID] = s.m.Time
		} else if d.Kind == events.KindExpired {
			h.Stats.OthersExpired++
			for _, a := range c.Attacks {
				if s.m.Time >= a.At && s.m.Time <= a.At+a.Dur+int64(time.Second) {
					h.Stats.ExpiredNear[a.Type]++
					break
				}
			}
		}
		if !hos && !d.Kind.Derived() || j.Holder != "" && !hostile[j.Holder] {
			others[j.ID] = true
		}
		proj[j.ID] = j
	}

	for _, a := range c.Attacks {
		for _, e := range a.Expect {
			h.Stats.Cases++
			seq, ok := bySeq[e.MsgID]
			switch {
			case e.Refused && ok:
				h.Findings.add("%s's input %d (%s, Msg-Id %s) was stored: the server must refuse it", a.Hostile, seq, e.Case, e.MsgID)
			case e.Refused:
				h.Stats.CasesRefused++
			case !ok:
				h.Stats.CasesNotStored++
			case seq > lastCause:
				h.Stats.CasesPending++
			case e.Verdict == "":
				h.Stats.CasesAsExpected++ // not accepted on another's job: checked above
			case len(verdicts[seq]) != 1 || verdicts[seq][0] != e.Verdict:
				h.Findings.add("%s's input %d (%s): verdicts %v, want exactly %s", a.Hostile, seq, e.Case, verdicts[seq], e.Verdict)
			default:
				h.Stats.CasesAsExpected++
			}
		}
		if a.Type == AttackConsumerHog {
			for _, name := range a.Targets {
				if !slices.Contains(events.WorkerConsumerNames(a.Hostile), name) {
					h.Findings.add("%s created consumer %q on the decision stream: not one of its names %v", a.Hostile, name, events.WorkerConsumerNames(a.Hostile))
				}
			}
		}
		for _, ol := range a.Leases {
			h.Stats.OwnLeases++
			if t, ok := expired[ol.LeaseID]; ok {
				h.Stats.OwnExpired++
				h.Stats.MaxExpiryDelay = max(h.Stats.MaxExpiryDelay, time.Duration(t-ol.ExpiresAt))
			}
		}
	}
}
