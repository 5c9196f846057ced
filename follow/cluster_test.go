package follow_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/cluster"
	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/testutil"
)

// freePorts returns n ports free on loopback.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// node is one nats-server of a 3-node loopback cluster, in this process.
type node struct {
	name, conf, dir string
	port            int
	srv             *streams.Embedded
}

func (n *node) start(t *testing.T) {
	t.Helper()
	n.srv = testutil.StartServerIn(t, n.dir, testutil.ConfigFile(n.conf), func(c *streams.EmbeddedConfig) {
		c.Port, c.ServerName = n.port, n.name
	})
}

// TestClusterNodeShutdowns follows an R3 stream on a 3-node cluster while
// the node that is the JetStream meta leader is shut down, then while the
// node that holds the Follower's consumer is (each restarted after): every
// message is handed over once, in order. The time from each shutdown to the
// next message handed over is logged. The shutdowns are graceful (servers
// in this process cannot be SIGKILLed); the chaos suite kills real
// processes under the coordinator, which reads through a Follower.
func TestClusterNodeShutdowns(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster; not in -short")
	}
	ports := freePorts(t, 6)
	root := t.TempDir()
	var routes []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3+i]))
	}
	nodes := make([]*node, 3)
	for i := range nodes {
		n := &node{name: fmt.Sprintf("n%d", i+1), dir: filepath.Join(root, fmt.Sprintf("n%d", i+1)), port: ports[i]}
		n.conf = filepath.Join(root, n.name+".conf")
		if err := os.WriteFile(n.conf, []byte(cluster.NodeConfig(n.name, ports[i], ports[3+i], n.dir, routes, 0)), 0o644); err != nil {
			t.Fatal(err)
		}
		nodes[i] = n
	}
	// Each blocks until its client port listens, not until the cluster has formed.
	for _, n := range nodes {
		n.start(t)
	}
	urls := fmt.Sprintf("nats://127.0.0.1:%d,nats://127.0.0.1:%d,nats://127.0.0.1:%d", ports[0], ports[1], ports[2])
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	retry(t, ctx, "create the stream", func(ctx context.Context) error {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "F", Subjects: []string{"f.>"}, Replicas: 3})
		return err
	})
	published := 0
	publishN := func(k int) {
		for range k {
			published++
			i := published
			retry(t, ctx, fmt.Sprintf("publish %d", i), func(ctx context.Context) error {
				_, err := js.Publish(ctx, "f.x", fmt.Appendf(nil, "%d", i), jetstream.WithMsgID(fmt.Sprint(i)))
				return err
			})
		}
	}
	publishN(20)

	var c collector
	f := follow.Start(ctx, js, follow.Config{Stream: "F"}, c.handle)
	defer f.Stop()
	c.waitCount(t, 20, 30*time.Second)

	for round, pick := range []func() *node{
		func() *node { // the meta leader
			for _, n := range nodes {
				if n.srv.Server().JetStreamIsLeader() {
					return n
				}
			}
			return nil
		},
		func() *node { // the server of the Follower's consumer
			for _, n := range nodes {
				if n.srv.Server().JetStreamIsConsumerLeader("$G", "F", consumerName(t, ctx, js)) {
					return n
				}
			}
			return nil
		},
	} {
		var victim *node
		deadline := time.Now().Add(30 * time.Second)
		for victim = pick(); victim == nil; victim = pick() {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no node to shut down", round)
			}
			time.Sleep(50 * time.Millisecond)
		}
		have := len(c.snapshot())
		killed := time.Now()
		victim.srv.Shutdown()
		publishN(20)
		c.waitCount(t, have+1, 60*time.Second)
		t.Logf("round %d: shut down %s; next message handed over after %v", round, victim.name, time.Since(killed).Round(time.Millisecond))
		checkRun(t, c.waitCount(t, published, 60*time.Second), 1, 1)
		victim.start(t)
	}
	publishN(20)
	checkRun(t, c.waitCount(t, published, 60*time.Second), 1, 1)
	time.Sleep(100 * time.Millisecond)
	if got := len(c.snapshot()); got != published {
		t.Fatalf("%d messages handed over, %d stored", got, published)
	}
}

// consumerName is the name of the only consumer of stream F.
func consumerName(t *testing.T, ctx context.Context, js jetstream.JetStream) string {
	var name string
	retry(t, ctx, "list consumers", func(ctx context.Context) error {
		s, err := js.Stream(ctx, "F")
		if err != nil {
			return err
		}
		names := s.ConsumerNames(ctx)
		for n := range names.Name() {
			name = n
		}
		if name == "" {
			return fmt.Errorf("no consumer (%v)", names.Err())
		}
		return nil
	})
	return name
}

// retry runs op with a 2 s deadline until it succeeds (a cluster electing
// leaders drops requests) or ctx ends.
func retry(t *testing.T, ctx context.Context, what string, op func(context.Context) error) {
	t.Helper()
	for {
		octx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := op(octx)
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
