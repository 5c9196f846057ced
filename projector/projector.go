// Package projector is Tenure's pure lease fold: one stored input in, its
// decisions out. It is the only place where lease rules live.
//
// The projector is synchronous and single-threaded, like etcd raft's RawNode:
// it does no I/O, reads no clock, uses no randomness, and never lets map
// iteration order reach its output. Time comes from the inputs: before an
// input is applied, the projector advances its clock to
// max(previous time, the input's stored timestamp) and fires, in (deadline,
// job id) order, every ack deadline, lease expiry and cancel-reconciliation
// deadline at or before it. Given the same inputs it returns the same
// decisions and the same StateHash on any machine, cold or restored from any
// Snapshot.
//
// Business outcomes (stale, late, duplicate, conflict, lost authority,
// malformed input) are decisions, never Go errors. Step returns an error only
// when the caller breaks the contract (an input sequence that does not
// increase).
package projector

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strconv"
	"strings"

	"github.com/maknow/tenure/events"
)

// ErrOutOfOrder is returned by Step when an input's sequence does not
// increase: the caller broke the in-order contract, and nothing was applied.
var ErrOutOfOrder = errors.New("projector: input sequence does not increase")

// Projector folds inputs into per-job lease projections. The zero value is
// not usable; call New. It is not safe for concurrent use: one goroutine owns it.
type Projector struct {
	now     int64  // authoritative time, Unix ns
	lastSeq uint64 // last input applied
	policy  events.Policy
	jobs    map[string]*job
	heap    deadlines        // live leases by next deadline
	part    events.Partition // the partition folded; zero when unpartitioned

	rev      uint32                   // rules revision in force (events.Revision1 until a rules input)
	leaseKey [events.LeaseKeyLen]byte // revision 2 on: the key of lease ids
	leaseMAC hash.Hash                // HMAC-SHA-256 keyed with leaseKey (nil before revision 2)

	in      events.Input      // decode buffer, reused
	cause   uint64            // sequence of the input being applied
	subject string            // subject of the input being applied
	out     []events.Decision // decisions of the input being applied, reused
	macBuf  []byte            // scratch for lease id MACs

	fireLimit  int // tests only (export_test.go): a lower bound than events.MaxFiredPerInput
	offerLimit int // tests only: a lower bound than events.MaxOffersPerInput

	// Queues (revision 4 on, queue.go): derived from the jobs, but for the
	// standing announcements (caps), which snapshots hold.
	queues   map[string]*queue
	active   []string    // names of queues with queued jobs and announcements, sorted
	expiries capExpiries // announcements by expiry, for sweep
	pending  bool        // matching stopped at its limit with matches left

	// Unique keys (revision 8 on, flow.go): derived from the jobs. Each
	// entry is the job that last took the key, which holds it while
	// holdsKey says so.
	unique map[uniqueKey]*job
	// Limits (revision 9 on, concurrency.go, rate.go): the limits are in
	// each queue (snapshots hold them); nLimits counts them, nRates those
	// with a rate.
	nLimits, nRates int

	// Schedules (revision 10 on, schedules.go): by id, and the active
	// ones in the order they fall due (next, then id).
	scheds   map[string]*sched
	schedDue []*sched

	// Standings (revision 5 on, standing.go): snapshots hold them; the
	// timer heaps are derived.
	standings map[standingKey]*standing
	holds     standingTimers // hold ends: wake-ups for matching
	forgets   standingTimers // when standings are forgotten

	// Change tracking for Freeze (freeze.go): nil until Track.
	changed  map[string]events.Job // latest projection of each job changed since frozen (Generation 0: gone)
	frozen   *Frozen               // the state changed tracks changes from
	restored []byte                // the snapshot restored, until the next Step
}

type job struct {
	events.Job
	heapIdx  int   // index in the deadline heap, -1 when absent
	deadline int64 // the heap key while present
	qPos     int   // queue jobs: 1 + index in its submitter's ready heap, 0 when absent
	later    bool  // revision 8: qPos indexes its submitter's later heap (ready_at after the fold's time then)
	inKey    bool  // revision 9: qPos indexes its key's ready heap of its submitter and priority (its key is limited)
}

// New returns a projector with no jobs and the protocol's default policy,
// for an unpartitioned deployment.
func New() *Projector {
	return &Projector{policy: events.DefaultPolicy(), jobs: make(map[string]*job), rev: events.Revision1}
}

// NewPartition returns a projector for one partition of a partitioned
// deployment (New when part is the zero value). It folds the inputs of that
// partition's stream: their subjects end in the partition token, which it
// strips before the rules of PROTOCOL.md apply, and an input about a job of
// another partition is rejected with reason wrong_partition. It panics if
// part is not Valid: the partition is configuration, not input.
func NewPartition(part events.Partition) *Projector {
	if !part.Valid() {
		panic("projector: invalid partition " + part.String())
	}
	p := New()
	p.part = part
	return p
}

// Partition is the partition the projector folds (zero when unpartitioned).
func (p *Projector) Partition() events.Partition { return p.part }

// Now is the projector's authoritative time (Unix ns).
func (p *Projector) Now() int64 { return p.now }

// LastSeq is the sequence of the last input applied (0 if none).
func (p *Projector) LastSeq() uint64 { return p.lastSeq }

// Policy is the policy in force.
func (p *Projector) Policy() events.Policy { return p.policy }

// Revision is the rules revision in force (events.Revision1 until the log
// holds a rules input).
func (p *Projector) Revision() uint32 { return p.rev }

// Due reports whether a deadline is due that the last input did not fire
// (from revision 2 on an input fires at most events.MaxFiredPerInput of
// them; from revision 6 on only a tick fires any but those of the jobs it
// touches): the coordinator then appends a tick at once.
//
// From revision 4 on it also reports matches an input's matching left for
// later (events.MaxOffersPerInput).
func (p *Projector) Due() bool { return len(p.heap) > 0 && p.heap[0].deadline <= p.now || p.pending }

// Len is the number of jobs tracked.
func (p *Projector) Len() int { return len(p.jobs) }

// Job returns the projection of job id.
func (p *Projector) Job(id string) (events.Job, bool) {
	j, ok := p.jobs[id]
	if !ok {
		return events.Job{}, false
	}
	return j.Job, true
}

// Jobs returns the projection of every job tracked, in byte order of
// their ids (the order of a snapshot): what a read model of the decision
// streams starts from when it starts from a snapshot (package api). It
// changes nothing.
func (p *Projector) Jobs() []events.Job {
	ids := make([]string, 0, len(p.jobs))
	for id := range p.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]events.Job, len(ids))
	for i, id := range ids {
		out[i] = p.jobs[id].Job
	}
	return out
}

// NextDeadline returns the earliest pending deadline (ack deadline, lease
// expiry or cancel deadline), if any. The coordinator appends a tick input
// when it is due and no input has arrived.
//
// From revision 5 on the end of a hold on a worker (standing.go) is one
// too: matching may then offer to it; from revision 9 on, the time a
// rate limit without a token whose jobs wait has one again (rate.go).
func (p *Projector) NextDeadline() (int64, bool) {
	d, ok := int64(0), false
	if len(p.heap) > 0 {
		d, ok = p.heap[0].deadline, true
	}
	if len(p.holds) > 0 && (!ok || p.holds[0].at < d) {
		d, ok = p.holds[0].at, true
	}
	if t, due := p.nextToken(); due && (!ok || t < d) {
		d, ok = t, true
	}
	if t, due := p.nextFire(); due && (!ok || t < d) { // revision 10
		d, ok = t, true
	}
	return d, ok
}

// Step applies one stored input and returns its decisions: first those fired
// by time (in deadline, job order), then the input's verdicts (one per lease
// operation). The returned slice is reused by the next call to Step.
func (p *Projector) Step(raw events.Raw) ([]events.Decision, error) {
	if raw.Seq <= p.lastSeq {
		return nil, fmt.Errorf("%w: %d after %d", ErrOutOfOrder, raw.Seq, p.lastSeq)
	}
	p.out = p.out[:0]
	p.restored = nil
	p.cause = raw.Seq
	p.subject = raw.Subject
	derr := p.decode(raw)
	if raw.Time > p.now {
		p.now = raw.Time
	}
	limit := -1 // revision 1: every due deadline
	if p.rev >= events.Revision2 {
		limit = events.MaxFiredPerInput
		if p.fireLimit > 0 {
			limit = p.fireLimit
		}
		if p.rev >= events.Revision6 && (derr != nil || p.in.Verb != events.VerbTick) {
			limit = 0 // fair firing: the deadline queue is the ticks' work
		}
	}
	if p.rev >= events.Revision4 {
		p.sweep()
	}
	if p.rev >= events.Revision5 {
		p.sweepStandings()
	}
	p.fire(limit)
	if p.rev >= events.Revision10 && derr == nil && p.in.Verb == events.VerbTick {
		p.fireSchedules()
	}
	if derr != nil {
		p.rejectInput(derr)
	} else {
		p.apply()
	}
	if p.rev >= events.Revision4 { // (a rules input may have just moved the log to it)
		p.match()
	}
	p.lastSeq = raw.Seq
	// From revision 2 on, len(p.out) <= events.MaxDecisionsPerInput by
	// construction (TestDecisionsPerInputBound); under revision 1 it is
	// bounded by the number of jobs, far below 2^32.
	n := uint32(len(p.out))
	for i := range p.out {
		p.out[i].N = uint32(i)
		p.out[i].Of = n
	}
	return p.out, nil
}

// decode decodes raw into p.in: the partition token first (partitioned
// deployments), then subject and body, then the job's partition.
func (p *Projector) decode(raw events.Raw) error {
	if !p.part.Partitioned() {
		return events.DecodeInputAt(raw.Subject, raw.Body, p.rev, &p.in)
	}
	subject, ok := p.part.StripInput(raw.Subject)
	if i := strings.LastIndexByte(subject, '.'); !ok && i >= 0 {
		subject = subject[:i] // for the identity the rejection is addressed with
	}
	derr := events.DecodeInputAt(subject, raw.Body, p.rev, &p.in)
	switch {
	case !ok:
		// Only a stream whose subjects are not this partition's stores
		// such an input; reject it with what identity can be read.
		return &events.DecodeError{Code: events.ReasonBadSubject, Detail: "not an input subject of " + p.part.String()}
	case derr != nil:
		return derr
	case !p.part.Owns(p.in.Job):
		return p.wrongPartition(p.in.Job)
	}
	return nil
}

func (p *Projector) wrongPartition(job string) *events.DecodeError {
	return &events.DecodeError{Code: events.ReasonWrongPartition, Field: "job",
		Detail: job + " belongs to " + p.part.Of(job).String() + ", not " + strconv.FormatUint(uint64(p.part.Index), 10)}
}

// emit appends a decision about j (nil for job-less ones).
func (p *Projector) emit(j *job, kind events.Kind, reason events.Reason, addressee string) *events.Decision {
	d := events.Decision{
		Cause:     p.cause,
		At:        p.now,
		Kind:      kind,
		Reason:    reason,
		Role:      p.in.Role,
		Actor:     p.in.Actor,
		Verb:      p.in.Verb,
		Addressee: addressee,
	}
	if d.Actor == "" {
		d.Actor = events.NoActor
	}
	if d.Addressee == "" {
		d.Addressee = events.NoActor
	}
	if j != nil {
		d.Job = j.Job
		if p.changed != nil {
			p.changed[j.ID] = j.Job
		}
		if p.rev >= events.Revision5 && p.withholds(j, d.Addressee) {
			d.Job.LeaseID, d.Job.Payload, d.Job.HasPayload, d.Job.Withheld = "", "", false, true
		}
	} else {
		d.Job.ID = events.NoJob
	}
	p.out = append(p.out, d)
	return &p.out[len(p.out)-1]
}

// withholds reports whether a decision about j addressed to addressee
// withholds j's lease id and payload (revision 5 on, need to know,
// PROTOCOL.md §4.1): a live lease id is a capability, and a payload may
// hold its submitter's secrets. Both go to the job's current holder (who
// was offered it, or acquired it), to its submitter, and to every
// decision of an input of the roles trusted with the deployment
// (dispatchers, operators, coordinators), which read every decision
// anyway; a decision of any other input addressed to anyone else (a
// worker naming a job it does not hold: acquire of a held or queued job,
// a claim of a lease it was not told, a stale generation, a malformed
// body about the job) withholds them.
func (p *Projector) withholds(j *job, addressee string) bool {
	switch {
	case p.in.Role == events.RoleOps || p.in.Role == events.RoleCoord:
		return false
	case addressee == j.Holder && j.Generation != 0:
		return false
	case j.Queue != "" && addressee == j.Submitter:
		return false
	}
	return j.Exists()
}

// rejectInput records an input that could not be decoded.
func (p *Projector) rejectInput(err error) {
	var de *events.DecodeError
	if !errors.As(err, &de) {
		de = &events.DecodeError{Code: events.ReasonSyntaxError, Detail: err.Error()}
	}
	// The subject parse may have stopped half way: keep only valid tokens.
	if !events.ValidToken(p.in.Actor) {
		p.in.Actor = ""
	}
	if p.in.Actor == "" && p.rev >= events.Revision2 {
		// Too many or too few tokens: the actor token, if valid, still
		// names the sender (whose permissions bind it to that token).
		p.in.Actor = events.SubjectActor(p.subject)
	}
	jobID := p.in.Job
	if !events.ValidToken(jobID) {
		jobID = ""
	}
	var j *job
	if jobID != "" {
		j = p.lookup(jobID)
	}
	d := p.emit(j, events.KindRejected, de.Code, p.in.Actor)
	if j == nil && jobID != "" {
		d.Job.ID = jobID
	}
	d.Detail = de.Field
	if de.Detail != "" {
		if d.Detail != "" {
			d.Detail += ": "
		}
		d.Detail += de.Detail
	}
}

func (p *Projector) apply() {
	in := &p.in
	switch in.Verb {
	case events.VerbOffer:
		p.offer()
	case events.VerbAcquire:
		p.acquire()
	case events.VerbAck:
		if in.Job == events.NoJob { // revision 7 on: a batch ack
			p.batch(p.ack)
			return
		}
		p.ack()
	case events.VerbRenew:
		for i := range in.Leases {
			if r := &in.Leases[i]; p.part.Owns(r.Job) {
				p.renew(r)
			} else {
				// One element of a batch about another partition's job:
				// that element alone is rejected.
				d := p.emit(nil, events.KindRejected, events.ReasonWrongPartition, in.Actor)
				d.Job.ID = r.Job
				d.Detail = "leases[" + strconv.Itoa(i) + "].job: " + p.wrongPartition(r.Job).Detail
			}
		}
	case events.VerbProgress:
		p.progress()
	case events.VerbCancel:
		p.cancel()
	case events.VerbCancelAck:
		p.cancelAck()
	case events.VerbResult:
		if in.Job == events.NoJob { // revision 7 on: a batch result
			p.batch(p.result)
			return
		}
		p.result()
	case events.VerbRelease:
		p.release()
	case events.VerbResolve:
		p.resolve()
	case events.VerbPolicy:
		retain := p.policy.Retain
		p.policy = in.Policy
		if p.policy.Retain != retain {
			p.retainAll()
		}
		pol := p.policy
		d := p.emit(nil, events.KindPolicySet, events.ReasonOk, in.Actor)
		d.Policy = &pol
	case events.VerbTick:
		p.emit(nil, events.KindTicked, events.ReasonOk, in.Actor)
	case events.VerbRules:
		p.rules()
	case events.VerbSubmit:
		if in.Job == events.NoJob { // revision 7 on: a batch submit
			p.batch(p.submit)
			return
		}
		p.submit()
	case events.VerbPull:
		p.pull()
	case events.VerbLimit:
		p.setLimit()
	case events.VerbSchedule: // revision 10 on
		p.setSchedule()
	case events.VerbCheckpoint:
		if in.CheckpointSeq >= p.cause {
			p.emit(nil, events.KindRejected, events.ReasonBadCheckpoint, in.Actor).Detail =
				"input_seq: " + u64(in.CheckpointSeq) + " is not before the checkpoint (input " + u64(p.cause) + ")"
			return
		}
		p.emit(nil, events.KindCheckpointed, events.ReasonOk, in.Actor).Checkpoint =
			&events.Checkpoint{InputSeq: in.CheckpointSeq, StateHash: in.StateHash}
	default:
		// DecodeInput only returns known verbs; reaching here is a bug in
		// events, recorded rather than dropped.
		p.emit(nil, events.KindRejected, events.ReasonBadSubject, in.Actor)
	}
}

// batch applies each element of a batch submit, ack or result (revision
// 7 on) with op, exactly as the single input of the batch's verb about the
// element's job, in array order: each gets its own verdict (the decoder
// made every element such an input). An element about another partition's
// job alone is rejected, as in a batch renew.
func (p *Projector) batch(op func()) {
	whole := p.in // its Batch is the decoder's, untouched until the next Step
	arr := "leases["
	if whole.Verb == events.VerbSubmit {
		arr = "jobs["
	}
	for i := range whole.Batch {
		e := &whole.Batch[i]
		if !p.part.Owns(e.Job) {
			p.in = whole
			d := p.emit(nil, events.KindRejected, events.ReasonWrongPartition, whole.Actor)
			d.Job.ID = e.Job
			d.Detail = arr + strconv.Itoa(i) + "].job: " + p.wrongPartition(e.Job).Detail
			continue
		}
		p.in = *e
		op()
	}
	p.in = whole
}

// claim checks a worker's claim on (jobID, leaseID, gen) before any
// verb-specific rule. It returns the job (nil if unknown) and ok=false after
// emitting the rejection when the claim does not name the job's current
// lease, held by this worker, free of any ownership conflict.
func (p *Projector) claim(jobID, leaseID string, gen uint64) (*job, bool) {
	holder := p.in.Actor
	j := p.lookup(jobID)
	if j == nil || j.Generation == 0 {
		// No lease of it: unknown, or a queue job never offered (whose
		// projection the decision carries, as every decision about a job
		// that exists does).
		d := p.emit(j, events.KindLostAuthority, events.ReasonNoSuchJob, holder)
		d.Job.ID = jobID
		return nil, false
	}
	switch {
	case gen < j.Generation:
		inc(&j.Stale)
		kind := events.KindStale
		if p.in.Verb == events.VerbRenew {
			kind = events.KindLostAuthority // seed 004: a renewal's answer is lost authority
		}
		p.emit(j, kind, events.ReasonStaleGeneration, holder).Detail =
			"generation " + u64(gen) + " < current " + u64(j.Generation)
		return j, false
	case gen > j.Generation:
		p.emit(j, events.KindLostAuthority, events.ReasonFutureGeneration, holder)
		return j, false
	case leaseID != j.LeaseID:
		p.emit(j, events.KindLostAuthority, events.ReasonNoSuchLease, holder)
		return j, false
	case holder != j.Holder:
		// Another holder claims this very lease and generation (seed 000 §12).
		if j.State.Live() {
			inc(&j.Conflicts)
			if !j.Conflict {
				j.Conflict = true
				j.ConflictWith = strings.Clone(holder)
			}
			p.emit(j, events.KindConflict, events.ReasonOwnershipConflict, holder).Detail =
				holder + " claims generation " + u64(gen) + " held by " + j.Holder
			return j, false
		}
		p.emit(j, events.KindLostAuthority, events.ReasonHolderMismatch, holder)
		return j, false
	case j.Conflict:
		p.emit(j, events.KindConflict, events.ReasonConflictPending, holder)
		return j, false
	}
	return j, true
}

// ended emits the verdict for a claim on a lease that is no longer live and
// that the verb-specific rules did not classify more precisely.
func (p *Projector) ended(j *job) {
	p.emit(j, events.KindLostAuthority, events.ReasonLeaseEnded, p.in.Actor)
}

func (p *Projector) late(j *job, reason events.Reason) {
	inc(&j.Late)
	if p.in.Verb == events.VerbProgress {
		inc(&j.LateProgress)
	}
	p.emit(j, events.KindLate, reason, p.in.Actor)
}

func (p *Projector) duplicate(j *job, reason events.Reason) {
	inc(&j.Duplicates)
	p.emit(j, events.KindDuplicate, reason, p.in.Actor)
}

// lifetimeCap bounds an expiry by the lease's maximum lifetime.
func (p *Projector) lifetimeCap(j *job, exp int64) (int64, events.Reason) {
	if limit := addTime(j.IssuedAt, p.policy.MaxLifetime); exp > limit {
		return limit, events.ReasonCappedByLifetime
	}
	return exp, events.ReasonOk
}

func (p *Projector) ack() {
	in := &p.in
	j, ok := p.claim(in.Job, in.LeaseID, in.Generation)
	if !ok {
		return
	}
	switch {
	case j.AckState == events.AckAcquired:
		p.emit(j, events.KindRejected, events.ReasonNotOffered, in.Actor)
	case j.AckState == events.AckAcked && j.State == events.StateActive:
		p.duplicate(j, events.ReasonDuplicateAck)
	case j.AckState == events.AckAcked && j.LeaseExpired:
		inc(&j.Late)
		p.emit(j, events.KindLostAuthority, events.ReasonLeaseExpired, in.Actor)
	case j.State == events.StateOffered:
		j.State = events.StateActive
		j.AckState = events.AckAcked
		j.AckedAt = p.now
		var reason events.Reason
		j.ExpiresAt, reason = p.lifetimeCap(j, addTime(p.now, j.Duration))
		p.schedule(j)
		p.emit(j, events.KindAcked, reason, in.Actor)
	case leaseState(j) == events.StateAckMissed:
		p.late(j, events.ReasonAckAfterDeadline)
	default:
		p.ended(j)
	}
}

func (p *Projector) renew(r *events.LeaseRef) {
	in := &p.in
	j, ok := p.claim(r.Job, r.LeaseID, r.Generation)
	if !ok {
		return
	}
	switch leaseState(j) {
	case events.StateActive:
	case events.StateOffered, events.StateAckMissed:
		p.emit(j, events.KindRejected, events.ReasonNotAcked, in.Actor)
		return
	case events.StateExpired:
		inc(&j.Late)
		p.emit(j, events.KindLostAuthority, events.ReasonRenewAfterExpiry, in.Actor)
		return
	case events.StateUnresolved:
		if j.LeaseExpired {
			inc(&j.Late)
			p.emit(j, events.KindLostAuthority, events.ReasonRenewAfterExpiry, in.Actor)
		} else {
			p.emit(j, events.KindLostAuthority, events.ReasonCancelRequested, in.Actor)
		}
		return
	default:
		p.ended(j)
		return
	}
	switch {
	case j.CancelReq:
		p.emit(j, events.KindLostAuthority, events.ReasonCancelRequested, in.Actor)
		return
	case r.RenewSeq == j.RenewSeq:
		p.duplicate(j, events.ReasonDuplicateRenew)
		return
	case r.RenewSeq < j.RenewSeq:
		p.late(j, events.ReasonLateRenew)
		return
	}
	// The extension is the lease's duration (or the one asked for), bounded
	// by the policy in force now, from the authoritative time.
	dur := min(max(j.Duration, p.policy.MinLease), p.policy.MaxLease)
	if r.LeaseMS != 0 {
		dur = r.LeaseMS * 1e6
		if dur < p.policy.MinLease || dur > p.policy.MaxLease {
			p.emit(j, events.KindRejected, events.ReasonDurationOutOfPolicy, in.Actor).Detail = p.outOfPolicy("lease_ms", r.LeaseMS)
			return
		}
	}
	j.Duration = dur
	var reason events.Reason
	j.ExpiresAt, reason = p.lifetimeCap(j, addTime(p.now, dur))
	j.RenewSeq = r.RenewSeq
	j.RenewAt = p.now
	p.schedule(j)
	p.emit(j, events.KindRenewed, reason, in.Actor)
}

func (p *Projector) progress() {
	in := &p.in
	j, ok := p.claim(in.Job, in.LeaseID, in.Generation)
	if !ok {
		return
	}
	switch leaseState(j) {
	case events.StateActive:
	case events.StateOffered, events.StateAckMissed:
		p.emit(j, events.KindRejected, events.ReasonNotAcked, in.Actor)
		return
	case events.StateExpired:
		p.late(j, events.ReasonProgressAfterExpiry)
		return
	case events.StateUnresolved:
		if j.LeaseExpired {
			p.late(j, events.ReasonProgressAfterExpiry)
		} else {
			p.late(j, events.ReasonProgressAfterCancel)
		}
		return
	default:
		p.late(j, events.ReasonLeaseEnded)
		return
	}
	switch {
	case j.CancelReq:
		p.late(j, events.ReasonProgressAfterCancel)
	case in.ProgressSeq == j.ProgressSeq && in.Value == j.ProgressValue:
		p.duplicate(j, events.ReasonDuplicateProgress)
	case in.ProgressSeq == j.ProgressSeq:
		p.emit(j, events.KindRejected, events.ReasonSequenceReused, in.Actor)
	case in.ProgressSeq < j.ProgressSeq:
		p.late(j, events.ReasonLateProgress)
	default:
		j.ProgressSeq = in.ProgressSeq
		j.ProgressValue = in.Value
		j.ProgressAt = p.now
		p.emit(j, events.KindProgressed, events.ReasonOk, in.Actor)
	}
}

func (p *Projector) cancelAck() {
	in := &p.in
	j, ok := p.claim(in.Job, in.LeaseID, in.Generation)
	if !ok {
		return
	}
	st := leaseState(j)
	switch {
	case j.CancelAck:
		p.duplicate(j, events.ReasonDuplicateCancelAck)
	case st == events.StateOffered || st == events.StateAckMissed:
		p.emit(j, events.KindRejected, events.ReasonNotAcked, in.Actor)
	case st == events.StateActive && !j.CancelReq:
		p.emit(j, events.KindRejected, events.ReasonNoCancelRequested, in.Actor)
	case st == events.StateActive:
		j.CancelAck = true
		p.emit(j, events.KindCancelAcked, events.ReasonOk, in.Actor)
	case st == events.StateExpired || st == events.StateUnresolved:
		p.late(j, events.ReasonCancelAckAfterExpiry)
	default:
		p.ended(j)
	}
}

func (p *Projector) result() {
	in := &p.in
	j, ok := p.claim(in.Job, in.LeaseID, in.Generation)
	if !ok {
		return
	}
	switch leaseState(j) {
	case events.StateActive:
		if j.CancelReq && in.Outcome == events.OutcomeSuccess {
			p.emit(j, events.KindRejected, events.ReasonSuccessAfterCancel, in.Actor)
			return
		}
		j.Result = in.Outcome
		j.State = outcomeState(in.Outcome)
		p.end(j, p.now)
		d := p.emit(j, events.KindCompleted, events.ReasonOk, in.Actor)
		if p.rev >= events.Revision5 && j.Queue != "" && in.Outcome == events.OutcomeSuccess {
			d.Standing = p.succeed(j.Queue, j.Holder)
		}
		retry := in.Outcome == events.OutcomeFailed && !in.Permanent
		p.attemptEnd(j, events.ReasonAttemptFailed, retry, retry)
	case events.StateOffered, events.StateAckMissed:
		p.emit(j, events.KindRejected, events.ReasonNotAcked, in.Actor)
	case events.StateCompleted, events.StateFailed, events.StateCancelled:
		switch {
		case j.AckState == events.AckWithdrawn:
			p.ended(j)
		case j.Result == in.Outcome:
			p.duplicate(j, events.ReasonDuplicateResult)
		default:
			p.emit(j, events.KindRejected, events.ReasonResultConflicts, in.Actor)
		}
	case events.StateExpired:
		p.late(j, events.ReasonResultAfterExpiry)
	case events.StateUnresolved:
		if j.LeaseExpired {
			p.late(j, events.ReasonResultAfterExpiry)
		} else {
			p.late(j, events.ReasonCancelTimeout)
		}
	default:
		p.ended(j)
	}
}

func outcomeState(o events.Outcome) events.State {
	switch o {
	case events.OutcomeSuccess:
		return events.StateCompleted
	case events.OutcomeFailed:
		return events.StateFailed
	default:
		return events.StateCancelled
	}
}

func (p *Projector) release() {
	in := &p.in
	j, ok := p.claim(in.Job, in.LeaseID, in.Generation)
	if !ok {
		return
	}
	switch leaseState(j) {
	case events.StateOffered, events.StateActive:
		if j.CancelReq {
			p.emit(j, events.KindRejected, events.ReasonCancelRequested, in.Actor)
			return
		}
		reason := events.ReasonReleased
		if j.State == events.StateOffered {
			j.AckState = events.AckDeclined
			reason = events.ReasonOfferDeclined
		}
		refused := p.rev >= events.Revision5 && j.Queue != "" &&
			(reason == events.ReasonReleased || !p.surplus(j))
		j.State = events.StateReleased
		p.end(j, p.now)
		p.emit(j, events.KindReleased, events.ReasonOk, in.Actor)
		p.attemptEnd(j, reason, false, true)
		if refused {
			p.refuse(j, j.Holder, reason)
		}
	case events.StateReleased:
		p.duplicate(j, events.ReasonDuplicateRelease)
	case events.StateExpired:
		p.late(j, events.ReasonReleaseAfterExpiry)
	default:
		p.ended(j)
	}
}

// newLeaseBlocked emits the rejection of an offer or acquire on job j, if
// any rule forbids a new generation.
func (p *Projector) newLeaseBlocked(j *job, leaseMS int64) bool {
	in := &p.in
	reason := events.Reason("")
	if j != nil {
		switch {
		case j.Queue != "":
			reason = events.ReasonJobQueued
		case j.Conflict:
			reason = events.ReasonConflictPending
		case j.State.Live():
			reason = events.ReasonLeaseHeld
		case j.State == events.StateUnresolved:
			reason = events.ReasonJobUnresolved
		case j.State == events.StateCompleted || j.State == events.StateCancelled:
			reason = events.ReasonJobClosed
		case j.Generation >= p.policy.MaxGenerations:
			reason = events.ReasonMaxGenerations
		}
	}
	detail := ""
	if reason == "" && leaseMS != 0 {
		if d := leaseMS * 1e6; d < p.policy.MinLease || d > p.policy.MaxLease {
			reason = events.ReasonDurationOutOfPolicy
			detail = p.outOfPolicy("lease_ms", leaseMS)
		}
	}
	if reason == "" {
		return false
	}
	d := p.emit(j, events.KindRejected, reason, in.Actor)
	d.Detail = detail
	if j == nil {
		d.Job.ID = in.Job
	}
	return true
}

// leaseDuration is the duration of a lease an offer or acquire asks for.
func (p *Projector) leaseDuration(leaseMS int64) int64 {
	if leaseMS != 0 {
		return leaseMS * 1e6
	}
	return p.policy.DefaultLease
}

// newLease starts the next generation of job id for holder, of duration
// dur. A queue job keeps its queue fields.
func (p *Projector) newLease(j *job, holder string, dur int64) *job {
	if j == nil {
		j = &job{heapIdx: -1}
		j.ID = strings.Clone(p.in.Job)
		p.jobs[j.ID] = j
	}
	if holder != j.Holder {
		holder = strings.Clone(holder)
	} else {
		holder = j.Holder
	}
	old := j.Job
	j.Job = events.Job{
		ID:         j.ID,
		LeaseID:    p.leaseID(j.ID),
		Generation: j.Generation + 1,
		Holder:     holder,
		IssuedAt:   p.now,
		Duration:   dur,
	}
	if old.Queue != "" {
		copyQueue(&j.Job, &old)
	}
	return j
}

func (p *Projector) offer() {
	in := &p.in
	j := p.lookup(in.Job)
	if p.newLeaseBlocked(j, in.LeaseMS) {
		return
	}
	j = p.newLease(j, in.Holder, p.leaseDuration(in.LeaseMS))
	j.State = events.StateOffered
	j.AckState = events.AckPending
	ackTimeout := p.policy.AckTimeout
	if in.AckTimeoutMS != 0 {
		ackTimeout = in.AckTimeoutMS * 1e6
	}
	j.AckDeadline = addTime(p.now, ackTimeout)
	p.schedule(j)
	p.emit(j, events.KindOffered, events.ReasonOk, j.Holder)
}

func (p *Projector) acquire() {
	in := &p.in
	j := p.lookup(in.Job)
	if p.newLeaseBlocked(j, in.LeaseMS) {
		return
	}
	j = p.newLease(j, in.Actor, p.leaseDuration(in.LeaseMS))
	j.State = events.StateActive
	j.AckState = events.AckAcquired
	var reason events.Reason
	j.ExpiresAt, reason = p.lifetimeCap(j, addTime(p.now, j.Duration))
	p.schedule(j)
	p.emit(j, events.KindGranted, reason, in.Actor)
}

func (p *Projector) cancel() {
	in := &p.in
	j := p.lookup(in.Job)
	if j == nil || !j.Exists() {
		d := p.emit(nil, events.KindRejected, events.ReasonNoSuchJob, in.Actor)
		d.Job.ID = in.Job
		return
	}
	if in.Generation != 0 {
		switch {
		case in.Generation < j.Generation:
			inc(&j.Stale)
			p.emit(j, events.KindStale, events.ReasonStaleGeneration, in.Actor)
			return
		case in.Generation > j.Generation:
			p.emit(j, events.KindRejected, events.ReasonFutureGeneration, in.Actor)
			return
		case in.LeaseID != j.LeaseID:
			p.emit(j, events.KindRejected, events.ReasonNoSuchLease, in.Actor)
			return
		}
	}
	switch {
	case j.State == events.StateOffered:
		j.CancelReq = true
		j.CancelAt = p.now
		j.State = events.StateCancelled
		j.AckState = events.AckWithdrawn
		j.Result = events.OutcomeCancelled
		p.end(j, p.now)
		p.emit(j, events.KindCancelRequested, events.ReasonOfferWithdrawn, j.Holder)
		p.attemptEnd(j, "", false, false)
	case j.State == events.StateQueued:
		p.cancelQueued(j)
	case j.State == events.StateActive && j.CancelReq:
		p.duplicate(j, events.ReasonDuplicateCancel)
	case j.State == events.StateActive:
		j.CancelReq = true
		j.CancelAt = p.now
		j.CancelBy = addTime(p.now, p.policy.CancelTimeout)
		p.schedule(j)
		p.emit(j, events.KindCancelRequested, events.ReasonOk, j.Holder)
	default:
		p.emit(j, events.KindRejected, events.ReasonNoLiveLease, in.Actor)
	}
}

func (p *Projector) resolve() {
	in := &p.in
	j := p.lookup(in.Job)
	if j == nil || !j.Exists() {
		d := p.emit(nil, events.KindRejected, events.ReasonNoSuchJob, in.Actor)
		d.Job.ID = in.Job
		return
	}
	switch in.Action {
	case events.ActionAffirm:
		switch {
		case !j.Conflict:
			p.emit(j, events.KindRejected, events.ReasonNothingToResolve, in.Actor)
		case in.Holder != j.Holder || in.Generation != j.Generation || in.LeaseID != j.LeaseID || !j.State.Live():
			p.emit(j, events.KindRejected, events.ReasonAffirmMismatch, in.Actor)
		default:
			j.Conflict, j.ConflictWith = false, ""
			p.emit(j, events.KindResolved, events.ReasonConflictAffirmed, j.Holder)
		}
	case events.ActionRevoke:
		if !j.Conflict && !j.State.Live() {
			p.emit(j, events.KindRejected, events.ReasonNothingToResolve, in.Actor)
			return
		}
		reason := events.ReasonConflictCleared
		live := j.State.Live()
		if live {
			j.State = events.StateRevoked
			p.end(j, p.now)
			reason = events.ReasonLeaseRevoked
		}
		j.Conflict, j.ConflictWith = false, ""
		p.schedule(j) // no longer awaiting an operator: its retirement, if any
		p.emit(j, events.KindResolved, reason, j.Holder)
		if live {
			p.attemptEnd(j, events.ReasonLeaseRevoked, true, true)
		} else {
			p.enqueue(j) // a queue job held by the conflict goes on
		}
	case events.ActionSettle:
		if j.State != events.StateUnresolved {
			p.emit(j, events.KindRejected, events.ReasonNothingToResolve, in.Actor)
			return
		}
		j.Result = in.Outcome
		j.State = outcomeState(in.Outcome)
		p.schedule(j) // its retirement, counted from ended_at
		p.emit(j, events.KindResolved, events.ReasonSettled, j.Holder)
	case events.ActionRetry, events.ActionDiscard:
		p.resolveDead(j)
	default:
		p.emit(j, events.KindRejected, events.ReasonBadEnum, in.Actor)
	}
}

// end marks j's lease as no longer live at time t and replaces its
// deadline by its retirement, if any.
func (p *Projector) end(j *job, t int64) {
	j.EndedAt = t
	p.schedule(j)
}

// nextDeadline is the earliest deadline of a live lease, or, when a
// retention is in force (retain > 0, revision 3 on), the retirement of a
// job that can be retired: ended_at + retain. A QUEUED job waiting for its
// ready_at (after now) has it as a wake-up: firing it changes nothing, but
// tells the coordinator to append a tick then, for matching to see it.
func nextDeadline(j *job, retain, now int64) (int64, bool) {
	switch j.State {
	case events.StateOffered:
		return j.AckDeadline, true
	case events.StateActive:
		if j.CancelReq && j.CancelBy < j.ExpiresAt {
			return j.CancelBy, true
		}
		return j.ExpiresAt, true
	case events.StateQueued:
		if !j.Conflict && j.ReadyAt > now {
			return j.ReadyAt, true
		}
		return 0, false
	}
	if retain > 0 && retirable(&j.Job) {
		return addTime(j.EndedAt, retain), true
	}
	return 0, false
}

// schedule (re)places j in the deadline heap after its deadlines changed.
func (p *Projector) schedule(j *job) {
	d, ok := nextDeadline(j, p.policy.Retain, p.now)
	if !ok {
		p.unschedule(j)
		return
	}
	j.deadline = d
	if j.heapIdx < 0 {
		p.heap.push(j)
	} else {
		p.heap.fix(int(j.heapIdx))
	}
}

func (p *Projector) unschedule(j *job) {
	if j.heapIdx >= 0 {
		p.heap.remove(int(j.heapIdx))
	}
}

// fire applies the deadlines at or before now, earliest first, ties by job
// id: all of them when limit is negative, else at most limit.
//
// From revision 4 on the limit counts the decisions fired, not the
// deadlines: a queue job's expiry may make two (the expiry, then its
// requeue or DEAD end), and a QUEUED job's wake-up none.
func (p *Projector) fire(limit int) {
	byDecisions := p.rev >= events.Revision4
	for n := 0; len(p.heap) > 0 && p.heap[0].deadline <= p.now; n++ {
		if limit >= 0 && (byDecisions && len(p.out) >= limit || !byDecisions && n == limit) {
			return
		}
		j := p.heap[0]
		p.heap.remove(0)
		_ = p.expire(j)
	}
}

// lookup returns job id (nil if unknown). From revision 2 on, a due
// deadline of the job that an earlier input left unfired (fire's limit) is
// fired first, so that every operation is judged against the job's state
// at the input's time.
//
// From revision 3 on, the job's retirement may be due too (it may fall due
// by the expiry just fired): then it is retired first, and the input finds
// no job of that id.
func (p *Projector) lookup(id string) *job {
	j := p.jobs[id]
	for j != nil && p.rev >= events.Revision2 && j.heapIdx >= 0 && j.deadline <= p.now {
		p.heap.remove(j.heapIdx)
		if p.expire(j) {
			return nil
		}
	}
	return j
}

// expire applies j's deadline, which has just left the heap, and reports
// whether that retired the job: the deadline of a job whose lease is no
// longer live is its retirement (revision 3 on).
func (p *Projector) expire(j *job) (retired bool) {
	if j.State == events.StateQueued {
		return false // a wake-up: matching sees the job ready from now on
	}
	if !j.State.Live() {
		p.retire(j)
		return true
	}
	defer p.schedule(j) // its retirement, if it can be retired now
	t := j.deadline
	j.EndedAt = t
	switch {
	case j.State == events.StateOffered:
		j.State = events.StateAckMissed
		j.AckState = events.AckMissed
		p.emit(j, events.KindAckMissed, events.ReasonAckDeadlinePassed, j.Holder)
		if j.Queue != "" {
			// Not an attempt (the worker never took the job): queued
			// again at once, and the worker's announcement withdrawn,
			// so that a worker that vanished, or one that grabs offers
			// it never ACKs, holds up no more jobs and spends no
			// attempt of anyone's job (PROTOCOL.md §22.4); from
			// revision 5 on a refusal, which lowers its standing.
			p.attemptEnd(j, events.ReasonAckDeadlinePassed, false, true)
			if p.rev >= events.Revision5 {
				p.refuse(j, j.Holder, events.ReasonAckDeadlinePassed)
			} else {
				p.withdraw(j.Queue, j.Holder, events.ReasonAckDeadlinePassed)
			}
		}
	case j.CancelReq && t == j.ExpiresAt:
		j.State = events.StateUnresolved
		j.LeaseExpired = true
		p.emit(j, events.KindUnresolved, events.ReasonExpiredCancelUnreconciled, j.Holder)
		p.attemptEnd(j, "", false, false)
	case j.CancelReq:
		j.State = events.StateUnresolved
		p.emit(j, events.KindUnresolved, events.ReasonCancelTimeout, j.Holder)
		p.attemptEnd(j, "", false, false)
	default:
		j.State = events.StateExpired
		j.LeaseExpired = true
		p.emit(j, events.KindExpired, events.ReasonLeaseExpired, j.Holder)
		p.attemptEnd(j, events.ReasonLeaseExpired, true, true)
		if p.rev >= events.Revision5 && j.Queue != "" {
			p.refuse(j, j.Holder, events.ReasonLeaseExpired)
		}
	}
	return false
}

// retire removes j from the projection: its retention passed. The decision
// carries its last projection, addressed to its last holder; its id is
// unknown from now on (a new offer or acquire starts it again at generation
// 1).
func (p *Projector) retire(j *job) { p.retireFor(j, events.ReasonRetentionPassed) }

// retireFor removes j from the projection with the given reason (the
// retention, or an operator's discard of a DEAD job).
func (p *Projector) retireFor(j *job, reason events.Reason) {
	addressee := j.Holder
	if j.Queue != "" {
		addressee = j.Submitter
		p.dropKey(j)
		p.dequeue(j)
		if q := p.queues[j.Queue]; q != nil {
			q.jobs--
			p.touched(q)
		}
	}
	p.emit(j, events.KindRetired, reason, addressee)
	delete(p.jobs, j.ID)
	if p.changed != nil {
		p.changed[j.ID] = events.Job{ID: j.ID} // gone
	}
}

// retirable reports whether j can be retired once its retention passes:
// its lease ended, and it awaits no operator.
func retirable(j *events.Job) bool {
	return j.Exists() && !j.State.Live() && j.State != events.StateQueued && j.State != events.StateUnresolved && !j.Conflict
}

// retainAll puts the retirement of every job not live under the retention
// in force (a policy input changed it): each job is retired retain_ms after
// its ended_at, or kept if the retention is 0. The heap's array order
// depends on the map's, but the heap's (deadline, id) order does not.
func (p *Projector) retainAll() {
	for _, j := range p.jobs {
		if !j.State.Live() {
			p.schedule(j)
		}
	}
}

// rules applies a rules input: the log moves to a later revision, whose
// lease key it sets. Revisions never go back, and a key never changes
// within a revision.
func (p *Projector) rules() {
	in := &p.in
	if in.Revision <= p.rev {
		p.emit(nil, events.KindRejected, events.ReasonRulesInForce, in.Actor).Detail =
			"revision " + strconv.FormatUint(uint64(in.Revision), 10) + " requested, revision " + strconv.FormatUint(uint64(p.rev), 10) + " in force"
		return
	}
	p.setRules(in.Revision, in.LeaseKey)
	p.emit(nil, events.KindRulesSet, events.ReasonOk, in.Actor).Revision = p.rev
}

// setRules puts a revision and its lease key in force.
func (p *Projector) setRules(rev uint32, key [events.LeaseKeyLen]byte) {
	p.rev, p.leaseKey = rev, key
	p.leaseMAC = nil
	if rev >= events.Revision2 {
		p.leaseMAC = hmac.New(sha256.New, key[:])
	}
}

// leaseIDDomain separates the lease id MAC from any other use of the key.
const leaseIDDomain = "tenure lease id v2\x00"

// leaseID is the id of the lease the input being applied creates for job.
// Revision 1: L<input sequence>, which anyone can name. From revision 2:
// L<input sequence>-<tag>, the tag being the first 16 bytes of
// HMAC-SHA-256(lease key, domain || partition index and count || input
// sequence || job id), unpadded base64url (22 characters of the token
// alphabet): only readers of the input stream, where the key is, can
// compute it, and a replay of the log derives the same ids.
func (p *Projector) leaseID(jobID string) string {
	if p.leaseMAC == nil {
		return "L" + u64(p.cause)
	}
	id, buf := appendLeaseID(nil, p.macBuf[:0], p.leaseMAC, p.part, p.cause, jobID)
	p.macBuf = buf[:0]
	return string(id)
}

// LeaseID is the id of the lease that input seq creates for job under
// rules (for partition part; the zero Partition when unpartitioned), as
// the fold derives it: what an auditor, a test or a tool that reads the
// input stream (where the lease key is) computes without folding.
func LeaseID(rules Rules, part events.Partition, seq uint64, job string) string {
	if rules.Revision < events.Revision2 {
		return "L" + u64(seq)
	}
	id, _ := appendLeaseID(nil, nil, hmac.New(sha256.New, rules.LeaseKey[:]), part, seq, job)
	return string(id)
}

// appendLeaseID appends the revision-2 lease id to dst, with m keyed by
// the lease key and buf as scratch (both returned extended).
func appendLeaseID(dst, buf []byte, m hash.Hash, part events.Partition, seq uint64, job string) ([]byte, []byte) {
	m.Reset()
	b := append(buf, leaseIDDomain...)
	b = binary.BigEndian.AppendUint32(b, part.Index)
	b = binary.BigEndian.AppendUint32(b, part.Count)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint32(b, uint32(len(job)))
	b = append(b, job...)
	m.Write(b)
	sum := m.Sum(b[:0])
	dst = append(dst, 'L')
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, '-')
	dst = base64.RawURLEncoding.AppendEncode(dst, sum[:16])
	return dst, b
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

// MaxTime is the latest time the fold can represent (Unix ns; in April
// 2262). A deadline past it is MaxTime: a lease granted near the end of
// int64 time expires then rather than wrapping into the past.
const MaxTime = int64(1<<63 - 1)

// addTime is t + d for a duration d >= 0 (the decoder and the policy allow
// no other), saturating at MaxTime.
func addTime(t, d int64) int64 {
	if t > MaxTime-d {
		return MaxTime
	}
	return t + d
}

// inc adds one to an evidence counter, saturating: each counts stored
// inputs (a batch renew counts at most MaxBatch per input), so no log can
// reach 2^64-1, but a restored snapshot could claim it.
func inc(c *uint64) {
	if *c != 1<<64-1 {
		*c++
	}
}
