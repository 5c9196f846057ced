package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maknow/tenure/internal/testutil"
)

// natsCLIVersion is the nats CLI the README's tour is written for.
const natsCLIVersion = "v0.5.0"

var (
	natsOnce sync.Once
	natsPath string
	natsErr  error
)

// natsCLI returns the nats CLI: the one on PATH, or one installed with go
// install into the user's cache directory (once per machine; it needs the
// Go module proxy, as the module downloads of the tests do).
func natsCLI(t *testing.T) string {
	t.Helper()
	natsOnce.Do(func() {
		if p, err := exec.LookPath("nats"); err == nil {
			natsPath = p
			return
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		bin := filepath.Join(cache, "tenure-test-tools", "natscli-"+natsCLIVersion)
		natsPath = filepath.Join(bin, "nats")
		if _, err := os.Stat(natsPath); err == nil {
			return
		}
		cmd := exec.Command("go", "install", "github.com/nats-io/natscli/nats@"+natsCLIVersion)
		cmd.Env = append(os.Environ(), "GOBIN="+bin)
		if out, err := cmd.CombinedOutput(); err != nil {
			natsErr = fmt.Errorf("install the nats CLI (go install github.com/nats-io/natscli/nats@%s): %v\n%s", natsCLIVersion, err, out)
		}
	})
	if natsErr != nil {
		t.Fatal(natsErr)
	}
	return natsPath
}

// readmeBlock returns the lines of the first ```sh block after heading in
// README.md.
func readmeBlock(t *testing.T, heading, after string) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, heading)
	if i < 0 {
		t.Fatalf("README.md has no %q", heading)
	}
	s = s[i:]
	if after != "" {
		j := strings.Index(s, after)
		if j < 0 {
			t.Fatalf("README.md has no %q after %q", after, heading)
		}
		s = s[j:]
	}
	start := strings.Index(s, "```sh\n")
	if start < 0 {
		t.Fatalf("no sh block after %q", heading)
	}
	s = s[start+len("```sh\n"):]
	return strings.Split(s[:strings.Index(s, "```")], "\n")
}

// shellWords splits a command line as sh would for the README's commands:
// words separated by spaces, single- or double-quoted strings (no escapes),
// a trailing comment or &.
func shellWords(line string) (words []string, background bool) {
	var cur strings.Builder
	in := false
	var quoted byte // the quote character of a quoted string being read
	flush := func() {
		if in {
			words = append(words, cur.String())
			cur.Reset()
			in = false
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted != 0 && c == quoted:
			quoted = 0
		case quoted != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quoted, in = c, true
		case c == ' ' || c == '\t':
			flush()
		case c == '#':
			flush()
			return words, background
		case c == '&':
			flush()
			background = true
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	flush()
	return words, background
}

// README's five minutes and then its short tour, as written, on one
// tenure serve, with the queue-worker example, the board's API and the
// nats CLI (a client Tenure did not write). The five minutes: the build,
// serve with the board (on free ports, in a fresh directory), the example,
// a submit, jobs ls until the job is COMPLETED, and the token file that
// opens the board, which shows the job and the queue's worker. The tour:
// its PubAck sequences and lease id differ from run to run (they follow
// whatever the log holds before, ticks and checkpoints included), so the
// README shows none; the test copies the lease id it was granted. Then
// the dispatcher and operator commands, each printing its verdict.
func TestReadmeTour(t *testing.T) {
	natsBin := natsCLI(t)
	tenure := tenureBinary(t)
	port, web := freePort(t), "127.0.0.1:"+strconv.Itoa(freePort(t))
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	dir := t.TempDir() // the checkout's top, for ./tenure and tenure-data
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var token string
	var ran []string
	for _, line := range readmeBlock(t, "## Five minutes", "") {
		words, _ := shellWords(line)
		if len(words) == 0 {
			continue
		}
		cmd := strings.Join(words, " ")
		switch {
		case cmd == "go build -v -o tenure ./cmd/tenure":
			// tenureBinary built it.
		case cmd == "./tenure serve --http 127.0.0.1:8080":
			p := &serveProcess{log: &syncBuffer{}, done: make(chan int, 1)}
			p.cmd = exec.Command(tenure, "serve", "--http", web, "--listen", "127.0.0.1:"+strconv.Itoa(port), "--sync", "interval")
			p.cmd.Dir, p.cmd.Stdout, p.cmd.Stderr = dir, p.log, p.log
			if err := p.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { _ = p.cmd.Wait(); p.done <- p.cmd.ProcessState.ExitCode() }()
			t.Cleanup(func() { p.kill(t) })
			waitServing(t, p.log, p.done, liveLine)
		case cmd == "go run ./examples/queue-worker":
			startProcess(t, []string{"NATS_URL=" + url}, exampleBinary(t, "queue-worker"))
		case words[0] == "./tenure" && words[1] == "submit":
			var out, errOut bytes.Buffer
			if code := run(ctx, append(words[1:], "--nats-url", url), &out, &errOut); code != 0 {
				t.Fatalf("%s: exit %d\n%s%s", line, code, out.String(), errOut.String())
			}
		case cmd == "./tenure jobs ls":
			// "4 s later: img-1 COMPLETED, attempt 1/3, held by example-queue-worker"
			done := regexp.MustCompile(`(?m)^img-1\s+COMPLETED\s+thumbnails\s+1/3\s+example-queue-worker\s`)
			var out bytes.Buffer
			if err := testutil.Poll(60*time.Second, func() error {
				out.Reset()
				if code := run(ctx, []string{"jobs", "ls", "--nats-url", url}, &out, &out); code != 0 || !done.Match(out.Bytes()) {
					return fmt.Errorf("exit %d:\n%s", code, out.String())
				}
				return nil
			}); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
		case cmd == "cat tenure-data/board-operator.token":
			b, err := os.ReadFile(filepath.Join(dir, "tenure-data", "board-operator.token"))
			if err != nil {
				t.Fatal(err)
			}
			token = strings.TrimSpace(string(b))
		default:
			t.Fatalf("the five minutes run %q: the test does not know what it should do", line)
		}
		ran = append(ran, cmd)
	}
	if len(ran) != 6 || token == "" {
		t.Fatalf("ran %q of the five minutes, want six commands", ran)
	}
	// The board: img-1 completed by the worker, under the queue thumbnails
	// with the worker's four free slots.
	getJSONAs(t, "http://"+web+"/api/jobs", token, func(code int, b map[string]any) bool {
		rows, _ := b["rows"].([]any)
		return code == 200 && len(rows) == 1 && rows[0].(map[string]any)["id"] == "img-1" &&
			rows[0].(map[string]any)["state"] == "COMPLETED" && rows[0].(map[string]any)["holder"] == "example-queue-worker"
	})
	getJSONAs(t, "http://"+web+"/api/queues", token, func(code int, b map[string]any) bool {
		qs, _ := b["queues"].([]any)
		if code != 200 || len(qs) != 1 {
			return false
		}
		q := qs[0].(map[string]any)
		return q["queue"] == "thumbnails" && q["workers"] == 1.0 && q["free_slots"] == 4.0 && q["completed"] == 1.0
	})

	// The tour, on the same serve.
	var subOut syncBuffer
	var lease string
	var acquired uint64
	pubAck := regexp.MustCompile(`\{"stream":"TENURE_IN","seq":(\d+)\}`)
	ran = nil
	for _, line := range readmeBlock(t, "## A short tour", "") {
		words, bg := shellWords(line)
		if len(words) == 0 {
			continue
		}
		if words[0] != "nats" {
			t.Fatalf("the tour runs %q: only nats commands are expected", line)
		}
		for i, w := range words {
			if lease != "" {
				words[i] = strings.ReplaceAll(w, "LEASE_ID", lease)
			}
		}
		args := append([]string{"--server", url}, words[1:]...)
		cmd := exec.CommandContext(ctx, natsBin, args...)
		if bg {
			cmd.Stdout, cmd.Stderr = &subOut, &subOut
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			// The subscription is made before the next command.
			testutil.WaitFor(t, 10*time.Second, "nats sub to subscribe", func() bool { return strings.Contains(subOut.String(), "Subscribing on") })
			continue
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		ran = append(ran, strings.Join(words, " "))
		m := pubAck.FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("%s: want a PubAck, as the README says:\n%s", line, out)
		}
		seq, _ := strconv.ParseUint(m[1], 10, 64)
		switch words[len(words)-2] {
		case "tenure.in.worker.w1.report-42.acquire":
			// the verdict "granted", with generation 1 and the lease_id, "L<N>-" and 22 characters
			acquired = seq
			var m []string
			testutil.WaitFor(t, 10*time.Second, "the granted verdict", func() bool {
				m = regexp.MustCompile(`tenure\.out\.w1\.report-42\.granted[\s\S]*?"lease_id":"(L` + strconv.FormatUint(seq, 10) + `-[A-Za-z0-9_-]{22})","generation":1`).FindStringSubmatch(subOut.String())
				return m != nil
			})
			lease = m[1]
		case "tenure.in.worker.w1.report-42.renew":
			if seq <= acquired {
				t.Fatalf("%s: PubAck of input %d, want one after the acquire's %d:\n%s", line, seq, acquired, out)
			}
			testutil.WaitFor(t, 10*time.Second, "the renewed verdict", func() bool {
				return strings.Contains(subOut.String(), "tenure.out.w1.report-42.renewed")
			})
		default:
			t.Fatalf("the tour runs %q: the test does not know what it should print", line)
		}
	}
	if len(ran) != 2 || lease == "" || strings.Contains(strings.Join(ran, "\n"), "LEASE_ID") {
		t.Fatalf("ran %q of the tour (lease %q), want the acquire and the renewal with the lease granted", ran, lease)
	}

	// The dispatcher and operator commands: every one works (exit 0) and
	// prints what the README says it does; a watch without -n is given one
	// so that it returns.
	says := map[string]string{
		"offer --job export-9":    "offered ok",
		"cancel --job export-9":   "cancel_requested offer_withdrawn",
		"policy --cancel-timeout": "policy_set ok",
		"policy show":             "cancel-timeout 5s ",
		"cancel --job report-42":  "cancel_requested ok",
		"watch --job report-42":   "unresolved cancel_timeout",
		"resolve --job report-42": "resolved settled",
		"watch --job export-9":    "export-9",
		"status":                  "live",
	}
	seen := map[string]bool{}
	for _, line := range readmeBlock(t, "## A short tour", "The dispatcher and operator side") {
		words, _ := shellWords(line)
		if len(words) == 0 {
			continue
		}
		if len(words) < 4 || strings.Join(words[:3], " ") != "go run ./cmd/tenure" {
			t.Fatalf("the operator block runs %q: want go run ./cmd/tenure commands", line)
		}
		args := append(words[3:], "--nats-url", url)
		if words[3] == "watch" && !slices.Contains(args, "-n") {
			args = append(args, "-n", "1")
		}
		var key string
		for k := range says {
			if strings.HasPrefix(strings.Join(words[3:], " ")+" ", k+" ") {
				key = k
			}
		}
		want, ok := says[key]
		if !ok || seen[key] {
			t.Fatalf("the operator block runs %q: the test does not know what it should print", line)
		}
		seen[key] = true
		var out, errOut bytes.Buffer
		code := run(ctx, args, &out, &errOut)
		t.Logf("%s -> exit %d:\n%s", line, code, out.String())
		// Words, whatever the columns' widths.
		if words := strings.Join(strings.Fields(out.String()), " "); code != 0 || !strings.Contains(words, want) {
			t.Fatalf("%s: exit %d, want 0 and %q:\n%s%s", line, code, want, out.String(), errOut.String())
		}
	}
	if len(seen) != len(says) {
		t.Fatalf("the operator block ran %v, want every one of %v", seen, says)
	}
}
