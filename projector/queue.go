package projector

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"

	"github.com/maknow/tenure/events"
)

// Queues (rules revision 4, PROTOCOL.md §22). A queue job is a job whose
// projection names a queue: it exists from its submit on, QUEUED until the
// fold offers it to a worker that announced capacity on its queue, and
// goes back to QUEUED (after a backoff) or ends DEAD when an attempt ends
// without success.
//
// Everything here but the projections and the standing capacities is
// derived state: indexes rebuilt from the jobs by Restore. Readiness is a
// function of the projection (QUEUED, no conflict pending, ready_at at or
// before the fold's time), never of when a deadline fired: matching looks
// at the earliest queued job of each submitter and priority, so that a
// restored projector offers exactly what one that never stopped offers.

// queue is the derived state of one queue.
type queue struct {
	name   string
	subs   map[string]*submitterQ // by submitter: its QUEUED jobs and live leases
	queued int                    // QUEUED jobs in subs (conflicts pending excluded)
	caps   map[string]*capacity   // announcements by worker, until swept at their expiry
	held   map[string]int         // live leases of this queue's jobs, by holder
	jobs   int                    // queue jobs of this queue in the projection
	// Revision 9 (concurrency.go): the limits of concurrency keys (an
	// operator's, which snapshots hold), and the live leases of the
	// queue's jobs by concurrency key (derived).
	limits    map[string]*keyLimit
	keyLive   map[string]int
	keyedPrio [events.MaxPriority + 1]int // ready jobs in the keys' heaps, by priority
}

// submitterQ is one submitter's part of a queue.
type submitterQ struct {
	ready [events.MaxPriority + 1]readyHeap
	live  int // live leases of its jobs in the queue
	// later (revision 8) holds the QUEUED jobs whose ready_at was after
	// the fold's time when they were queued (scheduled, or backing off),
	// all priorities together, by (ready_at, submit_seq); promote moves
	// those ready by now into ready before anything looks at them, so
	// what is observable (turns, matching) is a function of the
	// projections and the time, as a restored fold has it.
	later readyHeap
	// keyed (revision 9) counts its ready jobs that wait in the heaps of
	// their concurrency keys' limits (readyPush) rather than in ready.
	keyed int
}

// promote moves the jobs of s.later that are ready at now into their
// ready heaps (revision 8), or their keys' (revision 9, readyPush).
func (q *queue) promoteSub(s *submitterQ, now int64) {
	for len(s.later) > 0 && s.later[0].ReadyAt <= now {
		j := s.later[0]
		s.later.remove(0)
		j.later = false
		q.readyPush(s, j)
	}
}

// readyCount is how many of s's QUEUED jobs are in its ready heaps (its
// own and, revision 9, its keys').
func (s *submitterQ) readyCount() uint64 {
	n := uint64(s.keyed)
	for i := range s.ready {
		n += uint64(len(s.ready[i]))
	}
	return n
}

// capacity is a worker's standing announcement on a queue.
type capacity struct {
	slots uint64
	until int64
	seq   uint64 // the pull's input sequence: the earliest announcement wins ties
}

// capExpiry is an announcement's place in the sweep heap.
type capExpiry struct {
	until        int64
	queue, owner string
	seq          uint64
}

// readyHeap is a min-heap of one submitter's QUEUED jobs of one priority
// by (ready_at, submit_seq, turn): a total order, so pops are the same
// whatever the array's layout. Until revision 7 one submit made one job,
// so no two had the same submit_seq; the jobs of one batch submit
// (revision 7) share it, and among those of one queue each was given a
// greater turn than the one before it in the array (the submitter's
// QUEUED jobs there, which each of them added to), which never changes.
type readyHeap []*job

func readyLess(a, b *job) bool {
	if a.ReadyAt != b.ReadyAt {
		return a.ReadyAt < b.ReadyAt
	}
	if a.SubmitSeq != b.SubmitSeq {
		return a.SubmitSeq < b.SubmitSeq
	}
	return a.Turn < b.Turn
}

func (h readyHeap) swap(a, b int) {
	h[a], h[b] = h[b], h[a]
	h[a].qPos = a + 1
	h[b].qPos = b + 1
}

func (h *readyHeap) push(j *job) {
	*h = append(*h, j)
	j.qPos = len(*h)
	h.up(len(*h) - 1)
}

func (h *readyHeap) remove(i int) {
	s := *h
	n := len(s) - 1
	j := s[i]
	if i != n {
		s.swap(i, n)
	}
	s[n] = nil
	*h = s[:n]
	if i != n && !h.down(i) {
		h.up(i)
	}
	j.qPos = 0
}

func (h readyHeap) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !readyLess(h[i], h[parent]) {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

func (h readyHeap) down(i0 int) bool {
	i, n := i0, len(h)
	for {
		l := 2*i + 1
		if l >= n || l < 0 {
			break
		}
		c := l
		if r := l + 1; r < n && readyLess(h[r], h[l]) {
			c = r
		}
		if !readyLess(h[c], h[i]) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > i0
}

// queueOf returns queue name, creating it.
func (p *Projector) queueOf(name string) *queue {
	q := p.queues[name]
	if q == nil {
		q = &queue{name: strings.Clone(name), subs: map[string]*submitterQ{}, caps: map[string]*capacity{}, held: map[string]int{}}
		if p.queues == nil {
			p.queues = map[string]*queue{}
		}
		p.queues[q.name] = q
	}
	return q
}

// touched keeps the active list (queues with both queued jobs and
// announcements, sorted by name: the ones matching looks at) and drops a
// queue that holds nothing any more.
func (p *Projector) touched(q *queue) {
	i, found := slices.BinarySearch(p.active, q.name)
	switch on := q.queued > 0 && len(q.caps) > 0; {
	case on && !found:
		p.active = slices.Insert(p.active, i, q.name)
	case !on && found:
		p.active = slices.Delete(p.active, i, i+1)
	}
	if q.jobs == 0 && len(q.caps) == 0 && len(q.limits) == 0 {
		delete(p.queues, q.name)
	}
}

// promote moves the jobs of every submitter that are ready at now out of
// their later heaps (revision 8; before it they are empty).
func (q *queue) promote(now int64) {
	for _, s := range q.subs {
		if len(s.later) > 0 {
			q.promoteSub(s, now)
		}
	}
}

func (q *queue) sub(name string) *submitterQ {
	s := q.subs[name]
	if s == nil {
		s = &submitterQ{}
		q.subs[name] = s
	}
	return s
}

// enqueue puts a QUEUED job in its submitter's heap (not while an
// ownership conflict is pending: it waits for an operator): from revision
// 7 on its later heap when its ready_at is after the fold's time.
func (p *Projector) enqueue(j *job) {
	if j.qPos != 0 || j.Conflict || j.State != events.StateQueued {
		return
	}
	q := p.queueOf(j.Queue)
	s := q.sub(j.Submitter)
	if p.rev >= events.Revision8 && j.ReadyAt > p.now {
		j.later = true
		s.later.push(j)
	} else {
		q.readyPush(s, j)
	}
	q.queued++
	p.touched(q)
}

// dequeue takes a job out of its submitter's heap, if it is there.
func (p *Projector) dequeue(j *job) {
	if j.qPos == 0 {
		return
	}
	q := p.queues[j.Queue]
	s := q.subs[j.Submitter]
	switch {
	case j.later:
		s.later.remove(j.qPos - 1)
		j.later = false
	case j.inKey:
		q.keyRemove(s, j)
	default:
		s.ready[j.Priority].remove(j.qPos - 1)
	}
	q.queued--
	p.dropSub(q, j.Submitter, s)
	p.touched(q)
}

func (p *Projector) dropSub(q *queue, name string, s *submitterQ) {
	if s.live != 0 {
		return
	}
	for i := range s.ready {
		if len(s.ready[i]) != 0 {
			return
		}
	}
	if len(s.later) != 0 || s.keyed != 0 {
		return
	}
	delete(q.subs, name)
}

// liveStart counts a queue job's new live lease.
func (p *Projector) liveStart(j *job) {
	q := p.queueOf(j.Queue)
	q.held[j.Holder]++
	q.sub(j.Submitter).live++
	if j.ConcurrencyKey != "" { // revision 9
		if q.keyLive == nil {
			q.keyLive = map[string]int{}
		}
		q.keyLive[j.ConcurrencyKey]++
	}
}

// liveEnd uncounts it, once the lease stopped being live.
func (p *Projector) liveEnd(j *job) {
	q := p.queues[j.Queue]
	if q.held[j.Holder]--; q.held[j.Holder] == 0 {
		delete(q.held, j.Holder)
	}
	if j.ConcurrencyKey != "" { // revision 9
		if q.keyLive[j.ConcurrencyKey]--; q.keyLive[j.ConcurrencyKey] == 0 {
			delete(q.keyLive, j.ConcurrencyKey)
		}
	}
	s := q.subs[j.Submitter]
	s.live--
	p.dropSub(q, j.Submitter, s)
}

// queueSpec is what a submit sets, with the defaults applied: a second
// submit of the same job is a duplicate when its spec is equal.
type queueSpec struct {
	queue                  string
	priority               int64
	maxAttempts            uint64
	backoff, backoffMax    int64 // ns
	attemptLease, ackLease int64 // ns; 0: the policy's at the offer
	payload                string
	hasPayload             bool
	runAt, delay           int64 // revision 8: as the submit gave them (ns; 0: none)
	uniqueKey              string
	uniqueFor              int64 // ns
	concurrencyKey         string
}

func specOf(in *events.Input) queueSpec {
	s := queueSpec{queue: in.Queue, priority: in.Priority, maxAttempts: in.MaxAttempts,
		backoff: in.BackoffMS * 1e6, backoffMax: in.BackoffMax * 1e6,
		attemptLease: in.LeaseMS * 1e6, ackLease: in.AckTimeoutMS * 1e6,
		payload: in.Payload, hasPayload: in.HasPayload,
		runAt: in.RunAt, delay: in.DelayMS * 1e6,
		uniqueKey: in.UniqueKey, uniqueFor: in.UniqueForMS * 1e6,
		concurrencyKey: in.ConcurrencyKey}
	if s.maxAttempts == 0 {
		s.maxAttempts = events.DefaultMaxAttempts
	}
	if s.backoff == 0 {
		s.backoff = events.DefaultBackoffMS * 1e6
	}
	if s.backoffMax == 0 {
		s.backoffMax = events.DefaultBackoffMax * 1e6
	}
	return s
}

// diff names the first field of a submit (PROTOCOL.md §22.1's order) in
// which j's spec differs from s ("" if none).
func (s *queueSpec) diff(j *events.Job) string {
	switch {
	case s.queue != j.Queue:
		return "queue"
	case s.priority != j.Priority:
		return "priority"
	case s.maxAttempts != j.MaxAttempts:
		return "max_attempts"
	case s.backoff != j.Backoff:
		return "backoff_ms"
	case s.backoffMax != j.BackoffMax:
		return "backoff_max_ms"
	case s.attemptLease != j.AttemptLease:
		return "lease_ms"
	case s.ackLease != j.AttemptAck:
		return "ack_timeout_ms"
	case s.hasPayload != j.HasPayload || s.payload != j.Payload:
		return "payload"
	case s.runAt != j.RunAt:
		return "run_at"
	case s.delay != j.Delay:
		return "delay_ms"
	case s.uniqueKey != j.UniqueKey:
		return "unique_key"
	case s.uniqueFor != j.UniqueFor:
		return "unique_for_ms"
	case s.concurrencyKey != j.ConcurrencyKey:
		return "concurrency_key"
	}
	return ""
}

// copyQueue copies the queue fields of src into dst (a new lease keeps them).
func copyQueue(dst, src *events.Job) {
	dst.Queue, dst.Submitter, dst.Priority, dst.Turn = src.Queue, src.Submitter, src.Priority, src.Turn
	dst.MaxAttempts, dst.Backoff, dst.BackoffMax = src.MaxAttempts, src.Backoff, src.BackoffMax
	dst.AttemptLease, dst.AttemptAck = src.AttemptLease, src.AttemptAck
	dst.Payload, dst.HasPayload = src.Payload, src.HasPayload
	dst.SubmittedAt, dst.SubmitSeq = src.SubmittedAt, src.SubmitSeq
	dst.Attempt, dst.ReadyAt, dst.LastReason = src.Attempt, src.ReadyAt, src.LastReason
	dst.RunAt, dst.Delay = src.RunAt, src.Delay
	dst.UniqueKey, dst.UniqueFor = src.UniqueKey, src.UniqueFor
	dst.ConcurrencyKey = src.ConcurrencyKey
}

// outOfPolicy is the detail of a duration_out_of_policy rejection from
// revision 4 on (empty before: the detail of an older revision's decision
// never changes).
func (p *Projector) outOfPolicy(field string, ms int64) string {
	if p.rev < events.Revision4 {
		return ""
	}
	return field + " " + strconv.FormatInt(ms, 10) + " is outside the policy's min_lease_ms " +
		strconv.FormatInt(p.policy.MinLease/1e6, 10) + " and max_lease_ms " + strconv.FormatInt(p.policy.MaxLease/1e6, 10)
}

func (p *Projector) submit() {
	in := &p.in
	j := p.lookup(in.Job)
	spec := specOf(in)
	if j != nil {
		switch f := spec.diff(&j.Job); {
		case j.Queue == "":
			p.emit(j, events.KindRejected, events.ReasonJobExists, in.Actor)
		case f != "":
			p.emit(j, events.KindRejected, events.ReasonSubmitConflicts, in.Actor).Detail = f + " differs from the job's submit (input " + u64(j.SubmitSeq) + ")"
		default:
			// Not counted among the lease's duplicates: a submit is no
			// message about a lease.
			p.emit(j, events.KindDuplicate, events.ReasonDuplicateSubmit, in.Actor)
		}
		return
	}
	if d := spec.attemptLease; d != 0 && (d < p.policy.MinLease || d > p.policy.MaxLease) {
		r := p.emit(nil, events.KindRejected, events.ReasonDurationOutOfPolicy, in.Actor)
		r.Job.ID = in.Job
		r.Detail = p.outOfPolicy("lease_ms", in.LeaseMS)
		return
	}
	if h := p.keyHolder(spec.queue, spec.uniqueKey); h != nil {
		// Revision 8: another job of the queue holds the key.
		r := p.emit(nil, events.KindDuplicate, events.ReasonDuplicateUniqueKey, in.Actor)
		r.Job.ID = in.Job
		r.DuplicateOf = h.ID
		r.Detail = p.heldDetail(h)
		return
	}
	j = &job{heapIdx: -1}
	j.ID = strings.Clone(in.Job)
	j.Queue = strings.Clone(spec.queue)
	j.Submitter = strings.Clone(in.Actor)
	j.Priority, j.MaxAttempts = spec.priority, spec.maxAttempts
	j.Backoff, j.BackoffMax = spec.backoff, spec.backoffMax
	j.AttemptLease, j.AttemptAck = spec.attemptLease, spec.ackLease
	j.Payload, j.HasPayload = strings.Clone(spec.payload), spec.hasPayload
	j.UniqueKey, j.UniqueFor = strings.Clone(spec.uniqueKey), spec.uniqueFor
	j.ConcurrencyKey = strings.Clone(spec.concurrencyKey)
	j.State = events.StateQueued
	j.SubmittedAt, j.SubmitSeq, j.ReadyAt = p.now, p.cause, p.now
	// Revision 8: a job scheduled for later (run_at, delay_ms) is ready
	// then; a run_at in the past is ready at once.
	j.RunAt, j.Delay = spec.runAt, spec.delay
	switch {
	case j.RunAt > p.now:
		j.ReadyAt = j.RunAt
	case j.Delay != 0:
		j.ReadyAt = addTime(p.now, j.Delay)
	}
	q := p.queueOf(j.Queue)
	if s := q.subs[j.Submitter]; s != nil {
		// Revision 8 counts only the jobs ready now: a submitter's jobs
		// scheduled for later (or backing off) are not ahead of this one.
		// (Before revision 8 later is always empty.)
		q.promoteSub(s, p.now)
		j.Turn = s.readyCount()
	}
	p.jobs[j.ID] = j
	q.jobs++
	p.takeKey(j)
	p.schedule(j) // its wake-up at ready_at, when scheduled for later (revision 8)
	p.enqueue(j)
	p.emit(j, events.KindSubmitted, events.ReasonOk, in.Actor)
}

func (p *Projector) pull() {
	in := &p.in
	q := p.queueOf(in.Queue)
	worker := in.Actor
	var until int64
	if in.Slots == 0 {
		delete(q.caps, worker)
	} else {
		ttl := in.TTLMS
		if ttl == 0 {
			ttl = events.DefaultCapacityTTL
		}
		until = addTime(p.now, ttl*1e6)
		if c := q.caps[worker]; c != nil {
			// Its expiry is in the sweep heap already, at an earlier or
			// equal until: sweep moves it on. One entry per announcement,
			// however often it is made again.
			c.slots, c.until, c.seq = in.Slots, until, p.cause
		} else {
			worker = strings.Clone(worker)
			q.caps[worker] = &capacity{slots: in.Slots, until: until, seq: p.cause}
			p.expiries.push(capExpiry{until: until, queue: q.name, owner: worker, seq: p.cause})
		}
	}
	p.touched(q)
	d := p.emit(nil, events.KindCapacitySet, events.ReasonOk, in.Actor)
	d.Capacity = &events.Capacity{Queue: q.name, Slots: in.Slots, Until: until}
	if p.rev >= events.Revision5 {
		d.Standing = p.touchStanding(q.name, in.Actor)
	}
}

// surplus reports whether the decline of queue job j's offer returns
// surplus (revision 5): its worker lowered its announcement on the queue
// below the live leases it holds there, this offer included, before
// declining (a worker serving several partitions declines the offers it
// got more of than it has free slots, PROTOCOL.md §22.7), or withdrew it.
// Such a decline is no refusal.
//
// From revision 6 on an announcement that expired counts as withdrawn. A
// pull that shortens an announcement leaves its sweep at the old expiry,
// so under revision 5 the expired announcement was still read here by a
// projector that never stopped, while one restored from a snapshot (which
// holds only the announcements that stand) had none: the same log decided
// two ways (TESTING.md, finding 1 of the exhaustive check). Revision 5
// keeps its decisions.
func (p *Projector) surplus(j *job) bool {
	q := p.queues[j.Queue]
	c := q.caps[j.Holder]
	return c == nil || p.rev >= events.Revision6 && c.until <= p.now || uint64(q.held[j.Holder]) > c.slots
}

// withdraw ends worker's standing announcement on queue, if any, with a
// withdrawn decision (slots 0, reason why) addressed to it.
func (p *Projector) withdraw(queue, worker string, why events.Reason) {
	q := p.queues[queue]
	if q == nil {
		return
	}
	c := q.caps[worker]
	if c == nil || c.until <= p.now {
		return
	}
	delete(q.caps, worker)
	p.touched(q)
	d := p.emit(nil, events.KindWithdrawn, why, worker)
	d.Capacity = &events.Capacity{Queue: queue, Slots: 0}
	d.Detail = "the announcement of input " + u64(c.seq) + " is withdrawn: an offer to " + worker + " was not ACKed in time"
}

// sweep drops the announcements that expired by now. Nothing observable
// changes (an expired announcement is never used nor encoded): it bounds
// the memory a worker's announcements on ever new queue names could take.
func (p *Projector) sweep() {
	for len(p.expiries) > 0 && p.expiries[0].until <= p.now {
		e := p.expiries.pop()
		q := p.queues[e.queue]
		if q == nil {
			continue
		}
		switch c := q.caps[e.owner]; {
		case c == nil:
		case c.until <= p.now:
			delete(q.caps, e.owner)
			p.touched(q)
		default: // announced again since: its expiry moved
			p.expiries.push(capExpiry{until: c.until, queue: q.name, owner: e.owner, seq: c.seq})
		}
	}
}

// match offers ready queued jobs to free slots (PROTOCOL.md §22.3), at
// most events.MaxOffersPerInput; p.pending records whether matches remain.
func (p *Projector) match() {
	p.pending = false
	limit := events.MaxOffersPerInput
	if p.offerLimit > 0 {
		limit = p.offerLimit
	}
	if p.rev >= events.Revision5 {
		p.matchFair(limit)
		return
	}
	n := 0
	for i := 0; i < len(p.active); i++ {
		name := p.active[i]
		q := p.queues[name]
		for {
			j := q.pickJob(p.now)
			if j == nil {
				break
			}
			w := q.pickWorker(p.now)
			if w == "" {
				break
			}
			if n == limit {
				p.pending = true
				return
			}
			n++
			p.assign(q, j, w)
			if len(p.active) <= i || p.active[i] != name {
				i-- // the queue left the active list: the next one moved here
				break
			}
		}
	}
}

// matchFair is matching from revision 5 on: the worker first, the one
// that holds the fewest of the queue's live leases among those eligible
// (an announcement standing, not held, fewer live leases of the queue
// than both its slots and its window), ties to the earliest announcement;
// then the job for it (pickJobFor). A worker for which no ready job is
// allowed is passed over until the next offer changes the ready jobs.
func (p *Projector) matchFair(limit int) {
	n := 0
	var passed []string
	for i := 0; i < len(p.active); i++ {
		name := p.active[i]
		q := p.queues[name]
		passed = passed[:0]
		for q.pickJob(p.now) != nil {
			w := p.pickWorkerFair(q, passed)
			if w == "" {
				break
			}
			j := q.pickJobFor(p.now, w)
			if j == nil {
				passed = append(passed, w)
				continue
			}
			if n == limit {
				p.pending = true
				return
			}
			n++
			p.assign(q, j, w)
			if len(p.active) <= i || p.active[i] != name {
				i-- // the queue left the active list: the next one moved here
				break
			}
			// The offer took a head of the ready jobs: the job behind it
			// may be allowed for a worker passed over.
			passed = passed[:0]
		}
	}
}

// pickWorkerFair is the eligible worker of q holding the fewest of its
// live leases, ties to the earliest announcement, but for those passed;
// "" if none.
func (p *Projector) pickWorkerFair(q *queue, passed []string) string {
	best, bestHeld, bestSeq := "", uint64(0), uint64(0)
	for w, c := range q.caps {
		held := uint64(q.held[w])
		if c.until <= p.now || held >= c.slots {
			continue
		}
		st := p.standingOf(q.name, w)
		if st.heldUntil > p.now || held >= st.window || slices.Contains(passed, w) {
			continue
		}
		if best == "" || held < bestHeld || held == bestHeld && c.seq < bestSeq {
			best, bestHeld, bestSeq = w, held, c.seq
		}
	}
	return best
}

// pickJobFor is pickJob for worker w (revision 5): a job whose last
// attempt w ended by refusing it (isRefusal: declined, released, not
// ACKed, left to expire) is not offered to w again while another worker
// announces on the queue, so that a job one worker cannot (or will not)
// run goes to the others. Such a job at the head of its submitter's
// ready jobs keeps that submitter's others from w for now.
func (q *queue) pickJobFor(now int64, w string) *job {
	others := -1 // unknown until a refused job asks
	q.promote(now)
	if !q.rateOK(now) { // revision 9: the queue's rate limit
		return nil
	}
	for pr := events.MaxPriority; pr >= 0; pr-- {
		var best *job
		for _, s := range q.subs {
			h := s.ready[pr]
			if len(h) == 0 || h[0].ReadyAt > now {
				continue
			}
			c := h[0]
			if c.Holder == w && isRefusal(c.LastReason) {
				if others < 0 {
					others = q.othersAnnounce(now, w)
				}
				if others == 1 {
					continue
				}
			}
			if best == nil || c.Turn < best.Turn || c.Turn == best.Turn && readyLess(c, best) {
				best = c
			}
		}
		if len(q.limits) != 0 {
			best = q.pickKeyed(pr, now, best, func(c *job) bool {
				if c.Holder == w && isRefusal(c.LastReason) {
					if others < 0 {
						others = q.othersAnnounce(now, w)
					}
					return others == 1
				}
				return false
			})
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// othersAnnounce is 1 if a worker other than w has an announcement
// standing on q at now, else 0. (An announcement made again with a
// shorter ttl stays in caps until its first expiry's sweep: caps may hold
// some that no longer stand.)
func (q *queue) othersAnnounce(now int64, w string) int {
	for o, c := range q.caps {
		if o != w && c.until > now {
			return 1
		}
	}
	return 0
}

// matchable reports whether some queue has a ready job and a free slot.
func (p *Projector) matchable() bool {
	for _, name := range p.active {
		q := p.queues[name]
		if q.pickJob(p.now) == nil {
			continue
		}
		if p.rev < events.Revision5 {
			if q.pickWorker(p.now) != "" {
				return true
			}
			continue
		}
		var passed []string
		for w := p.pickWorkerFair(q, nil); w != ""; w = p.pickWorkerFair(q, passed) {
			if q.pickJobFor(p.now, w) != nil {
				return true
			}
			passed = append(passed, w)
		}
	}
	return false
}

// pickJob is the queue's next job to offer, if any is ready: at the
// highest priority that has one, each submitter's earliest ready job (by
// ready_at, then submit_seq) competes, and the least turn wins (then the
// least ready_at, then submit_seq). A job's turn is how many of its
// submitter's jobs were queued before it, so submitters take turns: one
// submitter's flood of a thousand jobs has turns 0 to 999, and another
// submitter's job submitted later, turn 0, goes after the flood's first.
func (q *queue) pickJob(now int64) *job {
	q.promote(now)
	if !q.rateOK(now) { // revision 9: the queue's rate limit
		return nil
	}
	for pr := events.MaxPriority; pr >= 0; pr-- {
		var best *job
		for _, s := range q.subs {
			h := s.ready[pr]
			if len(h) == 0 || h[0].ReadyAt > now {
				continue
			}
			if c := h[0]; best == nil || c.Turn < best.Turn || c.Turn == best.Turn && readyLess(c, best) {
				best = c
			}
		}
		if len(q.limits) != 0 {
			best = q.pickKeyed(pr, now, best, nil)
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// pickWorker is the worker with the most free slots among the queue's
// standing announcements, ties to the earliest; "" if none has one.
func (q *queue) pickWorker(now int64) string {
	best, bestFree, bestSeq := "", uint64(0), uint64(0)
	for w, c := range q.caps {
		held := uint64(q.held[w])
		if c.until <= now || held >= c.slots {
			continue
		}
		if free := c.slots - held; best == "" || free > bestFree || free == bestFree && c.seq < bestSeq {
			best, bestFree, bestSeq = w, free, c.seq
		}
	}
	return best
}

// assign offers j to worker w, or ends it DEAD if it reached the policy's
// max_generations.
//
// From revision 5 on the policy's max_generations does not bound a queue
// job (its attempt budget does: another worker's refusals must never end
// it); only events.MaxSeq does, the largest generation a worker can name,
// which no deployment reaches (2^53 offers: 285 years at a million a
// second).
func (p *Projector) assign(q *queue, j *job, w string) {
	p.dequeue(j)
	if bound := p.policy.MaxGenerations; p.rev >= events.Revision5 && j.Generation >= events.MaxSeq ||
		p.rev < events.Revision5 && j.Generation >= bound {
		j.State = events.StateDead
		j.EndedAt = p.now
		p.schedule(j)
		d := p.emit(j, events.KindDead, events.ReasonMaxGenerations, j.Submitter)
		d.Detail = "generation " + u64(j.Generation) + " reached the policy's max_generations"
		if p.rev >= events.Revision5 {
			d.Detail = "generation " + u64(j.Generation) + " is the largest a worker can name (2^53-1)"
		}
		return
	}
	dur := p.policy.DefaultLease
	if j.AttemptLease != 0 {
		dur = min(max(j.AttemptLease, p.policy.MinLease), p.policy.MaxLease)
	}
	p.newLease(j, w, dur)
	j.State = events.StateOffered
	j.AckState = events.AckPending
	ack := p.policy.AckTimeout
	if j.AttemptAck != 0 {
		ack = j.AttemptAck
	}
	j.AckDeadline = addTime(p.now, ack)
	j.Attempt++
	j.ReadyAt = 0
	p.takeTokens(q, j) // revision 9: its rate limits' tokens
	p.liveStart(j)
	p.schedule(j)
	p.emit(j, events.KindAssigned, events.ReasonOk, j.Holder)
}

// attemptEnd follows the verdict or deadline that ended the live lease of
// queue job j (PROTOCOL.md §22.4): the lease is uncounted, and when the job
// goes on (retry) it is queued again, after a backoff if the attempt
// counted, or ends DEAD when the attempt counted and the budget is spent.
//
// From revision 5 on a job whose cancellation was requested never goes on:
// once an operator's cancel is accepted, no later decision offers the job
// again, whatever its holder reconciles with.
func (p *Projector) attemptEnd(j *job, reason events.Reason, counted, retry bool) {
	if j.Queue == "" {
		return
	}
	p.liveEnd(j)
	if p.rev >= events.Revision5 && j.CancelReq {
		retry = false
	}
	if !retry {
		return
	}
	j.LastReason = reason
	if !counted {
		j.Attempt--
		j.ReadyAt = j.EndedAt
	} else if j.Attempt >= j.MaxAttempts {
		j.State = events.StateDead
		p.schedule(j)
		p.emit(j, events.KindDead, reason, j.Submitter).Detail = "attempt " + u64(j.Attempt) + " of " + u64(j.MaxAttempts)
		return
	} else {
		j.ReadyAt = addTime(j.EndedAt, backoff(j.ID, j.Attempt, j.Backoff, j.BackoffMax))
	}
	j.State = events.StateQueued
	p.schedule(j)
	p.enqueue(j)
	d := p.emit(j, events.KindRequeued, reason, j.Submitter)
	if counted {
		d.Detail = "attempt " + u64(j.Attempt) + " of " + u64(j.MaxAttempts) + " ended; ready at " + events.FormatTime(j.ReadyAt)
	} else {
		d.Detail = "not counted (" + u64(j.Attempt) + " of " + u64(j.MaxAttempts) + " attempts so far); ready at once"
	}
	if j.Conflict {
		d.Detail += "; held until an operator clears the ownership conflict"
	}
}

// backoffDomain separates the backoff jitter's hash from any other.
const backoffDomain = "tenure backoff v1\x00"

// backoff is the wait before attempt k+1 of job id (k >= 1 attempts
// counted): d = min(max, base * 2^(k-1)) in whole milliseconds, less a
// jitter of up to a quarter of it derived from the job id and k.
func backoff(id string, k uint64, base, maxD int64) int64 {
	d := base / 1e6
	cap := maxD / 1e6
	for i := uint64(1); i < k && d < cap; i++ {
		d *= 2 // base and cap are at most 30 days in ms: no overflow before d >= cap
	}
	d = min(d, cap)
	b := make([]byte, 0, len(backoffDomain)+len(id)+8)
	b = append(b, backoffDomain...)
	b = append(b, id...)
	b = binary.BigEndian.AppendUint64(b, k)
	sum := sha256.Sum256(b)
	h := binary.BigEndian.Uint64(sum[:8])
	return (d - int64(h%uint64(d/4+1))) * 1e6
}

// leaseState is the state of j's latest lease: for a queue job that went
// back to its queue or ended DEAD, the one its last attempt ended in, so
// that a late message about that lease is judged as it would have been
// (renew_after_expiry, duplicate_result, ...).
func leaseState(j *job) events.State {
	if j.State != events.StateQueued && j.State != events.StateDead {
		return j.State
	}
	switch j.LastReason {
	case events.ReasonAckDeadlinePassed:
		return events.StateAckMissed
	case events.ReasonLeaseExpired:
		return events.StateExpired
	case events.ReasonAttemptFailed:
		return events.StateFailed
	case events.ReasonOfferDeclined, events.ReasonReleased:
		return events.StateReleased
	case events.ReasonLeaseRevoked:
		return events.StateRevoked
	}
	return j.State
}

// retry and discard: the resolve actions on a DEAD job.
func (p *Projector) resolveDead(j *job) {
	in := &p.in
	if j.State != events.StateDead {
		p.emit(j, events.KindRejected, events.ReasonNothingToResolve, in.Actor)
		return
	}
	if in.Action == events.ActionDiscard {
		p.emit(j, events.KindResolved, events.ReasonDiscarded, j.Submitter)
		p.unschedule(j)
		p.retireFor(j, events.ReasonDiscarded)
		return
	}
	if h := p.keyHolder(j.Queue, j.UniqueKey); h != nil && h != j {
		// Revision 8: its unique key went to another job since it ended.
		d := p.emit(j, events.KindRejected, events.ReasonUniqueKeyHeld, in.Actor)
		d.DuplicateOf = h.ID
		d.Detail = p.heldDetail(h)
		return
	}
	j.Attempt = 0
	j.State = events.StateQueued
	j.ReadyAt = p.now
	p.takeKey(j)
	p.schedule(j)
	p.enqueue(j)
	p.emit(j, events.KindResolved, events.ReasonRetried, j.Submitter)
}

// cancelQueued ends a QUEUED job CANCELLED without an attempt.
func (p *Projector) cancelQueued(j *job) {
	p.dequeue(j)
	j.CancelReq = true
	j.CancelAt = p.now
	j.State = events.StateCancelled
	j.Result = events.OutcomeCancelled
	p.end(j, p.now)
	p.emit(j, events.KindCancelRequested, events.ReasonDequeued, j.Submitter)
}

// capExpiries is a min-heap of announcement expiries by (until, seq).
type capExpiries []capExpiry

func (h capExpiries) less(a, b int) bool {
	if h[a].until != h[b].until {
		return h[a].until < h[b].until
	}
	return h[a].seq < h[b].seq
}

func (h *capExpiries) push(e capExpiry) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s.less(i, parent) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *capExpiries) pop() capExpiry {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && s.less(r, l) {
			c = r
		}
		if !s.less(c, i) {
			break
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
	*h = s
	return top
}

// Capacity is a worker's standing announcement on a queue, as a snapshot
// holds it and as RebuildHash takes it (from a capacity_set decision:
// Worker its addressee, Seq its cause).
type Capacity struct {
	Worker string
	events.Capacity
	Seq uint64
}

// Capacities returns the standing announcements (until after the fold's
// time), sorted by queue then worker.
func (p *Projector) Capacities() []Capacity {
	var out []Capacity
	for _, q := range p.queues {
		for w, c := range q.caps {
			if c.until > p.now {
				out = append(out, Capacity{Worker: w, Capacity: events.Capacity{Queue: q.name, Slots: c.slots, Until: c.until}, Seq: c.seq})
			}
		}
	}
	slices.SortFunc(out, func(a, b Capacity) int {
		if c := strings.Compare(a.Queue, b.Queue); c != 0 {
			return c
		}
		return strings.Compare(a.Worker, b.Worker)
	})
	return out
}

// QueueStats is what a queue holds now, derived from the projection.
type QueueStats struct {
	Name     string
	Queued   int // QUEUED jobs (ready or backing off; conflicts pending excluded)
	Ready    int // of them, ready now
	InFlight int // live leases
	Workers  int // standing announcements
	Slots    uint64
}

// Queues returns every queue's stats, by name.
func (p *Projector) Queues() []QueueStats {
	out := make([]QueueStats, 0, len(p.queues))
	for _, q := range p.queues {
		st := QueueStats{Name: q.name, Queued: q.queued}
		for _, s := range q.subs {
			st.InFlight += s.live
			for i := range s.ready {
				for _, j := range s.ready[i] {
					if j.ReadyAt <= p.now {
						st.Ready++
					}
				}
			}
			for _, j := range s.later {
				if j.ReadyAt <= p.now {
					st.Ready++
				}
			}
			st.Ready += s.keyed // revision 9: ready, in their keys' heaps
		}
		for _, c := range q.caps {
			if c.until > p.now {
				st.Workers++
				st.Slots += c.slots
			}
		}
		if q.jobs == 0 && st.Workers == 0 {
			continue // only expired announcements, not swept yet
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b QueueStats) int { return strings.Compare(a.Name, b.Name) })
	return out
}
