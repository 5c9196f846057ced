package coordinator_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

// A queue job whose attempt ended waits its backoff, and is offered again
// by a tick the coordinator appends when its ready_at comes (the job's
// wake-up deadline) and the worker's hold ends (its own), not by some
// later input; with its budget spent it ends DEAD, also by a tick, with
// no input from the worker after its ACKs but one announcement.
func TestQueueRetryThroughTick(t *testing.T) {
	srv, _, js := newServer(t)
	r := startCoordinator(t, srv.ClientURL(), "c1")
	waitDecision(t, js, "the log at the current revision", func(d events.Decision) bool {
		return d.Kind == events.KindRulesSet && d.Revision == events.CurrentRevision
	})
	seq := publish(t, js, events.RoleOps, "d1", "mail-1", events.VerbSubmit,
		`{"v":1,"queue":"emails","max_attempts":2,"backoff_ms":400,"lease_ms":200}`)
	if v := verdict(decisionsFor(t, js, seq)); v.Kind != events.KindSubmitted {
		t.Fatalf("submit: %s/%s", v.Kind, v.Reason)
	}
	seq = publish(t, js, events.RoleWorker, "w1", events.NoJob, events.VerbPull, `{"v":1,"queue":"emails","slots":1,"ttl_ms":60000}`)
	ds := decisionsFor(t, js, seq)
	if len(ds) != 2 || ds[0].Kind != events.KindCapacitySet || ds[1].Kind != events.KindAssigned || ds[1].Addressee != "w1" {
		t.Fatalf("pull: %+v", ds)
	}
	// w1 ACKs and lets the lease expire (it never renews): attempt 1 ends.
	seq = publish(t, js, events.RoleWorker, "w1", "mail-1", events.VerbAck, fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":1}`, ds[1].Job.LeaseID))
	if v := verdict(decisionsFor(t, js, seq)); v.Kind != events.KindAcked {
		t.Fatalf("ack: %s/%s", v.Kind, v.Reason)
	}
	requeued := waitDecision(t, js, "the requeue", func(d events.Decision) bool { return d.Kind == events.KindRequeued && d.Job.ID == "mail-1" })
	if requeued.Reason != events.ReasonLeaseExpired || requeued.Job.ReadyAt <= requeued.Job.EndedAt {
		t.Fatalf("requeued %s, ready at %d, ended at %d", requeued.Reason, requeued.Job.ReadyAt, requeued.Job.EndedAt)
	}
	// The expiry was w1's refusal (rules revision 5): its announcement is
	// withdrawn and it is held for a second. It announces again at once;
	// the offer comes by the tick the coordinator appends when both the
	// job's backoff and w1's hold have ended.
	withdrawn := waitDecision(t, js, "the withdrawal", func(d events.Decision) bool {
		return d.Kind == events.KindWithdrawn && d.Addressee == "w1" && d.Reason == events.ReasonLeaseExpired
	})
	if withdrawn.Standing == nil || withdrawn.Standing.Strikes != 1 || withdrawn.Standing.HeldUntil != withdrawn.At+1e9 {
		t.Fatalf("withdrawn with standing %+v at %d", withdrawn.Standing, withdrawn.At)
	}
	publish(t, js, events.RoleWorker, "w1", events.NoJob, events.VerbPull, `{"v":1,"queue":"emails","slots":1,"ttl_ms":60000}`)
	second := waitDecision(t, js, "the second offer", func(d events.Decision) bool {
		return d.Kind == events.KindAssigned && d.Job.ID == "mail-1" && d.Job.Generation == 2
	})
	wake := max(requeued.Job.ReadyAt, withdrawn.Standing.HeldUntil)
	if second.Verb != events.VerbTick || second.Role != events.RoleCoord || second.At < wake {
		t.Fatalf("second offer caused by %s/%s at %d, ready at %d, hold until %d: want a tick at or after both", second.Role, second.Verb, second.At, requeued.Job.ReadyAt, withdrawn.Standing.HeldUntil)
	}
	if late := second.At - wake; late > 2e9 {
		t.Fatalf("second offer %d ms after ready_at and the hold's end", late/1e6)
	}
	seq = publish(t, js, events.RoleWorker, "w1", "mail-1", events.VerbAck, fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":2}`, second.Job.LeaseID))
	if v := verdict(decisionsFor(t, js, seq)); v.Kind != events.KindAcked {
		t.Fatalf("ack: %s/%s", v.Kind, v.Reason)
	}
	dead := waitDecision(t, js, "the DEAD end", func(d events.Decision) bool { return d.Kind == events.KindDead && d.Job.ID == "mail-1" })
	if dead.Reason != events.ReasonLeaseExpired || dead.Job.State != events.StateDead || dead.Job.Attempt != 2 || dead.Addressee != "d1" {
		t.Fatalf("dead: %s %s attempt %d to %s", dead.Reason, dead.Job.State, dead.Job.Attempt, dead.Addressee)
	}
	waitCaughtUp(t, js, r)
	checkChain(t, js)
}

// A queue's rate limit (rules revision 9) through a real coordinator:
// of three jobs, the full bucket of 2 lets two be offered by the pull;
// the third is offered by a tick the coordinator appends when the next
// token is due (no other input is stored after the pull), not before.
func TestRateLimitThroughTick(t *testing.T) {
	srv, _, js := newServer(t)
	r := startCoordinator(t, srv.ClientURL(), "c1")
	waitDecision(t, js, "the log at the current revision", func(d events.Decision) bool {
		return d.Kind == events.KindRulesSet && d.Revision == events.CurrentRevision
	})
	seq := publish(t, js, events.RoleOps, "admin", events.NoJob, events.VerbLimit, `{"v":1,"queue":"emails","rate":2,"period_ms":1200}`)
	if v := verdict(decisionsFor(t, js, seq)); v.Kind != events.KindLimitSet {
		t.Fatalf("limit: %s/%s", v.Kind, v.Reason)
	}
	for _, id := range []string{"m1", "m2", "m3"} {
		seq = publish(t, js, events.RoleOps, "d1", id, events.VerbSubmit, `{"v":1,"queue":"emails"}`)
		if v := verdict(decisionsFor(t, js, seq)); v.Kind != events.KindSubmitted {
			t.Fatalf("submit %s: %s/%s", id, v.Kind, v.Reason)
		}
	}
	seq = publish(t, js, events.RoleWorker, "w1", events.NoJob, events.VerbPull, `{"v":1,"queue":"emails","slots":8,"ttl_ms":60000}`)
	ds := decisionsFor(t, js, seq)
	if len(ds) != 3 || ds[1].Kind != events.KindAssigned || ds[2].Kind != events.KindAssigned {
		t.Fatalf("pull: %+v", ds)
	}
	third := waitDecision(t, js, "the third offer", func(d events.Decision) bool { return d.Kind == events.KindAssigned && d.Job.ID == "m3" })
	// T = 600 ms: the bucket's next token is 600 ms after the pull's time.
	if due := ds[0].At + 600e6; third.Verb != events.VerbTick || third.Role != events.RoleCoord || third.At < due || third.At-due > 2e9 {
		t.Fatalf("third offer caused by %s/%s at +%d ms after the pull, want a tick at +600 ms", third.Role, third.Verb, (third.At-ds[0].At)/1e6)
	}
	waitCaughtUp(t, js, r)
	checkChain(t, js)
}

// A worker with valid credentials that announces the most capacity and
// never ACKs (it grabs every offer first) gains nothing: each missed ACK
// withdraws its announcement and spends no attempt, the jobs go to an
// honest worker at once, and every job completes; none ends DEAD, however
// often the hostile worker announces again.
//
// Both workers act on their decisions as they arrive (a subscription), as
// a worker does: the honest one ACKs and completes each offer and
// announces again after a withdrawal, the hostile one announces again
// after each. Nothing here depends on how fast they are: an honest ACK
// that misses its 300 ms (a loaded machine) is one more missed offer,
// which spends no attempt either, and the job is offered again.
func TestHostileWorkerGrabsOffers(t *testing.T) {
	srv, nc, js := newServer(t)
	r := startCoordinator(t, srv.ClientURL(), "c1")
	waitDecision(t, js, "the log at the current revision", func(d events.Decision) bool {
		return d.Kind == events.KindRulesSet && d.Revision == events.CurrentRevision
	})
	const jobs = 20
	for i := range jobs {
		publish(t, js, events.RoleOps, "d1", fmt.Sprintf("job-%02d", i), events.VerbSubmit, `{"v":1,"queue":"q","max_attempts":1,"ack_timeout_ms":300}`)
	}
	send := func(worker, job string, verb events.Verb, body string) {
		if _, err := js.PublishAsync(events.InputSubject(events.RoleWorker, worker, job, verb), []byte(body)); err != nil {
			t.Errorf("publish %s of %s: %v", verb, worker, err)
		}
	}
	announce := func(worker string, slots int) {
		send(worker, events.NoJob, events.VerbPull, fmt.Sprintf(`{"v":1,"queue":"q","slots":%d,"ttl_ms":60000}`, slots))
	}
	var mu sync.Mutex
	done := map[string]bool{}
	var dead []string
	sub, err := nc.Subscribe(events.DecisionPrefix+".>", func(m *nats.Msg) {
		d, err := events.DecodeDecision(m.Data)
		if err != nil {
			t.Errorf("decision %s: %v", m.Subject, err)
			return
		}
		j := d.Job
		switch {
		case d.Kind == events.KindDead:
			mu.Lock()
			dead = append(dead, j.ID+" ("+string(d.Reason)+")")
			mu.Unlock()
		case d.Kind == events.KindAssigned && j.Holder == "w-good":
			send("w-good", j.ID, events.VerbAck, fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":%d}`, j.LeaseID, j.Generation))
		case d.Kind == events.KindAcked && j.Holder == "w-good":
			send("w-good", j.ID, events.VerbResult, fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":%d,"outcome":"SUCCESS"}`, j.LeaseID, j.Generation))
		case d.Kind == events.KindWithdrawn && d.Addressee == "w-good":
			announce("w-good", 2) // as the SDK does
		case d.Kind == events.KindWithdrawn && d.Addressee == "w-evil":
			announce("w-evil", 256) // grab again
		case d.Kind == events.KindCompleted && j.State == events.StateCompleted:
			mu.Lock()
			done[j.ID] = true
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	announce("w-evil", 256)
	announce("w-good", 2)
	testutil.WaitFor(t, 60*time.Second, "every job completed by the honest worker", func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(dead) > 0 {
			t.Fatalf("jobs DEAD: %v: the hostile worker spent their attempts", dead)
		}
		return len(done) == jobs
	})
	next := uint64(0)
	evilOffers, withdrawn := 0, 0
	for _, m := range readStream(t, js, "TENURE_OUT") {
		next++
		d, _ := events.DecodeDecision(m.data)
		if d.Kind == events.KindAssigned && d.Job.Holder == "w-evil" {
			evilOffers++
			if d.Job.Attempt > 1 {
				t.Fatalf("offer to w-evil counted as attempt %d", d.Job.Attempt)
			}
		}
		if d.Kind == events.KindWithdrawn && d.Addressee == "w-evil" && d.Reason == events.ReasonAckDeadlinePassed {
			withdrawn++
		}
	}
	if evilOffers == 0 || withdrawn == 0 {
		t.Fatalf("the hostile worker was offered %d jobs and withdrawn %d times: the test did not attack", evilOffers, withdrawn)
	}
	t.Logf("%d jobs completed; the hostile worker grabbed %d offers and lost its announcement %d times; %d decisions stored", jobs, evilOffers, withdrawn, next)
	waitCaughtUp(t, js, r)
	checkChain(t, js)
}
