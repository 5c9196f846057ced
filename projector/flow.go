package projector

import (
	"strings"

	"github.com/maknow/tenure/events"
)

// Flow control (rules revision 8, PROTOCOL.md §26): unique keys.
//
// A queue job may name a unique key: while it holds the key, no other job
// of its queue naming the key is submitted (the submit is a duplicate
// naming the holder), and a DEAD job is not retried while another holds
// it. A job holds its key while it is live for the queue (QUEUED,
// OFFERED, ACTIVE, UNRESOLVED, or an ownership conflict pending), and
// unique_for after its last lease ended; never past its retirement or an
// operator's discard, which drop it. So a key cannot leak: whatever ends
// the job ends the key, by the fold's rules and its clock.
//
// The index is derived state: each entry is the job that last took the
// key, which holds it while holdsKey says so, a function of its
// projection and the fold's time. Restore indexes the jobs that hold
// their keys; a fold that never stopped may still have an entry of a job
// that no longer holds its key, which changes nothing observable.

// uniqueKey names a unique key: its queue and the key.
type uniqueKey struct{ queue, key string }

// holdsKey reports whether j holds its unique key at the fold's time.
func (p *Projector) holdsKey(j *job) bool {
	if j.UniqueKey == "" {
		return false
	}
	switch j.State {
	case events.StateQueued, events.StateOffered, events.StateActive, events.StateUnresolved:
		return true
	}
	return j.Conflict || j.UniqueFor > 0 && addTime(j.EndedAt, j.UniqueFor) > p.now
}

// keyHolder is the job that holds unique key key of queue now, nil if
// none (or key is ""). The input that asks touches the holder: a due
// deadline of it fires first (lookup), so that the key is judged by the
// holder's state at the input's time, as for the job an input names.
func (p *Projector) keyHolder(queue, key string) *job {
	if key == "" {
		return nil
	}
	// Only a job that holds the key by its projection is looked up: the
	// index of a fold that never stopped may have an entry of a job that
	// holds it no more, which a restored fold does not have, and firing
	// that job's deadline (its retirement) would decide differently.
	// Firing a deadline never makes a job hold its key.
	h := p.unique[uniqueKey{queue, key}]
	if h == nil || !p.holdsKey(h) {
		return nil
	}
	if h = p.lookup(h.ID); h != nil && p.holdsKey(h) {
		return h
	}
	return nil
}

// takeKey makes j the holder of its unique key (no other job holds it).
func (p *Projector) takeKey(j *job) {
	if j.UniqueKey == "" {
		return
	}
	k := uniqueKey{j.Queue, j.UniqueKey}
	if h := p.unique[k]; h == j {
		return
	}
	if p.unique == nil {
		p.unique = map[uniqueKey]*job{}
	}
	p.unique[k] = j
}

// dropKey forgets j's unique key: j leaves the projection.
func (p *Projector) dropKey(j *job) {
	if j.UniqueKey == "" {
		return
	}
	k := uniqueKey{j.Queue, j.UniqueKey}
	if p.unique[k] == j {
		delete(p.unique, k)
	}
}

// heldDetail is the detail of a decision refused for h's unique key.
func (p *Projector) heldDetail(h *job) string {
	var b strings.Builder
	b.WriteString("unique key " + h.UniqueKey + " of queue " + h.Queue + " is held by job " + h.ID + " (submitted by input " + u64(h.SubmitSeq) + ", ")
	if h.State == events.StateQueued || h.State.Live() || h.State == events.StateUnresolved || h.Conflict {
		b.WriteString(h.State.String() + ")")
	} else {
		b.WriteString(h.State.String() + " until " + events.FormatTime(addTime(h.EndedAt, h.UniqueFor)) + ")")
	}
	return b.String()
}
