package projector

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/maknow/tenure/cron"
	"github.com/maknow/tenure/events"
)

// Cron schedules (rules revision 10, docs/schedules-design.md).
//
// An operator's schedule input defines a schedule (a cron expression, its
// zone as a POSIX TZ rule, a job template), pauses, resumes or deletes
// it. The fold fires it: a tick whose stored time reached a schedule's
// next due time submits a job derived from the template, its id the
// schedule's and the due time's, decided by the fold like any submit (a
// unique key held, a job of that id, a lease out of policy refuse it) and
// recorded as a fired decision. So a due time fires once: next only moves
// forward, a restored fold has next from its snapshot, and every
// coordinator folds the same ticks to the same fires.
//
// A due time the fold reaches more than the grace late (the deployment
// was down), or several at once, is missed: a schedule_missed decision
// records them, and the latest fires anyway if it is on time, or, with
// missed "once", however late it is. Due times passed while paused are
// recorded missed at the resume, which fires none of them.

// scheduleGrace is how late a due time may be reached and still fire on
// time (an @every shorter than it: its period).
const scheduleGrace = int64(time.Minute)

// maxFiresPerTick bounds the schedules one tick fires; the others fire
// with the next ticks (the coordinator ticks while one is due).
const maxFiresPerTick = 16

// sched is a schedule: its definition, its template, and when it is due.
type sched struct {
	def    events.Schedule // ID, Actor (who set it: the submitter of the jobs it fires), Cron, TZ, Zone, Queue, Missed, Paused, Next
	tmpl   events.Input    // the template: a submit's fields
	spec   *cron.Spec
	zone   *cron.Zone
	anchor int64 // @every's: the set's (or resume's) stored time; 0 for five fields
}

// grace is s's grace (scheduleGrace, or @every's period when shorter).
func (s *sched) grace() int64 {
	if e := s.spec.Every(); e > 0 && e < scheduleGrace {
		return e
	}
	return scheduleGrace
}

// after is s's first due time after t (0 when none before 2262).
func (s *sched) after(t int64) int64 {
	n, ok := s.spec.Next(s.zone, s.anchor, t)
	if !ok {
		return 0
	}
	return n
}

// schedDue orders the active schedules by (next, id): the order they fire
// in, the same on every replay.
func (p *Projector) schedIndex(s *sched) (int, bool) {
	return slices.BinarySearchFunc(p.schedDue, s, func(a, b *sched) int {
		switch {
		case a.def.Next != b.def.Next:
			if a.def.Next < b.def.Next {
				return -1
			}
			return 1
		}
		return strings.Compare(a.def.ID, b.def.ID)
	})
}

// schedPark takes s out of the due order (before next changes).
func (p *Projector) schedPark(s *sched) {
	if i, ok := p.schedIndex(s); ok {
		p.schedDue = slices.Delete(p.schedDue, i, i+1)
	}
}

// schedArm puts s in the due order, if it is active, has a next and is
// not in it yet (a resume of an active schedule arms it again: in twice,
// it fired twice a tick, the second time from a next already moved).
func (p *Projector) schedArm(s *sched) {
	if s.def.Paused || s.def.Next == 0 {
		return
	}
	i, in := p.schedIndex(s)
	if !in {
		p.schedDue = slices.Insert(p.schedDue, i, s)
	}
}

// nextFire is the earliest due time of an active schedule.
func (p *Projector) nextFire() (int64, bool) {
	if len(p.schedDue) == 0 {
		return 0, false
	}
	return p.schedDue[0].def.Next, true
}

// setSchedule applies a schedule input.
func (p *Projector) setSchedule() {
	in := &p.in
	s := p.scheds[in.Schedule]
	if in.ScheduleOp != events.ScheduleSet && s == nil {
		d := p.emit(nil, events.KindRejected, events.ReasonNoSuchSchedule, in.Actor)
		d.Schedule = &events.Schedule{ID: in.Schedule}
		return
	}
	if !p.part.Owns(in.Schedule) {
		// A schedule lives in the partition of its id, and fires jobs
		// that partition owns (firedJobID): sent to every partition, it
		// would fire in each.
		d := p.emit(nil, events.KindRejected, events.ReasonWrongPartition, in.Actor)
		d.Schedule = &events.Schedule{ID: in.Schedule}
		d.Detail = "schedule " + in.Schedule + " belongs to " + p.part.Of(in.Schedule).String() + ", not " + strconv.FormatUint(uint64(p.part.Index), 10)
		return
	}
	switch in.ScheduleOp {
	case events.ScheduleSet:
		if s == nil && len(p.scheds) >= events.MaxSchedules {
			d := p.emit(nil, events.KindRejected, events.ReasonSchedulesFull, in.Actor)
			d.Schedule = &events.Schedule{ID: in.Schedule}
			return
		}
		if d := specOf(in).attemptLease; d != 0 && (d < p.policy.MinLease || d > p.policy.MaxLease) {
			d := p.emit(nil, events.KindRejected, events.ReasonDurationOutOfPolicy, in.Actor)
			d.Schedule = &events.Schedule{ID: in.Schedule}
			d.Detail = p.outOfPolicy("lease_ms", in.LeaseMS)
			return
		}
		spec, err1 := cron.Parse(in.Cron)
		tz := in.TZ
		if tz == "" {
			tz = "UTC0"
		}
		zone, err2 := cron.ParseZone(tz)
		if err1 != nil || err2 != nil { // the decoder judged both: unreachable
			p.emit(nil, events.KindRejected, events.ReasonBadValue, in.Actor).Detail = "cron or tz: refused by package cron"
			return
		}
		if s != nil && s.def.Cron == in.Cron && s.def.TZ == in.TZ {
			// The same timing (expression and zone rule): a set changes
			// the rest (the template, the queue, the policy, the
			// operator) and keeps when it falls due: its next due time,
			// @every's anchor, its pause. So setting a schedule again as
			// it stands changes nothing (config management may apply it
			// on every run), and a due time pending stays pending.
			s.def.Actor, s.def.Zone, s.def.Queue, s.def.Missed = strings.Clone(in.Actor), strings.Clone(in.Zone), strings.Clone(in.Queue), in.Missed
			s.tmpl = template(in)
			break
		}
		paused := false
		if s != nil {
			// Due times of the definition replaced that passed unfired
			// (no tick reached them before this input) are recorded,
			// never dropped; a paused schedule stays paused, its due
			// times recorded up to now as a resume would.
			if s.def.Next != 0 && s.def.Next <= p.now {
				why := events.ReasonFireLate
				if s.def.Paused {
					why = events.ReasonPausedThrough
				}
				p.missed(s, s.def.Next, s.latest(s.def.Next, p.now), why, in.Actor)
			}
			paused = s.def.Paused
			p.schedPark(s)
		} else {
			s = &sched{}
			if p.scheds == nil {
				p.scheds = map[string]*sched{}
			}
			p.scheds[strings.Clone(in.Schedule)] = s
		}
		*s = sched{
			def: events.Schedule{ID: strings.Clone(in.Schedule), Actor: strings.Clone(in.Actor), Cron: strings.Clone(in.Cron), TZ: strings.Clone(in.TZ),
				Zone: strings.Clone(in.Zone), Queue: strings.Clone(in.Queue), Missed: in.Missed},
			tmpl: template(in), spec: spec, zone: zone,
		}
		if spec.Every() > 0 {
			s.anchor = p.now // (five fields have none: nothing in the state depends on the set's time)
		}
		s.def.Next, s.def.Paused = s.after(p.now), paused
	case events.SchedulePause:
		if !s.def.Paused {
			p.schedPark(s)
			s.def.Paused = true
		}
	case events.ScheduleResume:
		if s.def.Paused {
			s.def.Paused = false
			if e := s.spec.Every(); e > 0 {
				s.anchor = p.now
			}
			if s.def.Next != 0 && s.def.Next <= p.now {
				p.missed(s, s.def.Next, s.latest(s.def.Next, p.now), events.ReasonPausedThrough, in.Actor)
			}
			s.def.Next = s.after(p.now)
		}
	case events.ScheduleDelete:
		p.schedPark(s)
		delete(p.scheds, s.def.ID)
		d := p.emit(nil, events.KindScheduleDeleted, events.ReasonOk, in.Actor)
		d.Schedule = &events.Schedule{ID: s.def.ID}
		return
	}
	p.schedArm(s)
	def := s.definition()
	p.emit(nil, events.KindScheduleSet, events.ReasonOk, in.Actor).Schedule = &def
}

// definition is s as a schedule_set decision carries it: the definition,
// @every's anchor, the template, the next due time (while paused, the
// first its resume will record missed).
func (s *sched) definition() events.Schedule {
	def := s.def
	def.Anchor = s.anchor
	t := &s.tmpl
	def.Template = &events.ScheduleTemplate{Priority: t.Priority, MaxAttempts: t.MaxAttempts, BackoffMS: t.BackoffMS, BackoffMax: t.BackoffMax,
		LeaseMS: t.LeaseMS, AckTimeoutMS: t.AckTimeoutMS, Payload: t.Payload, HasPayload: t.HasPayload,
		ConcurrencyKey: t.ConcurrencyKey, UniqueKey: t.UniqueKey}
	return def
}

// template is the submit a schedule's set describes (its job id is the
// fire's).
func template(in *events.Input) events.Input {
	return events.Input{
		Role: events.RoleOps, Verb: events.VerbSubmit,
		Queue: strings.Clone(in.Queue), Priority: in.Priority, MaxAttempts: in.MaxAttempts,
		BackoffMS: in.BackoffMS, BackoffMax: in.BackoffMax, LeaseMS: in.LeaseMS, AckTimeoutMS: in.AckTimeoutMS,
		Payload: strings.Clone(in.Payload), HasPayload: in.HasPayload,
		ConcurrencyKey: strings.Clone(in.ConcurrencyKey), UniqueKey: strings.Clone(in.UniqueKey),
	}
}

// latest is the last due time of s from first to until (first <= until),
// found without walking every due time between (a deployment down for a
// year, an every-minute schedule): @every by arithmetic, a cron
// expression from windows before until, growing until one holds a due
// time at or after first.
func (s *sched) latest(first, until int64) int64 {
	if e := s.spec.Every(); e > 0 {
		return first + (until-first)/e*e
	}
	for _, w := range []time.Duration{time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour, 10 * 367 * 24 * time.Hour} {
		from := max(first, until-int64(w))
		t := from
		if from > first {
			t = s.after(from - 1)
		}
		if t == 0 || t > until {
			continue
		}
		for {
			n := s.after(t)
			if n == 0 || n > until {
				return t
			}
			t = n
		}
	}
	// Beyond ten years: walk (a five-field expression falls due at
	// least once in eight years, so the last window always holds one).
	t := first
	for n := s.after(t); n != 0 && n <= until; n = s.after(t) {
		t = n
	}
	return t
}

// count is how many due times of s run from first to last (both due
// times), capped at events.MaxMissedCount.
func (s *sched) count(first, last int64) uint64 {
	if e := s.spec.Every(); e > 0 {
		return min(uint64((last-first)/e)+1, events.MaxMissedCount)
	}
	n := uint64(1)
	for t := first; t < last && n < events.MaxMissedCount; n++ {
		if t = s.after(t); t == 0 {
			break
		}
	}
	return n
}

// missed records the due times of s from first to last as passed
// unfired.
func (p *Projector) missed(s *sched, first, last int64, why events.Reason, addressee string) {
	d := p.emit(nil, events.KindScheduleMissed, why, addressee)
	d.Schedule = &events.Schedule{ID: s.def.ID, MissedFrom: first, MissedTo: last, MissedCount: s.count(first, last)}
}

// fireSchedules fires the schedules due at the fold's time, at most
// maxFiresPerTick of them, earliest first (revision 10, ticks only).
func (p *Projector) fireSchedules() {
	for range maxFiresPerTick {
		if len(p.schedDue) == 0 || p.schedDue[0].def.Next > p.now {
			return
		}
		s := p.schedDue[0]
		p.schedDue = slices.Delete(p.schedDue, 0, 1)
		n := len(p.out)
		first := s.def.Next
		latest := s.latest(first, p.now)
		fire := p.now-latest <= s.grace() || s.def.Missed == events.MissedOnce
		switch {
		case latest != first && fire:
			// All but the latest are missed; the latest fires.
			p.missed(s, first, s.latest(first, latest-1), events.ReasonFireLate, s.def.Actor)
		case !fire:
			p.missed(s, first, latest, events.ReasonFireLate, s.def.Actor)
		}
		if fire {
			p.fireOne(s, latest)
		}
		s.def.Next = s.after(max(p.now, latest))
		p.schedArm(s)
		// Its decisions say when it falls due next (a read model needs
		// no calendar of its own).
		for i := n; i < len(p.out); i++ {
			if sc := p.out[i].Schedule; sc != nil {
				sc.Next = s.def.Next
			}
		}
	}
}

// fireOne submits s's job for due time due, judged as the template's
// submit by the schedule's actor, and records it as a fired decision.
func (p *Projector) fireOne(s *sched, due int64) {
	tick := p.in
	p.in = s.tmpl
	p.in.Actor = s.def.Actor
	p.in.Job = firedJobID(s.def.ID, due, p.part)
	// The job's run_at is its due time (past or now: ready at once), so
	// its handler knows which due time it serves (Job.ScheduledFor).
	p.in.RunAt = due
	n := len(p.out)
	if p.part.Owns(p.in.Job) {
		p.submit()
	} else { // (firedJobID's millionth candidate: never in practice)
		p.emit(nil, events.KindRejected, events.ReasonWrongPartition, s.def.Actor).Detail = p.wrongPartition(p.in.Job).Detail
		p.out[len(p.out)-1].Job.ID = strings.Clone(p.in.Job)
	}
	p.in = tick
	for i := n; i < len(p.out); i++ { // (submit emits one decision)
		d := &p.out[i]
		d.Kind = events.KindFired
		d.Role, d.Actor, d.Verb = tick.Role, tick.Actor, tick.Verb
		if d.Actor == "" {
			d.Actor = events.NoActor
		}
		d.Schedule = &events.Schedule{ID: s.def.ID, Due: due}
	}
}

// firedJobID is the id of the job schedule id fires for due time due:
// id-20261203T214000Z. Two due times of a schedule are at least a second
// apart (cron's minute, @every's least), so their ids differ. In a
// partitioned deployment the job must be the schedule's partition's (a
// worker's inputs about it are routed by its id): the first of id-<due>,
// id-<due>-1, id-<due>-2, ... that partition owns (at most 64 bytes: an id
// of 40, 17 for the due time, 7 for the suffix; a partition owns one id in
// Count, 1,024 at most, so one in a million tries is never reached in
// practice, and if it were the last candidate is refused as
// wrong_partition by fireOne's submit check).
func firedJobID(id string, due int64, part events.Partition) string {
	b := make([]byte, 0, events.MaxTokenLen)
	b = append(b, id...)
	b = append(b, '-')
	b = time.Unix(0, due).UTC().AppendFormat(b, "20060102T150405")
	b = append(b, 'Z')
	base := len(b)
	for n := 1; !part.Owns(string(b)) && n < 1000000; n++ {
		b = strconv.AppendInt(append(b[:base], '-'), int64(n), 10)
	}
	return string(b)
}

// restoreSchedules reads the schedules of a format 8 snapshot into q
// (before its jobs), refusing any a fold cannot have made.
func (q *Projector) restoreSchedules(r *snapReader) error {
	n := r.uvarint("schedule count")
	if n > events.MaxSchedules || n > uint64(len(r.b)/20) {
		return fmt.Errorf("%w: schedule count %d", ErrBadSnapshot, n)
	}
	prev := ""
	for i := uint64(0); i < n && r.err == nil; i++ {
		var strs [9]string
		for k := range strs {
			strs[k] = string(r.strBytes("schedule strings"))
		}
		f := r.bytes(1, "schedule flags")
		next, anchor := r.varint("schedule next"), r.varint("schedule anchor")
		prio, attempts := r.uvarint("schedule priority"), r.uvarint("schedule max_attempts")
		var durs [4]int64
		for k := range durs {
			durs[k] = r.varint("schedule template")
		}
		if r.err != nil {
			return r.err
		}
		s := &sched{anchor: anchor}
		s.def = events.Schedule{ID: strs[0], Actor: strs[1], Cron: strs[2], TZ: strs[3], Zone: strs[4], Queue: strs[5], Next: next,
			Paused: f[0]&schedPaused != 0}
		if f[0]&schedOnce != 0 {
			s.def.Missed = events.MissedOnce
		}
		s.tmpl = events.Input{Role: events.RoleOps, Verb: events.VerbSubmit, Queue: strs[5], Payload: strs[6], HasPayload: f[0]&schedPayload != 0,
			ConcurrencyKey: strs[7], UniqueKey: strs[8], Priority: int64(min(prio, events.MaxPriority+1)), MaxAttempts: attempts,
			BackoffMS: durs[0], BackoffMax: durs[1], LeaseMS: durs[2], AckTimeoutMS: durs[3]}
		// What the decoder and the fold would have refused.
		in := s.tmpl
		in.Verb, in.Schedule, in.Cron, in.TZ, in.Zone = events.VerbSchedule, s.def.ID, s.def.Cron, s.def.TZ, s.def.Zone
		in.Missed = s.def.Missed
		body := events.AppendInputBody(nil, &in)
		var back events.Input
		tz := s.def.TZ
		if tz == "" {
			tz = "UTC0"
		}
		var err1, err2 error
		s.spec, err1 = cron.Parse(s.def.Cron)
		s.zone, err2 = cron.ParseZone(tz)
		switch {
		case f[0]&^(schedOnce|schedPaused|schedPayload) != 0, s.def.ID <= prev, !events.ValidToken(s.def.Actor), !q.part.Owns(s.def.ID),
			events.DecodeInputAt(events.InputSubject(events.RoleOps, s.def.Actor, events.NoJob, events.VerbSchedule), body, events.Revision10, &back) != nil,
			err1 != nil || err2 != nil, anchor > q.now, anchor != 0 && s.spec.Every() == 0, anchor == 0 && s.spec.Every() > 0,
			next != 0 && s.after(next-1) != next:
			return fmt.Errorf("%w: schedule %q out of range", ErrBadSnapshot, s.def.ID)
		}
		prev = s.def.ID
		if q.scheds == nil {
			q.scheds = map[string]*sched{}
		}
		q.scheds[s.def.ID] = s
		q.schedArm(s)
	}
	return r.err
}

// Schedule is a schedule defined in the fold (revision 10): its
// definition as its schedule_set decision carried it (Actor the operator
// that set it, the submitter of the jobs it fires), with its next due
// time to handle (0 when none is left; while paused, the first due time
// its resume will record missed, which a schedule_set of a paused
// schedule does not show).
type Schedule struct {
	events.Schedule
}

// Schedules returns the schedules defined, sorted by id.
func (p *Projector) Schedules() []Schedule {
	out := make([]Schedule, 0, len(p.scheds))
	for _, s := range p.scheds {
		out = append(out, Schedule{Schedule: s.definition()})
	}
	slices.SortFunc(out, func(a, b Schedule) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// schedOf is the schedule a definition describes (a schedule_set
// decision's, as definition gives it): what RebuildHash takes.
func schedOf(def events.Schedule) (*sched, error) {
	spec, err := cron.Parse(def.Cron)
	if err != nil {
		return nil, err
	}
	zone, err := cron.ParseZone(cmp.Or(def.TZ, "UTC0"))
	if err != nil {
		return nil, err
	}
	s := &sched{spec: spec, zone: zone, anchor: def.Anchor,
		tmpl: events.Input{Role: events.RoleOps, Verb: events.VerbSubmit, Queue: def.Queue}}
	if t := def.Template; t != nil {
		s.tmpl.Priority, s.tmpl.MaxAttempts, s.tmpl.BackoffMS, s.tmpl.BackoffMax = t.Priority, t.MaxAttempts, t.BackoffMS, t.BackoffMax
		s.tmpl.LeaseMS, s.tmpl.AckTimeoutMS, s.tmpl.Payload, s.tmpl.HasPayload = t.LeaseMS, t.AckTimeoutMS, t.Payload, t.HasPayload
		s.tmpl.ConcurrencyKey, s.tmpl.UniqueKey = t.ConcurrencyKey, t.UniqueKey
	}
	def.Anchor, def.Template, def.Due, def.MissedFrom, def.MissedTo, def.MissedCount = 0, nil, 0, 0, 0, 0
	s.def = def
	return s, nil
}
