// Command foldcoord is a test fixture of the TypeScript SDK's tests: an
// embedded nats-server with Tenure's streams and, in place of the
// coordinator, the real fold (package projector) held at rules revision
// -rev, as a deployment not yet upgraded is (a real coordinator moves its
// log to the current revision). Each input stored is folded and its
// decisions stored on the decision stream, in order. It is the TypeScript
// counterpart of the Go tests' fold coordinator (ops/revision_test.go),
// for what a log below rules revision 7 does to batches.
//
//	go run ./sdk/ts/test/foldcoord -rev 6 -data DIR
//
// It prints "url nats://127.0.0.1:<port>" once it folds, then runs until
// its standard input is closed.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

func main() {
	rev := flag.Uint("rev", uint(events.Revision6), "the rules revision the log is held at")
	dir := flag.String("data", "", "data directory (required)")
	flag.Parse()
	if *dir == "" || *rev < 1 || *rev > uint(events.CurrentRevision) {
		log.Fatalf("foldcoord: want -data DIR and -rev 1 to %d", events.CurrentRevision)
	}
	srv, err := embedded.Start(embedded.Config{DataDir: *dir, Host: "127.0.0.1", Port: -1, ServerName: "foldcoord", ReadyTimeout: 30 * time.Second})
	if err != nil {
		log.Fatalf("foldcoord: %v", err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatalf("foldcoord: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatalf("foldcoord: %v", err)
	}
	ctx := context.Background()
	top := streams.Topology{}
	if _, err := streams.EnsureAll(ctx, js, top, 0, 5*time.Second); err != nil {
		log.Fatalf("foldcoord: streams: %v", err)
	}
	var key [events.LeaseKeyLen]byte
	for _, in := range []events.Input{{Verb: events.VerbRules, Revision: uint32(*rev), LeaseKey: key}, {Verb: events.VerbPolicy, Policy: events.DefaultPolicy()}} {
		if _, err := js.Publish(ctx, events.InputSubject(events.RoleCoord, "c1", events.NoJob, in.Verb), events.AppendInputBody(nil, &in)); err != nil {
			log.Fatalf("foldcoord: %v", err)
		}
	}
	if _, err := streams.EndGenesis(ctx, js, top); err != nil { // open to every input
		log.Fatalf("foldcoord: %v", err)
	}
	cons, err := js.OrderedConsumer(ctx, top.InputStream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		log.Fatalf("foldcoord: %v", err)
	}
	p := projector.New()
	failed := make(chan error, 1)
	fail := func(err error) {
		select {
		case failed <- err:
		default:
		}
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			fail(err)
			return
		}
		ds, err := p.Step(events.Raw{Seq: md.Sequence.Stream, Time: md.Timestamp.UnixNano(), Subject: m.Subject(), Body: m.Data()})
		if err != nil {
			fail(fmt.Errorf("input %d: %w", md.Sequence.Stream, err))
			return
		}
		for i := range ds {
			if _, err := js.Publish(ctx, events.DecisionSubject(&ds[i]), events.AppendDecision(nil, &ds[i])); err != nil {
				fail(fmt.Errorf("decision of input %d: %w", md.Sequence.Stream, err))
			}
		}
	})
	if err != nil {
		log.Fatalf("foldcoord: %v", err)
	}
	defer cc.Stop()
	fmt.Printf("url %s\n", srv.ClientURL())
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case err := <-failed:
		log.Fatalf("foldcoord: %v", err)
	}
}
