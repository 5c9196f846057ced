package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/streams"
)

// CoordinatorStatus is what a coordinator reports about itself: the
// answer of the "tenure" NATS micro service's status endpoint (`tenure
// status --json`), or the same built in process by `tenure serve`.
type CoordinatorStatus struct {
	coordinator.Stats
	InputStreamSeq uint64 `json:"input_stream_seq"` // last sequence of the input stream
	Lag            uint64 `json:"lag"`              // inputs stored but not folded yet
	Leader         string `json:"leader"`           // the coordinator the leadership entry names
}

// DefaultStandbyMaxBehind is the default of Config.StandbyMaxBehind.
const DefaultStandbyMaxBehind = 1000

// Roles reported by /healthz.
const (
	RoleLive       = "live"        // holds leadership and appends decisions
	RoleStandby    = "standby"     // warm: has verified the decision stream to within StandbyMaxBehind
	RoleCatchingUp = "catching_up" // a standby still far behind the decision stream
)

// CoordinatorHealth is one coordinator in the /healthz answer (in a
// partitioned deployment, one coordinator of one partition).
type CoordinatorHealth struct {
	ID              string `json:"id"`
	Partition       string `json:"partition,omitempty"` // "2" for partition 2; "" when unpartitioned
	Role            string `json:"role"`
	Ready           bool   `json:"ready"`
	DecisionsBehind uint64 `json:"decisions_behind"` // decisions stored but not verified or appended by it
	InputLag        uint64 `json:"input_lag"`        // inputs stored but not folded by it
	Leader          string `json:"leader,omitempty"`
	// Storage is the live coordinator's view of storage and intakes
	// (PROTOCOL.md §4.2): its state "low" or "short" warns before and
	// while workers' inputs are refused for space. Ready does not depend
	// on it: a coordinator short of storage still decides.
	Storage *coordinator.StorageStats `json:"storage,omitempty"`
}

// PartitionHealth is one partition of a partitioned deployment in the
// /healthz answer: ready when one of its coordinators is live or a warm
// standby, saying which.
type PartitionHealth struct {
	Partition   uint32 `json:"partition"`
	Ready       bool   `json:"ready"`
	Role        string `json:"role,omitempty"`
	Coordinator string `json:"coordinator,omitempty"`
	Reason      string `json:"reason,omitempty"`
	DecisionSeq uint64 `json:"decision_stream_seq"` // last sequence of its decision stream
}

// Health is the /healthz answer: ready (HTTP 200) only when a coordinator is
// live or a warm standby, saying which; HTTP 503 otherwise, saying why. In
// a partitioned deployment it is ready only when every partition is
// (Partitions says how each one is); Role is then "live" when every
// partition has a live coordinator, Coordinator the coordinator that makes
// every partition ready if it is the same one, and Reason names the
// partitions that are not ready.
type Health struct {
	Ready        bool                `json:"ready"`
	Role         string              `json:"role,omitempty"`        // of the coordinator that makes it ready
	Coordinator  string              `json:"coordinator,omitempty"` // its id
	Reason       string              `json:"reason,omitempty"`      // why not ready
	Coordinators []CoordinatorHealth `json:"coordinators"`
	DecisionSeq  uint64              `json:"decision_stream_seq"`  // last sequence of the decision stream (partitioned: the sum over partitions)
	Partitions   []PartitionHealth   `json:"partitions,omitempty"` // partitioned: every partition
	ReadModel    summary             `json:"read_model"`           // the UI's own position
}

// health judges the coordinators' status against the decision streams.
func (s *Server) health(ctx context.Context) Health {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	h := Health{Coordinators: []CoordinatorHealth{}, ReadModel: s.model.summary()}
	seqs := make([]uint64, len(s.topos))
	for k, t := range s.topos {
		if st, err := s.js.Stream(ctx, t.DecisionStream()); err == nil {
			if info, err := st.Info(ctx); err == nil {
				seqs[k] = info.State.LastSeq
				h.DecisionSeq += info.State.LastSeq
			}
		}
	}
	sts, err := s.cfg.Status(ctx)
	if err != nil {
		h.Reason = "coordinator status: " + err.Error()
		return h
	}
	if len(sts) == 0 {
		h.Reason = "no coordinator answered"
		return h
	}
	slices.SortFunc(sts, func(a, b CoordinatorStatus) int { return strings.Compare(a.ID, b.ID) })
	if s.cfg.Partitions == 0 {
		p := s.judge(sts, seqs[0], &h.Coordinators)
		h.Ready, h.Role, h.Coordinator, h.Reason = p.Ready, p.Role, p.Coordinator, p.Reason
		return h
	}
	byPart := make([][]CoordinatorStatus, s.cfg.Partitions)
	for _, st := range sts {
		if k, err := strconv.ParseUint(st.Partition, 10, 32); err == nil && k < uint64(s.cfg.Partitions) {
			byPart[k] = append(byPart[k], st)
		}
	}
	h.Ready, h.Role = true, RoleLive
	var notReady []string
	for k := range byPart {
		p := PartitionHealth{Partition: uint32(k), DecisionSeq: seqs[k]}
		if len(byPart[k]) == 0 {
			p.Reason = "no coordinator answered"
		} else {
			p = s.judge(byPart[k], seqs[k], &h.Coordinators)
			p.Partition = uint32(k)
		}
		h.Partitions = append(h.Partitions, p)
		switch {
		case !p.Ready:
			h.Ready = false
			notReady = append(notReady, fmt.Sprintf("partition %d: %s", k, p.Reason))
		case p.Role != RoleLive:
			h.Role = RoleStandby
		}
	}
	if !h.Ready {
		h.Role = ""
		h.Reason = strings.Join(notReady, "; ")
		return h
	}
	h.Coordinator = h.Partitions[0].Coordinator
	for _, p := range h.Partitions {
		if p.Coordinator != h.Coordinator {
			h.Coordinator = ""
		}
	}
	return h
}

// judge judges the coordinators sts of one decision stream whose last
// sequence is seq (sorted by id, at least one), appending them to cs.
func (s *Server) judge(sts []CoordinatorStatus, seq uint64, cs *[]CoordinatorHealth) PartitionHealth {
	p := PartitionHealth{DecisionSeq: seq}
	first := len(*cs)
	for _, st := range sts {
		c := CoordinatorHealth{ID: st.ID, Partition: st.Partition, InputLag: st.Lag, Leader: st.Leader, Storage: st.Storage}
		if seq > st.DecisionsStored {
			c.DecisionsBehind = seq - st.DecisionsStored
		}
		switch {
		case st.Live:
			c.Role, c.Ready = RoleLive, true
		case st.Sessions > 0 && c.DecisionsBehind <= uint64(s.cfg.StandbyMaxBehind):
			c.Role, c.Ready = RoleStandby, true
		default:
			c.Role = RoleCatchingUp
		}
		*cs = append(*cs, c)
	}
	mine := (*cs)[first:]
	var live, standby *CoordinatorHealth
	for i := range mine {
		c := &mine[i]
		if c.Role == RoleLive && live == nil {
			live = c
		}
		if c.Role == RoleStandby && standby == nil {
			standby = c
		}
	}
	switch {
	case live != nil:
		p.Ready, p.Role, p.Coordinator = true, RoleLive, live.ID
	case standby != nil:
		p.Ready, p.Role, p.Coordinator = true, RoleStandby, standby.ID
	default:
		c := mine[0]
		p.Reason = fmt.Sprintf("coordinator %s is catching up: %d decisions behind", c.ID, c.DecisionsBehind)
	}
	return p
}

func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	h := s.health(r.Context())
	code := http.StatusOK
	if !h.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, h)
}

// StatusFromService returns a Config.Status that asks every running
// coordinator for its status through the "tenure" NATS micro service
// (the same request as `tenure status`), collecting answers for wait (after
// the first one, when one came).
func StatusFromService(nc *nats.Conn, wait time.Duration) func(context.Context) ([]CoordinatorStatus, error) {
	return StatusFromServiceFirst(nc, wait, wait)
}

// StatusFromServiceFirst is StatusFromService that, when no coordinator has
// answered within wait, goes on waiting for a first answer until first has
// passed since the request, then collects for wait more: the number of
// processes that will answer is not known, so answers are collected for a
// window, but a process slowed by a loaded machine still gets its say
// before "nobody answered" is concluded.
func StatusFromServiceFirst(nc *nats.Conn, wait, first time.Duration) func(context.Context) ([]CoordinatorStatus, error) {
	return func(ctx context.Context) ([]CoordinatorStatus, error) {
		inbox := nc.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			return nil, streams.Classify(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := nc.PublishRequest("$SRV.STATS.tenure", inbox, nil); err != nil {
			return nil, streams.Classify(err)
		}
		ctxDeadline, bounded := ctx.Deadline()
		capped := func(t time.Time) time.Time {
			if bounded && ctxDeadline.Before(t) {
				return ctxDeadline
			}
			return t
		}
		// Until a first answer: wait, or first when it is longer. After it:
		// wait more.
		deadline := capped(time.Now().Add(max(wait, first)))
		var out []CoordinatorStatus
		for answered := false; ; {
			if len(out) > 0 && !answered {
				answered = true
				deadline = capped(time.Now().Add(wait))
			}
			m, err := sub.NextMsg(time.Until(deadline))
			if err != nil {
				break
			}
			var st struct {
				Endpoints []struct {
					Data json.RawMessage `json:"data"`
				} `json:"endpoints"`
			}
			if json.Unmarshal(m.Data, &st) != nil {
				continue
			}
			for _, e := range st.Endpoints {
				var cs CoordinatorStatus
				if json.Unmarshal(e.Data, &cs) == nil && cs.ID != "" {
					out = append(out, cs)
				}
			}
		}
		return out, nil
	}
}
