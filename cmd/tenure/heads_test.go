package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/heads"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// headsCoordinator runs a coordinator on url (signing heads with kp, if not
// nil) until the returned stop is called.
func headsCoordinator(t *testing.T, url, id string, kp nkeys.KeyPair) (*coordinator.Coordinator, func()) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.New(coordinator.Config{ID: id, Conn: nc, LeaderTTL: 5 * time.Second,
		HeadSigner: kp, HeadInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("coordinator %s: %v", id, err)
		}
		nc.Close()
	}
	t.Cleanup(stop)
	// Live before anything is published, as serve is: the rules and the
	// default policy are the log's first inputs (a worker's input first
	// would be followed by the rules input, and the decision a test waits
	// for the head of could be passed before a head of it is signed).
	testutil.WaitFor(t, 20*time.Second, "coordinator "+id+" live", func() bool { return c.Stats().Live })
	return c, stop
}

// headsCollector runs `tenure heads --out file` against url until the
// returned stop is called.
func headsCollector(t *testing.T, url, file string, args ...string) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"heads", "--nats-url", url, "--out", file}, args...), &bytes.Buffer{}, &stderr)
	}()
	waitLog(t, &stderr, regexpKeeping)
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("tenure heads: exit %d\n%s", code, stderr.String())
		}
	}
	t.Cleanup(stop)
	return stop
}

// readHeads reads the heads kept in file.
func readHeads(t *testing.T, file string) []heads.Head {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []heads.Head
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		h, err := heads.Parse([]byte(line))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out = append(out, h)
	}
	return out
}

// decideAndKeep publishes each input and waits, after each, until the
// collector kept the head of the last decision stored.
func decideAndKeep(t *testing.T, url string, c *coordinator.Coordinator, file string, inputs ...[2]string) {
	t.Helper()
	_, js := testutil.Connect(t, url)
	for _, in := range inputs {
		ack, err := js.Publish(context.Background(), "tenure.in."+in[0], []byte(in[1]))
		if err != nil {
			t.Fatal(err)
		}
		var seq uint64
		testutil.WaitFor(t, 10*time.Second, "the input's decisions", func() bool {
			st := c.Stats()
			seq = st.DecisionsStored
			return st.Live && st.InputsFolded >= ack.Sequence
		})
		testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("the head of decision %d in %s", seq, file), func() bool {
			// The head of that decision, or of a later one (heads are
			// signed every few milliseconds for the last decision stored:
			// one may be passed before it is signed).
			for _, h := range readHeads(t, file) {
				if h.Seq >= seq {
					return true
				}
			}
			return false
		})
	}
}

// The must-show of signed heads: a collector keeps the heads of a live
// coordinator; the store then loses its last inputs and decisions (a copy
// of it from before them) and is written on consistently, so that the
// plain audit of the rewritten log is clean. tenure audit --heads reports
// every head the rewritten log does not bear out, with its decision
// sequence (a chain value that differs, or a decision the log does not
// have), and exits 1; on the original log every head is confirmed. Heads
// signed by another key than --head-key, unreadable lines and bad
// signatures are findings too.
func TestAuditHeads(t *testing.T) {
	dir := t.TempDir()
	orig := filepath.Join(dir, "orig")
	file := filepath.Join(dir, "heads.jsonl")
	kp, err := nkeys.CreateServer()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()

	// Phase A: three inputs decided, their heads kept.
	srv := testutil.StartServerIn(t, orig)
	c, stopC := headsCoordinator(t, srv.ClientURL(), "c1", kp)
	stopCollector := headsCollector(t, srv.ClientURL(), file, "--key", pub)
	decideAndKeep(t, srv.ClientURL(), c, file,
		[2]string{"worker.w1.j1.acquire", `{"v":1,"lease_ms":600000}`},
		[2]string{"worker.w2.j2.acquire", `{"v":1,"lease_ms":600000}`},
		[2]string{"worker.w1.j1.renew", `{"v":1,"lease_id":"x","generation":1,"renew_seq":1}`},
	)
	seqA := c.Stats().DecisionsStored
	stopCollector()
	stopC()
	srv.Shutdown()
	// The store as it was then: what a store that loses the writes after
	// it will hold.
	lost := filepath.Join(dir, "lost")
	if err := os.CopyFS(filepath.Join(lost, "jetstream"), os.DirFS(filepath.Join(orig, "jetstream"))); err != nil {
		t.Fatal(err)
	}

	// Phase B: the original goes on; more heads are kept.
	srv = testutil.StartServerIn(t, orig)
	c, stopC = headsCoordinator(t, srv.ClientURL(), "c1", kp)
	stopCollector = headsCollector(t, srv.ClientURL(), file)
	decideAndKeep(t, srv.ClientURL(), c, file,
		[2]string{"worker.w3.j3.acquire", `{"v":1,"lease_ms":600000}`},
		[2]string{"worker.w3.j3.release", `{"v":1,"lease_id":"x","generation":1}`},
		[2]string{"worker.w1.j4.acquire", `{"v":1,"lease_ms":600000}`},
	)
	seqB := c.Stats().DecisionsStored
	stopCollector()
	stopC()
	kept := readHeads(t, file)
	if len(kept) < 6 || kept[len(kept)-1].Seq != seqB {
		t.Fatalf("%d heads kept, the last of decision %d; want at least 6, up to %d", len(kept), kept[len(kept)-1].Seq, seqB)
	}
	for _, h := range kept {
		if h.Key != pub || h.Coordinator != "c1" || h.Stream != "TENURE_OUT" {
			t.Fatalf("head kept %+v", h)
		}
	}

	// On the original, every head is borne out.
	report := filepath.Join(dir, "report.json")
	code, out, errOut := runAuditCmd("--nats-url", srv.ClientURL(), "--heads", file, "--head-key", pub, "--report", report)
	if code != 0 || !strings.Contains(out, "result:      OK") ||
		!strings.Contains(out, fmt.Sprintf("witnesses:   %d given, %d confirmed, 0 not borne out by the log", len(kept), len(kept))) ||
		!strings.Contains(out, fmt.Sprintf("heads:       %d read from 1 files, 0 unusable", len(kept))) {
		t.Fatalf("audit --heads of the original: exit %d\n%s\n%s", code, out, errOut)
	}

	// The lost store, written on consistently: the coordinator, restarted
	// on it, decides other inputs in the place of phase B's.
	srv.Shutdown()
	srv = testutil.StartServerIn(t, lost)
	c, stopC = headsCoordinator(t, srv.ClientURL(), "c1", nil)
	_, js := testutil.Connect(t, srv.ClientURL())
	for _, in := range [][2]string{
		{"worker.w5.j5.acquire", `{"v":1,"lease_ms":600000}`},
		{"worker.w5.j6.acquire", `{"v":1,"lease_ms":600000}`},
	} {
		if _, err := js.Publish(context.Background(), "tenure.in."+in[0], []byte(in[1])); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "the rewritten log decided", func() bool {
		st := c.Stats()
		return st.Live && st.DecisionsStored >= seqA+2
	})
	stopC()
	last := c.Stats().DecisionsStored
	if last >= seqB {
		t.Fatalf("the rewritten log has %d decisions; the test wants fewer than the original's %d", last, seqB)
	}
	if code, out, errOut := runAuditCmd("--nats-url", srv.ClientURL()); code != 0 || !strings.Contains(out, "result:      OK") {
		t.Fatalf("the plain audit of the rewritten log: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runAuditCmd("--nats-url", srv.ClientURL(), "--heads", file, "--report", report)
	t.Logf("audit --heads of the rewritten log:\n%s", out)
	if code != 1 || !strings.Contains(errOut, "the log is not reproduced") {
		t.Fatalf("audit --heads of the rewritten log: exit %d\n%s\n%s", code, out, errOut)
	}
	var rep struct {
		Witnesses audit.Witnesses `json:"witnesses"`
	}
	if b, err := os.ReadFile(report); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report: %v", err)
	}
	// Each head after seqA is a finding at its own decision, as the log
	// says: another chain value up to the rewritten log's end, none after.
	want := map[string]string{}
	for i, h := range kept {
		origin := fmt.Sprintf("%s:%d (head of c1, key %s)", file, i+1, shortKey(pub))
		switch {
		case h.Seq <= seqA:
		case h.Seq <= last:
			want[origin] = fmt.Sprintf("decision %d has chain value ", h.Seq)
		default:
			want[origin] = fmt.Sprintf("decision %d is not in the log: the decision stream ends at %d", h.Seq, last)
		}
	}
	w := rep.Witnesses
	if w.Given != len(kept) || w.Findings.Count != len(want) || w.Confirmed != len(kept)-len(want) || len(want) == 0 {
		t.Fatalf("witnesses %+v, want %d findings of %d heads\n%s", w, len(want), len(kept), out)
	}
	chainFindings := 0
	for _, f := range w.Findings.Items {
		if f.Kind != audit.WitnessDecision || !strings.HasPrefix(f.Problem, want[f.Origin]) || want[f.Origin] == "" {
			t.Errorf("finding %+v, want %q", f, want[f.Origin])
		}
		if strings.Contains(f.Problem, "chain value") {
			chainFindings++
		}
		delete(want, f.Origin)
		if !strings.Contains(out, f.Origin) {
			t.Errorf("the summary does not name %s", f.Origin)
		}
	}
	if len(want) > 0 || chainFindings == 0 {
		t.Errorf("no finding for %v (%d chain findings)", want, chainFindings)
	}

	// Unusable heads: another key than --head-key, a line that does not
	// parse, a signature that does not verify.
	other, _ := nkeys.CreateServer()
	otherPub, _ := other.PublicKey()
	bad := filepath.Join(dir, "bad.jsonl")
	forged := kept[0]
	forged.Seq++
	fl, _ := forged.MarshalJSON()
	if err := os.WriteFile(bad, []byte("not a head\n\n"+string(fl)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runAuditCmd("--nats-url", srv.ClientURL(), "--heads", file, "--heads", bad, "--head-key", otherPub)
	if code != 1 || !strings.Contains(errOut, fmt.Sprintf("%d of the heads given cannot be checked", len(kept)+2)) || !strings.Contains(out, fmt.Sprintf("heads:       %d read from 2 files, %d unusable", len(kept)+2, len(kept)+2)) ||
		!strings.Contains(out, bad+":1: heads: malformed head: not a JSON object") ||
		!strings.Contains(out, bad+":3: heads: bad signature") ||
		!strings.Contains(out, file+":1: signed by key "+pub+", not one of --head-key "+otherPub) {
		t.Fatalf("unusable heads: exit %d\n%s\n%s", code, out, errOut)
	}
	// Usage: --head-key without --heads, a key that is no public server key.
	for _, args := range [][]string{{"--head-key", otherPub}, {"--heads", file, "--head-key", "UABC"}} {
		if code, _, errOut := runAuditCmd(append([]string{"--nats-url", srv.ClientURL()}, args...)...); code != 2 {
			t.Errorf("%q: exit %d, want 2\n%s", args, code, errOut)
		}
	}
}

var (
	regexpKeeping  = regexp.MustCompile(`tenure heads: (keeping) the heads`)
	regexpNotKept  = regexp.MustCompile(`tenure heads: (not kept): tenure.heads: signed by key`)
	regexpHeadKey  = regexp.MustCompile(`signing chain heads head_key=(N[A-Z0-9]+)`)
	regexpNoHeads  = regexp.MustCompile(`(no signed chain heads) \(--no-heads\)`)
	regexpNoKeyDir = regexp.MustCompile(`(no signed chain heads): connected to a server with no --data`)
	regexpServing  = regexp.MustCompile(`(connect workers to) nats://`)
)

// serveInProcess runs tenure serve on data and port in this process until
// the returned stop.
func serveInProcess(t *testing.T, data string, port int, args ...string) (*syncBuffer, func()) {
	t.Helper()
	return serveArgs(t, append([]string{"--data", data, "--listen", fmt.Sprintf("127.0.0.1:%d", port)}, args...)...)
}

// serveArgs runs tenure serve --id c1 with args in this process until the
// returned stop.
func serveArgs(t *testing.T, args ...string) (*syncBuffer, func()) {
	t.Helper()
	log := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	args = append([]string{"serve", "--id", "c1"}, args...)
	go func() { done <- run(ctx, args, io.Discard, log) }()
	waitServing(t, log, done, regexpServing)
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Errorf("serve did not stop")
		}
	}
	t.Cleanup(stop)
	return log, stop
}

// serve creates its head key once (mode 0600), logs it, and publishes
// heads with it; tenure heads keeps only verified heads of the keys it is
// given; --no-heads makes and uses no key; a key file others can read is
// refused.
func TestServeHeads(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	port := freePort(t)
	log, stop := serveInProcess(t, data, port, "--head-interval", "10ms")
	pub := waitLog(t, log, regexpHeadKey)
	if fi, err := os.Stat(filepath.Join(data, "head.nk")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("head key file: %v", err)
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	other, _ := nkeys.CreateServer()
	otherPub, _ := other.PublicKey()
	// A collector that trusts another key keeps nothing and says why.
	otherFile := filepath.Join(dir, "other.jsonl")
	var errOther syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	otherDone := make(chan int, 1)
	go func() {
		otherDone <- run(ctx, []string{"heads", "--nats-url", url, "--out", otherFile, "--key", otherPub}, io.Discard, &errOther)
	}()
	waitLog(t, &errOther, regexpKeeping)
	var stdout syncBuffer
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"heads", "--nats-url", url, "--key", pub, "-n", "1"}, &stdout, &stderr)
	}()
	waitLog(t, &stderr, regexpKeeping)
	_, js := testutil.Connect(t, url)
	if _, err := js.Publish(context.Background(), "tenure.in.worker.w1.j1.acquire", []byte(`{"v":1,"lease_ms":600000}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		h, err := heads.Parse([]byte(stdout.String()))
		if code != 0 || err != nil || h.Key != pub || heads.Verify(h) != nil {
			t.Fatalf("tenure heads -n 1: exit %d, %v\n%s\n%s", code, err, stdout.String(), stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no head kept\n%s", stderr.String())
	}
	waitLog(t, &errOther, regexpNotKept)
	// tenure status shows the last head, as does its JSON.
	var st, stErr bytes.Buffer
	if code := run(context.Background(), []string{"status", "--nats-url", url}, &st, &stErr); code != 0 ||
		!regexp.MustCompile(`head c1: decision \d+ of TENURE_OUT, chain [0-9a-f]{16}…, key `+pub+`, \d+s ago`).MatchString(st.String()) {
		t.Errorf("status: exit %d\n%s\n%s", code, st.String(), stErr.String())
	}
	st.Reset()
	var sj struct{ Head *heads.Head }
	if code := run(context.Background(), []string{"status", "--nats-url", url, "--json"}, &st, &stErr); code != 0 ||
		json.Unmarshal(st.Bytes(), &sj) != nil || sj.Head == nil || heads.Verify(*sj.Head) != nil {
		t.Errorf("status --json: exit %d\n%s\n%s", code, st.String(), stErr.String())
	}
	cancel()
	if code := <-otherDone; code != 0 {
		t.Errorf("tenure heads --key other: exit %d", code)
	}
	if b, _ := os.ReadFile(otherFile); len(b) != 0 {
		t.Errorf("heads of another key kept: %s", b)
	}

	// Restarted, serve keeps its key.
	stop()
	log, stop = serveInProcess(t, data, port, "--head-interval", "10ms")
	if got := waitLog(t, log, regexpHeadKey); got != pub {
		t.Fatalf("restarted with key %s, first %s", got, pub)
	}
	stop()
	log, stop = serveInProcess(t, filepath.Join(dir, "data2"), port, "--no-heads")
	waitLog(t, log, regexpNoHeads)
	if _, err := os.Stat(filepath.Join(dir, "data2", "head.nk")); !os.IsNotExist(err) {
		t.Errorf("--no-heads made a key: %v", err)
	}
	stop()
	// Connected to another server: a key only with --head-key or --data,
	// never one made in the working directory.
	remote := testutil.StartServer(t)
	log, stop = serveArgs(t, "--nats-url", remote.ClientURL())
	waitLog(t, log, regexpNoKeyDir)
	stop()
	if _, err := os.Stat("tenure-data"); !os.IsNotExist(err) {
		t.Errorf("serve --nats-url made ./tenure-data: %v", err)
	}
	remoteKey := filepath.Join(dir, "remote.nk")
	log, stop = serveArgs(t, "--nats-url", remote.ClientURL(), "--head-key", remoteKey)
	if got := waitLog(t, log, regexpHeadKey); got == pub || got == "" {
		t.Errorf("--head-key %s: key %q", remoteKey, got)
	}
	stop()
	if fi, err := os.Stat(remoteKey); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("--head-key file: %v", err)
	}

	if err := os.Chmod(filepath.Join(data, "head.nk"), 0o644); err != nil {
		t.Fatal(err)
	}
	var serr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--data", data, "--listen", fmt.Sprintf("127.0.0.1:%d", port)}, io.Discard, &serr)
	if code != 1 || !strings.Contains(serr.String(), "chmod 600") {
		t.Fatalf("serve with a readable head key: exit %d\n%s", code, serr.String())
	}
}

func TestHeadsUsage(t *testing.T) {
	for _, args := range [][]string{
		{"heads", "--key", "UABC"},
		{"heads", "-n", "-1"},
		{"heads", "extra"},
		{"serve", "--head-interval", "0s"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2\n%s", args, code, stderr.String())
		}
	}
	if !headSubjectOK("tenure.heads", "TENURE_OUT") || !headSubjectOK("tenure.heads", "MY_PROD_OUT") ||
		!headSubjectOK("tenure.heads.3", "TENURE_P3_OUT") || headSubjectOK("tenure.heads", "TENURE_P3_OUT") ||
		headSubjectOK("tenure.heads.2", "TENURE_P3_OUT") || headSubjectOK("tenure.heads.3", "TENURE_OUT") ||
		headSubjectOK("tenure.other", "TENURE_OUT") {
		t.Error("headSubjectOK")
	}
}

// Each head goes to the audit of its stream's partition; a head of a
// stream the deployment lacks is unusable; with --job, heads of the other
// partitions are counted, not checked.
func TestAuditHeadsPartitions(t *testing.T) {
	kp, _ := nkeys.CreateServer()
	var lines []string
	for i, stream := range []string{"TENURE_P0_OUT", "TENURE_P1_OUT", "TENURE_P1_OUT", "TENURE_OUT", "OTHER_P0_OUT"} {
		h, err := heads.Sign(kp, heads.Head{Stream: stream, Seq: uint64(i + 1), InputSeq: 1, At: time.Now(), Coordinator: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := h.MarshalJSON()
		lines = append(lines, string(b))
	}
	file := filepath.Join(t.TempDir(), "heads.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	all := streams.Topology{}.Partitions(2)
	for _, c := range []struct {
		topos           []streams.Topology
		p0, p1, skipped int
	}{
		{all, 1, 2, 0},
		{all[1:], 0, 2, 1}, // --job of a job in partition 1
	} {
		a := auditHeads{files: fileList{file}}
		if err := a.load(all, c.topos); err != nil {
			t.Fatal(err)
		}
		if len(a.of(all[0])) != c.p0 || len(a.of(all[1])) != c.p1 || a.skipped != c.skipped || a.read != 5 || len(a.problems) != 2 {
			t.Fatalf("p0 %d p1 %d skipped %d read %d problems %q", len(a.of(all[0])), len(a.of(all[1])), a.skipped, a.read, a.problems)
		}
		if w := a.of(all[1]); w[1].Seq != 3 || w[1].Origin != file+":3 (head of c1, key "+shortKey(mustPublic(t, kp))+")" || w[1].Kind != audit.WitnessDecision {
			t.Fatalf("witness %+v", w[1])
		}
		if !strings.Contains(a.problems[0], file+":4: a head of decision stream TENURE_OUT, which this deployment does not have") {
			t.Errorf("problems %q", a.problems)
		}
	}
}

func mustPublic(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// On a partitioned deployment each head is checked by its partition's
// audit and reported in its section.
func TestAuditHeadsPartitioned(t *testing.T) {
	const count = 2
	srv := testutil.StartServer(t, testutil.Partitions(count))
	js, _ := partitionedDeployment(t, srv, count)
	kp, _ := nkeys.CreateServer()
	var lines []string
	sign := func(h heads.Head) {
		h.At, h.Coordinator = time.Now(), "c1"
		s, err := heads.Sign(kp, h)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := s.MarshalJSON()
		lines = append(lines, string(b))
	}
	for _, topo := range (streams.Topology{}).Partitions(count) {
		s, err := js.Stream(context.Background(), topo.DecisionStream())
		if err != nil {
			t.Fatal(err)
		}
		for _, seq := range []uint64{2, s.CachedInfo().State.LastSeq} {
			m, err := s.GetMsg(context.Background(), seq)
			if err != nil {
				t.Fatal(err)
			}
			chain, ok := events.ParseChain(m.Header.Get(events.HeaderChain))
			cause, err := strconv.ParseUint(m.Header.Get(events.HeaderCause), 10, 64)
			if !ok || err != nil {
				t.Fatalf("decision %d of %s: headers %v", seq, topo.DecisionStream(), m.Header)
			}
			if topo.Partition.Index == 1 && seq == 2 {
				chain[0] ^= 1 // a head the log does not bear out
			}
			sign(heads.Head{Stream: topo.DecisionStream(), Seq: seq, Chain: chain, InputSeq: cause})
		}
	}
	file := filepath.Join(t.TempDir(), "heads.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runAuditCmd("--nats-url", srv.ClientURL(), "--heads", file)
	sections, _ := partitionSections(t, out)
	if code != 1 || !strings.Contains(sections["0"], "witnesses:   2 given, 2 confirmed, 0 not borne out by the log") ||
		!strings.Contains(sections["1"], "witnesses:   2 given, 1 confirmed, 1 not borne out by the log") ||
		!strings.Contains(sections["1"], file+":3 (head of c1, key ") || !strings.Contains(sections["1"], "decision 2 has chain value") ||
		!strings.Contains(out, "heads:       4 read from 1 files, 0 unusable") {
		t.Fatalf("audit --heads, partitioned: exit %d\n%s\n%s", code, out, errOut)
	}
}
