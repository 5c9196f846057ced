package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
)

// AuditRequest is the body of POST /api/audit.
type AuditRequest struct {
	Job    string `json:"job,omitempty"`    // also collect the job's evidence matrix and timeline (tenure audit --job)
	Strict bool   `json:"strict,omitempty"` // count pending inputs as problems (tenure audit --strict)
}

// AuditResult is the outcome of an audit run from the page: what `tenure
// audit` prints, and its report. In a partitioned deployment every
// partition is audited (only the job's with a job, as `tenure audit --job`
// does): Summary holds every partition's summary under its heading and the
// line over all of them, OK and Problems are over all of them, Partitions
// holds each one's report, and Report is not set.
type AuditResult struct {
	Job       string        `json:"job,omitempty"`
	Strict    bool          `json:"strict"`
	StartedAt time.Time     `json:"started_at"`
	ElapsedMS int64         `json:"elapsed_ms"`
	OK        bool          `json:"ok"`
	Problems  int           `json:"problems"`
	Summary   string        `json:"summary"`            // audit.WriteSummary
	Timeline  string        `json:"timeline,omitempty"` // audit.WriteTimeline, with a job
	Columns   []string      `json:"columns,omitempty"`  // projector.MatrixColumns, with a job
	Matrix    [][]string    `json:"matrix,omitempty"`   // the job's evidence matrix (tenure audit --job), with a job
	Report    *audit.Report `json:"report,omitempty"`
	// Partitions is every partition audited, in a partitioned deployment.
	Partitions []AuditPartition `json:"partitions,omitempty"`
	Error      string           `json:"error,omitempty"` // the audit could not be carried out
}

// AuditPartition is the audit of one partition of a partitioned deployment.
type AuditPartition struct {
	Partition uint32        `json:"partition"`
	OK        bool          `json:"ok"`
	Problems  int           `json:"problems"`
	Report    *audit.Report `json:"report,omitempty"`
	Error     string        `json:"error,omitempty"` // the partition could not be audited
}

// auditListed is how many findings per class the page's summary lists.
const auditListed = 20

// runAudit replays the log and verifies every decision, read-only, as
// `tenure audit` does: every partition's, in a partitioned deployment.
func (s *Server) runAudit(ctx context.Context, req AuditRequest) *AuditResult {
	res := &AuditResult{Job: req.Job, Strict: req.Strict, StartedAt: time.Now()}
	topos := s.topos
	if req.Job != "" && s.cfg.Partitions > 0 {
		k := events.PartitionOf(req.Job, s.cfg.Partitions)
		topos = topos[k : k+1]
	}
	var audits []audit.PartitionAudit
	for _, t := range topos {
		log := s.log
		if t.Partition.Partitioned() {
			log = log.With("partition", t.Partition.Index)
		}
		rep, err := audit.Run(ctx, audit.Config{
			JS: s.js, Topology: t, Logger: log,
			Options: audit.Options{Job: req.Job, Strict: req.Strict, MaxListed: auditListed},
		})
		if err != nil && (s.cfg.Partitions == 0 || ctx.Err() != nil) {
			res.ElapsedMS = time.Since(res.StartedAt).Milliseconds()
			res.Error = err.Error()
			return res
		}
		audits = append(audits, audit.PartitionAudit{Partition: t.Partition, Report: rep, Err: err})
	}
	res.ElapsedMS = time.Since(res.StartedAt).Milliseconds()
	var b bytes.Buffer
	var reps []*audit.Report
	if s.cfg.Partitions == 0 {
		rep := audits[0].Report
		reps = append(reps, rep)
		res.Report, res.OK, res.Problems = rep, rep.OK(), rep.Problems()
		_ = audit.WriteSummary(&b, rep, auditListed)
	} else {
		for i, a := range audits {
			if i > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(audit.PartitionHeading(topos[i]) + "\n")
			ap := AuditPartition{Partition: a.Partition.Index, OK: a.OK(), Report: a.Report}
			if a.Err != nil {
				ap.Error = a.Err.Error()
				fmt.Fprintf(&b, "result:      NOT AUDITED: %v\n", a.Err)
			} else {
				reps = append(reps, a.Report)
				ap.Problems = a.Report.Problems()
				_ = audit.WriteSummary(&b, a.Report, auditListed)
			}
			res.Partitions = append(res.Partitions, ap)
		}
		b.WriteByte('\n')
		_ = audit.WriteTotals(&b, audits)
		t := audit.Sum(audits)
		res.OK, res.Problems = t.AllOK(), t.Problems
	}
	res.Summary = b.String()
	if req.Job != "" {
		b.Reset()
		for _, rep := range reps {
			_ = audit.WriteTimeline(&b, rep, 0)
		}
		res.Timeline = b.String()
		res.Columns = projector.MatrixColumns
		res.Matrix = [][]string{}
		for _, rep := range reps {
			for i := range rep.History {
				r := projector.MatrixRow(&rep.History[i], projector.MatrixOptions{})
				res.Matrix = append(res.Matrix, r[:])
			}
		}
	}
	return res
}

// serveAudit is POST /api/audit: run an audit now and answer its result.
// One audit runs at a time (409 while one runs). Audits are read-only, so
// they are allowed without Config.Actions.
func (s *Server) serveAudit(w http.ResponseWriter, r *http.Request) {
	var req AuditRequest
	if r.ContentLength != 0 {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "bad request body: "+err.Error())
			return
		}
	}
	if req.Job != "" && !events.ValidToken(req.Job) {
		writeError(w, http.StatusBadRequest, "invalid job id")
		return
	}
	if !s.auditMu.TryLock() {
		writeError(w, http.StatusConflict, "an audit is already running")
		return
	}
	defer s.auditMu.Unlock()
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Minute)
	defer cancel()
	res := s.runAudit(ctx, req)
	s.lastMu.Lock()
	s.lastAudit = res
	s.lastMu.Unlock()
	code := http.StatusOK
	if res.Error != "" {
		code = http.StatusBadGateway
	}
	s.log.Info("ui: audit", "job", req.Job, "ok", res.OK, "problems", res.Problems, "err", res.Error)
	writeJSON(w, code, res)
}

// serveLastAudit is GET /api/audit: the result of the last audit (204: none yet).
func (s *Server) serveLastAudit(w http.ResponseWriter, _ *http.Request) {
	s.lastMu.Lock()
	res := s.lastAudit
	s.lastMu.Unlock()
	if res == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
