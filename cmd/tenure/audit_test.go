package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

func TestAuditUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"audit", "--format", "xml"},
		{"audit", "--timeline"},
		{"audit", "--data", "x", "--nats-url", "nats://127.0.0.1:1"},
		{"audit", "--server-config", "x.conf"},
		{"audit", "--progress", "sometimes"},
		{"audit", "--prefix", "a.b"},
		{"audit", "--list", "-5"},
		{"audit", "--from", "x"},
		{"audit", "--bogus"},
		{"audit", "extra"},
		{"audit", "--log-format", "xml"},
		{"audit", "--receipts", "r.jsonl", "--from", "5"},
		{"audit", "--receipts", "r.jsonl", "--job", "j1"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2\n%s", args, code, stderr.String())
		}
	}
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"audit", "-h"}, &bytes.Buffer{}, &stderr); code != 0 || !strings.Contains(stderr.String(), "--nats-url") {
		t.Errorf("audit -h: exit %d\n%s", code, stderr.String())
	}
}

// auditEnv is a real embedded server holding a small log written without a
// coordinator: the inputs, and their decisions appended as a coordinator
// would.
type auditEnv struct {
	url    string
	js     jetstream.JetStream
	h      *streams.Handles
	inputs []*jetstream.RawStreamMsg
	ds     []events.Decision
}

var auditWorkload = [][2]string{
	{"worker.w1.j1.acquire", `{"v":1,"lease_ms":60000}`},
	{"worker.w2.j2.acquire", `{"v":1,"lease_ms":60000}`},
	{"worker.w2.j2.renew", `{"v":1,"lease_id":"L2","generation":1,"renew_seq":1}`},
	{"worker.w2.j2.progress", `{"v":1,"lease_id":"L2","generation":1,"progress_seq":1,"value":40}`},
	{"worker.w2.j2.result", `{"v":1,"lease_id":"L2","generation":1,"outcome":"SUCCESS"}`},
}

func newAuditEnv(t *testing.T, srv *embedded.Server, top streams.Topology) *auditEnv {
	t.Helper()
	ctx := context.Background()
	_, js := testutil.Connect(t, srv.ClientURL())
	h, err := streams.Ensure(ctx, js, top, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if h.In, err = streams.EndGenesis(ctx, js, top); err != nil { // a log by hand
		t.Fatal(err)
	}
	e := &auditEnv{url: srv.ClientURL(), js: js, h: h}
	p := projector.New()
	for _, w := range auditWorkload {
		ack, err := js.Publish(ctx, events.InputPrefix+"."+w[0], []byte(w[1]))
		if err != nil {
			t.Fatal(err)
		}
		m, err := h.In.GetMsg(ctx, ack.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		e.inputs = append(e.inputs, m)
		ds, err := p.Step(events.Raw{Seq: m.Sequence, Time: m.Time.UnixNano(), Subject: m.Subject, Body: m.Data})
		if err != nil {
			t.Fatal(err)
		}
		for i := range ds {
			e.appendDecision(t, &ds[i], "")
			e.ds = append(e.ds, ds[i])
		}
	}
	return e
}

// appendDecision appends d with the coordinator's headers (and msgID, if
// not empty, instead of the deterministic one).
func (e *auditEnv) appendDecision(t *testing.T, d *events.Decision, msgID string) {
	t.Helper()
	m := &nats.Msg{Subject: events.DecisionSubject(d), Data: events.AppendDecision(nil, d), Header: nats.Header{}}
	m.Header.Set(events.HeaderCause, strconv.FormatUint(d.Cause, 10))
	m.Header.Set(events.HeaderIndex, fmt.Sprintf("%d/%d", d.N, d.Of))
	if msgID == "" {
		msgID = events.DecisionMsgID(d.Cause, d.N)
	}
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

func runAuditCmd(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(context.Background(), append([]string{"audit", "--progress", "none"}, args...), &o, &e)
	return code, o.String(), e.String()
}

func TestAuditCommand(t *testing.T) {
	srv := testutil.StartServer(t)
	e := newAuditEnv(t, srv, streams.Topology{Storage: jetstream.MemoryStorage})

	code, out, errOut := runAuditCmd("--nats-url", e.url)
	if code != 0 || !strings.Contains(out, "result:      OK") || !strings.Contains(out, "5 verified") {
		t.Fatalf("clean audit: exit %d\n%s\n%s", code, out, errOut)
	}

	// The evidence matrix of one job, as CSV: every row of its history on
	// stdout, the summary on stderr.
	code, out, errOut = runAuditCmd("--nats-url", e.url, "--job", "j2", "--format", "csv")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 5 || !strings.HasPrefix(lines[0], "Job ID,Lease ID,Generation,Holder Identity") ||
		!strings.HasPrefix(lines[4], "j2,L2,1,w2,") || !strings.Contains(lines[4], "completed") || !strings.Contains(errOut, "result:      OK") {
		t.Fatalf("--job --format csv: exit %d\n%s\n%s", code, out, errOut)
	}

	// Every job's latest row, as JSON lines.
	code, out, errOut = runAuditCmd("--nats-url", e.url, "--matrix", "--format", "json")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("--matrix --format json: exit %d\n%s\n%s", code, out, errOut)
	}
	for i, want := range []string{"j1", "j2"} {
		var row map[string]string
		if err := json.Unmarshal([]byte(lines[i]), &row); err != nil || row["job_id"] != want || row["decision"] == "" {
			t.Fatalf("json row %d: %v %v", i, row, err)
		}
	}

	// The table, with the timeline of j2.
	code, out, _ = runAuditCmd("--nats-url", e.url, "--job", "j2", "--timeline")
	for _, want := range []string{"input 3  ", "tenure.in.worker.w2.j2.renew", "    #3.0 renewed ok worker/w2 renew -> j2 g1 L2 w2 ACTIVE",
		"Job ID  ", "result:      OK"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("--timeline: exit %d, no %q in\n%s", code, want, out)
		}
	}
	if strings.Contains(out, "worker.w1.j1") {
		t.Fatalf("the timeline of j2 shows j1:\n%s", out)
	}

	// The report as JSON.
	file := filepath.Join(t.TempDir(), "report.json")
	if code, _, errOut := runAuditCmd("--nats-url", e.url, "--report", file); code != 0 {
		t.Fatalf("--report: exit %d\n%s", code, errOut)
	}
	var rep struct {
		Inputs, Verified int
		FoldHash         string `json:"fold_hash"`
		StoredHash       string `json:"stored_hash"`
	}
	if b, err := os.ReadFile(file); err != nil || json.Unmarshal(b, &rep) != nil || rep.Inputs != 5 || rep.Verified != 5 || rep.FoldHash == "" || rep.FoldHash != rep.StoredHash {
		t.Fatalf("report file: %+v (%v)", rep, err)
	}

	// A stored snapshot (inputs 1..3, decision 3) of an older Tenure,
	// without an anchor: not used, noted, and compared with the fold.
	p := projector.New()
	for _, m := range e.inputs[:3] {
		if _, err := p.Step(events.Raw{Seq: m.Sequence, Time: m.Time.UnixNano(), Subject: m.Subject, Body: m.Data}); err != nil {
			t.Fatal(err)
		}
	}
	meta := jetstream.ObjectMeta{Name: "projector", Headers: nats.Header{}}
	meta.Headers.Set("Tenure-Input-Seq", "3")
	meta.Headers.Set("Tenure-Decision-Seq", "3")
	if _, err := e.h.Snapshots.Put(context.Background(), meta, bytes.NewReader(p.Snapshot())); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runAuditCmd("--nats-url", e.url, "--from", "4")
	if code != 0 || !strings.Contains(out, "snapshot (input 3, decision 3, ") || !strings.Contains(out, "equal to the fold's state") ||
		!strings.Contains(out, "snapshot: no state hash anchored in the decision stream") ||
		!strings.Contains(out, "not used: replaying from the first input") || !strings.Contains(out, "5 replayed (1..5;") {
		t.Fatalf("--from 4: exit %d\n%s", code, out)
	}

	// An input stored out of band: pending; a problem only with --strict.
	if _, err := e.js.Publish(context.Background(), "tenure.in.worker.w9.j9.acquire", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runAuditCmd("--nats-url", e.url); code != 0 || !strings.Contains(out, "pending:     1 (inputs 6..6") {
		t.Fatalf("pending input: exit %d\n%s", code, out)
	}
	if code, out, _ := runAuditCmd("--nats-url", e.url, "--strict"); code != 1 || !strings.Contains(out, "FAILED: 1 problems") {
		t.Fatalf("--strict with a pending input: exit %d\n%s", code, out)
	}

	// A duplicated decision: exit 1, with the summary.
	e.appendDecision(t, &e.ds[4], "forged")
	code, out, errOut = runAuditCmd("--nats-url", e.url)
	if code != 1 || !strings.Contains(out, "decision 6 (5.0): duplicate") || !strings.Contains(errOut, "tenure: audit: the log is not reproduced") {
		t.Fatalf("tampered log: exit %d\n%s\n%s", code, out, errOut)
	}
}

// tenure audit checks the checkpoint claims of a log decided by a real
// coordinator (a snapshot due every two inputs), and --from the snapshot
// it starts from. The genuine snapshot is used; a claim forged by a
// coordinator-role publisher is a finding, printed with both hashes (a
// note from a snapshot after the input it names); a snapshot rewritten
// with another state is a PROBLEM, and the audit replays from the first
// input. Exit status 1 for findings.
func TestAuditCheckpoints(t *testing.T) {
	srv := testutil.StartServer(t)
	ctx := context.Background()
	url := srv.ClientURL()
	_, js := testutil.Connect(t, url)
	h, err := streams.Ensure(ctx, js, streams.Topology{}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := coordinator.New(coordinator.Config{ID: "c1", Conn: nc, LeaderTTL: 5 * time.Second, SnapshotEvery: 2, SnapshotInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	stop := func() {
		if cancel != nil {
			cancel()
			cancel = nil
			if err := <-done; err != nil {
				t.Errorf("coordinator: %v", err)
			}
		}
	}
	defer stop()
	// settle waits until every input is decided and the stored snapshot is
	// the one c1's last checkpoint claims, at every poll for 100 ms (a
	// checkpoint is appended right after the input that made it due).
	settled := func() bool {
		ii, err1 := h.In.Info(ctx)
		oi, err2 := h.Out.Info(ctx)
		st := c.Stats()
		if err1 != nil || err2 != nil || !st.Live || st.InputsFolded != ii.State.LastSeq || st.DecisionsStored != oi.State.LastSeq {
			return false
		}
		var last uint64
		for seq := uint64(1); seq <= oi.State.LastSeq; seq++ {
			m, err := h.Out.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			if d, err := events.DecodeDecision(m.Data); err == nil && d.Kind == events.KindCheckpointed && d.Actor == "c1" {
				last = d.Checkpoint.InputSeq
			}
		}
		return last == st.SnapshotSeq
	}
	settle := func() {
		t.Helper()
		var since time.Time // settled() has held at every poll since
		if err := testutil.Poll(30*time.Second, func() error {
			switch {
			case !settled():
				since = time.Time{}
			case since.IsZero():
				since = time.Now()
			case time.Since(since) >= 100*time.Millisecond:
				return nil
			}
			return errNotYet
		}); err != nil {
			t.Fatalf("the coordinator did not settle: %+v", c.Stats())
		}
	}
	settle()
	for i := range 6 {
		if _, err := js.Publish(ctx, fmt.Sprintf("tenure.in.worker.w1.j%d.acquire", i), []byte(`{"v":1,"lease_ms":600000}`)); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			settle()
		}
	}

	file := filepath.Join(t.TempDir(), "report.json")
	code, out, errOut := runAuditCmd("--nats-url", url, "--report", file)
	var rep struct {
		Snapshot struct {
			InputSeq uint64 `json:"input_seq"`
			Anchored bool   `json:"anchored"`
		}
		Checkpoints struct {
			Claims, Verified int
			Mismatches       struct{ Count int }
		}
	}
	if b, err := os.ReadFile(file); err != nil || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("report file: %v", err)
	}
	claims := rep.Checkpoints.Claims
	if cp := rep.Checkpoints; code != 0 || claims < 3 || cp.Verified != claims || cp.Mismatches.Count != 0 || !rep.Snapshot.Anchored ||
		!strings.Contains(out, fmt.Sprintf("checkpoints: 0 (%d claims, %d verified)\n", claims, claims)) {
		t.Fatalf("clean log: exit %d, report %+v\n%s\n%s", code, rep, out, errOut)
	}
	s := rep.Snapshot.InputSeq
	if s <= 3 {
		t.Fatalf("the snapshot covers input %d", s)
	}
	from := strconv.FormatUint(s+1, 10)
	code, out, _ = runAuditCmd("--nats-url", url, "--from", from)
	if code != 0 || !strings.Contains(out, "its anchor and position checked, audit started after it") || !strings.Contains(out, "replayed ("+from+"..") {
		t.Fatalf("--from %s: exit %d\n%s", from, code, out)
	}

	// A forged claim, recorded by the fold as every claim is.
	const made = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	ack, err := js.Publish(ctx, "tenure.in.coord.c9._.checkpoint", []byte(`{"v":1,"input_seq":3,"state_hash":"`+made+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	settle()
	stop()
	code, out, _ = runAuditCmd("--nats-url", url)
	line := fmt.Sprintf("  checkpoint at input %d (c9) claims state hash %s for input 3; the replay gives ", ack.Sequence, made)
	if code != 1 || !strings.Contains(out, fmt.Sprintf("checkpoints: 1 (%d claims, %d verified)\n", claims+1, claims)) ||
		!strings.Contains(out, line) || !strings.Contains(out, "FAILED: 1 problems") {
		t.Fatalf("forged claim: exit %d\n%s", code, out)
	}
	code, out, _ = runAuditCmd("--nats-url", url, "--from", from)
	note := fmt.Sprintf("  note: checkpoint at input %d (c9) claims state hash %s for input 3: not checked: the audit did not replay input 3", ack.Sequence, made)
	if code != 0 || !strings.Contains(out, note) || !strings.Contains(out, "audit started after it") {
		t.Fatalf("forged claim, --from %s: exit %d\n%s", from, code, out)
	}

	// The snapshot rewritten with another state (w2 holds j0), under its
	// own headers.
	info, err := h.Snapshots.GetInfo(ctx, streams.SnapshotObject)
	if err != nil {
		t.Fatal(err)
	}
	fake := projector.New()
	for seq := uint64(1); seq <= s; seq++ {
		m, err := h.In.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		raw := events.Raw{Seq: seq, Time: m.Time.UnixNano(), Subject: strings.Replace(m.Subject, ".w1.j0.", ".w2.j0.", 1), Body: m.Data}
		if _, err := fake.Step(raw); err != nil {
			t.Fatal(err)
		}
	}
	if j, _ := fake.Job("j0"); j.Holder != "w2" {
		t.Fatalf("fake state: %+v", j)
	}
	if _, err := h.Snapshots.Put(ctx, jetstream.ObjectMeta{Name: streams.SnapshotObject, Headers: info.Headers}, bytes.NewReader(fake.Snapshot())); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runAuditCmd("--nats-url", url, "--from", from)
	problem := "PROBLEM: its bytes do not hash to the state hash anchored at decision " + info.Headers.Get(streams.HeaderSnapshotAnchor)
	if code != 1 || !strings.Contains(out, problem) || !strings.Contains(out, "snapshot: not used: replaying from the first input") ||
		!strings.Contains(out, " replayed (1..") || !strings.Contains(out, line) ||
		!strings.Contains(out, "FAILED: 2 problems") || !strings.Contains(errOut, "the log is not reproduced") {
		t.Fatalf("--from %s, tampered snapshot: exit %d\n%s\n%s", from, code, out, errOut)
	}
}

// --data audits a copy of a stopped data directory and leaves it as it
// was; the directory of a running server is refused, naming it.
func TestAuditDataDir(t *testing.T) {
	dir := t.TempDir()
	srv := testutil.StartServerIn(t, dir)
	newAuditEnv(t, srv, streams.Topology{})
	running := auditTree(t, dir)
	code, _, errOut := runAuditCmd("--data", dir)
	if want := "tenure: data directory " + dir + " is in use by pid " + strconv.Itoa(os.Getpid()) + " ("; code != 1 || !strings.HasPrefix(errOut, want) ||
		!strings.HasSuffix(errOut, ": stop that process, or audit the running deployment with --nats-url instead\n") {
		t.Errorf("--data of a running server: exit %d\n%s", code, errOut)
	}
	if after := auditTree(t, dir); after != running {
		t.Fatalf("the refused audit changed the data directory:\n%s\n%s", running, after)
	}
	srv.Shutdown()
	before := auditTree(t, dir)

	code, out, errOut := runAuditCmd("--data", dir)
	if code != 0 || !strings.Contains(out, "5 verified") || !strings.Contains(out, "result:      OK") {
		t.Fatalf("--data: exit %d\n%s\n%s", code, out, errOut)
	}
	if after := auditTree(t, dir); after != before {
		t.Fatalf("the data directory changed:\n%s\n%s", before, after)
	}
	if code, _, errOut := runAuditCmd("--data", t.TempDir()); code != 1 || !strings.Contains(errOut, "not a Tenure data directory") {
		t.Fatalf("--data on an empty directory: exit %d\n%s", code, errOut)
	}
}

func auditTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d %d\n", path, info.Size(), info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestAuditProgress(t *testing.T) {
	if m, err := progressMode("auto", &bytes.Buffer{}); m != "log" || err != nil {
		t.Fatalf("auto on a buffer: %q %v", m, err)
	}
	var b bytes.Buffer
	p := &progressPrinter{mode: "bar", w: &b, start: time.Now().Add(-time.Second)}
	p.update(audit.Progress{Inputs: 50, InputTotal: 100, Decisions: 60, DecisionEnd: 120})
	if !strings.HasPrefix(b.String(), "\r[===============               ]  50% 50/100 inputs, 60 decisions") {
		t.Fatalf("bar: %q", b.String())
	}
	p.finish()
	if !strings.HasSuffix(b.String(), "\r") {
		t.Fatalf("bar not cleared: %q", b.String())
	}
	b.Reset()
	log, err := newLogger(&b, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	p = &progressPrinter{mode: "log", w: &b, log: log, start: time.Now().Add(-time.Minute), last: time.Now().Add(-time.Minute)}
	p.update(audit.Progress{Inputs: 10, InputTotal: 100})
	if !strings.Contains(b.String(), `"msg":"auditing","inputs":10,"of":100`) {
		t.Fatalf("log line: %q", b.String())
	}
}

// partitionedDeployment stores a workload over 16 jobs in a deployment of 4
// partitions on srv (inputs published to six-token subjects, routed by the
// server mapping) and has a coordinator Group decide every partition.
func partitionedDeployment(t *testing.T, srv *embedded.Server, count uint32) (js jetstream.JetStream, jobs []string) {
	t.Helper()
	ctx := context.Background()
	_, js = testutil.Connect(t, srv.ClientURL())
	hs, err := streams.EnsureAll(ctx, js, streams.Topology{}, count, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, pt := range (streams.Topology{}).Partitions(count) { // the inputs come before the coordinators
		if _, err := streams.EndGenesis(ctx, js, pt); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 16 {
		job := fmt.Sprintf("job-%d", i)
		jobs = append(jobs, job)
		for _, w := range []string{"w1", "w2"} { // w2: lease_held
			if _, err := js.Publish(ctx, events.InputSubject(events.RoleWorker, w, job, events.VerbAcquire), []byte(`{"v":1,"lease_ms":60000}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	g, err := coordinator.NewGroup(coordinator.Config{ID: "c1", Conn: nc, LeaderTTL: 5 * time.Second}, count)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("group: %v", err)
		}
	}()
	if err := testutil.Poll(60*time.Second, func() error {
		for k, st := range g.Stats() {
			ii, err1 := hs[k].In.Info(ctx)
			oi, err2 := hs[k].Out.Info(ctx)
			if err1 != nil || err2 != nil || !st.Live || st.InputsFolded != ii.State.LastSeq || st.DecisionsStored != oi.State.LastSeq {
				return errNotYet
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("the group did not decide every partition: %+v", g.Stats())
	}
	return js, jobs
}

// partitionSections splits the output of an audit of a partitioned
// deployment into the report of each partition, by index, and the last line.
func partitionSections(t *testing.T, out string) (map[string]string, string) {
	t.Helper()
	sections := map[string]string{}
	parts := strings.Split(out, "== partition ")
	for _, p := range parts[1:] {
		k, _, _ := strings.Cut(p, " ")
		sections[k] = p
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return sections, lines[len(lines)-1]
}

// tenure audit over a partitioned deployment: every partition audited and
// reported under its heading, one line over all; the matrix with the
// partition; --job audits its partition alone; tampering in partition 2 is
// reported there only, exit 1; --data audits a copy the same way.
func TestAuditPartitioned(t *testing.T) {
	const count = 4
	dir := t.TempDir()
	srv := testutil.StartServerIn(t, dir, testutil.Partitions(count))
	js, jobs := partitionedDeployment(t, srv, count)
	url := srv.ClientURL()

	code, out, errOut := runAuditCmd("--nats-url", url)
	sections, last := partitionSections(t, out)
	if code != 0 || len(sections) != count || !strings.HasPrefix(last, "all 4 partitions: OK: every decision was reproduced (") {
		t.Fatalf("clean audit: exit %d\n%s\n%s", code, out, errOut)
	}
	for k := range count {
		s := sections[strconv.Itoa(k)]
		if !strings.HasPrefix(s, fmt.Sprintf("%d of 4: TENURE_P%d_IN, TENURE_P%d_OUT ==\n", k, k, k)) || !strings.Contains(s, "result:      OK") {
			t.Fatalf("partition %d:\n%s", k, s)
		}
	}

	// Every job's latest row once, from its own partition, which the row names.
	code, out, errOut = runAuditCmd("--nats-url", url, "--matrix", "--format", "json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != len(jobs) || !strings.Contains(errOut, "all 4 partitions: OK") {
		t.Fatalf("--matrix --format json: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, l := range lines {
		var row map[string]string
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatal(err)
		}
		if want := strconv.Itoa(int(events.PartitionOf(row["job_id"], count))); row["partition"] != want || row["reason"] != "lease_held" || row["holder"] != "w1" {
			t.Fatalf("row %v: want partition %s", row, want)
		}
	}
	code, out, _ = runAuditCmd("--nats-url", url, "--matrix", "--format", "csv")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != len(jobs)+1 ||
		!strings.HasPrefix(lines[0], "Job ID,") || !strings.HasSuffix(lines[0], ",Reason,Partition") {
		t.Fatalf("--matrix --format csv: exit %d\n%s", code, out)
	}

	// --job: the job's partition alone.
	k := events.PartitionOf("job-5", count)
	code, out, errOut = runAuditCmd("--nats-url", url, "--job", "job-5", "--format", "csv")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	sections, last = partitionSections(t, errOut)
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[1], "job-5,") || !strings.HasSuffix(lines[2], ",lease_held,"+strconv.Itoa(int(k))) ||
		len(sections) != 1 || sections[strconv.Itoa(int(k))] == "" || !strings.HasPrefix(last, "1 of 4 partitions: OK") {
		t.Fatalf("--job: exit %d\n%s\n%s", code, out, errOut)
	}

	// --report: every partition's report.
	file := filepath.Join(t.TempDir(), "report.json")
	if code, _, errOut := runAuditCmd("--nats-url", url, "--from", "3", "--report", file); code != 0 {
		t.Fatalf("--report: exit %d\n%s", code, errOut)
	}
	var rep struct {
		Partitions int  `json:"partitions"`
		OK         bool `json:"ok"`
		Reports    []struct {
			Partition *int   `json:"partition"`
			Verified  int    `json:"verified"`
			FoldHash  string `json:"fold_hash"`
		} `json:"reports"`
	}
	if b, err := os.ReadFile(file); err != nil || json.Unmarshal(b, &rep) != nil || rep.Partitions != count || !rep.OK || len(rep.Reports) != count {
		t.Fatalf("report file: %+v (%v)", rep, err)
	}
	for i, r := range rep.Reports {
		if r.Partition == nil || *r.Partition != i || r.Verified == 0 || r.FoldHash == "" {
			t.Fatalf("report %d: %+v", i, r)
		}
	}

	// A decision appended to TENURE_P2_OUT by a writer that is not the
	// coordinator: partition 2 fails, the others do not; exit 1.
	ctx := context.Background()
	out2, err := js.Stream(ctx, "TENURE_P2_OUT")
	if err != nil {
		t.Fatal(err)
	}
	info, err := out2.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lastMsg, err := out2.GetMsg(ctx, info.State.LastSeq)
	if err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: lastMsg.Subject, Data: bytes.Replace(lastMsg.Data, []byte(`"kind":"rejected"`), []byte(`"kind":"granted"`), 1), Header: nats.Header{}}
	m.Header.Set(events.HeaderCause, lastMsg.Header.Get(events.HeaderCause))
	m.Header.Set(events.HeaderIndex, lastMsg.Header.Get(events.HeaderIndex))
	m.Header.Set(jetstream.MsgIDHeader, "foreign")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	check := func(what string, code int, out, errOut string) {
		t.Helper()
		sections, last := partitionSections(t, out)
		want := fmt.Sprintf("decision %d (%s.0): duplicate", info.State.LastSeq+1, lastMsg.Header.Get(events.HeaderCause))
		if code != 1 || len(sections) != count || !strings.Contains(sections["2"], want) || !strings.Contains(sections["2"], "result:      FAILED") ||
			!strings.HasPrefix(last, "all 4 partitions: FAILED: ") || !strings.Contains(last, "(partition 2: ") || !strings.Contains(last, "3 of 4 partitions OK") ||
			!strings.Contains(errOut, "audit: the log is not reproduced") {
			t.Fatalf("%s: exit %d\n%s\n%s", what, code, out, errOut)
		}
		for _, k := range []string{"0", "1", "3"} {
			if !strings.Contains(sections[k], "result:      OK") {
				t.Fatalf("%s: partition %s:\n%s", what, k, sections[k])
			}
		}
	}
	code, out, errOut = runAuditCmd("--nats-url", url)
	check("tampered", code, out, errOut)

	// The same from a copy of the stopped data directory.
	srv.Shutdown()
	code, out, errOut = runAuditCmd("--data", dir)
	check("--data", code, out, errOut)
}
