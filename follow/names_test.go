package follow_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/internal/testutil"
)

// consumerNames lists the consumers of stream F.
func consumerNames(t *testing.T, ctx context.Context, js jetstream.JetStream) []string {
	t.Helper()
	s, err := js.Stream(ctx, "F")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	l := s.ConsumerNames(ctx)
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// TestNames: Followers confined to the same few consumer names (a worker's
// own, as its permissions allow) take different ones; one whose consumer
// is deleted under it creates it again under the same name and reads on
// without a gap; one that finds every name in use says so (Err, OnError)
// and takes a name once another Follower stops and frees it. KeepConsumers
// does not keep them: a Follower with Names deletes its own.
func TestNames(t *testing.T) {
	ctx, js := setup(t, true)
	publish(t, ctx, js, 1, 30)
	names := []string{"w1-a", "w1-b"}
	cfg := follow.Config{Stream: "F", Names: names, KeepConsumers: true, Heartbeat: 500 * time.Millisecond, Retry: 20 * time.Millisecond}

	var c1, c2 collector
	f1 := follow.Start(ctx, js, cfg, c1.handle)
	defer f1.Stop()
	<-f1.Ready()
	f2 := follow.Start(ctx, js, cfg, c2.handle)
	defer f2.Stop()
	<-f2.Ready()
	if got := consumerNames(t, ctx, js); !slices.Equal(got, names) {
		t.Fatalf("consumers %v, want %v", got, names)
	}
	n1, n2 := f1.ConsumerName(), f2.ConsumerName()
	if n1 == n2 || !slices.Contains(names, n1) || !slices.Contains(names, n2) {
		t.Fatalf("consumer names %q and %q", n1, n2)
	}
	checkRun(t, c1.waitCount(t, 30, 10*time.Second), 1, 1)
	checkRun(t, c2.waitCount(t, 30, 10*time.Second), 1, 1)

	// Deleted under it, and replaced under the same name, while messages
	// are stored.
	if err := js.DeleteConsumer(ctx, "F", n1); err != nil {
		t.Fatal(err)
	}
	publish(t, ctx, js, 31, 60)
	checkRun(t, c1.waitCount(t, 60, 10*time.Second), 1, 1)
	checkRun(t, c2.waitCount(t, 60, 10*time.Second), 1, 1)
	if f1.Replaced() == 0 || f1.ConsumerName() != n1 || f2.Replaced() != 0 {
		t.Errorf("f1 replaced %d times, now %q; f2 replaced %d times", f1.Replaced(), f1.ConsumerName(), f2.Replaced())
	}
	if got := consumerNames(t, ctx, js); !slices.Equal(got, names) {
		t.Fatalf("consumers %v after the replacement, want %v", got, names)
	}

	// Every name in use.
	var mu sync.Mutex
	var reported []error
	cfg3 := cfg
	cfg3.OnError = func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}
	var c3 collector
	f3 := follow.Start(ctx, js, cfg3, c3.handle)
	defer f3.Stop()
	testutil.WaitFor(t, 5*time.Second, "Err", func() bool { return f3.Err() != nil })
	if err := f3.Err(); !errors.Is(err, follow.ErrNamesInUse) {
		t.Fatalf("Err = %v, want ErrNamesInUse", err)
	}
	// It tries again, and fails again: no consumer while every name is
	// in use.
	testutil.WaitFor(t, 10*time.Second, "a second attempt", func() bool { return f3.FailedCreates() >= 2 })
	select {
	case <-f3.Ready():
		t.Fatal("Ready while every name is in use")
	default:
	}
	if got := consumerNames(t, ctx, js); !slices.Equal(got, names) {
		t.Fatalf("consumers %v while every name is in use, want %v", got, names)
	}

	// f2 stops and deletes its consumer (KeepConsumers notwithstanding):
	// f3 takes its name, within the backoff.
	f2.Stop()
	select {
	case <-f3.Ready():
	case <-time.After(follow.MaxNamesBackoff + 5*time.Second):
		t.Fatalf("no consumer once a name was freed: %v", f3.Err())
	}
	if got := f3.ConsumerName(); got != n2 {
		t.Errorf("f3 took %q, the free name was %q", got, n2)
	}
	checkRun(t, c3.waitCount(t, 60, 10*time.Second), 1, 1)
	if err := f3.Err(); err != nil {
		t.Errorf("Err = %v after a consumer was created", err)
	}
	mu.Lock()
	if len(reported) != 1 || !errors.Is(reported[0], follow.ErrNamesInUse) {
		t.Errorf("OnError told of %v", reported)
	}
	mu.Unlock()

	f1.Stop()
	f3.Stop()
	testutil.WaitFor(t, 5*time.Second, "the consumers deleted", func() bool { return len(consumerNames(t, ctx, js)) == 0 })
}

// TestNamesNotOurs: a Follower whose consumer is deleted, and whose name
// another client takes before the Follower hears of it, does not delete
// that client's consumer: it moves on to its next name.
func TestNamesNotOurs(t *testing.T) {
	srv := testutil.StartServer(t)
	// The Follower connects through a proxy the test can pause, so that
	// the other client is first.
	p := startProxy(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	nc, err := nats.Connect("nats://"+p.addr(), nats.Name("follower"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	_, ojs := testutil.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	newStream(t, ctx, ojs)
	publish(t, ctx, ojs, 1, 20)
	names := []string{"w1-a", "w1-b"}
	var c collector
	f := follow.Start(ctx, js, follow.Config{Stream: "F", Names: names, Heartbeat: 500 * time.Millisecond}, c.handle)
	defer f.Stop()
	checkRun(t, c.waitCount(t, 20, 10*time.Second), 1, 1)
	if got := f.ConsumerName(); got != "w1-a" {
		t.Fatalf("consumer %q, want the first name", got)
	}

	p.pause()
	if err := ojs.DeleteConsumer(ctx, "F", "w1-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := ojs.CreateConsumer(ctx, "F", jetstream.ConsumerConfig{Name: "w1-a", AckPolicy: jetstream.AckNonePolicy,
		DeliverPolicy: jetstream.DeliverNewPolicy, InactiveThreshold: time.Minute}); err != nil {
		t.Fatal(err)
	}
	p.resume()
	publish(t, ctx, ojs, 21, 40)
	checkRun(t, c.waitCount(t, 40, 20*time.Second), 1, 1)
	if got := f.ConsumerName(); got != "w1-b" {
		t.Errorf("consumer %q after the replacement, want w1-b", got)
	}
	if got := consumerNames(t, ctx, ojs); !slices.Equal(got, names) {
		t.Errorf("consumers %v, want the other client's w1-a and the Follower's w1-b", got)
	}
}

// proxy forwards TCP connections to a server, and can hold what they
// carry (both ways) for a while.
type proxy struct {
	ln   net.Listener
	gate sync.RWMutex // write-locked while paused
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
			go p.copy(c, s)
			go p.copy(s, c)
		}
	}()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) copy(dst, src net.Conn) {
	defer func() { _ = dst.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.gate.RLock()
			_, werr := dst.Write(buf[:n])
			p.gate.RUnlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) pause()  { p.gate.Lock() }
func (p *proxy) resume() { p.gate.Unlock() }
