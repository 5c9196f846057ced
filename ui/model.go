package ui

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/maknow/tenure/api"
	"github.com/maknow/tenure/events"
)

// Bounds of the JSON API: no request returns more rows than MaxPageSize.
const (
	DefaultPageSize    = 50
	MaxPageSize        = 500
	DefaultAnomalyFeed = 10_000 // anomalies kept for the feed (the oldest are dropped)
	DefaultMaxHistory  = 5_000  // decisions of one job shown on its page (the latest)
	DefaultUnleased    = 1_000  // jobs that never had a lease whose page is kept (the latest first seen)
)

// unleasedHistory bounds the decision sequences kept per unleased job (a
// typo repeated a million times needs no million-line page).
const unleasedHistory = 100

// jobEntry is the board's record of one job: the read model's entry (its
// latest projection and last decision, package api's Model) and where its
// decisions are. An unleased job (the package doc) is in no entry of the
// read model: its own projection and last decision are here.
type jobEntry struct {
	e         *api.Entry       // the read model's entry; nil for an unleased job
	part      events.Partition // the partition the job belongs to (zero: unpartitioned)
	seqs      []uint64         // decision stream sequences of its decisions (in its partition's stream), in order: the last historyCap to 2*historyCap
	trimmed   int              // decisions older than seqs, no longer listed
	anomalies uint64           // non-accepted verdicts about it, every generation
	gone      bool             // retired: no longer in jobs, dropped from order at the next merge
	// An unleased job's projection ({id, NONE}) and last decision.
	own              events.Job
	ownSeq, ownCause uint64
	ownAt            int64
	ownKind          events.Kind
	ownReason        events.Reason
}

// job is the job's projection after its last decision.
func (e *jobEntry) job() *events.Job {
	if e.e != nil {
		return e.e.Job()
	}
	return &e.own
}

// last is the job's last decision: sequence (0: restored from the stored
// snapshot, none read since), cause, time, kind and reason.
func (e *jobEntry) last() (seq, cause uint64, at int64, kind events.Kind, reason events.Reason) {
	if e.e != nil {
		return e.e.Last()
	}
	return e.ownSeq, e.ownCause, e.ownAt, e.ownKind, e.ownReason
}

// lastAt is the time of the job's last decision.
func (e *jobEntry) lastAt() int64 {
	_, _, at, _, _ := e.last()
	return at
}

// lastSeq is the sequence of the job's last decision.
func (e *jobEntry) lastSeq() uint64 {
	seq, _, _, _, _ := e.last()
	return seq
}

// historyCap bounds the decision sequences the model keeps per job: a job
// renewed for a year has millions of decisions; its page shows the last
// ones (Config.MaxHistory), and tenure watch --job reads them all.
const historyCap = 10_000

// Row is one job as the board shows it: the projection of its last
// decision. Times are Unix milliseconds (0: not set). In a partitioned
// deployment, Partition is the job's partition ("2" for partition 2) and
// LastSeq, LastCause are sequences of that partition's streams.
type Row struct {
	ID              string `json:"id"`
	Partition       string `json:"partition,omitempty"` // the job's partition; "" when unpartitioned
	LeaseID         string `json:"lease_id,omitempty"`
	Generation      uint64 `json:"generation"`
	Holder          string `json:"holder,omitempty"`
	State           string `json:"state"`
	AckState        string `json:"ack_state,omitempty"`
	Result          string `json:"result,omitempty"`
	LeaseMS         int64  `json:"lease_ms"`
	IssuedAt        int64  `json:"issued_at,omitempty"`
	ExpiresAt       int64  `json:"expires_at,omitempty"`
	AckDeadline     int64  `json:"ack_deadline,omitempty"`
	AckedAt         int64  `json:"acked_at,omitempty"`
	RenewSeq        uint64 `json:"renew_seq"`
	ProgressSeq     uint64 `json:"progress_seq"`
	ProgressValue   int64  `json:"progress_value"`
	CancelRequested bool   `json:"cancel_requested"`
	CancelAcked     bool   `json:"cancel_acked"`
	CancelAt        int64  `json:"cancel_at,omitempty"`
	CancelBy        int64  `json:"cancel_by,omitempty"`
	EndedAt         int64  `json:"ended_at,omitempty"`
	LeaseExpired    bool   `json:"lease_expired"`
	Conflict        bool   `json:"conflict"`
	ConflictWith    string `json:"conflict_with,omitempty"`
	Stale           uint64 `json:"stale"`
	Late            uint64 `json:"late"`
	LateProgress    uint64 `json:"late_progress"`
	Duplicates      uint64 `json:"duplicates"`
	Conflicts       uint64 `json:"conflicts"`
	// A queue job's (PROTOCOL.md §22.6): its queue, submitter, priority,
	// attempts counted of its budget, when it may be offered (QUEUED only)
	// and why its last attempt ended. Absent for other jobs.
	Queue         string `json:"queue,omitempty"`
	Submitter     string `json:"submitter,omitempty"`
	Priority      int64  `json:"priority,omitempty"`
	Attempt       uint64 `json:"attempt,omitempty"`
	MaxAttempts   uint64 `json:"max_attempts,omitempty"`
	ReadyAt       int64  `json:"ready_at,omitempty"`
	ScheduledFor  int64  `json:"scheduled_for,omitempty"`   // rules revision 8: its run_at, or its submit's time plus delay_ms
	UniqueKey     string `json:"unique_key,omitempty"`      // rules revision 8: the submit's unique key
	ConcKey       string `json:"concurrency_key,omitempty"` // rules revision 9: the submit's concurrency key
	AttemptReason string `json:"attempt_reason,omitempty"`
	Anomalies     uint64 `json:"anomalies"` // non-accepted verdicts about the job, every generation
	Decisions     int    `json:"decisions"` // decisions about the job
	LastSeq       uint64 `json:"last_seq"`  // decision stream sequence of the last one (its partition's)
	LastCause     uint64 `json:"last_cause"`
	LastAt        int64  `json:"last_at"`
	LastKind      string `json:"last_kind"`
	LastReason    string `json:"last_reason"`
	// LastOutcome is the result the last decision recorded when it is a
	// completed one (SUCCESS, FAILED or CANCELLED: completed is the kind
	// of all three).
	LastOutcome string `json:"last_outcome,omitempty"`
	// Restored says that no decision about the job was read: the decision
	// stream's first segments were removed (archived), and the projection
	// is the stored snapshot's (LastSeq, LastCause, LastKind are empty,
	// LastAt is the snapshot's time).
	Restored bool `json:"restored,omitempty"`
	// ResultInput is the input that recorded the job's latest result, and
	// ResultDetail its worker's detail (why it failed, say), read from the
	// input stream; a viewer is not shown the detail (it may be as
	// sensitive as a payload: the package doc).
	ResultInput  uint64 `json:"result_input,omitempty"`
	ResultDetail string `json:"result_detail,omitempty"`
}

func ms(ns int64) int64 {
	if ns == 0 {
		return 0
	}
	return ns / int64(time.Millisecond)
}

func (e *jobEntry) row() Row {
	j := e.job()
	seq, cause, at, kind, reason := e.last()
	r := Row{
		ID: j.ID, Partition: e.part.Token(), State: j.State.String(), Anomalies: e.anomalies, Decisions: len(e.seqs),
		LastSeq: seq, LastCause: cause, LastAt: ms(at), LastKind: kind.String(), LastReason: string(reason),
	}
	if kind == events.KindCompleted && j.Result != events.OutcomeNone {
		r.LastOutcome = j.Result.String()
	}
	if e.e != nil {
		r.Restored = e.e.Restored()
		if in, w := e.e.ResultInput(); in != 0 {
			r.ResultInput = in
			if w != nil {
				r.ResultDetail = w.Detail
			}
		}
	}
	if j.Queue != "" {
		r.Queue, r.Submitter, r.Priority, r.Attempt, r.MaxAttempts = j.Queue, j.Submitter, j.Priority, j.Attempt, j.MaxAttempts
		r.AttemptReason = string(j.LastReason)
		if j.State == events.StateQueued {
			r.ReadyAt = ms(j.ReadyAt)
		}
		r.ScheduledFor = ms(api.ScheduledFor(j))
		r.UniqueKey = j.UniqueKey
		r.ConcKey = j.ConcurrencyKey
	}
	if j.Generation == 0 {
		return r
	}
	r.LeaseID, r.Generation, r.Holder, r.AckState = j.LeaseID, j.Generation, j.Holder, j.AckState.String()
	if j.Result != events.OutcomeNone {
		r.Result = j.Result.String()
	}
	r.LeaseMS = j.Duration / int64(time.Millisecond)
	r.IssuedAt, r.ExpiresAt, r.AckDeadline, r.AckedAt = ms(j.IssuedAt), ms(j.ExpiresAt), ms(j.AckDeadline), ms(j.AckedAt)
	r.RenewSeq, r.ProgressSeq, r.ProgressValue = j.RenewSeq, j.ProgressSeq, j.ProgressValue
	r.CancelRequested, r.CancelAcked, r.CancelAt, r.CancelBy, r.EndedAt = j.CancelReq, j.CancelAck, ms(j.CancelAt), ms(j.CancelBy), ms(j.EndedAt)
	r.LeaseExpired, r.Conflict, r.ConflictWith = j.LeaseExpired, j.Conflict, j.ConflictWith
	r.Stale, r.Late, r.LateProgress, r.Duplicates, r.Conflicts = j.Stale, j.Late, j.LateProgress, j.Duplicates, j.Conflicts
	return r
}

// deadline is the next deadline of a live lease: the ACK deadline of an
// offer, the expiry (or an earlier cancel deadline) of an active lease;
// false for a lease that is not live.
func deadline(j *events.Job) (int64, bool) {
	switch j.State {
	case events.StateOffered:
		return j.AckDeadline, true
	case events.StateActive:
		d := j.ExpiresAt
		if j.CancelReq && j.CancelBy != 0 && j.CancelBy < d {
			d = j.CancelBy
		}
		return d, true
	}
	return 0, false
}

// blocked reports whether a job needs an operator: a pending ownership
// conflict (revoke or affirm), an unresolved cancellation (settle), or a
// DEAD queue job (retry or discard).
func blocked(j *events.Job) bool {
	return j.Conflict || j.State == events.StateUnresolved || j.State == events.StateDead
}

// isAnomaly reports whether a decision goes to the anomalies feed: every
// verdict that is not accepted, and every unresolved job.
func isAnomaly(k events.Kind) bool {
	return !k.Accepted() && (!k.Derived() || k == events.KindUnresolved)
}

// Anomaly is one entry of the anomalies feed. Times are Unix milliseconds.
// In a partitioned deployment, Seq and Cause are sequences of the streams
// of Partition, the partition whose decision stream holds the entry.
type Anomaly struct {
	N          uint64 `json:"n"`                   // position in the feed, from 1
	Partition  string `json:"partition,omitempty"` // "" when unpartitioned
	Seq        uint64 `json:"seq"`                 // decision stream sequence
	Cause      uint64 `json:"cause"`
	At         int64  `json:"at"`
	AtText     string `json:"at_text"` // the authoritative time, RFC 3339
	Kind       string `json:"kind"`
	Reason     string `json:"reason"`
	Detail     string `json:"detail,omitempty"`
	Job        string `json:"job"` // "_" when the decision concerns no job
	Generation uint64 `json:"generation"`
	Holder     string `json:"holder,omitempty"`
	State      string `json:"state"`
	Role       string `json:"role"`
	Actor      string `json:"actor"`
	Verb       string `json:"verb"`
}

// observer is told about every decision applied to the model (metrics).
type observer interface {
	observe(d *events.Decision)
}

// model is the board's view of the read model of the decision streams
// (package api's Model, shared with the state API in tenure serve): the
// jobs in natural order of their ids, the decision sequences of each job,
// the jobs that need an operator, the jobs that never had a lease, and
// the anomalies feed. It is an api.View: the read model tells it every
// change under the read model's lock, which is its lock too (mu). It is
// safe for concurrent use.
type model struct {
	am      *api.Model
	mu      *sync.RWMutex // am's lock
	count   uint32        // partitions (0: unpartitioned)
	jobs    map[string]*jobEntry
	order   []*jobEntry // every job but the newest, in id order
	tail    []*jobEntry // jobs added since order was last merged
	blocked map[string]struct{}
	total   uint64 // decisions applied
	feed    []Anomaly
	feedCap int
	feedN   uint64 // anomalies ever (the N of the latest)
	changed map[string]struct{}
	added   int
	gone    int // retired entries still in order or tail
	obs     observer
	// unleased are the latest jobs that never had a lease (generation 0):
	// not on the board, at most unleasedCap of them, the oldest first
	// seen forgotten first (unleasedQ: in the order first seen, with
	// entries that got a lease since until it is compacted).
	unleased    map[string]*jobEntry
	unleasedQ   []*jobEntry
	unleasedCap int
}

// newModel returns the board's view of a new read model of a deployment
// of count partitions (0: unpartitioned).
func newModel(feedCap int, count uint32) *model {
	return newModelOf(feedCap, api.NewModel(count))
}

// newModelOf returns the board's view of read model am, attached to it:
// am must not have been fed yet.
func newModelOf(feedCap int, am *api.Model) *model {
	if feedCap <= 0 {
		feedCap = DefaultAnomalyFeed
	}
	m := &model{
		am: am, mu: am.Mutex(), count: am.Partitions(), jobs: make(map[string]*jobEntry), blocked: make(map[string]struct{}),
		feedCap: feedCap, changed: make(map[string]struct{}),
		unleased: make(map[string]*jobEntry), unleasedCap: DefaultUnleased,
	}
	am.Attach(m)
	return m
}

// partition is partition k of the model's deployment (the zero Partition
// when unpartitioned).
func (m *model) partition(k uint32) events.Partition {
	return events.Partition{Index: k, Count: m.count} // k is 0 when unpartitioned
}

// apply folds one stored decision (sequence seq of partition part's
// decision stream; part 0 when unpartitioned) into the read model, and so
// into the board (Applied).
func (m *model) apply(part uint32, seq uint64, d *events.Decision) { m.am.Apply(part, seq, d) }

// Applied implements api.View: decision d, at seq of partition part, was
// applied to the read model; e is its job's entry (nil: the read model
// keeps none for it). A decision about a job of another partition (a
// rejection with reason wrong_partition) goes to the anomalies feed only:
// the job's projection is its own partition's.
func (m *model) Applied(part uint32, seq uint64, d *events.Decision, e, _ *api.Entry) {
	p := m.partition(part)
	m.total++
	if m.obs != nil {
		m.obs.observe(d)
	}
	id := d.Job.ID
	var je *jobEntry
	switch {
	case id == events.NoJob || id == "" || !p.Owns(id):
	case e == nil && d.Kind == events.KindRetired:
		// A retirement of a job the read model did not keep: nothing to show.
	case e == nil:
		// A job that never had a lease and is in no queue (a typo, a
		// refused offer, a message about a retired job): not a row of the
		// board (the coordinator does not keep it either), but its page
		// works while it is among the latest unleased jobs.
		je = m.unleasedEntry(id, p)
		je.own = d.Job
		je.ownSeq, je.ownCause, je.ownAt, je.ownKind, je.ownReason = seq, d.Cause, d.At, d.Kind, d.Reason
		je.record(seq, unleasedHistory)
		m.changed[id] = struct{}{}
	default:
		je = m.jobs[id]
		if je == nil || je.e != e {
			// A new job, or an unleased one that got its first lease: it
			// keeps the decisions it had.
			if je = m.unleased[id]; je != nil {
				delete(m.unleased, id)
			} else {
				je = &jobEntry{part: p}
			}
			je.e = e
			m.jobs[id] = je
			m.tail = append(m.tail, je)
			m.added++
		}
		je.record(seq, historyCap)
		if blocked(e.Job()) && !e.Gone() {
			m.blocked[id] = struct{}{}
		} else {
			delete(m.blocked, id)
		}
		m.changed[id] = struct{}{}
		if e.Gone() {
			// The job left the projection (PROTOCOL §13.1): it leaves the
			// board, so that the board's memory is bounded by the jobs
			// kept, as the coordinator's is. Its id may come back.
			m.drop(je)
		}
	}
	if isAnomaly(d.Kind) {
		if je != nil {
			je.anomalies++
		}
		m.feedN++
		a := Anomaly{
			N: m.feedN, Partition: p.Token(), Seq: seq, Cause: d.Cause, At: ms(d.At), AtText: events.FormatTime(d.At),
			Kind: d.Kind.String(), Reason: string(d.Reason), Detail: d.Detail,
			Job: id, Generation: d.Job.Generation, Holder: d.Job.Holder, State: d.Job.State.String(),
			Role: d.Role.String(), Actor: d.Actor, Verb: d.Verb.String(),
		}
		if len(m.feed) < m.feedCap {
			m.feed = append(m.feed, a)
		} else {
			m.feed[int((m.feedN-1)%uint64(m.feedCap))] = a
		}
	}
}

// drop takes je off the board (its job retired, or its partition
// restored from the stored snapshot).
func (m *model) drop(je *jobEntry) {
	id := je.job().ID
	if m.jobs[id] == je {
		delete(m.jobs, id)
		delete(m.blocked, id)
	}
	je.gone = true
	m.gone++
	m.changed[id] = struct{}{}
}

// Restored implements api.View: partition part of the read model was
// restored from the stored snapshot. The jobs gone leave the board (their
// pages with them), the snapshot's jobs are on it, without decisions (the
// decisions about them before the snapshot were removed from the stream);
// the unleased jobs of the partition are forgotten (theirs were too). The
// anomalies feed keeps what it had.
func (m *model) Restored(part uint32, _ uint64, gone, added []*api.Entry) {
	for _, e := range gone {
		if je := m.jobs[e.Job().ID]; je != nil && je.e == e {
			m.drop(je)
		}
	}
	for id, je := range m.unleased {
		if je.part.Index == part {
			delete(m.unleased, id)
		}
	}
	p := m.partition(part)
	for _, e := range added {
		id := e.Job().ID
		je := &jobEntry{e: e, part: p}
		m.jobs[id] = je
		m.tail = append(m.tail, je)
		m.added++
		if blocked(e.Job()) {
			m.blocked[id] = struct{}{}
		}
		m.changed[id] = struct{}{}
	}
}

// Skipped implements api.View: an undecodable decision (counted by the
// read model) changes nothing on the board.
func (m *model) Skipped(uint32, uint64) {}

// record adds sequence seq to the entry's decisions, keeping the
// sequences of its last keep to 2*keep decisions.
func (e *jobEntry) record(seq uint64, keep int) {
	e.seqs = append(e.seqs, seq)
	if len(e.seqs) > 2*keep {
		cut := len(e.seqs) - keep
		e.seqs = append(e.seqs[:0], e.seqs[cut:]...)
		e.trimmed += cut
	}
}

// unleasedEntry returns the entry of unleased job id, adding it (and
// forgetting the oldest unleased job beyond the model's bound) if it is
// new. The caller holds the write lock.
func (m *model) unleasedEntry(id string, p events.Partition) *jobEntry {
	if e := m.unleased[id]; e != nil {
		return e
	}
	e := &jobEntry{own: events.Job{ID: id}, part: p}
	m.unleased[id] = e
	m.unleasedQ = append(m.unleasedQ, e)
	for len(m.unleased) > m.unleasedCap {
		old := m.unleasedQ[0]
		m.unleasedQ = m.unleasedQ[1:]
		if m.unleased[old.own.ID] == old {
			delete(m.unleased, old.own.ID)
		}
	}
	if len(m.unleasedQ) > 2*m.unleasedCap {
		// Entries that got a lease since leave the queue too.
		m.unleasedQ = slices.DeleteFunc(slices.Clone(m.unleasedQ), func(e *jobEntry) bool { return m.unleased[e.own.ID] != e })
	}
	return e
}

// positions returns, with the read lock held, the sum of the positions in
// every decision stream (the position itself when unpartitioned), the
// position of each partition (nil when unpartitioned), and whether every
// stream has been caught up with.
func (m *model) positions() (sum uint64, seqs []uint64, caughtUp bool) { return m.am.Positions() }

// anomalyAt returns feed entry n (1-based) if it is still kept.
func (m *model) anomalyAt(n uint64) (Anomaly, bool) {
	if n == 0 || n > m.feedN || m.feedN-n >= uint64(len(m.feed)) {
		return Anomaly{}, false
	}
	if len(m.feed) < m.feedCap {
		return m.feed[n-1], true
	}
	return m.feed[int((n-1)%uint64(m.feedCap))], true
}

// Query selects, orders and pages the board's rows.
type Query struct {
	States  []string // any of these states (empty: all); "LIVE" means OFFERED or ACTIVE
	Holder  string   // exactly this holder
	Queue   string   // exactly this queue
	Job     string   // job ids containing this (case-sensitive)
	Blocked bool     // only jobs that need an operator: a pending conflict, UNRESOLVED or DEAD
	Sort    string   // id (default), -id, deadline, updated, holder, state, anomalies; ids and holders in natural order (compareIDs)
	Offset  int
	Limit   int // default DefaultPageSize, at most MaxPageSize
}

// Page is one page of the board.
type Page struct {
	Total    int            `json:"total"` // rows matching the query
	Jobs     int            `json:"jobs"`  // every job on the board (not the unleased: see the package doc)
	Offset   int            `json:"offset"`
	Limit    int            `json:"limit"`
	Rows     []Row          `json:"rows"`
	Seq      uint64         `json:"seq"`            // the read model's decision stream position (partitioned: the sum over partitions)
	Seqs     []uint64       `json:"seqs,omitempty"` // partitioned: its position in each partition's decision stream
	Now      int64          `json:"now"`            // the server's clock, Unix ms
	States   map[string]int `json:"states"`         // jobs per state (all jobs)
	Blocked  int            `json:"blocked"`        // jobs needing an operator
	Feed     uint64         `json:"feed"`           // anomalies ever recorded (N of the latest)
	CaughtUp bool           `json:"caught_up"`
}

func (q *Query) normalize() {
	if q.Limit <= 0 {
		q.Limit = DefaultPageSize
	}
	q.Limit = min(q.Limit, MaxPageSize)
	q.Offset = max(q.Offset, 0)
}

func (q *Query) stateSet() (set [16]bool, any bool) {
	for _, s := range q.States {
		if s == "LIVE" {
			set[events.StateOffered], set[events.StateActive], any = true, true, true
			continue
		}
		if st, ok := events.ParseState(s); ok {
			set[st], any = true, true
		}
	}
	return set, any
}

// mergeTail sorts the jobs added since the last query into the id order
// (natural: compareIDs):
// O(n) per query that follows new jobs, not a sort of every job. The
// caller holds the write lock.
func (m *model) mergeTail() {
	if m.gone > 0 {
		keep := func(es []*jobEntry) []*jobEntry {
			return slices.DeleteFunc(es, func(e *jobEntry) bool { return e.gone })
		}
		m.order, m.tail, m.gone = keep(m.order), keep(m.tail), 0
	}
	if len(m.tail) == 0 {
		return
	}
	byID := func(a, b *jobEntry) int { return compareIDs(a.job().ID, b.job().ID) }
	slices.SortFunc(m.tail, byID)
	out := make([]*jobEntry, 0, len(m.order)+len(m.tail))
	i, j := 0, 0
	for i < len(m.order) && j < len(m.tail) {
		if byID(m.order[i], m.tail[j]) <= 0 {
			out = append(out, m.order[i])
			i++
		} else {
			out = append(out, m.tail[j])
			j++
		}
	}
	out = append(append(out, m.order[i:]...), m.tail[j:]...)
	m.order, m.tail = out, nil
}

// page answers a query. In id order it scans the jobs once and keeps only
// the page; in another order it keeps the first offset+limit matching rows
// in a bounded heap (O(n log k)), so no answer sorts every job.
func (m *model) page(q Query, now time.Time) Page {
	q.normalize()
	m.mu.RLock()
	if len(m.tail) > 0 || m.gone > 0 {
		m.mu.RUnlock()
		m.mu.Lock()
		m.mergeTail()
		m.mu.Unlock()
		m.mu.RLock()
	}
	defer m.mu.RUnlock()
	p := Page{Jobs: len(m.jobs), Offset: q.Offset, Limit: q.Limit, Now: now.UnixMilli(),
		States: make(map[string]int), Blocked: len(m.blocked), Feed: m.feedN, Rows: []Row{}}
	p.Seq, p.Seqs, p.CaughtUp = m.positions()
	for st, n := range m.am.StateCounts() {
		if n > 0 {
			p.States[events.State(st).String()] = n
		}
	}
	stateSet, byState := q.stateSet()
	match := func(e *jobEntry) bool {
		j := e.job()
		switch {
		case byState && !stateSet[j.State]:
			return false
		case q.Holder != "" && j.Holder != q.Holder:
			return false
		case q.Queue != "" && j.Queue != q.Queue:
			return false
		case q.Job != "" && !strings.Contains(j.ID, q.Job):
			return false
		case q.Blocked && !blocked(j):
			return false
		}
		return true
	}
	order := m.order
	if q.Blocked {
		// Few jobs are blocked: do not scan them all.
		order = make([]*jobEntry, 0, len(m.blocked))
		for id := range m.blocked {
			order = append(order, m.jobs[id])
		}
		slices.SortFunc(order, func(a, b *jobEntry) int { return compareIDs(a.job().ID, b.job().ID) })
	}
	if q.Sort == "" || q.Sort == "id" || q.Sort == "-id" {
		step, i := 1, 0
		if q.Sort == "-id" {
			step, i = -1, len(order)-1
		}
		for ; i >= 0 && i < len(order); i += step {
			e := order[i]
			if !match(e) {
				continue
			}
			if p.Total >= q.Offset && len(p.Rows) < q.Limit {
				p.Rows = append(p.Rows, e.row())
			}
			p.Total++
		}
		return p
	}
	key := sortKey(q.Sort, m.count > 0)
	top := &topK{max: q.Offset + q.Limit}
	for _, e := range order {
		if match(e) {
			p.Total++
			top.push(key(e))
		}
	}
	sel := top.sorted()
	for i := q.Offset; i < len(sel); i++ {
		p.Rows = append(p.Rows, sel[i].e.row())
	}
	return p
}

// keyed is a job with its sort key: by n, then s, then job id (s and the
// id in natural order: compareIDs).
type keyed struct {
	n int64
	s string
	e *jobEntry
}

func (a keyed) compare(b keyed) int {
	return cmp.Or(cmp.Compare(a.n, b.n), compareIDs(a.s, b.s), compareIDs(a.e.job().ID, b.e.job().ID))
}

// sortKey returns the key function of an order (default: job id). In a
// partitioned deployment, sequences of different partitions do not compare:
// "updated" orders by the time of the last decision.
func sortKey(order string, partitioned bool) func(e *jobEntry) keyed {
	switch order {
	case "deadline":
		// Live leases first, the earliest deadline first.
		return func(e *jobEntry) keyed {
			if d, ok := deadline(e.job()); ok {
				return keyed{n: d, e: e}
			}
			return keyed{n: math.MaxInt64, e: e}
		}
	case "updated":
		if partitioned {
			return func(e *jobEntry) keyed { return keyed{n: -e.lastAt(), e: e} }
		}
		return func(e *jobEntry) keyed { return keyed{n: -int64(e.lastSeq()), e: e} }
	case "holder":
		return func(e *jobEntry) keyed { return keyed{s: e.job().Holder, e: e} }
	case "state":
		return func(e *jobEntry) keyed { return keyed{s: e.job().State.String(), e: e} }
	case "anomalies":
		return func(e *jobEntry) keyed { return keyed{n: -int64(e.anomalies), e: e} }
	}
	return func(e *jobEntry) keyed { return keyed{e: e} }
}

// topK keeps the max smallest keys pushed, in a max-heap.
type topK struct {
	max int
	h   []keyed
}

// above reports whether h[i] is greater than h[j] (max-heap order).
func (t *topK) above(i, j int) bool { return t.h[i].compare(t.h[j]) > 0 }

func (t *topK) push(x keyed) {
	if len(t.h) < t.max {
		t.h = append(t.h, x)
		for i := len(t.h) - 1; i > 0; {
			p := (i - 1) / 2
			if !t.above(i, p) {
				break
			}
			t.h[i], t.h[p] = t.h[p], t.h[i]
			i = p
		}
		return
	}
	if x.compare(t.h[0]) >= 0 {
		return
	}
	t.h[0] = x
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(t.h) && t.above(l, m) {
			m = l
		}
		if r < len(t.h) && t.above(r, m) {
			m = r
		}
		if m == i {
			break
		}
		t.h[i], t.h[m] = t.h[m], t.h[i]
		i = m
	}
}

// sorted returns the kept keys in ascending order.
func (t *topK) sorted() []keyed {
	slices.SortFunc(t.h, keyed.compare)
	return t.h
}

// job returns the row of job id (on the board, or among the latest
// unleased jobs) and the decision sequences of its last max decisions (all
// if max <= 0), with the number left out.
func (m *model) job(id string, max int) (Row, []uint64, int, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.jobs[id]
	if !ok {
		if e, ok = m.unleased[id]; !ok {
			return Row{}, nil, 0, false
		}
	}
	seqs := e.seqs
	skipped := e.trimmed
	if max > 0 && len(seqs) > max {
		skipped += len(seqs) - max
		seqs = seqs[len(seqs)-max:]
	}
	return e.row(), slices.Clone(seqs), skipped, true
}

// AnomalyQuery selects entries of the anomalies feed, newest first.
type AnomalyQuery struct {
	Before uint64 // only entries with N below this (0: from the newest)
	After  uint64 // only entries with N above this
	Job    string // only about this job
	Kind   string // only of this kind
	Limit  int    // default DefaultPageSize, at most MaxPageSize
}

// AnomalyPage is a page of the anomalies feed.
type AnomalyPage struct {
	Items   []Anomaly `json:"items"`
	Latest  uint64    `json:"latest"`  // N of the newest entry ever
	Oldest  uint64    `json:"oldest"`  // N of the oldest entry still kept
	More    bool      `json:"more"`    // older matching entries exist
	Blocked []Row     `json:"blocked"` // jobs needing an operator (conflict, UNRESOLVED or DEAD), at most MaxPageSize
	Total   int       `json:"blocked_total"`
	Now     int64     `json:"now"`
}

func (m *model) anomalies(q AnomalyQuery, now time.Time) AnomalyPage {
	if q.Limit <= 0 {
		q.Limit = DefaultPageSize
	}
	q.Limit = min(q.Limit, MaxPageSize)
	m.mu.RLock()
	defer m.mu.RUnlock()
	p := AnomalyPage{Latest: m.feedN, Items: []Anomaly{}, Blocked: []Row{}, Total: len(m.blocked), Now: now.UnixMilli()}
	if m.feedN > 0 {
		p.Oldest = m.feedN - uint64(len(m.feed)) + 1
	}
	n := m.feedN
	if q.Before != 0 && q.Before-1 < n {
		n = q.Before - 1
	}
	for ; n > q.After && n >= p.Oldest && n > 0; n-- {
		a, ok := m.anomalyAt(n)
		if !ok {
			break
		}
		if q.Job != "" && a.Job != q.Job || q.Kind != "" && a.Kind != q.Kind {
			continue
		}
		if len(p.Items) == q.Limit {
			p.More = true
			break
		}
		p.Items = append(p.Items, a)
	}
	ids := make([]string, 0, len(m.blocked))
	for id := range m.blocked {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, compareIDs)
	for _, id := range ids[:min(len(ids), MaxPageSize)] {
		p.Blocked = append(p.Blocked, m.jobs[id].row())
	}
	return p
}

// QueuesPage is GET /api/queues: the board's queues view, every queue's
// stats (package api's QueueStats, as the state API answers them) in byte
// order of their names, at most MaxPageSize of them. GET
// /api/queues?queue=Q answers one queue's, with its workers (WorkerList:
// their announcements, standing and counts, as the state API's queue.get).
type QueuesPage struct {
	Queues []api.QueueStats `json:"queues"`
	Total  int              `json:"total"` // queues known
	Now    int64            `json:"now"`   // the server's clock, Unix ms
	// Schedules are, for one queue (?queue=Q), the cron schedules whose
	// jobs go to it (rules revision 10; the state API's schedule.list of
	// the queue, at most MaxPageSize), and ScheduleTotal how many there
	// are.
	Schedules     []api.ScheduleSummary `json:"schedules,omitempty"`
	ScheduleTotal int                   `json:"schedule_total,omitempty"`
}

// queuesPage answers GET /api/queues at now.
func (m *model) queuesPage(now time.Time) QueuesPage {
	qs, _, total := m.am.QueueList("", MaxPageSize, now)
	if qs == nil {
		qs = []api.QueueStats{}
	}
	return QueuesPage{Queues: qs, Total: total, Now: now.UnixMilli()}
}

// queuePage answers GET /api/queues?queue=name at now: the queue's stats
// with its workers, false if the read model knows no such queue.
func (m *model) queuePage(name string, now time.Time) (QueuesPage, bool) {
	r, ok := m.am.Queue(name, now)
	if !ok {
		return QueuesPage{}, false
	}
	sr := m.am.Schedules(api.SchedulesRequest{Queue: name, Limit: MaxPageSize}, now)
	return QueuesPage{Queues: []api.QueueStats{r.Queue}, Total: m.am.QueueCount(), Now: now.UnixMilli(),
		Schedules: sr.Schedules, ScheduleTotal: sr.Total}, true
}

// deadJobs lists the ids of queue's DEAD jobs (those whose last attempt
// ended for lastReason, when not ""), in byte order, at most max of them,
// whether more remain, and whether the read model was caught up with the
// decision streams when it read them.
func (m *model) deadJobs(queue, lastReason string, max int, now time.Time) (ids []string, more, caughtUp bool) {
	caughtUp = true
	after := ""
	for {
		r := m.am.List(api.JobsRequest{Queue: queue, State: events.StateDead.String(), After: after, Limit: api.MaxJobsLimit}, now)
		caughtUp = caughtUp && r.CaughtUp
		for _, j := range r.Jobs {
			if lastReason != "" && j.LastReason != lastReason {
				continue
			}
			if len(ids) == max {
				return ids, true, caughtUp
			}
			ids = append(ids, j.ID)
		}
		if after = r.Next; after == "" {
			return ids, false, caughtUp
		}
	}
}

// takeChanges returns and clears the set of jobs changed since the last call.
func (m *model) takeChanges() (map[string]struct{}, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.changed) == 0 && m.added == 0 {
		return nil, 0
	}
	ch, added := m.changed, m.added
	m.changed, m.added = make(map[string]struct{}), 0
	return ch, added
}

// jobRow returns the row of job id, on the board or unleased (a job page).
func (m *model) jobRow(id string) (Row, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.jobs[id]
	if !ok {
		e, ok = m.unleased[id]
	}
	if !ok {
		return Row{}, false
	}
	return e.row(), true
}

// rows returns the rows of the given jobs that are on the board.
func (m *model) rows(ids []string) []Row {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]Row, 0, len(ids))
	for _, id := range ids {
		if e, ok := m.jobs[id]; ok {
			out = append(out, e.row())
		}
	}
	return out
}

// feedSince returns the anomalies after entry n (oldest first), at most
// limit (the newest ones), and how many were left out.
func (m *model) feedSince(n uint64, limit int) ([]Anomaly, uint64, int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	latest := m.feedN
	if n >= latest {
		return nil, latest, 0
	}
	from := n + 1
	skipped := 0
	if latest-n > uint64(limit) {
		skipped = int(latest - n - uint64(limit))
		from = latest - uint64(limit) + 1
	}
	var out []Anomaly
	for i := from; i <= latest; i++ {
		if a, ok := m.anomalyAt(i); ok {
			out = append(out, a)
		} else {
			skipped++
		}
	}
	return out, latest, skipped
}

// summary is the model's headline numbers.
type summary struct {
	Seq      uint64   `json:"seq"`            // partitioned: the sum over partitions
	Seqs     []uint64 `json:"seqs,omitempty"` // partitioned: per partition
	Jobs     int      `json:"jobs"`
	Blocked  int      `json:"blocked"`
	Feed     uint64   `json:"feed"`
	CaughtUp bool     `json:"caught_up"`
}

func (m *model) summary() summary {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := summary{Jobs: len(m.jobs), Blocked: len(m.blocked), Feed: m.feedN}
	s.Seq, s.Seqs, s.CaughtUp = m.positions()
	return s
}
