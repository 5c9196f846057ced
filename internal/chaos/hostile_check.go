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
	AttackLearnedLease   = "learned-lease"   // the inputs whose verdicts told a non-holder the lease id or payload, then claims under what they told
	// The queue modes: capacity announced on the honest workers' queue,
	// then every offer declined (a release while OFFERED), ACKed and
	// released, never ACKed, or ACKed and left to expire.
	AttackQueueDecline = "queue-decline"
	AttackQueueRelease = "queue-release"
	AttackQueueNoAck   = "queue-noack"
	AttackQueueExpire  = "queue-expire"
)

// AttackTypes lists the attack types in the report's order.
var AttackTypes = []string{AttackBadInput, AttackLeaseGuess, AttackConsumerHog, AttackForgedDelivery, AttackTickIDs, AttackFlood, AttackBoard,
	AttackLearnedLease, AttackQueueDecline, AttackQueueRelease, AttackQueueNoAck, AttackQueueExpire}

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
	Quota      int            `json:"quota"`      // of them refused over its quota (10077)
	Intake     bool           `json:"intake"`     // a PubAck named its intake stream: the deployment has quotas
	Unanswered int            `json:"unanswered"` // requests and publishes without an answer
	Consumers  int            `json:"consumers"`  // consumers created
	Pulled     int            `json:"pulled"`     // messages received from its consumers
	Targets    []string       `json:"targets,omitempty"`
	Errors     map[string]int `json:"errors,omitempty"` // answers and errors, by description (a few)
	Expect     []Expect       `json:"expect,omitempty"`
	Leases     []OwnLease     `json:"leases,omitempty"`
	Board      *BoardProbe    `json:"board,omitempty"`   // the board attack's answers
	Learned    *LearnProbe    `json:"learned,omitempty"` // the learned-lease attack's
	Queue      *QueueProbe    `json:"queue,omitempty"`   // a queue mode's
}

// LearnProbe is what the learned-lease attack read in the verdicts of the
// inputs a non-holder can send about another worker's job (an acquire of
// a held job or of a queued one; renew, ACK, progress, result and release
// under a wrong, an empty or no lease id, of the current generation and
// of an older one), and what it did with it. Under rules revision 5 it
// learns nothing: those verdicts withhold the lease id and the payload
// (PROTOCOL.md §4.1). The checks verify the verdicts themselves
// (Expect.Withheld), not these counts.
type LearnProbe struct {
	Verdicts int      `json:"verdicts"`            // verdicts addressed to it that it read
	LeaseIDs []string `json:"lease_ids,omitempty"` // lease ids of other holders they carried
	Payloads int      `json:"payloads"`            // queue jobs' payloads they carried
	Claims   int      `json:"claims"`              // renewals and results sent under a learned lease id
}

// QueueProbe is what a queue mode did: the capacity it announced on the
// queue, the offers (assigned decisions) it got and how it refused them,
// and the withdrawals of its announcement it read, with the most strikes
// of its standing they carried.
type QueueProbe struct {
	Queue      string `json:"queue"`
	Announced  int    `json:"announced"`             // pulls sent (256 slots)
	Offers     int    `json:"offers"`                // assigned decisions addressed to it
	Refusals   int    `json:"refusals"`              // declines, releases and ACKs sent (noack: offers left)
	Withdrawn  int    `json:"withdrawn"`             // withdrawn decisions it read
	MaxStrikes uint64 `json:"max_strikes,omitempty"` // the most strikes they carried
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
	// Withheld: its verdicts must not tell the hostile worker the lease id
	// of a lease it does not hold, nor a payload of a job it was not
	// offered (need to know, rules revision 5; the learned-lease attack),
	// whatever the log's rules revision.
	Withheld bool `json:"withheld,omitempty"`
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
	// what the board's open endpoints answered; a verdict of the
	// learned-lease attack that told the hostile worker another holder's
	// lease id or a payload, a job frozen in an ownership conflict by a
	// hostile claim and the conflict_pending verdicts of its holder; and
	// of the queues (checkQueues): a queue job ended DEAD or FAILED,
	// completed twice or by a hostile worker, or, once the workload has
	// drained (Clients.Drained), not completed; a hostile worker holding
	// more of a queue's live leases than a new worker's window; a queue
	// mode that refused offers without a withdrawal carrying a strike.
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
	// The learned-lease attack: its inputs whose verdicts must withhold
	// what a non-holder may not learn (Expect.Withheld), those whose
	// verdicts told it another holder's lease id or a payload (findings),
	// and what its records say it read, learned and claimed.
	LearnInputs, LearnLeaks, LearnVerdicts, LearnedIDs, LearnedPayloads, LearnClaims int
	// Jobs frozen in an ownership conflict by a hostile claim, and the
	// verdicts conflict_pending their holders got (findings).
	Frozen, FrozenVerdicts int
	// The queue jobs: submitted, completed with SUCCESS, ended DEAD, ended
	// FAILED; the offers (assigned) the hostile workers got, the
	// withdrawals of their announcements after a refusal, the most strikes
	// those carried, and the most of a queue's live leases one hostile
	// worker held at once (its window: at most events.InitialWindow, as it
	// never succeeds).
	QueueJobs, QueueCompleted, QueueDead, QueueFailed int
	HostileOffers, HostileWithdrawn, HostileMaxHeld   int
	HostileMaxStrikes                                 uint64
}

// AttackTotals sums the records of one attack type.
type AttackTotals struct {
	Attacks, Published, Stored, Refused, Quota, Unanswered, Consumers, Pulled int
	Errors                                                                    map[string]int
	Targets                                                                   map[string]int
	Queue                                                                     QueueProbe // the queue modes' probes, summed
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
		t.Quota += a.Quota
		t.Unanswered += a.Unanswered
		if a.Type == AttackFlood && a.Intake && a.Quota == 0 && a.Stored >= floodMax {
			// A flood that outran its backlog at once, all stored: the
			// quota did not hold (PROTOCOL.md §4.2).
			h.Findings.add("%s's flood (round %d): %d inputs stored through its intake stream, none refused over its quota", a.Hostile, a.Round, a.Stored)
		}
		t.Consumers += a.Consumers
		t.Pulled += a.Pulled
		for k, v := range a.Errors {
			t.Errors[k] += v
		}
		for _, s := range a.Targets {
			t.Targets[s]++
		}
		if q := a.Queue; q != nil {
			t.Queue.Queue = q.Queue
			t.Queue.Announced += q.Announced
			t.Queue.Offers += q.Offers
			t.Queue.Refusals += q.Refusals
			t.Queue.Withdrawn += q.Withdrawn
			t.Queue.MaxStrikes = max(t.Queue.MaxStrikes, q.MaxStrikes)
		}
	}
	checkQueues(ds, c, hostile, h)
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
	expired := make(map[string]int64)  // lease id -> stored time of its expiry
	leaks := make(map[uint64][]string) // hostile input -> what its decisions told it of others' leases
	frozen := make(map[string]string)  // job -> the hostile worker whose claim froze it
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
		leak := hos && hasJob && d.Addressee == hid && j.Exists() && j.Holder != hid && (j.LeaseID != "" || j.HasPayload)
		if leak {
			what := fmt.Sprintf("lease id %q", j.LeaseID)
			if j.LeaseID == "" {
				what = "payload"
			} else if j.HasPayload {
				what += " and payload"
			}
			whose := fmt.Sprintf("%q's lease", j.Holder)
			if j.Holder == "" {
				whose = "a job never offered to it"
			}
			leaks[d.Cause] = append(leaks[d.Cause], fmt.Sprintf("decision %d (%s/%s of job %s) told %s the %s of %s (rules revision %d)",
				s.m.Seq, d.Kind, d.Reason, j.ID, hid, what, whose, rev))
		}
		if rev >= events.Revision5 && leak {
			// Need to know (rules revision 5): a decision addressed to a
			// worker about a lease it does not hold withholds the lease
			// id, the capability to claim it, and the payload.
			h.Findings.add("decision %d (%s/%s of job %s) told %s the lease id or payload of %q's lease", s.m.Seq, d.Kind, d.Reason, j.ID, hid, j.Holder)
		}
		// A claim under another's lease id freezes its job in an
		// ownership conflict: its holder's next inputs are refused
		// conflict_pending until an operator resolves it.
		if hasJob && j.Conflict && hostile[j.ConflictWith] && !hostile[j.Holder] {
			if frozen[j.ID] == "" {
				frozen[j.ID] = j.ConflictWith
				h.Stats.Frozen++
				h.Findings.add("decision %d (%s/%s): job %s frozen in an ownership conflict with %s, %q's lease (generation %d) claimed by it",
					s.m.Seq, d.Kind, d.Reason, j.ID, j.ConflictWith, j.Holder, j.Generation)
			}
			if d.Reason == events.ReasonConflictPending && !hos && d.Role == events.RoleWorker && !d.Kind.Derived() {
				h.Stats.FrozenVerdicts++
				h.Findings.add("decision %d: %s's input %d on job %s refused conflict_pending: its lease frozen by %s", s.m.Seq, d.Actor, d.Cause, j.ID, j.ConflictWith)
			}
		}
		own := hos && prev.Holder == hid && prev.State.Live() // the hostile worker's own lease (a queue's offer)
		j.Reveal(&prev)                                       // withheld fields: the projection before's
		what := func() string {
			return fmt.Sprintf("decision %d (%s/%s of job %s) caused by %s's input %d on %s", s.m.Seq, d.Kind, d.Reason, j.ID, hid, d.Cause, m.Subject)
		}
		if hos && !d.Kind.Derived() {
			verdict := d.Kind.String() + "/" + string(d.Reason)
			h.Stats.Verdicts[verdict]++
			verdicts[d.Cause] = append(verdicts[d.Cause], verdict)
			if hasJob && others[j.ID] && !own {
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
			seq, ok := bySeq[e.MsgID]
			if e.Withheld { // the learned-lease attack's: not a case of the catalogue
				if ok && seq <= lastCause {
					h.Stats.LearnInputs++
					if len(leaks[seq]) > 0 {
						h.Stats.LearnLeaks++
					}
					for _, l := range leaks[seq] {
						h.Findings.add("%s's input %d (%s): %s: need to know", a.Hostile, seq, e.Case, l)
					}
				}
				continue
			}
			h.Stats.Cases++
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
		if p := a.Learned; p != nil {
			h.Stats.LearnVerdicts += p.Verdicts
			h.Stats.LearnedIDs += len(p.LeaseIDs)
			h.Stats.LearnedPayloads += p.Payloads
			h.Stats.LearnClaims += p.Claims
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

// isRefusal reports whether an attempt of a queue job that ended for
// reason ended by its worker's refusal (PROTOCOL.md §22.8), as a withdrawn
// decision's reason says.
func isRefusal(reason events.Reason) bool {
	switch reason {
	case events.ReasonOfferDeclined, events.ReasonReleased, events.ReasonAckDeadlinePassed, events.ReasonLeaseExpired:
		return true
	}
	return false
}

// checkQueues checks the queue jobs and what the hostile workers' queue
// modes got (rules revision 5, PROTOCOL.md §22.8): no queue job ends DEAD
// or FAILED (the honest workers succeed at every job; refusals cost the
// refusing worker its standing, never a job's attempts but an expiry's, and
// the budget outlasts those), none is completed twice or by a hostile
// worker, and once the workload has drained (c.Drained) every job
// submitted has completed. A hostile worker, which never succeeds, never
// holds more of a queue's live leases than a new worker's window; and a
// queue mode whose record says it refused offers was followed by a
// withdrawal of its announcement whose standing carries a strike.
func checkQueues(ds []stored, c *Clients, hostile map[string]bool, h *HostileResult) {
	type qjob struct {
		submitted   bool
		state       events.State
		completions []string // who completed it with SUCCESS
		last        string   // its last holder
		attempts    []string // how its attempts ended: "<holder> <reason>"
	}
	jobs := make(map[string]*qjob)
	var order []string
	live := make(map[string]string) // queue job -> holder of its live lease
	held := make(map[string]int)    // hostile worker -> live queue leases it holds
	type strike struct {
		at      int64
		strikes uint64
		reason  events.Reason
	}
	strikes := make(map[string][]strike) // hostile worker -> its withdrawals
	for _, s := range ds {
		d := &s.d
		j := &d.Job
		if d.Kind == events.KindWithdrawn && hostile[d.Addressee] {
			h.Stats.HostileWithdrawn++
			if st := d.Standing; st != nil {
				h.Stats.HostileMaxStrikes = max(h.Stats.HostileMaxStrikes, st.Strikes)
				strikes[d.Addressee] = append(strikes[d.Addressee], strike{s.m.Time, st.Strikes, d.Reason})
			}
		}
		if j.Queue == "" || j.ID == "" || j.ID == events.NoJob {
			continue
		}
		q := jobs[j.ID]
		if q == nil {
			q = &qjob{}
			jobs[j.ID] = q
			order = append(order, j.ID)
		}
		q.state = j.State
		if j.Holder != "" {
			q.last = j.Holder
		}
		switch d.Kind {
		case events.KindSubmitted:
			if !q.submitted {
				q.submitted = true
				h.Stats.QueueJobs++
			}
		case events.KindAssigned:
			if hostile[j.Holder] {
				h.Stats.HostileOffers++
			}
		case events.KindCompleted:
			if j.State == events.StateCompleted {
				q.completions = append(q.completions, d.Actor)
				h.Stats.QueueCompleted++
				if hostile[d.Actor] {
					h.Findings.add("decision %d: queue job %s completed by hostile worker %s", s.m.Seq, j.ID, d.Actor)
				}
				if len(q.completions) == 2 {
					h.Findings.add("decision %d: queue job %s completed a second time (by %s; %s before)", s.m.Seq, j.ID, d.Actor, q.completions[0])
				}
			}
		case events.KindRequeued:
			q.attempts = append(q.attempts, q.last+" "+string(d.Reason))
		case events.KindDead:
			q.attempts = append(q.attempts, q.last+" "+string(d.Reason))
			h.Stats.QueueDead++
			h.Findings.add("decision %d (dead/%s): queue job %s ended DEAD after attempt %d of %d, last holder %s (its attempts ended: %s)",
				s.m.Seq, d.Reason, j.ID, j.Attempt, j.MaxAttempts, q.last, strings.Join(q.attempts, ", "))
		}
		if w, ok := live[j.ID]; ok && (!j.State.Live() || w != j.Holder) {
			delete(live, j.ID)
			if hostile[w] {
				held[w]--
			}
		}
		if _, ok := live[j.ID]; !ok && j.State.Live() {
			live[j.ID] = j.Holder
			if hostile[j.Holder] {
				held[j.Holder]++
				if n := held[j.Holder]; n > h.Stats.HostileMaxHeld {
					h.Stats.HostileMaxHeld = n
					if n == events.InitialWindow+1 {
						h.Findings.add("decision %d: hostile worker %s holds %d live leases of queue %s at once, more than a new worker's window (%d)",
							s.m.Seq, j.Holder, n, j.Queue, events.InitialWindow)
					}
				}
			}
		}
	}
	for _, id := range order {
		q := jobs[id]
		switch {
		case q.state == events.StateFailed:
			h.Stats.QueueFailed++
			h.Findings.add("queue job %s ended FAILED (last holder %s)", id, q.last)
		case c.Drained && q.submitted && q.state != events.StateCompleted && q.state != events.StateDead:
			h.Findings.add("queue job %s was submitted and never completed: %s, last holder %q", id, q.state, q.last)
		}
	}
	for _, a := range c.Attacks {
		p := a.Queue
		if p == nil || p.Offers == 0 || p.Refusals == 0 || !hostile[a.Hostile] {
			continue
		}
		if !slices.ContainsFunc(strikes[a.Hostile], func(s strike) bool { return s.at >= a.At && s.strikes > 0 && isRefusal(s.reason) }) {
			h.Findings.add("%s's %s attack of round %d refused %d of its %d offers, and no withdrawal of its announcement with a strike followed",
				a.Hostile, a.Type, a.Round, p.Refusals, p.Offers)
		}
	}
}
