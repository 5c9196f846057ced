package worker

import (
	"fmt"
	"time"

	"github.com/maknow/tenure/events"
)

// stashAge is how long a decision nobody claimed stays in the stash: a
// verdict that overtook its input's PubAck is claimed when the PubAck
// comes back (milliseconds later), or when a caller that gave up waits for
// the same input again (a resend under the same Msg-Id has the same
// sequence); a decision about a lease being registered is claimed when
// the lease is registered. One older than that has no claimant left: the
// caller gave up for good, or the lease was never registered.
const stashAge = 2 * time.Minute

// stashMax bounds the decisions the stash holds at once, about ten times
// what a worker renewing tens of thousands of leases in batches has in
// flight. Past it the oldest is dropped, and the drop is reported to the
// ErrorHandler: never silently.
const stashMax = 65536

// stash holds the decisions addressed to this worker that nobody has
// claimed yet, indexed by what will claim them: the verdicts of an input
// by its partition and sequence, the decisions about a lease by its job and
// lease id. Taking and adding are O(1) in the number of decisions held,
// whatever it holds (a stash scanned and copied on every verdict cost a
// worker its lock under load); entries leave it when claimed, or, oldest
// first, after stashAge or past stashMax. Guarded by the worker's mu.
type stash struct {
	verdicts map[verdictKey]*stashList
	leases   map[leaseKey]*stashList
	order    []stashEntry // by first arrival: what ages out first; order[head:] are live or claimed
	head     int
	n        int    // decisions held
	next     uint64 // id of the next list
}

// stashList is the decisions stashed under one key, in arrival order.
type stashList struct {
	id uint64
	ds []events.Decision
}

// stashEntry names one list in order: the key it was stashed under, its
// id (a list claimed and stashed again under the same key is another
// list, which its predecessor's entry must not remove), and when it came.
type stashEntry struct {
	verdict bool
	vk      verdictKey
	lk      leaseKey
	id      uint64
	at      time.Time
}

func newStash() stash {
	return stash{verdicts: make(map[verdictKey]*stashList), leases: make(map[leaseKey]*stashList)}
}

// addVerdict stashes d, a verdict of input k whose caller is not waiting.
// The error reports a decision dropped to make room.
func (s *stash) addVerdict(k verdictKey, d events.Decision, now time.Time) error {
	l := s.verdicts[k]
	if l == nil {
		l = s.list(stashEntry{verdict: true, vk: k}, now)
		s.verdicts[k] = l
	}
	return s.push(l, d, now)
}

// addLease stashes d, a decision about lease k not registered (yet).
func (s *stash) addLease(k leaseKey, d events.Decision, now time.Time) error {
	l := s.leases[k]
	if l == nil {
		l = s.list(stashEntry{lk: k}, now)
		s.leases[k] = l
	}
	return s.push(l, d, now)
}

// list returns a new list for e's key, entered in order at now.
func (s *stash) list(e stashEntry, now time.Time) *stashList {
	e.id, e.at = s.next, now
	s.next++
	s.order = append(s.order, e)
	return &stashList{id: e.id}
}

// push adds d to l, then trims.
func (s *stash) push(l *stashList, d events.Decision, now time.Time) error {
	l.ds = append(l.ds, d)
	s.n++
	return s.trim(now)
}

// takeVerdicts removes and returns, in arrival order, up to n verdicts of
// input k that wants takes (waiter.wants: of the waiter's verb and job),
// fewer when one about no job (the whole input rejected) comes first; the
// rest stay.
func (s *stash) takeVerdicts(k verdictKey, n int, wants func(*events.Decision) bool) []events.Decision {
	l := s.verdicts[k]
	if l == nil {
		return nil
	}
	// The usual case, one input per sequence: the first verdicts are all
	// wanted, and leave without a copy.
	i := 0
	for i < len(l.ds) && i < n && wants(&l.ds[i]) {
		i++
		if l.ds[i-1].Job.ID == events.NoJob {
			break
		}
	}
	if i == len(l.ds) || i == n || i > 0 && l.ds[i-1].Job.ID == events.NoJob {
		out := l.ds[:i:i]
		if l.ds = l.ds[i:]; len(l.ds) == 0 {
			delete(s.verdicts, k)
		}
		s.n -= i
		return out
	}
	// After a lost tail: another input's verdicts among them stay.
	var out []events.Decision
	kept := l.ds[:0:0]
	for i := range l.ds {
		d := &l.ds[i]
		if len(out) == n || len(out) > 0 && out[len(out)-1].Job.ID == events.NoJob || !wants(d) {
			kept = append(kept, *d)
			continue
		}
		out = append(out, *d)
	}
	if l.ds = kept; len(l.ds) == 0 {
		delete(s.verdicts, k)
	}
	s.n -= len(out)
	return out
}

// takeLease removes and returns the decisions about lease k.
func (s *stash) takeLease(k leaseKey) []events.Decision {
	l := s.leases[k]
	if l == nil {
		return nil
	}
	delete(s.leases, k)
	s.n -= len(l.ds)
	return l.ds
}

// trim drops the lists older than stashAge, then, while more than
// stashMax decisions are held, the oldest lists, reporting those.
func (s *stash) trim(now time.Time) error {
	var dropped []string
	for s.head < len(s.order) {
		e := s.order[s.head]
		if !(now.Sub(e.at) > stashAge || s.n > stashMax) && s.live(e) {
			break
		}
		if s.live(e) && now.Sub(e.at) <= stashAge && len(dropped) < 3 {
			if e.verdict {
				dropped = append(dropped, fmt.Sprintf("the verdicts of input %d", e.vk.seq))
			} else {
				dropped = append(dropped, fmt.Sprintf("the decisions about lease %s of job %s", e.lk.leaseID, e.lk.job))
			}
		}
		s.remove(e)
		s.order[s.head] = stashEntry{}
		s.head++
	}
	if s.head > 1024 && s.head > len(s.order)/2 {
		s.order = append(s.order[:0], s.order[s.head:]...)
		s.head = 0
	}
	if len(dropped) > 0 {
		return fmt.Errorf("worker: more than %d decisions unclaimed: dropped %v", stashMax, dropped)
	}
	return nil
}

// live reports whether e's list is still stashed.
func (s *stash) live(e stashEntry) bool {
	if e.verdict {
		l := s.verdicts[e.vk]
		return l != nil && l.id == e.id
	}
	l := s.leases[e.lk]
	return l != nil && l.id == e.id
}

// remove drops e's list if it is still stashed.
func (s *stash) remove(e stashEntry) {
	if !s.live(e) {
		return
	}
	if e.verdict {
		s.n -= len(s.verdicts[e.vk].ds)
		delete(s.verdicts, e.vk)
		return
	}
	s.n -= len(s.leases[e.lk].ds)
	delete(s.leases, e.lk)
}
