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
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/testutil"
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

func newAuditEnv(t *testing.T, srv *streams.Embedded, top streams.Topology) *auditEnv {
	t.Helper()
	ctx := context.Background()
	_, js := testutil.Connect(t, srv.ClientURL())
	h, err := streams.Ensure(ctx, js, top, time.Minute)
	if err != nil {
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

	// From the stored snapshot (inputs 1..3, decision 3).
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
	if code != 0 || !strings.Contains(out, "checked, audit started after it") || !strings.Contains(out, "2 replayed (4..5;") {
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

// --data audits a copy of a stopped data directory and leaves it as it was.
func TestAuditDataDir(t *testing.T) {
	dir := t.TempDir()
	srv := testutil.StartServerIn(t, dir)
	newAuditEnv(t, srv, streams.Topology{})
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
