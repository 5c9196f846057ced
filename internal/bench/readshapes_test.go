package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// TestReadShapes (opt-in: TENURE_READ_SHAPES=<messages per stream>) asks
// what a smaller decision encoding would buy the audit, whose read of the
// decision stream alone bounds it (BENCHMARKS.md, "Audit replay (issue
// 20)"). It takes an input and a decision as the bench's log stores them,
// fills one stream per shape with copies of them (each with a message id
// of its own where the decision has one), and reads each stream in order as
// the audit does (an ordered consumer, 8,192 ahead), reporting the CPU time
// of the whole process (server and reader) per message. The shapes: the
// input; the decision as stored; its body without headers; its body with
// a message id alone (what a deduplicated append stores); its headers on
// a body the input's size; its headers on a 300-byte body (about what a
// renewal verdict carrying only what changed would take). It measures, it
// asserts nothing.
func TestReadShapes(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("TENURE_READ_SHAPES"))
	if n <= 0 {
		t.Skip("TENURE_READ_SHAPES=<messages per stream>")
	}
	ctx := context.Background()
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Host: "127.0.0.1", Port: -1, ServerName: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, _ := connect(srv.ClientURL(), "r")
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
	if err != nil {
		t.Fatal(err)
	}
	top := streams.Topology{}
	h, err := streams.Ensure(ctx, js, top, coordinator.DefaultLeaderTTL)
	if err != nil {
		t.Fatal(err)
	}
	// WriteLog writes the rules and the policy itself: the genesis
	// subjects alone would refuse its worker inputs.
	if _, err := streams.EndGenesis(ctx, js, top); err != nil {
		t.Fatal(err)
	}
	if _, _, err := WriteLog(ctx, js, top, h.Snapshots, 2000); err != nil {
		t.Fatal(err)
	}
	in, err := h.In.GetMsg(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := h.Out.GetMsg(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// The decision's headers as a coordinator stores them: the log's own
	// (Tenure-Cause, Tenure-N, Tenure-Chain) and a message id (WriteLog
	// stores none; each copy gets one of its own). Not the direct get's
	// Nats-Stream, -Sequence, -Subject, -Time-Stamp, nor a fence (which
	// the server would enforce on the copies).
	stored := nats.Header{"Nats-Msg-Id": nil}
	for k, v := range dec.Header {
		if strings.HasPrefix(k, "Tenure-") {
			stored[k] = v
		}
	}
	t.Logf("input %d bytes; decision %d-byte body, headers %v", len(in.Data), len(dec.Data), keys(stored))

	shapes := []struct {
		name   string
		body   []byte
		header bool
	}{
		{"input", in.Data, false},
		{"decision", dec.Data, true},
		{"decision body alone", dec.Data, false},
		{"body and message id only", dec.Data, true},
		{"headers, input-size body", payload(len(in.Data), "x"), true},
		{"headers, 300-byte body", payload(300, "x"), true},
	}
	for i, s := range shapes {
		name, subj := fmt.Sprintf("SHAPE_%d", i), fmt.Sprintf("shape.%d", i)
		cfg := baselineStream(name, subj)
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		for k := range n {
			m := &nats.Msg{Subject: subj, Data: s.body}
			if s.header {
				m.Header = nats.Header{}
				if s.name != "body and message id only" {
					for hk, hv := range stored {
						m.Header[hk] = hv
					}
				}
				m.Header.Set("Nats-Msg-Id", events.DecisionMsgID(uint64(k+3), 0))
			}
			if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(5 * time.Minute):
			t.Fatal("publishing did not complete")
		}
	}
	per := make([][]float64, len(shapes))
	for round := range 3 {
		for k := range shapes {
			i := (k + round) % len(shapes)
			c0 := cpuTime()
			if err := orderedRead(ctx, js, fmt.Sprintf("SHAPE_%d", i), uint64(n), 8192); err != nil {
				t.Fatal(err)
			}
			per[i] = append(per[i], float64((cpuTime()-c0).Microseconds())/float64(n))
		}
	}
	for i, s := range shapes {
		p := slices.Clone(per[i])
		slices.Sort(p)
		t.Logf("  %-26s %4d-byte body, headers %-5v  %5.2f µs CPU per message (rounds %.2f)", s.name, len(s.body), s.header, p[1], per[i])
	}
}
