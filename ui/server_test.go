package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// The API over a real Tenure: the board, a job's history with its inputs
// and evidence matrix (equal to the audit's), the anomalies feed,
// /healthz, /metrics, the audit endpoint, and read-only by default.
func TestAPI(t *testing.T) {
	e := newEnv(t, false)
	_, v := e.decide("worker.w1.j1.acquire", `{"v":1,"lease_ms":60000}`)
	if v != "granted/ok" {
		t.Fatalf("acquire: %s", v)
	}
	lease1 := e.row("j1").LeaseID

	var page Page
	e.get("/api/jobs", &page)
	if page.Total != 1 || len(page.Rows) != 1 {
		t.Fatalf("board: %+v", page)
	}
	r := page.Rows[0]
	if r.ID != "j1" || r.State != "ACTIVE" || r.Holder != "w1" || r.Generation != 1 || r.ExpiresAt-page.Now < 50_000 {
		t.Fatalf("board row: %+v (now %d)", r, page.Now)
	}

	// A stale renewal: generation 1 renews after generation 2 was granted.
	e.decide("worker.w1.j1.release", `{"v":1,"lease_id":"`+lease1+`","generation":1}`)
	e.decide("worker.w2.j1.acquire", `{"v":1,"lease_ms":60000}`)
	staleSeq, v := e.decide("worker.w1.j1.renew", `{"v":1,"lease_id":"`+lease1+`","generation":1,"renew_seq":1}`)
	if v != "lost_authority/stale_generation" {
		t.Fatalf("stale renew: %s", v)
	}

	var feed AnomalyPage
	e.get("/api/anomalies", &feed)
	if len(feed.Items) != 1 || feed.Items[0].Job != "j1" || feed.Items[0].Reason != "stale_generation" || feed.Items[0].Cause != staleSeq {
		t.Fatalf("anomalies: %+v", feed)
	}

	var hist History
	if code := e.get("/api/jobs/j1", &hist); code != http.StatusOK {
		t.Fatalf("job page: %d", code)
	}
	if hist.Row.Generation != 2 || hist.Row.Holder != "w2" || hist.Row.Stale != 1 || len(hist.Decisions) != 4 || len(hist.Inputs) != 4 {
		t.Fatalf("history: row %+v, %d decisions, %d inputs", hist.Row, len(hist.Decisions), len(hist.Inputs))
	}
	last := hist.Inputs[len(hist.Inputs)-1]
	if last.Seq != staleSeq || last.Generation != 1 || last.LeaseID != lease1 || last.Verb != "renew" || last.Actor != "w1" {
		t.Fatalf("stale input: %+v", last)
	}
	rep, err := audit.Run(context.Background(), audit.Config{JS: e.js, Options: audit.Options{Job: "j1"}})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("audit: %d problems", rep.Problems())
	}
	var want [][]string
	for i := range rep.History {
		r := projector.MatrixRow(&rep.History[i], projector.MatrixOptions{})
		want = append(want, r[:])
	}
	var got [][]string
	for _, d := range hist.Decisions {
		got = append(got, d.Matrix)
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("evidence matrix differs from the audit's:\n got %q\nwant %q", got, want)
	}
	if !slices.Equal(hist.Columns, projector.MatrixColumns) {
		t.Fatalf("columns %q", hist.Columns)
	}
	var newer History
	e.get("/api/jobs/j1?after="+itoa(hist.Decisions[2].Seq), &newer)
	if len(newer.Decisions) != 1 || newer.Decisions[0].Seq != hist.Decisions[3].Seq {
		t.Fatalf("after: %+v", newer.Decisions)
	}
	if code := e.get("/api/jobs/nope", nil); code != http.StatusNotFound {
		t.Fatalf("unknown job: %d", code)
	}
	// A page following a job that left the board: an answer, not a 404.
	var gone struct {
		Gone bool  `json:"gone"`
		Now  int64 `json:"now"`
	}
	if code := e.get("/api/jobs/nope?after=5", &gone); code != http.StatusOK || !gone.Gone || gone.Now == 0 {
		t.Fatalf("a followed job gone: %d %+v", code, gone)
	}
	if code := e.get("/api/jobs/a.b", nil); code != http.StatusBadRequest {
		t.Fatalf("invalid job: %d", code)
	}

	var hz Health
	if code := e.get("/healthz", &hz); code != http.StatusOK || !hz.Ready || hz.Role != RoleLive || hz.Coordinator != "c1" {
		t.Fatalf("healthz %d: %+v", code, hz)
	}

	metrics := e.text("/metrics")
	for _, want := range []string{
		`tenure_decisions_total{kind="granted",reason="ok"} 2`,
		`tenure_decisions_total{kind="lost_authority",reason="stale_generation"} 1`,
		"tenure_active_leases 1",
		`tenure_jobs{state="ACTIVE"} 1`,
		`tenure_jobs{state="QUEUED"} 0`, // queue jobs (rules revision 4) are counted too
		`tenure_jobs{state="DEAD"} 0`,
		"tenure_lease_expiries_total 0",
		"tenure_inputs_folded_total ",
		"tenure_fold_lag_seconds ",
		"tenure_append_latency_seconds_bucket{le=",
		"tenure_decisions_appended_total ",
		`tenure_coordinator_live{coordinator="c1"} 1`,
		`tenure_coordinator_fold_lag_inputs{coordinator="c1"}`,
		`tenure_leader{coordinator="c1"} 1`,
		`tenure_coordinator_dropped_total{coordinator="c1"} 0`,
		`tenure_coordinator_snapshots_refused_total{coordinator="c1"} 0`,
		"go_goroutines ",
		"# TYPE tenure_append_latency_seconds histogram",
		"# TYPE tenure_loop_pause_seconds histogram",
		"tenure_loop_pause_seconds_bucket{le=",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// The live loop took turns to fold and append those inputs: its
	// longest one took some time.
	if v, ok := metricValue(metrics, "tenure_loop_pause_max_seconds"); !ok || v <= 0 {
		t.Errorf("tenure_loop_pause_max_seconds: %v (found %v), want > 0", v, ok)
	}

	// (audit.Hash does not decode from JSON: keep the report raw.)
	var res struct {
		AuditResult
		Report json.RawMessage `json:"report"`
	}
	if code := e.post("/api/audit", AuditRequest{Job: "j1"}, &res); code != http.StatusOK || !res.OK || len(res.Matrix) != 4 || !strings.Contains(res.Summary, "result:      OK") {
		t.Fatalf("audit %d: %+v", code, res)
	}
	var last2 struct {
		AuditResult
		Report json.RawMessage `json:"report"`
	}
	if e.get("/api/audit", &last2); !last2.OK || last2.Job != "j1" {
		t.Fatalf("last audit: %+v", last2)
	}

	// Read-only by default.
	var errBody map[string]string
	if code := e.post("/api/jobs/j1/action", ActionRequest{Action: "revoke"}, &errBody); code != http.StatusForbidden {
		t.Fatalf("action in read-only mode: %d %v", code, errBody)
	}
	var cfg uiConfig
	if e.get("/api/config", &cfg); cfg.Actions {
		t.Fatal("config says actions are on")
	}
	// Pages are served for every route, assets are embedded.
	for _, p := range []string{"/", "/jobs/j1", "/anomalies", "/audit", "/assets/app.js", "/assets/style.css", "/assets/favicon.svg"} {
		if code := e.get(p, nil); code != http.StatusOK {
			t.Errorf("GET %s: %d", p, code)
		}
	}
}

func itoa(n uint64) string {
	return strings.TrimSpace(strings.ReplaceAll(string(must(json.Marshal(n))), `"`, ""))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// text fetches path as text.
func (e *env) text(path string) string {
	e.t.Helper()
	_, b := e.op.raw(path)
	return b
}

// Operator actions, when enabled, are inputs judged by the coordinator;
// requests from another site are refused.
func TestActions(t *testing.T) {
	e := newEnv(t, true)
	e.decide("worker.w1.j1.acquire", `{"v":1,"lease_ms":60000}`)
	row := e.row("j1")

	var res ActionResult
	if code := e.post("/api/jobs/j1/action", ActionRequest{Action: "cancel", LeaseID: row.LeaseID, Generation: 1, Reason: "from the test"}, &res); code != http.StatusOK {
		t.Fatalf("cancel: %d %+v", code, res)
	}
	if !res.Accepted || res.Kind != "cancel_requested" || res.Reason != "ok" {
		t.Fatalf("cancel verdict: %+v", res)
	}
	in, err := e.js.Stream(context.Background(), "TENURE_IN")
	if err != nil {
		t.Fatal(err)
	}
	m, err := in.GetMsg(context.Background(), res.Cause)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "tenure.in.ops.ui.j1.cancel" {
		t.Fatalf("the action's input is on %s", m.Subject)
	}
	// A second cancel is a duplicate: a verdict, not an error.
	res = ActionResult{}
	if code := e.post("/api/jobs/j1/action", ActionRequest{Action: "cancel"}, &res); code != http.StatusOK || res.Accepted || res.Kind != "duplicate" {
		t.Fatalf("second cancel: %d %+v", code, res)
	}
	for _, bad := range []ActionRequest{
		{Action: "explode"},
		{Action: "settle", Outcome: "SUCCESS"},
		{Action: "affirm", Holder: "w1"},
		{Action: "cancel", LeaseID: "L2"},
		{Action: "revoke", Reason: strings.Repeat("x", 300)},
	} {
		if code := e.post("/api/jobs/j1/action", bad, nil); code != http.StatusBadRequest {
			t.Errorf("%+v: %d, want 400", bad, code)
		}
	}
	// A request from another site is refused before it is read.
	req, _ := http.NewRequest(http.MethodPost, e.url+"/api/jobs/j1/action", strings.NewReader(`{"action":"revoke"}`))
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set(CSRFHeader, e.op.csrf)
	if code, _ := e.op.do(req); code != http.StatusForbidden {
		t.Fatalf("cross-site action: %d", code)
	}
	if got := e.row("j1").State; got != "ACTIVE" {
		t.Fatalf("state after the refused revoke: %s", got)
	}
}

// Server-sent events push a watched job's change, then the anomalies.
func TestEvents(t *testing.T) {
	e := newEnv(t, false)
	e.decide("worker.w1.j1.acquire", `{"v":1,"lease_ms":60000}`)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/api/events?watch=j1,j2&feed=0", nil)
	resp, err := e.op.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	type ev struct{ name, data string }
	evs := make(chan ev, 100)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var name string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = line[7:]
			case strings.HasPrefix(line, "data: "):
				evs <- ev{name, line[6:]}
			}
		}
		close(evs)
	}()
	next := func(name string, ok func(string) bool) string {
		t.Helper()
		for {
			select {
			case x, open := <-evs:
				if !open {
					t.Fatalf("stream closed waiting for %s", name)
				}
				if x.name == name && ok(x.data) {
					return x.data
				}
			case <-ctx.Done():
				t.Fatalf("no %s event", name)
			}
		}
	}
	// The current state of the watched jobs comes first.
	next("board", func(d string) bool { return strings.Contains(d, `"id":"j1"`) })
	e.publish("worker.w2.j2.acquire", `{"v":1,"lease_ms":60000}`)
	d := next("board", func(d string) bool { return strings.Contains(d, `"id":"j2"`) })
	var be boardEvent
	if err := json.Unmarshal([]byte(d), &be); err != nil || be.Added < 1 {
		t.Fatalf("board event %s", d)
	}
	for _, r := range be.Rows {
		if r.ID == "j2" && (r.Holder != "w2" || r.State != "ACTIVE") {
			t.Fatalf("board event row %+v", r)
		}
	}
	e.publish("worker.w3.j1.renew", `{"v":1,"lease_id":"L999","generation":7,"renew_seq":1}`)
	d = next("anomalies", func(string) bool { return true })
	var fe feedEvent
	if err := json.Unmarshal([]byte(d), &fe); err != nil || len(fe.Items) != 1 || fe.Items[0].Kind != "lost_authority" || fe.Items[0].Reason != "future_generation" {
		t.Fatalf("anomalies event %s", d)
	}
}

// /healthz is ready only with a live coordinator or a warm standby, and
// says which.
func TestHealth(t *testing.T) {
	srv := testutil.StartServer(t)
	nc, js := testutil.Connect(t, srv.ClientURL())
	ctx := context.Background()
	if _, err := streams.Ensure(ctx, js, streams.Topology{}, time.Minute); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := js.Publish(ctx, "tenure.out.w1.j1.granted", []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	var sts []CoordinatorStatus
	var stErr error
	s, err := New(Config{Conn: nc, StandbyMaxBehind: 2, Tokens: []Token{testTokens(t)[Viewer]}, Status: func(context.Context) ([]CoordinatorStatus, error) { return sts, stErr }})
	if err != nil {
		t.Fatal(err)
	}
	st := func(id string, live bool, stored uint64) CoordinatorStatus {
		return CoordinatorStatus{Stats: coordinator.Stats{ID: id, Live: live, DecisionsStored: stored, Sessions: 1}}
	}
	for i, c := range []struct {
		sts        []CoordinatorStatus
		err        error
		code       int
		role, id   string
		reasonPart string
	}{
		{nil, nil, 503, "", "", "no coordinator"},
		{nil, errors.New("nats: timeout"), 503, "", "", "timeout"},
		{[]CoordinatorStatus{st("c2", false, 1)}, nil, 503, "", "", "catching up: 4 decisions behind"},
		{[]CoordinatorStatus{st("c2", false, 4)}, nil, 200, RoleStandby, "c2", ""},
		{[]CoordinatorStatus{st("c2", false, 5), st("c1", true, 5)}, nil, 200, RoleLive, "c1", ""},
	} {
		sts, stErr = c.sts, c.err
		s.statusAt = time.Time{} // no cached answer
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		var h Health
		if err := json.Unmarshal(rec.Body.Bytes(), &h); err != nil {
			t.Fatal(err)
		}
		if rec.Code != c.code || h.Role != c.role || h.Coordinator != c.id || !strings.Contains(h.Reason, c.reasonPart) || h.DecisionSeq != 5 {
			t.Errorf("case %d: %d %+v", i, rec.Code, h)
		}
	}
}

// metricValue is the value of the series name (without labels) in a
// Prometheus text exposition.
func metricValue(text, name string) (float64, bool) {
	for line := range strings.Lines(text) {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		return f, err == nil
	}
	return 0, false
}
