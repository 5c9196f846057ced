package ui

import (
	"github.com/maknow/tenure/events"
)

// Hidden stands, in what a viewer is shown, for a lease id or a payload:
// in a decision's job, its evidence-matrix row and its description.
const Hidden = "(hidden)"

// What a viewer is shown (the package doc, Access): the answers an
// operator gets less every lease id and payload, and a job page's inputs
// less their bodies (history does those).

// redacted is r as a viewer sees it: no lease id, and no detail of a
// result (a worker's free text may be as sensitive as a payload).
func (r Row) redacted() Row {
	r.LeaseID, r.ResultDetail = "", ""
	return r
}

func redactRows(rows []Row) []Row {
	out := make([]Row, len(rows))
	for i, r := range rows {
		out[i] = r.redacted()
	}
	return out
}

// redactedJob is j with its lease id and payload hidden (a projection
// whose decision withheld them, rules revision 5, shows them hidden too).
func redactedJob(j events.Job) events.Job {
	if j.LeaseID != "" || j.Withheld {
		j.LeaseID = Hidden
	}
	if j.HasPayload {
		j.Payload = Hidden
	}
	return j
}

// redacted is p as a viewer sees it.
func (p AnomalyPage) redacted() AnomalyPage {
	p.Blocked = redactRows(p.Blocked)
	return p
}

// redacted is p as a viewer sees it.
func (p Page) redacted() Page {
	p.Rows = redactRows(p.Rows)
	return p
}
