package testutil

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/internal/cluster"
)

// Cluster is a NATS cluster of embedded nats-servers in the test process,
// on loopback, with JetStream: real servers forming a real cluster (routes,
// Raft, a meta leader), which a test can shut down and start again one by
// one. For SIGKILLed processes, use package cluster.
type Cluster struct {
	t     testing.TB
	nodes []clusterNode
}

type clusterNode struct {
	name, conf, dir string
	port            int
	srv             *embedded.Server
}

// StartCluster starts n (at least 2) servers routed to each other, with
// the configuration of cluster.NodeConfig (partitions > 0 adds the input
// mapping), each storing in its own t.TempDir() directory. It returns
// once every client port listens, not when JetStream has elected its meta
// leader: requests made right after may time out and need retrying. The
// servers are shut down in t.Cleanup.
func StartCluster(t testing.TB, n int, partitions uint32) *Cluster {
	t.Helper()
	if n < 2 {
		t.Fatalf("testutil: a cluster of %d servers", n)
	}
	ports := freePorts(t, 2*n)
	root := t.TempDir()
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	c := &Cluster{t: t}
	for i := range n {
		nd := clusterNode{name: fmt.Sprintf("n%d", i+1), port: ports[i]}
		nd.dir = filepath.Join(root, nd.name)
		nd.conf = filepath.Join(root, nd.name+".conf")
		if err := os.WriteFile(nd.conf, []byte(cluster.NodeConfig(nd.name, ports[i], ports[n+i], nd.dir, routes, partitions)), 0o644); err != nil {
			t.Fatalf("testutil: %v", err)
		}
		c.nodes = append(c.nodes, nd)
	}
	for i := range c.nodes {
		c.Start(i)
	}
	return c
}

// URL is the comma-separated client URLs of every server.
func (c *Cluster) URL() string {
	var urls []string
	for _, nd := range c.nodes {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", nd.port))
	}
	return strings.Join(urls, ",")
}

// Len is the number of servers.
func (c *Cluster) Len() int { return len(c.nodes) }

// Name is server i's name (n1, n2, ...).
func (c *Cluster) Name(i int) string { return c.nodes[i].name }

// Server is server i, or nil while it is shut down.
func (c *Cluster) Server(i int) *embedded.Server { return c.nodes[i].srv }

// Shutdown stops server i (gracefully: it is the same process).
func (c *Cluster) Shutdown(i int) {
	if s := c.nodes[i].srv; s != nil {
		s.Shutdown()
		c.nodes[i].srv = nil
	}
}

// Start starts server i again, on its port and store.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	nd := &c.nodes[i]
	nd.srv = StartServerIn(c.t, nd.dir, ConfigFile(nd.conf), func(cfg *embedded.Config) {
		cfg.Port, cfg.ServerName, cfg.Partitions = nd.port, nd.name, 0 // the mapping is in the file
	})
}

// freePorts returns n ports free on loopback.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testutil: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}
