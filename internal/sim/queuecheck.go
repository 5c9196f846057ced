package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/chaos"
	"github.com/maknow/tenure/internal/jsmodel"
)

// checkQueues checks the queue rules on the final logs, independent of
// the fold that made them: what each job may do is read from its submit
// input as stored (its queue, run_at or delay_ms, unique key, attempt
// budget and backoff), and each decision about it is judged against that:
//
//   - no job is offered (assigned) before its run_at, or its submit's
//     stored time plus delay_ms, by the stored clock (PROTOCOL.md §26.1);
//   - nor, after an attempt that counted, before the end of that attempt
//     plus the least backoff the rules allow (the backoff of attempt k
//     less its largest jitter, §22.4);
//   - no attempt counts past the submit's max_attempts: no job is offered
//     or requeued once its budget is spent, none ends DEAD before (a
//     retry by an operator starts a new budget), and the projection's
//     attempt count never exceeds it;
//   - a unique key is never held by two jobs of a queue: a job submitted
//     (or retried) while another job of its queue holds its key (live,
//     UNRESOLVED, or ended less than unique_for_ms before) is a finding
//     (§26.2);
//   - liveness: every job submitted has ended (COMPLETED, FAILED,
//     CANCELLED, DEAD, REVOKED, or discarded) once the faults stopped
//     and the run drained; but for a job held for an operator by an
//     ownership conflict whose claimant holds a grant a crash lost
//     (counted, not a finding: the seed 5418 of the first long run).
//
// That no job is held by two holders at once is chaos.Check's
// (DoubleHolders), queue jobs included. It counts (net.Touch) the queue
// paths the run reached.
func checkQueues(rep *Report, net *jsmodel.Net, l *chaos.Log) {
	inputs := map[uint64]*chaos.Message{}
	for i := range l.Inputs {
		inputs[l.Inputs[i].Seq] = &l.Inputs[i]
	}
	type qjob struct {
		queue, key  string
		uniqueFor   int64 // ns
		submitAt    int64
		ready       int64 // not offered before (run_at, delay_ms)
		readyAfter  int64 // nor before a counted attempt's least backoff
		maxAttempts uint64
		backoff     int64 // ms
		backoffMax  int64 // ms
		counted     uint64
		state       events.State
		endedAt     int64
		gen         uint64
		expires     int64    // the last accepted expires_at of generation gen
		gone        bool     // retired or discarded
		granted     []string // holder/generation of each offer in the log
		conflict    string   // holder/generation of a pending ownership conflict's claim
		history     []string // its last decisions, for a liveness finding
	}
	// standing is each worker's last three announcements and standings on
	// each queue, for a liveness finding.
	standing := map[string][]string{}
	jobs := map[string]*qjob{}
	var order []string
	submitOf := func(seq uint64, job string) (events.Input, int64, bool) {
		m := inputs[seq]
		if m == nil {
			return events.Input{}, 0, false
		}
		var in events.Input
		if events.DecodeInput(m.Subject, m.Data, &in) != nil || in.Verb != events.VerbSubmit {
			return events.Input{}, 0, false
		}
		if in.Job == events.NoJob {
			for _, e := range in.Batch {
				if e.Job == job {
					net.Touch("queue: submitted by a batch")
					return e, m.Time, true
				}
			}
			return events.Input{}, 0, false
		}
		return in, m.Time, true
	}
	// holds reports whether o holds its key at stored time t.
	holds := func(o *qjob, t int64) bool {
		if o.gone || o.key == "" {
			return false
		}
		switch o.state {
		case events.StateQueued, events.StateOffered, events.StateActive, events.StateUnresolved:
			return true
		}
		return o.uniqueFor > 0 && t < o.endedAt+o.uniqueFor
	}
	keyHeld := func(seq uint64, id string, q *qjob, t int64, what string) {
		if q.key == "" {
			return
		}
		for _, oid := range order {
			if o := jobs[oid]; oid != id && o.queue == q.queue && o.key == q.key && holds(o, t) {
				rep.finding("decision %d: job %s %s with unique key %s of queue %s, which job %s held (%s)", seq, id, what, q.key, q.queue, oid, o.state)
			}
		}
	}
	for _, m := range l.Decisions {
		d, err := events.DecodeDecision(m.Data)
		if err != nil {
			continue
		}
		j := &d.Job
		if c := d.Capacity; c != nil && d.Addressee != "" {
			st := ""
			if d.Standing != nil {
				st = fmt.Sprintf(", window %d, strikes %d, held until %s", d.Standing.Window, d.Standing.Strikes, events.FormatTime(d.Standing.HeldUntil))
			}
			k := c.Queue + " " + d.Addressee
			if standing[k] = append(standing[k], fmt.Sprintf("%s on %s: %s/%s at %s: slots %d until %s%s", d.Addressee, c.Queue, d.Kind, d.Reason, events.FormatTime(d.At), c.Slots, events.FormatTime(c.Until), st)); len(standing[k]) > 3 {
				standing[k] = standing[k][1:]
			}
		}
		switch {
		case d.Kind == events.KindWithdrawn:
			net.Touch("queue: withdrawn " + string(d.Reason))
		case d.Kind == events.KindDuplicate && (d.Reason == events.ReasonDuplicateUniqueKey || d.Reason == events.ReasonDuplicateSubmit):
			net.Touch("queue: " + string(d.Reason))
		case d.Kind == events.KindRejected && d.Verb == events.VerbSubmit:
			net.Touch("queue: submit rejected/" + string(d.Reason))
		case d.Kind == events.KindPolicySet && d.Role == events.RoleOps:
			net.Touch("queue: policy changed")
		}
		if j.ID == "" || j.ID == events.NoJob {
			continue
		}
		if d.Kind == events.KindSubmitted {
			in, at, ok := submitOf(d.Cause, j.ID)
			if !ok {
				rep.finding("decision %d: job %s submitted by input %d, which is no submit of it", m.Seq, j.ID, d.Cause)
				continue
			}
			q := &qjob{queue: in.Queue, key: in.UniqueKey, uniqueFor: in.UniqueForMS * 1e6, submitAt: at, ready: at,
				maxAttempts: in.MaxAttempts, backoff: in.BackoffMS, backoffMax: in.BackoffMax, state: events.StateQueued}
			if q.maxAttempts == 0 {
				q.maxAttempts = events.DefaultMaxAttempts
			}
			if q.backoff == 0 {
				q.backoff = events.DefaultBackoffMS
			}
			if q.backoffMax == 0 {
				q.backoffMax = max(events.DefaultBackoffMax, q.backoff)
			}
			if in.RunAt > at {
				q.ready = in.RunAt
			}
			if in.DelayMS > 0 {
				q.ready = at + in.DelayMS*1e6
			}
			keyHeld(m.Seq, j.ID, q, d.At, "submitted")
			if _, seen := jobs[j.ID]; !seen {
				order = append(order, j.ID)
			}
			jobs[j.ID] = q
			net.Touch("queue: job submitted")
			if q.key != "" {
				net.Touch("queue: job with a unique key")
			}
			continue
		}
		q := jobs[j.ID]
		if q == nil || q.gone {
			continue // not a queue job
		}
		if q.history = append(q.history, fmt.Sprintf("%d %s/%s %s at %s", m.Seq, d.Kind, d.Reason, d.Actor, events.FormatTime(d.At))); len(q.history) > 8 {
			q.history = q.history[1:]
		}
		switch d.Kind {
		case events.KindAssigned:
			if d.At < q.ready {
				rep.finding("decision %d: job %s offered at %s, before its run_at %s", m.Seq, j.ID, events.FormatTime(d.At), events.FormatTime(q.ready))
			}
			if d.At < q.readyAfter {
				rep.finding("decision %d: job %s offered at %s, before the end of its backoff after attempt %d (%s at the least)", m.Seq, j.ID, events.FormatTime(d.At), q.counted, events.FormatTime(q.readyAfter))
			}
			if q.counted >= q.maxAttempts {
				rep.finding("decision %d: job %s offered after %d attempts of %d", m.Seq, j.ID, q.counted, q.maxAttempts)
			}
			if q.ready > q.submitAt {
				net.Touch("queue: scheduled job offered")
			}
			q.gen, q.expires = j.Generation, 0
			q.granted = append(q.granted, j.Holder+"/"+strconv.FormatUint(j.Generation, 10))
		case events.KindAcked, events.KindRenewed:
			if j.Generation == q.gen {
				q.expires = j.ExpiresAt
			}
		case events.KindRequeued, events.KindDead:
			net.Touch("queue: " + d.Kind.String() + " " + string(d.Reason))
			switch d.Reason {
			case events.ReasonAttemptFailed, events.ReasonLeaseExpired, events.ReasonLeaseRevoked:
				q.counted++
				if d.Kind == events.KindDead {
					if q.counted != q.maxAttempts {
						rep.finding("decision %d: job %s DEAD after %d attempts of %d", m.Seq, j.ID, q.counted, q.maxAttempts)
					}
					break
				}
				if q.counted >= q.maxAttempts {
					rep.finding("decision %d: job %s requeued after %d attempts of %d", m.Seq, j.ID, q.counted, q.maxAttempts)
				}
				end := d.At // a result's or a revocation's time
				if d.Reason == events.ReasonLeaseExpired && q.expires != 0 {
					end = q.expires
				}
				b := min(q.backoffMax, q.backoff<<min(q.counted-1, 40))
				q.readyAfter = end + (b-b/4)*1e6
			}
		case events.KindResolved:
			net.Touch("queue: resolved " + string(d.Reason))
			if d.Reason == events.ReasonRetried {
				q.counted, q.readyAfter = 0, 0
				q.state = events.StateQueued
				keyHeld(m.Seq, j.ID, q, d.At, "retried")
			}
		case events.KindCancelRequested:
			net.Touch("queue: cancel_requested " + string(d.Reason))
		case events.KindRetired:
			q.gone = true
			continue
		}
		if j.Attempt > q.maxAttempts {
			rep.finding("decision %d: job %s at attempt %d of %d", m.Seq, j.ID, j.Attempt, q.maxAttempts)
		}
		q.state = j.State
		q.conflict = ""
		if j.Conflict {
			q.conflict = j.ConflictWith + "/" + strconv.FormatUint(j.Generation, 10)
		}
		if j.EndedAt != 0 {
			q.endedAt = j.EndedAt
		}
	}
	ids := slices.Clone(order)
	slices.Sort(ids)
	for _, id := range ids {
		q := jobs[id]
		switch {
		case q.gone:
			net.Touch("queue: job discarded")
		case !queueEnded(q.state) && q.conflict != "" && rep.Plan.Lost.Rate > 0 && !slices.Contains(q.granted, q.conflict):
			// Held for an operator by an ownership conflict whose claimant
			// holds a grant the log does not: a grant a crash lost, given
			// again with the same lease (the id derives from the input's
			// sequence) to another worker (PROTOCOL.md §2, "A server
			// that loses its tail"). The job may have run twice: the
			// fold holds it until an operator resolves the conflict, as
			// it should.
			net.Touch("queue: job held by a conflict over a grant a crash lost")
		case !queueEnded(q.state):
			var who []string
			for k, v := range standing {
				if strings.HasPrefix(k, q.queue+" ") {
					who = append(who, strings.Join(v, " | "))
				}
			}
			slices.Sort(who)
			rep.finding("liveness: queue job %s is still %s\n      its last decisions: %s\n      its queue's workers: %s", id, q.state, strings.Join(q.history, "; "), strings.Join(who, "; "))
		default:
			net.Touch("queue: job ended " + q.state.String())
		}
	}
}
