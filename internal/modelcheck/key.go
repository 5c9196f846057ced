package modelcheck

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
)

// stateKey identifies a state up to what the fold's verdicts cannot see
// (doc.go, States): 128 bits of a SHA-256 of its canonical encoding.
type stateKey [16]byte

// keyEncoder writes a state's canonical encoding.
type keyEncoder struct {
	b   []byte
	now int64
}

func (e *keyEncoder) u(v uint64)   { e.b = binary.AppendUvarint(e.b, v) }
func (e *keyEncoder) i(v int64)    { e.b = binary.AppendVarint(e.b, v) }
func (e *keyEncoder) byte(v uint8) { e.b = append(e.b, v) }
func (e *keyEncoder) str(s string) { e.u(uint64(len(s))); e.b = append(e.b, s...) }
func (e *keyEncoder) rel(t int64)  { e.i(t - e.now) }
func (e *keyEncoder) flag(f bool) {
	if f {
		e.byte(1)
	} else {
		e.byte(0)
	}
}
func (e *keyEncoder) optRel(t int64) {
	if t == 0 { // "not set" stays "not set"
		e.byte(0)
		return
	}
	e.byte(1)
	e.rel(t)
}

// rank is the place of v among the sorted values of vs.
func rank(vs []uint64, v uint64) uint64 {
	i, _ := slices.BinarySearch(vs, v)
	return uint64(i)
}

// key is the identity of the state of p with the workers' knowledge w.
func (c *checker) key(p *projector.Projector, w *world) stateKey {
	e := keyEncoder{b: make([]byte, 0, 256), now: p.Now()}
	pol := p.Policy()
	for _, v := range []int64{pol.MinLease, pol.MaxLease, pol.DefaultLease, pol.AckTimeout, pol.CancelTimeout, pol.MaxLifetime, pol.Retain} {
		e.i(v)
	}
	e.u(pol.MaxGenerations)

	jobs := make([]events.Job, len(c.s.Jobs))
	present := make([]bool, len(c.s.Jobs))
	var submits []uint64
	for i, id := range c.s.Jobs {
		jobs[i], present[i] = p.Job(id)
		if present[i] && jobs[i].Queue != "" {
			submits = append(submits, jobs[i].SubmitSeq)
		}
	}
	slices.Sort(submits)

	for i := range c.s.Jobs {
		jw := &w.jobs[i]
		role := func(id string) uint8 {
			switch {
			case id == "":
				return 0
			case id == jw.last.id:
				return 1
			case id == jw.prev.id:
				return 2
			}
			return 3
		}
		j := &jobs[i]
		if !present[i] {
			e.byte(0)
		} else {
			e.byte(1)
			e.str(j.Holder)
			e.u(j.Generation)
			e.byte(uint8(j.State))
			e.byte(uint8(j.AckState))
			e.byte(uint8(j.Result))
			e.flag(j.Conflict)
			e.flag(j.CancelReq)
			e.flag(j.CancelAck)
			e.flag(j.LeaseExpired)
			e.byte(role(j.LeaseID))
			if j.State.Live() {
				e.rel(j.IssuedAt)
				e.i(j.Duration)
				if j.State == events.StateOffered {
					e.rel(j.AckDeadline)
				} else {
					e.rel(j.ExpiresAt)
					e.u(j.RenewSeq)
					e.u(j.ProgressSeq)
					e.i(j.ProgressValue)
					if j.CancelReq {
						e.rel(j.CancelBy)
					}
				}
			} else if c.retain {
				e.rel(j.EndedAt)
			}
			if j.Queue != "" {
				e.str(j.Queue)
				e.str(j.Submitter)
				e.i(j.Priority)
				e.u(j.Turn)
				e.u(j.MaxAttempts)
				e.i(j.Backoff)
				e.i(j.BackoffMax)
				e.i(j.AttemptLease)
				e.i(j.AttemptAck)
				e.flag(j.HasPayload)
				e.str(j.Payload)
				e.u(rank(submits, j.SubmitSeq))
				e.u(j.Attempt)
				if j.State == events.StateQueued {
					e.optRel(j.ReadyAt)
				}
				e.str(string(j.LastReason))
			}
		}
		cur := ""
		if present[i] {
			cur = j.LeaseID
		}
		o := jw.old(cur)
		e.byte(role(o.id))
		e.u(o.gen)
		e.str(o.holder)
		if a := jw.auth; a.until > e.now {
			e.byte(1)
			e.byte(role(a.lease.id))
			e.u(a.lease.gen)
			e.str(a.lease.holder)
			e.rel(a.until)
		} else {
			e.byte(0)
		}
	}

	for _, t := range w.announced[:len(c.s.Workers)] {
		if t > e.now {
			e.rel(t)
		} else {
			e.byte(0)
		}
	}
	caps := p.Capacities()
	seqs := make([]uint64, len(caps))
	for i := range caps {
		seqs[i] = caps[i].Seq
	}
	slices.Sort(seqs)
	e.u(uint64(len(caps)))
	for i := range caps {
		cp := &caps[i]
		e.str(cp.Queue)
		e.str(cp.Worker)
		e.u(cp.Slots)
		e.rel(cp.Until)
		e.u(rank(seqs, cp.Seq))
	}
	sts := p.Standings()
	e.u(uint64(len(sts)))
	for i := range sts {
		st := &sts[i]
		e.str(st.Queue)
		e.str(st.Worker)
		e.u(st.Window)
		e.u(st.Strikes)
		e.optRel(st.HeldUntil)
		e.rel(st.At)
	}
	ls := p.Limits() // revision 9: sorted, with their buckets
	e.u(uint64(len(ls)))
	for i := range ls {
		l := &ls[i]
		e.str(l.Queue)
		e.str(l.ConcurrencyKey)
		e.flag(l.HasMaxActive)
		e.u(l.MaxActive)
		e.u(l.Rate)
		e.i(l.PeriodMS)
		e.optRel(l.TAT)
	}
	sum := sha256.Sum256(e.b)
	return stateKey(sum[:16])
}
