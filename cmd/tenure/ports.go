package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// portInUse says whether host:port cannot be listened on because something
// else listens there. `tenure serve` and `tenure cluster up` both default to
// 127.0.0.1:4222 (so that every other command finds either without flags):
// each checks its ports first, so that the second one started says which
// flag moves it instead of failing deep inside nats-server (cluster up
// would wait 90 s for a node that exited at once).
func portInUse(host string, port int) bool {
	if port <= 0 {
		return false // -1 and 0 pick a free port
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return errors.Is(err, syscall.EADDRINUSE)
	}
	_ = l.Close()
	return false
}

// servePortTaken is serve's error for a --listen address in use.
func servePortTaken(host string, port int) error {
	return fmt.Errorf("%s is in use (another tenure serve, or tenure cluster up, whose node 1 also defaults to port 4222?): stop it, or serve with --listen %s:<port>, or connect to it with --nats-url nats://%s",
		net.JoinHostPort(host, strconv.Itoa(port)), host, net.JoinHostPort(host, strconv.Itoa(port)))
}

// clusterPortsTaken checks the ports `tenure cluster up --port base` will
// listen on (node i: client base+i-1, route base+100+i-1).
func clusterPortsTaken(base, nodes int) error {
	if base <= 0 {
		return nil
	}
	for i := range nodes {
		for _, p := range []struct {
			port int
			what string
		}{{base + i, "client"}, {base + 100 + i, "route"}} {
			if portInUse("127.0.0.1", p.port) {
				return fmt.Errorf("port %d (node %d's %s port) is in use (by another cluster, or a tenure serve, which also listens on 4222 by default): stop it, or give cluster up another --port (--port 0 picks free ports)",
					p.port, i+1, p.what)
			}
		}
	}
	return nil
}
