package chaos

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
)

// probe is one input of the hostile worker's whose verdict it reads.
type probe struct {
	job, verb, body string
	cas             string // the case, for its expectation
}

// verdicts publishes probes on its own subjects and returns their
// verdicts, in order (a zero Decision where none came within resendFor),
// read through the last of its consumer names, made once from the decision
// stream's end. With withheld, each probe's verdicts are expected to tell
// it nothing of a lease it does not hold (Expect.Withheld).
func (h *hostile) verdicts(ctx context.Context, rec *AttackRecord, probes []probe, withheld bool) []events.Decision {
	ctx, cancel := context.WithTimeout(ctx, resendFor)
	defer cancel()
	res := make([]events.Decision, len(probes))
	cons, err := h.verdictConsumer(ctx)
	if err != nil {
		rec.note("consumer: " + err.Error())
		return res
	}
	fs := make([]jetstream.PubAckFuture, len(probes))
	for i, p := range probes {
		id := h.msgID()
		if withheld {
			rec.Expect = append(rec.Expect, Expect{MsgID: id, Case: AttackLearnedLease + "/" + p.cas, Withheld: true})
		}
		fs[i] = h.publish(rec, h.subject(p.job, p.verb), []byte(p.body), id)
	}
	bySeq := make(map[uint64]int)
	for i, f := range fs {
		if f == nil {
			continue
		}
		if seqs := h.await(ctx, rec, []jetstream.PubAckFuture{f}); len(seqs) == 1 {
			bySeq[seqs[0]] = i
		}
	}
	for left := len(bySeq); left > 0; {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			rec.note("verdicts: " + err.Error())
			break
		}
		rec.Pulled++
		d, err := events.DecodeDecision(m.Data())
		if err != nil || d.Kind.Derived() {
			continue
		}
		if i, ok := bySeq[pubAckSeqOf(m, &d)]; ok && res[i].Kind == events.KindNone {
			res[i] = d
			left--
		}
	}
	return res
}

// learned is a lease id a verdict told the hostile worker.
type learned struct {
	job, leaseID string
	gen          uint64
}

// learnedLease is the freeze by lease ids learned from verdicts. For jobs
// of the honest workers' batch and of the round's queue jobs, it sends
// every input a worker that does not hold a job can send about it whose
// verdict, before rules revision 5, carried the job's projection with the
// holder's lease id (and a queue job's payload): an acquire of the job
// (lease_held, job_queued; lease_ms 1, below the policy's minimum, so that
// a job nobody holds is refused too, duration_out_of_policy, and never
// granted to it), then claims under a wrong, an empty and no lease id, of
// the generation the acquire's verdict named, of an older and of a newer
// one (no_such_lease, bad_token, missing_field, stale_generation,
// future_generation). It reads every verdict, keeps the lease ids of other
// holders and the payloads they carry, and claims every lease whose id it
// learned (a renewal and a SUCCESS result): each such claim would freeze
// the job in an ownership conflict, and its holder would lose the lease
// (conflict_pending). Every probe expects its verdict to withhold them
// (Expect.Withheld), which the checks verify on the decision stream.
func (h *hostile) learnedLease(ctx context.Context, rec *AttackRecord) {
	p := &LearnProbe{}
	rec.Learned = p
	jobs := slices.Clone(h.jobs)
	h.rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	jobs = jobs[:min(len(jobs), 3)]
	qjobs := slices.Clone(h.queueJobs)
	h.rng.Shuffle(len(qjobs), func(i, j int) { qjobs[i], qjobs[j] = qjobs[j], qjobs[i] })
	qjobs = qjobs[:min(len(qjobs), 2)]
	all := slices.Concat(jobs, qjobs)
	rec.Targets = all
	if len(all) == 0 {
		rec.note("no job to probe")
		return
	}
	var got []events.Decision
	// The acquires first: their verdicts name each job's generation.
	var acquires []probe
	for i, job := range all {
		cas := "acquire-held"
		if i >= len(jobs) {
			cas = "acquire-queued"
		}
		acquires = append(acquires, probe{job: job, verb: "acquire", body: `{"v":1,"lease_ms":1}`, cas: cas})
	}
	first := h.verdicts(ctx, rec, acquires, true)
	got = append(got, first...)
	// Then the claims, of the generation each job has.
	var claims []probe
	for i, job := range all {
		gen := max(first[i].Job.Generation, 1)
		claim := func(verb, cas string, leaseID *string, g uint64) {
			field := ""
			if leaseID != nil {
				field = fmt.Sprintf(`"lease_id":%q,`, *leaseID)
			}
			var body string
			switch verb {
			case "renew":
				body = fmt.Sprintf(`{"v":1,%s"generation":%d,"renew_seq":%d}`, field, g, 1+h.rng.IntN(9))
			case "progress":
				body = fmt.Sprintf(`{"v":1,%s"generation":%d,"progress_seq":%d,"value":%d}`, field, g, 1+h.rng.IntN(9), h.rng.IntN(101))
			case "result":
				body = fmt.Sprintf(`{"v":1,%s"generation":%d,"outcome":"SUCCESS"}`, field, g)
			default:
				body = fmt.Sprintf(`{"v":1,%s"generation":%d}`, field, g)
			}
			claims = append(claims, probe{job: job, verb: verb, body: body, cas: cas})
		}
		for _, verb := range []string{"renew", "ack", "progress", "result", "release"} {
			wrong := h.guessLease()
			claim(verb, verb+"-wrong-lease", &wrong, gen)
		}
		empty := ""
		claim("renew", "renew-empty-lease", &empty, gen)
		claim("result", "result-no-lease", nil, gen)
		wrong := h.guessLease()
		claim("cancel_ack", "cancel_ack-future-generation", &wrong, gen+1)
		if gen > 1 {
			claim("progress", "progress-stale-generation", &wrong, gen-1)
		}
	}
	got = append(got, h.verdicts(ctx, rec, claims, true)...)
	var leases []learned
	for _, d := range got {
		if d.Kind == events.KindNone {
			continue
		}
		p.Verdicts++
		rec.note(fmt.Sprintf("%s/%s", d.Kind, d.Reason))
		j := &d.Job
		if j.Holder == h.cfg.ID || !j.Exists() {
			continue
		}
		if j.LeaseID != "" && !slices.ContainsFunc(leases, func(l learned) bool { return l.leaseID == j.LeaseID }) {
			leases = append(leases, learned{j.ID, j.LeaseID, j.Generation})
			p.LeaseIDs = append(p.LeaseIDs, j.LeaseID)
		}
		if j.HasPayload {
			p.Payloads++
		}
	}
	// What it learned, used: the claims of the leases whose ids it was
	// told (none under rules revision 5).
	var fs []jetstream.PubAckFuture
	for _, l := range leases {
		p.Claims += 2
		fs = append(fs,
			h.publish(rec, h.subject(l.job, "renew"), fmt.Appendf(nil, `{"v":1,"lease_id":%q,"generation":%d,"renew_seq":%d}`, l.leaseID, l.gen, 1+h.rng.IntN(9)), h.msgID()),
			h.publish(rec, h.subject(l.job, "result"), fmt.Appendf(nil, `{"v":1,"lease_id":%q,"generation":%d,"outcome":"SUCCESS"}`, l.leaseID, l.gen), h.msgID()))
	}
	h.await(ctx, rec, fs)
}
