package ops_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/cron/tzdb"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/streams"
)

// firstFire waits for the first fired decision of schedule id in the
// decision stream of topo.
func firstFire(t *testing.T, js jetstream.JetStream, topo streams.Topology, id string) events.Decision {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, topo.DecisionStream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(time.Until(deadlineOf(ctx))))
		if err != nil {
			t.Fatalf("no fire of schedule %s: %v", id, err)
		}
		d, err := events.DecodeDecision(m.Data())
		if err == nil && d.Kind == events.KindFired && d.Schedule != nil && d.Schedule.ID == id {
			return d
		}
	}
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// An operator's schedule through the client: set with a zone resolved to
// its rule, fired as the template's submit by the client's actor, paused,
// resumed, deleted; what the decoder would refuse is refused before
// anything is sent.
func TestSchedules(t *testing.T) {
	c, js := startTenureJS(t)
	ctx := context.Background()

	rule, err := tzdb.Rule("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.SetSchedule(ctx, "nightly", ops.Schedule{Cron: "30 2 * * *", Zone: "Europe/Berlin", Queue: "reports"})
	if err != nil || d.Kind != events.KindScheduleSet || d.Schedule.TZ != rule || d.Schedule.Zone != "Europe/Berlin" || d.Schedule.Next == 0 {
		t.Fatalf("set nightly: %+v %+v, %v (want the rule %q)", d, d.Schedule, err, rule)
	}
	if next := time.Unix(0, d.Schedule.Next).In(mustZone(t, "Europe/Berlin")); next.Hour() != 2 || next.Minute() != 30 {
		t.Fatalf("nightly's next due time %v, want 02:30 in Berlin", next)
	}
	d, err = c.SetSchedule(ctx, "every", ops.Schedule{Cron: "@every 1s", Queue: "q", Missed: events.MissedOnce,
		Job: []ops.SubmitOption{ops.WithPayload("tick"), ops.WithPriority(3)}})
	if err != nil || d.Kind != events.KindScheduleSet || d.Schedule.Missed != events.MissedOnce {
		t.Fatalf("set every: %+v, %v", d, err)
	}
	f := firstFire(t, js, streams.Topology{}, "every")
	j := f.Job
	if f.Reason != events.ReasonOk || j.Queue != "q" || j.Submitter != "disp" || j.Payload != "tick" || j.Priority != 3 ||
		!strings.HasPrefix(j.ID, "every-") || f.Addressee != "disp" {
		t.Fatalf("the first fire: %s/%s to %s, job %+v", f.Kind, f.Reason, f.Addressee, j)
	}

	if d, err := c.PauseSchedule(ctx, "every"); err != nil || !d.Schedule.Paused {
		t.Fatalf("pause: %+v, %v", d.Schedule, err)
	}
	if d, err := c.ResumeSchedule(ctx, "every"); err != nil || d.Schedule.Paused || d.Schedule.Next == 0 {
		t.Fatalf("resume: %+v, %v", d.Schedule, err)
	}
	if d, err := c.DeleteSchedule(ctx, "every"); err != nil || d.Kind != events.KindScheduleDeleted {
		t.Fatalf("delete: %+v, %v", d, err)
	}
	var rej *ops.RejectedError
	if d, err := c.PauseSchedule(ctx, "every"); !errors.As(err, &rej) || d.Reason != events.ReasonNoSuchSchedule {
		t.Fatalf("pause of a deleted schedule: %s/%s, %v", d.Kind, d.Reason, err)
	}

	// Refused here, nothing sent.
	for name, s := range map[string]ops.Schedule{
		"a bad expression":   {Cron: "0 0 30 2 *", Queue: "q"},
		"no queue":           {Cron: "@hourly"},
		"an unknown zone":    {Cron: "@hourly", Queue: "q", Zone: "Mars/Olympus_Mons"},
		"a run at":           {Cron: "@hourly", Queue: "q", Job: []ops.SubmitOption{ops.WithRunAt(time.Now())}},
		"a unique for":       {Cron: "@hourly", Queue: "q", Job: []ops.SubmitOption{ops.WithUniqueKey("k"), ops.WithUniqueFor(time.Hour)}},
		"a missed policy 7":  {Cron: "@hourly", Queue: "q", Missed: 7},
		"a backoff inverted": {Cron: "@hourly", Queue: "q", Job: []ops.SubmitOption{ops.WithBackoff(time.Hour, time.Minute)}},
	} {
		if _, err := c.SetSchedule(ctx, "s", s); err == nil || errors.As(err, &rej) {
			t.Errorf("%s: %v, want an error before sending", name, err)
		}
	}
	if _, err := c.SetSchedule(ctx, strings.Repeat("x", events.MaxScheduleIDLen+1), ops.Schedule{Cron: "@hourly", Queue: "q"}); err == nil || errors.As(err, &rej) {
		t.Errorf("an id of %d characters: %v, want an error before sending", events.MaxScheduleIDLen+1, err)
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// In a partitioned deployment the client sends a schedule to its id's
// partition alone, and the jobs it fires are that partition's.
func TestPartitionedSchedule(t *testing.T) {
	c, js := startPartitioned(t)
	ctx := context.Background()
	const id = "sweep"
	k := events.PartitionOf(id, testPartitions)
	d, err := c.SetSchedule(ctx, id, ops.Schedule{Cron: "@every 1s", Queue: "q"})
	if err != nil || d.Kind != events.KindScheduleSet {
		t.Fatalf("set: %+v, %v", d, err)
	}
	f := firstFire(t, js, streams.Topology{}.Partitions(testPartitions)[k], id)
	if got := events.PartitionOf(f.Job.ID, testPartitions); f.Reason != events.ReasonOk || got != k {
		t.Fatalf("fire %s/%s of job %s in partition %d, want partition %d's", f.Kind, f.Reason, f.Job.ID, got, k)
	}
	if _, err := c.DeleteSchedule(ctx, id); err != nil {
		t.Fatal(err)
	}
}
