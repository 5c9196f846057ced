package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/internal/cluster"
	"github.com/maknow/tenure/streams"
)

var clusterCmd = &command{
	name:    "cluster",
	summary: "start a local NATS cluster of real processes plus coordinators (cluster up)",
	usage:   "tenure cluster up [flags]",
	help: `A local NATS cluster of real nats-server processes with coordinators, for
development and tests: what a replicated, partitioned deployment does when
a node dies can be tried on one machine. See README.md for a production
cluster.`,
	subs: []*command{clusterUpCmd, clusterNodeCmd},
	run:  runCluster,
}

var clusterUpCmd = &command{
	name:    "cluster up",
	summary: "start the cluster and its coordinators; run until interrupted",
	usage:   "tenure cluster up [flags]",
	help: `Starts a local NATS cluster of real nats-server processes on loopback
(JetStream, sync_interval: always, the input partition mapping) and
coordinator processes (tenure serve --partitions) sharing its partitions,
with replicated streams; prints the URL to point workers at and runs until
interrupted, then stops everything. For development and tests: see README.md
for a production cluster.`,
	run: runClusterUp,
}

var clusterNodeCmd = &command{
	name:    "cluster node",
	summary: "one node of tenure cluster up",
	usage:   "tenure cluster node --config FILE --store DIR [flags]",
	help: `Runs one node of tenure cluster up: the embedded nats-server with the
configuration file cluster up wrote, until interrupted. cluster up starts
its nodes with it; it is not meant to be run by hand.`,
	hidden: true,
	run:    runClusterNode,
}

// runCluster is `tenure cluster up` (a local cluster for development and
// tests) and `tenure cluster node` (one of its nodes); fs, which has no
// flags, prints cluster's help.
func runCluster(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fs.Usage()
		return errUsage
	}
	switch {
	case args[0] == "up":
		return clusterUpCmd.exec(ctx, args[1:], stdout, stderr)
	case args[0] == "node":
		return clusterNodeCmd.exec(ctx, args[1:], stdout, stderr)
	case isHelp(args[0]):
		fs.Usage()
		return flag.ErrHelp
	}
	return fmt.Errorf("%w: unknown cluster command %q (want up)", errUsage, args[0])
}

func runClusterUp(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	dir := fs.String("dir", "./tenure-cluster", "directory for the node stores, configurations and logs (kept between runs)")
	nodes := fs.Int("nodes", cluster.DefaultNodes, "nats-server nodes")
	partitions := fs.Uint("partitions", cluster.DefaultPartitions, "partitions of the deployment (fixed when it is first created)")
	coords := fs.Int("coordinators", cluster.DefaultCoordinators, "coordinator processes")
	replicas := fs.Int("replicas", 0, "stream replicas (default min(nodes, 3))")
	port := fs.Int("port", 4222, "client port of node 1 (node i: port+i-1; routes on port+100+i-1); 0 picks free ports. tenure serve defaults to 4222 too: cluster up says so if a port is taken")
	natsServer := fs.String("nats-server", "", "run the nodes with this nats-server `BINARY` (default: this binary's embedded nats-server, tenure cluster node)")
	leaderTTL := fs.Duration("leader-ttl", cluster.DefaultLeaderTTL, "the coordinators' leadership lifetime: a partition moves to another process within about two of it")
	if err := parse(fs, args); err != nil {
		return err
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if err := clusterPortsTaken(*port, *nodes); err != nil {
		return err
	}
	log, err := newLogger(stderr, "text", "info")
	if err != nil {
		return err
	}
	c, err := cluster.Up(ctx, cluster.Config{
		Dir: abs, Nodes: *nodes, Partitions: uint32(*partitions), Coordinators: *coords, Replicas: *replicas,
		BasePort: *port, NatsServer: *natsServer, LeaderTTL: *leaderTTL, Logger: log,
	})
	if err != nil {
		var le *streams.LockedError
		if errors.As(err, &le) {
			return fmt.Errorf("%s is in use by %s: stop that process, or give this cluster another --dir", le.Dir, le.Holder)
		}
		return err
	}
	defer c.Close()
	fmt.Fprintf(stdout, "tenure cluster up: %d nodes, %d partitions, %d coordinators; data and logs in %s\n",
		len(c.Nodes), c.Partitions(), len(c.Coordinators), c.Dir())
	fmt.Fprintf(stdout, "  workers and tools: --nats-url %s\n", c.URL())
	fmt.Fprintf(stdout, "  try: tenure status --nats-url %s\n", c.URL())
	fmt.Fprintln(stdout, "Ctrl-C stops the coordinators, then the nodes.")
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping")
	return nil
}

// runClusterNode runs one node of `tenure cluster up`: the embedded
// nats-server with a configuration file, until interrupted.
func runClusterNode(ctx context.Context, fs *flag.FlagSet, args []string, _, stderr io.Writer) error {
	conf := fs.String("config", "", "nats-server configuration file (required)")
	store := fs.String("store", "", "JetStream store directory (required)")
	lockFD := fs.Int("store-lock-fd", -1, "file descriptor of the store's lock file, locked by the parent process (tenure cluster up); default: lock the store here")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *conf == "" || *store == "" {
		return fmt.Errorf("%w: --config and --store are required", errUsage)
	}
	log, err := newLogger(stderr, "text", "info")
	if err != nil {
		return err
	}
	var lock *streams.DirLock
	if *lockFD >= 0 {
		if *lockFD < 3 {
			return fmt.Errorf("%w: --store-lock-fd %d is stdin, stdout or stderr", errUsage, *lockFD)
		}
		if lock, err = streams.InheritLock(*store, os.NewFile(uintptr(*lockFD), "store lock")); err != nil {
			return dataDirInUse(err, "give the node another --store")
		}
	}
	srv, err := embedded.Start(embedded.Config{DataDir: *store, ConfigFile: *conf, SyncAlways: true,
		Logger: log, LogNotices: true, ReadyTimeout: 2 * time.Minute, Lock: lock})
	if err != nil {
		return dataDirInUse(err, "give the node another --store")
	}
	log.Info("node ready", "url", srv.ClientURL())
	<-ctx.Done()
	srv.Shutdown()
	return nil
}
