package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/cluster"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// tenureBin is the tenure binary built for the test processes.
var tenureBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tenure-cluster-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tenureBin = filepath.Join(dir, "tenure")
	build := exec.Command("go", "build", "-o", tenureBin, "github.com/maknow/tenure/cmd/tenure")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build tenure:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestNodeConfig(t *testing.T) {
	got := cluster.NodeConfig("n2", 4223, 4323, "/s", []string{"nats-route://127.0.0.1:4322", "nats-route://127.0.0.1:4323"}, 4)
	for _, want := range []string{
		"server_name: n2\n", "listen: 127.0.0.1:4223\n", "sync_interval: always", `store_dir: "/s"`,
		"listen: 127.0.0.1:4323\n", "routes: [nats-route://127.0.0.1:4322, nats-route://127.0.0.1:4323]",
		`"tenure.in.*.*.*.*": "tenure.in.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{wildcard(4)}}.{{partition(4,3)}}"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("node config lacks %q:\n%s", want, got)
		}
	}
}

// TestUpRefusesDirInUse: while a cluster runs, a second Up on its
// directory is refused with a *streams.LockedError naming this process
// before it writes or starts anything, and so is `tenure cluster up
// --dir` (exit 1, one line saying what to do); a `tenure serve` on a
// node's store is refused naming the node, which shares the lock of its
// store with this process: the lock stays while the node is down, and
// the node starts again under it. Close releases every lock.
func TestUpRefusesDirInUse(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node and a coordinator process; not in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, err := cluster.Up(ctx, cluster.Config{Dir: dir, Tenure: tenureBin, Nodes: 1, Coordinators: 1, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	store := filepath.Join(dir, "n1-store")
	conf, err := os.ReadFile(filepath.Join(dir, "n1.conf"))
	if err != nil {
		t.Fatal(err)
	}
	names := func() []string {
		ents, _ := os.ReadDir(dir)
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	files := names()

	_, err = cluster.Up(ctx, cluster.Config{Dir: dir, Tenure: tenureBin, Nodes: 2, Coordinators: 1, Partitions: 1, BasePort: 14900})
	var le *streams.LockedError
	if !errors.As(err, &le) || le.Dir != dir || le.Holder.PID != os.Getpid() {
		t.Fatalf("second Up: %v, want a *LockedError naming %s and this process", err, dir)
	}
	out, err := exec.CommandContext(ctx, tenureBin, "cluster", "up", "--dir", dir, "--nodes", "2", "--port", "0").CombinedOutput()
	want := "tenure: " + dir + " is in use by pid " + strconv.Itoa(os.Getpid()) + " ("
	if code := exitCode(err); code != 1 || !strings.HasPrefix(string(out), want) ||
		!strings.HasSuffix(string(out), ": stop that process, or give this cluster another --dir\n") || strings.Count(string(out), "\n") != 1 {
		t.Errorf("tenure cluster up on a directory in use: exit %d\n%s", code, out)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "n1.conf")); !bytes.Equal(now, conf) || !slices.Equal(names(), files) {
		t.Errorf("the refused cluster wrote into %s: %v, was %v", dir, names(), files)
	}

	// The node holds its store's lock, shared with this process.
	serve := func() string {
		out, err := exec.CommandContext(ctx, tenureBin, "serve", "--data", store, "--listen", "127.0.0.1:-1").CombinedOutput()
		if code := exitCode(err); code != 1 {
			t.Fatalf("serve on a node's store: exit %d\n%s", code, out)
		}
		return string(out)
	}
	node := c.Nodes[0].Pid()
	if out := serve(); !strings.Contains(out, "tenure: data directory "+store+" is in use by pid "+strconv.Itoa(node)+" (") ||
		!strings.Contains(out, "cluster node --config") || !strings.Contains(out, "sharing it with its parent pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("serve on n1's store: %s", out)
	}
	c.Nodes[0].Kill()
	if out := serve(); !strings.Contains(out, "sharing it with its parent pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("serve on the store of a dead node: %s", out)
	}
	if err := c.Nodes[0].Start(); err != nil {
		t.Fatal(err)
	}
	var b []byte // the node's log
	notReady := func() { t.Fatalf("the node did not start again under the lock:\n%s", tail(b, 2000)) }
	if testutil.Poll(time.Minute, func() error {
		if b, _ = os.ReadFile(c.Nodes[0].LogPath()); strings.Count(string(b), "node ready") == 2 {
			return nil
		}
		if !c.Nodes[0].Running() {
			notReady() // it exited: it will not be ready
		}
		return errNotYet
	}) != nil {
		notReady()
	}
	if err := c.WaitLeaders(ctx, time.Minute); err != nil {
		t.Fatalf("after the node's restart: %v", err)
	}

	c.Close()
	for _, d := range []string{dir, store} {
		if err := streams.CheckDir(d); err != nil {
			t.Errorf("after Close: %v", err)
		}
	}
}

// exitCode is the exit status of a command's error (0 for nil).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// acked is an input the cluster acknowledged.
type acked struct {
	stream  string
	seq     uint64
	subject string
	data    []byte
}

// TestClusterPartitions is issue #8's acceptance test, on real processes: a
// 3-node nats-server cluster on loopback with R3 streams, 4 partitions and
// 2 coordinator processes. Jobs spread over every partition; SIGKILLing the
// coordinator process that leads partitions moves them to the other within
// two leadership lifetimes; SIGKILLing a nats-server node under load loses
// no acknowledged input; afterwards every partition's decision chain is
// exactly the fold of its inputs (no gap, duplicate or divergence) and
// `tenure audit` verifies every partition.
func TestClusterPartitions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 5 processes; not in -short")
	}
	const ttl = cluster.DefaultLeaderTTL
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if keep := os.Getenv("TENURE_CLUSTER_DIR"); keep != "" { // to read the logs after a failure
		dir = keep
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := cluster.Up(ctx, cluster.Config{Dir: dir, Tenure: tenureBin, LeaderTTL: ttl, Logger: log,
		ServeArgs: []string{"--log-level", "debug"}})
	if err != nil {
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			t.Logf("--- %s (last 3000 bytes)\n%s", filepath.Base(l), tail(b, 3000))
		}
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			for _, p := range append(append([]*cluster.Proc(nil), c.Nodes...), c.Coordinators...) {
				if b, err := os.ReadFile(p.LogPath()); err == nil {
					t.Logf("--- %s (last 3000 bytes)\n%s", p.Name, tail(b, 3000))
				}
			}
		}
		c.Close()
	}()
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	topos := streams.Topology{}.Partitions(c.Partitions())
	for _, topo := range topos {
		s, err := js.Stream(ctx, topo.InputStream())
		if err != nil {
			t.Fatal(err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("%s has %d replicas, want 3", topo.InputStream(), r)
		}
	}

	// Load: acquires through the server's mapping (a partition-unaware
	// client), each retried with its Msg-Id until acknowledged.
	var (
		mu   sync.Mutex
		acks []acked
	)
	publish := func(i int, verb events.Verb, body string) error {
		job := fmt.Sprintf("job-%d", i)
		msg := nats.NewMsg(events.InputSubject(events.RoleWorker, fmt.Sprintf("w%d", i%5), job, verb))
		msg.Data = []byte(body)
		id := fmt.Sprintf("%s-%s", job, verb)
		var ack *jetstream.PubAck
		// Poll, not WaitFor: the load publishes from its own goroutine.
		if err := testutil.Poll(time.Minute, func() error {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			defer pcancel()
			var err error
			ack, err = js.PublishMsg(pctx, msg, jetstream.WithMsgID(id))
			return err
		}); err != nil {
			return fmt.Errorf("publish %s %s: %w", job, verb, err)
		}
		mu.Lock()
		acks = append(acks, acked{ack.Stream, ack.Sequence, msg.Subject + "." + fmt.Sprint(events.PartitionOf(job, c.Partitions())), msg.Data})
		mu.Unlock()
		return nil
	}
	for i := range 100 {
		if err := publish(i, events.VerbAcquire, `{"v":1,"lease_ms":600000}`); err != nil {
			t.Fatal(err)
		}
	}
	perStream := map[string]int{}
	for _, a := range acks {
		perStream[a.stream]++
	}
	for _, topo := range topos {
		if perStream[topo.InputStream()] == 0 {
			t.Errorf("no job in %s: %v", topo.InputStream(), perStream)
		}
	}

	// The two processes share the partitions: the first one up hands
	// partitions over until each leads two.
	balanced := time.Now()
	if err := testutil.Poll(20*ttl, func() error {
		leaders := c.Leaders(ctx, js)
		n := map[string]int{}
		for _, l := range leaders {
			n[l]++
		}
		if n["c1"] == 2 && n["c2"] == 2 {
			return nil
		}
		return fmt.Errorf("leaders %v", leaders)
	}); err != nil {
		t.Fatalf("partitions not balanced %v", err)
	}
	t.Logf("partitions balanced in %v: %v", time.Since(balanced), c.Leaders(ctx, js))

	// Kill the coordinator process that leads partition 0.
	leaders := c.Leaders(ctx, js)
	victim := leaders[0]
	var victimProc, other *cluster.Proc
	for _, p := range c.Coordinators {
		if p.Name == victim {
			victimProc = p
		} else {
			other = p
		}
	}
	if victimProc == nil || other == nil {
		t.Fatalf("leaders %v: no coordinator process named %q", leaders, victim)
	}
	t.Logf("load of 100 acquires stored; leaders %v", leaders)
	led := 0
	for _, l := range leaders {
		if l == victim {
			led++
		}
	}
	killed := time.Now()
	victimProc.Kill()
	// Two leadership lifetimes on a quiet machine (logged); the bound is
	// looser, for two loaded cores (a timing is measured, not asserted).
	if err := testutil.Poll(6*ttl, func() error {
		leaders := c.Leaders(ctx, js)
		for _, l := range leaders {
			if l != other.Name {
				return fmt.Errorf("partitions still led by %v", leaders)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("killed %s: %v", victim, err)
	}
	moved := time.Since(killed)
	t.Logf("%d partitions of killed %s moved to %s in %v (leadership lifetime %v)", led, victim, other.Name, moved, ttl)
	// The new leader serves: a renewal gets its verdict.
	if err := publish(0, events.VerbRenew, `{"v":1,"lease_id":"L0","generation":1,"renew_seq":1}`); err != nil {
		t.Fatal(err)
	}
	if err := victimProc.Start(); err != nil { // back as a standby
		t.Fatal(err)
	}

	// Kill a nats-server node under load: nothing acknowledged is lost.
	loadDone := make(chan error, 1)
	go func() {
		for i := 100; i < 400; i++ {
			if err := publish(i, events.VerbAcquire, `{"v":1,"lease_ms":600000}`); err != nil {
				loadDone <- err
				return
			}
		}
		loadDone <- nil
	}()
	// Time must pass here, twice: the node is killed while the load runs,
	// and stays down a while (the load publishes on through the outage).
	time.Sleep(300 * time.Millisecond)
	c.Nodes[1].Kill()
	time.Sleep(3 * time.Second)
	if err := c.Nodes[1].Start(); err != nil {
		t.Fatal(err)
	}
	if err := <-loadDone; err != nil {
		t.Fatal(err)
	}
	t.Logf("node n2 killed and restarted under load; checking %d acknowledged inputs", len(acks))
	if len(acks) < 401 {
		t.Fatalf("%d inputs acknowledged, want 401", len(acks))
	}
	for _, a := range acks {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := js.Stream(sctx, a.stream)
		scancel()
		if err != nil {
			t.Fatal(err)
		}
		var m *jetstream.RawStreamMsg
		err = testutil.Poll(time.Minute, func() error {
			gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			var err error
			m, err = s.GetMsg(gctx, a.seq)
			return err
		})
		if err != nil {
			t.Fatalf("acknowledged input %s #%d lost: %v", a.stream, a.seq, err)
		}
		if m.Subject != a.subject || !bytes.Equal(m.Data, a.data) {
			t.Fatalf("acknowledged input %s #%d is %s %s, was %s %s", a.stream, a.seq, m.Subject, m.Data, a.subject, a.data)
		}
	}

	// Every partition: caught up, and its chain is the fold of its inputs.
	t.Logf("no acknowledged input lost; waiting for every partition's chain")
	for _, topo := range topos {
		waitChain(t, ctx, js, topo)
	}

	// tenure audit verifies every partition.
	out, err := exec.CommandContext(ctx, tenureBin, "audit", "--nats-url", c.URL()).CombinedOutput()
	if err != nil {
		t.Fatalf("tenure audit: %v\n%s", err, out)
	}
	for _, topo := range topos {
		if !strings.Contains(string(out), topo.InputStream()) && !strings.Contains(string(out), "partition "+topo.Partition.Token()) {
			t.Errorf("the audit report does not mention partition %s:\n%s", topo.Partition.Token(), out)
		}
	}
	t.Logf("tenure audit:\n%s", tail(out, 1500))
}

// waitChain waits until the decision stream of topo holds the fold of its
// input stream, decision for decision, then checks there is no gap.
func waitChain(t *testing.T, ctx context.Context, js jetstream.JetStream, topo streams.Topology) {
	t.Helper()
	if err := testutil.Poll(60*time.Second, func() error {
		ins, outs, err := readBoth(ctx, js, topo)
		if err != nil {
			return err
		}
		p := projector.NewPartition(topo.Partition)
		var want []*nats.Msg
		for _, in := range ins {
			ds, err := p.Step(events.Raw{Seq: in.Sequence, Time: in.Time.UnixNano(), Subject: in.Subject, Body: in.Data})
			if err != nil {
				t.Fatal(err)
			}
			for i := range ds {
				want = append(want, &nats.Msg{Subject: topo.Partition.DecisionSubject(&ds[i]), Data: events.AppendDecision(nil, &ds[i])})
			}
		}
		if len(outs) > len(want) {
			t.Fatalf("%s: %d decisions stored, the fold of %d inputs gives %d", topo.DecisionStream(), len(outs), len(ins), len(want))
		}
		for i, o := range outs {
			if o.Sequence != uint64(i+1) {
				t.Fatalf("%s: decision %d has sequence %d (gap)", topo.DecisionStream(), i+1, o.Sequence)
			}
			if o.Subject != want[i].Subject || !bytes.Equal(o.Data, want[i].Data) {
				t.Fatalf("%s: decision %d diverges:\n got %s %s\nwant %s %s", topo.DecisionStream(), i+1, o.Subject, o.Data, want[i].Subject, want[i].Data)
			}
		}
		if len(outs) < len(want) {
			return fmt.Errorf("%d decisions stored, the fold of %d inputs gives %d", len(outs), len(ins), len(want))
		}
		return nil
	}); err != nil {
		t.Fatalf("%s not caught up: %v", topo.DecisionStream(), err)
	}
}

func readBoth(ctx context.Context, js jetstream.JetStream, topo streams.Topology) (ins, outs []*jetstream.RawStreamMsg, err error) {
	if ins, err = readAll(ctx, js, topo.InputStream()); err != nil {
		return nil, nil, err
	}
	outs, err = readAll(ctx, js, topo.DecisionStream())
	return ins, outs, err
}

func readAll(ctx context.Context, js jetstream.JetStream, name string) ([]*jetstream.RawStreamMsg, error) {
	// Every request has its own deadline: a request the cluster drops
	// while it elects a leader must not use up the test's.
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(rctx, name)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(rctx)
	if err != nil {
		return nil, err
	}
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := s.GetMsg(gctx, seq)
		cancel()
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// errNotYet is the error of a testutil.Poll check whose failure the
// caller reports itself.
var errNotYet = errors.New("not yet")

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
