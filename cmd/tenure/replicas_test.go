package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// `tenure serve --nats-url` on a cluster of 3 servers creates its streams
// with 3 replicas by default; on a single server, with 1.
func TestServeDefaultReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster; not in -short")
	}
	cl := testutil.StartCluster(t, 3, 0)
	single := testutil.StartServer(t)
	for _, c := range []struct {
		name, url string
		want      int
	}{
		{"cluster", cl.URL(), 3},
		{"single server", single.ClientURL(), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var stderr syncBuffer
			done := make(chan int, 1)
			sctx, stop := context.WithCancel(ctx)
			go func() {
				done <- run(sctx, []string{"serve", "--nats-url", c.url, "--id", "c1", "--leader-ttl", "1s"}, &bytes.Buffer{}, &stderr)
			}()
			defer func() {
				stop()
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Error("serve did not stop")
				}
			}()
			nc, err := nats.Connect(c.url, nats.MaxReconnects(-1))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, _ := jetstream.New(nc)
			topo := streams.Topology{}
			for _, name := range []string{topo.InputStream(), topo.DecisionStream()} {
				var got int
				if err := testutil.Poll(time.Minute, func() error {
					rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
					s, err := js.Stream(rctx, name)
					rcancel()
					if err == nil {
						got = s.CachedInfo().Config.Replicas
						return nil
					}
					select {
					case code := <-done:
						t.Fatalf("serve exited %d:\n%s", code, stderr.String())
					default:
					}
					return err
				}); err != nil {
					t.Fatalf("no stream %s: %v\n%s", name, err, stderr.String())
				}
				if got != c.want {
					t.Errorf("%s has %d replicas, want %d", name, got, c.want)
				}
			}
			if !strings.Contains(stderr.String(), "stream replicas") {
				t.Errorf("serve does not log the replicas it chose:\n%s", stderr.String())
			}
		})
	}
}
