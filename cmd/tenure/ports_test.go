package main

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serve and cluster up both default to port 4222: whichever finds its port
// taken says so at once, naming the flag that moves it, instead of an error
// from deep inside nats-server (cluster up used to wait 90 s for a node that
// had exited).
func TestPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for _, c := range []struct {
		args []string
		says []string
	}{
		{[]string{"serve", "--data", t.TempDir(), "--listen", addr, "--sync", "interval"},
			[]string{addr + " is in use", "--listen", "tenure cluster up"}},
		{[]string{"cluster", "up", "--dir", t.TempDir(), "--port", strconv.Itoa(port)},
			[]string{"port " + strconv.Itoa(port) + " (node 1's client port) is in use", "--port", "tenure serve"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var stdout, stderr bytes.Buffer
		code := run(ctx, c.args, &stdout, &stderr)
		cancel()
		if code != 1 {
			t.Errorf("tenure %v: exit %d, want 1\n%s", c.args, code, stderr.String())
		}
		// The last line is the error: one line saying what to do.
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		last := lines[len(lines)-1]
		for _, want := range c.says {
			if !strings.Contains(last, want) {
				t.Errorf("tenure %v: the error line lacks %q:\n%s", c.args, want, stderr.String())
			}
		}
	}
}
