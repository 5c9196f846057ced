package api

import (
	"cmp"
	"container/heap"
	"slices"
	"time"

	"github.com/maknow/tenure/events"
)

// RateWindow is the window of the rates of QueueStats: events per second
// over the last minute.
const RateWindow = 60 * time.Second

// MaxWorkersListed bounds the workers a queue's stats list (QueueStats.Workers
// counts them all).
const MaxWorkersListed = 100

// MaxLimitsListed bounds the limits a queue's stats list (QueueStats.Limits
// counts them all).
const MaxLimitsListed = 100

// Counts are how many times something happened to a queue's jobs, by the
// decisions that say so (PROTOCOL.md §22): a submit accepted (submitted),
// an offer the queue made (assigned), a job that ended COMPLETED
// or FAILED, an attempt that ended and went back to the queue (requeued),
// a job whose attempt budget was spent (dead).
type Counts struct {
	Submitted uint64 `json:"submitted"`
	Offered   uint64 `json:"offered"`
	Completed uint64 `json:"completed"`
	Failed    uint64 `json:"failed"`
	Requeued  uint64 `json:"requeued"`
	Dead      uint64 `json:"dead"`
}

// Rates are Counts per second over the last RateWindow, by the decisions'
// authoritative times (the log's clock) up to now (the server's clock).
type Rates struct {
	WindowS   int64   `json:"window_s"` // the window, in seconds
	Submitted float64 `json:"submitted"`
	Offered   float64 `json:"offered"`
	Completed float64 `json:"completed"`
	Failed    float64 `json:"failed"`
	Requeued  float64 `json:"requeued"`
	Dead      float64 `json:"dead"`
}

// counters indexes Counts and the buckets of the rates.
const (
	cSubmitted = iota
	cOffered
	cCompleted
	cFailed
	cRequeued
	cDead
	nCounters
)

// WorkerCapacity is one worker's standing announcement on a queue (a pull,
// PROTOCOL.md §22.2) as its last capacity_set decision set it, with the
// queue's live leases (OFFERED or ACTIVE) it holds.
//
// From rules revision 5 on the list also has the workers the read model
// has a record of on the queue without a standing announcement (a worker
// whose refusal withdrew it: slots 0, no until), each with its standing
// (PROTOCOL.md §22.8) as the latest decision that carried it says, and
// what its decisions say it did with the queue's jobs since the first
// decision read: what an operator looks at to find a worker that declines,
// never ACKs or lets leases expire.
type WorkerCapacity struct {
	Worker    string `json:"worker"`
	Partition string `json:"partition,omitempty"` // partitioned deployments: the partition it announced to
	Slots     uint64 `json:"slots"`
	Held      int    `json:"held"`            // the queue's live leases it holds (in that partition)
	Until     string `json:"until,omitempty"` // when the announcement lapses (RFC 3339); empty: none stands
	// Revision 5 on: its standing, omitted when no decision carried one.
	Standing *Standing `json:"standing,omitempty"`
	WorkerCounts
}

// Standing is a worker's standing on a queue (PROTOCOL.md §22.8).
type Standing struct {
	Window    uint64 `json:"window"`
	Strikes   uint64 `json:"strikes"`
	HeldUntil string `json:"held_until,omitempty"` // RFC 3339; empty: not held
}

// WorkerCounts are what a worker did with a queue's jobs, by the
// decisions that say so: offers the queue made it (assigned), declines
// (released while OFFERED), releases of ACTIVE leases, missed ACKs
// (ack_missed), expiries (expired), and attempts it ended SUCCESS
// (completions) or FAILED (failures).
type WorkerCounts struct {
	Offers      uint64 `json:"offers"`
	Declines    uint64 `json:"declines"`
	Releases    uint64 `json:"releases"`
	MissedAcks  uint64 `json:"missed_acks"`
	Expiries    uint64 `json:"expiries"`
	Completions uint64 `json:"completions"`
	Failures    uint64 `json:"failures"`
}

// workerRecord is what the read model knows of one worker on one queue.
type workerRecord struct {
	WorkerCounts
	standing *events.Standing
}

// QueueStats is what a queue holds now, as the read model knows it: its
// jobs by state (those the projection keeps: a retired job counts no
// more), its depth split by readiness, the workers announcing capacity,
// and what happened to its jobs lately (Rates) and since the first
// decision read (Totals).
type QueueStats struct {
	Queue string `json:"queue"`
	Jobs  int    `json:"jobs"` // every job of the queue the projection keeps
	// Queued is the depth, Ready+Waiting+Blocked: Ready may be offered now
	// (ready_at passed), Waiting backs off (ready_at ahead), Blocked awaits
	// an operator (a pending ownership conflict).
	Queued   int `json:"queued"`
	Ready    int `json:"ready"`
	Waiting  int `json:"waiting"`
	Blocked  int `json:"blocked"`
	InFlight int `json:"in_flight"` // live leases: OFFERED and ACTIVE
	Offered  int `json:"offered"`
	Active   int `json:"active"`
	// Jobs that ended: DEAD (attempt budget spent, awaiting an operator),
	// COMPLETED, FAILED (a permanent failure, or settled), CANCELLED,
	// UNRESOLVED (a cancellation not reconciled).
	Dead       int `json:"dead"`
	Completed  int `json:"completed"`
	Failed     int `json:"failed"`
	Cancelled  int `json:"cancelled"`
	Unresolved int `json:"unresolved"`
	// Workers with a standing announcement (until ahead of now), their
	// slots, and the slots they have free (slots above the live leases
	// they hold); in a partitioned deployment a worker announces to each
	// partition, and each announcement counts.
	Workers   int    `json:"workers"`
	Slots     uint64 `json:"slots"`
	FreeSlots uint64 `json:"free_slots"`
	Rates     Rates  `json:"rates"`
	Totals    Counts `json:"totals"`
	// WorkerList is the standing announcements, by worker then partition,
	// at most MaxWorkersListed (only in the answer about one queue).
	WorkerList []WorkerCapacity `json:"worker_list,omitempty"`
	// Limits counts the limits in force on the queue (rules revision 9,
	// PROTOCOL.md §26.4, §26.5): of its concurrency keys and of the queue
	// itself, each partition's its own. LimitList is them, by key then
	// partition, at most MaxLimitsListed (only in the answer about one
	// queue).
	Limits    int            `json:"limits"`
	LimitList []LimitInForce `json:"limit_list,omitempty"`
}

// LimitInForce is a limit in force on a queue, as the latest limit_set
// decision of its key (of its partition) left it, or the stored snapshot
// the read model started from.
type LimitInForce struct {
	// Key is the concurrency key it limits; "" for the queue's own limit
	// (a rate only).
	Key       string `json:"key"`
	Partition string `json:"partition,omitempty"` // partitioned deployments: the partition that applies it
	// MaxActive is at most how many of the queue's jobs naming the key
	// hold live leases at once; omitted when the limit has none.
	MaxActive *uint64 `json:"max_active,omitempty"`
	// Live is how many of the queue's jobs naming the key hold live
	// leases now (in that partition); for the queue's own limit, 0.
	Live int `json:"live"`
	// Rate and PeriodMS: at most Rate offers per PeriodMS, a token bucket;
	// both omitted when the limit has no rate.
	Rate     uint64 `json:"rate,omitempty"`
	PeriodMS int64  `json:"period_ms,omitempty"`
}

// keyOf is a concurrency key in a partition.
type keyOf struct {
	part uint32
	key  string
}

// holderKey is a worker in a partition.
type holderKey struct {
	part   uint32
	worker string
}

type capacity struct {
	slots uint64
	until int64 // Unix ns
}

// bucket counts the events of one second.
type bucket struct {
	sec int64
	n   [nCounters]uint32
}

// queueState is one queue's aggregates.
type queueState struct {
	name    string
	jobs    int
	states  [16]int          // jobs per events.State
	blocked int              // QUEUED with a pending conflict
	waiting map[string]int64 // QUEUED without a conflict, whose ready_at (ns) was ahead when last judged
	due     dueHeap          // the waiting jobs by ready_at; entries not matching waiting are stale
	held    map[holderKey]int
	caps    map[holderKey]capacity
	seen    map[holderKey]*workerRecord // the workers its decisions concern (revision 5: their standing)
	limits  map[keyOf]events.Limit      // the limits in force (revision 9)
	keyLive map[keyOf]int               // live leases of its jobs by concurrency key
	ring    [60]bucket
	totals  [nCounters]uint64
}

// dueEntry is a waiting job's ready_at.
type dueEntry struct {
	at int64
	id string
}

type dueHeap []dueEntry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Queues aggregates the queue jobs of a read model of the decision
// streams, one queue at a time: the read model tells it every change of a
// job (Observe) and every capacity_set decision (Capacity), and asks for
// the stats of a queue at a time of its clock. Its memory is a few
// kilobytes per queue plus an entry per waiting job and per worker; a
// queue without jobs and without standing announcements is forgotten.
//
// A Queues is not safe for concurrent use, and its queries change it (the
// waiting jobs whose ready_at passed become ready): its owner holds its
// own lock, exclusively, around every call.
type Queues struct {
	count  uint32 // partitions (0: unpartitioned)
	queues map[string]*queueState
	names  idSet
	last   int64 // the latest time readiness was judged by (ns): a query's, or a decision's; readiness never goes back
}

// NewQueues returns the queue aggregates of a deployment of count
// partitions (0: unpartitioned).
func NewQueues(count uint32) *Queues {
	return &Queues{count: count, queues: make(map[string]*queueState)}
}

func (qs *Queues) queue(name string) *queueState {
	q := qs.queues[name]
	if q == nil {
		q = &queueState{name: name, waiting: make(map[string]int64), held: make(map[holderKey]int), caps: make(map[holderKey]capacity)}
		qs.queues[name] = q
		qs.names.Add(name)
	}
	return q
}

// forget drops q if nothing is left of it.
func (qs *Queues) forget(q *queueState) {
	if q.jobs == 0 && len(q.caps) == 0 && len(q.held) == 0 && len(q.limits) == 0 { // its workers' records go with it
		delete(qs.queues, q.name)
		qs.names.Remove(q.name)
	}
}

// Observe records that a job of partition part changed from prev (nil: it
// was not in the read model) to next (nil: it left it, retired) by
// decision d. Jobs outside any queue are ignored.
func (qs *Queues) Observe(part uint32, prev, next *events.Job, d *events.Decision) {
	if prev != nil && prev.Queue != "" {
		q := qs.queues[prev.Queue]
		if q != nil {
			q.remove(part, prev)
			if next == nil || next.Queue != prev.Queue {
				defer qs.forget(q)
			}
		}
	}
	if next == nil || next.Queue == "" {
		return
	}
	// The fold judged readiness at the decision's time: a job ready then
	// is ready now (the log's clock may run ahead of this server's).
	qs.last = max(qs.last, d.At)
	q := qs.queue(next.Queue)
	q.add(part, next, qs.last)
	was := events.StateNone
	if prev != nil {
		was = prev.State
	}
	if (d.Kind == events.KindRequeued || d.Kind == events.KindDead) && was == events.StateFailed {
		// The FAILED result was an attempt's end, retried or the last of
		// the budget, not the job's (PROTOCOL.md §22.4): the requeue or
		// DEAD end follows it in the same input, at the same time.
		q.uncount(cFailed, d.At)
	}
	q.observeWorker(part, next, d)
	switch {
	case d.Kind == events.KindSubmitted:
		q.count(cSubmitted, d.At)
	case d.Kind == events.KindOffered || d.Kind == events.KindAssigned:
		q.count(cOffered, d.At)
	case d.Kind == events.KindRequeued:
		q.count(cRequeued, d.At)
	case d.Kind == events.KindDead:
		q.count(cDead, d.At)
	case next.State == events.StateCompleted && was != events.StateCompleted:
		q.count(cCompleted, d.At)
	case next.State == events.StateFailed && was != events.StateFailed:
		q.count(cFailed, d.At)
	}
}

// restore counts job j of partition part, restored from a snapshot whose
// time is now (Model.Restore): it counts in no total and no rate.
func (qs *Queues) restore(part uint32, j *events.Job, now int64) {
	if j.Queue == "" {
		return
	}
	qs.last = max(qs.last, now)
	qs.queue(j.Queue).add(part, j, qs.last)
}

// drop uncounts job j of partition part (Model.Restore): it counts in no
// total and no rate.
func (qs *Queues) drop(part uint32, j *events.Job) {
	if q := qs.queues[j.Queue]; j.Queue != "" && q != nil {
		q.remove(part, j)
		qs.forget(q)
	}
}

// reset forgets what partition part contributed (Model.Restore, whose
// jobs it removed already): its workers' announcements, records and
// standings, and its limits. The totals and rates stay.
func (qs *Queues) reset(part uint32) {
	for _, q := range qs.queues {
		for k := range q.caps {
			if k.part == part {
				delete(q.caps, k)
			}
		}
		for k := range q.seen {
			if k.part == part {
				delete(q.seen, k)
			}
		}
		for k := range q.limits {
			if k.part == part {
				delete(q.limits, k)
			}
		}
	}
	for _, q := range qs.queues {
		qs.forget(q)
	}
}

// observeWorker counts, for the worker a decision about queue job next
// concerns, what it did with the job.
func (q *queueState) observeWorker(part uint32, next *events.Job, d *events.Decision) {
	if next.Holder == "" {
		return
	}
	var c *uint64
	r := q.record(part, next.Holder)
	switch {
	case d.Kind == events.KindAssigned:
		c = &r.Offers
	case d.Kind == events.KindReleased && next.AckState == events.AckDeclined:
		c = &r.Declines
	case d.Kind == events.KindReleased:
		c = &r.Releases
	case d.Kind == events.KindAckMissed:
		c = &r.MissedAcks
	case d.Kind == events.KindExpired:
		c = &r.Expiries
	case d.Kind == events.KindCompleted && next.Result == events.OutcomeSuccess:
		c = &r.Completions
	case d.Kind == events.KindCompleted && next.Result == events.OutcomeFailed:
		c = &r.Failures
	default:
		return
	}
	*c++
}

// record returns the record of worker in partition part, making it.
func (q *queueState) record(part uint32, worker string) *workerRecord {
	k := holderKey{part, worker}
	r := q.seen[k]
	if r == nil {
		if q.seen == nil {
			q.seen = map[holderKey]*workerRecord{}
		}
		r = &workerRecord{}
		q.seen[k] = r
	}
	return r
}

// Standing records the standing a decision carried (rules revision 5) for
// its addressee worker in partition part.
func (qs *Queues) Standing(part uint32, worker string, s events.Standing) {
	st := s
	qs.queue(s.Queue).record(part, worker).standing = &st
}

// Capacity records a capacity_set decision of worker in partition part:
// its announcement on c.Queue (slots 0 withdraws it).
func (qs *Queues) Capacity(part uint32, worker string, c events.Capacity) {
	k := holderKey{part, worker}
	if c.Slots == 0 {
		if q := qs.queues[c.Queue]; q != nil {
			delete(q.caps, k)
			qs.forget(q)
		}
		return
	}
	qs.queue(c.Queue).caps[k] = capacity{slots: c.Slots, until: c.Until}
}

// Limit records a limit_set decision of partition part: the limit in
// force on l.Queue for l.ConcurrencyKey (neither a max_active nor a rate:
// lifted).
func (qs *Queues) Limit(part uint32, l events.Limit) {
	k := keyOf{part, l.ConcurrencyKey}
	if !l.HasMaxActive && l.Rate == 0 {
		if q := qs.queues[l.Queue]; q != nil {
			delete(q.limits, k)
			qs.forget(q)
		}
		return
	}
	q := qs.queue(l.Queue)
	if q.limits == nil {
		q.limits = map[keyOf]events.Limit{}
	}
	q.limits[k] = l
}

func (q *queueState) count(c int, at int64) {
	q.totals[c]++
	sec := at / int64(time.Second)
	b := &q.ring[int(uint64(sec)%uint64(len(q.ring)))]
	if b.sec != sec {
		*b = bucket{sec: sec}
	}
	b.n[c]++
}

// uncount takes back a count of c at time at.
func (q *queueState) uncount(c int, at int64) {
	if q.totals[c] > 0 {
		q.totals[c]--
	}
	sec := at / int64(time.Second)
	if b := &q.ring[int(uint64(sec)%uint64(len(q.ring)))]; b.sec == sec && b.n[c] > 0 {
		b.n[c]--
	}
}

// add counts job j of partition part; now is the latest time readiness
// was judged by.
func (q *queueState) add(part uint32, j *events.Job, now int64) {
	q.jobs++
	q.states[j.State]++
	switch {
	case j.State == events.StateQueued && j.Conflict:
		q.blocked++
	case j.State == events.StateQueued && j.ReadyAt > now:
		q.waiting[j.ID] = j.ReadyAt
		heap.Push(&q.due, dueEntry{at: j.ReadyAt, id: j.ID})
		if len(q.due) > 2*len(q.waiting)+64 {
			q.compact()
		}
	case j.State.Live():
		q.held[holderKey{part, j.Holder}]++
		if j.ConcurrencyKey != "" {
			if q.keyLive == nil {
				q.keyLive = map[keyOf]int{}
			}
			q.keyLive[keyOf{part, j.ConcurrencyKey}]++
		}
	}
}

// remove uncounts job j of partition part.
func (q *queueState) remove(part uint32, j *events.Job) {
	q.jobs--
	q.states[j.State]--
	switch {
	case j.State == events.StateQueued && j.Conflict:
		q.blocked--
	case j.State == events.StateQueued:
		delete(q.waiting, j.ID) // its heap entry is stale now
	case j.State.Live():
		k := holderKey{part, j.Holder}
		if q.held[k]--; q.held[k] <= 0 {
			delete(q.held, k)
		}
		if j.ConcurrencyKey != "" {
			k := keyOf{part, j.ConcurrencyKey}
			if q.keyLive[k]--; q.keyLive[k] <= 0 {
				delete(q.keyLive, k)
			}
		}
	}
}

// compact drops the stale entries of the due heap.
func (q *queueState) compact() {
	h := q.due[:0]
	for _, e := range q.due {
		if at, ok := q.waiting[e.id]; ok && at == e.at {
			h = append(h, e)
		}
	}
	clear(q.due[len(h):])
	q.due = h
	heap.Init(&q.due)
}

// settle makes the waiting jobs whose ready_at is at or before now ready,
// and drops the announcements that lapsed by now.
func (q *queueState) settle(now int64) {
	for len(q.due) > 0 && q.due[0].at <= now {
		e := heap.Pop(&q.due).(dueEntry)
		if at, ok := q.waiting[e.id]; ok && at == e.at {
			delete(q.waiting, e.id)
		}
	}
	for k, c := range q.caps {
		if c.until <= now {
			delete(q.caps, k)
		}
	}
}

// judge is the time readiness is judged by at now: never before an
// earlier judgement (a waiting job made ready stays ready).
func (qs *Queues) judge(now time.Time) int64 {
	qs.last = max(qs.last, now.UnixNano())
	return qs.last
}

// Stats returns the stats of queue name at now (with its workers, at most
// MaxWorkersListed), false if the read model knows no such queue.
func (qs *Queues) Stats(name string, now time.Time) (QueueStats, bool) {
	q := qs.queues[name]
	if q == nil {
		return QueueStats{}, false
	}
	t := qs.judge(now)
	q.settle(t)
	st := q.stats(t)
	st.WorkerList = qs.workers(q)
	st.LimitList = qs.limitList(q)
	qs.forget(q)
	return st, true
}

// List returns the stats at now of at most limit queues in byte order of
// their names, from the first name above after, and the name to continue
// after ("" when there is no more), and how many queues there are.
func (qs *Queues) List(after string, limit int, now time.Time) (out []QueueStats, next string, total int) {
	t := qs.judge(now)
	var gone []*queueState
	for c := qs.names.After(after); ; c.Next() {
		name, ok := c.Peek()
		if !ok {
			break
		}
		if len(out) == limit {
			next = out[len(out)-1].Queue
			break
		}
		q := qs.queues[name]
		q.settle(t)
		out = append(out, q.stats(t))
		gone = append(gone, q)
	}
	total = qs.names.Len()
	for _, q := range gone {
		qs.forget(q) // after the cursor is done with the names
	}
	return out, next, total
}

// Held calls f with every queue known and how many of the workers the
// read model has a record of on it are held at now by their standing
// (PROTOCOL.md §22.8, as the latest decision that carried it says; in a
// partitioned deployment each partition's standing counts). Unlike the
// queries it changes nothing: its owner may call it under a shared lock.
func (qs *Queues) Held(now time.Time, f func(queue string, held int)) {
	t := now.UnixNano()
	for name, q := range qs.queues {
		n := 0
		for _, r := range q.seen {
			if r.standing != nil && r.standing.HeldUntil > t {
				n++
			}
		}
		f(name, n)
	}
}

// Len is the number of queues known.
func (qs *Queues) Len() int { return qs.names.Len() }

func (q *queueState) stats(now int64) QueueStats {
	st := QueueStats{
		Queue: q.name, Jobs: q.jobs,
		Queued: q.states[events.StateQueued], Blocked: q.blocked, Waiting: len(q.waiting),
		Offered: q.states[events.StateOffered], Active: q.states[events.StateActive],
		Dead: q.states[events.StateDead], Completed: q.states[events.StateCompleted], Failed: q.states[events.StateFailed],
		Cancelled: q.states[events.StateCancelled], Unresolved: q.states[events.StateUnresolved],
	}
	st.Ready = st.Queued - st.Waiting - st.Blocked
	st.InFlight = st.Offered + st.Active
	st.Limits = len(q.limits)
	for k, c := range q.caps {
		st.Workers++
		st.Slots += c.slots
		if h := uint64(q.held[k]); h < c.slots {
			st.FreeSlots += c.slots - h
		}
	}
	t := q.totals
	st.Totals = Counts{Submitted: t[cSubmitted], Offered: t[cOffered], Completed: t[cCompleted], Failed: t[cFailed], Requeued: t[cRequeued], Dead: t[cDead]}
	var n [nCounters]uint64
	sec := now / int64(time.Second)
	for _, b := range q.ring {
		if b.sec > sec-int64(len(q.ring)) && b.sec <= sec {
			for i := range n {
				n[i] += uint64(b.n[i])
			}
		}
	}
	w := float64(len(q.ring))
	st.Rates = Rates{WindowS: int64(len(q.ring)), Submitted: float64(n[cSubmitted]) / w, Offered: float64(n[cOffered]) / w,
		Completed: float64(n[cCompleted]) / w, Failed: float64(n[cFailed]) / w, Requeued: float64(n[cRequeued]) / w, Dead: float64(n[cDead]) / w}
	return st
}

// workers lists q's standing announcements (settled), by worker then
// partition, at most MaxWorkersListed, with the workers the read model
// has a record of (revision 5) that announce nothing now.
func (qs *Queues) workers(q *queueState) []WorkerCapacity {
	keys := make([]holderKey, 0, len(q.caps)+len(q.seen))
	for k := range q.caps {
		keys = append(keys, k)
	}
	for k := range q.seen {
		if _, ok := q.caps[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b holderKey) int { return cmp.Or(cmp.Compare(a.worker, b.worker), cmp.Compare(a.part, b.part)) })
	out := make([]WorkerCapacity, 0, min(len(keys), MaxWorkersListed))
	for _, k := range keys[:min(len(keys), MaxWorkersListed)] {
		c := q.caps[k]
		w := WorkerCapacity{Worker: k.worker, Slots: c.slots, Held: q.held[k], Until: events.FormatTime(c.until)}
		if r := q.seen[k]; r != nil {
			w.WorkerCounts = r.WorkerCounts
			if s := r.standing; s != nil {
				w.Standing = &Standing{Window: s.Window, Strikes: s.Strikes, HeldUntil: events.FormatTime(s.HeldUntil)}
			}
		}
		if qs.count > 0 {
			w.Partition = events.Partition{Index: k.part, Count: qs.count}.Token()
		}
		out = append(out, w)
	}
	return out
}

// limitList lists q's limits in force, by key then partition, at most
// MaxLimitsListed.
func (qs *Queues) limitList(q *queueState) []LimitInForce {
	keys := make([]keyOf, 0, len(q.limits))
	for k := range q.limits {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b keyOf) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.part, b.part)) })
	out := make([]LimitInForce, 0, min(len(keys), MaxLimitsListed))
	for _, k := range keys[:min(len(keys), MaxLimitsListed)] {
		l := q.limits[k]
		x := LimitInForce{Key: k.key, Rate: l.Rate, PeriodMS: l.PeriodMS}
		if l.HasMaxActive {
			x.MaxActive = &l.MaxActive
		}
		if k.key != "" {
			x.Live = q.keyLive[k]
		}
		if qs.count > 0 {
			x.Partition = events.Partition{Index: k.part, Count: qs.count}.Token()
		}
		out = append(out, x)
	}
	return out
}
