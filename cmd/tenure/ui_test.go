package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ui"
)

// waitLog waits for re's first group in a log buffer.
func waitLog(t *testing.T, b *syncBuffer, re *regexp.Regexp) string {
	t.Helper()
	return waitServing(t, b, nil, re)
}

// waitServing is waitLog for a command running in the background that
// sends its exit status on done (nil: not watched): it fails at once if
// the command exits first, and waits up to 30 s.
func waitServing(t *testing.T, b *syncBuffer, done <-chan int, re *regexp.Regexp) string {
	t.Helper()
	var m []string
	if err := testutil.Poll(30*time.Second, func() error {
		if m = re.FindStringSubmatch(b.String()); m != nil {
			return nil
		}
		select {
		case code := <-done:
			t.Fatalf("exited with %d before %v was logged:\n%s", code, re, b.String())
		default:
		}
		return errNotYet
	}); err != nil {
		t.Fatalf("no %v in the log:\n%s", re, b.String())
	}
	return m[1]
}

// getJSON polls url until ok accepts its status and decoded body.
func getJSON(t *testing.T, url string, ok func(code int, body map[string]any) bool) map[string]any {
	t.Helper()
	return getJSONAs(t, url, "", ok)
}

// boardToken reads the board token of role in dir (what tenure serve
// --http makes in its data directory, tenure auth init in its output).
func boardToken(t *testing.T, dir string, role ui.BoardRole) string {
	t.Helper()
	tok, err := ui.ReadTokenFile(filepath.Join(dir, ui.TokenFile(role)))
	if err != nil {
		t.Fatal(err)
	}
	return tok.String()
}

// getJSONAs is getJSON with the board token tok as a bearer token ("":
// none).
func getJSONAs(t *testing.T, url, tok string, ok func(code int, body map[string]any) bool) map[string]any {
	t.Helper()
	var (
		body map[string]any
		code int
	)
	if err := testutil.Poll(20*time.Second, func() error {
		body, code = nil, 0
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			code = resp.StatusCode
			_ = json.Unmarshal(b, &body)
		}
		if ok(code, body) {
			return nil
		}
		return fmt.Errorf("%d %v", code, body)
	}); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return body
}

// `tenure serve --http` serves the web UI, /healthz and /metrics next to
// the coordinator; `tenure ui --nats-url` serves the same on its own.
func TestServeHTTPAndUI(t *testing.T) {
	var stderr, uiErr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 2)
	data := t.TempDir()
	go func() {
		done <- run(ctx, []string{"serve", "--data", data, "--listen", "127.0.0.1:-1", "--sync", "interval", "--id", "c1",
			"--http", "127.0.0.1:0"}, &bytes.Buffer{}, &stderr)
	}()
	natsURL := waitLog(t, &stderr, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	web := waitLog(t, &stderr, regexp.MustCompile(`web UI on (http://127\.0\.0\.1:\d+)/`))
	// The board's tokens are in the data directory (the log says where,
	// never what they are), mode 0600.
	opFile := waitLog(t, &stderr, regexp.MustCompile(`log in with the token in (\S+)`))
	if opFile != filepath.Join(data, ui.OperatorTokenFile) {
		t.Errorf("the log names %s as the operator's token file", opFile)
	}
	op, viewer := boardToken(t, data, ui.Operator), boardToken(t, data, ui.Viewer)
	if strings.Contains(stderr.String(), op) || strings.Contains(stderr.String(), viewer) {
		t.Fatalf("the log holds a token:\n%s", stderr.String())
	}
	getJSON(t, web+"/api/jobs", func(code int, _ map[string]any) bool { return code == http.StatusUnauthorized })
	// Ready (200) comes before the coordinator has gone live: wait for live.
	hz := getJSON(t, web+"/healthz", func(code int, b map[string]any) bool { return code == 200 && b["role"] == "live" })
	if hz["role"] != "live" || hz["coordinator"] != "c1" {
		t.Fatalf("healthz %v", hz)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Request("tenure.in.worker.w1.report-42.acquire", []byte(`{"v":1,"lease_ms":30000}`), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	hasJob := func(code int, b map[string]any) bool {
		rows, _ := b["rows"].([]any)
		return code == 200 && len(rows) == 1 && rows[0].(map[string]any)["holder"] == "w1"
	}
	getJSONAs(t, web+"/api/jobs", op, hasJob)
	resp, err := http.Get(web + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"tenure_inputs_folded_total", "tenure_append_latency_seconds_count", `tenure_coordinator_live{coordinator="c1"} 1`, `tenure_decisions_total{kind="granted",reason="ok"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// The UI on its own, reading the same server, with the viewer's token
	// of the serve's data directory; read-only.
	go func() {
		done <- run(ctx, []string{"ui", "--nats-url", natsURL, "--http", "127.0.0.1:0", "--ui-token-file", filepath.Join(data, ui.ViewerTokenFile)}, &bytes.Buffer{}, &uiErr)
	}()
	web2 := waitLog(t, &uiErr, regexp.MustCompile(`web UI on (http://127\.0\.0\.1:\d+)/`))
	hz = getJSON(t, web2+"/healthz", func(code int, b map[string]any) bool { return code == 200 })
	if hz["role"] != "live" || hz["coordinator"] != "c1" {
		t.Fatalf("standalone healthz %v", hz)
	}
	getJSONAs(t, web2+"/api/jobs", viewer, hasJob)
	getJSONAs(t, web2+"/api/config", viewer, func(code int, b map[string]any) bool {
		return code == 200 && b["actions"] == false && b["role"] == "viewer"
	})
	getJSONAs(t, web2+"/api/jobs", op, func(code int, _ map[string]any) bool { return code == http.StatusUnauthorized }) // not one of its tokens

	cancel()
	for range 2 {
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("exit %d:\n%s\n%s", code, stderr.String(), uiErr.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatal("did not stop")
		}
	}
}

// `tenure serve --partitions 2 --http` serves the web UI of every
// partition next to its coordinators: /healthz reports a live coordinator
// for each partition, the board lists the jobs of both partitions with
// their partition, a job page reads its own partition's streams, and
// /metrics labels the coordinators by partition.
func TestServePartitionedHTTP(t *testing.T) {
	var stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	data := t.TempDir()
	go func() {
		done <- run(ctx, []string{"serve", "--data", data, "--listen", "127.0.0.1:-1", "--sync", "interval", "--id", "c1",
			"--partitions", "2", "--http", "127.0.0.1:0"}, &bytes.Buffer{}, &stderr)
	}()
	natsURL := waitLog(t, &stderr, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	web := waitLog(t, &stderr, regexp.MustCompile(`web UI on (http://127\.0\.0\.1:\d+)/`))
	// Ready (200) comes before the coordinator has gone live: wait for live.
	hz := getJSON(t, web+"/healthz", func(code int, b map[string]any) bool { return code == 200 && b["role"] == "live" })
	if parts, _ := hz["partitions"].([]any); hz["role"] != "live" || hz["coordinator"] != "c1" || len(parts) != 2 {
		t.Fatalf("healthz %v", hz)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// One job in each partition (events.PartitionOf).
	jobs := map[string]string{}
	for i := 0; len(jobs) < 2; i++ {
		job := fmt.Sprintf("report-%d", i)
		k := fmt.Sprint(events.PartitionOf(job, 2))
		if !slices.Contains(slices.Collect(maps.Values(jobs)), k) {
			jobs[job] = k
		}
	}
	for job := range jobs {
		// A six-token subject: the server maps it to the job's partition.
		if _, err := nc.Request("tenure.in.worker.w1."+job+".acquire", []byte(`{"v":1,"lease_ms":30000}`), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	op := boardToken(t, data, ui.Operator)
	getJSONAs(t, web+"/api/jobs", op, func(code int, b map[string]any) bool {
		rows, _ := b["rows"].([]any)
		if code != 200 || len(rows) != 2 {
			return false
		}
		for _, r := range rows {
			r := r.(map[string]any)
			if r["holder"] != "w1" || r["partition"] != jobs[r["id"].(string)] {
				return false
			}
		}
		return true
	})
	for job, k := range jobs {
		h := getJSONAs(t, web+"/api/jobs/"+job, op, func(code int, b map[string]any) bool { return code == 200 })
		inputs, _ := h["inputs"].([]any)
		if len(inputs) != 1 || !strings.HasSuffix(inputs[0].(map[string]any)["subject"].(string), ".acquire."+k) {
			t.Fatalf("job page of %s (partition %s): %v", job, k, h)
		}
	}
	resp, err := http.Get(web + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`tenure_coordinator_live{coordinator="c1",partition="0"} 1`, `tenure_coordinator_live{coordinator="c1",partition="1"} 1`,
		`tenure_decisions_total{kind="granted",reason="ok"} 2`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Each partition's coordinator feeds series of its own.
	for _, k := range []string{"0", "1"} {
		for _, re := range []string{`tenure_inputs_folded_total{partition="` + k + `"} [1-9]`, `tenure_decisions_appended_total{partition="` + k + `"} [1-9]`,
			`tenure_append_latency_seconds_count{partition="` + k + `"} [1-9]`, `tenure_fold_lag_seconds{partition="` + k + `"} `} {
			name, value, _ := strings.Cut(re, "} ")
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name+"} ") + value).Match(metrics) {
				t.Errorf("/metrics lacks %s", re)
			}
		}
	}
	if regexp.MustCompile(`(?m)^tenure_(inputs_folded_total|fold_lag_seconds|decisions_appended_total) `).Match(metrics) ||
		strings.Contains(string(metrics), `partition=""`) {
		t.Errorf("/metrics has coordinator series without their partition:\n%s", metrics)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("did not stop")
	}
}

func TestUIUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"ui", "--http", ""},
		{"ui", "--ui-as", "a.b"},
		{"ui", "--prefix", "a b"},
		{"ui", "extra"},
		{"serve", "--ui-actions"},
		{"serve", "--http", "127.0.0.1:0", "--ui-credential", "x.creds.json"}, // without --ui-actions
		{"serve", "--http", "127.0.0.1:0", "--ui-token-file", "a", "--ui-token-dir", "b"},
		{"serve", "--http", "127.0.0.1:0", "--nats-url", "nats://127.0.0.1:1"}, // no data directory for the tokens
		{"ui", "--http", "127.0.0.1:0"},                                        // no token
	} {
		if code := run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
			t.Errorf("tenure %v: exit %d, want 2", args, code)
		}
	}
}
