package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/projector"
)

// ActionRequest is the body of POST /api/jobs/{id}/action. Each action is
// one input published as the ops actor Config.ActorID, judged by the
// coordinator like any other input:
//
//	cancel  request the cancellation of the live lease; with lease_id and
//	        generation, only if that is still the live lease
//	revoke  end the live lease and clear an ownership conflict (resolve revoke)
//	affirm  keep the named holder, lease and generation (resolve affirm)
//	settle  give an UNRESOLVED job its outcome, FAILED or CANCELLED (resolve settle)
//	retry   queue a DEAD queue job again with a fresh attempt budget (resolve retry)
//	discard remove a DEAD queue job: it is retired (resolve discard)
//
// The pages ask for a confirmation (a second click) before they send one.
type ActionRequest struct {
	Action     string `json:"action"`
	Reason     string `json:"reason,omitempty"`
	Outcome    string `json:"outcome,omitempty"`
	Holder     string `json:"holder,omitempty"`
	LeaseID    string `json:"lease_id,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
}

// ActionResult is the coordinator's verdict on an action's input.
type ActionResult struct {
	Accepted bool            `json:"accepted"`
	Kind     string          `json:"kind"`
	Reason   string          `json:"reason"`
	Detail   string          `json:"detail,omitempty"`
	Cause    uint64          `json:"cause"`
	Describe string          `json:"describe"`
	Decision json.RawMessage `json:"decision"`
}

func (s *Server) serveAction(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.Actions || s.ops == nil {
		writeError(w, http.StatusForbidden, "operator actions are disabled: the UI is read-only (start it with --ui-actions)")
		return
	}
	id := r.PathValue("id")
	if !events.ValidToken(id) {
		writeError(w, http.StatusBadRequest, "invalid job id")
		return
	}
	var req ActionRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad request body: "+err.Error())
		return
	}
	if len(req.Reason) > events.MaxTextLen {
		writeError(w, http.StatusBadRequest, "reason: at most 256 bytes")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	var d events.Decision
	var err error
	switch req.Action {
	case "cancel":
		if (req.LeaseID == "") != (req.Generation == 0) || req.LeaseID != "" && !events.ValidToken(req.LeaseID) {
			writeError(w, http.StatusBadRequest, "cancel: lease_id and generation go together")
			return
		}
		d, err = s.ops.Cancel(ctx, id, req.LeaseID, req.Generation, req.Reason)
	case "revoke":
		d, err = s.ops.Revoke(ctx, id, req.Reason)
	case "affirm":
		if !events.ValidToken(req.Holder) || !events.ValidToken(req.LeaseID) || req.Generation == 0 {
			writeError(w, http.StatusBadRequest, "affirm: holder, lease_id and generation are required")
			return
		}
		d, err = s.ops.Affirm(ctx, id, req.Holder, req.LeaseID, req.Generation, req.Reason)
	case "settle":
		out, ok := events.ParseOutcome(req.Outcome)
		if !ok || out == events.OutcomeSuccess {
			writeError(w, http.StatusBadRequest, "settle: outcome must be FAILED or CANCELLED")
			return
		}
		d, err = s.ops.Settle(ctx, id, out, req.Reason)
	case "retry":
		d, err = s.ops.Retry(ctx, id, req.Reason)
	case "discard":
		d, err = s.ops.Discard(ctx, id, req.Reason)
	default:
		writeError(w, http.StatusBadRequest, "action must be cancel, revoke, affirm, settle, retry or discard")
		return
	}
	var rej *ops.RejectedError
	if err != nil && !errors.As(err, &rej) {
		writeError(w, http.StatusBadGateway, err.Error())
		return
	}
	s.log.Info("ui: operator action", "job", id, "action", req.Action, "verdict", d.Kind.String()+"/"+string(d.Reason), "input", d.Cause)
	writeJSON(w, http.StatusOK, ActionResult{
		Accepted: d.Kind.Accepted(), Kind: d.Kind.String(), Reason: string(d.Reason), Detail: d.Detail,
		Cause: d.Cause, Describe: projector.Describe(&d, 0), Decision: events.AppendDecision(nil, &d),
	})
}

// MaxDeadPerAction bounds the DEAD jobs one POST /api/queues/{queue}/dead
// acts on (the first by id; DeadActionResult.More says when more remain).
const MaxDeadPerAction = 10_000

// DeadActionRequest is the body of POST /api/queues/{queue}/dead, the
// board's bulk operation: retry or discard every DEAD job of the queue
// (those whose last attempt ended for LastReason, when given) that the
// read model holds DEAD now, each its own resolve input and verdict
// (ops.Client.ResolveMany), published as the ops actor Config.ActorID.
// The board asks for a confirmation naming how many jobs first, and sends
// that count as Expect: when the queue has another count of them by then
// the request is refused (409 Conflict), so what is acted on is what was
// confirmed.
type DeadActionRequest struct {
	Action     string `json:"action"` // retry or discard
	Reason     string `json:"reason,omitempty"`
	LastReason string `json:"last_reason,omitempty"`
	Expect     int    `json:"expect"`
}

// DeadActionResult is what became of a bulk operation's jobs.
type DeadActionResult struct {
	Jobs     int `json:"jobs"`     // the DEAD jobs acted on
	Resolved int `json:"resolved"` // resolved/retried or resolved/discarded
	// Refused is the jobs not resolved (no longer DEAD when judged, say),
	// at most 100 of them; RefusedCount counts them all.
	Refused      []JobRefusal `json:"refused,omitempty"`
	RefusedCount int          `json:"refused_count"`
	More         bool         `json:"more"` // DEAD jobs past MaxDeadPerAction were left for another request
}

// JobRefusal is one job a bulk operation did not resolve: its verdict, or
// the error that kept it from one.
type JobRefusal struct {
	Job    string `json:"job"`
	Kind   string `json:"kind,omitempty"`
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	Error  string `json:"error,omitempty"`
}

func (s *Server) serveDeadAction(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.Actions || s.ops == nil {
		writeError(w, http.StatusForbidden, "operator actions are disabled: the UI is read-only (start it with --ui-actions)")
		return
	}
	queue := r.PathValue("queue")
	if !events.ValidToken(queue) {
		writeError(w, http.StatusBadRequest, "invalid queue name")
		return
	}
	var req DeadActionRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad request body: "+err.Error())
		return
	}
	var act events.Action
	switch req.Action {
	case "retry":
		act = events.ActionRetry
	case "discard":
		act = events.ActionDiscard
	default:
		writeError(w, http.StatusBadRequest, "action must be retry or discard")
		return
	}
	switch {
	case len(req.Reason) > events.MaxTextLen:
		writeError(w, http.StatusBadRequest, "reason: at most 256 bytes")
		return
	case req.LastReason != "" && !events.Reason(req.LastReason).Known():
		writeError(w, http.StatusBadRequest, "last_reason: no reason of the protocol")
		return
	case req.Expect < 1:
		writeError(w, http.StatusBadRequest, "expect: the count of DEAD jobs the operator confirmed, at least 1")
		return
	}
	jobs, more, caughtUp := s.model.deadJobs(queue, req.LastReason, MaxDeadPerAction, time.Now())
	switch {
	case !caughtUp:
		writeError(w, http.StatusServiceUnavailable, "the read model is still catching up with the decision stream: its list of DEAD jobs would be partial")
		return
	case len(jobs) != min(req.Expect, MaxDeadPerAction) || more != (req.Expect > MaxDeadPerAction):
		writeError(w, http.StatusConflict, fmt.Sprintf("queue %s has %d such DEAD jobs now, not the %d confirmed: look again", queue, len(jobs), req.Expect))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
	defer cancel()
	results, _ := s.ops.ResolveMany(ctx, act, jobs, req.Reason)
	res := DeadActionResult{Jobs: len(jobs), More: more}
	for _, x := range results {
		if x.Err == nil {
			res.Resolved++
			continue
		}
		res.RefusedCount++
		if len(res.Refused) < 100 {
			f := JobRefusal{Job: x.Job}
			if x.Decision.Kind != events.KindNone {
				f.Kind, f.Reason, f.Detail = x.Decision.Kind.String(), string(x.Decision.Reason), x.Decision.Detail
			} else {
				f.Error = x.Err.Error()
			}
			res.Refused = append(res.Refused, f)
		}
	}
	s.log.Info("ui: operator bulk action", "queue", queue, "action", req.Action, "last_reason", req.LastReason,
		"jobs", res.Jobs, "resolved", res.Resolved, "refused", res.RefusedCount)
	writeJSON(w, http.StatusOK, res)
}
