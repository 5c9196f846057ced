package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/api"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

// tenure resolve --queue Q --all-dead against a real tenure serve: four
// jobs of queue bulk end DEAD (three let expire, one failed); a dry run
// lists them and sends nothing; --last-reason attempt_failed discards
// the failed one alone; a retry of the rest queues each again (each its
// own resolved/retried decision); a second run finds none.
func TestResolveAllDead(t *testing.T) {
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
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ac := api.NewClient(nc, 5*time.Second)
	job := func(id string) (events.Job, bool) {
		r, err := ac.Job(ctx, id)
		var ae *api.Error
		if errors.Is(err, api.ErrNotFound) || errors.As(err, &ae) && ae.Code == 503 { // none, or not read yet
			return events.Job{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		j, err := r.Projection()
		if err != nil {
			t.Fatal(err)
		}
		return j, true
	}
	ids := []string{"dead-1", "dead-2", "dead-3", "dead-4"}
	for _, id := range ids {
		cmd(0, "submit", id, "--queue", "bulk", "--max-attempts", "1", "--lease", "300ms")
	}
	cmd(0, "submit", "live-1", "--queue", "bulk", "--lease", "1m") // not DEAD: left alone
	if _, err := nc.Request("tenure.in.worker.w1._.pull", []byte(`{"v":1,"queue":"bulk","slots":5,"ttl_ms":600000}`), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		var j events.Job
		testutil.WaitFor(t, 20*time.Second, id+" offered to w1", func() bool {
			var ok bool
			j, ok = job(id)
			return ok && j.State == events.StateOffered
		})
		if _, err := nc.Request("tenure.in.worker.w1."+id+".ack", fmt.Appendf(nil, `{"v":1,"lease_id":%q,"generation":1}`, j.LeaseID), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if id == "dead-4" {
			if _, err := nc.Request("tenure.in.worker.w1."+id+".result", fmt.Appendf(nil, `{"v":1,"lease_id":%q,"generation":1,"outcome":"FAILED","detail":"boom"}`, j.LeaseID), 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, id := range ids {
		testutil.WaitFor(t, 20*time.Second, id+" DEAD", func() bool { j, ok := job(id); return ok && j.State == events.StateDead })
	}

	out := cmd(0, "resolve", "--queue", "bulk", "--all-dead", "--action", "retry", "--dry-run")
	if out != "dead-1\ndead-2\ndead-3\ndead-4\n4 DEAD jobs of bulk (a dry run: nothing sent)\n" {
		t.Fatalf("the dry run:\n%s", out)
	}
	if j, _ := job("dead-1"); j.State != events.StateDead {
		t.Fatalf("the dry run changed dead-1: %s", j.State)
	}
	out = cmd(0, "resolve", "--queue", "bulk", "--all-dead", "--action", "discard", "--last-reason", "attempt_failed", "--reason", "a bad input")
	if out != "discarded 1 of 1 DEAD jobs of bulk whose last attempt ended attempt_failed\n" {
		t.Fatalf("the discard of the failed one:\n%s", out)
	}
	testutil.WaitFor(t, 20*time.Second, "dead-4 discarded", func() bool { _, ok := job("dead-4"); return !ok })
	out = cmd(0, "resolve", "--queue", "bulk", "--all-dead", "--action", "retry", "--json")
	if n := strings.Count(out, `"kind":"resolved"`); n != 3 || strings.Count(out, "\n") != 3 {
		t.Fatalf("the retry (one resolved decision per job, as JSON):\n%s", out)
	}
	for _, id := range ids[:3] {
		testutil.WaitFor(t, 20*time.Second, id+" queued again by the retry", func() bool {
			j, ok := job(id)
			return ok && j.State != events.StateDead && j.Attempt == 0
		})
	}
	if j, _ := job("live-1"); j.State == events.StateDead || j.State == events.StateNone {
		t.Fatalf("live-1, never DEAD, is %s", j.State)
	}
	if out = cmd(0, "resolve", "--queue", "bulk", "--all-dead", "--action", "retry"); out != "no DEAD jobs of bulk\n" {
		t.Fatalf("the second run:\n%s", out)
	}
}
