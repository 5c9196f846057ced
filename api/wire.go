package api

import (
	"encoding/json"
	"fmt"

	"github.com/maknow/tenure/events"
)

// Subjects of the API (PROTOCOL.md §23): requests on each, answered by
// every `tenure serve` (one of them: the endpoints share the micro
// service's queue group).
const (
	SubjectPrefix = "tenure.api"
	SubjectJob    = SubjectPrefix + ".job.get"    // JobRequest → JobReply
	SubjectJobs   = SubjectPrefix + ".job.list"   // JobsRequest → JobsReply
	SubjectQueue  = SubjectPrefix + ".queue.get"  // QueueRequest → QueueReply
	SubjectQueues = SubjectPrefix + ".queue.list" // QueuesRequest → QueuesReply
	SubjectResult = SubjectPrefix + ".job.result" // ResultRequest → ResultReply
	// SubjectSchedules lists the schedules (rules revision 10).
	SubjectSchedules = SubjectPrefix + ".schedule.list" // SchedulesRequest → SchedulesReply
	SubjectsFilter   = SubjectPrefix + ".>"             // every subject of the API, for permissions
)

// Bounds of a request and of the work it makes.
const (
	// MaxRequestBytes bounds a request's body; a larger one is refused
	// (code 413) unread.
	MaxRequestBytes = 1024
	// DefaultJobsLimit and MaxJobsLimit bound the jobs of one page of
	// job.list (a larger limit is MaxJobsLimit).
	DefaultJobsLimit = 50
	MaxJobsLimit     = 200
	// DefaultQueuesLimit and MaxQueuesLimit bound the queues of one page
	// of queue.list.
	DefaultQueuesLimit = 50
	MaxQueuesLimit     = 100
	// DefaultSchedulesLimit and MaxSchedulesLimit bound the schedules of
	// one page of schedule.list.
	DefaultSchedulesLimit = 50
	MaxSchedulesLimit     = 200
)

// JobRequest asks for the projection of one job (job.get).
type JobRequest struct {
	Job string `json:"job"` // a job id (token)
}

// ResultRequest asks for the worker's account of a result of a job
// (job.result): the result input at sequence Input of the job's
// partition's input stream, or, without Input, the input of the job's
// latest result as the read model knows it.
type ResultRequest struct {
	Job   string `json:"job"`             // a job id (token)
	Input uint64 `json:"input,omitempty"` // an input stream sequence (0: the job's latest result's)
}

// JobsRequest asks for a page of jobs (job.list), in byte order of their
// ids: those of Queue (every job when empty; a queue name otherwise) in
// State (any when empty; a state name of PROTOCOL.md §13 or §22 otherwise),
// from the first id above After, at most Limit of them (0 is
// DefaultJobsLimit; at most MaxJobsLimit).
type JobsRequest struct {
	Queue string `json:"queue,omitempty"`
	State string `json:"state,omitempty"`
	After string `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// QueueRequest asks for the stats of one queue (queue.get).
type QueueRequest struct {
	Queue string `json:"queue"`
}

// QueuesRequest asks for a page of queues with their stats (queue.list),
// in byte order of their names, from the first above After, at most Limit
// (0 is DefaultQueuesLimit; at most MaxQueuesLimit).
type QueuesRequest struct {
	After string `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// Position is where the read model that answered stands: every answer
// carries it.
type Position struct {
	// Seq is the sequence of the last decision read from the decision
	// stream (partitioned: the sum over the partitions' streams, and Seqs
	// each one's, in partition order).
	Seq  uint64   `json:"seq"`
	Seqs []uint64 `json:"seqs,omitempty"`
	// CaughtUp is true once the read model has read every decision
	// stream to the end it had when the reading began: before, it answers
	// from an older state of the log (and a job it has not read yet is
	// "catching up", code 503, rather than not found).
	CaughtUp bool `json:"caught_up"`
	// Now is the answering server's clock (RFC 3339), by which readiness,
	// standing announcements and rates are judged.
	Now string `json:"now"`
}

// LastDecision is the last decision read about a job.
type LastDecision struct {
	Seq    uint64 `json:"seq"`   // its decision stream sequence (in the job's partition's stream)
	Cause  uint64 `json:"cause"` // the input that caused it
	At     string `json:"at"`    // its authoritative time (RFC 3339)
	Kind   string `json:"kind"`
	Reason string `json:"reason"`
	// Outcome is the result a completed decision recorded (SUCCESS,
	// FAILED or CANCELLED: the kind is completed for all three); absent
	// for other kinds.
	Outcome string `json:"outcome,omitempty"`
	// Snapshot, when set, says that no decision about the job was read:
	// the decision streams' first segments were archived and removed, and
	// the read model started from the stored snapshot, which covers the
	// decisions up to this sequence. Seq, Cause, Kind and Reason are then
	// empty, and At is the snapshot's time.
	Snapshot uint64 `json:"snapshot,omitempty"`
}

// Label is how a listing shows the decision: kind/reason, but for a
// completed decision the outcome it recorded (failed, succeeded,
// cancelled: "completed/ok" reads as a success whatever the outcome), and
// "snapshot" for a job restored from the snapshot.
func (l LastDecision) Label() string {
	switch {
	case l.Snapshot != 0 && l.Kind == "":
		return "snapshot"
	case l.Kind == events.KindCompleted.String() && l.Outcome != "":
		return OutcomeLabel(l.Outcome)
	}
	return l.Kind + "/" + l.Reason
}

// OutcomeLabel is the word for a result's outcome: succeeded, failed or
// cancelled.
func OutcomeLabel(outcome string) string {
	switch outcome {
	case events.OutcomeSuccess.String():
		return "succeeded"
	case events.OutcomeFailed.String():
		return "failed"
	case events.OutcomeCancelled.String():
		return "cancelled"
	}
	return outcome
}

// WorkerResult is a worker's own account of a result (PROTOCOL.md §6.10),
// as the result input that recorded it says: the decisions do not carry
// its detail, so the API reads it from the input stream.
type WorkerResult struct {
	Input     uint64 `json:"input"` // the result input's sequence (in the job's partition's input stream)
	Worker    string `json:"worker,omitempty"`
	Outcome   string `json:"outcome,omitempty"` // SUCCESS, FAILED or CANCELLED
	Permanent bool   `json:"permanent,omitempty"`
	Detail    string `json:"detail,omitempty"` // the worker's free text, at most 256 bytes
	// Removed says that the input is no longer in the input stream (its
	// segment was archived and removed): the archive holds it.
	Removed bool `json:"removed,omitempty"`
}

// JobReply is the answer of job.get.
type JobReply struct {
	// Job is the job's projection after its last decision, exactly as the
	// decisions carry it (PROTOCOL.md §10.2, and §22.6 for a queue job).
	Job       json.RawMessage `json:"job"`
	Partition string          `json:"partition,omitempty"` // partitioned deployments: the job's partition
	Last      LastDecision    `json:"last"`
	// WorkerResult is the worker's account of the job's latest result
	// (its detail: why it failed), absent before any result was read.
	WorkerResult *WorkerResult `json:"worker_result,omitempty"`
	Position
}

// ResultReply is the answer of job.result.
type ResultReply struct {
	Job       string       `json:"job"`
	Partition string       `json:"partition,omitempty"`
	Result    WorkerResult `json:"result"`
}

// Projection decodes Job into an events.Job.
func (r *JobReply) Projection() (events.Job, error) {
	j, err := events.DecodeJob(r.Job)
	if err != nil {
		return events.Job{}, fmt.Errorf("api: the job's projection: %w", err)
	}
	return j, nil
}

// JobSummary is one job of a job.list page: the fields of its projection
// an operator scans for. Fields of value zero are omitted (a job outside
// any queue has no queue fields; attempt and priority 0 are absent).
type JobSummary struct {
	ID         string `json:"id"`
	Partition  string `json:"partition,omitempty"`
	State      string `json:"state"`
	Generation uint64 `json:"generation"`
	Holder     string `json:"holder,omitempty"`
	Result     string `json:"result,omitempty"`
	// Deadline is a live lease's next deadline (RFC 3339): an offer's
	// ack_deadline, an active lease's expires_at.
	Deadline    string `json:"deadline,omitempty"`
	Conflict    bool   `json:"conflict,omitempty"`
	Queue       string `json:"queue,omitempty"`
	Priority    int64  `json:"priority,omitempty"`
	Attempt     uint64 `json:"attempt,omitempty"`
	MaxAttempts uint64 `json:"max_attempts,omitempty"`
	ReadyAt     string `json:"ready_at,omitempty"` // QUEUED: when it may be offered
	// ScheduledFor (rules revision 8) is when the submit asked the job to
	// run from: its run_at, or its time plus delay_ms (PROTOCOL.md §26.1).
	ScheduledFor string `json:"scheduled_for,omitempty"`
	// UniqueKey (rules revision 8) is the submit's unique key
	// (PROTOCOL.md §26.2).
	UniqueKey string `json:"unique_key,omitempty"`
	// ConcurrencyKey (rules revision 9) is the submit's concurrency key
	// (PROTOCOL.md §26.4).
	ConcurrencyKey string       `json:"concurrency_key,omitempty"`
	LastReason     string       `json:"last_reason,omitempty"` // why its last attempt ended
	Last           LastDecision `json:"last"`
	// ResultInput is the input that recorded the job's latest result, and
	// ResultDetail its worker's detail (why it failed, say), when it has
	// one: absent before any result.
	ResultInput  uint64 `json:"result_input,omitempty"`
	ResultDetail string `json:"result_detail,omitempty"`
}

// JobsReply is the answer of job.list.
type JobsReply struct {
	Jobs []JobSummary `json:"jobs"`
	// Next is the id to ask After for the next page; absent on the last.
	Next string `json:"next,omitempty"`
	// Total is how many jobs match the request's queue and state.
	Total int `json:"total"`
	Limit int `json:"limit"` // the limit applied
	Position
}

// QueueReply is the answer of queue.get.
type QueueReply struct {
	Queue QueueStats `json:"queue"`
	Position
}

// QueuesReply is the answer of queue.list: the stats of each queue
// (without WorkerList).
type QueuesReply struct {
	Queues []QueueStats `json:"queues"`
	Next   string       `json:"next,omitempty"` // the name to ask After for the next page; absent on the last
	Total  int          `json:"total"`          // queues known
	Limit  int          `json:"limit"`
	Position
}

// ErrorReply is the body of an error answer; its headers
// Nats-Service-Error-Code and Nats-Service-Error carry the same code and
// description (the NATS micro convention).
type ErrorReply struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is what went wrong: Code is an HTTP-like status (400 a bad
// request, 404 no such job or queue, 413 a request too large, 503 the read
// model is still catching up, 500 an answer over the NATS server's payload
// limit).
type ErrorBody struct {
	Code        int    `json:"code"`
	Description string `json:"description"`
}
