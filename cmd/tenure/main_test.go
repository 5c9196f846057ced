package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// syncBuffer is a bytes.Buffer safe for the logger and the test at once.
type syncBuffer = testutil.LockedBuffer

// errNotYet is the error of a testutil.Poll check whose failure the
// caller reports itself.
var errNotYet = errors.New("not yet")

// statusLive asks a coordinator's status service (subject
// tenure.status.<id>, or tenure.status.<id>.<partition>) whether it is
// live: nil if it says so, else why not.
func statusLive(nc *nats.Conn, subject string) error {
	resp, err := nc.Request(subject, nil, time.Second)
	if err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	if !strings.Contains(string(resp.Data), `"live":true`) {
		return fmt.Errorf("%s: %s", subject, resp.Data)
	}
	return nil
}

// `tenure serve` with the embedded server: it logs where to connect, a
// worker acquiring a lease gets its verdict, and SIGINT (ctx) stops it with
// exit status 0.
func TestServeEmbedded(t *testing.T) {
	var stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:-1", "--sync", "interval", "--id", "c1"}, &bytes.Buffer{}, &stderr)
	}()
	url := waitLog(t, &stderr, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	// The status service says when the coordinator is live (streams created,
	// default policy appended).
	if err := testutil.Poll(20*time.Second, func() error { return statusLive(nc, "tenure.status.c1") }); err != nil {
		t.Fatalf("coordinator not live: %v\n%s", err, stderr.String())
	}
	ack, err := js.Publish(ctx, "tenure.in.worker.w1.report-42.acquire", []byte(`{"v":1,"lease_ms":30000}`))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, "TENURE_OUT", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"tenure.out.w1.report-42.>"}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("no verdict: %v\n%s", err, stderr.String())
	}
	d, err := events.DecodeDecision(m.Data())
	if err != nil {
		t.Fatal(err)
	}
	if d.Cause != ack.Sequence || d.Kind != events.KindGranted || d.Job.Holder != "w1" {
		t.Fatalf("verdict %+v", d)
	}
	// tenure status sees the live coordinator; tenure watch replays the verdict.
	var out bytes.Buffer
	if code := run(ctx, []string{"status", "--nats-url", url}, &out, &stderr); code != 0 || !regexp.MustCompile(`c1\s+live`).MatchString(out.String()) {
		t.Fatalf("status exit %d:\n%s", code, out.String())
	}
	out.Reset()
	if code := run(ctx, []string{"watch", "--nats-url", url, "--all", "--job", "report-42", "-n", "1", "--format", "json"}, &out, &stderr); code != 0 {
		t.Fatalf("watch exit %d:\n%s", code, stderr.String())
	}
	if w, err := events.DecodeDecision(bytes.TrimSpace(out.Bytes())); err != nil || w.Kind != events.KindGranted || w.Cause != ack.Sequence {
		t.Fatalf("watch printed %q (%v)", out.String(), err)
	}
	out.Reset()
	if code := run(ctx, []string{"watch", "--nats-url", url, "--all", "--holder", "w1", "-n", "1"}, &out, &stderr); code != 0 || !strings.Contains(out.String(), "granted") {
		t.Fatalf("watch table exit %d:\n%s\n%s", code, out.String(), stderr.String())
	}
	// Operator commands print the verdict; a refused one exits 1.
	out.Reset()
	if code := run(ctx, []string{"offer", "--nats-url", url, "--job", "j9", "--holder", "w2", "--lease", "10s"}, &out, &stderr); code != 0 || !strings.Contains(out.String(), "offered ok") {
		t.Fatalf("offer exit %d: %s", code, out.String())
	}
	// A duration the policy does not allow: the verdict, then the limits
	// of the policy in force.
	out.Reset()
	if code := run(ctx, []string{"offer", "--nats-url", url, "--job", "j10", "--holder", "w2", "--lease", "100h"}, &out, &stderr); code != 1 ||
		!strings.Contains(out.String(), "duration_out_of_policy") || !strings.Contains(out.String(), "the policy in force now allows leases of 100ms to") {
		t.Fatalf("offer out of policy exit %d: %s", code, out.String())
	}
	out.Reset()
	if code := run(ctx, []string{"offer", "--nats-url", url, "--job", "j9", "--holder", "w3"}, &out, &stderr); code != 1 || !strings.Contains(out.String(), "rejected lease_held") {
		t.Fatalf("second offer exit %d: %s", code, out.String())
	}
	out.Reset()
	if code := run(ctx, []string{"cancel", "--nats-url", url, "--job", "j9", "--json"}, &out, &stderr); code != 0 || !strings.Contains(out.String(), `"reason":"offer_withdrawn"`) {
		t.Fatalf("cancel exit %d: %s", code, out.String())
	}
	if code := run(ctx, []string{"resolve", "--nats-url", url, "--job", "j9", "--action", "settle", "--outcome", "SUCCESS"}, &out, &stderr); code != 2 {
		t.Fatalf("settle SUCCESS: exit %d, want 2", code)
	}
	// A retention (rules revision 3, which serve moved the log to): the
	// withdrawn offer of j9 ended long enough ago to be retired at once.
	out.Reset()
	if code := run(ctx, []string{"policy", "--nats-url", url, "--retain", "1ms"}, &out, &stderr); code != 0 || !strings.Contains(out.String(), "policy_set ok") {
		t.Fatalf("policy --retain exit %d: %s", code, out.String())
	}
	out.Reset()
	if code := run(ctx, []string{"watch", "--nats-url", url, "--all", "--job", "j9", "--kind", "retired", "-n", "1", "--format", "json"}, &out, &stderr); code != 0 {
		t.Fatalf("watch for the retirement exit %d:\n%s", code, stderr.String())
	}
	if w, err := events.DecodeDecision(bytes.TrimSpace(out.Bytes())); err != nil || w.Kind != events.KindRetired || w.Job.State != events.StateCancelled {
		t.Fatalf("retirement: watch printed %q (%v)", out.String(), err)
	}
	out.Reset()
	if code := run(ctx, []string{"offer", "--nats-url", url, "--job", "j9", "--holder", "w3"}, &out, &stderr); code != 0 || !strings.Contains(out.String(), "offered ok") {
		t.Fatalf("offer of a retired id exit %d: %s", code, out.String())
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d:\n%s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// Every command-line mistake exits 2 and says what is wrong on stderr.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{}, "usage: tenure <command>"},
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"serve", "--sync", "sometimes"}, "tenure serve: --sync must be always or interval"},
		{[]string{"serve", "--log-format", "xml"}, "xml"},
		{[]string{"serve", "extra"}, `tenure serve: unexpected argument "extra"`},
		{[]string{"serve", "--bogus"}, "tenure serve: flag provided but not defined: -bogus (see tenure serve --help)\n"},
		{[]string{"serve", "--leader-ttl", "soon"}, "tenure serve: invalid value \"soon\" for flag -leader-ttl: parse error (see tenure serve --help)\n"},
		{[]string{"offer", "--bogus"}, "tenure offer: flag provided but not defined: -bogus (see tenure offer --help)\n"},
		{[]string{"audit", "--bogus"}, "tenure audit: flag provided but not defined: -bogus (see tenure audit --help)\n"},
		{[]string{"auth", "init", "--bogus"}, "tenure auth: flag provided but not defined: -bogus (see tenure auth init --help)\n"},
		{[]string{"cluster", "up", "--bogus"}, "tenure cluster: flag provided but not defined: -bogus (see tenure cluster up --help)\n"},
		{[]string{"cluster", "nope"}, `unknown cluster command "nope"`},
		{[]string{"policy", "--retain", "-1s"}, "--retain must be 0 to"},
		{[]string{"policy", "--retain", "1500us"}, "--retain is whole milliseconds"},
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), c.args, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), c.says) {
			t.Errorf("tenure %v: exit %d, want 2 and %q on stderr:\n%s", c.args, code, c.says, stderr.String())
		}
		// A flag error is that one line, not the usage under it.
		if strings.Contains(c.says, "(see tenure") && stderr.String() != c.says {
			t.Errorf("tenure %v: want only %q on stderr, got:\n%s", c.args, c.says, stderr.String())
		}
	}
}

// Asking for help is not a mistake: exit 0, and the usage on stderr.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"cluster", "--help"}, {"cluster", "-h"}, {"auth", "--help"}, {"serve", "-h"}, {"policy", "-h"}} {
		var stderr bytes.Buffer
		if code := run(context.Background(), args, &bytes.Buffer{}, &stderr); code != 0 || !strings.Contains(stderr.String(), "tenure") {
			t.Errorf("tenure %v: exit %d, want 0 and a usage:\n%s", args, code, stderr.String())
		}
	}
}

// `tenure demo` plays every decisive scenario of the seeds against a real
// embedded server and coordinator, and exits 0 only if each ended as the
// seeds require; --data keeps the log for an audit. Its output fits a
// terminal of 120 columns, labels its columns, gives times to the
// millisecond, explains every input number no decision line shows, and
// names no document outside the repository.
func TestDemo(t *testing.T) {
	var out, errb syncBuffer
	dir := t.TempDir()
	if code := run(context.Background(), []string{"demo", "--data", dir}, &out, &errb); code != 0 {
		t.Fatalf("demo exit %d:\n%s\n%s", code, out.String(), errb.String())
	}
	s := out.String()
	for _, want := range []string{"all 5 scenarios ended as the protocol requires", "stale_generation", "late_progress", "progress_after_cancel", "result_after_expiry", "settled"} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if strings.Contains(s, "FAIL") {
		t.Errorf("a scenario failed:\n%s", s)
	}
	for i, line := range strings.Split(s, "\n") {
		if n := utf8.RuneCountInString(line); n > 120 {
			t.Errorf("line %d has %d columns, more than 120:\n%s", i+1, n, line)
		}
	}
	// Every scenario's decision lines under a header naming their columns.
	header := regexp.MustCompile(`(?m)^  TIME \(UTC\)\s+INPUT\s+DECISION\s+REASON\s+FROM, VERB\s+JOB\s+GEN\s+STATE$`)
	if n := len(header.FindAllString(s, -1)); n != 5 {
		t.Errorf("%d headers of decision lines, want one per scenario:\n%s", n, s)
	}
	if !regexp.MustCompile(`(?m)^  \d\d:\d\d:\d\d\.\d{3}  #3 +granted +ok +worker/sched-a acquire +planner-[0-9a-f]{4} +1 +ACTIVE$`).MatchString(s) {
		t.Errorf("no decision line for input 3 in its columns:\n%s", s)
	}
	// The evidence matrix: one block per job, every field under its
	// label, times to the millisecond.
	for _, label := range projector.MatrixColumns {
		if n := strings.Count(s, "  "+label+"  "); label != "Job ID" && n != 5 {
			t.Errorf("the matrix labels %q %d times, want once per job", label, n)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^Job ID  [a-z0-9-]+$`).FindAllString(s, -1)); n != 5 {
		t.Errorf("%d job blocks in the matrix, want 5", n)
	}
	if !regexp.MustCompile(`Issued At +\d\d:\d\d:\d\d\.\d{3}\n`).MatchString(s) {
		t.Errorf("the matrix gives no issue time to the millisecond:\n%s", s)
	}
	// Inputs 1 and 2 (the rules and the default policy) show no decision
	// line: each has a line saying what it is. Every other number has its
	// decision line.
	for _, re := range []string{`(?m)^  #1 +coord/demo rules: `, `(?m)^  #2 +coord/demo policy: `} {
		if !regexp.MustCompile(re).MatchString(s) {
			t.Errorf("no line matches %s:\n%s", re, s)
		}
	}
	for seq := 3; seq <= 31; seq++ {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^  (\d\d:\d\d:\d\d\.\d{3}  )?#%d[ .]`, seq)).MatchString(s) {
			t.Errorf("input %d is neither shown nor explained:\n%s", seq, s)
		}
	}
	// The seeds are not in the repository.
	if strings.Contains(strings.ToLower(s), "seed") {
		t.Errorf("the output refers to the seeds, which are not in the repository:\n%s", s)
	}
}

// A coordinator that will not go live says why and what to do, in its log
// and in tenure status, and serve keeps answering status until it is
// stopped (exit 1): here the decision stream holds a decision that no fold
// of the input stream derives.
func TestServeRefusalExplained(t *testing.T) {
	dir := t.TempDir()
	srv, err := embedded.Start(embedded.Config{DataDir: dir, Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := streams.Ensure(ctx, js, streams.Topology{}, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "tenure.out.w1.j1.granted", []byte(`{"v":1,"cause":1}`)); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	srv.Shutdown()

	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--data", dir, "--listen", "127.0.0.1:-1", "--sync", "interval", "--id", "c1"}, &bytes.Buffer{}, &stderr)
	}()
	url := waitServing(t, &stderr, done, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	waitServing(t, &stderr, done, regexp.MustCompile(`(refusing to go live)`))
	if !strings.Contains(stderr.String(), "tenure audit") {
		t.Errorf("the log does not say what to do:\n%s", stderr.String())
	}
	var out bytes.Buffer
	if code := run(ctx, []string{"status", "--nats-url", url}, &out, &stderr); code != 0 {
		t.Fatalf("status exit %d:\n%s\n%s", code, out.String(), stderr.String())
	}
	if !regexp.MustCompile(`c1\s+refused`).MatchString(out.String()) || !strings.Contains(out.String(), "What to do") || !strings.Contains(out.String(), "tenure audit") {
		t.Fatalf("status does not explain the refusal:\n%s", out.String())
	}
	t.Logf("tenure status:\n%s", out.String())
	cancel()
	select {
	case code := <-done:
		if code != 1 {
			t.Fatalf("serve exited %d after a refusal, want 1", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// With --format csv or json, tenure demo's stdout is the evidence matrix
// alone, for a program to read (a CSV of a header and one row per job, or
// one JSON object per line); the story and the verdicts go to stderr.
func TestDemoMachineFormats(t *testing.T) {
	for _, format := range []string{"csv", "json"} {
		var out, errb syncBuffer
		if code := run(context.Background(), []string{"demo", "--format", format}, &out, &errb); code != 0 {
			t.Fatalf("demo --format %s: exit %d:\n%s\n%s", format, code, out.String(), errb.String())
		}
		if !strings.Contains(errb.String(), "all 5 scenarios ended as the protocol requires") || !strings.Contains(errb.String(), "starting an embedded nats-server") {
			t.Errorf("demo --format %s: the story is not on stderr:\n%s", format, errb.String())
		}
		switch format {
		case "csv":
			rows, err := csv.NewReader(strings.NewReader(out.String())).ReadAll()
			if err != nil || len(rows) != 6 || rows[0][0] != "Job ID" {
				t.Errorf("demo --format csv: stdout is not a header and 5 rows (%v):\n%s", err, out.String())
			}
		case "json":
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			for _, line := range lines {
				if !json.Valid([]byte(line)) {
					t.Errorf("demo --format json: stdout line %q is not JSON", line)
				}
			}
			if len(lines) != 5 {
				t.Errorf("demo --format json: %d lines, want one per job:\n%s", len(lines), out.String())
			}
		}
	}
}

// tenure watch prints its table a line at a time, each as it comes, and
// still in columns: every field of every line starts where its header's
// label does, whatever the lengths of kinds, reasons, states and of job
// ids and holders up to 12 and 8 characters (a tabwriter flushed after
// each line aligned nothing); a longer id widens its column from its line
// on.
func TestWatchColumnsAlign(t *testing.T) {
	url, nc, _ := serveForLog(t, "--snapshot-every", "-1") // no checkpoint among the decisions
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	for _, in := range []struct{ subject, body string }{
		{"tenure.in.worker.w1.a.acquire", `{"v":1,"lease_ms":600000}`},
		{"tenure.in.worker.worker-9.a.acquire", `{"v":1,"lease_ms":600000}`},
		{"tenure.in.worker.w1.report-42.acquire", `{"v":1,"lease_ms":600000}`},
		{"tenure.in.worker.w2.b.renew", `{"v":1,"lease_id":"L1-x","generation":1,"renew_seq":1}`},
		{"tenure.in.worker.w1.a-job-id-longer-than-its-column.acquire", `{"v":1,"lease_ms":600000}`},
		{"tenure.in.worker.w1.c.acquire", `{"v":1,"lease_ms":600000}`},
	} {
		if _, err := js.Publish(ctx, in.subject, []byte(in.body)); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"watch", "--all", "-n", "8", "--nats-url", url}, &out, &errb); code != 0 {
		t.Fatalf("watch: exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	starts := func(line string) []int {
		var s []int
		for i := range line {
			if line[i] != ' ' && (i == 0 || line[i-1] == ' ') {
				s = append(s, i)
			}
		}
		return s
	}
	// (The header's eleventh column, DETAIL, is empty on these lines.)
	want := starts(lines[0])
	if len(lines) != 9 || len(want) != 11 {
		t.Fatalf("want a header of 11 columns and 8 lines:\n%s", out.String())
	}
	want = want[:10]
	for i, line := range lines[1:] {
		if strings.Contains(line, "a-job-id-longer") { // from the long job id on: aligned with its line
			want = starts(line)
		}
		if got := starts(line); !slices.Equal(got, want) {
			t.Errorf("line %d: fields start at %v, want %v:\n%s", i+1, got, want, out.String())
			break
		}
	}
}
