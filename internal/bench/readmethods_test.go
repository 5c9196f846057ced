package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/streams"
)

// readFn reads stream from its first message to last, touching what the
// audit uses of each message (sequence, time, subject, data, a header).
type readFn func(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream string, last uint64) error

// readOrdered reads through an ordered consumer, 8,192 messages pulled
// ahead (as the bench's baseline and, through package follow, the audit).
func readOrdered(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream string, last uint64) error {
	return readOrderedAhead(8192)(ctx, nc, js, stream, last)
}

// readOrderedAhead reads through an ordered consumer, ahead messages
// pulled ahead.
func readOrderedAhead(ahead int) readFn {
	return func(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream string, last uint64) error {
		return orderedRead(ctx, js, stream, last, ahead)
	}
}

func orderedRead(ctx context.Context, js jetstream.JetStream, stream string, last uint64, ahead int) error {
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	done := make(chan struct{})
	var sum int64
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		sum += meta.Timestamp.UnixNano() + int64(len(m.Data()))
		_ = m.Headers().Get("Tenure-Cause")
		if meta.Sequence.Stream == last {
			close(done)
		}
	}, jetstream.PullMaxMessages(ahead))
	if err != nil {
		return err
	}
	<-done
	cc.Stop()
	return nil
}

// readFetch reads through an ephemeral pull consumer (no acks), one Fetch
// of batch messages at a time.
func readFetch(batch int) readFn {
	return func(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream string, last uint64) error {
		cons, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, InactiveThreshold: time.Minute})
		if err != nil {
			return err
		}
		var sum int64
		for seq := uint64(0); seq < last; {
			// Never more than is left: a fetch waits for all it asks for.
			b, err := cons.Fetch(int(min(uint64(batch), last-seq)), jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				return err
			}
			for m := range b.Messages() {
				meta, err := m.Metadata()
				if err != nil {
					return err
				}
				_ = m.Headers().Get("Tenure-Cause")
				sum += meta.Timestamp.UnixNano() + int64(len(m.Data()))
				seq = meta.Sequence.Stream
			}
			if b.Error() != nil {
				return b.Error()
			}
		}
		return nil
	}
}

// readDirect reads with batched direct gets (ADR-31: a request
// {"seq":N,"batch":M} on $JS.API.DIRECT.GET.<stream>, answered with M
// messages and a 204 EOB status), ahead requests outstanding, each with a
// reply subject of its own under an unguessable inbox.
func readDirect(batch, ahead int) readFn {
	return func(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream string, last uint64) error {
		var tok [12]byte
		_, _ = rand.Read(tok[:])
		inbox := nc.NewRespInbox() + hex.EncodeToString(tok[:])
		ch := make(chan *nats.Msg, 4*batch)
		sub, err := nc.ChanSubscribe(inbox+".*", ch)
		if err != nil {
			return err
		}
		_ = sub.SetPendingLimits(-1, -1)
		defer sub.Unsubscribe()
		next := uint64(1)
		req := func() error {
			if next > last {
				return nil
			}
			b, _ := json.Marshal(map[string]any{"seq": next, "batch": batch})
			next += uint64(batch)
			return nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox+"."+strconv.FormatUint(next, 10), b)
		}
		for range ahead {
			if err := req(); err != nil {
				return err
			}
		}
		var sum int64
		want := uint64(1)
		for want <= last {
			var m *nats.Msg
			select {
			case m = <-ch:
			case <-time.After(10 * time.Second):
				return fmt.Errorf("timeout at %d", want)
			}
			if len(m.Data) == 0 && m.Header.Get("Status") != "" {
				if m.Header.Get("Status") != "204" {
					return fmt.Errorf("status %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
				}
				if err := req(); err != nil {
					return err
				}
				continue
			}
			seq, _ := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
			if seq != want {
				return fmt.Errorf("got %d want %d", seq, want)
			}
			ts, _ := time.Parse(time.RFC3339Nano, m.Header.Get("Nats-Time-Stamp"))
			_ = m.Header.Get("Nats-Subject")
			_ = m.Header.Get("Tenure-Cause")
			sum += ts.UnixNano() + int64(len(m.Data))
			want++
		}
		return nil
	}
}

// The raw read rate of each way to read a stream in order, of the input
// stream, the decision stream and both at once, on the bench's synthetic log
// stored as a coordinator stores it (file storage, sync always), with the
// CPU time of the whole process (server and reader) per input. It measures,
// it asserts nothing. Opt in with the log's size; TENURE_READ_DIR keeps the
// log for the next run, TENURE_READ_S2=1 (with a new directory)
// S2-compresses the decision stream:
//
//	TENURE_READ_METHODS=300000 TENURE_READ_DIR=/tmp/log go test -run TestReadMethods -v ./internal/bench
//
// TENURE_READ_ONLY (method names), TENURE_READ_STREAMS (in, out, both) and
// TENURE_READ_ROUNDS (3) narrow it; TENURE_READ_CONNS=2 reads the decision
// stream on a connection of its own. See BENCHMARKS.md, "Audit replay
// (issue 20)".
func TestReadMethods(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("TENURE_READ_METHODS"))
	if n == 0 {
		t.Skip("TENURE_READ_METHODS=<inputs>")
	}
	ctx := context.Background()
	dir := os.Getenv("TENURE_READ_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	top := streams.Topology{}
	if _, err := os.Stat(dir + "/ready"); err != nil {
		srv, err := embedded.Start(embedded.Config{DataDir: dir, Host: "127.0.0.1", Port: -1, ServerName: "x"})
		if err != nil {
			t.Fatal(err)
		}
		nc, _ := connect(srv.ClientURL(), "w")
		js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
		if os.Getenv("TENURE_READ_S2") != "" {
			// The decision stream S2-compressed (Ensure leaves an existing
			// stream's compression alone).
			cfg := top.DecisionConfig()
			cfg.Compression = jetstream.S2Compression
			if _, err := js.CreateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
		}
		h, err := streams.Ensure(ctx, js, top, coordinator.DefaultLeaderTTL)
		if err != nil {
			t.Fatal(err)
		}
		// WriteLog writes the rules and the policy itself: the genesis
		// subjects alone would refuse its worker inputs.
		if _, err := streams.EndGenesis(ctx, js, top); err != nil {
			t.Fatal(err)
		}
		if _, _, err := WriteLog(ctx, js, top, h.Snapshots, n); err != nil {
			t.Fatal(err)
		}
		nc.Close()
		srv.Shutdown()
		syscall.Sync()
		_ = os.WriteFile(dir+"/ready", nil, 0o600)
	}
	srv, err := embedded.Start(embedded.Config{DataDir: dir, Host: "127.0.0.1", Port: -1, ServerName: "x", SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, _ := connect(srv.ClientURL(), "r")
	defer nc.Close()
	js, _ := jetstream.New(nc)
	// TENURE_READ_CONNS=2: the decision stream on a connection of its own.
	nc2, js2 := nc, js
	if os.Getenv("TENURE_READ_CONNS") == "2" {
		nc2, _ = connect(srv.ClientURL(), "r2")
		defer nc2.Close()
		js2, _ = jetstream.New(nc2)
	}
	in, out := top.InputStream(), top.DecisionStream()
	lin, _ := lastSeq(ctx, js, in)
	lout, _ := lastSeq(ctx, js, out)
	methods := []struct {
		name string
		f    readFn
	}{
		{"ordered8192", readOrdered},
		{"ordered32768", readOrderedAhead(32768)},
		{"fetch8192", readFetch(8192)},
		{"direct1024x2", readDirect(1024, 2)},
		{"direct4096x2", readDirect(4096, 2)},
		{"direct8192x1", readDirect(8192, 1)},
	}
	only := os.Getenv("TENURE_READ_ONLY")
	whichs := []string{"in", "out", "both"}
	if w := os.Getenv("TENURE_READ_STREAMS"); w != "" {
		whichs = strings.Split(w, ",")
	}
	rounds, _ := strconv.Atoi(os.Getenv("TENURE_READ_ROUNDS"))
	if rounds == 0 {
		rounds = 3
	}
	for round := range rounds {
		for _, m := range methods {
			if only != "" && !slices.Contains(strings.Split(only, ","), m.name) {
				continue
			}
			for _, which := range whichs {
				var names []string
				switch which {
				case "in":
					names = []string{in}
				case "out":
					names = []string{out}
				default:
					names = []string{in, out}
				}
				c0, t0 := cpuTime(), time.Now()
				var wg sync.WaitGroup
				for _, s := range names {
					l, c, j := lin, nc, js
					if s == out {
						l, c, j = lout, nc2, js2
					}
					wg.Go(func() {
						if err := m.f(ctx, c, j, s, l); err != nil {
							t.Errorf("%s %s: %v", m.name, s, err)
						}
					})
				}
				wg.Wait()
				wall, cpu := time.Since(t0), cpuTime()-c0
				t.Logf("round %d %-14s %-4s wall %6.3fs  %8.0f inputs/s  cpu %6.3fs  %.2f us/input", round, m.name, which, wall.Seconds(), float64(lin)/wall.Seconds(), cpu.Seconds(), float64(cpu.Microseconds())/float64(lin))
			}
		}
	}
}
