package ui

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// newPartitionedEnv is newEnv for a deployment of count partitions: the
// embedded server routes six-token inputs to their job's partition, a
// coordinator.Group runs one live coordinator per partition, and the UI
// follows every partition. Status reports one coordinator per partition
// (as `tenure serve --partitions` does) except those of the partitions in
// silent.
func newPartitionedEnv(t *testing.T, count uint32, silent ...uint32) *env {
	t.Helper()
	srv := testutil.StartServer(t, testutil.Partitions(count))
	nc, js := testutil.Connect(t, srv.ClientURL())
	e := &env{t: t, srv: srv, nc: nc, js: js, metrics: NewMetrics()}
	g, err := coordinator.NewGroup(coordinator.Config{ID: "c1", Conn: nc, Metrics: e.metrics, LeaderTTL: 2 * time.Second}, count)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Run(ctx) })
	status := func(ctx context.Context) ([]CoordinatorStatus, error) {
		var out []CoordinatorStatus
		for k, c := range g.Coordinators() {
			if slices.Contains(silent, uint32(k)) {
				continue
			}
			st := CoordinatorStatus{Stats: c.Stats(), Leader: "c1"}
			if s, err := js.Stream(ctx, c.Topology().InputStream()); err == nil {
				if info, err := s.Info(ctx); err == nil {
					st.InputStreamSeq = info.State.LastSeq
					st.Lag = st.InputStreamSeq - min(st.InputStreamSeq, st.InputsFolded)
				}
			}
			out = append(out, st)
		}
		return out, nil
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	e.serve(ctx, &wg, Config{Conn: nc, Partitions: count, Status: status, Metrics: e.metrics, FlushInterval: 50 * time.Millisecond})
	testutil.WaitFor(e.t, 30*time.Second, "every partition's coordinator to go live", func() bool {
		for _, st := range g.Stats() {
			if !st.Live {
				return false
			}
		}
		return true
	})
	return e
}

// partitionJobs returns job ids that cover every partition of count, at
// least two each.
func partitionJobs(t *testing.T, count uint32) []string {
	t.Helper()
	per := make([]int, count)
	var jobs []string
	for i := 0; len(jobs) < 64; i++ {
		id := fmt.Sprintf("pj-%d", i)
		k := events.PartitionOf(id, count)
		if per[k] < 2 {
			per[k]++
			jobs = append(jobs, id)
		}
		if !slices.ContainsFunc(per, func(n int) bool { return n < 2 }) {
			return jobs
		}
	}
	t.Fatalf("no jobs cover every partition: %v", per)
	return nil
}

// The UI over a partitioned deployment of three partitions, with jobs in
// every one: the board lists every job with its partition; a job page reads
// the job's decisions and inputs from its own partition's streams (the
// sequences and causes stored there, ?after within them); a rejection
// stored in another partition (wrong_partition) goes to the anomalies feed
// with that partition and leaves the job's row alone; the feed, /healthz,
// /metrics, /api/config and the audit cover every partition.
func TestPartitioned(t *testing.T) {
	const count = 3
	e := newPartitionedEnv(t, count)
	ctx := context.Background()
	topos := streams.Topology{}.Partitions(count)
	jobs := partitionJobs(t, count)
	for i, job := range jobs {
		if _, v := e.decide(fmt.Sprintf("worker.w%d.%s.acquire", i%2, job), `{"v":1,"lease_ms":60000}`); v != "granted/ok" {
			t.Fatalf("acquire %s: %s", job, v)
		}
	}

	// A stale renewal on one job: generation 1 renews after generation 2.
	job := jobs[len(jobs)-1]
	part := events.PartitionOf(job, count)
	lease1 := e.row(job).LeaseID
	e.decide("worker.w1."+job+".release", `{"v":1,"lease_id":"`+lease1+`","generation":1}`)
	e.decide("worker.w2."+job+".acquire", `{"v":1,"lease_ms":60000}`)
	staleSeq, v := e.decide("worker.w1."+job+".renew", `{"v":1,"lease_id":"`+lease1+`","generation":1,"renew_seq":1}`)
	if v != "lost_authority/stale_generation" {
		t.Fatalf("stale renew: %s", v)
	}
	// An input about job stored in another partition's input stream (its
	// subject names that partition): rejected there, wrong_partition.
	wrong := (part + 1) % count
	ack, err := e.js.Publish(ctx, events.InputPrefix+".worker.w3."+job+".acquire."+strconv.Itoa(int(wrong)), []byte(`{"v":1,"lease_ms":60000}`))
	if err != nil {
		t.Fatal(err)
	}
	var feed AnomalyPage
	testutil.WaitFor(e.t, 15*time.Second, "the wrong_partition rejection in the feed", func() bool {
		e.get("/api/anomalies", &feed)
		return len(feed.Items) == 2
	})
	byReason := map[string]Anomaly{}
	for _, a := range feed.Items {
		byReason[a.Reason] = a
	}
	if a := byReason["stale_generation"]; a.Job != job || a.Partition != strconv.Itoa(int(part)) || a.Cause != staleSeq {
		t.Fatalf("stale anomaly: %+v (job %s in partition %d, cause %d)", a, job, part, staleSeq)
	}
	if a := byReason["wrong_partition"]; a.Job != job || a.Partition != strconv.Itoa(int(wrong)) || a.Cause != ack.Sequence {
		t.Fatalf("wrong_partition anomaly: %+v (stored in partition %d at %d)", a, wrong, ack.Sequence)
	}

	// The board: every job, with its partition; the rejection stored in
	// another partition did not touch the job's row.
	var page Page
	testutil.WaitFor(e.t, 10*time.Second, "the board to be caught up", func() bool {
		e.get("/api/jobs?limit=500", &page)
		return page.CaughtUp
	})
	if page.Total != len(jobs) || len(page.Rows) != len(jobs) {
		t.Fatalf("board: %d rows of %d, want %d", len(page.Rows), page.Total, len(jobs))
	}
	for _, r := range page.Rows {
		if want := strconv.Itoa(int(events.PartitionOf(r.ID, count))); r.Partition != want || r.State != "ACTIVE" {
			t.Errorf("row %s: partition %q state %s, want partition %s ACTIVE", r.ID, r.Partition, r.State, want)
		}
	}
	if r := e.row(job); r.Generation != 2 || r.Holder != "w2" || r.Stale != 1 {
		t.Fatalf("row of %s: %+v", job, r)
	}
	if len(page.Seqs) != count {
		t.Fatalf("page positions %v", page.Seqs)
	}
	var sum uint64
	for k, topo := range topos {
		info := streamInfo(t, e, topo.DecisionStream())
		if page.Seqs[k] != info {
			t.Errorf("partition %d: position %d, stream at %d", k, page.Seqs[k], info)
		}
		sum += info
	}
	if page.Seq != sum {
		t.Errorf("page seq %d, want the sum %d", page.Seq, sum)
	}

	// The job page: its decisions and inputs, from its own partition.
	var hist History
	if code := e.get("/api/jobs/"+job, &hist); code != http.StatusOK {
		t.Fatalf("job page: %d", code)
	}
	if hist.Row.Partition != strconv.Itoa(int(part)) || len(hist.Decisions) != 4 || len(hist.Inputs) != 4 {
		t.Fatalf("history: row %+v, %d decisions, %d inputs", hist.Row, len(hist.Decisions), len(hist.Inputs))
	}
	out, err := e.js.Stream(ctx, topos[part].DecisionStream())
	if err != nil {
		t.Fatal(err)
	}
	in, err := e.js.Stream(ctx, topos[part].InputStream())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range hist.Decisions {
		m, err := out.GetMsg(ctx, d.Seq)
		if err != nil {
			t.Fatalf("decision %d of partition %d: %v", d.Seq, part, err)
		}
		sd, err := events.DecodeDecision(m.Data)
		if err != nil || sd.Job.ID != job || sd.Cause != d.Cause || sd.N != d.N || sd.Kind.String() != d.Kind || string(sd.Reason) != d.Reason {
			t.Fatalf("decision %d: page %+v, stored %s (%v)", d.Seq, d, m.Data, err)
		}
		if want := (events.Partition{Index: part, Count: count}).DecisionSubject(&sd); m.Subject != want {
			t.Fatalf("decision %d: subject %s, want %s", d.Seq, m.Subject, want)
		}
	}
	for _, hi := range hist.Inputs {
		m, err := in.GetMsg(ctx, hi.Seq)
		if err != nil || hi.Missing || m.Subject != hi.Subject || string(m.Data) != hi.Body {
			t.Fatalf("input %d: page %+v, stored %v (%v)", hi.Seq, hi, m, err)
		}
		if !strings.HasSuffix(hi.Subject, "."+strconv.Itoa(int(part))) || hi.Verb == "" || hi.Actor == "" {
			t.Fatalf("input %d: %+v", hi.Seq, hi)
		}
	}
	if last := hist.Inputs[len(hist.Inputs)-1]; last.Seq != staleSeq || last.Generation != 1 || last.LeaseID != lease1 || last.Verb != "renew" {
		t.Fatalf("stale input: %+v", last)
	}
	var newer History
	e.get("/api/jobs/"+job+"?after="+itoa(hist.Decisions[2].Seq), &newer)
	if len(newer.Decisions) != 1 || newer.Decisions[0].Seq != hist.Decisions[3].Seq {
		t.Fatalf("after: %+v", newer.Decisions)
	}
	// Another partition's job: its own streams.
	other := jobs[0]
	if events.PartitionOf(other, count) == part {
		other = jobs[2]
	}
	var oh History
	e.get("/api/jobs/"+other, &oh)
	if oh.Row.Partition != strconv.Itoa(int(events.PartitionOf(other, count))) || len(oh.Decisions) != 1 || len(oh.Inputs) != 1 || oh.Inputs[0].Missing {
		t.Fatalf("history of %s: %+v", other, oh)
	}

	// /api/config names every partition's streams.
	var cfg uiConfig
	e.get("/api/config", &cfg)
	if cfg.Partitions != count || !slices.Equal(cfg.Outputs, []string{"TENURE_P0_OUT", "TENURE_P1_OUT", "TENURE_P2_OUT"}) || len(cfg.Inputs) != count {
		t.Fatalf("config: %+v", cfg)
	}

	// /healthz: every partition has its live coordinator.
	var hz Health
	if code := e.get("/healthz", &hz); code != http.StatusOK || !hz.Ready || hz.Role != RoleLive || hz.Coordinator != "c1" || len(hz.Partitions) != count {
		t.Fatalf("healthz %d: %+v", code, hz)
	}
	for k, p := range hz.Partitions {
		if p.Partition != uint32(k) || !p.Ready || p.Role != RoleLive || p.DecisionSeq != page.Seqs[k] {
			t.Errorf("healthz partition %d: %+v", k, p)
		}
	}
	if len(hz.Coordinators) != count || hz.Coordinators[1].Partition != "1" {
		t.Errorf("healthz coordinators: %+v", hz.Coordinators)
	}

	// /metrics: the coordinators and the read model's position per partition.
	metrics := e.text("/metrics")
	for k := range count {
		for _, want := range []string{
			fmt.Sprintf(`tenure_coordinator_live{coordinator="c1",partition="%d"} 1`, k),
			fmt.Sprintf(`tenure_leader{coordinator="c1",partition="%d"} 1`, k),
			fmt.Sprintf(`tenure_ui_decision_seq{partition="%d"} %d`, k, page.Seqs[k]),
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	}
	if want := fmt.Sprintf(`tenure_decisions_total{kind="granted",reason="ok"} %d`, len(jobs)+1); !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %q", want)
	}

	// The audit: every partition, each reproduced. (audit.Report does not
	// decode from JSON: read what the page reads.)
	type auditPart struct {
		Partition uint32 `json:"partition"`
		OK        bool   `json:"ok"`
		Report    struct {
			Decisions  uint64 `json:"decisions"`
			FoldHash   string `json:"fold_hash"`
			StoredHash string `json:"stored_hash"`
		} `json:"report"`
	}
	var res struct {
		OK         bool        `json:"ok"`
		Problems   int         `json:"problems"`
		Summary    string      `json:"summary"`
		Matrix     [][]string  `json:"matrix"`
		Partitions []auditPart `json:"partitions"`
	}
	if code := e.post("/api/audit", AuditRequest{}, &res); code != http.StatusOK || !res.OK || res.Problems != 0 || len(res.Partitions) != count {
		t.Fatalf("audit %d: %+v", code, res)
	}
	for k, p := range res.Partitions {
		if p.Partition != uint32(k) || !p.OK || p.Report.Decisions != page.Seqs[k] || p.Report.FoldHash == "" || p.Report.FoldHash != p.Report.StoredHash {
			t.Errorf("audit of partition %d: %+v", k, p)
		}
		if !strings.Contains(res.Summary, audit.PartitionHeading(topos[k])) {
			t.Errorf("audit summary lacks partition %d:\n%s", k, res.Summary)
		}
	}
	if !strings.Contains(res.Summary, "all 3 partitions: ") {
		t.Errorf("audit summary:\n%s", res.Summary)
	}
	// The audit of one job: its partition only, its evidence matrix equal
	// to its page's.
	res.Partitions, res.Matrix = nil, nil
	if code := e.post("/api/audit", AuditRequest{Job: job}, &res); code != http.StatusOK || !res.OK || len(res.Partitions) != 1 || res.Partitions[0].Partition != part {
		t.Fatalf("audit of %s %d: %+v", job, code, res)
	}
	var matrix [][]string
	for _, d := range hist.Decisions {
		matrix = append(matrix, d.Matrix)
	}
	if !slices.EqualFunc(res.Matrix, matrix, slices.Equal) {
		t.Fatalf("audit matrix of %s differs from its page's:\n got %q\nwant %q", job, res.Matrix, matrix)
	}
}

// streamInfo is the last sequence of a stream.
func streamInfo(t *testing.T, e *env, name string) uint64 {
	t.Helper()
	s, err := e.js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// /healthz over a partitioned deployment answers 503 while a partition has
// no coordinator, naming it; the others are still reported ready.
func TestPartitionedHealthNamesMissingPartition(t *testing.T) {
	e := newPartitionedEnv(t, 3, 1)
	var hz Health
	if code := e.get("/healthz", &hz); code != http.StatusServiceUnavailable || hz.Ready || !strings.Contains(hz.Reason, "partition 1: no coordinator answered") {
		t.Fatalf("healthz %d: %+v", code, hz)
	}
	if len(hz.Partitions) != 3 || !hz.Partitions[0].Ready || hz.Partitions[1].Ready || !hz.Partitions[2].Ready {
		t.Fatalf("healthz partitions: %+v", hz.Partitions)
	}
}

// The read model keeps one position per partition: a UI whose Run stops
// and runs again resumes each partition where it stopped, so that nothing
// is applied twice and nothing is missed.
func TestPartitionedResume(t *testing.T) {
	const count = 2
	e := newPartitionedEnv(t, count)
	jobs := partitionJobs(t, count)
	for _, job := range jobs[:2] {
		e.decide("worker.w1."+job+".acquire", `{"v":1,"lease_ms":60000}`)
	}
	topos := streams.Topology{}.Partitions(count)
	u, err := New(Config{Conn: e.nc, Partitions: count, Tokens: []Token{e.tokens[Viewer]}, Status: func(context.Context) ([]CoordinatorStatus, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	caughtUp := func() bool {
		sum := u.model.summary()
		if !sum.CaughtUp {
			return false
		}
		for k, topo := range topos {
			if sum.Seqs[k] != streamInfo(t, e, topo.DecisionStream()) {
				return false
			}
		}
		return true
	}
	run := func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = u.Run(ctx); close(done) }()
		testutil.WaitFor(e.t, 15*time.Second, "the second UI to catch up", caughtUp)
		cancel()
		<-done
	}
	run()
	first := u.model.summary()
	// New decisions in every partition while it does not run.
	for _, job := range jobs[2:] {
		e.decide("worker.w2."+job+".acquire", `{"v":1,"lease_ms":60000}`)
	}
	run()
	second := u.model.summary()
	var stored uint64
	for k, topo := range topos {
		last := streamInfo(t, e, topo.DecisionStream())
		stored += last
		if second.Seqs[k] != last || second.Seqs[k] <= first.Seqs[k] {
			t.Errorf("partition %d: position %d then %d, stream at %d", k, first.Seqs[k], second.Seqs[k], last)
		}
	}
	u.model.mu.RLock()
	total := u.model.total
	u.model.mu.RUnlock()
	if total != stored || second.Jobs != len(jobs) {
		t.Fatalf("applied %d decisions of %d stored (none twice, none missed), %d jobs of %d", total, stored, second.Jobs, len(jobs))
	}
	for _, job := range jobs {
		r, _, _, ok := u.model.job(job, 0)
		if !ok || r.Decisions != 1 || r.Partition != strconv.Itoa(int(events.PartitionOf(job, count))) {
			t.Errorf("row of %s: %+v", job, r)
		}
	}
}

// The pages of a partitioned deployment in a headless Chromium: the board
// has a Part column with every job's partition, and every column inside a
// 1,400-pixel window (TestBrowserBoard's measurement, with its rows of the
// widest state cells); the job page names the job's partition, and the anomalies feed
// shows the partition of each entry.
func TestBrowserPartitioned(t *testing.T) {
	bctx := browser(t)
	const count = 3
	e := newPartitionedEnv(t, count)
	e.browserLogin(bctx, Operator)
	jobs := partitionJobs(t, count)
	for _, job := range jobs {
		e.decide("worker.w1."+job+".acquire", `{"v":1,"lease_ms":300000}`)
	}
	job := jobs[0]
	part := strconv.Itoa(int(events.PartitionOf(job, count)))
	// A duplicate acquire by another worker: an anomaly of job's partition.
	if _, v := e.decide("worker.w2."+job+".acquire", `{"v":1,"lease_ms":300000}`); v == "granted/ok" {
		t.Fatalf("second acquire: %s", v)
	}
	// TestBrowserBoard's rows of the widest state cells: an offer withdrawn
	// (CANCELLED) and a failure (FAILED, result FAILED).
	e.decide("ops.disp.export-1.offer", `{"v":1,"holder":"w3","lease_ms":300000}`)
	if _, v := e.decide("ops.disp.export-1.cancel", `{"v":1,"reason":"customer withdrew"}`); v != "cancel_requested/offer_withdrawn" {
		t.Fatalf("cancel of the offer: %s", v)
	}
	e.decide("worker.w4.fail-1.acquire", `{"v":1,"lease_ms":600000}`)
	l := e.row("fail-1").LeaseID
	e.decide("worker.w4.fail-1.result", `{"v":1,"lease_id":"`+l+`","generation":1,"outcome":"FAILED"}`)

	board := newTab(t, bctx, "board")
	board.do(chromedp.EmulateViewport(1400, 900))
	board.do(chromedp.Navigate(e.url + "/"))
	board.wait("the board", fmt.Sprintf(`document.querySelectorAll('#board-rows tr[data-job]').length === %d`, len(jobs)+2))
	board.checkFits1400()
	if h := eval[string](board, `[...document.querySelectorAll('#board thead th')].map((th) => th.textContent).join(',')`); !strings.HasPrefix(h, "Job,Part,State,") {
		t.Fatalf("board header: %s", h)
	}
	for _, j := range jobs {
		got := eval[string](board, `document.querySelector('#board-rows tr[data-job="`+j+`"] td.part').textContent`)
		if want := strconv.Itoa(int(events.PartitionOf(j, count))); got != want {
			t.Errorf("board: %s in partition %q, want %s", j, got, want)
		}
	}
	board.wait("the summary", `document.querySelector('#summary').textContent.includes('3 partitions')`)

	page := newTab(t, bctx, "job")
	page.do(chromedp.Navigate(e.url + "/jobs/" + job))
	page.wait("the job's partition", `document.querySelector('#job-partition') !== null && document.querySelector('#job-partition').textContent === '`+part+` of 3'`)
	page.wait("the job's inputs", `document.querySelectorAll('#list-box [data-input]').length === 2`)

	feed := newTab(t, bctx, "anomalies")
	feed.do(chromedp.Navigate(e.url + "/anomalies"))
	feed.wait("the feed", `document.querySelectorAll('#feed-rows tr[data-job="`+job+`"] td.part').length === 1`)
	if got := eval[string](feed, `document.querySelector('#feed-rows tr[data-job="`+job+`"] td.part').textContent`); got != part {
		t.Fatalf("anomaly of %s in partition %q, want %s", job, got, part)
	}
}
