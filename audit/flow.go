package audit

import (
	"github.com/maknow/tenure/events"
)

// Flow is what the audit found of the flow rules of rules revision 8
// (PROTOCOL.md §26): the evidence that they held, by the log's clock,
// checked from the decisions alone, and every breach as a finding. A
// clean log has no finding: the fold never breaks its own rules; a
// finding means decisions the fold did not make (the audit's other
// findings say where) or a fold that is wrong.
//
// It covers the decisions the audit folded: from its start (Config.From,
// a snapshot) on.
type Flow struct {
	// Scheduled counts the scheduled jobs submitted (a submit's run_at or
	// delay_ms), Offers the offers of scheduled jobs (assigned).
	Scheduled uint64 `json:"scheduled"`
	Offers    uint64 `json:"scheduled_offers"`
	// Findings are the breaches.
	Findings List[FlowFinding] `json:"findings"`
}

// FlowProblem classifies a breach of a flow rule.
type FlowProblem string

// Flow problems.
const (
	// FlowOfferedEarly: a queue job offered before its run_at, or before
	// its submit's time plus its delay_ms.
	FlowOfferedEarly FlowProblem = "offered_early"
)

// FlowFinding is one breach: the decision that breached the rule.
type FlowFinding struct {
	Problem FlowProblem `json:"problem"`
	Cause   uint64      `json:"cause"`
	N       uint32      `json:"n"`
	Job     string      `json:"job,omitempty"`
	Detail  string      `json:"detail"`
}

// FlowTracker checks the flow rules on a stream of decisions given in
// order (Observe), for Result.
type FlowTracker struct {
	max  int
	flow Flow
}

// NewFlowTracker returns a tracker that lists at most maxListed findings
// (all are counted; negative: no bound).
func NewFlowTracker(maxListed int) *FlowTracker { return &FlowTracker{max: maxListed} }

// Observe takes the next decision.
func (t *FlowTracker) Observe(d *events.Decision) {
	j := &d.Job
	if j.Queue == "" {
		return
	}
	scheduled := j.RunAt != 0 || j.Delay != 0
	switch d.Kind {
	case events.KindSubmitted:
		if scheduled {
			t.flow.Scheduled++
		}
	case events.KindAssigned:
		if !scheduled {
			return
		}
		t.flow.Offers++
		switch {
		case j.RunAt > d.At:
			t.find(d, FlowOfferedEarly, "offered at "+events.FormatTime(d.At)+", before its run_at "+events.FormatTime(j.RunAt))
		case j.Delay != 0 && addNs(j.SubmittedAt, j.Delay) > d.At:
			t.find(d, FlowOfferedEarly, "offered at "+events.FormatTime(d.At)+", before its submit's time plus delay_ms "+events.FormatTime(addNs(j.SubmittedAt, j.Delay)))
		}
	}
}

func (t *FlowTracker) find(d *events.Decision, p FlowProblem, detail string) {
	job := d.Job.ID
	if job == events.NoJob {
		job = ""
	}
	t.flow.Findings.add(t.max, FlowFinding{Problem: p, Cause: d.Cause, N: d.N, Job: job, Detail: detail})
}

// Result is what the tracker found in the decisions observed so far.
func (t *FlowTracker) Result() Flow { return t.flow }

// addNs is t + d, saturating (as the fold's times do).
func addNs(t, d int64) int64 {
	const maxTime = int64(1<<63 - 1)
	if t > maxTime-d {
		return maxTime
	}
	return t + d
}

// writeFlow writes the flow section of a summary: nothing for a log that
// used no flow rule and breached none.
func writeFlow(p func(string, ...any), f *Flow, list int) {
	if f.Scheduled == 0 && f.Offers == 0 && f.Findings.Count == 0 {
		return
	}
	p("%-12s %d (scheduled jobs: %d submitted, %d offers", "flow:", f.Findings.Count, f.Scheduled, f.Offers)
	if f.Findings.Count == 0 {
		p(", none before its time")
	}
	p(")\n")
	n := len(f.Findings.Items)
	if list >= 0 {
		n = min(n, list)
	}
	for _, x := range f.Findings.Items[:n] {
		p("  %d.%d %s: %s: %s\n", x.Cause, x.N, x.Job, x.Problem, x.Detail)
	}
	if f.Findings.Count > n {
		p("  ... %d more\n", f.Findings.Count-n)
	}
}
