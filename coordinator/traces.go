package coordinator

import (
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/tracing"
)

// Trace context (PROTOCOL.md §27). An input may carry a W3C traceparent
// header; the decisions about the same job carry one on to whoever reads
// them, so that a worker's span of a job's run continues the trace of its
// submit. Which one a decision carries:
//
//   - an input's verdicts carry the input's own (a submit's, an offer's,
//     a worker's result, sent from within its span of the run);
//   - a derived decision about a job (the queue's offer, a requeue, an
//     expiry, DEAD) carries the one of the ops input that last submitted,
//     offered or retried the job, if this coordinator folded it;
//   - other derived decisions carry none.
//
// Only a traceparent tracing.ValidTraceParent accepts is passed on
// (exactly 55 bytes): no publisher can make the coordinator copy other
// bytes into decisions. A trace context is never authority, it is not part
// of the decision's chain value, and a standby does not compare it.
//
// The memory of a job's trace context is this process's: a coordinator
// that starts from a snapshot, or after a failover, knows the trace
// context of the jobs whose submits it folded itself (a warm standby folds
// them too), and the derived decisions about the others carry none. It
// holds at most maxTraces jobs; past that, new jobs are not remembered.
// A job is forgotten when it is retired or ends for good.
type traceMemory struct {
	jobs map[string]string // job id -> traceparent
	max  int               // at most this many jobs (0: maxTraces)
}

// maxTraces bounds the jobs whose trace context the coordinator remembers.
const maxTraces = 1 << 17

func (t *traceMemory) limit() int {
	if t.max > 0 {
		return t.max
	}
	return maxTraces
}

// inputTrace is what fold needs of one input's trace context.
type inputTrace struct {
	tp  string // the input's valid traceparent ("": none)
	any bool   // a decision of the input may carry one
}

// input returns the trace context of input m.
func (t *traceMemory) input(m stored) inputTrace {
	var it inputTrace
	if m.header != nil {
		it.tp = tracing.TraceParent(m.header)
	}
	it.any = it.tp != "" || len(t.jobs) > 0
	return it
}

// decision returns the traceparent decision d carries, d being one of the
// decisions of the input whose trace context is it, and remembers or
// forgets d's job's.
func (t *traceMemory) decision(it *inputTrace, d *events.Decision) string {
	id := d.Job.ID
	if id == events.NoJob || id == "" {
		if d.Kind.Derived() {
			return ""
		}
		return it.tp
	}
	tp := it.tp
	if d.Kind.Derived() {
		tp = t.jobs[id]
	}
	switch {
	case t.ends(d):
		delete(t.jobs, id)
	case !d.Kind.Derived() && d.Kind.Accepted() && d.Role == events.RoleOps && it.tp != "" &&
		(d.Job.State.Live() || d.Job.State == events.StateQueued):
		if _, ok := t.jobs[id]; ok || len(t.jobs) < t.limit() {
			if t.jobs == nil {
				t.jobs = make(map[string]string)
			}
			t.jobs[id] = it.tp
		}
	}
	return tp
}

// ends reports whether d ends its job's need of a trace context: the job
// is retired, or a queue job ended for good (done, cancelled, revoked,
// DEAD: a retry is an ops input, which brings its own), or a job outside
// any queue is no longer live (a dispatcher's next offer brings its own).
func (t *traceMemory) ends(d *events.Decision) bool {
	if len(t.jobs) == 0 {
		return false
	}
	if d.Kind == events.KindRetired {
		return true
	}
	switch s := d.Job.State; {
	case d.Job.Queue == "":
		return !s.Live()
	default:
		return s == events.StateCompleted || s == events.StateCancelled || s == events.StateRevoked || s == events.StateDead
	}
}
