package projector_test

import (
	"cmp"
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/maknow/tenure/cron"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

const sec = int64(time.Second)

// schedFolder is a folder under revision 10, set directly (no rules
// input).
func schedFolder(t *testing.T) *folder {
	f := &folder{t: t, p: projector.New()}
	projector.SetRevision(f.p, events.Revision10)
	return f
}

func (f *folder) tick(at int64) []events.Decision {
	return f.step(at, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
}

func (f *folder) sched(at int64, in events.Input) []events.Decision {
	in.Verb = events.VerbSchedule
	return f.step(at, events.RoleOps, "admin", events.NoJob, in)
}

// show lists decisions as kind/reason [schedule: due, missed] [job]: the
// fires and records of a tick come before its verdict, as every decision
// fired by time does.
func show(ds []events.Decision) string {
	var b []string
	for _, d := range ds {
		s := d.Kind.String() + "/" + string(d.Reason)
		if sc := d.Schedule; sc != nil {
			s += " " + sc.ID
			if sc.Due != 0 {
				s += fmt.Sprintf(" due+%ds", (sc.Due-testutil.ScenarioBase)/sec)
			}
			if sc.MissedCount != 0 {
				s += fmt.Sprintf(" missed %d: +%ds..+%ds", sc.MissedCount, (sc.MissedFrom-testutil.ScenarioBase)/sec, (sc.MissedTo-testutil.ScenarioBase)/sec)
			}
			if sc.Next != 0 {
				s += fmt.Sprintf(" next+%ds", (sc.Next-testutil.ScenarioBase)/sec)
			}
		}
		if d.Job.ID != events.NoJob && d.Job.ID != "" {
			s += " job " + d.Job.ID + " " + d.Job.State.String()
		}
		b = append(b, s)
	}
	return strings.Join(b, "; ")
}

func wantDecisions(t *testing.T, what string, ds []events.Decision, want string) {
	t.Helper()
	if got := show(ds); got != want {
		t.Errorf("%s:\n got %s\nwant %s", what, got, want)
	}
}

// A schedule fires each due time once, on the ticks that reach it; due
// times passed unfired are recorded, the latest fires when on time; a
// pause passes due times by, recorded at the resume; a delete ends it.
func TestScheduleFires(t *testing.T) {
	f := schedFolder(t)
	wantDecisions(t, "set", f.sched(0, events.Input{Schedule: "s1", Cron: "@every 10s", Queue: "q", Payload: "p", HasPayload: true}),
		"schedule_set/ok s1 next+10s")
	if d, ok := f.p.NextDeadline(); !ok || d != testutil.ScenarioBase+10*sec {
		t.Fatalf("NextDeadline = %d, %v", d, ok)
	}
	wantDecisions(t, "an input before it is due", f.tick(9*sec), "ticked/ok")
	wantDecisions(t, "the due time", f.tick(10*sec), "fired/ok s1 due+10s next+20s job s1-20260101T000010Z QUEUED; ticked/ok")
	if j, ok := f.p.Job("s1-20260101T000010Z"); !ok || j.Queue != "q" || j.Payload != "p" || j.Submitter != "admin" {
		t.Fatalf("the fired job: %+v", j)
	}
	wantDecisions(t, "between due times", f.tick(15*sec), "ticked/ok")
	// Only a tick fires: another input at a due time does not.
	wantDecisions(t, "a non-tick input", f.sched(20*sec, events.Input{Schedule: "nope", ScheduleOp: events.SchedulePause}), "rejected/no_such_schedule nope")
	wantDecisions(t, "four due times at once, the latest on time", f.tick(50*sec),
		"schedule_missed/fire_late s1 missed 3: +20s..+40s next+60s; fired/ok s1 due+50s next+60s job s1-20260101T000050Z QUEUED; ticked/ok")
	wantDecisions(t, "the latest 5 s late (grace: the 10 s period)", f.tick(605*sec),
		"schedule_missed/fire_late s1 missed 54: +60s..+590s next+610s; fired/ok s1 due+600s next+610s job s1-20260101T001000Z QUEUED; ticked/ok")
	wantDecisions(t, "pause", f.sched(606*sec, events.Input{Schedule: "s1", ScheduleOp: events.SchedulePause}), "schedule_set/ok s1 next+610s")
	wantDecisions(t, "paused", f.tick(700*sec), "ticked/ok")
	wantDecisions(t, "resume", f.sched(725*sec, events.Input{Schedule: "s1", ScheduleOp: events.ScheduleResume}),
		"schedule_missed/paused_through s1 missed 12: +610s..+720s; schedule_set/ok s1 next+735s")
	wantDecisions(t, "after the resume", f.tick(735*sec), "fired/ok s1 due+735s next+745s job s1-20260101T001215Z QUEUED; ticked/ok")
	wantDecisions(t, "delete", f.sched(736*sec, events.Input{Schedule: "s1", ScheduleOp: events.ScheduleDelete}), "schedule_deleted/ok s1")
	if d, ok := f.p.NextDeadline(); ok {
		t.Errorf("a deadline after the delete: %d", d)
	}
	wantDecisions(t, "deleted", f.tick(800*sec), "ticked/ok")
}

// A due time reached over the grace late: skip records it and fires
// nothing; once fires the latest anyway.
func TestScheduleMissedPolicies(t *testing.T) {
	f := schedFolder(t)
	f.sched(0, events.Input{Schedule: "skip", Cron: "*/5 * * * *", Queue: "q"})
	f.sched(0, events.Input{Schedule: "once", Cron: "*/5 * * * *", Queue: "q", Missed: events.MissedOnce})
	// Down from before +5 min until +17 min: 5, 10 and 15 passed; 15 is
	// 2 min late, over the minute's grace.
	wantDecisions(t, "late", f.tick(17*60*sec),
		"schedule_missed/fire_late once missed 2: +300s..+600s next+1200s; fired/ok once due+900s next+1200s job once-20260101T001500Z QUEUED; "+
			"schedule_missed/fire_late skip missed 3: +300s..+900s next+1200s; ticked/ok")
	wantDecisions(t, "on time again", f.tick(20*60*sec+30*sec),
		"fired/ok once due+1200s next+1500s job once-20260101T002000Z QUEUED; fired/ok skip due+1200s next+1500s job skip-20260101T002000Z QUEUED; ticked/ok")
}

// A set replaces a definition: due times of the old one that no tick
// reached are recorded missed first (never dropped), and a paused
// schedule stays paused.
func TestScheduleSetAgain(t *testing.T) {
	f := schedFolder(t)
	f.sched(0, events.Input{Schedule: "s", Cron: "* * * * *", Queue: "q"})
	wantDecisions(t, "set again after a due time no tick reached", f.sched(61*sec, events.Input{Schedule: "s", Cron: "*/5 * * * *", Queue: "q"}),
		"schedule_missed/fire_late s missed 1: +60s..+60s; schedule_set/ok s next+300s")
	f.sched(62*sec, events.Input{Schedule: "s", ScheduleOp: events.SchedulePause})
	wantDecisions(t, "set while paused", f.sched(601*sec, events.Input{Schedule: "s", Cron: "@hourly", Queue: "q"}),
		"schedule_missed/paused_through s missed 2: +300s..+600s; schedule_set/ok s next+3600s")
	wantDecisions(t, "still paused", f.tick(3600*sec), "ticked/ok")
	wantDecisions(t, "resume", f.sched(3601*sec, events.Input{Schedule: "s", ScheduleOp: events.ScheduleResume}),
		"schedule_missed/paused_through s missed 1: +3600s..+3600s; schedule_set/ok s next+7200s")
}

// A set with the same expression and zone keeps the timing: @every's
// anchor, the next due time (one pending stays pending: the next tick
// fires it), the pause; it replaces the template, queue and policy.
func TestScheduleSetSameTiming(t *testing.T) {
	f := schedFolder(t)
	f.sched(0, events.Input{Schedule: "s", Cron: "@every 10s", Queue: "q"})
	wantDecisions(t, "the same timing, another queue, a due time pending", f.sched(15*sec, events.Input{Schedule: "s", Cron: "@every 10s", Queue: "r", Missed: events.MissedOnce}),
		"schedule_set/ok s next+10s")
	wantDecisions(t, "the pending due time fires", f.tick(16*sec), "fired/ok s due+10s next+20s job s-20260101T000010Z QUEUED; ticked/ok")
	if j, _ := f.p.Job("s-20260101T000010Z"); j.Queue != "r" {
		t.Fatalf("the fire after the set went to queue %q, want r", j.Queue)
	}
	f.sched(17*sec, events.Input{Schedule: "s", ScheduleOp: events.SchedulePause})
	wantDecisions(t, "the same set while paused", f.sched(18*sec, events.Input{Schedule: "s", Cron: "@every 10s", Queue: "r"}), "schedule_set/ok s next+20s")
	if got := f.p.Schedules(); !got[0].Paused || got[0].Missed != events.MissedSkip {
		t.Fatalf("after the same set while paused: %+v", got[0])
	}
}

// A fire is judged as the template's submit: while the job of the last
// fire holds the unique key, the next fire is refused, and recorded.
func TestScheduleFireRefused(t *testing.T) {
	f := schedFolder(t)
	f.sched(0, events.Input{Schedule: "u", Cron: "@every 1m", Queue: "q", UniqueKey: "k"})
	wantDecisions(t, "first", f.tick(60*sec), "fired/ok u due+60s next+120s job u-20260101T000100Z QUEUED; ticked/ok")
	wantDecisions(t, "second, the key held", f.tick(120*sec), "fired/duplicate_unique_key u due+120s next+180s job u-20260101T000200Z NONE; ticked/ok")
}

// Refusals: 1,024 schedules at most; a lease out of the policy.
func TestScheduleRefusals(t *testing.T) {
	f := schedFolder(t)
	f.discard = true
	for i := range events.MaxSchedules {
		if ds := f.sched(0, events.Input{Schedule: fmt.Sprintf("s%d", i), Cron: "@hourly", Queue: "q"}); ds[0].Kind != events.KindScheduleSet {
			t.Fatalf("schedule %d: %s", i, show(ds))
		}
	}
	wantDecisions(t, "one more", f.sched(1, events.Input{Schedule: "more", Cron: "@hourly", Queue: "q"}), "rejected/schedules_full more")
	wantDecisions(t, "a set of one defined", f.sched(1, events.Input{Schedule: "s7", Cron: "@daily", Queue: "q"}), "schedule_set/ok s7 next+86400s")
	wantDecisions(t, "lease out of policy", f.sched(2, events.Input{Schedule: "s8", Cron: "@daily", Queue: "q", LeaseMS: 1}), "rejected/duration_out_of_policy s8")
	// The hourly ones fire 16 a tick, earliest first, then by id.
	ds := f.tick(3600 * sec)
	if len(ds) != 17 || ds[0].Schedule.ID != "s0" || ds[1].Schedule.ID != "s1" || ds[2].Schedule.ID != "s10" || ds[16].Kind != events.KindTicked {
		t.Fatalf("the first tick at the hour: %s", show(ds[:min(len(ds), 5)]))
	}
	fired := 16
	for range 200 {
		ds := f.tick(3600*sec + 1)
		if len(ds) == 1 {
			break
		}
		if len(ds) > 2*16+1 {
			t.Fatalf("a tick made %d decisions", len(ds))
		}
		fired += len(ds) - 1
	}
	if fired != events.MaxSchedules-1 { // s7 is daily now
		t.Fatalf("%d fired at the hour, want %d", fired, events.MaxSchedules-1)
	}
}

// Every due time of a schedule, up to the last tick, is fired exactly
// once or recorded missed exactly once, never both; fires follow due
// order; whatever the ticks' times (a coordinator down for hours, ticks
// late or early), pauses and resumes, and the missed policy; and a fold
// restored from a snapshot at any input decides the rest as one that
// never stopped.
func TestScheduleEveryDueTimeOnce(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		expr := rapid.SampledFrom([]string{"* * * * *", "*/7 * * * *", "0 * * * *", "30 2 * * *", "@every 1s", "@every 90s", "@every 17m"}).Draw(rt, "expr")
		every := strings.HasPrefix(expr, "@every")
		missed := events.Missed(rapid.IntRange(0, 1).Draw(rt, "missed"))
		f := &folder{t: &testing.T{}, p: projector.New()}
		projector.SetRevision(f.p, events.Revision10)
		var ds []events.Decision
		// A second fold restores from the first's snapshot at a random
		// input, and from there must decide exactly what the first does.
		restoreAt := uint64(rapid.IntRange(1, 62).Draw(rt, "restore_at"))
		var twin *projector.Projector
		step := func(at int64, role events.Role, in events.Input) {
			in.Role, in.Actor, in.Job = role, "admin", events.NoJob
			f.seq++
			raw := events.Raw{Seq: f.seq, Time: testutil.ScenarioBase + at,
				Subject: events.InputSubject(role, "admin", events.NoJob, in.Verb), Body: events.AppendInputBody(nil, &in)}
			out, err := f.p.Step(raw)
			if err != nil {
				rt.Fatal(err)
			}
			ds = append(ds, out...)
			if twin != nil {
				again, err := twin.Step(raw)
				if err != nil {
					rt.Fatal(err)
				}
				if a, b := show(out), show(again); a != b {
					rt.Fatalf("input %d after a restore at %d:\n fold %s\n restored %s", f.seq, restoreAt, a, b)
				}
			}
			if f.seq == restoreAt {
				twin = projector.New()
				if err := twin.Restore(f.p.Snapshot()); err != nil {
					rt.Fatalf("restore at %d: %v", f.seq, err)
				}
				if string(twin.Snapshot()) != string(f.p.Snapshot()) {
					rt.Fatalf("the restored state encodes differently")
				}
			}
		}
		step(0, events.RoleOps, events.Input{Verb: events.VerbSchedule, Schedule: "s", Cron: expr, Queue: "q", Missed: missed})
		at, paused := int64(0), false
		gaps := []int64{0, 1, 500, 1000, 30000, 61000, 600000, 3600000, 26 * 3600000}
		if expr == "@every 1s" {
			gaps = gaps[:7] // (a day of seconds is 86,400 due times to check)
		}
		for range rapid.IntRange(1, 60).Draw(rt, "inputs") {
			at += rapid.SampledFrom(gaps).Draw(rt, "gap_ms") * int64(time.Millisecond)
			switch act := rapid.IntRange(0, 19).Draw(rt, "act"); {
			case !every && act == 0:
				// The definition set again, paused or not (the due times
				// stay those of the expression; @every's would move).
				step(at, events.RoleOps, events.Input{Verb: events.VerbSchedule, Schedule: "s", Cron: expr, Queue: "q", Missed: missed})
			case !every && act <= 2:
				op := events.SchedulePause
				if paused {
					op = events.ScheduleResume
				}
				paused = !paused
				step(at, events.RoleOps, events.Input{Verb: events.VerbSchedule, Schedule: "s", ScheduleOp: op})
			case act == 3:
				// A pause of a paused schedule, a resume of an active
				// one: nothing changes.
				op := events.ScheduleResume
				if paused {
					op = events.SchedulePause
				}
				step(at, events.RoleOps, events.Input{Verb: events.VerbSchedule, Schedule: "s", ScheduleOp: op})
			default:
				step(at, events.RoleCoord, events.Input{Verb: events.VerbTick})
			}
		}
		if paused {
			step(at, events.RoleOps, events.Input{Verb: events.VerbSchedule, Schedule: "s", ScheduleOp: events.ScheduleResume})
		}
		step(at, events.RoleCoord, events.Input{Verb: events.VerbTick}) // everything due by at is handled
		// The due times, as package cron lists them from the set on.
		spec, _ := cron.Parse(expr)
		var due []int64
		for t, ok := spec.Next(cron.UTC, testutil.ScenarioBase, testutil.ScenarioBase); ok && t <= testutil.ScenarioBase+at && len(due) < 200000; t, ok = spec.Next(cron.UTC, testutil.ScenarioBase, t) {
			due = append(due, t)
		}
		seen := map[int64]string{}
		mark := func(t int64, how string) {
			if prev, dup := seen[t]; dup {
				rt.Fatalf("due time +%ds %s and %s", (t-testutil.ScenarioBase)/sec, prev, how)
			}
			seen[t] = how
		}
		last := int64(0)
		for _, d := range ds {
			switch {
			case d.Kind == events.KindFired:
				if d.Schedule.Due <= last {
					rt.Fatalf("fired +%ds after +%ds", (d.Schedule.Due-testutil.ScenarioBase)/sec, (last-testutil.ScenarioBase)/sec)
				}
				last = d.Schedule.Due
				mark(d.Schedule.Due, "fired")
			case d.Kind == events.KindScheduleMissed:
				n := uint64(0)
				for _, t := range due {
					if t >= d.Schedule.MissedFrom && t <= d.Schedule.MissedTo {
						mark(t, "missed")
						n++
					}
				}
				if n != d.Schedule.MissedCount && d.Schedule.MissedCount != events.MaxMissedCount {
					rt.Fatalf("missed count %d, %d due times in its range", d.Schedule.MissedCount, n)
				}
			}
		}
		for _, t := range due {
			if _, ok := seen[t]; !ok {
				rt.Fatalf("due time +%ds neither fired nor missed (%d due times; decisions: %s)", (t-testutil.ScenarioBase)/sec, len(due), show(ds))
			}
		}
		if len(seen) != len(due) {
			rt.Fatalf("%d due times handled, %d due", len(seen), len(due))
		}
	})
}

// In a partitioned deployment a schedule lives in the partition of its id
// (another partition refuses it: sent to every one it would fire in each),
// and every job it fires is that partition's, as a worker's inputs about
// the job are routed by its id: the due time's id, or the first of it
// with a suffix -1, -2, ... that the partition owns.
func TestSchedulePartitioned(t *testing.T) {
	part := events.Partition{Index: 2, Count: 4}
	p := projector.NewPartition(part)
	projector.SetRevision(p, events.Revision10)
	seq := uint64(0)
	step := func(at int64, role events.Role, in events.Input) []events.Decision {
		in.Role, in.Actor, in.Job = role, "admin", events.NoJob
		seq++
		ds, err := p.Step(events.Raw{Seq: seq, Time: testutil.ScenarioBase + at,
			Subject: part.InputSubject(role, "admin", events.NoJob, in.Verb), Body: events.AppendInputBody(nil, &in)})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	var mine, other string
	for i := 0; mine == "" || other == ""; i++ {
		id := fmt.Sprintf("s%d", i)
		if part.Owns(id) {
			mine = cmp.Or(mine, id)
		} else {
			other = cmp.Or(other, id)
		}
	}
	if ds := step(0, events.RoleOps, events.Input{Verb: events.VerbSchedule, Schedule: other, Cron: "@every 1s", Queue: "q"}); ds[0].Kind != events.KindRejected || ds[0].Reason != events.ReasonWrongPartition {
		t.Fatalf("a schedule of another partition: %s", show(ds))
	}
	if ds := step(0, events.RoleOps, events.Input{Verb: events.VerbSchedule, Schedule: mine, Cron: "@every 1s", Queue: "q"}); ds[0].Kind != events.KindScheduleSet {
		t.Fatalf("a schedule of the partition: %s", show(ds))
	}
	ids, suffixed := map[string]bool{}, 0
	for s := int64(1); s <= 300; s++ {
		for _, d := range step(s*sec, events.RoleCoord, events.Input{Verb: events.VerbTick}) {
			if d.Kind != events.KindFired {
				continue
			}
			id := d.Job.ID
			if d.Reason != events.ReasonOk || !part.Owns(id) || ids[id] || !strings.HasPrefix(id, firedID(mine, d.Schedule.Due)) {
				t.Fatalf("fire of +%ds: %s/%s job %s (owned %v, seen %v)", s, d.Kind, d.Reason, id, part.Owns(id), ids[id])
			}
			if id != firedID(mine, d.Schedule.Due) {
				suffixed++
			}
			ids[id] = true
		}
	}
	if len(ids) != 300 || suffixed == 0 {
		t.Fatalf("%d jobs fired, %d of them with a suffix", len(ids), suffixed)
	}
}

// firedID is the id package projector gives the job schedule id fires for
// due time due in an unpartitioned deployment.
func firedID(id string, due int64) string {
	return id + "-" + time.Unix(0, due).UTC().Format("20060102T150405") + "Z"
}

// Schedules lists the schedules as their schedule_set decisions carried
// them, sorted by id, a paused one with its next due time pending (03:00
// in Berlin, 02:00 UTC), each after its fires with the next due time the
// fires carried.
func TestSchedulesList(t *testing.T) {
	f := schedFolder(t)
	f.sched(0, events.Input{Schedule: "b", Cron: "@every 10s", Queue: "q", Missed: events.MissedOnce})
	f.sched(0, events.Input{Schedule: "a", Cron: "0 3 * * *", TZ: "CET-1CEST,M3.5.0,M10.5.0/3", Zone: "Europe/Berlin", Queue: "r"})
	f.sched(1, events.Input{Schedule: "a", ScheduleOp: events.SchedulePause})
	ds := f.tick(10 * sec)
	got := f.p.Schedules()
	if len(got) != 2 || got[0].ID != "a" || got[1].ID != "b" {
		t.Fatalf("Schedules: %+v", got)
	}
	if a := got[0]; !a.Paused || a.Next != testutil.ScenarioBase+int64(2*time.Hour) || a.Zone != "Europe/Berlin" || a.TZ == "" || a.Queue != "r" || a.Actor != "admin" {
		t.Errorf("a: %+v", a)
	}
	if b := got[1]; b.Paused || b.Next != testutil.ScenarioBase+20*sec || b.Next != ds[0].Schedule.Next || b.Missed != events.MissedOnce {
		t.Errorf("b: %+v (the fire said next %d)", b, ds[0].Schedule.Next)
	}
}
