package api

import (
	"sync"
	"time"

	"github.com/maknow/tenure/events"
)

// nStates bounds events.State values (index of the per-state sets).
const nStates = 16

// entry is the read model of one job: its latest projection (every
// decision carries the job's whole projection) and its last decision.
type entry struct {
	job    events.Job
	part   uint32
	seq    uint64
	cause  uint64
	at     int64
	kind   events.Kind
	reason events.Reason
}

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
	caughtUp bool
}

// Model is the read model of the API: the latest projection of every job
// the coordinator keeps (a job leaves it when it is retired), indexed by
// state and by queue and state, and the queues' aggregates (Queues). It is
// fed by the decision streams read from their first decision (Apply), the
// decision stream being the truth. It is safe for concurrent use.
type Model struct {
	mu      sync.Mutex
	count   uint32
	parts   []position
	jobs    map[string]*entry
	all     stateSets            // every job by state
	byQueue map[string]stateSets // each queue's jobs by state
	queues  *Queues
	bad     uint64 // undecodable decisions skipped
}

// NewModel returns the empty read model of a deployment of count
// partitions (0: unpartitioned).
func NewModel(count uint32) *Model {
	return &Model{count: count, parts: make([]position, max(count, 1)), jobs: make(map[string]*entry),
		byQueue: make(map[string]stateSets), queues: NewQueues(count)}
}

func (m *Model) partition(k uint32) events.Partition {
	return events.Partition{Index: k, Count: m.count}
}

// Apply folds decision d, stored at sequence seq of partition part's
// decision stream (part 0 when unpartitioned), into the model.
func (m *Model) Apply(part uint32, seq uint64, d *events.Decision) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.parts[part].seq = seq
	if d.Capacity != nil && (d.Kind == events.KindCapacitySet || d.Kind == events.KindWithdrawn) {
		// The worker is the addressee: a withdrawal (slots 0, after a
		// missed ACK) is caused by another input than the worker's.
		m.queues.Capacity(part, d.Addressee, *d.Capacity)
	}
	if d.Standing != nil { // revision 5: the addressee's standing on a queue
		m.queues.Standing(part, d.Addressee, *d.Standing)
	}
	id := d.Job.ID
	if id == "" || id == events.NoJob || !m.partition(part).Owns(id) {
		return // a rejection about a job of another partition is not its projection
	}
	e := m.jobs[id]
	if d.Kind == events.KindRetired {
		if e != nil {
			m.queues.Observe(part, &e.job, nil, d)
			m.unindex(e)
			delete(m.jobs, id)
		}
		return
	}
	if !d.Job.Exists() {
		return // a verdict about no job (a typo, a refused offer): the coordinator keeps none
	}
	if e == nil {
		e = &entry{part: part}
		m.jobs[id] = e
		m.queues.Observe(part, nil, &d.Job, d)
	} else {
		m.queues.Observe(part, &e.job, &d.Job, d)
		if e.job.State == d.Job.State && e.job.Queue == d.Job.Queue {
			e.record(seq, d)
			return
		}
		m.unindex(e)
	}
	e.record(seq, d)
	m.index(e)
}

func (e *entry) record(seq uint64, d *events.Decision) {
	j := d.Job
	j.Reveal(&e.job) // withheld fields (revision 5): the previous projection's
	e.job = j
	e.seq, e.cause, e.at, e.kind, e.reason = seq, d.Cause, d.At, d.Kind, d.Reason
}

func (m *Model) index(e *entry) {
	j := &e.job
	m.all.add(j.State, j.ID)
	if j.Queue != "" {
		s := m.byQueue[j.Queue]
		s.add(j.State, j.ID)
		m.byQueue[j.Queue] = s
	}
}

func (m *Model) unindex(e *entry) {
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

// Skip records an undecodable decision at seq of partition part.
func (m *Model) Skip(part uint32, seq uint64) {
	m.mu.Lock()
	m.parts[part].seq = seq
	m.bad++
	m.mu.Unlock()
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
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.parts[part].seq
}

// position is the model's Position at now; the caller holds the lock.
func (m *Model) position(now time.Time) Position {
	p := Position{CaughtUp: true, Now: events.FormatTime(now.UnixNano())}
	for _, q := range m.parts {
		p.Seq += q.seq
		p.CaughtUp = p.CaughtUp && q.caughtUp
	}
	if m.count > 0 {
		p.Seqs = make([]uint64, len(m.parts))
		for i, q := range m.parts {
			p.Seqs[i] = q.seq
		}
	}
	return p
}

// Jobs is the number of jobs in the model.
func (m *Model) Jobs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.jobs)
}

// Job answers job.get: the projection of job id, false if the model has
// none (with the position, which says whether it has caught up).
func (m *Model) Job(id string, now time.Time) (JobReply, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := JobReply{Position: m.position(now)}
	e := m.jobs[id]
	if e == nil {
		return r, false
	}
	r.Job = events.AppendJob(nil, &e.job)
	r.Partition = m.partition(e.part).Token()
	r.Last = e.last()
	return r, true
}

func (e *entry) last() LastDecision {
	return LastDecision{Seq: e.seq, Cause: e.cause, At: events.FormatTime(e.at), Kind: e.kind.String(), Reason: string(e.reason)}
}

// List answers job.list (q's fields already checked: Queue "" or a token,
// State "" or a state name, Limit within bounds). The work is a binary
// search per state and a merge of at most one cursor per state per job
// returned: never a scan of the jobs.
func (m *Model) List(q JobsRequest, now time.Time) JobsReply {
	m.mu.Lock()
	defer m.mu.Unlock()
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

func (m *Model) summary(e *entry) JobSummary {
	j := &e.job
	s := JobSummary{ID: j.ID, Partition: m.partition(e.part).Token(), State: j.State.String(), Generation: j.Generation,
		Holder: j.Holder, Conflict: j.Conflict, Last: e.last()}
	if j.Result != events.OutcomeNone {
		s.Result = j.Result.String()
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
	}
	return s
}

// Queue answers queue.get: the stats of queue name at now, false if the
// model knows no such queue.
func (m *Model) Queue(name string, now time.Time) (QueueReply, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.queues.Stats(name, now)
	return QueueReply{Queue: st, Position: m.position(now)}, ok
}

// Queues answers queue.list (q's fields already checked).
func (m *Model) Queues(q QueuesRequest, now time.Time) QueuesReply {
	m.mu.Lock()
	defer m.mu.Unlock()
	qs, next, total := m.queues.List(q.After, q.Limit, now)
	if qs == nil {
		qs = []QueueStats{}
	}
	return QueuesReply{Queues: qs, Next: next, Total: total, Limit: q.Limit, Position: m.position(now)}
}
