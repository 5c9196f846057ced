package bench

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/internal/testutil"
)

// gatedDialer dials the server at once the first time, and then only once
// it is opened: a reconnection waits for the test.
type gatedDialer struct {
	mu    sync.Mutex
	dials int
	open  chan struct{}
}

func (g *gatedDialer) Dial(network, address string) (net.Conn, error) {
	g.mu.Lock()
	g.dials++
	first := g.dials == 1
	g.mu.Unlock()
	if !first {
		<-g.open
	}
	return net.Dial(network, address)
}

// followFromNow's consumer loses nothing stored after it was made, even
// when it is reset before its first message: a reconnection while the
// answers are stored. (The SDK path's fair baseline made its publishers'
// consumers with DeliverNewPolicy, which nats.go's ordered consumer keeps
// until its first message: reset then, it started after the answers
// stored meanwhile, they were lost, the publisher never got its tokens
// back, and the baseline measured 0 answers a second. With
// DeliverNewPolicy this test sees none of the 5 answers.)
func TestFollowFromNowAcrossAReset(t *testing.T) {
	srv := testutil.StartServer(t)
	ctx := context.Background()
	_, js := testutil.Connect(t, srv.ClientURL())
	if _, err := js.CreateStream(ctx, baselineStream("BASE_OUT", "base.out.>")); err != nil {
		t.Fatal(err)
	}
	g := &gatedDialer{open: make(chan struct{})}
	reconnected := make(chan struct{}, 1)
	nc, err := nats.Connect(srv.ClientURL(), nats.SetCustomDialer(g), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cjs, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "base.out.w0.x", []byte("before")); err != nil { // stored before: not for it
		t.Fatal(err)
	}
	c, err := followFromNow(ctx, cjs, "BASE_OUT", "base.out.w0.>")
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int64
	cc, err := c.Consume(func(m jetstream.Msg) {
		if string(m.Data()) != "before" {
			got.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	for range 5 { // stored while the consumer's connection is down
		if _, err := js.Publish(ctx, "base.out.w0.x", []byte("answer")); err != nil {
			t.Fatal(err)
		}
	}
	close(g.open)
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("no reconnection")
	}
	testutil.WaitFor(t, 10*time.Second, "the 5 answers stored while it reconnected", func() bool { return got.Load() == 5 })
}
