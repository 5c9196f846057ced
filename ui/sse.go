package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/maknow/tenure/events"
)

// Server-sent events. A page opens one EventSource on /api/events with
// what it shows:
//
//	watch=<id>,<id>,...  the jobs of the board page on screen
//	job=<id>             the job of a job page
//	feed=<n>             the anomalies after feed entry n
//
// and receives, at most every FlushInterval:
//
//	event: board      {"seq","jobs","blocked","feed","changed","added","outside","rows":[...]}
//	                  rows: the watched jobs that changed; outside: changed jobs not watched
//	event: job        {"seq","row":{...}} the job of the page changed
//	event: anomalies  {"items":[...],"latest","skipped"} new feed entries, oldest first
//	event: reset      the page fell too far behind: reload what it shows
//
// Right after connecting it gets the current rows of what it watches (so
// nothing is lost between its last fetch and the connection).

// DefaultFlushInterval is how often changes are pushed to pages.
const DefaultFlushInterval = 250 * time.Millisecond

const (
	maxFeedPush = 200 // anomalies pushed at once; more are counted as skipped
	subBuffer   = 64  // frames queued per page before it is reset
	heartbeat   = 15 * time.Second
)

type subscriber struct {
	viewer   bool // its rows are redacted (a viewer's page)
	watch    map[string]struct{}
	job      string
	wantFeed bool
	feed     uint64 // last feed entry sent
	ch       chan []byte
	behind   bool // a frame was dropped: send reset, then nothing until it reconnects
}

type hub struct {
	m        *model
	details  func([]Row) // fills in the workers' details of an operator's rows (nil: none)
	interval time.Duration
	mu       sync.Mutex
	subs     map[*subscriber]struct{}
}

func newHub(m *model, interval time.Duration) *hub {
	if interval <= 0 {
		interval = DefaultFlushInterval
	}
	return &hub{m: m, interval: interval, subs: make(map[*subscriber]struct{})}
}

func (h *hub) add(s *subscriber) {
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
}

func (h *hub) remove(s *subscriber) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
}

func (h *hub) run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.flush()
		}
	}
}

func frame(event string, v any) []byte {
	b, _ := json.Marshal(v)
	out := make([]byte, 0, len(b)+len(event)+16)
	out = append(out, "event: "...)
	out = append(out, event...)
	out = append(out, "\ndata: "...)
	out = append(out, b...)
	return append(out, '\n', '\n')
}

type boardEvent struct {
	Seq     uint64 `json:"seq"`
	Jobs    int    `json:"jobs"`
	Blocked int    `json:"blocked"`
	Feed    uint64 `json:"feed"`
	Changed int    `json:"changed"`
	Added   int    `json:"added"`
	Outside int    `json:"outside"`
	Rows    []Row  `json:"rows"`
	// Removed are the watched jobs that left the board (retired).
	Removed []string `json:"removed,omitempty"`
}

type jobEvent struct {
	Seq uint64 `json:"seq"`
	Row Row    `json:"row"`
}

type feedEvent struct {
	Items   []Anomaly `json:"items"`
	Latest  uint64    `json:"latest"`
	Skipped int       `json:"skipped"`
}

// flush pushes what changed since the last flush to every page.
func (h *hub) flush() {
	changed, added := h.m.takeChanges()
	h.mu.Lock()
	subs := make([]*subscriber, 0, len(h.subs))
	for s := range h.subs {
		subs = append(subs, s)
	}
	h.mu.Unlock()
	if len(subs) == 0 {
		return
	}
	sum := h.m.summary()
	for _, s := range subs {
		if s.behind {
			continue
		}
		var frames [][]byte
		if changed != nil {
			var ids []string
			for id := range changed {
				if _, ok := s.watch[id]; ok {
					ids = append(ids, id)
				}
			}
			rows := h.m.rows(ids)
			if s.viewer {
				rows = redactRows(rows)
			} else if h.details != nil {
				h.details(rows)
			}
			var removed []string
			if len(rows) < len(ids) {
				have := make(map[string]bool, len(rows))
				for _, r := range rows {
					have[r.ID] = true
				}
				for _, id := range ids {
					if !have[id] {
						removed = append(removed, id)
					}
				}
			}
			frames = append(frames, frame("board", boardEvent{
				Seq: sum.Seq, Jobs: sum.Jobs, Blocked: sum.Blocked, Feed: sum.Feed,
				Changed: len(changed), Added: added, Outside: len(changed) - len(ids), Rows: rows, Removed: removed,
			}))
			if _, ok := changed[s.job]; ok && s.job != "" {
				if row, ok := h.m.jobRow(s.job); ok {
					if s.viewer {
						row = row.redacted()
					} else if h.details != nil {
						one := []Row{row}
						h.details(one)
						row = one[0]
					}
					frames = append(frames, frame("job", jobEvent{Seq: sum.Seq, Row: row}))
				}
			}
		}
		if s.wantFeed && sum.Feed > s.feed {
			items, latest, skipped := h.m.feedSince(s.feed, maxFeedPush)
			s.feed = latest
			frames = append(frames, frame("anomalies", feedEvent{Items: items, Latest: latest, Skipped: skipped}))
		}
		for _, f := range frames {
			select {
			case s.ch <- f:
			default:
				s.behind = true
			}
			if s.behind {
				select {
				case s.ch <- frame("reset", struct{}{}):
				default:
				}
				break
			}
		}
	}
}

// parseIDs reads a comma-separated list of job ids (invalid ones are dropped).
func parseIDs(s string, limit int) map[string]struct{} {
	out := make(map[string]struct{})
	for id := range strings.SplitSeq(s, ",") {
		if len(out) >= limit {
			break
		}
		if events.ValidToken(id) {
			out[id] = struct{}{}
		}
	}
	return out
}

// serveEvents is GET /api/events.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sub := &subscriber{
		viewer: viewerOnly(r),
		watch:  parseIDs(q.Get("watch"), MaxPageSize),
		job:    q.Get("job"),
		ch:     make(chan []byte, subBuffer),
	}
	if sub.job != "" && !events.ValidToken(sub.job) {
		http.Error(w, "invalid job id", http.StatusBadRequest)
		return
	}
	if f := q.Get("feed"); f != "" {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			http.Error(w, "invalid feed position", http.StatusBadRequest)
			return
		}
		sub.wantFeed, sub.feed = true, n
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	// Register first, then send the current state: a change in between is
	// sent twice at worst, never lost.
	s.hub.add(sub)
	defer s.hub.remove(sub)
	s.metrics.sseClients.Inc()
	defer s.metrics.sseClients.Dec()
	sum := s.model.summary()
	ids := make([]string, 0, len(sub.watch))
	for id := range sub.watch {
		ids = append(ids, id)
	}
	rows := s.model.rows(ids)
	if sub.viewer {
		rows = redactRows(rows)
	} else {
		s.withDetails(r.Context(), rows)
	}
	initial := [][]byte{frame("board", boardEvent{Seq: sum.Seq, Jobs: sum.Jobs, Blocked: sum.Blocked, Feed: sum.Feed, Rows: rows})}
	if sub.job != "" {
		if row, ok := s.model.jobRow(sub.job); ok {
			if sub.viewer {
				row = row.redacted()
			} else {
				one := []Row{row}
				s.withDetails(r.Context(), one)
				row = one[0]
			}
			initial = append(initial, frame("job", jobEvent{Seq: sum.Seq, Row: row}))
		}
	}
	for _, f := range initial {
		if _, err := w.Write(f); err != nil {
			return
		}
	}
	if err := rc.Flush(); err != nil {
		return
	}
	ping := time.NewTicker(heartbeat)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		case f := <-sub.ch:
			if _, err := w.Write(f); err != nil {
				return
			}
			// Write whatever else is queued before flushing.
			for more := true; more; {
				select {
				case f := <-sub.ch:
					if _, err := w.Write(f); err != nil {
						return
					}
				default:
					more = false
				}
			}
			if err := rc.Flush(); err != nil {
				return
			}
		case <-ping.C:
			if _, err := w.Write([]byte(": ping\n\n")); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}
