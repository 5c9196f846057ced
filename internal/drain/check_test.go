package drain

import (
	"strings"
	"testing"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/worker"
)

// synthetic decisions of a queue job's attempts.
func offered(job string, gen uint64) events.Decision {
	return events.Decision{Kind: events.KindAssigned, Reason: events.ReasonOk,
		Job: events.Job{ID: job, Queue: "q", Generation: gen, LeaseID: lid(gen), State: events.StateOffered}}
}

func completed(job string, gen uint64, o events.Outcome) events.Decision {
	st := events.StateCompleted
	if o == events.OutcomeFailed {
		st = events.StateFailed
	}
	return events.Decision{Kind: events.KindCompleted, Reason: events.ReasonOk,
		Job: events.Job{ID: job, Queue: "q", Generation: gen, LeaseID: lid(gen), State: st, Result: o}}
}

func requeued(job string, gen uint64, why events.Reason) events.Decision {
	return events.Decision{Kind: events.KindRequeued, Reason: why,
		Job: events.Job{ID: job, Queue: "q", Generation: gen, LeaseID: lid(gen), State: events.StateQueued}}
}

func lid(gen uint64) string { return "L" + string(rune('0'+gen)) }

func write(job string, gen uint64, ok bool) Write {
	return Write{Worker: "w1", Token: worker.FencingToken{Job: job, LeaseID: lid(gen), Generation: gen}, Accepted: ok}
}

// A clean drain: a failure retried, a rerun after a lost result, a stale
// write refused. Check finds nothing and counts it all.
func TestCheckClean(t *testing.T) {
	ds := []events.Decision{
		offered("a", 1), completed("a", 1, events.OutcomeFailed), requeued("a", 1, events.ReasonAttemptFailed),
		offered("a", 2), completed("a", 2, events.OutcomeSuccess),
		offered("b", 1), requeued("b", 1, events.ReasonLeaseExpired), offered("b", 2), completed("b", 2, events.OutcomeSuccess),
	}
	ws := []Write{write("a", 2, true), write("b", 1, true), write("b", 2, true), write("b", 1, false)}
	r := Check("q", []string{"a", "b"}, ds, ws)
	if r.Findings.Count != 0 {
		t.Fatalf("findings: %v", r.Findings.Items)
	}
	if r.Completed != 2 || r.Offers != 4 || r.Failed != 1 || r.Stale != 1 || r.Reruns != 1 || r.Accepted != 3 ||
		r.Ended["requeued/lease_expired"] != 1 || r.Ended["requeued/attempt_failed"] != 1 {
		t.Fatalf("counts %+v", r)
	}
}

// Each way a drain can go wrong is a finding.
func TestCheckFindings(t *testing.T) {
	ok := func(job string) []events.Decision {
		return []events.Decision{offered(job, 1), completed(job, 1, events.OutcomeSuccess)}
	}
	for _, c := range []struct {
		name string
		ds   []events.Decision
		ws   []Write
		want string
	}{
		{"not ended", []events.Decision{offered("a", 1)}, nil, "job a ended OFFERED"},
		{"never offered", nil, nil, "job a: no decision"},
		{"completed twice", append(ok("a"), completed("a", 1, events.OutcomeSuccess)), []Write{write("a", 1, true)}, "job a: 2 SUCCESS results"},
		{"dead", []events.Decision{offered("a", 1), {Kind: events.KindDead, Job: events.Job{ID: "a", Queue: "q", Generation: 1, State: events.StateDead}}}, nil, "job a ended DEAD"},
		{"no effect", ok("a"), nil, "job a completed by generation 1, which wrote no effect"},
		{"a stale effect stays", []events.Decision{offered("a", 1), requeued("a", 1, events.ReasonLeaseExpired), offered("a", 2), completed("a", 2, events.OutcomeSuccess)},
			[]Write{write("a", 2, true), write("a", 1, true)}, "write of a/L1/1 by w1 admitted after generation 2's"},
		{"a refusal not stale", ok("a"), []Write{write("a", 1, false), write("a", 1, true)}, "write of a/L1/1 by w1 refused, but no newer generation had written"},
		{"not submitted", append(ok("a"), ok("x")...), []Write{write("a", 1, true), write("x", 1, true)}, "job x of queue q was not submitted"},
	} {
		r := Check("q", []string{"a"}, c.ds, c.ws)
		found := false
		for _, f := range r.Findings.Items {
			found = found || strings.Contains(f, c.want)
		}
		if !found {
			t.Errorf("%s: findings %q, want %q", c.name, r.Findings.Items, c.want)
		}
	}
	// Another queue's jobs are none of the drain's business.
	other := events.Decision{Kind: events.KindAssigned, Job: events.Job{ID: "z", Queue: "other", Generation: 1}}
	if r := Check("q", []string{"a"}, append(ok("a"), other), []Write{write("a", 1, true)}); r.Findings.Count != 0 {
		t.Errorf("another queue's job: %v", r.Findings.Items)
	}
}
