// Package cluster runs a local NATS cluster for development and tests: N
// nats-server nodes as real processes on loopback (routes between them,
// JetStream with sync_interval: always, the subject mapping that routes
// inputs to their partition) and M `tenure serve` coordinator processes
// sharing the partitions of one deployment with replicated streams. It is
// what `tenure cluster up` runs.
//
// A node is the nats-server binary when Config.NatsServer names one, or
// else the tenure binary itself running `tenure cluster node`, which is the
// nats-server of the module's go.mod in a process of its own (so that the
// default needs nothing but Go). Either way each node is a separate
// process with its own store, killed and restarted like any server.
//
// The cluster directory and every node's store are locked
// (streams.LockDir) before anything is written or started, and stay
// locked until Close: one cluster per directory, and no other process on
// a node's store. Each node shares its store's lock as its file
// descriptor 3 (`tenure cluster node --store-lock-fd 3` takes it over),
// so the lock lasts as long as the node even if `tenure cluster up` is
// killed.
//
// In production, point Tenure at your own cluster instead (README.md,
// "Running on a NATS cluster"): the mapping below goes into the server
// configuration of every node, and each `tenure serve` runs with
// --nats-url, --partitions and --replicas.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// Defaults of Config.
const (
	DefaultNodes        = 3
	DefaultPartitions   = 4
	DefaultCoordinators = 2
	DefaultLeaderTTL    = 3 * time.Second
)

// Config configures a local cluster.
type Config struct {
	Dir          string        // directory for the nodes' stores, configurations and every process's log; required
	Nodes        int           // nats-server nodes, default DefaultNodes
	Partitions   uint32        // partitions of the deployment, default DefaultPartitions
	Coordinators int           // `tenure serve` processes, default DefaultCoordinators; ids c1, c2, ...
	Replicas     int           // stream replicas, default min(Nodes, 3)
	BasePort     int           // client port of node 1 (node i listens on BasePort+i-1, routes on BasePort+100+i-1); 0: free ports
	Tenure       string        // the tenure binary; default the running executable
	NatsServer   string        // a nats-server binary for the nodes; "" runs `tenure cluster node`
	LeaderTTL    time.Duration // the coordinators' --leader-ttl, default DefaultLeaderTTL
	ServeArgs    []string      // more flags for every `tenure serve`
	Logger       *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		return c, errors.New("cluster: Dir is required")
	}
	if c.Nodes == 0 {
		c.Nodes = DefaultNodes
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.Coordinators == 0 {
		c.Coordinators = DefaultCoordinators
	}
	if c.Replicas == 0 {
		c.Replicas = min(c.Nodes, 3)
	}
	if c.LeaderTTL == 0 {
		c.LeaderTTL = DefaultLeaderTTL
	}
	if c.Tenure == "" {
		exe, err := os.Executable()
		if err != nil {
			return c, fmt.Errorf("cluster: the tenure binary: %w", err)
		}
		c.Tenure = exe
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Nodes < 1 || c.Nodes > 9:
		return c, fmt.Errorf("cluster: %d nodes: want 1 to 9", c.Nodes)
	case c.Partitions > events.MaxPartitions:
		return c, fmt.Errorf("cluster: %d partitions: at most %d", c.Partitions, events.MaxPartitions)
	case c.Replicas < 1 || c.Replicas > c.Nodes:
		return c, fmt.Errorf("cluster: %d replicas on %d nodes", c.Replicas, c.Nodes)
	case c.Coordinators < 0:
		return c, fmt.Errorf("cluster: %d coordinators", c.Coordinators)
	}
	return c, nil
}

// Cluster is a running local cluster.
type Cluster struct {
	cfg          Config
	urls         []string
	Nodes        []*Proc // node i+1 ("n1", ...)
	Coordinators []*Proc // coordinator i+1 ("c1", ...)

	locks []*streams.DirLock // Dir's, then each node store's
}

// Up starts the nodes, waits until JetStream answers on the cluster, then
// starts the coordinators and waits until every partition has a live one.
// On error it stops whatever it started.
//
// Before it writes or starts anything, Up locks Dir and every node's store
// directory (streams.LockDir), and it holds the locks until Close: a
// second Up on the same Dir, or a `tenure serve --data` on a node's store,
// is refused with a *streams.LockedError. Each node process shares the
// lock of its store (streams.DirLock.File, InheritLock), so that a node
// that outlives a killed `tenure cluster up` still keeps its store to
// itself.
func Up(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg}
	if err := c.lock(); err != nil {
		return nil, err
	}
	var ports []int
	if cfg.BasePort == 0 {
		if ports, err = freePorts(2 * cfg.Nodes); err != nil {
			c.Close()
			return nil, err
		}
	} else {
		for i := range cfg.Nodes {
			ports = append(ports, cfg.BasePort+i, cfg.BasePort+100+i)
		}
	}
	var routes []string
	for i := range cfg.Nodes {
		c.urls = append(c.urls, "nats://127.0.0.1:"+strconv.Itoa(ports[2*i]))
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(ports[2*i+1]))
	}
	for i := range cfg.Nodes {
		name := "n" + strconv.Itoa(i+1)
		store := c.storeDir(i)
		conf := filepath.Join(cfg.Dir, name+".conf")
		if err := os.WriteFile(conf, []byte(NodeConfig(name, ports[2*i], ports[2*i+1], store, routes, cfg.Partitions)), 0o644); err != nil {
			c.Close()
			return nil, err
		}
		// The node's store lock is its file descriptor 3.
		lock := c.locks[1+i].File()
		p := &Proc{Name: name, path: cfg.NatsServer, args: []string{"-c", conf}, logPath: filepath.Join(cfg.Dir, name+".log"),
			files: []*os.File{lock}}
		if cfg.NatsServer == "" {
			p.path, p.args = cfg.Tenure, []string{"cluster", "node", "--config", conf, "--store", store, "--store-lock-fd", "3"}
		}
		c.Nodes = append(c.Nodes, p)
		if err := p.Start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.waitJetStream(ctx, 90*time.Second); err != nil {
		c.Close()
		return nil, err
	}
	cfg.Logger.Info("nats cluster ready", "nodes", cfg.Nodes, "urls", c.URL())
	for i := range cfg.Coordinators {
		id := "c" + strconv.Itoa(i+1)
		args := append([]string{"serve", "--nats-url", c.URL(), "--id", id,
			"--partitions", strconv.FormatUint(uint64(cfg.Partitions), 10),
			"--replicas", strconv.Itoa(cfg.Replicas), "--leader-ttl", cfg.LeaderTTL.String(),
			"--log-format", "json"}, cfg.ServeArgs...)
		p := &Proc{Name: id, path: cfg.Tenure, args: args, logPath: filepath.Join(cfg.Dir, id+".log")}
		c.Coordinators = append(c.Coordinators, p)
		if err := p.Start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	if cfg.Coordinators > 0 {
		if err := c.WaitLeaders(ctx, 90*time.Second); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// lock takes the locks of the cluster directory and of every node's
// store, or none.
func (c *Cluster) lock() error {
	dirs := []string{c.cfg.Dir}
	for i := range c.cfg.Nodes {
		dirs = append(dirs, c.storeDir(i))
	}
	for _, d := range dirs {
		l, err := streams.LockDir(d)
		if err != nil {
			c.unlock()
			return fmt.Errorf("cluster: %w", err)
		}
		c.locks = append(c.locks, l)
	}
	return nil
}

// unlock releases the locks, the nodes' stores first.
func (c *Cluster) unlock() {
	for i := len(c.locks) - 1; i >= 0; i-- {
		_ = c.locks[i].Close()
	}
	c.locks = nil
}

// storeDir is the store directory of node i (from 0).
func (c *Cluster) storeDir(i int) string {
	return filepath.Join(c.cfg.Dir, "n"+strconv.Itoa(i+1)+"-store")
}

// NodeConfig is the nats-server configuration of one node: loopback
// listeners, JetStream storing in store with every write fsynced before
// it is acknowledged, routes to every node, and (partitions > 0) the input
// mapping of events.InputMapping.
func NodeConfig(name string, port, routePort int, store string, routes []string, partitions uint32) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %s\nlisten: 127.0.0.1:%d\n", name, port)
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n  sync_interval: always\n}\n", store)
	if len(routes) > 1 {
		fmt.Fprintf(&b, "cluster {\n  name: tenure\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n", routePort, strings.Join(routes, ", "))
	}
	if partitions > 0 {
		src, dst := events.InputMapping(partitions)
		fmt.Fprintf(&b, "mappings {\n  %q: %q\n}\n", src, dst)
	}
	return b.String()
}

// URL is the comma-separated list of the nodes' client URLs, as
// --nats-url and nats.Connect take it.
func (c *Cluster) URL() string { return strings.Join(c.urls, ",") }

// ClientURLs are the nodes' client URLs, node 1 first.
func (c *Cluster) ClientURLs() []string { return append([]string(nil), c.urls...) }

// Dir is the cluster's directory.
func (c *Cluster) Dir() string { return c.cfg.Dir }

// Partitions is the deployment's partition count.
func (c *Cluster) Partitions() uint32 { return c.cfg.Partitions }

// Close stops the coordinators, then the nodes, then releases the locks
// of the nodes' stores and of the cluster directory.
func (c *Cluster) Close() {
	for _, p := range c.Coordinators {
		p.Stop(10 * time.Second)
	}
	for _, p := range c.Nodes {
		p.Stop(30 * time.Second)
	}
	c.unlock()
}

// waitJetStream waits until JetStream answers an account info request
// through the cluster (its meta leader is elected).
func (c *Cluster) waitJetStream(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = c.probe(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: jetstream not ready after %v: %w (logs in %s)", timeout, last, c.cfg.Dir)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cluster) probe(ctx context.Context) error {
	for _, p := range c.Nodes {
		if !p.Running() {
			return fmt.Errorf("node %s exited (log %s)", p.Name, p.LogPath())
		}
	}
	nc, err := nats.Connect(c.URL(), nats.Timeout(time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(actx)
	return err
}

// Leaders returns, per partition, the id in its leadership entry ("" when
// none holds it).
func (c *Cluster) Leaders(ctx context.Context, js jetstream.JetStream) []string {
	out := make([]string, c.cfg.Partitions)
	topos := streams.Topology{}.Partitions(c.cfg.Partitions)
	for k := range out {
		// A request the cluster does not answer (a stream without a leader
		// yet) must not hold up the others.
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		kv, err := js.KeyValue(ctx, topos[k].LeaderBucket())
		if err != nil {
			c.cfg.Logger.Debug("leadership bucket", "partition", k, "err", err)
			continue
		}
		if e, err := kv.Get(ctx, "leader"); err == nil {
			out[k] = string(e.Value())
		} else {
			c.cfg.Logger.Debug("leadership entry", "partition", k, "err", err)
		}
	}
	return out
}

// WaitLeaders waits until every partition has a leadership entry.
func (c *Cluster) WaitLeaders(ctx context.Context, timeout time.Duration) error {
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		ls := c.Leaders(ctx, js)
		missing := 0
		for _, l := range ls {
			if l == "" {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: %d of %d partitions without a live coordinator after %v (logs in %s)", missing, len(ls), timeout, c.cfg.Dir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
