package projector

import (
	"slices"
	"strings"

	"github.com/maknow/tenure/events"
)

// Standings (rules revision 5, PROTOCOL.md §22.3). A worker's standing on
// a queue is what the queue learnt of it: its window (the most of the
// queue's live leases offered to it at once), its episodes of refusals
// (strikes) and the hold the last of them put on it. A refusal (an offer
// declined, a lease released, an ACK missed, a lease left to expire)
// halves the window and holds the worker for a time that doubles with
// each strike; a success clears the strikes and the hold and widens the
// window by one. So a worker that refuses what it is offered soon gets
// little, and nothing for a while, and the others get the rest; a worker
// that refused by mistake gets its standing back with its next success.
//
// Every decision that changes a standing carries it (events.Standing on
// capacity_set, withdrawn, and the completed decision of a success), and a
// standing is forgotten StandingMemoryMS after the last such decision: so
// the standings are, like the jobs, a function of the decisions
// (RebuildHash), and a worker that has not announced for an hour is new
// to the queue again. A standing equal to a new worker's is not kept.

// standing is a worker's standing on a queue.
type standing struct {
	window, strikes uint64
	heldUntil       int64 // no offers before it (0: not held)
	touchedAt       int64 // the time of the last decision that carried it
	holdQueued      int64 // heldUntil this record has an entry of in p.holds (0: none)
	forgetQueued    int64 // forgetAt it has an entry of in p.forgets (0: none)
}

// forgetAt is when s is forgotten: StandingMemoryMS after its last decision.
func (s *standing) forgetAt() int64 { return addTime(s.touchedAt, events.StandingMemoryMS*1e6) }

// standingKey names a standing: its queue and its worker.
type standingKey struct{ queue, worker string }

// newStanding is the standing of a worker the queue does not know.
func newStanding() standing { return standing{window: events.InitialWindow} }

// isNew reports whether s is, at time now, a new worker's standing.
func (s *standing) isNew(now int64) bool {
	return s.window == events.InitialWindow && s.strikes == 0 && s.heldUntil <= now
}

// standingOf returns worker's standing on queue at the fold's time: a new
// worker's when none is kept or the kept one is forgotten.
func (p *Projector) standingOf(queue, worker string) standing {
	if s := p.standings[standingKey{queue, worker}]; s != nil && s.forgetAt() > p.now {
		return *s
	}
	return newStanding()
}

// setStanding records worker's standing on queue after a decision that
// carries it (touching it: it is forgotten StandingMemoryMS from now), and
// returns its wire form for that decision.
func (p *Projector) setStanding(queue, worker string, s standing) *events.Standing {
	key := standingKey{queue, worker}
	cur := p.standings[key]
	if s.heldUntil <= p.now {
		s.heldUntil = 0
	}
	wire := &events.Standing{Queue: queue, Window: s.window, Strikes: s.strikes, HeldUntil: s.heldUntil}
	if s.isNew(p.now) {
		delete(p.standings, key) // its heap entries find nothing and go
		return wire
	}
	if cur == nil {
		key = standingKey{strings.Clone(queue), strings.Clone(worker)}
		cur = &standing{}
		if p.standings == nil {
			p.standings = map[standingKey]*standing{}
		}
		p.standings[key] = cur
	}
	holdQueued, forgetQueued := cur.holdQueued, cur.forgetQueued
	*cur = s
	cur.touchedAt = p.now
	cur.holdQueued, cur.forgetQueued = holdQueued, forgetQueued
	if cur.heldUntil > 0 && (cur.holdQueued == 0 || cur.holdQueued > cur.heldUntil) {
		cur.holdQueued = cur.heldUntil
		p.holds.push(standingTimer{at: cur.heldUntil, key: key})
	}
	if cur.forgetQueued == 0 {
		cur.forgetQueued = cur.forgetAt()
		p.forgets.push(standingTimer{at: cur.forgetQueued, key: key})
	}
	return wire
}

// touchStanding refreshes worker's standing on queue (a capacity_set:
// the worker is there) and returns its wire form.
func (p *Projector) touchStanding(queue, worker string) *events.Standing {
	return p.setStanding(queue, worker, p.standingOf(queue, worker))
}

// sweepStandings drops the standings forgotten by now and the holds that
// ended (their wake-ups: matching sees the worker again).
func (p *Projector) sweepStandings() {
	for len(p.holds) > 0 && p.holds[0].at <= p.now {
		t := p.holds.pop()
		if s := p.standings[t.key]; s != nil && s.holdQueued == t.at {
			s.holdQueued = 0
			if s.heldUntil > t.at { // held again since, for longer
				s.holdQueued = s.heldUntil
				p.holds.push(standingTimer{at: s.heldUntil, key: t.key})
			}
		}
	}
	for len(p.forgets) > 0 && p.forgets[0].at <= p.now {
		t := p.forgets.pop()
		s := p.standings[t.key]
		if s == nil || s.forgetQueued != t.at {
			continue
		}
		s.forgetQueued = 0
		if s.forgetAt() <= p.now {
			delete(p.standings, t.key)
			continue
		}
		s.forgetQueued = s.forgetAt() // touched since: remembered longer
		p.forgets.push(standingTimer{at: s.forgetQueued, key: t.key})
	}
}

// holdMS is the hold after a worker's s-th consecutive refusal (s >= 1).
func holdMS(s uint64) int64 {
	d := int64(events.HoldBaseMS)
	for i := uint64(1); i < s && d < events.HoldMaxMS; i++ {
		d *= 2
	}
	return min(d, events.HoldMaxMS)
}

// isRefusal reports whether an attempt that ended for reason was ended by
// its worker's refusal: an offer declined, a lease released, an ACK
// missed, a lease left to expire.
func isRefusal(reason events.Reason) bool {
	switch reason {
	case events.ReasonOfferDeclined, events.ReasonReleased, events.ReasonAckDeadlinePassed, events.ReasonLeaseExpired:
		return true
	}
	return false
}

// refuse follows a refusal (revision 5) by worker of an attempt of queue
// job j, for reason: unless the worker is held already, its strikes go up
// by one, its window halves (at least 1) and it is held for
// holdMS(strikes); and its announcement on the queue, if any, is
// withdrawn: a withdrawn decision addressed to it says so, with its
// standing. A refusal while held changes nothing more: the leases of a
// worker that crashed expire together, the rest of a batch of declines
// come together, and one episode is one strike.
func (p *Projector) refuse(j *job, worker string, reason events.Reason) {
	queue := j.Queue
	s := p.standingOf(queue, worker)
	if s.heldUntil <= p.now {
		if s.strikes != 1<<64-1 {
			s.strikes++
		}
		s.window = max(1, s.window/2)
		s.heldUntil = addTime(p.now, holdMS(s.strikes)*1e6)
	}
	if q := p.queues[queue]; q != nil && q.caps[worker] != nil {
		delete(q.caps, worker)
		p.touched(q)
	}
	d := p.emit(nil, events.KindWithdrawn, reason, worker)
	d.Capacity = &events.Capacity{Queue: queue, Slots: 0}
	d.Standing = p.setStanding(queue, worker, s)
	d.Detail = refusalText(reason) + " " + j.ID + ": strike " + u64(s.strikes) + ", window " + u64(s.window) +
		", no offers of " + queue + " before " + events.FormatTime(s.heldUntil)
}

func refusalText(reason events.Reason) string {
	switch reason {
	case events.ReasonOfferDeclined:
		return "declined the offer of"
	case events.ReasonReleased:
		return "released the lease of"
	case events.ReasonAckDeadlinePassed:
		return "did not ACK the offer of"
	}
	return "let the lease expire of"
}

// succeed follows a success (revision 5) of worker on a job of queue: its
// strikes and hold are cleared and its window widens by one. It returns
// the standing for the completed decision.
func (p *Projector) succeed(queue, worker string) *events.Standing {
	s := p.standingOf(queue, worker)
	s.strikes, s.heldUntil = 0, 0
	s.window = min(s.window+1, events.MaxWindow)
	return p.setStanding(queue, worker, s)
}

// standingTimer is a standing's place in a timer heap (holds, forgets).
type standingTimer struct {
	at  int64
	key standingKey
}

// standingTimers is a min-heap by (at, queue, worker): a total order, so
// pops do not depend on the array's layout.
type standingTimers []standingTimer

func (h standingTimers) less(a, b int) bool {
	x, y := &h[a], &h[b]
	if x.at != y.at {
		return x.at < y.at
	}
	if x.key.queue != y.key.queue {
		return x.key.queue < y.key.queue
	}
	return x.key.worker < y.key.worker
}

func (h *standingTimers) push(t standingTimer) {
	*h = append(*h, t)
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

func (h *standingTimers) pop() standingTimer {
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

// Standing is a worker's standing on a queue, as a snapshot holds it and
// as RebuildHash takes it (from the latest decision that carried it: At
// that decision's time, Worker its addressee).
type Standing struct {
	Worker string
	events.Standing
	At int64
}

// Standings returns the standings kept at the fold's time (none forgotten,
// none a new worker's), sorted by queue then worker; At is the time of the
// last decision that carried each.
func (p *Projector) Standings() []Standing {
	var out []Standing
	for k, s := range p.standings {
		if s.forgetAt() <= p.now || s.isNew(p.now) {
			continue
		}
		held := s.heldUntil
		if held <= p.now {
			held = 0
		}
		out = append(out, Standing{Worker: k.worker, At: s.touchedAt,
			Standing: events.Standing{Queue: k.queue, Window: s.window, Strikes: s.strikes, HeldUntil: held}})
	}
	slices.SortFunc(out, func(a, b Standing) int {
		if c := strings.Compare(a.Queue, b.Queue); c != 0 {
			return c
		}
		return strings.Compare(a.Worker, b.Worker)
	})
	return out
}
