package ui

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

const sec = int64(time.Second)

// decision is a synthetic decision about job with the given projection.
func decision(cause uint64, kind events.Kind, reason events.Reason, j events.Job) *events.Decision {
	return &events.Decision{Cause: cause, Of: 1, At: int64(cause) * sec, Kind: kind, Reason: reason,
		Role: events.RoleWorker, Actor: j.Holder, Verb: events.VerbRenew, Addressee: j.Holder, Job: j}
}

func activeJob(id, holder string, gen uint64, expires int64) events.Job {
	return events.Job{ID: id, LeaseID: fmt.Sprintf("L%d", gen), Generation: gen, Holder: holder,
		State: events.StateActive, AckState: events.AckAcquired, IssuedAt: sec, Duration: 30 * sec, ExpiresAt: expires}
}

func TestModelPage(t *testing.T) {
	m := newModel(0, 0)
	// Out of id order, so that the model sorts its ids lazily.
	m.apply(0, 1, decision(1, events.KindGranted, events.ReasonOk, activeJob("c", "w1", 1, 90*sec)))
	m.apply(0, 2, decision(2, events.KindGranted, events.ReasonOk, activeJob("a", "w2", 1, 50*sec)))
	off := activeJob("b", "w1", 1, 0)
	off.State, off.AckState, off.AckDeadline = events.StateOffered, events.AckPending, 70*sec
	m.apply(0, 3, decision(3, events.KindOffered, events.ReasonOk, off))
	done := activeJob("d", "w3", 2, 40*sec)
	done.State, done.Result = events.StateCompleted, events.OutcomeSuccess
	m.apply(0, 4, decision(4, events.KindCompleted, events.ReasonOk, done))
	stale := activeJob("a", "w2", 1, 50*sec)
	stale.Stale = 1
	m.apply(0, 5, decision(5, events.KindStale, events.ReasonStaleGeneration, stale))
	conflict := activeJob("c", "w1", 1, 90*sec)
	conflict.Conflict, conflict.ConflictWith, conflict.Conflicts = true, "w9", 1
	m.apply(0, 6, decision(6, events.KindConflict, events.ReasonOwnershipConflict, conflict))
	// A job-less rejection goes to the feed only.
	m.apply(0, 7, decision(7, events.KindRejected, events.ReasonBadSubject, events.Job{ID: events.NoJob}))

	ids := func(p Page) []string {
		var out []string
		for _, r := range p.Rows {
			out = append(out, r.ID)
		}
		return out
	}
	now := time.Unix(0, 0)
	for _, c := range []struct {
		q    Query
		want []string
		tot  int
	}{
		{Query{}, []string{"a", "b", "c", "d"}, 4},
		{Query{Sort: "-id"}, []string{"d", "c", "b", "a"}, 4},
		{Query{Sort: "deadline"}, []string{"a", "b", "c", "d"}, 4},
		{Query{Sort: "updated"}, []string{"c", "a", "d", "b"}, 4},
		{Query{Sort: "anomalies"}, []string{"a", "c", "b", "d"}, 4},
		{Query{Sort: "holder"}, []string{"b", "c", "a", "d"}, 4},
		{Query{States: []string{"ACTIVE"}}, []string{"a", "c"}, 2},
		{Query{States: []string{"LIVE"}}, []string{"a", "b", "c"}, 3},
		{Query{States: []string{"COMPLETED", "OFFERED"}}, []string{"b", "d"}, 2},
		{Query{Holder: "w1"}, []string{"b", "c"}, 2},
		{Query{Job: "d"}, []string{"d"}, 1},
		{Query{Blocked: true}, []string{"c"}, 1},
		{Query{Offset: 1, Limit: 2}, []string{"b", "c"}, 4},
		{Query{Offset: 3, Limit: 2, Sort: "deadline"}, []string{"d"}, 4},
		{Query{Offset: 9}, nil, 4},
	} {
		p := m.page(c.q, now)
		if got := ids(p); !slices.Equal(got, c.want) || p.Total != c.tot {
			t.Errorf("%+v: %v of %d, want %v of %d", c.q, got, p.Total, c.want, c.tot)
		}
	}
	p := m.page(Query{}, now)
	if p.Jobs != 4 || p.States["ACTIVE"] != 2 || p.States["OFFERED"] != 1 || p.States["COMPLETED"] != 1 || p.Blocked != 1 || p.Feed != 3 || p.Seq != 7 {
		t.Fatalf("page summary %+v", p)
	}
	if r := p.Rows[0]; r.Stale != 1 || r.Anomalies != 1 || r.Decisions != 2 || r.LastKind != "stale" || r.ExpiresAt != 50_000 {
		t.Fatalf("row a: %+v", r)
	}
	a := m.anomalies(AnomalyQuery{}, now)
	if len(a.Items) != 3 || a.Items[0].Job != "_" || a.Items[1].Job != "c" || a.Items[2].Job != "a" || a.Total != 1 || a.Blocked[0].ID != "c" {
		t.Fatalf("anomalies %+v", a)
	}
	// Settled: no longer blocked.
	m.apply(0, 8, decision(8, events.KindResolved, events.ReasonConflictAffirmed, activeJob("c", "w1", 1, 90*sec)))
	if p := m.page(Query{Blocked: true}, now); p.Total != 0 || p.Blocked != 0 {
		t.Fatalf("after affirm: %+v", p)
	}
}

func TestFeedRing(t *testing.T) {
	m := newModel(5, 0)
	for i := uint64(1); i <= 12; i++ {
		j := activeJob(fmt.Sprintf("j%d", i%3), "w1", 1, 0)
		m.apply(0, i, decision(i, events.KindLate, events.ReasonLateProgress, j))
	}
	now := time.Now()
	p := m.anomalies(AnomalyQuery{Limit: 2}, now)
	if p.Latest != 12 || p.Oldest != 8 || len(p.Items) != 2 || p.Items[0].N != 12 || p.Items[1].N != 11 || !p.More {
		t.Fatalf("newest: %+v", p)
	}
	p = m.anomalies(AnomalyQuery{Before: 11}, now)
	if len(p.Items) != 3 || p.Items[0].N != 10 || p.Items[2].N != 8 || p.More {
		t.Fatalf("before 11: %+v", p)
	}
	p = m.anomalies(AnomalyQuery{Job: "j0"}, now)
	if len(p.Items) != 2 || p.Items[0].N != 12 || p.Items[1].N != 9 {
		t.Fatalf("job j0: %+v", p)
	}
	items, latest, skipped := m.feedSince(2, 3)
	if latest != 12 || len(items) != 3 || items[0].N != 10 || skipped != 7 {
		t.Fatalf("feedSince: %d items from %v, latest %d, skipped %d", len(items), items, latest, skipped)
	}
	items, _, skipped = m.feedSince(9, 10)
	if len(items) != 3 || items[0].N != 10 || skipped != 0 {
		t.Fatalf("feedSince 9: %+v %d", items, skipped)
	}
}

// The board with 100,000 jobs: every answer is one bounded page, sorted and
// filtered on the server. Response times are logged, not asserted.
func TestBoard100kJobs(t *testing.T) {
	const n = 100_000
	srv := testutil.StartServer(t)
	nc, _ := testutil.Connect(t, srv.ClientURL())
	viewer := testTokens(t)[Viewer]
	s, err := New(Config{Conn: nc, Tokens: []Token{viewer}})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	order := rng.Perm(n)
	t0 := time.Now()
	for i, k := range order {
		j := activeJob(fmt.Sprintf("job-%06d", k), fmt.Sprintf("w%d", k%100), 1, int64(k%997+1)*sec)
		switch k % 10 {
		case 0:
			j.State, j.AckState, j.AckDeadline, j.ExpiresAt = events.StateOffered, events.AckPending, int64(k%331+1)*sec, 0
		case 1:
			j.State, j.Result, j.EndedAt = events.StateCompleted, events.OutcomeSuccess, 5*sec
		case 2:
			j.State, j.LeaseExpired, j.EndedAt = events.StateExpired, true, 7*sec
		}
		if k%1000 == 3 {
			j.Conflict, j.ConflictWith = true, "intruder"
		}
		j.ProgressSeq, j.ProgressValue = 1, int64(k%101)
		s.model.apply(0, uint64(i+1), decision(uint64(i+1), events.KindGranted, events.ReasonOk, j))
	}
	t.Logf("read model of %d jobs built in %v", n, time.Since(t0).Round(time.Millisecond))
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()

	for _, c := range []struct {
		query      string
		total      int
		rows       int
		first      string
		checkOrder func(a, b Row) bool
	}{
		{"", n, DefaultPageSize, "job-000000", nil},
		{"?offset=99950&limit=50", n, 50, "job-099950", nil},
		{"?offset=50000&limit=100000", n, MaxPageSize, "job-050000", nil},
		{"?sort=-id&limit=200", n, 200, "job-099999", nil},
		{"?sort=deadline&limit=200", n, 200, "", func(a, b Row) bool { return deadlineMS(a) <= deadlineMS(b) }},
		{"?sort=updated&limit=100", n, 100, "", func(a, b Row) bool { return a.LastSeq > b.LastSeq }},
		{"?sort=holder&offset=1000&limit=100", n, 100, "", func(a, b Row) bool { return compareIDs(a.Holder, b.Holder) <= 0 }},
		{"?state=ACTIVE&limit=100", n * 7 / 10, 100, "job-000003", nil},
		{"?state=LIVE&limit=100", n * 8 / 10, 100, "job-000000", nil},
		{"?holder=w42", n / 100, DefaultPageSize, "job-000042", nil},
		{"?q=0999", contains(n, "0999"), DefaultPageSize, "job-000999", nil},
		{"?blocked=1&limit=500", n / 1000, n / 1000, "job-000003", nil},
		{"?state=COMPLETED&holder=w1&sort=anomalies", n / 100, DefaultPageSize, "job-000001", nil},
	} {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodGet, hs.URL+"/api/jobs"+c.query, nil)
		req.Header.Set("Authorization", "Bearer "+viewer.String())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		elapsed := time.Since(start)
		var p Page
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatalf("%s: %v", c.query, err)
		}
		t.Logf("GET /api/jobs%-42s %3d rows of %6d, %7d bytes, %v", c.query, len(p.Rows), p.Total, len(body), elapsed.Round(time.Microsecond))
		if p.Total != c.total || len(p.Rows) != c.rows || p.Jobs != n || len(p.Rows) > MaxPageSize {
			t.Errorf("%s: %d rows of %d (%d jobs), want %d of %d", c.query, len(p.Rows), p.Total, p.Jobs, c.rows, c.total)
			continue
		}
		if c.first != "" && p.Rows[0].ID != c.first {
			t.Errorf("%s: first row %s, want %s", c.query, p.Rows[0].ID, c.first)
		}
		for i := 1; c.checkOrder != nil && i < len(p.Rows); i++ {
			if !c.checkOrder(p.Rows[i-1], p.Rows[i]) {
				t.Errorf("%s: rows %d and %d out of order: %+v, %+v", c.query, i-1, i, p.Rows[i-1], p.Rows[i])
				break
			}
		}
	}
}

func deadlineMS(r Row) int64 {
	switch r.State {
	case "OFFERED":
		return r.AckDeadline
	case "ACTIVE":
		return r.ExpiresAt
	}
	return 1 << 62
}

// contains counts the job ids job-000000..job-(n-1) that contain s.
func contains(n int, s string) int {
	c := 0
	for k := range n {
		if strings.Contains(fmt.Sprintf("job-%06d", k), s) {
			c++
		}
	}
	return c
}

// A retired job leaves the board (the model keeps only the jobs the
// projection keeps), its id may come back as a new job, and a job's list
// of decision sequences stays bounded however many decisions it has.
func TestModelRetiredAndBounded(t *testing.T) {
	m := newModel(0, 0)
	now := time.Unix(0, 0)
	for i, id := range []string{"a", "b", "c"} {
		m.apply(0, uint64(i+1), decision(uint64(i+1), events.KindGranted, events.ReasonOk, activeJob(id, "w1", 1, 90*sec)))
	}
	m.page(Query{}, now) // merged: the retirement has to leave order, not only tail
	done := activeJob("b", "w1", 1, 90*sec)
	done.State, done.Result = events.StateCompleted, events.OutcomeSuccess
	m.apply(0, 4, decision(4, events.KindCompleted, events.ReasonOk, done))
	m.apply(0, 5, decision(5, events.KindRetired, events.ReasonRetentionPassed, done))
	p := m.page(Query{}, now)
	if p.Jobs != 2 || len(p.Rows) != 2 || p.Rows[0].ID != "a" || p.Rows[1].ID != "c" || p.States["COMPLETED"] != 0 || p.States["ACTIVE"] != 2 {
		t.Fatalf("after b retired: jobs %d, rows %+v, states %v", p.Jobs, p.Rows, p.States)
	}
	if _, _, _, ok := m.job("b", 0); ok {
		t.Fatal("a retired job still has a page")
	}
	if rows := m.rows([]string{"a", "b"}); len(rows) != 1 || rows[0].ID != "a" {
		t.Fatalf("rows %+v", rows)
	}
	// The id comes back: a new job, with only its own decisions.
	m.apply(0, 6, decision(6, events.KindGranted, events.ReasonOk, activeJob("b", "w2", 1, 90*sec)))
	if _, seqs, skipped, ok := m.job("b", 0); !ok || !slices.Equal(seqs, []uint64{6}) || skipped != 0 {
		t.Fatalf("b again: %v %v %d", ok, seqs, skipped)
	}
	if p := m.page(Query{}, now); p.Jobs != 3 || len(p.Rows) != 3 {
		t.Fatalf("after b came back: %d jobs, %d rows", p.Jobs, len(p.Rows))
	}
	// A long-lived job: its decision sequences are bounded, the rest counted.
	const n = 3*historyCap + 7
	for i := range n {
		seq := uint64(100 + i)
		m.apply(0, seq, decision(seq, events.KindRenewed, events.ReasonOk, activeJob("a", "w1", 1, 90*sec)))
	}
	_, seqs, skipped, _ := m.job("a", 0)
	if len(seqs) > 2*historyCap || len(seqs)+skipped != n+1 || seqs[len(seqs)-1] != uint64(100+n-1) {
		t.Fatalf("%d sequences kept, %d skipped, last %d; want at most %d kept of %d", len(seqs), skipped, seqs[len(seqs)-1], 2*historyCap, n+1)
	}
	if _, seqs, skipped, _ := m.job("a", 50); len(seqs) != 50 || len(seqs)+skipped != n+1 {
		t.Fatalf("the last 50: %d kept, %d skipped", len(seqs), skipped)
	}
}

func TestCompareIDs(t *testing.T) {
	// Each id sorts before the next one.
	ordered := []string{
		"", "-", "0", "00", "01", "1", "2", "9", "10", "99", "100", "A", "_", "a",
		"batch", "batch-", "batch-0", "batch-01", "batch-1", "batch-1a", "batch-1b", "batch-001x", "batch-2", "batch-2-3", "batch-2-10",
		"batch-9", "batch-10", "batch-11", "batch-99", "batch-100", "batch-18446744073709551616", "batch-99999999999999999999999",
		"batchA", "batch_1", "batcha", "job0002", "job11", "w2", "w10",
	}
	for i, a := range ordered {
		for j, b := range ordered {
			if got, want := compareIDs(a, b), cmp.Compare(i, j); got != want {
				t.Errorf("compareIDs(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
	// A total order on random ids of the token alphabet: antisymmetric,
	// transitive (a sort agrees with every pairwise comparison), and equal
	// only for the same id.
	rng := rand.New(rand.NewPCG(3, 4))
	const alphabet = "0019-_aB"
	ids := make([]string, 400)
	for i := range ids {
		b := make([]byte, rng.IntN(7))
		for k := range b {
			b[k] = alphabet[rng.IntN(len(alphabet))]
		}
		ids[i] = string(b)
	}
	slices.SortFunc(ids, compareIDs)
	for i := range ids {
		for j := range ids {
			c := compareIDs(ids[i], ids[j])
			if c != -compareIDs(ids[j], ids[i]) || (c == 0) != (ids[i] == ids[j]) || (i < j && c > 0) {
				t.Fatalf("compareIDs(%q, %q) = %d at sorted positions %d, %d", ids[i], ids[j], c, i, j)
			}
		}
	}
}

// The board lists job ids in natural order, whichever way the jobs came
// (batch-2 before batch-10), and the holder order is natural too.
func TestModelNaturalOrder(t *testing.T) {
	m := newModel(0, 0)
	now := time.Unix(0, 0)
	ids := []string{"batch-10", "batch-2", "batch-1", "batch-11", "batch-9", "batch-100"}
	for i, id := range ids {
		m.apply(0, uint64(i+1), decision(uint64(i+1), events.KindGranted, events.ReasonOk, activeJob(id, fmt.Sprintf("w%d", 10-i), 1, 90*sec)))
		if i == 2 {
			m.page(Query{}, now) // some in order, the others merged into it
		}
	}
	rowIDs := func(q Query) []string {
		var out []string
		for _, r := range m.page(q, now).Rows {
			out = append(out, r.ID)
		}
		return out
	}
	want := []string{"batch-1", "batch-2", "batch-9", "batch-10", "batch-11", "batch-100"}
	if got := rowIDs(Query{}); !slices.Equal(got, want) {
		t.Errorf("by id: %q, want %q", got, want)
	}
	if got := rowIDs(Query{Sort: "-id"}); !slices.Equal(got, []string{"batch-100", "batch-11", "batch-10", "batch-9", "batch-2", "batch-1"}) {
		t.Errorf("by id, descending: %q", got)
	}
	// Holders w5 (batch-100) ... w10 (batch-10).
	if got := rowIDs(Query{Sort: "holder"}); !slices.Equal(got, []string{"batch-100", "batch-9", "batch-11", "batch-1", "batch-2", "batch-10"}) {
		t.Errorf("by holder: %q", got)
	}
}

// A job that never had a lease (a typo, a refused offer) is no row of the
// board and counts in none of its numbers, but has a page while it is among
// the latest DefaultUnleased; a lease makes it a row, with the decisions it
// had before.
func TestModelUnleased(t *testing.T) {
	m := newModel(0, 0)
	now := time.Unix(0, 0)
	m.apply(0, 1, decision(1, events.KindGranted, events.ReasonOk, activeJob("real", "w1", 1, 90*sec)))
	typo := decision(2, events.KindRejected, events.ReasonNoSuchJob, events.Job{ID: "raal"})
	m.apply(0, 2, typo)
	refused := decision(3, events.KindRejected, events.ReasonDurationOutOfPolicy, events.Job{ID: "export-9"})
	m.apply(0, 3, refused)
	p := m.page(Query{}, now)
	if p.Jobs != 1 || p.Total != 1 || len(p.Rows) != 1 || p.Rows[0].ID != "real" || p.States["NONE"] != 0 {
		t.Fatalf("board with two unleased jobs: jobs %d, total %d, rows %+v, states %v", p.Jobs, p.Total, p.Rows, p.States)
	}
	if s := m.summary(); s.Jobs != 1 {
		t.Fatalf("summary: %d jobs", s.Jobs)
	}
	if r, seqs, _, ok := m.job("raal", 0); !ok || r.LastKind != "rejected" || r.Anomalies != 1 || !slices.Equal(seqs, []uint64{2}) {
		t.Fatalf("the typo's page: %v %+v %v", ok, r, seqs)
	}
	if _, ok := m.jobRow("raal"); !ok {
		t.Fatal("no row for the typo's page")
	}
	if rows := m.rows([]string{"raal", "real"}); len(rows) != 1 || rows[0].ID != "real" {
		t.Fatalf("board rows: %+v", rows)
	}
	if a := m.anomalies(AnomalyQuery{}, now); len(a.Items) != 2 {
		t.Fatalf("the feed keeps both rejections: %+v", a.Items)
	}
	// The offer is made again, within policy: a row, with its first decision.
	off := activeJob("export-9", "w3", 1, 0)
	off.State, off.AckState, off.AckDeadline = events.StateOffered, events.AckPending, 70*sec
	m.apply(0, 4, decision(4, events.KindOffered, events.ReasonOk, off))
	p = m.page(Query{}, now)
	if p.Jobs != 2 || len(p.Rows) != 2 || p.Rows[0].ID != "export-9" || p.Rows[0].Anomalies != 1 || p.Rows[0].Decisions != 2 || p.States["OFFERED"] != 1 {
		t.Fatalf("after the offer: jobs %d, rows %+v, states %v", p.Jobs, p.Rows, p.States)
	}
	if _, seqs, _, _ := m.job("export-9", 0); !slices.Equal(seqs, []uint64{3, 4}) {
		t.Fatalf("export-9's decisions: %v", seqs)
	}
	// Its rejections again: it stays a row (it had a lease).
	m.apply(0, 5, decision(5, events.KindRejected, events.ReasonNoSuchJob, events.Job{ID: "export-9"}))
	if p := m.page(Query{}, now); p.Jobs != 2 {
		t.Fatalf("a leased job's later rejection: %d jobs", p.Jobs)
	}

	// Typos are bounded: the oldest first seen are forgotten.
	seq := uint64(10)
	for i := range 3 * DefaultUnleased {
		seq++
		m.apply(0, seq, decision(seq, events.KindRejected, events.ReasonNoSuchJob, events.Job{ID: fmt.Sprintf("typo-%d", i)}))
	}
	if len(m.unleased) != DefaultUnleased || len(m.unleasedQ) > 2*DefaultUnleased {
		t.Fatalf("%d unleased jobs kept, queue %d; want %d", len(m.unleased), len(m.unleasedQ), DefaultUnleased)
	}
	if _, _, _, ok := m.job("raal", 0); ok {
		t.Fatal("the oldest typo is still kept")
	}
	if _, _, _, ok := m.job(fmt.Sprintf("typo-%d", 3*DefaultUnleased-1), 0); !ok {
		t.Fatal("the latest typo is not kept")
	}
	if p := m.page(Query{}, now); p.Jobs != 2 || len(p.Rows) != 2 {
		t.Fatalf("after %d typos: %d jobs, %d rows", 3*DefaultUnleased, p.Jobs, len(p.Rows))
	}
	// The same typo over and over keeps its last decisions only.
	for range 10 * unleasedHistory {
		seq++
		m.apply(0, seq, decision(seq, events.KindRejected, events.ReasonNoSuchJob, events.Job{ID: "typo-again"}))
	}
	if _, seqs, skipped, _ := m.job("typo-again", 0); len(seqs) > 2*unleasedHistory || len(seqs)+skipped != 10*unleasedHistory {
		t.Fatalf("a repeated typo: %d kept, %d skipped", len(seqs), skipped)
	}
}

// Queue jobs are rows of the board from their submit on (generation 0),
// with their queue fields; the board filters by queue; the queues view
// counts them (package api's aggregates), with the workers' capacity from
// capacity_set decisions; a retired queue job leaves both.
func TestModelQueueJobs(t *testing.T) {
	m := newModel(0, 0)
	queued := func(id string, ready int64) events.Job {
		return events.Job{ID: id, State: events.StateQueued, Queue: "emails", Submitter: "disp", MaxAttempts: 3,
			Backoff: sec, BackoffMax: 60 * sec, SubmittedAt: sec, ReadyAt: ready}
	}
	m.apply(0, 1, decision(1, events.KindSubmitted, events.ReasonOk, queued("m1", sec)))
	m.apply(0, 2, decision(2, events.KindSubmitted, events.ReasonOk, queued("m2", 2*sec)))
	m.apply(0, 3, decision(3, events.KindGranted, events.ReasonOk, activeJob("plain", "w1", 1, 90*sec)))
	capd := &events.Decision{Cause: 4, Of: 1, At: 4 * sec, Kind: events.KindCapacitySet, Reason: events.ReasonOk, Role: events.RoleWorker,
		Actor: "w7", Verb: events.VerbPull, Addressee: "w7", Job: events.Job{ID: events.NoJob},
		Capacity: &events.Capacity{Queue: "emails", Slots: 2, Until: 600 * sec}}
	m.apply(0, 4, capd)
	off := queued("m1", 0)
	off.State, off.Generation, off.Holder, off.LeaseID, off.Attempt, off.AckDeadline = events.StateOffered, 1, "w7", "L5-x", 1, 35*sec
	m.apply(0, 5, decision(5, events.KindAssigned, events.ReasonOk, off))
	back := queued("m2", 30*sec)
	back.Attempt, back.LastReason, back.Generation, back.Holder = 1, events.ReasonAttemptFailed, 1, "w7"
	m.apply(0, 6, decision(6, events.KindRequeued, events.ReasonAttemptFailed, back))

	p := m.page(Query{Queue: "emails"}, time.Unix(5, 0))
	if p.Total != 2 || p.Jobs != 3 || p.States["QUEUED"] != 1 || p.States["OFFERED"] != 1 {
		t.Fatalf("the board of queue emails: %+v", p)
	}
	r := p.Rows[1]
	if r.ID != "m2" || r.Queue != "emails" || r.Submitter != "disp" || r.Attempt != 1 || r.MaxAttempts != 3 ||
		r.ReadyAt != 30_000 || r.AttemptReason != "attempt_failed" {
		t.Fatalf("m2's row: %+v", r)
	}
	if r := p.Rows[0]; r.ID != "m1" || r.ReadyAt != 0 || r.State != "OFFERED" || r.Holder != "w7" {
		t.Fatalf("m1's row: %+v", r)
	}
	qp := m.queuesPage(time.Unix(10, 0))
	if qp.Total != 1 || len(qp.Queues) != 1 {
		t.Fatalf("the queues view: %+v", qp)
	}
	q := qp.Queues[0]
	if q.Queue != "emails" || q.Queued != 1 || q.Waiting != 1 || q.Ready != 0 || q.InFlight != 1 || q.Workers != 1 || q.Slots != 2 || q.FreeSlots != 1 {
		t.Fatalf("queue emails at 10 s: %+v", q)
	}
	if q := m.queuesPage(time.Unix(31, 0)).Queues[0]; q.Ready != 1 || q.Waiting != 0 {
		t.Fatalf("queue emails once m2 is ready: %+v", q)
	}
	// Retired (a discarded DEAD job): it leaves the board and the queue.
	dead := back
	dead.State = events.StateDead
	m.apply(0, 7, decision(7, events.KindDead, events.ReasonAttemptFailed, dead))
	m.apply(0, 8, decision(8, events.KindRetired, events.ReasonDiscarded, dead))
	if p := m.page(Query{Queue: "emails"}, time.Unix(40, 0)); p.Total != 1 {
		t.Fatalf("after m2 was discarded: %+v", p)
	}
	if q := m.queuesPage(time.Unix(40, 0)).Queues[0]; q.Jobs != 1 || q.Queued != 0 || q.Dead != 0 {
		t.Fatalf("queue emails after m2 was discarded: %+v", q)
	}
}

// A scheduled queue job's row (rules revision 8) says when it was
// scheduled for: its run_at, or its submit's time plus its delay.
func TestModelScheduledJob(t *testing.T) {
	m := newModel(0, 0)
	at := events.Job{ID: "at", State: events.StateQueued, Queue: "reports", Submitter: "disp", MaxAttempts: 3,
		Backoff: sec, BackoffMax: 60 * sec, SubmittedAt: sec, RunAt: 90 * sec, ReadyAt: 90 * sec}
	in := at
	in.ID, in.RunAt, in.Delay, in.ReadyAt = "in", 0, 30*sec, 31*sec
	m.apply(0, 1, decision(1, events.KindSubmitted, events.ReasonOk, at))
	m.apply(0, 2, decision(2, events.KindSubmitted, events.ReasonOk, in))
	p := m.page(Query{Queue: "reports"}, time.Unix(2, 0))
	if len(p.Rows) != 2 || p.Rows[0].ID != "at" || p.Rows[0].ScheduledFor != 90_000 || p.Rows[0].ReadyAt != 90_000 ||
		p.Rows[1].ScheduledFor != 31_000 {
		t.Fatalf("scheduled rows: %+v", p.Rows)
	}
}

// A queue job's row names its unique key (rules revision 8).
func TestModelUniqueKeyJob(t *testing.T) {
	m := newModel(0, 0)
	j := events.Job{ID: "u1", State: events.StateQueued, Queue: "exports", Submitter: "disp", MaxAttempts: 3,
		Backoff: sec, BackoffMax: 60 * sec, SubmittedAt: sec, ReadyAt: sec, UniqueKey: "user-42", UniqueFor: 60 * sec}
	m.apply(0, 1, decision(1, events.KindSubmitted, events.ReasonOk, j))
	p := m.page(Query{Queue: "exports"}, time.Unix(2, 0))
	if len(p.Rows) != 1 || p.Rows[0].UniqueKey != "user-42" {
		t.Fatalf("rows: %+v", p.Rows)
	}
	j.ID, j.UniqueKey, j.UniqueFor, j.ConcurrencyKey = "c1", "", 0, "acct-42" // rules revision 9
	m.apply(0, 2, decision(2, events.KindSubmitted, events.ReasonOk, j))
	p = m.page(Query{Queue: "exports"}, time.Unix(2, 0))
	if len(p.Rows) != 2 || p.Rows[0].ID != "c1" || p.Rows[0].ConcKey != "acct-42" {
		t.Fatalf("rows: %+v", p.Rows)
	}
}
