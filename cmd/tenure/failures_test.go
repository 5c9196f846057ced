package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ui"
	sdk "github.com/maknow/tenure/worker"
)

// Failures read as failures everywhere (issue 34): a job whose worker
// reported FAILED (fail-1, by a lease's result; q-2, a queue job failed
// permanently) and a queue job that ended DEAD after a failed attempt
// (q-1) show "failed" (never "completed/ok") and the worker's own detail
// in tenure jobs ls and jobs get, tenure watch (table and JSON), tenure
// audit --job and the board; a board viewer is not shown the detail.
func TestFailuresReadable(t *testing.T) {
	data := t.TempDir()
	log, _ := serveArgs(t, "--data", data, "--listen", "127.0.0.1:-1", "--sync", "interval", "--http", "127.0.0.1:0")
	url := waitLog(t, log, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	web := waitLog(t, log, regexp.MustCompile(`web UI on (http://127\.0\.0\.1:\d+)/`))
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
		return out.String()
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w, err := sdk.Connect(nc, "w1")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	const why1 = "smtp 550: mailbox unavailable \u202e(reversed)"
	l, err := w.Acquire(ctx, "fail-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, events.OutcomeFailed, why1); err != nil {
		t.Fatal(err)
	}
	cmd("submit", "q-1", "--queue", "mail", "--max-attempts", "1")
	cmd("submit", "q-2", "--queue", "mail", "--max-attempts", "3")
	var handled atomic.Int32
	rctx, stopRun := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() {
		runDone <- w.Run(rctx, "mail", func(ctx context.Context, j *sdk.Job) error {
			handled.Add(1)
			if j.ID == "q-2" {
				return sdk.Permanent(errors.New("bad address: no @"))
			}
			return errors.New("render: template missing")
		})
	}()
	testutil.WaitFor(t, 30*time.Second, "both queue jobs handled", func() bool { return handled.Load() >= 2 })
	var ls string
	testutil.WaitFor(t, 30*time.Second, "the state API to show every end", func() bool {
		ls = cmd("jobs", "ls")
		return regexp.MustCompile(`(?m)^q-1 +DEAD`).MatchString(ls) && regexp.MustCompile(`(?m)^q-2 +FAILED`).MatchString(ls) &&
			regexp.MustCompile(`(?m)^fail-1 +FAILED`).MatchString(ls)
	})
	stopRun()
	<-runDone

	// tenure jobs ls: the outcome, and the worker's detail (quoted).
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^fail-1 +FAILED .* failed +"smtp 550: mailbox unavailable \\u202e\(reversed\)"$`),
		regexp.MustCompile(`(?m)^q-1 +DEAD .* dead/attempt_failed +"render: template missing"$`),
		regexp.MustCompile(`(?m)^q-2 +FAILED .* failed +"bad address: no @"$`),
	} {
		if !want.MatchString(ls) {
			t.Errorf("tenure jobs ls lacks %v:\n%s", want, ls)
		}
	}
	if strings.Contains(ls, "completed/ok") || strings.ContainsRune(ls, '\u202e') {
		t.Errorf("tenure jobs ls shows completed/ok or the worker's raw text:\n%s", ls)
	}
	// tenure jobs get.
	if out := cmd("jobs", "get", "fail-1"); !strings.Contains(out, "(failed of input") ||
		!strings.Contains(out, `latest result: FAILED by w1 (input `) || !strings.Contains(out, `"smtp 550: mailbox unavailable \u202e(reversed)"`) {
		t.Errorf("tenure jobs get fail-1:\n%s", out)
	}
	if out := cmd("jobs", "get", "q-1"); !strings.Contains(out, `latest result: FAILED by w1`) || !strings.Contains(out, `"render: template missing"`) {
		t.Errorf("tenure jobs get q-1:\n%s", out)
	}
	// tenure watch: the table and the JSON lines.
	if out := cmd("watch", "--all", "--job", "fail-1", "--kind", "completed", "-n", "1"); !strings.Contains(out, `FAILED "smtp 550: mailbox unavailable \u202e(reversed)"`) {
		t.Errorf("tenure watch --job fail-1:\n%s", out)
	}
	if out := cmd("watch", "--all", "--job", "q-2", "--kind", "completed", "-n", "1", "--format", "json"); !strings.Contains(out, `"result":"FAILED"`) ||
		!strings.HasSuffix(out, `,"result_detail":"bad address: no @"}`+"\n") {
		t.Errorf("tenure watch --job q-2 --format json:\n%s", out)
	}
	// tenure audit --job: the results its workers sent.
	if out := cmd("audit", "--job", "q-1"); !regexp.MustCompile(`(?m)^  \d+ +w1 +FAILED +completed/ok +"render: template missing"$`).MatchString(out) {
		t.Errorf("tenure audit --job q-1:\n%s", out)
	}
	// The board: an operator sees the outcome and the detail, a viewer
	// the outcome only.
	op, viewer := boardToken(t, data, ui.Operator), boardToken(t, data, ui.Viewer)
	rows := func(tok string) map[string]map[string]any {
		page := getJSONAs(t, web+"/api/jobs", tok, func(code int, b map[string]any) bool { return code == 200 })
		out := map[string]map[string]any{}
		for _, r := range page["rows"].([]any) {
			out[r.(map[string]any)["id"].(string)] = r.(map[string]any)
		}
		return out
	}
	opRows := rows(op)
	if r := opRows["fail-1"]; r["last_kind"] != "completed" || r["last_outcome"] != "FAILED" || r["result_detail"] != why1 {
		t.Errorf("the board's row of fail-1 (operator): %v", r)
	}
	if r := opRows["q-1"]; r["last_kind"] != "dead" || r["result_detail"] != "render: template missing" {
		t.Errorf("the board's row of q-1 (operator): %v", r)
	}
	if r := rows(viewer)["fail-1"]; r["last_outcome"] != "FAILED" || r["result_detail"] != nil {
		t.Errorf("the board's row of fail-1 (viewer): %v", r)
	}
}
