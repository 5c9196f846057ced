package audit

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/maknow/tenure/cron"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
)

// The audit of cron schedules (rules revision 10, PROTOCOL.md §26.6), from
// the decisions alone: it recomputes each schedule's due times from its
// definition (package cron, the expression and the zone's rule the
// schedule_set decision carries) and requires every due time the fold
// handled to be the next one due, once: a fire (fired) or a record of due
// times passed unfired (schedule_missed) always starts at the due time
// after the last one handled, so no due time is fired twice, skipped
// silently or made up; no fire before its due time; under missed "skip"
// no fire more than the grace late; and every next due time a decision
// announces the one the definition gives. What it cannot see is a due
// time the fold had not reached when the log ends.

// Schedule findings.
const (
	// FlowScheduleEarly: a job fired before its due time.
	FlowScheduleEarly FlowProblem = "schedule_fired_early"
	// FlowScheduleOutOfTurn: a fire or a missed record that is not of the
	// next due time of the schedule's definition (a due time fired or
	// recorded twice, one skipped without a record, one the definition
	// does not have), a missed count that is not the due times recorded,
	// or a next due time announced that the definition does not give.
	FlowScheduleOutOfTurn FlowProblem = "schedule_out_of_turn"
	// FlowScheduleLate: under missed "skip", a due time fired more than
	// the grace after it (it should have been recorded missed).
	FlowScheduleLate FlowProblem = "schedule_fired_late"
)

// FlowSchedule is what the audit observed of one schedule: its definition
// at the end (or when deleted), and every due time it handled.
type FlowSchedule struct {
	ID      string `json:"id"`
	Cron    string `json:"cron"`
	TZ      string `json:"tz,omitempty"`
	Queue   string `json:"queue"`
	Deleted bool   `json:"deleted,omitempty"`
	// Fires counts the due times fired (a job submitted), Refused those
	// fired and refused (fired with a refusal: recorded, not lost), Missed
	// the due times recorded passed unfired; First and Last are the first
	// and last due times handled (absent before one).
	Fires   uint64 `json:"fires"`
	Refused uint64 `json:"refused"`
	Missed  uint64 `json:"missed"`
	First   string `json:"first_due,omitempty"`
	Last    string `json:"last_due,omitempty"`
}

// schedAudit is a schedule as the audit follows it.
type schedAudit struct {
	stats  *FlowSchedule
	spec   *cron.Spec
	zone   *cron.Zone
	missed events.Missed
	paused bool
	anchor int64 // @every's
	next   int64 // the next due time to handle (0: none known)
	valid  bool  // the definition parsed
}

// after is s's first due time after t (0 when none).
func (s *schedAudit) after(t int64) int64 {
	n, ok := s.spec.Next(s.zone, s.anchor, t)
	if !ok {
		return 0
	}
	return n
}

// grace is the fold's grace for s: a minute, or @every's period when
// shorter.
func (s *schedAudit) grace() int64 {
	if e := s.spec.Every(); e > 0 && e < int64(time.Minute) {
		return e
	}
	return int64(time.Minute)
}

// define takes a definition (a schedule_set's, or a snapshot's).
func (t *FlowTracker) define(def events.Schedule, at int64) *schedAudit {
	if t.scheds == nil {
		t.scheds, t.schedStats = map[string]*schedAudit{}, map[string]*FlowSchedule{}
	}
	st := t.schedStats[def.ID]
	if st == nil {
		st = &FlowSchedule{ID: def.ID}
		t.schedStats[def.ID] = st
	}
	st.Cron, st.TZ, st.Queue, st.Deleted = def.Cron, def.TZ, def.Queue, false
	s := &schedAudit{stats: st, missed: def.Missed, paused: def.Paused, anchor: at}
	var err1, err2 error
	s.spec, err1 = cron.Parse(def.Cron)
	s.zone, err2 = cron.ParseZone(cmp.Or(def.TZ, "UTC0"))
	s.valid = err1 == nil && err2 == nil
	t.scheds[def.ID] = s
	return s
}

// seedSchedules takes the schedules of the snapshot an audit starts from.
func (t *FlowTracker) seedSchedules(p *projector.Projector) {
	for _, sc := range p.Schedules() {
		// A due time of @every is as good an anchor as the set's time.
		s := t.define(sc.Schedule, sc.Next)
		s.next = sc.Next // (paused: the first its resume records missed)
	}
}

// schedule checks a decision carrying a schedule object.
func (t *FlowTracker) schedule(d *events.Decision) {
	sc := d.Schedule
	s := t.scheds[sc.ID]
	switch d.Kind {
	case events.KindScheduleSet:
		// The fold's rules (PROTOCOL.md §26.6): a set with the same
		// expression and zone rule keeps the timing (as do a pause and a
		// resume of a schedule that is not paused); a resume re-times
		// from its own time; another expression or rule re-times from
		// the set's time.
		if s != nil && s.valid && sc.Cron == s.stats.Cron && sc.TZ == s.stats.TZ {
			s.stats.Queue, s.missed = sc.Queue, sc.Missed
			resumed := s.paused && !sc.Paused
			s.paused = sc.Paused
			if resumed {
				s.anchor, s.next = d.At, 0
				s.next = s.after(d.At)
			}
			if sc.Next != s.next { // (paused: the first its resume will record)
				t.find(d, FlowScheduleOutOfTurn, "schedule "+sc.ID+" announces its next due time "+fmtTime(sc.Next)+"; its definition gives "+fmtTime(s.next))
			}
			return
		}
		s = t.define(*sc, d.At)
		if !s.valid {
			return
		}
		s.next = s.after(d.At)
		if sc.Next != s.next {
			t.find(d, FlowScheduleOutOfTurn, "schedule "+sc.ID+" announces its next due time "+fmtTime(sc.Next)+"; its definition gives "+fmtTime(s.next))
		}
	case events.KindScheduleDeleted:
		if s != nil {
			s.stats.Deleted = true
			delete(t.scheds, sc.ID)
		}
	case events.KindFired:
		if s == nil || !s.valid {
			return
		}
		if d.Reason == events.ReasonOk {
			s.stats.Fires++
		} else {
			s.stats.Refused++
		}
		due := sc.Due
		t.handled(d, s, due, due, 1)
		switch {
		case due > d.At:
			t.find(d, FlowScheduleEarly, "schedule "+sc.ID+" fired due time "+fmtTime(due)+" at "+fmtTime(d.At))
		case s.missed == events.MissedSkip && d.At-due > s.grace():
			t.find(d, FlowScheduleLate, "schedule "+sc.ID+" (missed skip) fired due time "+fmtTime(due)+" at "+fmtTime(d.At)+", past its grace")
		}
		t.announced(d, s)
	case events.KindScheduleMissed:
		if s == nil || !s.valid {
			return
		}
		s.stats.Missed += sc.MissedCount
		t.handled(d, s, sc.MissedFrom, sc.MissedTo, sc.MissedCount)
		if sc.MissedTo > d.At {
			t.find(d, FlowScheduleEarly, "schedule "+sc.ID+" recorded due time "+fmtTime(sc.MissedTo)+" missed at "+fmtTime(d.At))
		}
		if d.Verb == events.VerbTick { // (a set's or a resume's record: its schedule_set follows)
			t.announced(d, s)
		}
	}
}

// handled checks that the due times from first to last (count of them)
// are the next ones of s, and moves past them.
func (t *FlowTracker) handled(d *events.Decision, s *schedAudit, first, last int64, count uint64) {
	st := s.stats
	if first != s.next {
		t.find(d, FlowScheduleOutOfTurn, "schedule "+st.ID+" handled due time "+fmtTime(first)+"; the next due of its definition was "+fmtTime(s.next))
	}
	n := uint64(1)
	at := first
	for at < last && n < events.MaxMissedCount {
		if at = s.after(at); at == 0 || at > last {
			break
		}
		n++
	}
	if at != last && n < events.MaxMissedCount || n != count && count != events.MaxMissedCount {
		t.find(d, FlowScheduleOutOfTurn, "schedule "+st.ID+" recorded "+u64(count)+" due times from "+fmtTime(first)+" to "+fmtTime(last)+"; its definition has "+u64(n)+" there")
	}
	if st.First == "" {
		st.First = fmtTime(first)
	}
	st.Last = fmtTime(last)
	s.next = s.after(last)
}

// announced checks the next due time a tick's decision announces: the
// first after the tick's time (every due time up to it is handled in the
// tick, the fold's latest included).
func (t *FlowTracker) announced(d *events.Decision, s *schedAudit) {
	if want := s.after(d.At); d.Schedule.Next != want {
		t.find(d, FlowScheduleOutOfTurn, "schedule "+s.stats.ID+" announces its next due time "+fmtTime(d.Schedule.Next)+"; its definition gives "+fmtTime(want))
	}
}

func fmtTime(t int64) string {
	if t == 0 {
		return "none"
	}
	return events.FormatTime(t)
}

// scheduleResult lists the schedules observed, by id.
func (t *FlowTracker) scheduleResult() []FlowSchedule {
	var out []FlowSchedule
	for _, st := range t.schedStats {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b FlowSchedule) int { return strings.Compare(a.ID, b.ID) })
	return out
}
