package projector

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"

	"github.com/maknow/tenure/events"
)

// Snapshots off the fold's goroutine. Snapshot encodes every job: O(jobs)
// on the goroutine that folds, a pause of the coordinator's live loop that
// grows with every job kept (0.77 s at a million). Freeze takes the state
// in constant time instead, and Frozen.Encode builds the very same bytes
// later, on any goroutine, from the previous snapshot's bytes and the jobs
// changed since.
//
// It rests on a property the audit also relies on (RebuildHash): every
// change of a job is told by a decision about it that carries its whole
// projection after the change, and a retired job's decision is the last
// about it. So the projector only has to keep, per job changed since the
// last freeze, the projection its latest decision carried: a map write per
// decision about a job, done in emit, while tracking (Track) is on.

// Frozen is the state of a projector at one input, taken by Freeze. Its
// Encode may run on another goroutine than the projector's, and returns
// what the projector's Snapshot returned at the freeze, byte for byte.
type Frozen struct {
	once sync.Once
	// Until encoded: the state this one changes, the header of this state
	// (everything before the job count) and the jobs changed since prev.
	prev    *Frozen
	header  []byte
	changed map[string]events.Job
	// Once encoded.
	out []byte
	err error
	// scratch is the buffer the merge built the jobs in, handed to the
	// next encoding (one state-sized allocation per snapshot, not two).
	scratch []byte
}

// encoded returns a Frozen of snapshot bytes already at hand.
func encoded(snap []byte) *Frozen {
	f := &Frozen{out: snap}
	f.once.Do(func() {})
	return f
}

// Track turns on the tracking of changes that Freeze needs, from the state
// now: right after New or Restore this costs nothing; later it encodes the
// state once (Snapshot), on the caller's goroutine. With tracking on, each
// decision about a job also updates a map of the jobs changed since the
// last Freeze, so call Freeze from time to time (the changes are held until
// then). Tracking ends with the next Restore.
func (p *Projector) Track() {
	if p.changed != nil {
		return
	}
	switch {
	case p.restored != nil:
		p.frozen = encoded(p.restored)
	default:
		p.frozen = encoded(p.Snapshot())
	}
	p.restored = nil
	p.changed = make(map[string]events.Job)
}

// Tracking reports whether Track is on.
func (p *Projector) Tracking() bool { return p.changed != nil }

// Changes is the number of jobs changed since the last Freeze (while
// tracking): what the next Freeze hands over, and what tracking holds.
func (p *Projector) Changes() int { return len(p.changed) }

// Untrack turns tracking off, dropping the changes and the frozen states
// not yet encoded; a Track after it starts again from the state now (an
// encoding of the whole state). It is how a caller recovers from an
// Encode error.
func (p *Projector) Untrack() { p.changed, p.frozen, p.restored = nil, nil, nil }

// Freeze returns the state now, in time independent of the number of jobs
// (it hands over the map of jobs changed since the last Freeze). Without
// Track it turns tracking on first (see Track).
func (p *Projector) Freeze() *Frozen {
	p.Track()
	f := &Frozen{prev: p.frozen, header: p.appendHeader(nil), changed: p.changed}
	p.frozen = f
	p.changed = make(map[string]events.Job, min(len(f.changed), 1<<16))
	return f
}

// Encode returns the snapshot of the frozen state: what Snapshot returned
// at the freeze. It encodes, if not yet done, the states frozen before this
// one that it builds on, and may be called from any goroutine, once or many
// times; the work is done once. Its cost is one pass over the previous
// snapshot's bytes and a sort of the jobs changed since.
func (f *Frozen) Encode() ([]byte, error) {
	f.once.Do(func() {
		base, err := f.prev.Encode()
		if err != nil {
			f.err = err
		} else {
			scratch := f.prev.scratch
			f.prev.scratch = nil
			f.out, f.scratch, f.err = merge(base, f.header, f.changed, scratch)
		}
		f.prev, f.changed, f.header = nil, nil, nil // the memory goes with them
	})
	return f.out, f.err
}

// merge builds the snapshot whose header is header and whose jobs are
// base's, with each of changed replacing (or, with generation 0, removing)
// the job of its id.
//
// The jobs are built in scratch (grown if need be), returned for the next
// merge.
func merge(base, header []byte, changed map[string]events.Job, scratch []byte) ([]byte, []byte, error) {
	if len(base) < len(snapshotMagic)+4 {
		return nil, scratch, fmt.Errorf("%w: base snapshot too short", ErrBadSnapshot)
	}
	r := &snapReader{b: base[len(snapshotMagic) : len(base)-4]}
	if string(base[:len(snapshotMagic)]) != snapshotMagic {
		r.uvarint("revision")
		r.bytes(events.LeaseKeyLen, "lease key")
	}
	r.uvarint("last sequence")
	r.varint("time")
	for range 6 {
		r.varint("policy")
	}
	r.uvarint("policy")
	m := string(base[:len(snapshotMagic)])
	if m == snapshotMagic3 || m == snapshotMagic4 || m == snapshotMagic5 || m == snapshotMagic6 || m == snapshotMagic7 || m == snapshotMagic8 {
		r.varint("policy")
	}
	if m == snapshotMagic4 || m == snapshotMagic5 || m == snapshotMagic6 || m == snapshotMagic7 || m == snapshotMagic8 {
		for n := r.uvarint("capacity count"); n > 0 && r.err == nil; n-- {
			r.strBytes("capacity queue")
			r.strBytes("capacity worker")
			r.uvarint("capacity slots")
			r.varint("capacity until")
			r.uvarint("capacity sequence")
		}
	}
	if m == snapshotMagic5 || m == snapshotMagic6 || m == snapshotMagic7 || m == snapshotMagic8 {
		for n := r.uvarint("standing count"); n > 0 && r.err == nil; n-- {
			r.strBytes("standing queue")
			r.strBytes("standing worker")
			r.uvarint("standing window")
			r.uvarint("standing strikes")
			r.varint("standing hold")
			r.varint("standing time")
		}
	}
	if m == snapshotMagic7 || m == snapshotMagic8 {
		for n := r.uvarint("limit count"); n > 0 && r.err == nil; n-- {
			r.strBytes("limit queue")
			r.strBytes("limit key")
			f := r.bytes(1, "limit flags")[0]
			if f&limitCapped != 0 {
				r.uvarint("limit max_active")
			}
			if f&limitRate != 0 {
				r.uvarint("limit rate")
				r.varint("limit period")
				r.varint("limit bucket")
			}
		}
	}
	if m == snapshotMagic8 { // the schedules (restoreSchedules' layout)
		for n := r.uvarint("schedule count"); n > 0 && r.err == nil; n-- {
			for range 9 {
				r.strBytes("schedule strings")
			}
			r.bytes(1, "schedule flags")
			r.varint("schedule next")
			r.varint("schedule anchor")
			r.uvarint("schedule priority")
			r.uvarint("schedule max_attempts")
			for range 4 {
				r.varint("schedule template")
			}
		}
	}
	n := r.uvarint("job count")
	if r.err != nil {
		return nil, scratch, r.err
	}
	ids := make([]string, 0, len(changed))
	for id := range changed {
		ids = append(ids, id)
	}
	slices.Sort(ids)

	jobs := scratch[:0]
	if need := len(r.b) + len(ids)*160; cap(jobs) < need {
		jobs = make([]byte, 0, need+need/8)
	}
	count := uint64(0)
	put := func(id string) {
		if j := changed[id]; j.Exists() {
			jobs = appendJob(jobs, &j)
			count++
		}
	}
	k := 0
	for i := uint64(0); i < n; i++ {
		start := r.b
		id := r.strBytes("job id") // perf: string(id) in a comparison does not allocate
		skipJobRest(r)
		if r.err != nil {
			return nil, scratch, r.err
		}
		rec := start[:len(start)-len(r.b)]
		for k < len(ids) && ids[k] < string(id) {
			put(ids[k])
			k++
		}
		if k < len(ids) && ids[k] == string(id) {
			put(ids[k])
			k++
			continue
		}
		jobs = append(jobs, rec...)
		count++
	}
	for ; k < len(ids); k++ {
		put(ids[k])
	}
	if len(r.b) != 0 {
		return nil, jobs, fmt.Errorf("%w: %d trailing bytes in the base snapshot", ErrBadSnapshot, len(r.b))
	}
	out := make([]byte, 0, len(header)+binary.MaxVarintLen64+len(jobs)+4)
	out = append(out, header...)
	out = binary.AppendUvarint(out, count)
	out = append(out, jobs...)
	return binary.BigEndian.AppendUint32(out, crc32.Checksum(out, castagnoli)), jobs, nil
}

// skipJobRest reads past a job record after its id (appendJob's layout).
func skipJobRest(r *snapReader) {
	for range 3 { // lease id, holder, conflict holder
		r.strBytes("job strings")
	}
	hdr := r.bytes(4, "job header")
	for range 8 {
		r.uvarint("job counters")
	}
	for range 11 {
		r.varint("job times")
	}
	if hdr != nil && hdr[3]&0x10 != 0 { // a queue job (format 4 on)
		for range queueStrs {
			r.strBytes("queue strings")
		}
		for range queueUvarint {
			r.uvarint("queue counters")
		}
		for range queueVarint {
			r.varint("queue times")
		}
		if hdr[3]&0x40 != 0 { // the fields of revision 8 (format 6)
			var j events.Job
			readRev8Fields(r, &j)
		}
		if hdr[3]&0x80 != 0 { // the fields of revision 9 (format 7)
			var j events.Job
			readRev9Fields(r, &j)
		}
	}
}
