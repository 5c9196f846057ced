package api

import (
	"slices"
	"strings"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
)

// The schedules of the read model (rules revision 10, PROTOCOL.md §26.6):
// each one's definition as its latest schedule_set carried it, its next
// due time as its latest decision carried it, and what its fires and
// missed due times were since the first decision read (or the snapshot
// the model started from).

// ScheduleSummary is one schedule (schedule.list).
type ScheduleSummary struct {
	ID        string `json:"id"`
	Partition uint32 `json:"partition,omitempty"` // its partition (partitioned deployments)
	Cron      string `json:"cron"`
	TZ        string `json:"tz,omitempty"`   // the POSIX TZ rule it fires by; absent: UTC
	Zone      string `json:"zone,omitempty"` // the IANA name the rule came from, if given
	Queue     string `json:"queue"`
	Missed    string `json:"missed"` // skip or once
	Paused    bool   `json:"paused,omitempty"`
	Next      string `json:"next,omitempty"` // its next due time (time); absent while paused or when none is left
	Actor     string `json:"actor"`          // the operator that set it: the submitter of its jobs
	// Since the first decision read: fires accepted (a job submitted),
	// fires refused (fired with a refusal), due times recorded missed.
	Fires   uint64 `json:"fires"`
	Refused uint64 `json:"refused"`
	Skipped uint64 `json:"skipped"`
	// The latest fire read: its due time, its job and its reason (ok or
	// the submit's refusal); absent before the first.
	LastDue    string `json:"last_due,omitempty"`
	LastJob    string `json:"last_job,omitempty"`
	LastReason string `json:"last_reason,omitempty"`
}

// SchedulesRequest asks for a page of schedules (schedule.list), in byte
// order of their ids: those of Queue (all when empty), from the first id
// above After, at most Limit of them (0 is DefaultSchedulesLimit; at most
// MaxSchedulesLimit).
type SchedulesRequest struct {
	Queue string `json:"queue,omitempty"`
	After string `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// SchedulesReply is the answer of schedule.list.
type SchedulesReply struct {
	Schedules []ScheduleSummary `json:"schedules"`
	Next      string            `json:"next,omitempty"` // the id to ask After for the next page; absent on the last
	Total     int               `json:"total"`          // schedules matching Queue
	Limit     int               `json:"limit"`
	Position
}

// schedEntry is a schedule of the model.
type schedEntry struct {
	part                    uint32
	def                     events.Schedule
	fires, refused, skipped uint64
	lastDue                 int64
	lastJob, lastReason     string
}

// applySchedule folds a schedule decision of partition part into the
// model (m.mu held).
func (m *Model) applySchedule(part uint32, d *events.Decision) {
	sc := d.Schedule
	if sc == nil || !m.partition(part).Owns(sc.ID) {
		return
	}
	if m.scheds == nil {
		m.scheds = map[string]*schedEntry{}
	}
	e := m.scheds[sc.ID]
	switch d.Kind {
	case events.KindScheduleSet:
		if e == nil {
			e = &schedEntry{part: part}
			m.scheds[strings.Clone(sc.ID)] = e
		}
		e.def = *sc
	case events.KindScheduleDeleted:
		delete(m.scheds, sc.ID)
	case events.KindFired:
		if e == nil {
			return
		}
		if d.Reason == events.ReasonOk {
			e.fires++
		} else {
			e.refused++
		}
		e.lastDue, e.lastJob, e.lastReason = sc.Due, d.Job.ID, string(d.Reason)
		e.def.Next = sc.Next
	case events.KindScheduleMissed:
		if e == nil {
			return
		}
		e.skipped += sc.MissedCount
		if d.Reason == events.ReasonFireLate { // a tick's (a resume's is followed by its schedule_set)
			e.def.Next = sc.Next
		}
	}
}

// restoreSchedules resets partition part's schedules to p's (m.mu held).
func (m *Model) restoreSchedules(part uint32, ss []projector.Schedule) {
	for id, e := range m.scheds {
		if e.part == part {
			delete(m.scheds, id)
		}
	}
	for _, s := range ss {
		if !m.partition(part).Owns(s.ID) {
			continue
		}
		if m.scheds == nil {
			m.scheds = map[string]*schedEntry{}
		}
		m.scheds[s.ID] = &schedEntry{part: part, def: s.Schedule}
	}
}

func (e *schedEntry) summary(partitioned bool) ScheduleSummary {
	s := ScheduleSummary{ID: e.def.ID, Cron: e.def.Cron, TZ: e.def.TZ, Zone: e.def.Zone, Queue: e.def.Queue,
		Missed: e.def.Missed.String(), Paused: e.def.Paused, Actor: e.def.Actor,
		Fires: e.fires, Refused: e.refused, Skipped: e.skipped, LastJob: e.lastJob, LastReason: e.lastReason}
	if partitioned {
		s.Partition = e.part
	}
	if e.def.Next != 0 && !e.def.Paused {
		s.Next = events.FormatTime(e.def.Next)
	}
	if e.lastDue != 0 {
		s.LastDue = events.FormatTime(e.lastDue)
	}
	return s
}

// Schedules answers schedule.list (q's fields already checked).
func (m *Model) Schedules(q SchedulesRequest, now time.Time) SchedulesReply {
	m.mu.RLock()
	defer m.mu.RUnlock()
	ids := make([]string, 0, len(m.scheds))
	for id, e := range m.scheds {
		if q.Queue == "" || e.def.Queue == q.Queue {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	r := SchedulesReply{Schedules: []ScheduleSummary{}, Total: len(ids), Limit: q.Limit, Position: m.position(now)}
	i, _ := slices.BinarySearch(ids, q.After)
	if i < len(ids) && ids[i] == q.After {
		i++
	}
	for ; i < len(ids); i++ {
		if len(r.Schedules) == q.Limit {
			r.Next = r.Schedules[len(r.Schedules)-1].ID
			break
		}
		r.Schedules = append(r.Schedules, m.scheds[ids[i]].summary(m.count > 0))
	}
	return r
}
