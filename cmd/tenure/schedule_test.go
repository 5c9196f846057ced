package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// tenure schedule against a real tenure serve: set (a zone resolved to
// its rule, the template's flags), pause, resume, delete, the refusal of
// a pause of a deleted schedule, and mistakes on the command line as one
// line each, before anything is published.
func TestScheduleCommands(t *testing.T) {
	log, _ := serveArgs(t, "--data", t.TempDir(), "--listen", "127.0.0.1:-1", "--sync", "interval")
	url := waitLog(t, log, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	waitLog(t, log, regexp.MustCompile(`(INF live|msg=live) `))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
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

	out := cmd(0, "schedule", "set", "nightly", "--cron", "30 2 * * *", "--zone", "Europe/Berlin", "--queue", "reports",
		"--payload", "daily", "--priority", "2", "--missed", "once")
	for _, want := range []string{"schedule_set ok", "schedule nightly", `tz="CET-1CEST,M3.5.0,M10.5.0/3"`, "zone=Europe/Berlin", "missed=once", "next="} {
		if !strings.Contains(out, want) {
			t.Fatalf("schedule set lacks %q: %s", want, out)
		}
	}
	if out = cmd(0, "schedule", "set", "every", "--cron", "@every 1s", "--queue", "pings"); !strings.Contains(out, "schedule_set ok") {
		t.Fatalf("schedule set every: %s", out)
	}
	var ls string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		// The read model counts every's fires (its latest job).
		if ls = cmd(0, "schedule", "ls"); strings.Contains(ls, "every-") {
			break
		}
	}
	// nightly's next due time in Berlin (+01:00 in winter, +02:00 in
	// summer).
	for _, want := range []string{"SCHEDULE", "NEXT", "nightly", "30 2 * * *", "Europe/Berlin", "reports", " once ", " 02:30 +0", "every", "pings", " ok"} {
		if !strings.Contains(ls, want) {
			t.Fatalf("schedule ls lacks %q:\n%s", want, ls)
		}
	}
	if ls = cmd(0, "schedule", "ls", "--queue", "reports"); strings.Contains(ls, "pings") || !strings.Contains(ls, "nightly") {
		t.Fatalf("schedule ls --queue reports:\n%s", ls)
	}
	cmd(0, "schedule", "delete", "every")
	if out = cmd(0, "schedule", "pause", "nightly"); !strings.Contains(out, "schedule_set ok") || !strings.Contains(out, " paused") {
		t.Fatalf("pause: %s", out)
	}
	if out = cmd(0, "schedule", "resume", "nightly"); !strings.Contains(out, "next=") || strings.Contains(out, " paused") {
		t.Fatalf("resume: %s", out)
	}
	if out = cmd(0, "schedule", "delete", "nightly"); !strings.Contains(out, "schedule_deleted ok") {
		t.Fatalf("delete: %s", out)
	}
	if out = cmd(1, "schedule", "pause", "nightly"); !strings.Contains(out, "no_such_schedule") {
		t.Fatalf("pause of a deleted schedule: %s", out)
	}
	for _, args := range [][]string{
		{"schedule"}, {"schedule", "stop", "x"},
		{"schedule", "set", "x", "--queue", "q"},                                          // no --cron
		{"schedule", "set", "x", "--cron", "@hourly"},                                     // no --queue
		{"schedule", "set", "--cron", "@hourly", "--queue", "q"},                          // no id
		{"schedule", "set", strings.Repeat("x", 41), "--cron", "@hourly", "--queue", "q"}, // too long
		{"schedule", "set", "x", "--cron", "0 0 30 2 *", "--queue", "q"},                  // never due
		{"schedule", "set", "x", "--cron", "@every 500ms", "--queue", "q"},                // below a second
		{"schedule", "set", "x", "--cron", "@hourly", "--queue", "q", "--zone", "Mars/Olympus_Mons"},
		{"schedule", "set", "x", "--cron", "@hourly", "--queue", "q", "--missed", "twice"},
		{"schedule", "set", "x", "--cron", "@hourly", "--queue", "q", "--backoff", "1m", "--backoff-max", "1s"},
		{"schedule", "pause"}, {"schedule", "pause", "a", "b"}, {"schedule", "delete", "a.b"},
		{"schedule", "ls", "extra"}, {"schedule", "ls", "--queue", "a.b"},
	} {
		cmd(2, args...)
	}
}
