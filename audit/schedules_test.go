package audit_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

// schedLog is a revision 10 log with schedules: every, @every 10s with
// missed skip, fired (one fire refused: a job outside any queue took its
// id), missed, paused, resumed and deleted; nightly, 02:30 in Berlin with
// missed once, fired late.
func schedLog(t *testing.T) *flowLog {
	l := &flowLog{t: t, p: projector.New()}
	l.in(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision10})
	l.in(0, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbSchedule, Schedule: "every", Cron: "@every 10s", Queue: "q"})
	l.in(0, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbSchedule, Schedule: "nightly", Cron: "30 2 * * *",
		TZ: "CET-1CEST,M3.5.0,M10.5.0/3", Zone: "Europe/Berlin", Queue: "r", Missed: events.MissedOnce})
	l.in(time.Second, events.RoleWorker, "w1", "every-20260101T000020Z", events.Input{Verb: events.VerbAcquire, LeaseMS: 60000})
	l.tick(10 * time.Second)
	l.tick(20 * time.Second) // refused: job_exists
	l.tick(95 * time.Second) // 30 to 80 missed, 90 fires (on time)
	l.in(96*time.Second, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbSchedule, Schedule: "every", ScheduleOp: events.SchedulePause})
	l.tick(200 * time.Second)
	l.in(205*time.Second, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbSchedule, Schedule: "every", ScheduleOp: events.ScheduleResume})
	l.tick(215 * time.Second)
	l.in(216*time.Second, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbSchedule, Schedule: "every", ScheduleOp: events.ScheduleDelete})
	l.tick(3 * time.Hour) // nightly's 01:30 UTC passed: fired late, once
	return l
}

// The audit of schedules: a clean log has no finding and its report
// counts every schedule's fires, refusals and missed due times; a fire
// duplicated, one removed, one moved before its due time, a next due time
// announced wrong, each is a finding.
func TestFlowSchedules(t *testing.T) {
	l := schedLog(t)
	f := flowOf(l.all)
	if f.Findings.Count != 0 {
		t.Fatalf("clean log: %+v", f.Findings.Items)
	}
	if len(f.Schedules) != 2 {
		t.Fatalf("schedules: %+v", f.Schedules)
	}
	every, nightly := f.Schedules[0], f.Schedules[1]
	// every: 10 fired, 20 refused, 30..80 missed (6), 90 fired; paused at
	// 96: 100..200 recorded at the resume (11); 215 fired; deleted.
	if every.ID != "every" || every.Fires != 3 || every.Refused != 1 || every.Missed != 17 || !every.Deleted ||
		every.First != events.FormatTime(testutil.ScenarioBase+10e9) || every.Last != events.FormatTime(testutil.ScenarioBase+215e9) {
		t.Errorf("every: %+v", every)
	}
	if nightly.ID != "nightly" || nightly.Fires != 1 || nightly.Missed != 0 {
		t.Errorf("nightly: %+v", nightly)
	}
	var b strings.Builder
	audit.WriteSummary(&b, &audit.Report{Flow: f}, 10)
	if !strings.Contains(b.String(), "schedule every") || !strings.Contains(b.String(), "3 fired, 1 fired and refused, 17 recorded missed") {
		t.Errorf("summary:\n%s", b.String())
	}

	fires := func(ds []events.Decision) []int {
		var at []int
		for i := range ds {
			if ds[i].Kind == events.KindFired && ds[i].Schedule.ID == "every" {
				at = append(at, i)
			}
		}
		return at
	}
	for _, c := range []struct {
		name   string
		forge  func([]events.Decision) []events.Decision
		want   audit.FlowProblem
		detail string
	}{
		{"a fire duplicated", func(ds []events.Decision) []events.Decision {
			i := fires(ds)[0]
			return slices.Insert(ds, i+1, ds[i])
		}, audit.FlowScheduleOutOfTurn, "handled due time"},
		{"a fire removed", func(ds []events.Decision) []events.Decision {
			i := fires(ds)[0]
			return slices.Delete(ds, i, i+1)
		}, audit.FlowScheduleOutOfTurn, "handled due time"},
		{"a fire before its due time", func(ds []events.Decision) []events.Decision {
			ds[fires(ds)[0]].At -= int64(time.Second)
			return ds
		}, audit.FlowScheduleEarly, "fired due time"},
		{"a next due time announced wrong", func(ds []events.Decision) []events.Decision {
			ds[fires(ds)[2]].Schedule.Next += int64(time.Second)
			return ds
		}, audit.FlowScheduleOutOfTurn, "announces its next due time"},
		{"a late fire under skip", func(ds []events.Decision) []events.Decision {
			i := fires(ds)[3] // 215's: moved past its grace (the 10 s period)
			ds[i].At += int64(11 * time.Second)
			ds[i].Schedule.Next += int64(20 * time.Second)
			return ds
		}, audit.FlowScheduleLate, "past its grace"},
	} {
		t.Run(c.name, func(t *testing.T) {
			forged := make([]events.Decision, len(l.all))
			for i, d := range l.all {
				if d.Schedule != nil {
					sc := *d.Schedule
					d.Schedule = &sc
				}
				forged[i] = d
			}
			f := flowOf(c.forge(forged))
			if f.Findings.Count == 0 || f.Findings.Items[0].Problem != c.want || !strings.Contains(f.Findings.Items[0].Detail, c.detail) {
				t.Fatalf("findings %+v, want %s (%q)", f.Findings.Items, c.want, c.detail)
			}
		})
	}
}

// An audit that starts from a snapshot takes the schedules from it: the
// rest of the log audits clean.
func TestFlowSchedulesSeeded(t *testing.T) {
	l := schedLog(t)
	cut := len(l.all)
	snap := l.p.Snapshot()
	l.tick(3*time.Hour + 10*time.Second)
	l.tick(30 * time.Hour)
	p := projector.New()
	if err := p.Restore(snap); err != nil {
		t.Fatal(err)
	}
	tr := audit.NewFlowTracker(-1)
	tr.Seed(p)
	for i := range l.all[cut:] {
		tr.Observe(&l.all[cut+i])
	}
	// every was deleted before the snapshot; nightly fires on day 2.
	if f := tr.Result(); f.Findings.Count != 0 || len(f.Schedules) != 1 || f.Schedules[0].ID != "nightly" || f.Schedules[0].Fires != 1 {
		t.Fatalf("from the snapshot: %+v", f)
	}
}

// Whatever the schedules, their ticks and pauses, a log the fold wrote
// audits clean.
func TestFlowSchedulesCleanProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		l := &flowLog{t: &testing.T{}, p: projector.New()}
		step := func(at int64, role events.Role, in events.Input) {
			in.Role, in.Actor, in.Job = role, "admin", events.NoJob
			l.seq++
			ds, err := l.p.Step(events.Raw{Seq: l.seq, Time: testutil.ScenarioBase + at,
				Subject: events.InputSubject(role, "admin", events.NoJob, in.Verb), Body: events.AppendInputBody(nil, &in)})
			if err != nil {
				rt.Fatal(err)
			}
			l.all = append(l.all, ds...)
		}
		step(0, events.RoleCoord, events.Input{Verb: events.VerbRules, Revision: events.Revision10})
		at := int64(0)
		// An audit that starts from a snapshot taken after input cutAt
		// audits the rest clean too.
		cutAt := rapid.IntRange(1, 60).Draw(rt, "cut_at")
		var snap []byte
		cut := 0
		for i := range rapid.IntRange(1, 60).Draw(rt, "inputs") {
			if i == cutAt {
				snap, cut = l.p.Snapshot(), len(l.all)
			}
			at += rapid.SampledFrom([]int64{0, 1, 500, 1000, 30000, 61000, 600000, 3600000, 26 * 3600000}).Draw(rt, "gap_ms") * int64(time.Millisecond)
			id := fmt.Sprintf("s%d", rapid.IntRange(0, 2).Draw(rt, "id"))
			in := events.Input{Verb: events.VerbSchedule, Schedule: id}
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0:
				in.Cron = rapid.SampledFrom([]string{"* * * * *", "*/7 * * * *", "0 * * * *", "30 2 * * *", "@every 1s", "@every 90s", "@every 17m"}).Draw(rt, "cron")
				in.Queue = "q"
				in.Missed = events.Missed(rapid.IntRange(0, 1).Draw(rt, "missed"))
				if rapid.Bool().Draw(rt, "berlin") {
					in.TZ = "CET-1CEST,M3.5.0,M10.5.0/3"
				}
				step(at, events.RoleOps, in)
			case 1:
				in.ScheduleOp = events.SchedulePause
				step(at, events.RoleOps, in)
			case 2:
				in.ScheduleOp = events.ScheduleResume
				step(at, events.RoleOps, in)
			case 3:
				in.ScheduleOp = events.ScheduleDelete
				step(at, events.RoleOps, in)
			default:
				step(at, events.RoleCoord, events.Input{Verb: events.VerbTick})
			}
		}
		if f := flowOf(l.all); f.Findings.Count != 0 {
			var log []string
			for i := range l.all {
				log = append(log, projector.Describe(&l.all[i], testutil.ScenarioBase))
			}
			rt.Fatalf("a log the fold wrote: %+v\n%s", f.Findings.Items, strings.Join(log, "\n"))
		}
		if snap != nil {
			p := projector.New()
			if err := p.Restore(snap); err != nil {
				rt.Fatal(err)
			}
			tr := audit.NewFlowTracker(-1)
			tr.Seed(p)
			for i := range l.all[cut:] {
				tr.Observe(&l.all[cut+i])
			}
			if f := tr.Result(); f.Findings.Count != 0 {
				rt.Fatalf("from a snapshot at decision %d: %+v", cut, f.Findings.Items)
			}
		}
	})
}
