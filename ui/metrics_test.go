package ui

import (
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

// tenure_loop_pause_max_seconds is the longest pause of all the turns
// reported for a partition, however many times ForPartition is asked for
// its series, and each partition has its own.
func TestLoopPauseMax(t *testing.T) {
	m := NewMetricsFor(2)
	p0, p1 := events.Partition{Index: 0, Count: 2}, events.Partition{Index: 1, Count: 2}
	m.ForPartition(p0).LoopPause(3 * time.Millisecond)
	m.ForPartition(p0).LoopPause(time.Millisecond)
	m.ForPartition(p1).LoopPause(2 * time.Millisecond)
	m.ForPartition(p0).LoopPause(2 * time.Millisecond)
	got := map[string]float64{}
	var observed uint64
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			switch mf.GetName() {
			case "tenure_loop_pause_max_seconds":
				got[s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
			case "tenure_loop_pause_seconds":
				observed += s.GetHistogram().GetSampleCount()
			}
		}
	}
	if got["0"] != 0.003 || got["1"] != 0.002 || observed != 4 {
		t.Fatalf("longest pauses by partition %v, %d turns observed; want 0.003 and 0.002, 4", got, observed)
	}
}

// gathered is the value of every series of the metrics named name in m's
// registry, by its labels' values joined with commas.
func gathered(t *testing.T, m *Metrics, name string) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetValue())
			}
			v := s.GetGauge().GetValue()
			if s.GetCounter() != nil {
				v = s.GetCounter().GetValue()
			}
			out[strings.Join(labels, ",")] = v
		}
	}
	return out
}

// withdrawn is a refusal's withdrawn decision (rules revision 5) of worker
// on queue, with its standing held until heldUntil (0: not held).
func withdrawn(cause uint64, at int64, reason events.Reason, worker, queue string, strikes uint64, heldUntil int64) *events.Decision {
	return &events.Decision{Cause: cause, Of: 1, At: at, Kind: events.KindWithdrawn, Reason: reason, Role: events.RoleWorker,
		Actor: worker, Verb: events.VerbRelease, Addressee: worker, Job: events.Job{ID: events.NoJob},
		Capacity: &events.Capacity{Queue: queue}, Standing: &events.Standing{Queue: queue, Window: 4, Strikes: strikes, HeldUntil: heldUntil}}
}

// The read model's refusals count by queue and reason, and a queue's held
// workers are those the latest decision carrying their standing holds at
// the scrape: a hold that ended, or that a success cleared, counts no more.
func TestQueueMetricsModel(t *testing.T) {
	m := NewMetrics()
	md := newModel(0, 0)
	md.obs = m
	m.attach(md, nil)
	now := time.Now().UnixNano()
	later := now + int64(10*time.Minute)
	// A queue is known while it has jobs (or announcements): one each.
	for i, q := range []string{"emails", "reports"} {
		j := events.Job{ID: q + "-1", State: events.StateQueued, Queue: q, Submitter: "disp", MaxAttempts: 3, SubmittedAt: now, ReadyAt: now}
		md.apply(0, uint64(i+1), decision(uint64(i+1), events.KindSubmitted, events.ReasonOk, j))
	}
	md.apply(0, 3, withdrawn(3, now, events.ReasonOfferDeclined, "w1", "emails", 1, later))
	md.apply(0, 4, withdrawn(4, now, events.ReasonReleased, "w1", "emails", 1, later)) // the same episode
	md.apply(0, 5, withdrawn(5, now, events.ReasonLeaseExpired, "w2", "emails", 1, now-int64(time.Second)))
	md.apply(0, 6, withdrawn(6, now, events.ReasonAckDeadlinePassed, "w3", "reports", 2, later))
	// w3's success on reports clears its strikes and its hold.
	ok := &events.Decision{Cause: 7, Of: 1, At: now, Kind: events.KindCapacitySet, Reason: events.ReasonOk, Role: events.RoleWorker,
		Actor: "w3", Verb: events.VerbPull, Addressee: "w3", Job: events.Job{ID: events.NoJob},
		Capacity: &events.Capacity{Queue: "reports", Slots: 1, Until: later}, Standing: &events.Standing{Queue: "reports", Window: 5}}
	md.apply(0, 7, ok)

	refusals := gathered(t, m, "tenure_queue_refusals_total")
	want := map[string]float64{"emails,offer_declined": 1, "emails,released": 1, "emails,lease_expired": 1, "reports,ack_deadline_passed": 1}
	if !maps.Equal(refusals, want) {
		t.Errorf("tenure_queue_refusals_total %v, want %v", refusals, want)
	}
	if held := gathered(t, m, "tenure_queue_workers_held"); !maps.Equal(held, map[string]float64{"emails": 1, "reports": 0}) {
		t.Errorf("tenure_queue_workers_held %v, want emails 1 (w1; w2's hold ended), reports 0 (w3's cleared)", held)
	}
}

// A worker of a queue that declines an offer, releases a lease, misses an
// ACK and lets a lease expire (rules revision 5: four refusals, each a
// withdrawn decision of the fold): /metrics counts each reason once for the
// queue and the worker held; /api/queues?queue= shows the worker's counts
// and standing to a viewer, without a lease id; /api/queues lists no
// workers.
func TestQueueMetrics(t *testing.T) {
	e := newEnv(t, false)
	e.decide("ops.disp.m1.submit", `{"v":1,"queue":"emails"}`)
	e.decide("ops.disp.m2.submit", `{"v":1,"queue":"emails"}`)
	e.decide("ops.disp.m3.submit", `{"v":1,"queue":"emails","ack_timeout_ms":2000}`)
	e.decide("ops.disp.m4.submit", `{"v":1,"queue":"emails","lease_ms":300}`)
	e.publish("worker.w1._.pull", `{"v":1,"queue":"emails","slots":4,"ttl_ms":600000}`)
	testutil.WaitFor(t, 10*time.Second, "the four offered to w1", func() bool {
		for _, j := range []string{"m1", "m2", "m3", "m4"} {
			if r := e.row(j); r.State != "OFFERED" || r.Holder != "w1" {
				return false
			}
		}
		return true
	})
	leases := map[string]string{}
	for _, j := range []string{"m1", "m2", "m3", "m4"} {
		leases[j] = e.row(j).LeaseID
	}
	lease := func(job string) string { return `{"v":1,"lease_id":"` + leases[job] + `","generation":1}` }
	// The decline first: after a refusal withdrew w1's announcement, a
	// decline returns surplus, no refusal.
	e.decide("worker.w1.m1.release", lease("m1"))
	e.decide("worker.w1.m2.ack", lease("m2"))
	e.decide("worker.w1.m2.release", lease("m2"))
	e.decide("worker.w1.m4.ack", lease("m4"))
	testutil.WaitFor(t, 10*time.Second, "m3's ACK missed and m4's lease expired", func() bool {
		return e.row("m3").LastReason == string(events.ReasonAckDeadlinePassed) && e.row("m4").Attempt == 1 && e.row("m4").State == "QUEUED"
	})

	// /metrics is counted from the decisions as they are read: it may
	// lag the rows above by a moment (it did under a stress run's load).
	var metrics string
	var scraped time.Time
	testutil.WaitFor(t, 10*time.Second, "the four refusals counted in /metrics", func() bool {
		metrics, scraped = e.text("/metrics"), time.Now()
		for _, reason := range []string{"offer_declined", "released", "ack_deadline_passed", "lease_expired"} {
			if !strings.Contains(metrics, `tenure_queue_refusals_total{queue="emails",reason="`+reason+`"} 1`) {
				return false
			}
		}
		return true
	})
	if strings.Contains(metrics, `"w1"`) {
		t.Errorf("/metrics names the worker:\n%s", metrics)
	}

	viewer := e.login(Viewer)
	code, body := viewer.raw("/api/queues?queue=emails")
	if code != http.StatusOK {
		t.Fatalf("GET /api/queues?queue=emails: %d %s", code, body)
	}
	for _, l := range leases {
		if l == "" || strings.Contains(body, "lease_id") || strings.Contains(body, l) {
			t.Errorf("a viewer's queue answer holds a lease id: %s", body)
		}
	}
	var qp QueuesPage
	if err := json.Unmarshal([]byte(body), &qp); err != nil {
		t.Fatal(err)
	}
	if len(qp.Queues) != 1 || qp.Queues[0].Queue != "emails" || len(qp.Queues[0].WorkerList) != 1 {
		t.Fatalf("queue emails: %s", body)
	}
	w := qp.Queues[0].WorkerList[0]
	if w.Worker != "w1" || w.Slots != 0 || w.Offers != 4 || w.Declines != 1 || w.Releases != 1 || w.MissedAcks != 1 || w.Expiries != 1 ||
		w.Standing == nil || w.Standing.Strikes == 0 || w.Standing.Window >= 8 || w.Standing.HeldUntil == "" {
		t.Fatalf("w1 on emails: %s", body)
	}
	// The worker is held until its standing's held_until: counted if the
	// scrape was before it.
	if until, err := time.Parse(time.RFC3339Nano, w.Standing.HeldUntil); err != nil {
		t.Fatal(err)
	} else if scraped.Before(until) && !strings.Contains(metrics, `tenure_queue_workers_held{queue="emails"} 1`) {
		t.Errorf("w1 held until %s, scraped before it: no tenure_queue_workers_held 1 in\n%s", until, metrics)
	} else if !scraped.Before(until) {
		t.Logf("the scrape came after w1's hold ended (%s)", until)
	}
	testutil.WaitFor(t, 20*time.Second, "w1's hold to end", func() bool {
		return strings.Contains(e.text("/metrics"), `tenure_queue_workers_held{queue="emails"} 0`)
	})

	var all QueuesPage
	if code := viewer.get("/api/queues", &all); code != http.StatusOK || len(all.Queues) != 1 || all.Queues[0].WorkerList != nil {
		t.Fatalf("GET /api/queues: %d %+v", code, all)
	}
	if code, _ := viewer.raw("/api/queues?queue=nope"); code != http.StatusNotFound {
		t.Fatalf("an unknown queue: %d", code)
	}
}

// /api/queues?queue= lists the queue's cron schedules (rules revision 10)
// with their fires, to a viewer, without their templates (a payload is
// its submitter's and its worker's to know); /api/queues lists none.
func TestQueueSchedules(t *testing.T) {
	e := newEnv(t, false)
	e.decide("ops.disp.m1.submit", `{"v":1,"queue":"emails"}`)
	e.publish("ops.admin._.schedule", `{"v":1,"schedule":"digest","cron":"@every 1s","queue":"emails","payload":"secret-digest"}`)
	e.publish("ops.admin._.schedule", `{"v":1,"schedule":"other","cron":"@daily","queue":"reports"}`)
	viewer := e.login(Viewer)
	var qp QueuesPage
	testutil.WaitFor(t, 15*time.Second, "digest fired", func() bool {
		qp = QueuesPage{}
		return viewer.get("/api/queues?queue=emails", &qp) == http.StatusOK && len(qp.Schedules) == 1 && qp.Schedules[0].Fires > 0
	})
	s := qp.Schedules[0]
	if s.ID != "digest" || s.Actor != "admin" || s.Cron != "@every 1s" || s.Next == "" || !strings.HasPrefix(s.LastJob, "digest-") || qp.ScheduleTotal != 1 {
		t.Fatalf("the schedules of emails: %+v", qp)
	}
	if _, body := viewer.raw("/api/queues?queue=emails"); strings.Contains(body, "secret-digest") || strings.Contains(body, "template") {
		t.Fatalf("a viewer's queue answer holds the schedule's template: %s", body)
	}
	var all QueuesPage
	if code := viewer.get("/api/queues", &all); code != http.StatusOK || all.Schedules != nil {
		t.Fatalf("GET /api/queues: %d %+v", code, all)
	}
}
