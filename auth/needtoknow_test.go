package auth_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ops"
)

// A worker learns no lease id and no payload from the verdicts it gets
// (issue "Need to know", rules revision 5). w2, holding only its own
// credentials, aims every kind of input a worker may send at jobs it does
// not hold: the honest workers' live leases (their job ids follow a
// pattern it can guess), a job at its second generation, and a queued job
// with a secret payload that nobody announced capacity for: acquires,
// ACKs, renewals (single and batch, guessed ids, older and newer
// generations), progress, cancel ACKs, results, releases and malformed
// bodies. It reads every decision addressed to it, as its consumer would.
// None may carry a lease id of a lease it does not hold, nor a payload;
// the walk must have met every verdict a non-holder can get without the
// lease id (lease_held, job_queued, no_such_job, no_such_lease,
// future_generation, stale_generation for a renew and for progress, and
// the decoder's rejections); and with every id it could learn, w2 then
// tries the freeze (a renewal of each: an ownership conflict on the
// honest lease). On the code before revision 5 the verdicts told w2 the
// honest leases' ids, and the freeze cost the honest workers their leases.
func TestAttackLeaseIDsLearnedFromVerdicts(t *testing.T) {
	t.Parallel()
	e := newAttackEnv(t)
	h := e.startHonest(t, honestConfig{})
	a := e.attacker(t)
	ctx := context.Background()

	// Fixtures of the trusted side: a job at generation 2 offered to a
	// worker that is not running (its first offer's ACK deadline passed),
	// and a queued job with a secret payload.
	d := connect(t, e.b, e.url, "disp")
	disp, err := ops.New(d.nc, "disp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disp.Close() })
	const secret = "token=s3cret-of-the-submitter"
	for _, step := range []func() (events.Decision, error){
		func() (events.Decision, error) { return disp.Offer(ctx, "fx-gen2", "w4", 600000, 200) },
		func() (events.Decision, error) {
			testutil.WaitFor(t, 10*time.Second, "fx-gen2's first offer missed", func() bool {
				for _, sd := range e.decisions(t) {
					if sd.d.Job.ID == "fx-gen2" && sd.d.Kind == events.KindAckMissed {
						return true
					}
				}
				return false
			})
			return disp.Offer(ctx, "fx-gen2", "w4", 600000, 600000)
		},
		func() (events.Decision, error) {
			return disp.Submit(ctx, "fx-secret", "secrets", ops.WithPayload(secret))
		},
	} {
		if dd, err := step(); err != nil || !dd.Kind.Accepted() {
			t.Fatalf("fixture: %v %s/%s", err, dd.Kind, dd.Reason)
		}
	}

	// The walk: every input kind of a worker, aimed at jobs w2 does not
	// hold, with what it could guess.
	probes := func(job string) []string {
		guess := `"lease_id":"L1-AAAAAAAAAAAAAAAAAAAAAA"`
		return []string{
			job + ".acquire", `{"v":1}`,
			job + ".ack", `{"v":1,` + guess + `,"generation":1}`,
			job + ".renew", `{"v":1,` + guess + `,"generation":1,"renew_seq":1}`,
			job + ".renew", `{"v":1,` + guess + `,"generation":9,"renew_seq":1}`,
			job + ".progress", `{"v":1,` + guess + `,"generation":1,"progress_seq":1,"value":5}`,
			job + ".cancel_ack", `{"v":1,` + guess + `,"generation":1}`,
			job + ".result", `{"v":1,` + guess + `,"generation":1,"outcome":"SUCCESS"}`,
			job + ".release", `{"v":1,` + guess + `,"generation":1}`,
			job + ".result", `{"v":1,` + guess + `,"generation":1,"outcome":"SUCCESS","extra":true}`,
			job + ".renew", `{"v":1,` + guess + `,"generation":0,"renew_seq":1}`,
			"_.renew", `{"v":1,"leases":[{"job":"` + job + `",` + guess + `,"generation":1,"renew_seq":1}]}`,
		}
	}
	aim := func(jobs []string) {
		for _, job := range jobs {
			p := probes(job)
			for i := 0; i < len(p); i += 2 {
				a.publish(t, p[i], p[i+1])
			}
		}
	}
	// The jobs aimed at: those the honest workers hold now. The attacker
	// modelled is the strongest, which knows them (the harness reads them
	// from the decision stream): it must still learn no lease id.
	liveHonest := func() []string {
		live := map[string]bool{}
		for _, sd := range e.decisions(t) {
			if j := sd.d.Job; j.ID != events.NoJob && strings.HasPrefix(j.ID, "h-") {
				live[j.ID] = j.State.Live() && j.Holder != "w2"
			}
		}
		var out []string
		for id, l := range live {
			if l {
				out = append(out, id)
			}
		}
		slices.Sort(out)
		return out
	}
	rounds := 0
	for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); rounds++ {
		aim(append(liveHonest(), "fx-gen2", "fx-secret"))
		time.Sleep(300 * time.Millisecond) // pacing: the honest jobs move on meanwhile
	}

	// What w2 was told: the decisions addressed to it.
	learned := map[string]events.Job{}
	seen := map[string]int{}
	leaks, payloads := 0, 0
	for _, sd := range e.decisions(t) {
		dd := sd.d
		if !strings.HasPrefix(sd.subject, events.DecisionPrefix+".w2.") || dd.Job.ID == events.NoJob || !dd.Job.Exists() || dd.Job.Holder == "w2" {
			continue
		}
		seen[dd.Kind.String()+"/"+string(dd.Reason)]++
		if dd.Job.HasPayload || strings.Contains(dd.Detail, secret) {
			payloads++
		}
		if dd.Job.LeaseID != "" || dd.Job.HasPayload || strings.Contains(dd.Detail, secret) {
			leaks++
			if leaks <= 5 {
				t.Errorf("decision %d (%s/%s of job %s) tells w2 the lease id %q or payload %q of %s's lease",
					sd.seq, dd.Kind, dd.Reason, dd.Job.ID, dd.Job.LeaseID, dd.Job.Payload, dd.Job.Holder)
			}
			if dd.Job.LeaseID != "" && dd.Job.State.Live() {
				learned[dd.Job.ID] = dd.Job
			}
		}
	}
	t.Logf("w2 got, in %d rounds, %d verdicts about jobs it does not hold: %v; %d told it a lease id or payload (%d the secret payload)", rounds, sum(seen), seen, leaks, payloads)
	for _, want := range []string{
		"rejected/lease_held", "rejected/job_queued", "lost_authority/no_such_job", "lost_authority/no_such_lease",
		"lost_authority/future_generation", "lost_authority/stale_generation", "stale/stale_generation",
		"rejected/unknown_field", "rejected/bad_sequence",
	} {
		if seen[want] == 0 {
			t.Errorf("the walk never got %s about another's job", want)
		}
	}

	// The freeze, with whatever w2 learned.
	for _, j := range learned {
		a.publish(t, j.ID+".renew", fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":%d,"renew_seq":1}`, j.LeaseID, j.Generation))
	}
	t.Logf("w2 learned %d live lease ids and claimed them", len(learned))
	e.checkHonest(t, h)
	for _, sd := range e.decisions(t) {
		if dd := sd.d; dd.Kind == events.KindConflict && dd.Job.Holder != "w2" {
			t.Errorf("decision %d: %s/%s on %s's job %s caused by input %d", sd.seq, dd.Kind, dd.Reason, dd.Job.Holder, dd.Job.ID, dd.Cause)
		}
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
