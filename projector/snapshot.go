package projector

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/maknow/tenure/events"
)

// snapshotMagic starts every snapshot; the digit is the format version.
// Format 1 is the state under rules revision 1; format 2 (revision 2 on)
// adds, right after the magic, the revision (uvarint) and the lease key
// (events.LeaseKeyLen bytes); format 3 (revision 3 on) adds the policy's
// retention (varint, ns) after max_generations; format 4 (revision 4 on)
// adds, after the policy, the standing capacity announcements (a count,
// then per announcement, by queue then worker: queue and worker as
// strings, slots uvarint, until varint, the pull's sequence uvarint), and
// queue jobs: flag bit 4 marks one (bit 5: it has a payload), whose record
// goes on with its queue fields (queueFields). A job outside any queue
// encodes as in format 3. Format 5 (revisions 5 to 7) adds, after the
// capacities, the standings (a count, then per standing, by queue then
// worker: queue and worker as strings, window and strikes uvarint, the
// end of its hold varint (0: not held), the time of its last decision
// varint). Format 6 (revision 8 on) is format 5, and a queue job's record
// may go on, flag bit 6 set, with the fields of revision 8 (rev8Fields: a
// byte of bits for the fields present, then each present one). A job
// record is the same in every format that can hold it, so that Frozen's
// merge can copy the records of a base of an earlier format. A state
// always encodes in the format of its revision, so the state hash of a
// state of an earlier revision never changed.
//
// Format 7 (revision 9 on) is format 6 with the limits after the
// standings (a count, then per limit, by queue then key: queue and key
// ("" for the queue's own) as strings, a byte of flags (limitCapped,
// limitRate), then when capped max_active uvarint, when rated the rate
// uvarint, period_ms varint and the bucket's tat varint), and a queue job's record
// may go on, flag bit 7 set, with the fields of revision 9 (rev9Fields:
// a byte of bits, then each present one) after those of revision 8.
// The flags of a limit's record (format 7).
const (
	limitCapped = 1 << iota // max_active
	limitRate               // rate, period_ms, the bucket's tat
)

const (
	snapshotMagic  = "TNRSNAP1"
	snapshotMagic2 = "TNRSNAP2"
	snapshotMagic3 = "TNRSNAP3"
	snapshotMagic4 = "TNRSNAP4"
	snapshotMagic5 = "TNRSNAP5"
	snapshotMagic6 = "TNRSNAP6"
	snapshotMagic7 = "TNRSNAP7"
	snapshotMagic8 = "TNRSNAP8"
)

// Format 8 (revision 10 on) is format 7 with the schedules after the
// limits: a count, then per schedule, by id: id, actor, cron, tz, zone
// and the template's queue, payload, concurrency key and unique key as
// strings, a byte of flags (schedOnce, schedPaused, schedPayload), next
// and anchor varints, and the template's priority, max_attempts (uvarints),
// backoff_ms, backoff_max_ms, lease_ms and ack_timeout_ms (varints).
const (
	schedOnce    = 1 << iota // missed: once
	schedPaused              // paused
	schedPayload             // the template has a payload
)

// ErrBadSnapshot is returned by Restore for bytes that are not a valid snapshot.
var ErrBadSnapshot = errors.New("projector: bad snapshot")

// Snapshot returns the projector's whole state in a canonical binary form:
// the same state always gives the same bytes (jobs sorted by id), whatever
// the history that led to it. A CRC-32C trailer guards against corruption.
func (p *Projector) Snapshot() []byte {
	ids := make([]string, 0, len(p.jobs))
	for id := range p.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b := p.appendHeader(make([]byte, 0, 64+len(ids)*160))
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = appendJob(b, &p.jobs[id].Job)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// appendHeader appends what a snapshot holds before its job count: the
// magic (and from format 2 on the revision and lease key), the last
// sequence, the time and the policy.
func (p *Projector) appendHeader(b []byte) []byte {
	switch {
	case p.rev >= events.Revision10:
		b = append(b, snapshotMagic8...)
		b = binary.AppendUvarint(b, uint64(p.rev))
		b = append(b, p.leaseKey[:]...)
	case p.rev >= events.Revision9:
		b = append(b, snapshotMagic7...)
		b = binary.AppendUvarint(b, uint64(p.rev))
		b = append(b, p.leaseKey[:]...)
	case p.rev >= events.Revision8:
		b = append(b, snapshotMagic6...)
		b = binary.AppendUvarint(b, uint64(p.rev))
		b = append(b, p.leaseKey[:]...)
	case p.rev >= events.Revision5:
		b = append(b, snapshotMagic5...)
		b = binary.AppendUvarint(b, uint64(p.rev))
		b = append(b, p.leaseKey[:]...)
	case p.rev >= events.Revision4:
		b = append(b, snapshotMagic4...)
		b = binary.AppendUvarint(b, uint64(p.rev))
		b = append(b, p.leaseKey[:]...)
	case p.rev >= events.Revision3:
		b = append(b, snapshotMagic3...)
		b = binary.AppendUvarint(b, uint64(p.rev))
		b = append(b, p.leaseKey[:]...)
	case p.rev >= events.Revision2:
		b = append(b, snapshotMagic2...)
		b = binary.AppendUvarint(b, uint64(p.rev))
		b = append(b, p.leaseKey[:]...)
	default:
		b = append(b, snapshotMagic...)
	}
	b = binary.AppendUvarint(b, p.lastSeq)
	b = binary.AppendVarint(b, p.now)
	pol := &p.policy
	for _, v := range []int64{pol.MinLease, pol.MaxLease, pol.DefaultLease, pol.AckTimeout, pol.CancelTimeout, pol.MaxLifetime} {
		b = binary.AppendVarint(b, v)
	}
	b = binary.AppendUvarint(b, pol.MaxGenerations)
	if p.rev >= events.Revision3 {
		b = binary.AppendVarint(b, pol.Retain)
	}
	if p.rev >= events.Revision4 {
		caps := p.Capacities()
		b = binary.AppendUvarint(b, uint64(len(caps)))
		for i := range caps {
			c := &caps[i]
			b = appendStr(b, c.Queue)
			b = appendStr(b, c.Worker)
			b = binary.AppendUvarint(b, c.Slots)
			b = binary.AppendVarint(b, c.Until)
			b = binary.AppendUvarint(b, c.Seq)
		}
	}
	if p.rev >= events.Revision5 {
		sts := p.Standings()
		b = binary.AppendUvarint(b, uint64(len(sts)))
		for i := range sts {
			st := &sts[i]
			b = appendStr(b, st.Queue)
			b = appendStr(b, st.Worker)
			b = binary.AppendUvarint(b, st.Window)
			b = binary.AppendUvarint(b, st.Strikes)
			b = binary.AppendVarint(b, st.HeldUntil)
			b = binary.AppendVarint(b, st.At)
		}
	}
	if p.rev >= events.Revision9 {
		ls := p.Limits()
		b = binary.AppendUvarint(b, uint64(len(ls)))
		for i := range ls {
			l := &ls[i]
			b = appendStr(b, l.Queue)
			b = appendStr(b, l.ConcurrencyKey)
			var f byte
			if l.HasMaxActive {
				f |= limitCapped
			}
			if l.Rate != 0 {
				f |= limitRate
			}
			b = append(b, f)
			if l.HasMaxActive {
				b = binary.AppendUvarint(b, l.MaxActive)
			}
			if l.Rate != 0 {
				b = binary.AppendUvarint(b, l.Rate)
				b = binary.AppendVarint(b, l.PeriodMS)
				b = binary.AppendVarint(b, l.TAT)
			}
		}
	}
	if p.rev >= events.Revision10 {
		ids := make([]string, 0, len(p.scheds))
		for id := range p.scheds {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		b = binary.AppendUvarint(b, uint64(len(ids)))
		for _, id := range ids {
			s := p.scheds[id]
			t := &s.tmpl
			for _, str := range []string{s.def.ID, s.def.Actor, s.def.Cron, s.def.TZ, s.def.Zone, t.Queue, t.Payload, t.ConcurrencyKey, t.UniqueKey} {
				b = appendStr(b, str)
			}
			var f byte
			if s.def.Missed == events.MissedOnce {
				f |= schedOnce
			}
			if s.def.Paused {
				f |= schedPaused
			}
			if t.HasPayload {
				f |= schedPayload
			}
			b = append(b, f)
			b = binary.AppendVarint(b, s.def.Next)
			b = binary.AppendVarint(b, s.anchor)
			b = binary.AppendUvarint(b, uint64(t.Priority))
			b = binary.AppendUvarint(b, t.MaxAttempts)
			for _, v := range []int64{t.BackoffMS, t.BackoffMax, t.LeaseMS, t.AckTimeoutMS} {
				b = binary.AppendVarint(b, v)
			}
		}
	}
	return b
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// minJobBytes is the least a job takes in a snapshot: its id (a length and
// at least one byte), three more string lengths, four header bytes, eight
// uvarints and eleven varints of at least one byte each. It bounds the job
// count a snapshot of a given size can claim.
const minJobBytes = 2 + 3 + 4 + 8 + 11

func appendJob(b []byte, j *events.Job) []byte {
	str := func(b []byte, s string) []byte {
		b = binary.AppendUvarint(b, uint64(len(s)))
		return append(b, s...)
	}
	b = str(b, j.ID)
	b = str(b, j.LeaseID)
	b = str(b, j.Holder)
	b = str(b, j.ConflictWith)
	var flags byte
	rev8 := rev8FieldsOf(j)
	rev9 := rev9FieldsOf(j)
	for i, f := range []bool{j.Conflict, j.CancelReq, j.CancelAck, j.LeaseExpired, j.Queue != "", j.HasPayload, rev8 != 0, rev9 != 0} {
		if f {
			flags |= 1 << i
		}
	}
	b = append(b, byte(j.State), byte(j.AckState), byte(j.Result), flags)
	for _, v := range []uint64{j.Generation, j.RenewSeq, j.ProgressSeq, j.Stale, j.Late, j.LateProgress, j.Duplicates, j.Conflicts} {
		b = binary.AppendUvarint(b, v)
	}
	for _, v := range []int64{j.IssuedAt, j.Duration, j.ExpiresAt, j.AckDeadline, j.AckedAt, j.RenewAt, j.ProgressValue, j.ProgressAt, j.CancelAt, j.CancelBy, j.EndedAt} {
		b = binary.AppendVarint(b, v)
	}
	if j.Queue != "" {
		b = str(b, j.Queue)
		b = str(b, j.Submitter)
		b = str(b, j.Payload)
		b = str(b, string(j.LastReason))
		for _, v := range []uint64{uint64(j.Priority), j.Turn, j.MaxAttempts, j.SubmitSeq, j.Attempt} {
			b = binary.AppendUvarint(b, v)
		}
		for _, v := range []int64{j.Backoff, j.BackoffMax, j.AttemptLease, j.AttemptAck, j.SubmittedAt, j.ReadyAt} {
			b = binary.AppendVarint(b, v)
		}
		if rev8 != 0 {
			b = append(b, rev8)
			if rev8&r8RunAt != 0 {
				b = binary.AppendVarint(b, j.RunAt)
			}
			if rev8&r8Delay != 0 {
				b = binary.AppendVarint(b, j.Delay)
			}
			if rev8&r8UniqueKey != 0 {
				b = str(b, j.UniqueKey)
			}
			if rev8&r8UniqueFor != 0 {
				b = binary.AppendVarint(b, j.UniqueFor)
			}
		}
		if rev9 != 0 {
			b = append(b, rev9)
			if rev9&r9ConcurrencyKey != 0 {
				b = str(b, j.ConcurrencyKey)
			}
		}
	}
	return b
}

// The fields of revision 9 a queue job's record may go on with (format
// 7): a byte of these bits, then each field whose bit is set.
const (
	r9ConcurrencyKey = 1 << iota // string
	r9Known          = r9ConcurrencyKey
)

// rev9FieldsOf is the byte of the revision-9 fields j has (0: none).
func rev9FieldsOf(j *events.Job) byte {
	var f byte
	if j.ConcurrencyKey != "" {
		f |= r9ConcurrencyKey
	}
	return f
}

// readRev9Fields reads the revision-9 fields of a queue job's record.
func readRev9Fields(r *snapReader, j *events.Job) {
	f := r.bytes(1, "revision 9 fields")[0]
	if f == 0 || f&^r9Known != 0 {
		r.fail("revision 9 fields")
		return
	}
	if f&r9ConcurrencyKey != 0 {
		j.ConcurrencyKey = string(r.strBytes("concurrency key"))
	}
}

// The fields of revision 8 a queue job's record may go on with (format 6):
// a byte of these bits, then each field whose bit is set, in bit order.
const (
	r8RunAt     = 1 << iota // varint
	r8Delay                 // varint
	r8UniqueKey             // string
	r8UniqueFor             // varint
	r8Known     = r8RunAt | r8Delay | r8UniqueKey | r8UniqueFor
)

// rev8FieldsOf is the byte of the revision-8 fields j has (0: none, and
// then its record is the one of format 5).
func rev8FieldsOf(j *events.Job) byte {
	var f byte
	if j.RunAt != 0 {
		f |= r8RunAt
	}
	if j.Delay != 0 {
		f |= r8Delay
	}
	if j.UniqueKey != "" {
		f |= r8UniqueKey
	}
	if j.UniqueFor != 0 {
		f |= r8UniqueFor
	}
	return f
}

// readRev8Fields reads the revision-8 fields of a queue job's record.
func readRev8Fields(r *snapReader, j *events.Job) {
	f := r.bytes(1, "revision 8 fields")[0]
	if f == 0 || f&^r8Known != 0 {
		r.fail("revision 8 fields")
		return
	}
	if f&r8RunAt != 0 {
		j.RunAt = r.varint("run_at")
	}
	if f&r8Delay != 0 {
		j.Delay = r.varint("delay")
	}
	if f&r8UniqueKey != 0 {
		j.UniqueKey = string(r.strBytes("unique key"))
	}
	if f&r8UniqueFor != 0 {
		j.UniqueFor = r.varint("unique for")
	}
}

// Queue fields of a format-4 job record: 4 strings, 5 uvarints, 6 varints.
const (
	queueStrs    = 4
	queueUvarint = 5
	queueVarint  = 6
)

// uvarintLen is the length of the shortest uvarint encoding of v.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// snapReader decodes a snapshot, remembering the first error.
type snapReader struct {
	b   []byte
	err error
}

func (r *snapReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: truncated or invalid %s", ErrBadSnapshot, what)
	}
}

// uvarint and varint accept only the shortest encoding of a value (as
// AppendUvarint and AppendVarint write it), so that a snapshot Restore
// accepts is the canonical encoding of the state it restores: the base
// Track and Frozen.Encode build later snapshots on, byte for byte.
func (r *snapReader) uvarint(what string) uint64 {
	v, n := binary.Uvarint(r.b)
	if n > 0 && n != uvarintLen(v) {
		n = 0
	}
	if n <= 0 {
		r.fail(what)
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *snapReader) varint(what string) int64 {
	v, n := binary.Varint(r.b)
	if n > 0 && n != uvarintLen(uint64(v)<<1^uint64(v>>63)) {
		n = 0
	}
	if n <= 0 {
		r.fail(what)
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

// strBytes reads a length-prefixed string; the bytes stay in the snapshot.
func (r *snapReader) strBytes(what string) []byte {
	n := r.uvarint(what)
	if n > uint64(len(r.b)) {
		r.fail(what)
		r.b = nil
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *snapReader) bytes(n int, what string) []byte {
	if n > len(r.b) {
		r.fail(what)
		r.b = nil
		return make([]byte, n)
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// Restore replaces the projector's state with a snapshot. On error the
// projector is unchanged. It keeps snap (do not modify it) as the base of
// Track until the next Step, and turns tracking off.
func (p *Projector) Restore(snap []byte) error {
	if len(snap) < len(snapshotMagic)+4 {
		return fmt.Errorf("%w: missing header", ErrBadSnapshot)
	}
	magic := string(snap[:len(snapshotMagic)])
	if magic != snapshotMagic && magic != snapshotMagic2 && magic != snapshotMagic3 && magic != snapshotMagic4 && magic != snapshotMagic5 && magic != snapshotMagic6 && magic != snapshotMagic7 && magic != snapshotMagic8 {
		return fmt.Errorf("%w: missing header", ErrBadSnapshot)
	}
	body, sum := snap[:len(snap)-4], binary.BigEndian.Uint32(snap[len(snap)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return fmt.Errorf("%w: checksum mismatch", ErrBadSnapshot)
	}
	r := &snapReader{b: body[len(snapshotMagic):]}
	q := New()
	q.part = p.part // a snapshot holds one partition's jobs; the receiver names which
	if magic != snapshotMagic {
		// Format 2 is revision 2; format 3 is revision 3 on.
		lo, hi, format := uint64(events.Revision2), uint64(events.Revision2), 2
		switch magic {
		case snapshotMagic3:
			lo, hi, format = events.Revision3, events.Revision3, 3
		case snapshotMagic4:
			lo, hi, format = events.Revision4, events.Revision4, 4
		case snapshotMagic5:
			lo, hi, format = events.Revision5, events.Revision7, 5
		case snapshotMagic6:
			lo, hi, format = events.Revision8, events.Revision8, 6
		case snapshotMagic7:
			lo, hi, format = events.Revision9, events.Revision9, 7
		case snapshotMagic8:
			lo, hi, format = events.Revision10, events.Revision10, 8
		}
		rev := r.uvarint("revision")
		key := r.bytes(events.LeaseKeyLen, "lease key")
		if r.err == nil && (rev < lo || rev > hi) {
			return fmt.Errorf("%w: revision %d in a format %d snapshot", ErrBadSnapshot, rev, format)
		}
		if r.err != nil {
			return r.err
		}
		q.setRules(uint32(rev), [events.LeaseKeyLen]byte(key))
	}
	q.lastSeq = r.uvarint("last sequence")
	q.now = r.varint("time")
	pol := &q.policy
	for _, f := range []*int64{&pol.MinLease, &pol.MaxLease, &pol.DefaultLease, &pol.AckTimeout, &pol.CancelTimeout, &pol.MaxLifetime} {
		*f = r.varint("policy")
	}
	pol.MaxGenerations = r.uvarint("policy")
	format8 := magic == snapshotMagic8
	format7 := magic == snapshotMagic7 || format8 // format 8 is format 7 and the schedules
	format6 := magic == snapshotMagic6 || format7 // format 7 is format 6, the limits and the fields of revision 9
	format5 := magic == snapshotMagic5 || format6 // format 6 is format 5 and the fields of revision 8
	format4 := magic == snapshotMagic4 || format5 // format 5 is format 4 and the standings
	if magic == snapshotMagic3 || format4 {
		pol.Retain = r.varint("policy")
	}
	if r.err == nil && !validPolicy(pol) {
		return fmt.Errorf("%w: policy out of range: %+v", ErrBadSnapshot, *pol)
	}
	var caps []Capacity
	if format4 {
		n := r.uvarint("capacity count")
		if n > uint64(len(r.b)/7) {
			return fmt.Errorf("%w: capacity count %d", ErrBadSnapshot, n)
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			var c Capacity
			c.Queue = string(r.strBytes("capacity queue"))
			c.Worker = string(r.strBytes("capacity worker"))
			c.Slots = r.uvarint("capacity slots")
			c.Until = r.varint("capacity until")
			c.Seq = r.uvarint("capacity sequence")
			caps = append(caps, c)
		}
		if r.err != nil {
			return r.err
		}
		for i := range caps {
			c := &caps[i]
			switch {
			case !events.ValidToken(c.Queue) || !events.ValidToken(c.Worker):
				return fmt.Errorf("%w: capacity %q/%q: not valid tokens", ErrBadSnapshot, c.Queue, c.Worker)
			case i > 0 && (caps[i-1].Queue > c.Queue || caps[i-1].Queue == c.Queue && caps[i-1].Worker >= c.Worker):
				return fmt.Errorf("%w: capacities not sorted at %q/%q", ErrBadSnapshot, c.Queue, c.Worker)
			case c.Slots == 0 || c.Slots > events.MaxSlots || c.Until <= q.now || c.Seq == 0 || c.Seq > q.lastSeq:
				return fmt.Errorf("%w: capacity %q/%q out of range", ErrBadSnapshot, c.Queue, c.Worker)
			}
		}
	}
	var sts []Standing
	if format5 {
		n := r.uvarint("standing count")
		if n > uint64(len(r.b)/8) {
			return fmt.Errorf("%w: standing count %d", ErrBadSnapshot, n)
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			var st Standing
			st.Queue = string(r.strBytes("standing queue"))
			st.Worker = string(r.strBytes("standing worker"))
			st.Window = r.uvarint("standing window")
			st.Strikes = r.uvarint("standing strikes")
			st.HeldUntil = r.varint("standing hold")
			st.At = r.varint("standing time")
			sts = append(sts, st)
		}
		if r.err != nil {
			return r.err
		}
		for i := range sts {
			st := &sts[i]
			s := standing{window: st.Window, strikes: st.Strikes, heldUntil: st.HeldUntil, touchedAt: st.At}
			switch {
			case !events.ValidToken(st.Queue) || !events.ValidToken(st.Worker):
				return fmt.Errorf("%w: standing %q/%q: not valid tokens", ErrBadSnapshot, st.Queue, st.Worker)
			case i > 0 && (sts[i-1].Queue > st.Queue || sts[i-1].Queue == st.Queue && sts[i-1].Worker >= st.Worker):
				return fmt.Errorf("%w: standings not sorted at %q/%q", ErrBadSnapshot, st.Queue, st.Worker)
			case st.Window == 0 || st.Window > events.MaxWindow || st.HeldUntil != 0 && st.HeldUntil <= q.now ||
				st.At > q.now || s.forgetAt() <= q.now || s.isNew(q.now):
				return fmt.Errorf("%w: standing %q/%q out of range", ErrBadSnapshot, st.Queue, st.Worker)
			}
		}
	}
	if format7 {
		n := r.uvarint("limit count")
		if n > events.MaxLimits || n > uint64(len(r.b)/5) {
			return fmt.Errorf("%w: limit count %d", ErrBadSnapshot, n)
		}
		var ls []Limit
		var flags []byte
		for i := uint64(0); i < n && r.err == nil; i++ {
			var l Limit
			l.Queue = string(r.strBytes("limit queue"))
			l.ConcurrencyKey = string(r.strBytes("limit key"))
			f := r.bytes(1, "limit flags")[0]
			if f&limitCapped != 0 {
				l.MaxActive, l.HasMaxActive = r.uvarint("limit max_active"), true
			}
			if f&limitRate != 0 {
				l.Rate = r.uvarint("limit rate")
				l.PeriodMS = r.varint("limit period")
				l.TAT = r.varint("limit bucket")
			}
			ls, flags = append(ls, l), append(flags, f)
		}
		if r.err != nil {
			return r.err
		}
		for i := range ls {
			l := &ls[i]
			switch {
			case !events.ValidToken(l.Queue) || l.ConcurrencyKey != "" && !events.ValidToken(l.ConcurrencyKey):
				return fmt.Errorf("%w: limit %q/%q: not valid tokens", ErrBadSnapshot, l.Queue, l.ConcurrencyKey)
			case i > 0 && (ls[i-1].Queue > l.Queue || ls[i-1].Queue == l.Queue && ls[i-1].ConcurrencyKey >= l.ConcurrencyKey):
				return fmt.Errorf("%w: limits not sorted at %q/%q", ErrBadSnapshot, l.Queue, l.ConcurrencyKey)
			case flags[i] == 0 || flags[i]&^(limitCapped|limitRate) != 0, l.HasMaxActive && l.ConcurrencyKey == "",
				l.MaxActive > events.MaxActive, l.Rate != 0 && (!validRate(l.Rate, l.PeriodMS) || !validTAT(l.Rate, l.PeriodMS, l.TAT, q.now)):
				return fmt.Errorf("%w: limit %q/%q out of range", ErrBadSnapshot, l.Queue, l.ConcurrencyKey)
			}
			// Before the jobs: their ready jobs go to the keys' heaps.
			kl := q.queueOf(l.Queue).limit(l.ConcurrencyKey)
			kl.capped, kl.max = l.HasMaxActive, l.MaxActive
			if l.Rate != 0 {
				q.setRate(kl, &bucket{rate: l.Rate, period: l.PeriodMS * 1e6, tat: l.TAT})
			}
		}
		q.nLimits = len(ls)
	}
	if format8 {
		if err := q.restoreSchedules(r); err != nil {
			return err
		}
	}
	n := r.uvarint("job count")
	if n > uint64(len(r.b)/minJobBytes) {
		return fmt.Errorf("%w: job count %d", ErrBadSnapshot, n)
	}
	// One allocation for every job, and one for the strings of every job:
	// a restore is on the coordinator's restart path (and the audit's), and
	// a million small objects are work for the allocator, then for the
	// garbage collector ever after. The strings are copied into one buffer
	// first (ends records where each one ends in it), converted to a string
	// once, then sliced.
	slab := make([]job, n)
	ends := make([]uint32, 0, 4*n)
	var qstrs []string // queue jobs' strings, queueStrs per queue job in order
	strs := make([]byte, 0, min(len(r.b), 32*int(n)))
	for i := uint64(0); i < n && r.err == nil; i++ {
		j := &slab[i]
		j.heapIdx = -1
		for range 4 { // id, lease id, holder, conflict holder
			strs = append(strs, r.strBytes("job strings")...)
			ends = append(ends, uint32(len(strs)))
		}
		hdr := r.bytes(4, "job header")
		if known := byte(0xf); !format7 && format6 && hdr[3]&^0x7f != 0 || !format6 && format4 && hdr[3]&^0x3f != 0 || !format4 && hdr[3]&^known != 0 {
			r.fail("job flags")
		}
		j.State, j.AckState, j.Result = events.State(hdr[0]), events.AckState(hdr[1]), events.Outcome(hdr[2])
		j.Conflict, j.CancelReq, j.CancelAck, j.LeaseExpired = hdr[3]&1 != 0, hdr[3]&2 != 0, hdr[3]&4 != 0, hdr[3]&8 != 0
		j.Generation = r.uvarint("generation")
		j.RenewSeq = r.uvarint("renew seq")
		j.ProgressSeq = r.uvarint("progress seq")
		j.Stale = r.uvarint("counter")
		j.Late = r.uvarint("counter")
		j.LateProgress = r.uvarint("counter")
		j.Duplicates = r.uvarint("counter")
		j.Conflicts = r.uvarint("counter")
		j.IssuedAt = r.varint("job times")
		j.Duration = r.varint("job times")
		j.ExpiresAt = r.varint("job times")
		j.AckDeadline = r.varint("job times")
		j.AckedAt = r.varint("job times")
		j.RenewAt = r.varint("job times")
		j.ProgressValue = r.varint("job times")
		j.ProgressAt = r.varint("job times")
		j.CancelAt = r.varint("job times")
		j.CancelBy = r.varint("job times")
		j.EndedAt = r.varint("job times")
		if hdr[3]&0x10 != 0 {
			j.qPos = -1 // a queue job: its strings are in qstrs (set below)
			for range queueStrs {
				qstrs = append(qstrs, string(r.strBytes("queue strings")))
			}
			j.HasPayload = hdr[3]&0x20 != 0
			prio := r.uvarint("queue priority")
			if prio > events.MaxPriority {
				r.fail("queue priority")
			}
			j.Priority = int64(prio)
			j.Turn = r.uvarint("queue counters")
			j.MaxAttempts = r.uvarint("queue counters")
			j.SubmitSeq = r.uvarint("queue counters")
			j.Attempt = r.uvarint("queue counters")
			j.Backoff = r.varint("queue times")
			j.BackoffMax = r.varint("queue times")
			j.AttemptLease = r.varint("queue times")
			j.AttemptAck = r.varint("queue times")
			j.SubmittedAt = r.varint("queue times")
			j.ReadyAt = r.varint("queue times")
			if hdr[3]&0x40 != 0 {
				readRev8Fields(r, &j.Job)
			}
			if hdr[3]&0x80 != 0 {
				readRev9Fields(r, &j.Job)
			}
		} else if hdr[3]&0xe0 != 0 {
			r.fail("job flags")
		}
		if len(strs) > 1<<32-1 {
			r.fail("job strings")
		}
	}
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrBadSnapshot, len(r.b))
	}
	all := string(strs)
	q.jobs = make(map[string]*job, n)
	q.heap = make(deadlines, 0, n)
	prev, off := "", uint32(0)
	for i := range slab {
		j := &slab[i]
		e := ends[4*i : 4*i+4]
		j.ID, j.LeaseID, j.Holder, j.ConflictWith = all[off:e[0]], all[e[0]:e[1]], all[e[1]:e[2]], all[e[2]:e[3]]
		off = e[3]
		if j.qPos == -1 {
			j.Queue, j.Submitter, j.Payload, j.LastReason = qstrs[0], qstrs[1], qstrs[2], events.Reason(qstrs[3])
			qstrs = qstrs[queueStrs:]
			j.qPos = 0
		}
		if !events.ValidToken(j.ID) || strings.Compare(j.ID, prev) <= 0 {
			return fmt.Errorf("%w: job ids not valid or not sorted at %q", ErrBadSnapshot, j.ID)
		}
		if !q.part.Owns(j.ID) {
			return fmt.Errorf("%w: job %q is not in %s", ErrBadSnapshot, j.ID, q.part)
		}
		if why := invalidJob(&j.Job); why != "" {
			return fmt.Errorf("%w: job %q: %s", ErrBadSnapshot, j.ID, why)
		}
		prev = j.ID
		q.jobs[j.ID] = j
		if j.Queue != "" {
			q.queueOf(j.Queue).jobs++
			if j.State.Live() {
				q.liveStart(j)
			}
			q.enqueue(j)
			if q.holdsKey(j) {
				// Judged on the projections as stored: no deadline fires
				// while restoring (keyHolder's lookup would fire one).
				if h := q.unique[uniqueKey{j.Queue, j.UniqueKey}]; h != nil {
					return fmt.Errorf("%w: jobs %q and %q both hold unique key %q of queue %q", ErrBadSnapshot, h.ID, j.ID, j.UniqueKey, j.Queue)
				}
				q.takeKey(j)
			}
		}
		if d, ok := nextDeadline(j, q.policy.Retain, q.now); ok {
			j.deadline, j.heapIdx = d, len(q.heap)
			q.heap = append(q.heap, j)
		}
	}
	// Heapify at once (linear) rather than pushing job by job: the order
	// of the heap's array is not observable, only its (deadline, id) order.
	for i := len(q.heap)/2 - 1; i >= 0; i-- {
		q.heap.down(i)
	}
	for i := range caps {
		c := &caps[i]
		qu := q.queueOf(c.Queue)
		qu.caps[c.Worker] = &capacity{slots: c.Slots, until: c.Until, seq: c.Seq}
		q.expiries.push(capExpiry{until: c.Until, queue: qu.name, owner: c.Worker, seq: c.Seq})
		q.touched(qu)
	}
	for i := range sts {
		st := &sts[i]
		key := standingKey{st.Queue, st.Worker}
		if q.standings == nil {
			q.standings = make(map[standingKey]*standing, len(sts))
		}
		s := &standing{window: st.Window, strikes: st.Strikes, heldUntil: st.HeldUntil, touchedAt: st.At}
		s.forgetQueued = s.forgetAt()
		q.forgets.push(standingTimer{at: s.forgetQueued, key: key})
		if s.heldUntil != 0 {
			s.holdQueued = s.heldUntil
			q.holds.push(standingTimer{at: s.heldUntil, key: key})
		}
		q.standings[key] = s
	}
	q.pending = q.matchable()
	*p = *q
	p.restored = snap // the canonical encoding of this state, for Track
	return nil
}

// StateHash is the SHA-256 of the canonical snapshot: two projectors that
// folded the same inputs have the same hash, whatever their history of
// restarts and restores.
func (p *Projector) StateHash() [32]byte {
	return sha256.Sum256(p.Snapshot())
}

// validPolicy reports whether a restored policy is one the decoder accepts
// (every duration 1 ms to 30 days, max_generations 1 to 2^20, the limits in
// order, a retention of 0 to events.MaxRetainMS) or the default.
func validPolicy(p *events.Policy) bool {
	const lo, hi = events.MinDurationMS * 1e6, events.MaxDurationMS * 1e6
	for _, d := range []int64{p.MinLease, p.MaxLease, p.DefaultLease, p.AckTimeout, p.CancelTimeout, p.MaxLifetime} {
		if d < lo || d > hi {
			return false
		}
	}
	return p.MaxGenerations >= 1 && p.MaxGenerations <= events.MaxGenerations &&
		p.Retain >= 0 && p.Retain <= events.MaxRetainMS*1e6 &&
		p.MinLease <= p.DefaultLease && p.DefaultLease <= p.MaxLease && p.MaxLease <= p.MaxLifetime
}

// invalidJob says why a restored job is not one the fold can produce ("" if
// it is): enums in their closed sets, counters of inputs within the
// protocol's ranges, so that no later input can overflow them.
func invalidJob(j *events.Job) string {
	switch {
	case j.State.String() == "?", j.AckState.String() == "?", j.Result.String() == "?":
		return "state, ACK state or result out of range"
	case j.Generation > events.MaxGenerations:
		return "generation above the protocol's max_generations"
	case j.Queue != "":
		if why := invalidQueueJob(j); why != "" {
			return why
		}
	case j.State == events.StateQueued || j.State == events.StateDead:
		return "a queue state outside any queue"
	case j.Generation == 0 && j.State != events.StateNone:
		return "a lease state without a lease"
	case j.Generation > 0 && (!events.ValidToken(j.LeaseID) || !events.ValidToken(j.Holder)):
		return "lease id or holder not a valid token"
	case j.ConflictWith != "" && !events.ValidToken(j.ConflictWith):
		return "conflict holder not a valid token"
	case j.RenewSeq > events.MaxSeq || j.ProgressSeq > events.MaxSeq:
		return "a sequence above 2^53-1"
	case j.ProgressValue < 0 || j.ProgressValue > events.MaxProgress:
		return "progress value out of range"
	case j.Duration < 0 || j.Duration > events.MaxDurationMS*1e6:
		return "lease duration out of range"
	}
	return ""
}

// invalidQueueJob says why a restored queue job's fields are not ones a
// submit and the fold can produce ("" if they are).
func invalidQueueJob(j *events.Job) string {
	const lo, hi = events.MinDurationMS * 1e6, events.MaxDurationMS * 1e6
	inRange := func(d int64) bool { return d >= lo && d <= hi }
	switch {
	case !events.ValidToken(j.Queue) || !events.ValidToken(j.Submitter):
		return "queue or submitter not a valid token"
	case j.Generation == 0 && j.State != events.StateQueued && j.State != events.StateCancelled:
		return "a lease state without a lease"
	case j.MaxAttempts < 1 || j.MaxAttempts > events.MaxAttempts || j.Attempt > j.MaxAttempts:
		return "attempts out of range"
	case !inRange(j.Backoff) || !inRange(j.BackoffMax) || j.Backoff > j.BackoffMax:
		return "backoff out of range"
	case j.AttemptLease != 0 && !inRange(j.AttemptLease), j.AttemptAck != 0 && !inRange(j.AttemptAck):
		return "attempt durations out of range"
	case len(j.Payload) > events.MaxPayloadBytes || !utf8.ValidString(j.Payload) || !j.HasPayload && j.Payload != "":
		return "payload not valid"
	case j.LastReason != "" && !j.LastReason.Known():
		return "last reason not a reason code"
	case j.SubmitSeq < 1 || j.SubmitSeq > events.MaxSeq || j.Turn > events.MaxSeq:
		return "submit sequence out of range"
	case j.Delay != 0 && (j.Delay < events.MinDurationMS*1e6 || j.Delay > events.MaxDelayMS*1e6 || j.Delay%1e6 != 0),
		j.RunAt != 0 && j.Delay != 0:
		return "run_at or delay_ms out of range"
	case j.UniqueKey != "" && !events.ValidToken(j.UniqueKey),
		j.UniqueFor != 0 && (j.UniqueKey == "" || j.UniqueFor < events.MinDurationMS*1e6 || j.UniqueFor > events.MaxDurationMS*1e6 || j.UniqueFor%1e6 != 0):
		return "unique key or unique_for_ms out of range"
	case j.ConcurrencyKey != "" && !events.ValidToken(j.ConcurrencyKey):
		return "concurrency key not a valid token"
	}
	return ""
}
