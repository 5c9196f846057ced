package projector

import (
	"slices"
	"strings"

	"github.com/maknow/tenure/events"
)

// Concurrency keys (rules revision 9, PROTOCOL.md §26.4).
//
// A queue job may name a concurrency key; an operator's limit input sets,
// per queue and key, max_active: the most of the queue's jobs naming the
// key that hold live leases (OFFERED or ACTIVE) at once. Matching offers
// a job whose key is at its limit to no one: it stays QUEUED, and is
// offered by the matching of the input that ends a live lease of the key
// (or raises or lifts the limit). What counts is the live lease, the
// offer included: the offer is the fold's only decision that starts a
// job (its ACK needs no matching), so counting offers is what makes
// "never more than max_active ACTIVE" a property of the decisions. A
// lease stops counting by whatever ends it (result, failure and requeue,
// expiry, missed ACK, release, cancellation, revocation, DEAD): the count
// is that of the queue's live leases (liveStart, liveEnd), which every
// one of those paths already ends. Lowering a limit ends no lease: it
// only holds back new offers until the key is below it.
//
// A limited key's ready jobs wait in the key's heaps (by submitter and
// priority) instead of their submitters', so that a job held back by
// its key holds back no job of another key behind it: matching looks at
// each submitter's earliest ready job as before, and at the earliest of
// each submitter in each limited key below its limit, and the least turn
// wins (then ready_at and submit_seq). Which heap a job is in is a
// function of its projection and of the limits, both in a snapshot, so a
// restored fold offers exactly what one that never stopped offers. A key
// with no limit is not limited, and its jobs wait with their submitter's.

// keyLimit is a queue's limit of one concurrency key (or, key "", of
// the queue as a whole: a rate only), and the ready QUEUED jobs naming
// the key, by submitter.
type keyLimit struct {
	key    string
	capped bool // max_active is in force
	max    uint64
	rate   *bucket // nil: no rate limit (revision 9, rate.go)
	subs   map[string]*keySub
	queued int                         // jobs in subs
	prio   [events.MaxPriority + 1]int // of them, by priority: matching skips a priority the key has none of
}

// keySub is one submitter's ready jobs of a limited key.
type keySub struct {
	ready [events.MaxPriority + 1]readyHeap
	n     int
}

// open reports whether the key is below its limit at now: fewer live
// leases than max_active, and a token in its rate's bucket.
func (q *queue) open(l *keyLimit, now int64) bool {
	return (!l.capped || uint64(q.keyLive[l.key]) < l.max) && (l.rate == nil || l.rate.ok(now))
}

// readyPush puts a ready QUEUED job in its submitter's ready heap, or in
// its key's when the key is limited (revision 9).
func (q *queue) readyPush(s *submitterQ, j *job) {
	if j.ConcurrencyKey != "" && q.limits != nil { // (never the queue's own, key "")
		if l := q.limits[j.ConcurrencyKey]; l != nil {
			ks := l.subs[j.Submitter]
			if ks == nil {
				ks = &keySub{}
				l.subs[j.Submitter] = ks
			}
			ks.ready[j.Priority].push(j)
			ks.n++
			l.queued++
			l.prio[j.Priority]++
			q.keyedPrio[j.Priority]++
			s.keyed++
			j.inKey = true
			return
		}
	}
	s.ready[j.Priority].push(j)
}

// keyRemove takes j out of its key's heap.
func (q *queue) keyRemove(s *submitterQ, j *job) {
	l := q.limits[j.ConcurrencyKey]
	ks := l.subs[j.Submitter]
	ks.ready[j.Priority].remove(j.qPos - 1)
	j.inKey = false
	if ks.n--; ks.n == 0 {
		delete(l.subs, j.Submitter)
	}
	l.queued--
	l.prio[j.Priority]--
	q.keyedPrio[j.Priority]--
	s.keyed--
}

// pickKeyed is pickJob's look at the limited keys below their limits at
// priority pr: the best of best and each submitter's earliest ready job of
// each such key, but for those skip refuses.
func (q *queue) pickKeyed(pr int, now int64, best *job, skip func(*job) bool) *job {
	if q.keyedPrio[pr] == 0 {
		return best
	}
	for _, l := range q.limits {
		if l.prio[pr] == 0 || !q.open(l, now) {
			continue
		}
		for _, ks := range l.subs {
			h := ks.ready[pr]
			if len(h) == 0 || h[0].ReadyAt > now {
				continue
			}
			c := h[0]
			if skip != nil && skip(c) {
				continue
			}
			if best == nil || c.Turn < best.Turn || c.Turn == best.Turn && readyLess(c, best) {
				best = c
			}
		}
	}
	return best
}

// setLimit applies a limit input: it sets the queue's limit of the
// concurrency key (or, with none, of the queue) to what it names
// (max_active, a rate), lifting what it does not name; with nothing
// named, the limit is lifted. A rate and period the limit already had
// keep its bucket; another starts a full one.
func (p *Projector) setLimit() {
	in := &p.in
	q := p.queueOf(in.Queue)
	l := q.limits[in.ConcurrencyKey]
	switch {
	case !in.HasMaxActive && in.Rate == 0:
		if l != nil {
			p.unlimit(q, l)
		}
	case l == nil:
		if p.nLimits >= events.MaxLimits {
			d := p.emit(nil, events.KindRejected, events.ReasonLimitsFull, in.Actor)
			d.Detail = u64(events.MaxLimits) + " limits are in force: lift one first"
			p.touched(q)
			return
		}
		l = q.limit(in.ConcurrencyKey)
		p.nLimits++
		fallthrough
	default:
		l.capped, l.max = in.HasMaxActive, in.MaxActive
		switch period := in.PeriodMS * 1e6; {
		case in.Rate == 0:
			p.setRate(l, nil)
		case l.rate == nil || l.rate.rate != in.Rate || l.rate.period != period:
			p.setRate(l, &bucket{rate: in.Rate, period: period})
		}
	}
	p.touched(q)
	d := p.emit(nil, events.KindLimitSet, events.ReasonOk, in.Actor)
	d.Limit = &events.Limit{Queue: q.name, ConcurrencyKey: in.ConcurrencyKey, MaxActive: in.MaxActive, HasMaxActive: in.HasMaxActive,
		Rate: in.Rate, PeriodMS: in.PeriodMS}
}

// unlimit lifts limit l of q.
func (p *Projector) unlimit(q *queue, l *keyLimit) {
	p.setRate(l, nil)
	q.unlimit(l)
	p.nLimits--
}

// limit adds an empty limit of key to q (the caller sets it), moving the
// ready jobs naming the key from their submitters' heaps to the key's.
func (q *queue) limit(key string) *keyLimit {
	if q.limits == nil {
		q.limits = map[string]*keyLimit{}
	}
	l := &keyLimit{key: strings.Clone(key), subs: map[string]*keySub{}}
	q.limits[l.key] = l
	if key == "" {
		return l // the queue's own: no job names it
	}
	var move []*job
	for _, s := range q.subs {
		for pr := range s.ready {
			for _, j := range s.ready[pr] {
				if j.ConcurrencyKey == key {
					move = append(move, j)
				}
			}
		}
	}
	for _, j := range move {
		s := q.subs[j.Submitter]
		s.ready[j.Priority].remove(j.qPos - 1)
		q.readyPush(s, j)
	}
	return l
}

// unlimit lifts limit l of q, moving its jobs back to their submitters'
// heaps.
func (q *queue) unlimit(l *keyLimit) {
	delete(q.limits, l.key)
	if len(q.limits) == 0 {
		q.limits = nil
	}
	for _, ks := range l.subs {
		for pr := range ks.ready {
			for _, j := range ks.ready[pr] {
				s := q.subs[j.Submitter]
				s.keyed--
				q.keyedPrio[pr]--
				j.inKey = false
				s.ready[pr].push(j)
			}
		}
	}
}

// Limit is a queue's limit of a concurrency key (Key "": of the queue),
// as a snapshot holds it and as RebuildHash takes it: the limit of a
// limit_set decision, and the state of its rate's bucket (TAT, the
// theoretical arrival time of the next start, rate.go).
type Limit struct {
	events.Limit
	TAT int64
}

// Limits returns the limits in force, sorted by queue then key.
func (p *Projector) Limits() []Limit {
	var out []Limit
	for _, q := range p.queues {
		for _, l := range q.limits {
			x := Limit{Limit: events.Limit{Queue: q.name, ConcurrencyKey: l.key, MaxActive: l.max, HasMaxActive: l.capped}}
			if b := l.rate; b != nil {
				x.Rate, x.PeriodMS, x.TAT = b.rate, b.period/1e6, b.tat
			}
			out = append(out, x)
		}
	}
	slices.SortFunc(out, func(a, b Limit) int {
		if c := strings.Compare(a.Queue, b.Queue); c != 0 {
			return c
		}
		return strings.Compare(a.ConcurrencyKey, b.ConcurrencyKey)
	})
	return out
}

// KeyActive is how many of queue's jobs naming concurrency key key hold
// live leases (OFFERED or ACTIVE) now.
func (p *Projector) KeyActive(queue, key string) int {
	if q := p.queues[queue]; q != nil {
		return q.keyLive[key]
	}
	return 0
}
