package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/api"
	"github.com/maknow/tenure/internal/testutil"
)

// The queue commands against a real tenure serve: submit (its flags, a
// resent submit, a conflicting one, mistakes on the command line as one
// line), a worker pulling (a bare NATS client) and never ACKing, tenure
// jobs ls and get and tenure queues through the state API, and tenure
// resolve --action retry and discard of the DEAD job.
func TestQueueCommands(t *testing.T) {
	log, _ := serveArgs(t, "--data", t.TempDir(), "--listen", "127.0.0.1:-1", "--sync", "interval")
	url := waitLog(t, log, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	waitLog(t, log, regexp.MustCompile(`(INF live|msg=live) `))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append(args, "--nats-url", url)
		if code := run(ctx, args, &out, &errOut); code != want {
			t.Fatalf("tenure %s: exit %d, want %d:\n%s%s", strings.Join(args, " "), code, want, out.String(), errOut.String())
		}
		if want == 2 && strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("tenure %s: %q, want one line", strings.Join(args, " "), errOut.String())
		}
		return out.String() + errOut.String()
	}

	out := cmd(0, "submit", "mail-1", "--queue", "emails", "--max-attempts", "1", "--lease", "300ms", "--payload", "to: a@example.com")
	if !strings.Contains(out, "submitted ok") {
		t.Fatalf("submit: %s", out)
	}
	out = cmd(0, "submit", "mail-1", "--queue", "emails", "--max-attempts", "1", "--lease", "300ms", "--payload", "to: a@example.com")
	if !strings.Contains(out, "duplicate duplicate_submit") || !strings.Contains(out, "nothing changed") {
		t.Fatalf("the same submit again: %s", out)
	}
	if out = cmd(1, "submit", "mail-1", "--queue", "emails"); !strings.Contains(out, "submit_conflicts") {
		t.Fatalf("a conflicting submit: %s", out)
	}
	payload := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(payload, []byte("line 1\nline 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd(0, "submit", "--queue", "emails", "--priority", "9", "--payload-file", payload, "mail-2", "--lease", "2m", "--backoff", "2s", "--backoff-max", "1m")
	for _, args := range [][]string{
		{"submit", "x", "--queue", "emails", "--run-at", "tomorrow"},
		{"submit", "x", "--queue", "emails", "--run-at", "2031-02-03T04:05:06Z", "--delay", "1s"},
		{"submit", "x", "--queue", "emails", "--delay", "400d"},
		{"submit", "x", "--queue", "emails", "--delay", "9000h"},
		{"submit", "x", "--queue", "emails", "--unique-key", "a.b"},
		{"submit", "x", "--queue", "emails", "--unique-for", "1h"},
		{"submit", "x", "--queue", "emails", "--unique-key", "k", "--unique-for", "800h"},
		{"submit", "x", "--queue", "emails", "--concurrency-key", "a.b"},
		{"limit", "--concurrency-key", "k", "--max-active", "1"},                                // no queue
		{"limit", "--queue", "emails"},                                                          // nothing to set
		{"limit", "--queue", "emails", "--max-active", "1"},                                     // no key
		{"limit", "--queue", "emails", "--concurrency-key", "k", "--max-active", "-1"},          // below the bound
		{"limit", "--queue", "emails", "--concurrency-key", "k", "--max-active", "1000001"},     // past it
		{"limit", "--queue", "emails", "--rate", "5"},                                           // no period
		{"limit", "--queue", "emails", "--period", "1s"},                                        // no rate
		{"limit", "--queue", "emails", "--rate", "0", "--period", "1s"},                         // below the bound
		{"limit", "--queue", "emails", "--rate", "1000001", "--period", "1s"},                   // past it
		{"limit", "--queue", "emails", "--rate", "1", "--period", "1500us"},                     // not whole ms
		{"limit", "--queue", "emails", "--rate", "1", "--period", "721h"},                       // past 30 days
		{"limit", "--queue", "emails", "--concurrency-key", "k", "--lift", "--max-active", "1"}, // both
		{"limit", "--queue", "emails", "--concurrency-key", "a.b", "--max-active", "1"},
		{"submit", "mail-3"},                                     // no queue
		{"submit", "--queue", "emails"},                          // no job
		{"submit", "a", "b", "--queue", "emails"},                // two jobs
		{"submit", "a.b", "--queue", "emails"},                   // not a token
		{"submit", "x", "--queue", "emails", "--priority", "10"}, // out of range
		{"submit", "x", "--queue", "emails", "--backoff", "1m", "--backoff-max", "1s"},
		{"submit", "x", "--queue", "emails", "--lease", "1500us"},
		{"submit", "x", "--queue", "emails", "--payload", "a", "--payload-file", payload},
		{"resolve", "--job", "x", "--action", "resurrect"},
		{"resolve", "--queue", "emails", "--action", "retry"},                                     // no --all-dead
		{"resolve", "--all-dead", "--action", "retry"},                                            // no queue
		{"resolve", "--all-dead", "--queue", "emails", "--action", "settle"},                      // not a DEAD job's action
		{"resolve", "--all-dead", "--queue", "emails", "--action", "retry", "--job", "x"},         // both
		{"resolve", "--all-dead", "--queue", "emails", "--action", "retry", "--last-reason", "z"}, // no such reason
		{"resolve", "--all-dead", "--queue", "emails", "--action", "retry", "--receipts", "r"},    // not taken: it would be silently dropped
		{"jobs"}, {"jobs", "rm"}, {"jobs", "get"}, {"jobs", "ls", "--state", "SLEEPING"}, {"jobs", "ls", "--limit", "201"},
	} {
		cmd(2, args...)
	}

	// mail-2 (priority 9) is cancelled while QUEUED; then w1 announces one
	// slot on emails, ACKs mail-1 and never renews it: its only attempt's
	// lease of 300 ms expires, and it ends DEAD.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cmd(0, "cancel", "--job", "mail-2", "--reason", "not now")
	if _, err := nc.Request("tenure.in.worker.w1._.pull", []byte(`{"v":1,"queue":"emails","slots":1,"ttl_ms":600000}`), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// The projection of job, nil while the API does not have it (it
	// catches up with the decision stream after serve's start).
	getJSON := func(job string) map[string]any {
		t.Helper()
		var out, errOut bytes.Buffer
		if run(ctx, []string{"jobs", "get", job, "--json", "--nats-url", url}, &out, &errOut) != 0 {
			return nil
		}
		var r struct {
			Job map[string]any `json:"job"`
		}
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		return r.Job
	}
	// ackOffer ACKs generation gen of mail-1 as w1, once the API shows it offered.
	ackOffer := func(gen float64) {
		t.Helper()
		var lease string
		testutil.WaitFor(t, 20*time.Second, "mail-1 offered to w1", func() bool {
			j := getJSON("mail-1")
			lease, _ = j["lease_id"].(string)
			return j["state"] == "OFFERED" && j["generation"] == gen
		})
		if _, err := nc.Request("tenure.in.worker.w1.mail-1.ack", fmt.Appendf(nil, `{"v":1,"lease_id":%q,"generation":%d}`, lease, int(gen)), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	ackOffer(1)
	testutil.WaitFor(t, 20*time.Second, "mail-1 DEAD", func() bool { return getJSON("mail-1")["state"] == "DEAD" })
	// The expiry was w1's refusal (rules revision 5): its announcement was
	// withdrawn and it is held for a second. It announces again.
	if _, err := nc.Request("tenure.in.worker.w1._.pull", []byte(`{"v":1,"queue":"emails","slots":1,"ttl_ms":600000}`), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, "w1's announcement in the API", func() bool {
		var o, e bytes.Buffer
		var qs api.QueuesReply
		return run(ctx, []string{"queues", "--json", "--nats-url", url}, &o, &e) == 0 &&
			json.Unmarshal(o.Bytes(), &qs) == nil && len(qs.Queues) == 1 && qs.Queues[0].Workers == 1
	})
	if j := getJSON("mail-2"); j["state"] != "CANCELLED" || j["payload"] != "line 1\nline 2\n" || j["priority"] != 9.0 || j["backoff_ms"] != 2000.0 {
		t.Fatalf("mail-2: %v", j)
	}
	out = cmd(0, "jobs", "get", "mail-1")
	for _, want := range []string{"job mail-1 after decision ", "(dead/lease_expired of input ", `"state": "DEAD"`, `"queue": "emails"`, `"last_reason": "lease_expired"`} {
		if !strings.Contains(out, want) {
			t.Errorf("jobs get mail-1 lacks %q:\n%s", want, out)
		}
	}
	out = cmd(0, "jobs", "ls", "--queue", "emails")
	for _, want := range []string{"JOB", "STATE", "mail-1", "DEAD", "1/1", "mail-2", "CANCELLED", "2 of 2 jobs"} {
		if !strings.Contains(out, want) {
			t.Errorf("jobs ls --queue emails lacks %q:\n%s", want, out)
		}
	}
	if out = cmd(0, "jobs", "ls", "--queue", "emails", "--limit", "1"); !strings.Contains(out, "1 of 2 jobs\nmore: tenure jobs ls --queue emails --limit 1 --after mail-1\n") {
		t.Errorf("jobs ls --limit 1:\n%s", out)
	}
	if out = cmd(0, "jobs", "ls", "--state", "dead"); !strings.Contains(out, "mail-1") || strings.Contains(out, "mail-2") {
		t.Errorf("jobs ls --state dead:\n%s", out)
	}
	out = cmd(0, "queues")
	if !regexp.MustCompile(`(?m)^emails +0 +0 +0 +0 +1 +0 +0 +1 +1 +1 `).MatchString(out) {
		t.Errorf("queues:\n%s", out)
	}
	if out = cmd(0, "queues", "--queue", "emails"); !regexp.MustCompile(`(?m)^w1 +- +1 +0 +\d{4}-`).MatchString(out) {
		t.Errorf("queues --queue emails:\n%s", out)
	}
	// The limits in force on emails (rules revision 9) are listed beneath
	// its workers: its key acct-1's max active beside its live leases, and
	// the queue's own rate.
	cmd(0, "limit", "--queue", "emails", "--concurrency-key", "acct-1", "--max-active", "3")
	cmd(0, "limit", "--queue", "emails", "--rate", "10", "--period", "1m")
	testutil.WaitFor(t, 20*time.Second, "the limits of emails in tenure queues --queue emails", func() bool {
		var o, e bytes.Buffer
		out = ""
		if run(ctx, []string{"queues", "--queue", "emails", "--nats-url", url}, &o, &e) == 0 {
			out = o.String()
		}
		return strings.Contains(out, "CONCURRENCY KEY") && regexp.MustCompile(`(?m)^\(the queue\) +- +- +- +10 per 1m0s\n+acct-1 +- +3 +0 +-\n`).MatchString(out)
	})
	var qs api.QueuesReply
	if err := json.Unmarshal([]byte(cmd(0, "queues", "--json")), &qs); err != nil || len(qs.Queues) != 1 || qs.Queues[0].Dead != 1 {
		t.Fatalf("queues --json: %v %+v", err, qs)
	}

	// The operator retries it (offered to w1 again, DEAD again) and then
	// discards it.
	if out = cmd(0, "resolve", "--job", "mail-1", "--action", "retry", "--reason", "the mail server is back"); !strings.Contains(out, "resolved retried") {
		t.Fatalf("retry: %s", out)
	}
	ackOffer(2)
	testutil.WaitFor(t, 20*time.Second, "mail-1 DEAD again", func() bool {
		j := getJSON("mail-1")
		return j["state"] == "DEAD" && j["generation"] == 2.0
	})
	if out = cmd(0, "resolve", "--job", "mail-1", "--action", "discard"); !strings.Contains(out, "resolved discarded") {
		t.Fatalf("discard: %s", out)
	}
	if out = cmd(1, "resolve", "--job", "mail-1", "--action", "discard"); !strings.Contains(out, "no_such_job") {
		t.Fatalf("discard again: %s", out)
	}
	testutil.WaitFor(t, 10*time.Second, "mail-1 gone from the API", func() bool {
		var o, e bytes.Buffer
		return run(ctx, []string{"jobs", "get", "mail-1", "--nats-url", url}, &o, &e) == 1 && strings.Contains(e.String(), "404 no job mail-1")
	})

	// Scheduled (rules revision 8): queued, ready later.
	if out = cmd(0, "submit", "later-1", "--queue", "reports", "--delay", "1h"); !strings.Contains(out, "submitted ok") || !strings.Contains(out, "delay=1h0m0s") {
		t.Fatalf("submit --delay: %s", out)
	}
	if out = cmd(0, "submit", "later-2", "--queue", "reports", "--run-at", "2031-02-03T04:05:06+01:00"); !strings.Contains(out, "run_at=2031-02-03T03:05:06Z") {
		t.Fatalf("submit --run-at: %s", out)
	}

	// Unique keys (rules revision 8): a second job naming a held key is
	// refused, naming the holder.
	if out = cmd(0, "submit", "export-1", "--queue", "exports", "--unique-key", "user-42", "--unique-for", "1h"); !strings.Contains(out, "unique=user-42 for=1h0m0s") {
		t.Fatalf("submit --unique-key: %s", out)
	}
	if out = cmd(1, "submit", "export-2", "--queue", "exports", "--unique-key", "user-42"); !strings.Contains(out, "duplicate_unique_key") || !strings.Contains(out, "duplicate_of=export-1") {
		t.Fatalf("submit of a held key: %s", out)
	}

	// Concurrency keys and rate limits (rules revision 9).
	if out = cmd(0, "limit", "--queue", "exports", "--concurrency-key", "acct-42", "--max-active", "1", "--rate", "10", "--period", "1s"); !strings.Contains(out, "limit_set ok") || !strings.Contains(out, "limit exports key=acct-42 max_active=1 rate=10/1s") {
		t.Fatalf("limit: %s", out)
	}
	if out = cmd(0, "limit", "--queue", "exports", "--rate", "100", "--period", "1m"); !strings.Contains(out, "limit exports rate=100/1m0s") {
		t.Fatalf("limit of the queue: %s", out)
	}
	if out = cmd(0, "submit", "export-9", "--queue", "exports", "--concurrency-key", "acct-42"); !strings.Contains(out, "conc=acct-42") {
		t.Fatalf("submit --concurrency-key: %s", out)
	}
	if out = cmd(0, "limit", "--queue", "exports", "--concurrency-key", "acct-42", "--lift"); !strings.Contains(out, "limit exports key=acct-42 lifted") {
		t.Fatalf("limit --lift: %s", out)
	}
}

// The README's Queues section, as written, against a real tenure serve:
// its commands in order (the nats CLI's pull as w1), each printing what
// its comment says.
func TestReadmeQueues(t *testing.T) {
	natsBin := natsCLI(t)
	log, _ := serveArgs(t, "--data", t.TempDir(), "--listen", "127.0.0.1:-1", "--sync", "interval")
	url := waitLog(t, log, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	waitLog(t, log, regexp.MustCompile(`(INF live|msg=live) `))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	says := map[string]*regexp.Regexp{
		"submit": regexp.MustCompile(`submitted ok .*mail-1 q=emails`),
		"pull":   regexp.MustCompile(`"stream":"TENURE_IN"`),
		// mail-1 offered (in flight, w1's slot taken), or already back
		// (ready, w1's announcement withdrawn) on a slow machine
		"queues":   regexp.MustCompile(`(?m)^emails +(0 +0 +0 +1 +0 +0 +0 +1 +1 +0|1 +0 +0 +0 +0 +0 +0 +0 +0 +0) `),
		"jobs ls":  regexp.MustCompile(`(?m)^mail-1 +QUEUED +emails +0/1 `),
		"jobs get": regexp.MustCompile(`"last_reason": "ack_deadline_passed",[\s\S]*"payload": "s3://outbox/mail-1.eml"`),
		"cancel":   regexp.MustCompile(`cancel_requested dequeued`),
	}
	ran := 0
	for _, line := range readmeBlock(t, "## Queues", "") {
		words, _ := shellWords(line)
		if len(words) == 0 {
			continue
		}
		ran++
		var out []byte
		key := ""
		switch {
		case words[0] == "nats":
			key = "pull"
			var err error
			out, err = exec.CommandContext(ctx, natsBin, append([]string{"--server", url}, words[1:]...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
		case len(words) > 3 && strings.Join(words[:3], " ") == "go run ./cmd/tenure":
			key = words[3]
			if key == "jobs" && len(words) > 4 {
				key += " " + words[4]
			}
			// What a person reading along sees by the time the line is
			// typed: the offer read by the API, then mail-1 QUEUED again
			// 1 s later.
			switch key {
			case "queues":
				awaitJob(t, ctx, url, "mail-1", `"generation": 1,`)
			case "jobs ls":
				awaitJob(t, ctx, url, "mail-1", `"last_reason": "ack_deadline_passed"`)
			}
			var o, e bytes.Buffer
			if code := run(ctx, append(words[3:], "--nats-url", url), &o, &e); code != 0 {
				t.Fatalf("%s: exit %d\n%s%s", line, code, o.String(), e.String())
			}
			out = o.Bytes()
		default:
			t.Fatalf("the Queues block runs %q: the test does not know it", line)
		}
		re, ok := says[key]
		if !ok {
			t.Fatalf("the Queues block runs %q: the test does not know what it should print", line)
		}
		if !re.Match(out) {
			t.Fatalf("%s printed\n%s\nwant it to match %s", line, out, re)
		}
		t.Logf("%s ->\n%s", line, out)
	}
	if ran != len(says) {
		t.Fatalf("ran %d commands of the Queues block, want %d", ran, len(says))
	}
}

// awaitJob waits until tenure jobs get job prints want.
func awaitJob(t *testing.T, ctx context.Context, url, job, want string) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, job+" "+want, func() bool {
		var o, e bytes.Buffer
		return run(ctx, []string{"jobs", "get", job, "--nats-url", url}, &o, &e) == 0 && strings.Contains(o.String(), want)
	})
}

// tenure submit --jobs against a real tenure serve: many jobs from a file
// in batch submits, job ids taking the flags and JSON lines overriding
// them; one line per verdict, then the count. The same file again: every
// job a duplicate (exit 0); with another lease: every job refused alone
// (exit 1). A mistake on any line publishes nothing (exit 2, naming the
// line).
func TestSubmitJobsFile(t *testing.T) {
	log, _ := serveArgs(t, "--data", t.TempDir(), "--listen", "127.0.0.1:-1", "--sync", "interval")
	url := waitLog(t, log, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	waitLog(t, log, regexp.MustCompile(`(INF live|msg=live) `))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append(args, "--nats-url", url)
		if code := run(ctx, args, &out, &errOut); code != want {
			t.Fatalf("tenure %s: exit %d, want %d:\n%s%s", strings.Join(args, " "), code, want, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
	lines := []string{"# jobs for the reports queue", ""}
	for i := range 300 {
		if i%3 == 0 {
			lines = append(lines, fmt.Sprintf(`{"job":"rep-%d","priority":2,"max_attempts":5,"payload":"r%d"}`, i, i))
		} else {
			lines = append(lines, fmt.Sprintf("rep-%d", i))
		}
	}
	jobsFile := filepath.Join(t.TempDir(), "jobs")
	if err := os.WriteFile(jobsFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := cmd(0, "submit", "--jobs", jobsFile, "--queue", "reports", "--lease", "1m")
	if strings.Count(out, "submitted ok") != 300 || !strings.Contains(out, "300 jobs submitted, 0 already were (the same fields), 0 not submitted") {
		t.Fatalf("submit --jobs: %s", out)
	}
	if out = cmd(0, "submit", "--jobs", jobsFile, "--queue", "reports", "--lease", "1m"); !strings.Contains(out, "0 jobs submitted, 300 already were") {
		t.Fatalf("submit --jobs again: %s", out)
	}
	if out = cmd(1, "submit", "--jobs", jobsFile, "--queue", "reports"); !strings.Contains(out, "0 jobs submitted, 0 already were (the same fields), 300 not submitted") ||
		!strings.Contains(out, "submit_conflicts") {
		t.Fatalf("submit --jobs with another lease: %s", out)
	}
	for i, bad := range []string{"a.b", `{"job":"x","queue":"q","priority":10}`, `{"job":"x","colour":"red"}`, `{"queue":"q"}`, `{"job":"x"} {}`} {
		f := filepath.Join(t.TempDir(), fmt.Sprint("bad", i))
		if err := os.WriteFile(f, []byte("ok-1\n"+bad+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out := cmd(2, "submit", "--jobs", f, "--queue", "reports"); !strings.Contains(out, "line 2") {
			t.Errorf("submit --jobs with %s: %s", bad, out)
		}
	}
	cmd(2, "submit", "x", "--jobs", jobsFile, "--queue", "reports") // a job and a list
	// A batch's jobs take none of revision 8's flow fields.
	for _, flow := range [][]string{{"--run-at", "2026-05-01T03:00:00Z"}, {"--delay", "1m"}, {"--unique-key", "k"}, {"--unique-for", "1m", "--unique-key", "k"}, {"--concurrency-key", "k"}} {
		if out := cmd(2, append([]string{"submit", "--jobs", jobsFile, "--queue", "reports"}, flow...)...); !strings.Contains(out, "single job") {
			t.Errorf("submit --jobs %v: %s", flow, out)
		}
	}

}
