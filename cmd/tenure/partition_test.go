package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/ui"
)

// The operator commands, tenure watch and tenure status on a partitioned
// deployment (`tenure serve --partitions 4`), with nothing but the server
// address: offers and cancellations go to their job's partition, the policy
// to every partition (one verdict line each), watch merges every
// partition's decisions (showing the partition) and status shows one line
// per partition.
func TestPartitionedCommands(t *testing.T) {
	const count = 4
	var stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:-1", "--sync", "interval", "--id", "c1",
			"--partitions", fmt.Sprint(count)}, &bytes.Buffer{}, &stderr)
	}()
	defer func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exited %d:\n%s", code, stderr.String())
			}
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop")
		}
	}()
	url := waitLog(t, &stderr, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ready := 0 // partitions 0 to ready-1 said they are live
	if err := testutil.Poll(20*time.Second, func() error {
		for ; ready < count; ready++ {
			if err := statusLive(nc, fmt.Sprintf("tenure.status.c1.%d", ready)); err != nil {
				return fmt.Errorf("partition %d not live: %w", ready, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	cmd := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := run(ctx, append(args[:1:1], append([]string{"--nats-url", url}, args[1:]...)...), &out, &errOut); code != want {
			t.Fatalf("tenure %s: exit %d, want %d:\n%s%s", strings.Join(args, " "), code, want, out.String(), errOut.String())
		}
		return out.String()
	}

	// tenure status: one line per partition.
	out := cmd(0, "status")
	for k := range count {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^c1\s+%d\s+live\s`, k)).MatchString(out) {
			t.Errorf("status has no live line for partition %d:\n%s", k, out)
		}
	}
	if !strings.Contains(out, "PARTITION") || strings.Contains(out, "no live coordinator") {
		t.Errorf("status:\n%s", out)
	}

	// The web UI on its own follows every partition (it finds the count
	// on the server); its board is checked once the jobs are offered.
	var uiLog syncBuffer
	uiDone := make(chan int, 1)
	uiTokens := t.TempDir() // made there
	go func() {
		uiDone <- run(ctx, []string{"ui", "--nats-url", url, "--http", "127.0.0.1:0", "--ui-token-dir", uiTokens}, &bytes.Buffer{}, &uiLog)
	}()
	defer func() {
		cancel()
		select {
		case code := <-uiDone:
			if code != 0 {
				t.Errorf("ui exited %d:\n%s", code, uiLog.String())
			}
		case <-time.After(20 * time.Second):
			t.Error("ui did not stop")
		}
	}()
	web := waitLog(t, &uiLog, regexp.MustCompile(`web UI on (http://127\.0\.0\.1:\d+)/`))

	// Live watch of new offers, merged from every partition.
	jobs := make([]string, 8)
	covered := make([]bool, count)
	for i := range jobs {
		jobs[i] = fmt.Sprintf("cj-%d", i)
		covered[events.PartitionOf(jobs[i], count)] = true
	}
	if slices.Contains(covered, false) {
		t.Fatalf("jobs %v do not cover every partition", jobs)
	}
	topos := streams.Topology{}.Partitions(count)
	consumers := func() []int {
		n := make([]int, count)
		for k, topo := range topos {
			s, err := js.Stream(ctx, topo.DecisionStream())
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			n[k] = info.State.Consumers
		}
		return n
	}
	base := consumers()
	var live syncBuffer
	watchDone := make(chan int, 1)
	go func() {
		watchDone <- run(ctx, []string{"watch", "--nats-url", url, "--kind", "offered", "-n", fmt.Sprint(len(jobs))}, &live, &live)
	}()
	if err := testutil.Poll(20*time.Second, func() error {
		now := consumers()
		for k := range now {
			if now[k] <= base[k] {
				return fmt.Errorf("consumers %v, before %v", now, base)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("watch does not follow every partition: %v", err)
	}

	// Operator commands.
	for _, job := range jobs {
		if out := cmd(0, "offer", "--job", job, "--holder", "w1", "--lease", "10s"); !strings.Contains(out, "offered ok") || !strings.Contains(out, job) {
			t.Fatalf("offer %s: %s", job, out)
		}
	}
	if out := cmd(1, "offer", "--job", jobs[1], "--holder", "w3"); !strings.Contains(out, "rejected lease_held") {
		t.Fatalf("second offer: %s", out)
	}
	if out := cmd(0, "cancel", "--job", jobs[2], "--json"); !strings.Contains(out, `"reason":"offer_withdrawn"`) {
		t.Fatalf("cancel: %s", out)
	}
	if out := cmd(1, "resolve", "--job", jobs[2], "--action", "revoke"); !strings.Contains(out, "nothing_to_resolve") {
		t.Fatalf("resolve: %s", out)
	}
	out = cmd(0, "policy", "--max-lease", "20s", "--default-lease", "5s")
	for k := range count {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^partition %d: #\d+\.\d+ policy_set ok `, k)).MatchString(out) {
			t.Errorf("policy: no verdict of partition %d:\n%s", k, out)
		}
	}
	// policy show: each partition's policy in force, the fields given
	// changed and the others kept.
	out = cmd(0, "policy", "show")
	for k := range count {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^partition %d: set by input \d+ at `, k)).MatchString(out) {
			t.Errorf("policy show: no policy of partition %d:\n%s", k, out)
		}
	}
	for _, want := range []string{"max-lease        20s            max_lease_ms=20000\n", "default-lease    5s             default_lease_ms=5000\n", "cancel-timeout   1m0s           cancel_timeout_ms=60000\n"} {
		if n := strings.Count(out, want); n != count {
			t.Errorf("policy show has %q %d times, want once per partition:\n%s", want, n, out)
		}
	}
	if out := cmd(1, "offer", "--job", "late-1", "--holder", "w2", "--lease", "30s"); !strings.Contains(out, "duration_out_of_policy") {
		t.Fatalf("offer over the new policy: %s", out)
	}

	select {
	case code := <-watchDone:
		if code != 0 {
			t.Fatalf("watch exit %d:\n%s", code, live.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("watch did not see the %d offers:\n%s", len(jobs), live.String())
	}
	requireRows := func(out string) {
		t.Helper()
		if !strings.Contains(out, "PART") {
			t.Errorf("no PART column:\n%s", out)
		}
		for _, job := range jobs {
			k := events.PartitionOf(job, count)
			if !regexp.MustCompile(fmt.Sprintf(`(?m)^\S+ %d +#\d+\.\d+ +offered +ok +%s `, k, job)).MatchString(out) {
				t.Errorf("no offered row for %s in partition %d:\n%s", job, k, out)
			}
		}
	}
	requireRows(live.String())
	// The web UI's board: every job, with its partition.
	getJSONAs(t, web+"/api/jobs?limit=500", boardToken(t, uiTokens, ui.Viewer), func(code int, b map[string]any) bool {
		rows, _ := b["rows"].([]any)
		parts := make(map[string]string)
		for _, r := range rows {
			r := r.(map[string]any)
			parts[r["id"].(string)], _ = r["partition"].(string)
		}
		for _, job := range jobs {
			if parts[job] != fmt.Sprint(events.PartitionOf(job, count)) {
				return false
			}
		}
		return code == 200
	})
	// From the start, and one job's decisions (its partition only) as JSON.
	requireRows(cmd(0, "watch", "--all", "--kind", "offered", "-n", fmt.Sprint(len(jobs))))
	out = cmd(0, "watch", "--all", "--job", jobs[2], "-n", "2", "--format", "json")
	var kinds []events.Kind
	for line := range strings.Lines(out) {
		d, err := events.DecodeDecision([]byte(strings.TrimSpace(line)))
		if err != nil || d.Job.ID != jobs[2] {
			t.Fatalf("watch --job %s printed %q (%v)", jobs[2], line, err)
		}
		kinds = append(kinds, d.Kind)
	}
	if !slices.Equal(kinds, []events.Kind{events.KindOffered, events.KindCancelRequested}) {
		t.Fatalf("watch --job %s: %v", jobs[2], kinds)
	}
}
