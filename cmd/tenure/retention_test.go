package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/api"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ui"
)

// The read models after retention (issue 34): on a serve --log-retention
// deployment, five queue jobs are submitted and covered by a snapshot;
// tenure log archive and tenure log remove trim the streams; serve
// restarts on the same data directory. The state API (tenure jobs ls,
// tenure jobs get, tenure queues) and the board (/api/jobs, /api/queues)
// start from the stored snapshot, as the coordinator does, and show the
// five jobs QUEUED and ready, as many as the coordinator holds; a worker
// that then pulls is offered all five, and both read models show it.
func TestReadModelsAfterRetention(t *testing.T) {
	data, arch := t.TempDir(), t.TempDir()
	args := []string{"--data", data, "--listen", "127.0.0.1:-1", "--sync", "interval", "--log-retention",
		"--snapshot-every", "3", "--snapshot-interval", "1h", "--http", "127.0.0.1:0"}
	log, stop := serveArgs(t, args...)
	url := waitLog(t, log, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	waitLog(t, log, regexp.MustCompile(`(INF live|msg=live) `))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append(args, "--nats-url", url)
		if code := run(ctx, args, &out, &errOut); code != 0 {
			t.Fatalf("tenure %s: exit %d:\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	jobs := []string{"r-1", "r-2", "r-3", "r-4", "r-5"}
	for _, j := range jobs {
		cmd("submit", j, "--queue", "reports", "--max-attempts", "3")
	}
	// A snapshot covering every submit: each input counts toward the next
	// one, ticks and checkpoints too (a job submitted more is one more
	// input).
	var extra []string
	if err := testutil.Poll(30*time.Second, func() error {
		st, err := coordinatorStatus(nc, "tenure.status.c1")
		if err == nil && st.Live && st.SnapshotSeq >= st.InputsFolded-1 && st.SnapshotSeq > 0 && len(extra) > 0 {
			return nil
		}
		j := fmt.Sprintf("r-%d", 6+len(extra))
		extra = append(extra, j)
		cmd("submit", j, "--queue", "reports", "--max-attempts", "3")
		return fmt.Errorf("status %+v (%v)", st, err)
	}); err != nil {
		t.Fatal(err)
	}
	jobs = append(jobs, extra...)
	if out := cmd("log", "archive", "--archive", arch); !strings.Contains(out, "sealed segment 1") {
		t.Fatalf("archive: %s", out)
	}
	if out := cmd("log", "remove", "--archive", arch); !strings.Contains(out, "removed through segment 1") {
		t.Fatalf("remove: %s", out)
	}
	nc.Close()
	stop()

	log, _ = serveArgs(t, args...)
	url = waitLog(t, log, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	web := waitLog(t, log, regexp.MustCompile(`web UI on (http://127\.0\.0\.1:\d+)/`))
	if nc, err = nats.Connect(url); err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var coord status
	if err := testutil.Poll(30*time.Second, func() error {
		var err error
		if coord, err = coordinatorStatus(nc, "tenure.status.c1"); err == nil && !coord.Live {
			err = fmt.Errorf("not live: %+v", coord)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	out, err := js.Stream(ctx, "TENURE_OUT")
	if err != nil {
		t.Fatal(err)
	}
	// The decision stream keeps its last policy_set decision and the
	// segment's last decision: the decisions between are gone.
	st := out.CachedInfo().State
	if st.Msgs+5 > st.LastSeq-st.FirstSeq+1 {
		t.Fatalf("the decision stream holds %d decisions from %d to %d after the removal", st.Msgs, st.FirstSeq, st.LastSeq)
	}
	t.Logf("%d jobs; the decision stream holds %d decisions from %d to %d", len(jobs), st.Msgs, st.FirstSeq, st.LastSeq)
	if coord.Jobs != int64(len(jobs)) {
		t.Fatalf("the coordinator holds %d jobs after the restart, %d were submitted", coord.Jobs, len(jobs))
	}

	// The state API, once caught up.
	var ls api.JobsReply
	if err := testutil.Poll(30*time.Second, func() error {
		ls = api.JobsReply{}
		if err := json.Unmarshal([]byte(cmd("jobs", "ls", "--json")), &ls); err != nil {
			return err
		}
		if !ls.CaughtUp {
			return fmt.Errorf("not caught up: %+v", ls.Position)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, j := range ls.Jobs {
		listed = append(listed, j.ID+" "+j.State)
	}
	var want []string
	for _, j := range jobs {
		want = append(want, j+" QUEUED")
	}
	slices.Sort(want)
	if ls.Total != int(coord.Jobs) || !slices.Equal(listed, want) {
		t.Errorf("tenure jobs ls after the restart: %d jobs (%v); the coordinator holds %d: %v", ls.Total, listed, coord.Jobs, want)
	}
	if out := cmd("jobs", "get", "r-3"); !strings.Contains(out, `"state": "QUEUED"`) || !strings.Contains(out, "snapshot") {
		t.Errorf("tenure jobs get r-3: %s", out)
	}
	var qs api.QueuesReply
	if err := json.Unmarshal([]byte(cmd("queues", "--json")), &qs); err != nil {
		t.Fatal(err)
	}
	if len(qs.Queues) != 1 || qs.Queues[0].Queue != "reports" || qs.Queues[0].Ready != len(jobs) || qs.Queues[0].Jobs != len(jobs) {
		t.Errorf("tenure queues after the restart: %+v, want reports with %d jobs ready", qs.Queues, len(jobs))
	}
	if out := cmd("queues"); !regexp.MustCompile(`(?m)^reports\s+` + fmt.Sprint(len(jobs)) + `\s`).MatchString(out) {
		t.Errorf("tenure queues: %s", out)
	}

	// The board: the same jobs and the same queue.
	tok := boardToken(t, data, ui.Operator)
	board := getJSONAs(t, web+"/api/jobs?limit=500", tok, func(code int, b map[string]any) bool {
		return code == 200 && b["caught_up"] == true
	})
	var rows []string
	for _, r := range board["rows"].([]any) {
		row := r.(map[string]any)
		rows = append(rows, row["id"].(string)+" "+row["state"].(string))
		if row["id"] == "r-3" && row["restored"] != true {
			t.Errorf("the board's row of r-3 does not say it is the snapshot's: %v", row)
		}
	}
	slices.Sort(rows)
	if !slices.Equal(rows, want) {
		t.Errorf("the board after the restart: %v; the coordinator holds %v", rows, want)
	}
	queues := getJSONAs(t, web+"/api/queues", tok, func(code int, b map[string]any) bool { return code == 200 })
	if q := queues["queues"].([]any); len(q) != 1 || q[0].(map[string]any)["ready"] != float64(len(jobs)) {
		t.Errorf("the board's queues after the restart: %v", queues)
	}

	// The coordinator offers them to a worker that pulls (a worker new to
	// a queue is offered at most 8 at once, PROTOCOL.md §22.8); both read
	// models follow.
	offered := min(len(jobs), 8)
	if _, err := nc.Request("tenure.in.worker.w1._.pull", []byte(fmt.Sprintf(`{"v":1,"queue":"reports","slots":%d,"ttl_ms":600000}`, len(jobs))), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Poll(30*time.Second, func() error {
		var r api.JobsReply
		if err := json.Unmarshal([]byte(cmd("jobs", "ls", "--json", "--state", "OFFERED")), &r); err != nil {
			return err
		}
		if r.Total != offered {
			return fmt.Errorf("%d jobs OFFERED, want %d", r.Total, offered)
		}
		return nil
	}); err != nil {
		t.Fatalf("the state API after the worker pulled: %v", err)
	}
	getJSONAs(t, web+"/api/jobs?state=OFFERED&holder=w1", tok, func(code int, b map[string]any) bool {
		return code == 200 && b["total"] == float64(offered)
	})
}
