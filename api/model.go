package api

import (
	"sync"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
)

// nStates bounds events.State values (index of the per-state sets).
const nStates = 16

// Entry is the read model's record of one job it keeps: the job's latest
// projection (every decision carries the job's whole projection), its last
// decision, and where the worker's account of its latest result is (the
// result input). Entries are the Model's: a View reads them while it
// holds the model's lock (Model.Mutex), and never changes them.
type Entry struct {
	job    events.Job
	part   uint32
	seq    uint64 // decision stream sequence of its last decision; 0 for a job restored from a snapshot, none read since
	cause  uint64
	at     int64
	kind   events.Kind
	reason events.Reason
	// result is the input stream sequence of the input that recorded the
	// job's latest result (the cause of its latest completed decision), 0
	// when none was read; worker is that input as read, once read.
	result uint64
	worker *WorkerResult
	gone   bool
}

// Job is the job's projection after its last decision.
func (e *Entry) Job() *events.Job { return &e.job }

// Partition is the index of the job's partition (0 when unpartitioned).
func (e *Entry) Partition() uint32 { return e.part }

// Last is the job's last decision read: its decision stream sequence (0
// when the job was restored from a snapshot and no decision about it was
// read since: cause, kind and reason are then zero too, and at the time of
// the snapshot), cause, time, kind and reason.
func (e *Entry) Last() (seq, cause uint64, at int64, kind events.Kind, reason events.Reason) {
	return e.seq, e.cause, e.at, e.kind, e.reason
}

// Restored reports whether the job's projection is the stored snapshot's,
// no decision about it having been read since.
func (e *Entry) Restored() bool { return e.seq == 0 }

// ResultInput is the input stream sequence of the input that recorded the
// job's latest result (0: none read), and that input as read, if it was
// (nil before).
func (e *Entry) ResultInput() (uint64, *WorkerResult) { return e.result, e.worker }

// Gone reports whether the entry left the model (its job retired, or its
// partition restored from a snapshot).
func (e *Entry) Gone() bool { return e.gone }

// stateSets are job ids by state.
type stateSets [nStates]*idSet

func (s *stateSets) add(st events.State, id string) {
	if s[st] == nil {
		s[st] = &idSet{}
	}
	s[st].Add(id)
}

func (s *stateSets) remove(st events.State, id string) {
	if set := s[st]; set != nil {
		set.Remove(id)
		if set.Len() == 0 {
			s[st] = nil
		}
	}
}

func (s *stateSets) empty() bool {
	for _, set := range s {
		if set != nil {
			return false
		}
	}
	return true
}

// position is how far the model has read one decision stream.
type position struct {
	seq      uint64
	at       int64 // the time of the last decision applied
	caughtUp bool
	restored uint64 // the decision sequence of the snapshot the partition was restored from (0: read from its first decision)
}

// View is what a reader keeps beside a Model and the Model keeps up to
// date: the web board's order of the jobs, the decisions of each job, its
// anomalies feed (package ui). Its methods are called, in the order of
// the decisions, while the model's lock is held for writing; they must
// not call the Model's methods.
type View interface {
	// Applied says that decision d, stored at seq of partition part's
	// decision stream, was applied. e is the entry of d's job, nil when
	// the model keeps none for it (a decision about no job or about
	// another partition's, a job that never had a lease); after a
	// retirement e is the entry that left (Gone). prev is the job's
	// projection before d, nil when the model did not keep the job.
	Applied(part uint32, seq uint64, d *events.Decision, e, prev *Entry)
	// Restored says that partition part was restored from the stored
	// snapshot at decision sequence seq: the entries gone left it (each
	// Gone), the entries added are the snapshot's jobs.
	Restored(part uint32, seq uint64, gone, added []*Entry)
	// Skipped says that seq of partition part's decision stream holds no
	// decision that decodes.
	Skipped(part uint32, seq uint64)
}

// Model is the read model of the decision streams that the state API
// answers from and the web board (package ui, a View) shows: the latest
// projection of every job the coordinator keeps (a job leaves it when it
// is retired), indexed by state and by queue and state, and the queues'
// aggregates (Queues). It is fed by the decision streams, read from their
// first decision (Apply), or, when their first segments were archived and
// removed, from the stored snapshot (Restore) and the decisions after it.
// It is safe for concurrent use.
type Model struct {
	mu      sync.RWMutex
	count   uint32
	parts   []position
	jobs    map[string]*Entry
	all     stateSets            // every job by state
	byQueue map[string]stateSets // each queue's jobs by state
	queues  *Queues
	scheds  map[string]*schedEntry // revision 10: the schedules, by id
	bad     uint64                 // undecodable decisions skipped
	views   []View
}

// NewModel returns the empty read model of a deployment of count
// partitions (0: unpartitioned).
func NewModel(count uint32) *Model {
	return &Model{count: count, parts: make([]position, max(count, 1)), jobs: make(map[string]*Entry),
		byQueue: make(map[string]stateSets), queues: NewQueues(count)}
}

// Attach makes v a view of the model: told of every change from now on.
// Attach views before the model is fed.
func (m *Model) Attach(v View) {
	m.mu.Lock()
	m.views = append(m.views, v)
	m.mu.Unlock()
}

// Mutex is the lock of the model's state. A View holds it (RLock) while
// it reads Entries; the model holds it (Lock) while it tells its views of
// a change.
func (m *Model) Mutex() *sync.RWMutex { return &m.mu }

// Partitions is the partition count of the model's deployment (0:
// unpartitioned).
func (m *Model) Partitions() uint32 { return m.count }

func (m *Model) partition(k uint32) events.Partition {
	return events.Partition{Index: k, Count: m.count}
}

// Apply folds decision d, stored at sequence seq of partition part's
// decision stream (part 0 when unpartitioned), into the model.
func (m *Model) Apply(part uint32, seq uint64, d *events.Decision) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.parts[part].seq, m.parts[part].at = seq, d.At
	e, prev := m.apply(part, seq, d)
	for _, v := range m.views {
		v.Applied(part, seq, d, e, prev)
	}
}

// apply is Apply with the lock held: the job's entry after d (nil if the
// model keeps none) and a copy of it before (nil if it kept none).
func (m *Model) apply(part uint32, seq uint64, d *events.Decision) (e, prev *Entry) {
	if d.Capacity != nil && (d.Kind == events.KindCapacitySet || d.Kind == events.KindWithdrawn) {
		// The worker is the addressee: a withdrawal (slots 0, after a
		// missed ACK) is caused by another input than the worker's.
		m.queues.Capacity(part, d.Addressee, *d.Capacity)
	}
	if d.Standing != nil { // revision 5: the addressee's standing on a queue
		m.queues.Standing(part, d.Addressee, *d.Standing)
	}
	if d.Kind == events.KindLimitSet && d.Limit != nil { // revision 9: the limit in force after it
		m.queues.Limit(part, *d.Limit)
	}
	if d.Schedule != nil { // revision 10
		m.applySchedule(part, d)
	}
	id := d.Job.ID
	if id == "" || id == events.NoJob || !m.partition(part).Owns(id) {
		return nil, nil // a rejection about a job of another partition is not its projection
	}
	e = m.jobs[id]
	if e != nil {
		before := *e
		prev = &before
	}
	if d.Kind == events.KindRetired {
		if e != nil {
			m.queues.Observe(part, &e.job, nil, d)
			m.unindex(e)
			delete(m.jobs, id)
			e.record(seq, d)
			e.gone = true
		}
		return e, prev
	}
	if !d.Job.Exists() {
		return nil, nil // a verdict about no job (a typo, a refused offer): the coordinator keeps none
	}
	if e == nil {
		e = &Entry{part: part}
		m.jobs[id] = e
		m.queues.Observe(part, nil, &d.Job, d)
	} else {
		m.queues.Observe(part, &e.job, &d.Job, d)
		if e.job.State == d.Job.State && e.job.Queue == d.Job.Queue {
			e.record(seq, d)
			return e, prev
		}
		m.unindex(e)
	}
	e.record(seq, d)
	m.index(e)
	return e, prev
}

func (e *Entry) record(seq uint64, d *events.Decision) {
	j := d.Job
	j.Reveal(&e.job) // withheld fields (revision 5): the previous projection's
	e.job = j
	e.seq, e.cause, e.at, e.kind, e.reason = seq, d.Cause, d.At, d.Kind, d.Reason
	if d.Kind == events.KindCompleted && e.result != d.Cause {
		// The job's latest result: the worker's account of it is input
		// d.Cause (read when asked for: Results).
		e.result, e.worker = d.Cause, nil
	}
}

func (m *Model) index(e *Entry) {
	j := &e.job
	m.all.add(j.State, j.ID)
	if j.Queue != "" {
		s := m.byQueue[j.Queue]
		s.add(j.State, j.ID)
		m.byQueue[j.Queue] = s
	}
}

func (m *Model) unindex(e *Entry) {
	j := &e.job
	m.all.remove(j.State, j.ID)
	if j.Queue != "" {
		s := m.byQueue[j.Queue]
		s.remove(j.State, j.ID)
		if s.empty() {
			delete(m.byQueue, j.Queue)
		} else {
			m.byQueue[j.Queue] = s
		}
	}
}

// Restore resets partition part of the model to p, a projector restored
// from the coordinator's stored snapshot (projector.Projector.Restore)
// whose last decision is at sequence seq of the partition's decision
// stream: the partition's jobs, standing announcements, standings and limits are
// the snapshot's, and the model goes on from decision seq+1. Its jobs'
// last decisions are unknown (Entry.Restored), and the queues' counts and
// rates, and the workers' counts, start again from the snapshot.
func (m *Model) Restore(part uint32, seq uint64, p *projector.Projector) {
	jobs, caps, standings, limits := p.Jobs(), p.Capacities(), p.Standings(), p.Limits()
	m.mu.Lock()
	defer m.mu.Unlock()
	var gone []*Entry
	for id, e := range m.jobs {
		if e.part != part {
			continue
		}
		m.unindex(e)
		m.queues.drop(part, &e.job)
		delete(m.jobs, id)
		e.gone = true
		gone = append(gone, e)
	}
	m.queues.reset(part)
	now := p.Now()
	added := make([]*Entry, 0, len(jobs))
	for _, j := range jobs {
		if !j.Exists() || !m.partition(part).Owns(j.ID) {
			continue
		}
		e := &Entry{job: j, part: part, at: now}
		m.jobs[j.ID] = e
		m.index(e)
		m.queues.restore(part, &e.job, now)
		added = append(added, e)
	}
	for _, c := range caps {
		m.queues.Capacity(part, c.Worker, c.Capacity)
	}
	for _, s := range standings {
		m.queues.Standing(part, s.Worker, s.Standing)
	}
	for _, l := range limits {
		m.queues.Limit(part, l.Limit)
	}
	m.restoreSchedules(part, p.Schedules())
	m.parts[part] = position{seq: seq, at: now, restored: seq}
	for _, v := range m.views {
		v.Restored(part, seq, gone, added)
	}
}

// Skip records an undecodable decision at seq of partition part.
func (m *Model) Skip(part uint32, seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.parts[part].seq = seq
	m.bad++
	for _, v := range m.views {
		v.Skipped(part, seq)
	}
}

// SetCaughtUp records that partition part's decision stream has been read
// to the end it had when its reading began.
func (m *Model) SetCaughtUp(part uint32) {
	m.mu.Lock()
	m.parts[part].caughtUp = true
	m.mu.Unlock()
}

// PositionOf is the last sequence of partition part's decision stream
// applied.
func (m *Model) PositionOf(part uint32) uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.parts[part].seq
}

// Positions returns, for a View holding the model's lock, the sum of the
// positions in every decision stream (the position itself when
// unpartitioned), the position of each partition (nil when
// unpartitioned), and whether every stream has been caught up with.
func (m *Model) Positions() (sum uint64, seqs []uint64, caughtUp bool) {
	caughtUp = true
	for _, p := range m.parts {
		sum += p.seq
		caughtUp = caughtUp && p.caughtUp
	}
	if m.count > 0 {
		seqs = make([]uint64, len(m.parts))
		for i, p := range m.parts {
			seqs[i] = p.seq
		}
	}
	return sum, seqs, caughtUp
}

// RestoredAt returns, for a View holding the model's lock, the decision
// sequence of the snapshot each partition was restored from (0: read from
// its first decision), in partition order.
func (m *Model) RestoredAt() []uint64 {
	out := make([]uint64, len(m.parts))
	for i, p := range m.parts {
		out[i] = p.restored
	}
	return out
}

// Entry returns, for a View holding the model's lock, the entry of job
// id, nil if the model keeps none.
func (m *Model) Entry(id string) *Entry { return m.jobs[id] }

// Len returns, for a View holding the model's lock, the number of jobs
// in the model.
func (m *Model) Len() int { return len(m.jobs) }

// StateCounts returns, for a View holding the model's lock, the number of
// jobs in each state (indexed by events.State).
func (m *Model) StateCounts() [nStates]int {
	var out [nStates]int
	for st, s := range m.all {
		if s != nil {
			out[st] = s.Len()
		}
	}
	return out
}

// QueuesHeld calls f, for a View holding the model's lock (a shared lock
// will do), with every queue known and the workers held on it at now
// (Queues.Held).
func (m *Model) QueuesHeld(now time.Time, f func(queue string, held int)) {
	m.queues.Held(now, f)
}

// position is the model's Position at now; the caller holds the lock.
func (m *Model) position(now time.Time) Position {
	p := Position{Now: events.FormatTime(now.UnixNano())}
	p.Seq, p.Seqs, p.CaughtUp = m.Positions()
	return p
}

// Jobs is the number of jobs in the model.
func (m *Model) Jobs() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.jobs)
}

// Job answers job.get: the projection of job id, false if the model has
// none (with the position, which says whether it has caught up). The
// worker's account of the job's latest result is in the answer if it was
// read (Results reads it).
func (m *Model) Job(id string, now time.Time) (JobReply, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r := JobReply{Position: m.position(now)}
	e := m.jobs[id]
	if e == nil {
		return r, false
	}
	r.Job = events.AppendJob(nil, &e.job)
	r.Partition = m.partition(e.part).Token()
	r.Last = m.last(e)
	if e.worker != nil {
		w := *e.worker
		r.WorkerResult = &w
	}
	return r, true
}

// last is e's LastDecision.
func (m *Model) last(e *Entry) LastDecision {
	l := LastDecision{Seq: e.seq, Cause: e.cause, At: events.FormatTime(e.at), Kind: e.kind.String(), Reason: string(e.reason)}
	if e.kind == events.KindCompleted && e.job.Result != events.OutcomeNone {
		l.Outcome = e.job.Result.String()
	}
	if e.seq == 0 {
		l.Snapshot = m.parts[e.part].restored
	}
	return l
}

// List answers job.list (q's fields already checked: Queue "" or a token,
// State "" or a state name, Limit within bounds). The work is a binary
// search per state and a merge of at most one cursor per state per job
// returned: never a scan of the jobs.
func (m *Model) List(q JobsRequest, now time.Time) JobsReply {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r := JobsReply{Jobs: []JobSummary{}, Limit: q.Limit, Position: m.position(now)}
	sets := m.all
	if q.Queue != "" {
		sets = m.byQueue[q.Queue]
	}
	pick := sets[:]
	if q.State != "" {
		st, _ := events.ParseState(q.State)
		pick = sets[st : st+1]
	}
	for _, s := range pick {
		if s != nil {
			r.Total += s.Len()
		}
	}
	it := mergeAfter(pick, q.After)
	for {
		id, ok := it.Next()
		if !ok {
			break
		}
		if len(r.Jobs) == q.Limit {
			r.Next = r.Jobs[len(r.Jobs)-1].ID
			break
		}
		r.Jobs = append(r.Jobs, m.summary(m.jobs[id]))
	}
	return r
}

func (m *Model) summary(e *Entry) JobSummary {
	j := &e.job
	s := JobSummary{ID: j.ID, Partition: m.partition(e.part).Token(), State: j.State.String(), Generation: j.Generation,
		Holder: j.Holder, Conflict: j.Conflict, Last: m.last(e), ResultInput: e.result}
	if j.Result != events.OutcomeNone {
		s.Result = j.Result.String()
	}
	if e.worker != nil {
		s.ResultDetail = e.worker.Detail
	}
	switch j.State {
	case events.StateOffered:
		s.Deadline = events.FormatTime(j.AckDeadline)
	case events.StateActive:
		s.Deadline = events.FormatTime(j.ExpiresAt)
	}
	if j.Queue != "" {
		s.Queue, s.Priority, s.Attempt, s.MaxAttempts, s.LastReason = j.Queue, j.Priority, j.Attempt, j.MaxAttempts, string(j.LastReason)
		if j.State == events.StateQueued {
			s.ReadyAt = events.FormatTime(j.ReadyAt)
		}
		s.ScheduledFor = events.FormatTime(ScheduledFor(j))
		s.UniqueKey = j.UniqueKey
		s.ConcurrencyKey = j.ConcurrencyKey
	}
	return s
}

// Queue answers queue.get: the stats of queue name at now, false if the
// model knows no such queue.
func (m *Model) Queue(name string, now time.Time) (QueueReply, bool) {
	m.mu.Lock() // the stats settle what became ready by now
	defer m.mu.Unlock()
	st, ok := m.queues.Stats(name, now)
	return QueueReply{Queue: st, Position: m.position(now)}, ok
}

// Queues answers queue.list (q's fields already checked).
func (m *Model) Queues(q QueuesRequest, now time.Time) QueuesReply {
	m.mu.Lock() // as Queue
	defer m.mu.Unlock()
	qs, next, total := m.queues.List(q.After, q.Limit, now)
	if qs == nil {
		qs = []QueueStats{}
	}
	return QueuesReply{Queues: qs, Next: next, Total: total, Limit: q.Limit, Position: m.position(now)}
}

// QueueList returns the stats at now of at most limit queues in byte
// order of their names, from the first above after, the name to continue
// after ("" when there is no more) and how many queues there are: queue.list
// without its bounds, for the web board's queues view.
func (m *Model) QueueList(after string, limit int, now time.Time) (qs []QueueStats, next string, total int) {
	m.mu.Lock() // as Queue
	defer m.mu.Unlock()
	return m.queues.List(after, limit, now)
}

// QueueCount is the number of queues known.
func (m *Model) QueueCount() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.queues.Len()
}

// ScheduledFor is when a queue job's submit asked it to run from (rules
// revision 8, PROTOCOL.md §26.1): its run_at, or its submit's time plus
// its delay_ms; 0 for a job submitted to run at once.
func ScheduledFor(j *events.Job) int64 {
	switch {
	case j.RunAt != 0:
		return j.RunAt
	case j.Delay != 0:
		return j.SubmittedAt + j.Delay
	}
	return 0
}
