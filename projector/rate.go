package projector

import "github.com/maknow/tenure/events"

// Rate limits (rules revision 9, PROTOCOL.md §26.5).
//
// A limit may carry a rate: at most rate offers (starts) of the queue's
// jobs (of a concurrency key, or of the whole queue) per period, a token
// bucket of rate tokens refilled over the period, on stored time. It is
// kept as GCRA (the generic cell rate algorithm), exact in integers: the
// emission interval T = ceil(period / rate) (rounded up, so the rate is
// never exceeded), a tolerance tau = (rate-1)*T (a full bucket: rate
// starts at once), and one number of state, tat, the theoretical arrival
// time of the next start: a start at now conforms when tat - tau <= now,
// and makes tat = max(tat, now) + T. So in any window of length w at most
// rate + floor(w/T) jobs start, and rate at once only after the bucket
// refilled. Matching offers no job of a scope without a token; those
// jobs stay QUEUED, and the coordinator ticks when the next token is due
// (NextDeadline), as for a scheduled job's ready_at.

// bucket is a rate limit's token bucket.
type bucket struct {
	rate   uint64 // 1..events.MaxRate
	period int64  // ns, 1 ms to 30 days
	tat    int64  // ns; 0: full
}

// interval is T, ceil(period/rate).
func (b *bucket) interval() int64 { return (b.period + int64(b.rate) - 1) / int64(b.rate) }

// tau is the tolerance, (rate-1)*T: below period + rate, no overflow.
func (b *bucket) tau() int64 { return int64(b.rate-1) * b.interval() }

// ok reports whether a start conforms at now (a token is there).
func (b *bucket) ok(now int64) bool { return b.tat <= addTime(now, b.tau()) }

// next is when the next token is there (at or before now when one is).
func (b *bucket) next() int64 { return b.tat - b.tau() }

// take spends a token at now.
func (b *bucket) take(now int64) { b.tat = addTime(max(b.tat, now), b.interval()) }

// setRate gives l the bucket b (nil: no rate limit).
func (p *Projector) setRate(l *keyLimit, b *bucket) {
	switch {
	case l.rate == nil && b != nil:
		p.nRates++
	case l.rate != nil && b == nil:
		p.nRates--
	}
	l.rate = b
}

// rateOK reports whether q's own rate limit, if any, has a token at now.
func (q *queue) rateOK(now int64) bool {
	if len(q.limits) == 0 {
		return true
	}
	l := q.limits[""]
	return l == nil || l.rate == nil || l.rate.ok(now)
}

// takeTokens spends, for the offer of j, a token of its queue's rate
// limit and of its key's, those that have one.
func (p *Projector) takeTokens(q *queue, j *job) {
	if len(q.limits) == 0 {
		return
	}
	if l := q.limits[""]; l != nil && l.rate != nil {
		l.rate.take(p.now)
	}
	if j.ConcurrencyKey != "" {
		if l := q.limits[j.ConcurrencyKey]; l != nil && l.rate != nil {
			l.rate.take(p.now)
		}
	}
}

// nextToken is the earliest time after now at which a rate limit without
// a token now, whose scope has QUEUED jobs, has one again (ok false if
// none): a wake-up the coordinator ticks for.
func (p *Projector) nextToken() (int64, bool) {
	if p.nRates == 0 {
		return 0, false
	}
	at, ok := int64(0), false
	for _, q := range p.queues {
		for _, l := range q.limits {
			if l.rate == nil || l.rate.ok(p.now) {
				continue
			}
			if l.key == "" && q.queued == 0 || l.key != "" && l.queued == 0 {
				continue
			}
			if t := l.rate.next(); !ok || t < at {
				at, ok = t, true
			}
		}
	}
	return at, ok
}

// validTAT reports whether tat is a bucket state a fold at now can have:
// 0 to now + rate*T (a start conforms only when tat <= now + tau, and
// adds T).
func validTAT(rate uint64, periodMS, tat, now int64) bool {
	b := bucket{rate: rate, period: periodMS * 1e6}
	return tat >= 0 && tat <= addTime(addTime(now, b.tau()), b.interval())
}

// validRate reports whether a restored rate is one a limit input gives.
func validRate(rate uint64, periodMS int64) bool {
	return rate >= 1 && rate <= events.MaxRate && periodMS >= events.MinDurationMS && periodMS <= events.MaxDurationMS
}
