package drain

import (
	"fmt"
	"slices"

	"github.com/maknow/tenure/events"
)

// MaxListed bounds the findings listed (all are counted).
const MaxListed = 20

// Findings is what the checks found: how many, and the first MaxListed.
type Findings struct {
	Count int
	Items []string
}

func (f *Findings) add(format string, args ...any) {
	f.Count++
	if len(f.Items) < MaxListed {
		f.Items = append(f.Items, fmt.Sprintf(format, args...))
	}
}

// Result is the outcome of Check: its findings and the counts of the drain.
type Result struct {
	Findings Findings

	Jobs      int            // jobs submitted
	Completed int            // of which ended COMPLETED by exactly one SUCCESS
	Ends      map[string]int // every submitted job's end state, by state
	Offers    int            // offers the queue made: attempts, counted or not
	Failed    int            // FAILED results (the handlers' failures)
	Ended     map[string]int // attempts that did not complete their job, by the kind/reason that followed: requeued/attempt_failed, requeued/lease_expired, requeued/offer_declined, ...
	Writes    int            // effect writes the Store received
	Accepted  int            // of which admitted
	Stale     int            // of which refused: a newer generation had written
	Reruns    int            // admitted writes of attempts that did not complete their job (their result lost: killed, paused)
}

// Check checks the drain of the queue's jobs from the decisions (in
// decision stream order) and the Store's writes (in their order):
//
//   - every job ends COMPLETED, by exactly one completed SUCCESS decision,
//     and no job of the queue was not submitted;
//   - the Store holds each job's effect from the attempt that completed
//     it (its job, lease id and generation): the last write admitted for
//     the job is that attempt's;
//   - the generations of the writes admitted for a job never go down, and
//     every write refused was stale (older than one admitted before it).
func Check(queue string, jobs []string, ds []events.Decision, writes []Write) *Result {
	return check(queue, jobs, ds, writes, true)
}

// CheckEnds is the first of Check's checks alone, for a drain whose
// effects are checked elsewhere (a database's receipts): every job ends
// COMPLETED, by exactly one completed SUCCESS decision, and no job of the
// queue was not submitted.
func CheckEnds(queue string, jobs []string, ds []events.Decision) *Result {
	return check(queue, jobs, ds, nil, false)
}

func check(queue string, jobs []string, ds []events.Decision, writes []Write, withWrites bool) *Result {
	r := &Result{Jobs: len(jobs), Ends: make(map[string]int), Ended: make(map[string]int)}
	submitted := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		submitted[j] = true
	}
	type end struct {
		state     events.State
		successes int
		leaseID   string
		gen       uint64 // of the SUCCESS
	}
	ends := make(map[string]*end, len(jobs))
	for i := range ds {
		d := &ds[i]
		j := &d.Job
		if j.Queue != queue {
			continue
		}
		if !submitted[j.ID] {
			r.Findings.add("job %s of queue %s was not submitted (decision %s/%s)", j.ID, queue, d.Kind, d.Reason)
			continue
		}
		e := ends[j.ID]
		if e == nil {
			e = &end{}
			ends[j.ID] = e
		}
		e.state = j.State
		switch d.Kind {
		case events.KindAssigned:
			r.Offers++
		case events.KindCompleted:
			switch j.Result {
			case events.OutcomeSuccess:
				e.successes++
				e.leaseID, e.gen = j.LeaseID, j.Generation
			case events.OutcomeFailed:
				r.Failed++
			default:
				r.Ended["completed "+j.Result.String()]++
			}
		case events.KindRequeued, events.KindDead, events.KindUnresolved:
			r.Ended[d.Kind.String()+"/"+string(d.Reason)]++
		}
	}
	for _, id := range jobs {
		e := ends[id]
		if e == nil {
			r.Ends["NONE"]++
			r.Findings.add("job %s: no decision", id)
			continue
		}
		r.Ends[e.state.String()]++
		switch {
		case e.state != events.StateCompleted:
			r.Findings.add("job %s ended %s", id, e.state)
		case e.successes != 1:
			r.Findings.add("job %s: %d SUCCESS results", id, e.successes)
		default:
			r.Completed++
		}
	}

	highest := make(map[string]uint64)
	last := make(map[string]Write)
	for _, w := range writes {
		r.Writes++
		t := w.Token
		if !w.Accepted {
			r.Stale++
			if t.Generation >= highest[t.Job] {
				r.Findings.add("write of %s by %s refused, but no newer generation had written (highest %d)", t, w.Worker, highest[t.Job])
			}
			continue
		}
		r.Accepted++
		if t.Generation < highest[t.Job] {
			r.Findings.add("write of %s by %s admitted after generation %d's", t, w.Worker, highest[t.Job])
		}
		highest[t.Job] = max(highest[t.Job], t.Generation)
		last[t.Job] = w
		if e := ends[t.Job]; e == nil || e.gen != t.Generation {
			r.Reruns++
		}
	}
	if !withWrites {
		return r
	}
	ids := make([]string, 0, len(ends))
	for id := range ends {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		e := ends[id]
		if e.successes == 0 {
			continue
		}
		w, ok := last[id]
		switch {
		case !ok:
			r.Findings.add("job %s completed by generation %d, which wrote no effect", id, e.gen)
		case w.Token.Generation != e.gen || w.Token.LeaseID != e.leaseID:
			r.Findings.add("job %s completed by %s/%d, but the effect that stays is %s's (by %s)", id, e.leaseID, e.gen, w.Token, w.Worker)
		}
	}
	return r
}
