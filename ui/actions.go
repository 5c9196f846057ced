package ui

import (
	"context"
	"encoding/json"
	"errors"
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
