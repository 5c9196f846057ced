package events

// Version is the only envelope version this package reads and writes.
const Version = 1

// Role is the kind of actor that published an input, taken from the subject.
type Role uint8

// Roles. RoleNone marks an input whose subject could not be parsed.
const (
	RoleNone   Role = iota
	RoleWorker      // executes jobs: acquire, ack, renew, progress, cancel_ack, result, release
	RoleOps         // dispatchers and operators: offer, cancel, resolve, policy
	RoleCoord       // the coordinator itself: tick, policy
)

var roleNames = [...]string{"", "worker", "ops", "coord"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return "?"
}

// ParseRole returns the role named s.
func ParseRole(s string) (Role, bool) {
	for i := 1; i < len(roleNames); i++ {
		if roleNames[i] == s {
			return Role(i), true
		}
	}
	return RoleNone, false
}

// Verb is the operation an input names, taken from the last subject token.
type Verb uint8

// Verbs.
const (
	VerbNone Verb = iota
	VerbOffer
	VerbAcquire
	VerbAck
	VerbRenew
	VerbProgress
	VerbCancel
	VerbCancelAck
	VerbResult
	VerbRelease
	VerbResolve
	VerbPolicy
	VerbTick
	VerbRules      // the coordinator sets the rules revision and the lease key (revision 2 on)
	VerbCheckpoint // the coordinator anchors a snapshot's state hash (revision 2 on)
	VerbSubmit     // a dispatcher submits a job to a queue (revision 4 on)
	VerbPull       // a worker announces its capacity on a queue (revision 4 on)
	VerbLimit      // an operator sets a queue's flow limits (revision 9 on)
	VerbSchedule   // an operator sets, pauses, resumes or deletes a cron schedule (revision 10 on)
	verbCount
)

var verbNames = [...]string{"", "offer", "acquire", "ack", "renew", "progress", "cancel", "cancel_ack", "result", "release", "resolve", "policy", "tick", "rules", "checkpoint", "submit", "pull", "limit", "schedule"}

func (v Verb) String() string {
	if int(v) < len(verbNames) {
		return verbNames[v]
	}
	return "?"
}

// ParseVerb returns the verb named s.
func ParseVerb(s string) (Verb, bool) {
	for i := 1; i < len(verbNames); i++ {
		if verbNames[i] == s {
			return Verb(i), true
		}
	}
	return VerbNone, false
}

// Allowed reports whether role r may publish verb v.
func (v Verb) Allowed(r Role) bool {
	switch r {
	case RoleWorker:
		switch v {
		case VerbAcquire, VerbAck, VerbRenew, VerbProgress, VerbCancelAck, VerbResult, VerbRelease, VerbPull:
			return true
		}
	case RoleOps:
		switch v {
		case VerbOffer, VerbCancel, VerbResolve, VerbPolicy, VerbSubmit, VerbLimit, VerbSchedule:
			return true
		}
	case RoleCoord:
		return v == VerbTick || v == VerbPolicy || v == VerbRules || v == VerbCheckpoint
	}
	return false
}

// JobLess reports whether v concerns no single job; its subject carries NoJob.
// A batch (Batches) also uses NoJob and names its jobs in the body.
func (v Verb) JobLess() bool {
	return v == VerbTick || v == VerbPolicy || v == VerbRules || v == VerbCheckpoint || v == VerbPull || v == VerbLimit || v == VerbSchedule
}

// Batches reports whether, under rules revision rev, an input of verb v
// may carry many jobs under the job token NoJob: a batch renew (every
// revision), and from revision 7 on a batch submit, ack or result.
func (v Verb) Batches(rev uint32) bool {
	switch v {
	case VerbRenew:
		return true
	case VerbSubmit, VerbAck, VerbResult:
		return rev >= Revision7
	}
	return false
}

// Since is the first rules revision in which v is an input kind. Under an
// earlier revision an input of that verb is what it always was there: a
// subject with an unknown verb (rejected, bad_subject). VerbRules is known
// in every revision: it is how a log moves to a later one.
func (v Verb) Since() uint32 {
	switch v {
	case VerbCheckpoint:
		return Revision2
	case VerbSubmit, VerbPull:
		return Revision4
	case VerbLimit:
		return Revision9
	case VerbSchedule:
		return Revision10
	}
	return Revision1
}

// Outcome is a terminal result of a lease.
type Outcome uint8

// Outcomes.
const (
	OutcomeNone Outcome = iota
	OutcomeSuccess
	OutcomeFailed
	OutcomeCancelled
)

var outcomeNames = [...]string{"", "SUCCESS", "FAILED", "CANCELLED"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "?"
}

// ParseOutcome returns the outcome named s (upper case, as on the wire).
func ParseOutcome(s string) (Outcome, bool) {
	for i := 1; i < len(outcomeNames); i++ {
		if outcomeNames[i] == s {
			return Outcome(i), true
		}
	}
	return OutcomeNone, false
}

// Action is what a resolve input asks the coordinator to do.
type Action uint8

// Resolve actions.
const (
	ActionNone    Action = iota
	ActionAffirm         // the named holder/generation is authoritative; the conflict is cleared
	ActionRevoke         // end the current lease (if live) and clear the conflict
	ActionSettle         // give an unresolved job its terminal outcome (FAILED or CANCELLED)
	ActionRetry          // revision 4 on: a DEAD queue job goes back to its queue with a fresh attempt budget
	ActionDiscard        // revision 4 on: a DEAD queue job leaves the projection (its id is free again)
)

var actionNames = [...]string{"", "affirm", "revoke", "settle", "retry", "discard"}

// Since is the first rules revision in which a is a resolve action; under
// an earlier one its name is an unknown one (bad_enum).
func (a Action) Since() uint32 {
	if a == ActionRetry || a == ActionDiscard {
		return Revision4
	}
	return Revision1
}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "?"
}

// ParseAction returns the action named s.
func ParseAction(s string) (Action, bool) {
	for i := 1; i < len(actionNames); i++ {
		if actionNames[i] == s {
			return Action(i), true
		}
	}
	return ActionNone, false
}

// ScheduleOp is what a schedule input does (revision 10 on).
type ScheduleOp uint8

// Schedule operations. A schedule input without an op sets.
const (
	ScheduleSet    ScheduleOp = iota // define the schedule, or replace its definition
	SchedulePause                    // stop firing; due times pass unfired (recorded missed at the resume)
	ScheduleResume                   // fire again, from the resume's time on
	ScheduleDelete                   // forget the schedule (the jobs it fired stay)
)

var scheduleOpNames = [...]string{"set", "pause", "resume", "delete"}

func (o ScheduleOp) String() string {
	if int(o) < len(scheduleOpNames) {
		return scheduleOpNames[o]
	}
	return "?"
}

// ParseScheduleOp returns the op named s.
func ParseScheduleOp(s string) (ScheduleOp, bool) {
	for i, n := range scheduleOpNames {
		if n == s {
			return ScheduleOp(i), true
		}
	}
	return ScheduleSet, false
}

// Missed is what a schedule does with due times that passed unfired (the
// deployment was down or the schedule paused; revision 10 on).
type Missed uint8

// Missed-fire policies.
const (
	MissedSkip Missed = iota // record them, fire none (the next on-time due time fires)
	MissedOnce               // record them, and fire one job for the latest
)

var missedNames = [...]string{"skip", "once"}

func (m Missed) String() string {
	if int(m) < len(missedNames) {
		return missedNames[m]
	}
	return "?"
}

// ParseMissed returns the policy named s.
func ParseMissed(s string) (Missed, bool) {
	for i, n := range missedNames {
		if n == s {
			return Missed(i), true
		}
	}
	return MissedSkip, false
}

// Rules revisions. A log's inputs are folded by the rules of the revision in
// force when each is applied: revision 1 until the log holds a rules input,
// then the revision it sets (revisions only go up). Every revision folds the
// same log to the same decisions for ever; a change of the rules is a new
// revision, never an edit of an old one (PROTOCOL.md §1.1).
const (
	// Revision1 is the rules of a log without a rules input: lease ids
	// L<input sequence>, every due deadline fired before each input,
	// rejections of a subject with the wrong number of tokens addressed to
	// NoActor.
	Revision1 = 1
	// Revision2 adds the lease key: lease ids L<sequence>-<MAC> that only
	// readers of the input stream can compute; at most MaxFiredPerInput due
	// deadlines fired from the deadline queue per input, the rest by the
	// next inputs, a due deadline of a job an input touches fired before
	// that input's operation on it; rejections of a malformed subject
	// addressed to its actor token whenever it is valid; checkpoint inputs.
	Revision2 = 2
	// Revision3 adds retention: a policy's retain_ms, after which a job
	// whose last lease ended (and that awaits no operator) is retired from
	// the projection by a decision fired by time (KindRetired), its id free
	// again; the snapshot format 3 carries it. A rules input naming
	// revision 3 was rejected (bad_value) by the code of revision 2; only
	// the coordinator may publish one, and it published none.
	Revision3 = 3
	// Revision4 adds queues (PROTOCOL.md §22): submit and pull inputs, the
	// QUEUED and DEAD states, offers the fold makes itself to workers that
	// announced capacity, retries with backoff and a dead-letter end, the
	// resolve actions retry and discard, a result's permanent flag; and the
	// detail of a duration_out_of_policy rejection, which names the limits
	// in force. The snapshot format 4 carries queue jobs and capacities.
	Revision4 = 4
	// Revision5 adds need to know and fair queues (PROTOCOL.md §4.1,
	// §22.3): a decision addressed to a worker about a job whose current
	// lease that worker does not hold withholds the lease id and the
	// payload (Job.Withheld); a worker's standing on a queue (Standing:
	// its window of offers, its episodes of refusals and the hold they
	// put on it), lowered by its refusals (a declined offer, a release, a
	// missed ACK, an expiry) and raised by its successes; matching that
	// offers to the eligible worker holding the fewest of the queue's
	// leases and never hands a job straight back to the worker whose
	// refusal ended its last attempt while another announces; queue jobs
	// no longer bounded by the policy's max_generations (only by MaxSeq:
	// another worker's refusals never end a job); and a cancel of a queue
	// job that is never followed by another offer of it. The snapshot
	// format 5 carries the standings.
	Revision5 = 5
	// Revision6 adds fair firing (PROTOCOL.md §4.2, §9): only the
	// coordinator's tick inputs fire due deadlines from the deadline
	// queue (at most MaxFiredPerInput each); any other input fires only
	// the due deadlines of the jobs it touches (as from revision 2 on),
	// so that no worker's or operator's verdict waits for the expiries of
	// others' leases that happen to be due when it is stored (an expiry
	// storm). The coordinator appends ticks, one at a time, until none is
	// due. A decline after the worker's announcement expired returns
	// surplus (revision 5 read an announcement shortened by a second pull
	// after it expired, which a restored fold did not hold: TESTING.md,
	// finding 1). The snapshot format is still 5. A rules input naming revision
	// 6 was rejected (bad_value) by the code of revision 5; only the
	// coordinator may publish one, and it published none.
	Revision6 = 6
	// Revision7 adds batches of jobs (PROTOCOL.md §6.3, §6.10, §22.1):
	// a submit, an ack and a result may carry up to MaxBatch elements
	// under the job token NoJob (a batch submit's "jobs", a batch ack's
	// or result's "leases"), each element judged exactly as the single
	// input of its verb about its job, in array order, with its own
	// verdict, and the input's matching once after all of them; so a
	// dispatcher submits many jobs and a worker ACKs and completes many
	// leases with one durable write each. Jobs of one batch submit share
	// their submit_seq; among them the ready order is their turn (array
	// order within a queue). Nothing else changes: under revision 6 a
	// batch subject is rejected (bad_subject, "verb needs a job"), and
	// the snapshot format is still 5. A rules input naming revision 7
	// was rejected (bad_value) by the code of revision 6; only the
	// coordinator may publish one, and it published none.
	Revision7 = 7
	// Revision8 adds flow control (PROTOCOL.md §26), every piece of it a
	// decision of the fold on stored time: scheduled jobs (a submit's
	// run_at or delay_ms: queued, not offered before then); unique keys
	// (a submit naming a key another live job of its queue holds is a
	// duplicate naming that job; the key is held until the job ends, or
	// unique_for_ms after, and never past its retirement or discard). A job's turn
	// counts only its submitter's jobs ready at its submit (a job
	// scheduled for later, or backing off, is not ahead of it). The
	// snapshot format 6 carries the new fields. The elements of a batch
	// submit (revision 7) take none of them. A rules input naming
	// revision 8 was rejected (bad_value) by the code of revision 7; only
	// the coordinator may publish one, and it published none.
	Revision8 = 8
	// Revision9 adds concurrency keys (PROTOCOL.md §26.4): a submit's
	// concurrency_key, and the limit input by which an operator sets the
	// most live leases (OFFERED or ACTIVE) of a queue's jobs naming a key
	// (max_active); matching holds the others back, QUEUED, while the key
	// is at its limit. The snapshot format 7 carries the jobs' keys and
	// the limits. The elements of a batch submit take no
	// concurrency_key. A rules input naming revision 9 was rejected
	// (bad_value) by the code of revision 8; only the coordinator may
	// publish one, and it published none.
	Revision9 = 9
	// Revision10 adds cron schedules (docs/schedules-design.md): the
	// schedule input, by which an operator defines a schedule (a cron
	// expression, its zone as a POSIX TZ rule, a job template), pauses,
	// resumes or deletes it, and the fires the fold derives from it on
	// stored time. The snapshot format 8 carries the schedules. A rules
	// input naming revision 10 was rejected (bad_value) by the code of
	// revision 9; only the coordinator may publish one, and it published
	// none.
	Revision10 = 10
	// CurrentRevision is the revision a coordinator moves its log to.
	CurrentRevision = Revision10
)

// LeaseKeyLen is the length of the lease key of a rules input, in bytes
// (its wire form is the unpadded base64url encoding: 43 characters).
const LeaseKeyLen = 32

// StateHashLen is the length of a state hash (SHA-256), in bytes (its wire
// form is 64 lower-case hexadecimal digits).
const StateHashLen = 32

// Queue limits (revision 4 on). They are part of protocol version 1.
const (
	MaxPayloadBytes    = 4096     // a submitted job's payload, in bytes of UTF-8 (a reference for more)
	MaxPriority        = 9        // priorities are 0 (default) to 9; higher is offered first
	MaxAttempts        = 1000     // upper bound of a job's max_attempts
	DefaultMaxAttempts = 3        // a job's attempt budget when its submit names none
	DefaultBackoffMS   = 1000     // first retry's backoff when a submit names none
	DefaultBackoffMax  = 3600000  // backoff cap when a submit names none: one hour
	MaxSlots           = MaxBatch // a pull's slots: jobs of the queue held at once
	DefaultCapacityTTL = 30000    // a pull's ttl_ms when it names none
	MaxCapacityTTL     = 600000   // longest ttl_ms of a pull: ten minutes
	// MaxDelayMS is the longest delay_ms of a submit (revision 8): 366
	// days. A run_at may be any time the wire can carry.
	MaxDelayMS = 366 * 86400000
	// MaxActive is the largest max_active of a limit (revision 9): more
	// than any deployment runs at once (a key with no limit is not
	// limited at all). 0 holds every job of the key back.
	MaxActive = 1000000
	// MaxLimits is how many limits (queue and concurrency key) a fold
	// keeps in force at once (revision 9); a limit input that would add
	// one more is rejected (limits_full): lift one first.
	MaxLimits = 1024
	// MaxRate is the largest rate of a limit (revision 9): starts per
	// period_ms, a token bucket of that many tokens refilled over the
	// period (period_ms is a duration: 1 ms to 30 days).
	MaxRate = 1000000
	// MaxOffersPerInput bounds the offers (and the DEAD decisions of jobs
	// that reached max_generations when matched) one input's matching
	// makes; more matches wait for the next input (Due reports them, and
	// the coordinator appends a tick at once).
	MaxOffersPerInput = MaxBatch
)

// Standing limits (revision 5 on; PROTOCOL.md §22.3). They are part of
// protocol version 1.
const (
	// InitialWindow is the window of a worker the queue has no standing
	// of: at most this many of the queue's live leases are offered to it
	// at once, whatever slots it announces.
	InitialWindow = 8
	// MaxWindow is the largest window: a worker's window grows by one
	// with each of its successes, up to this.
	MaxWindow = MaxSlots
	// HoldBaseMS and HoldMaxMS bound the hold a refusal puts on a worker:
	// after its s-th consecutive refusal it is offered nothing of the
	// queue for min(HoldMaxMS, HoldBaseMS * 2^(s-1)) ms.
	HoldBaseMS = 1000
	HoldMaxMS  = 300000
	// StandingMemoryMS is how long a standing is remembered after the
	// last decision that carried it; then it is forgotten (the worker is
	// new to the queue again).
	StandingMemoryMS = 3600000
)

// MaxFiredPerInput bounds, from revision 2 on, the due deadlines an input
// fires from the deadline queue before its own operations (earliest first);
// more due deadlines fire with the next inputs (the coordinator appends
// ticks until none is due). MaxDecisionsPerInput is then the most decisions
// one input can cause: those, plus for each of its at most MaxBatch lease
// operations the due deadlines of the job it touches (its expiry and, from
// revision 3 on, the retirement that expiry makes due) and its verdict.
// Under revision 2 the most is MaxFiredPerInput + 2*MaxBatch.
//
// From revision 4 on, firing stops once the fired deadlines made
// MaxFiredPerInput decisions (one deadline makes at most three: an
// attempt's end, its requeue or DEAD end, and for a missed ACK the
// withdrawal of the worker's announcement), each lease operation causes
// at most four (its job's expiry, the requeue or DEAD end that follows,
// the withdrawal or the retirement that may then be due, its verdict), and
// the input's matching at most MaxOffersPerInput more.
//
// From revision 10 on a tick also fires at most 16 schedules, each
// making at most two decisions (a schedule_missed and a fired): 32 within
// the lease operations' share, which a tick (no lease operation) does not
// use.
const (
	MaxFiredPerInput     = 1024
	MaxDecisionsPerInput = MaxFiredPerInput + 2 + 4*MaxBatch + MaxOffersPerInput
)

// Limits of the wire format. They are part of protocol version 1.
const (
	MaxInputBytes   = 64 << 10        // whole input body
	MaxTokenLen     = 64              // actor, job, holder and lease ids
	MaxTextLen      = 256             // free text: note, detail, reason
	MaxBatch        = 256             // elements of one batch: leases of a batch renew, ack or result, jobs of a batch submit (revision 7)
	MaxSeq          = 1<<53 - 1       // sequences and generations (JSON-safe integers)
	MinDurationMS   = 1               // any duration field
	MaxDurationMS   = 30 * 86400000   // 30 days: anything longer is absurd for a lease
	MaxGenerations  = 1 << 20         // upper bound for policy max_generations
	MaxRetainMS     = 3660 * 86400000 // policy retain_ms (revision 3): ten years and a few days
	MaxProgress     = 100             // progress value is a percentage
	NoJob           = "_"             // job token of job-less inputs and decisions
	NoActor         = "_"             // addressee token of decisions that concern no actor
	InputPrefix     = "tenure.in"     // input subjects
	DecisionPrefix  = "tenure.out"    // decision subjects
	millisPerSecond = 1000
)

// Policy holds the limits the fold enforces. Every policy input carries all
// fields; durations are in milliseconds on the wire and nanoseconds here.
type Policy struct {
	MinLease       int64  // shortest lease duration an offer, acquire or renew may ask for
	MaxLease       int64  // longest
	DefaultLease   int64  // used when an offer or acquire names none
	AckTimeout     int64  // default time an offered holder has to ACK
	CancelTimeout  int64  // time from a cancel request to terminal reconciliation
	MaxLifetime    int64  // a lease never extends past issued_at + MaxLifetime
	MaxGenerations uint64 // leases a job may ever be given
	// Retain (revision 3 on) is how long a job is kept once its last lease
	// ended (ended_at), when it awaits nothing: not UNRESOLVED, no ownership
	// conflict pending. Then it is retired (KindRetired). 0 keeps every job
	// for ever, as revisions 1 and 2 do.
	Retain int64
}

// DefaultPolicy is the policy in force before the log holds any policy input.
// It is part of protocol version 1 and never changes within it; a coordinator
// also appends it explicitly when it starts on an empty log.
func DefaultPolicy() Policy {
	const ms = int64(1e6)
	return Policy{
		MinLease:       100 * ms,
		MaxLease:       3600 * 1000 * ms,
		DefaultLease:   30 * 1000 * ms,
		AckTimeout:     30 * 1000 * ms,
		CancelTimeout:  60 * 1000 * ms,
		MaxLifetime:    24 * 3600 * 1000 * ms,
		MaxGenerations: 1000,
	}
}

// LeaseRef names one lease in a batch renew.
type LeaseRef struct {
	Job        string
	LeaseID    string
	Generation uint64
	RenewSeq   uint64
	LeaseMS    int64 // 0: keep the lease's duration
}

// Input is a decoded input: identity from the subject, fields from the body.
// Fields a verb does not use are zero.
type Input struct {
	Role  Role
	Actor string
	Job   string
	Verb  Verb

	SentAt int64 // worker clock, evidence only (Unix ns, 0 when absent)

	Holder       string  // offer; resolve affirm
	LeaseID      string  // ack, renew, progress, cancel, cancel_ack, result, release, resolve
	Generation   uint64  // as LeaseID
	RenewSeq     uint64  // renew
	ProgressSeq  uint64  // progress
	Value        int64   // progress, 0..100
	LeaseMS      int64   // offer, acquire, renew (optional)
	AckTimeoutMS int64   // offer (optional)
	Outcome      Outcome // result; resolve settle
	Action       Action  // resolve
	Text         string  // note (progress), detail (result), reason (cancel, resolve)
	Policy       Policy  // policy
	Leases       []LeaseRef

	// Revision 4 on: submit (Queue, Priority, MaxAttempts, Backoff,
	// BackoffMax, LeaseMS, AckTimeoutMS, Payload); pull (Queue, Slots,
	// TTLMS); result (Permanent).
	Queue       string
	Priority    int64
	MaxAttempts uint64 // 0: DefaultMaxAttempts
	BackoffMS   int64  // 0: DefaultBackoffMS
	BackoffMax  int64  // backoff_max_ms; 0: DefaultBackoffMax
	Payload     string
	HasPayload  bool   // the payload field was present (an empty payload is a payload)
	Slots       uint64 // pull: 0 withdraws the worker's capacity on the queue
	TTLMS       int64  // pull; 0: DefaultCapacityTTL
	Permanent   bool   // result FAILED: do not retry

	// Batch (revision 7 on) holds the elements of a batch submit, ack or
	// result (Job NoJob): each one the single input of the batch's verb
	// about its own job, with the batch's Role, Actor, Verb and SentAt,
	// the element's Job and its fields (Leases stays empty; a batch
	// renew's elements are Leases, as in every revision).
	Batch []Input

	// Revision 8 on: submit (RunAt or DelayMS: not offered before then;
	// UniqueKey and UniqueForMS: no other live job of the queue with the
	// key).
	RunAt       int64 // Unix ns; 0: none
	DelayMS     int64 // 0: none
	UniqueKey   string
	UniqueForMS int64 // 0: the key is held while the job lives

	// Revision 9 on: submit (ConcurrencyKey: at most the key's max_active
	// live leases at once); limit (Queue, ConcurrencyKey: "" for the
	// queue's own limit; MaxActive, set when HasMaxActive; Rate starts
	// per PeriodMS, 0 when absent; what is absent is lifted).
	ConcurrencyKey string
	MaxActive      uint64
	HasMaxActive   bool
	Rate           uint64
	PeriodMS       int64

	// Revision 10 on: schedule (Schedule, its id; ScheduleOp; for a set,
	// Cron, TZ, Zone, Missed, and the job template in Queue, Priority,
	// MaxAttempts, BackoffMS, BackoffMax, LeaseMS, AckTimeoutMS, Payload,
	// ConcurrencyKey and UniqueKey).
	Schedule   string
	ScheduleOp ScheduleOp
	Cron       string // the expression (cron.Parse accepted it)
	TZ         string // the zone's POSIX TZ rule (cron.ParseZone accepted it); "" is UTC
	Zone       string // the IANA name the rule came from, shown only
	Missed     Missed

	Revision      uint32             // rules: the revision to move to
	LeaseKey      [LeaseKeyLen]byte  // rules: the key of lease ids
	CheckpointSeq uint64             // checkpoint: the input sequence the state hash is of
	StateHash     [StateHashLen]byte // checkpoint: the claimed state hash
}

// Kind is the closed set of decision kinds.
type Kind uint8

// Decision kinds. Verdicts answer one lease operation of an input; derived
// decisions (KindExpired, KindAckMissed, KindUnresolved, KindRetired) are
// fired by time.
const (
	KindNone Kind = iota
	// accepted verdicts
	KindOffered
	KindGranted
	KindAcked
	KindRenewed
	KindProgressed
	KindCancelRequested
	KindCancelAcked
	KindCompleted
	KindReleased
	KindResolved
	KindPolicySet
	KindTicked
	KindRulesSet
	KindCheckpointed
	// not accepted verdicts
	KindDuplicate
	KindStale
	KindLate
	KindConflict
	KindLostAuthority
	KindRejected
	// derived from time
	KindExpired
	KindAckMissed
	KindUnresolved
	KindRetired // revision 3 on: the job left the projection (Policy.Retain)
	// revision 4 on (appended: the order above is the one of revision 3)
	KindSubmitted   // accepted: a job entered its queue
	KindCapacitySet // accepted: a worker's capacity on a queue (job-less)
	KindRequeued    // derived: an attempt ended without success; the job waits in its queue again
	KindDead        // derived: an attempt ended and the job's attempt budget is spent
	KindAssigned    // derived: the queue offered a job to a worker with a free slot (state OFFERED, as an offer)
	KindWithdrawn   // derived: a worker's announcement withdrawn after a missed ACK (job-less)
	// revision 9 on
	KindLimitSet // accepted: an operator set (or lifted) a queue's limit of a concurrency key (job-less)
	// revision 10 on
	KindScheduleSet     // accepted: an operator set, paused or resumed a schedule (job-less)
	KindScheduleDeleted // accepted: an operator deleted a schedule (job-less)
	KindFired           // derived: a schedule's due time submitted a job to its queue
	KindScheduleMissed  // derived: due times of a schedule passed unfired (job-less)
	kindCount
)

var kindNames = [...]string{"", "offered", "granted", "acked", "renewed", "progressed", "cancel_requested",
	"cancel_acked", "completed", "released", "resolved", "policy_set", "ticked", "rules_set", "checkpointed",
	"duplicate", "stale", "late", "conflict", "lost_authority", "rejected",
	"expired", "ack_missed", "unresolved", "retired",
	"submitted", "capacity_set", "requeued", "dead", "assigned", "withdrawn", "limit_set",
	"schedule_set", "schedule_deleted", "fired", "schedule_missed"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "?"
}

// ParseKind returns the kind named s.
func ParseKind(s string) (Kind, bool) {
	for i := 1; i < len(kindNames); i++ {
		if kindNames[i] == s {
			return Kind(i), true
		}
	}
	return KindNone, false
}

// Kinds lists every decision kind in order.
func Kinds() []Kind {
	out := make([]Kind, 0, kindCount-1)
	for k := Kind(1); k < kindCount; k++ {
		out = append(out, k)
	}
	return out
}

// Accepted reports whether k is an accepted verdict.
func (k Kind) Accepted() bool {
	return k >= KindOffered && k <= KindCheckpointed || k == KindSubmitted || k == KindCapacitySet || k == KindLimitSet ||
		k == KindScheduleSet || k == KindScheduleDeleted
}

// Derived reports whether k is a consequence rather than the verdict of an
// operation: fired by time, or following from the queues' rules (a
// requeue, a DEAD end, an offer the queue makes, an announcement
// withdrawn). Every input has exactly one verdict (a batch renew one per
// lease); all its other decisions are derived.
func (k Kind) Derived() bool {
	return k >= KindExpired && k <= KindRetired || k >= KindRequeued && k <= KindWithdrawn || k == KindFired || k == KindScheduleMissed
}

// State is the state of a job's current (latest) lease.
type State uint8

// States. A job with no lease yet is StateNone.
const (
	StateNone       State = iota
	StateOffered          // delivered, waiting for ACK before ack_deadline
	StateActive           // ACKed (or acquired): the holder has authority until expires_at
	StateExpired          // authority ended at expires_at without a terminal result
	StateAckMissed        // no ACK before ack_deadline
	StateCompleted        // terminal result SUCCESS
	StateFailed           // terminal result FAILED
	StateCancelled        // terminal result CANCELLED (or an offer withdrawn)
	StateReleased         // the holder gave the lease back without a result
	StateUnresolved       // cancellation was not reconciled in time: blocked until resolve
	StateRevoked          // an operator ended the lease through resolve
	StateQueued           // revision 4 on: a queue job waiting for an offer (from ready_at on)
	StateDead             // revision 4 on: a queue job whose attempt budget is spent
	stateCount
)

var stateNames = [...]string{"NONE", "OFFERED", "ACTIVE", "EXPIRED", "ACK_MISSED", "COMPLETED", "FAILED", "CANCELLED", "RELEASED", "UNRESOLVED", "REVOKED", "QUEUED", "DEAD"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "?"
}

// ParseState returns the state named s.
func ParseState(s string) (State, bool) {
	for i := 0; i < len(stateNames); i++ {
		if stateNames[i] == s {
			return State(i), true
		}
	}
	return StateNone, false
}

// Live reports whether a lease in state s still binds its holder.
func (s State) Live() bool { return s == StateOffered || s == StateActive }

// AckState records what happened to the ACK of the current lease.
type AckState uint8

// ACK states.
const (
	AckNone      AckState = iota // no lease
	AckPending                   // offered, not yet ACKed
	AckAcked                     // ACKed before the deadline
	AckMissed                    // the deadline passed first
	AckAcquired                  // the holder acquired the lease itself; no offer to ACK
	AckWithdrawn                 // the offer was cancelled before any ACK
	AckDeclined                  // the offered holder released the offer instead of ACKing it
)

var ackNames = [...]string{"NONE", "PENDING", "ACKED", "MISSED", "ACQUIRED", "WITHDRAWN", "DECLINED"}

func (a AckState) String() string {
	if int(a) < len(ackNames) {
		return ackNames[a]
	}
	return "?"
}

// ParseAckState returns the ACK state named s.
func ParseAckState(s string) (AckState, bool) {
	for i := 0; i < len(ackNames); i++ {
		if ackNames[i] == s {
			return AckState(i), true
		}
	}
	return AckNone, false
}

// Job is the projection of one job after a decision: everything seed 000 §13
// asks to record, so that a consumer of decisions needs nothing else.
// Times are Unix nanoseconds (0: not set); durations nanoseconds.
type Job struct {
	ID            string
	LeaseID       string
	Generation    uint64
	Holder        string
	State         State
	AckState      AckState
	Result        Outcome
	Conflict      bool   // ownership conflict pending: blocks promotion until resolve
	ConflictWith  string // the contradicting holder
	CancelReq     bool
	CancelAck     bool
	LeaseExpired  bool // the lease's authority ended at expires_at
	IssuedAt      int64
	Duration      int64
	ExpiresAt     int64
	AckDeadline   int64
	AckedAt       int64
	RenewSeq      uint64
	RenewAt       int64
	ProgressSeq   uint64
	ProgressValue int64
	ProgressAt    int64
	CancelAt      int64 // when cancellation was requested
	CancelBy      int64 // reconciliation deadline
	EndedAt       int64 // when the lease stopped being live
	// Evidence counters of the current lease: messages judged while it was
	// the job's latest lease. They restart at 0 with every new generation.
	// Each counts stored inputs, so none can reach 2^64.
	Stale        uint64 // messages rejected for a stale generation
	Late         uint64 // late messages of any verb: after expiry, after cancel, or out of sequence
	LateProgress uint64 // the late messages that were progress reports
	Duplicates   uint64 // duplicate messages
	Conflicts    uint64 // claims of this lease by another holder (ownership conflicts)

	// Queue jobs (revision 4 on; Queue is "" for every other job). What the
	// submit set stays for the job's life; Attempt, ReadyAt and LastReason
	// change with its attempts. A queue job exists from its submit on, with
	// generation 0 until its first offer.
	Queue        string
	Submitter    string // the ops actor that submitted it
	Priority     int64  // 0..MaxPriority, higher first
	Turn         uint64 // its submitter's jobs QUEUED in the queue when it was submitted: fairness across submitters
	MaxAttempts  uint64 // attempt budget
	Backoff      int64  // first retry's backoff (ns)
	BackoffMax   int64  // backoff cap (ns)
	AttemptLease int64  // lease duration of each attempt (ns); 0: the policy's default_lease at the offer
	AttemptAck   int64  // ACK timeout of each attempt (ns); 0: the policy's ack_timeout at the offer
	Payload      string // opaque, at most MaxPayloadBytes
	HasPayload   bool   // the submit carried a payload (possibly empty)
	SubmittedAt  int64
	SubmitSeq    uint64 // the submit's input sequence: the job's place in submission order
	Attempt      uint64 // attempts counted so far (a declined offer or a release does not count)
	ReadyAt      int64  // QUEUED: when it may be offered
	LastReason   Reason // why its last attempt ended ("" before any)

	// Revision 8 on: what the submit asked for, as it asked (a resend is
	// compared with it): RunAt, the time it may run from (0: none), or
	// Delay, its wait from the submit (ns; 0: none). ReadyAt holds the
	// time either gave.
	RunAt int64
	Delay int64
	// UniqueKey (revision 8) is the submit's unique key: no other job of
	// the queue that holds it may be submitted while this one holds it,
	// that is while it is QUEUED, OFFERED, ACTIVE or UNRESOLVED (or an
	// ownership conflict of it is pending), and UniqueFor (ns) after it
	// ended (ended_at); never past its retirement or discard.
	UniqueKey string
	UniqueFor int64
	// ConcurrencyKey (revision 9) is the submit's concurrency key: while
	// the queue's limit of the key is in force, the queue offers the job
	// only while fewer than its max_active jobs naming the key hold live
	// leases (OFFERED or ACTIVE).
	ConcurrencyKey string

	// Withheld (revision 5 on) is set on the projection a decision carries
	// to a worker that does not hold the job's current lease: its LeaseID
	// is "" and its payload absent (need to know, PROTOCOL.md §4.1). The
	// fold's own state never has it; Reveal restores the two from the
	// job's previous projection.
	Withheld bool
}

// Reveal gives j, a projection with fields withheld, the lease id and the
// payload of prev, the job's projection before it (as a reader of every
// decision of the job has it): the withheld fields are the same as
// there, since a decision that creates a lease or a payload is never
// withheld. It reports false, leaving j as it is, when prev is not of the
// same job and generation (a reader that missed decisions).
func (j *Job) Reveal(prev *Job) bool {
	if !j.Withheld {
		return true
	}
	if prev.ID != j.ID || prev.Generation != j.Generation || prev.Withheld {
		return false
	}
	j.LeaseID = prev.LeaseID
	j.Payload, j.HasPayload = prev.Payload, prev.HasPayload
	j.Withheld = false
	return true
}

// Exists reports whether j is a job of the projection: it had a lease, or
// it is a queue job (which exists from its submit on).
func (j Job) Exists() bool { return j.Generation != 0 || j.Queue != "" }

// Decision is one entry of the decision stream.
type Decision struct {
	Cause  uint64 // input stream sequence that caused it
	N      uint32 // index among the decisions of that input (below MaxDecisionsPerInput from revision 2 on)
	Of     uint32 // how many decisions that input caused
	At     int64  // authoritative time (Unix ns) of the causing input
	Kind   Kind
	Reason Reason
	Detail string // deterministic human detail; may be empty

	// The causing input's identity (from its subject).
	Role  Role
	Actor string
	Verb  Verb

	// Addressee is the actor the decision concerns (NoActor if none).
	Addressee  string
	Job        Job         // projection after the decision (ID NoJob for job-less ones)
	Policy     *Policy     // the policy in force, on policy_set decisions only
	Revision   uint32      // the rules revision in force, on rules_set decisions only
	Checkpoint *Checkpoint // the anchored state hash, on checkpointed decisions only
	Capacity   *Capacity   // the worker's capacity, on capacity_set decisions only (revision 4 on)
	// Standing is the addressee's standing on a queue after the decision
	// (revision 5 on): on capacity_set, on withdrawn, and on the completed
	// decision of a queue job's SUCCESS.
	Standing *Standing
	// DuplicateOf (revision 8) names the job that holds the unique key a
	// submit named: on its duplicate/duplicate_unique_key verdict, and on
	// the rejected/unique_key_held of a retry.
	DuplicateOf string
	// Limit (revision 9) is the limit in force after a limit_set decision.
	Limit *Limit
	// Schedule (revision 10) is the schedule a schedule_set,
	// schedule_deleted, fired or schedule_missed decision is about.
	Schedule *Schedule
}

// Schedule is a decision's schedule (revision 10,
// docs/schedules-design.md). On schedule_set it is the definition in
// force after it (ID, Cron, TZ, Zone, Queue, Missed, Paused) and Next,
// its next due time (0: none before the end of 2261, or paused); on
// schedule_deleted the ID; on fired the ID and Due, the due time the job
// (the decision's Job) was fired for; on schedule_missed the ID and the
// due times that passed unfired: MissedCount of them, from MissedFrom to
// MissedTo (a count capped at MaxMissedCount).
type Schedule struct {
	ID          string
	Cron        string
	TZ          string
	Zone        string
	Queue       string
	Actor       string // a definition's: the operator that set it, the submitter of the jobs it fires
	Missed      Missed
	Paused      bool
	Next        int64
	Due         int64
	MissedFrom  int64
	MissedTo    int64
	MissedCount uint64
	// A definition's (a schedule_set's) too: an @every schedule's anchor
	// (its due times are Anchor + k*period; 0 for five fields), and the
	// template of the jobs it fires (never nil on a definition).
	Anchor   int64
	Template *ScheduleTemplate
}

// ScheduleTemplate is the job a schedule fires: a submit's fields
// (PROTOCOL.md §26.6), each zero when not given.
type ScheduleTemplate struct {
	Priority       int64
	MaxAttempts    uint64
	BackoffMS      int64
	BackoffMax     int64
	LeaseMS        int64
	AckTimeoutMS   int64
	Payload        string
	HasPayload     bool
	ConcurrencyKey string
	UniqueKey      string
}

// MaxSchedules bounds the schedules defined at once (revision 10).
const MaxSchedules = 1024

// MaxScheduleIDLen bounds a schedule's id (revision 10): a fired job's id
// is the schedule's, a dash and its due time (at most 21 more bytes).
const MaxScheduleIDLen = 40

// MaxMissedCount caps a schedule_missed decision's count: the fold stops
// counting there ("that many or more").
const MaxMissedCount = 10000

// Limit is a queue's limit (revision 9, PROTOCOL.md §26.4, §26.5): of
// one concurrency key, or of the queue as a whole when ConcurrencyKey is
// "". At most MaxActive of the queue's jobs naming the key hold live
// leases at once, when HasMaxActive (a key's only); at most Rate of its
// jobs (of the key, or of the queue) are offered per PeriodMS, a token
// bucket, when Rate is not 0. With neither nothing is limited (a
// limit_set that lifted the limit).
type Limit struct {
	Queue          string
	ConcurrencyKey string
	MaxActive      uint64
	HasMaxActive   bool
	Rate           uint64
	PeriodMS       int64
}

// Standing is a worker's standing on a queue (revision 5 on, PROTOCOL.md
// §22.3): the queue offers it at most Window of its live leases at once,
// and nothing before HeldUntil (0: not held); Strikes counts its
// episodes of refusals since its last success (one refusal, or several
// while it was held). A standing of InitialWindow, no strikes and no hold
// is the standing of a worker new to the queue.
type Standing struct {
	Queue     string
	Window    uint64
	Strikes   uint64
	HeldUntil int64
}

// Capacity is a worker's announced capacity on a queue (revision 4 on):
// the queue offers it jobs while it holds fewer than Slots of that queue's
// live leases, until Until. Slots 0 withdraws it.
type Capacity struct {
	Queue string
	Slots uint64
	Until int64
}

// Checkpoint is what a checkpointed decision anchors in the decision stream:
// the state hash (projector.StateHash) the coordinator claims for the state
// after input InputSeq. The fold records the claim; an auditor replaying the
// log checks it, and a coordinator trusts a snapshot only if its hash is
// anchored so.
type Checkpoint struct {
	InputSeq  uint64
	StateHash [StateHashLen]byte
}

// Raw is an input as stored in the input stream: its stream sequence, the
// timestamp the stream stored with it (Unix ns), its subject and body.
type Raw struct {
	Seq     uint64
	Time    int64
	Subject string
	Body    []byte
	// Source is the Nats-Stream-Source header the server stored with a
	// sourced input (from a worker's intake stream, PROTOCOL.md §4.2), ""
	// for others. The fold ignores it; the audit matches the receipts of
	// intake inputs by it.
	Source string
}
