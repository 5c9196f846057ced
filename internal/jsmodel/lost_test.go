package jsmodel

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// loseTailOnDisk cuts the last k messages off the stream's last message
// block in the file store under dir (a stopped server's), and removes the
// stream's full state file (index.db), as a machine that crashed before
// the server synced them leaves it: the server recovers the stream from
// its blocks when it starts again. A block is a sequence of records, each
// beginning with its length (nats-server's filestore.go: 4 bytes, the
// high bit flagging headers), the length counting the whole record.
func loseTailOnDisk(t *testing.T, dir, stream string, k int) {
	t.Helper()
	var msgs string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "msgs" && filepath.Base(filepath.Dir(p)) == stream {
			msgs = p
		}
		return err
	})
	if err != nil || msgs == "" {
		t.Fatalf("no message directory of stream %s under %s (%v)", stream, dir, err)
	}
	ents, err := os.ReadDir(msgs)
	if err != nil {
		t.Fatal(err)
	}
	last, lastN := "", 0
	for _, e := range ents {
		if n, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".blk")); err == nil && strings.HasSuffix(e.Name(), ".blk") && n > lastN {
			last, lastN = filepath.Join(msgs, e.Name()), n
		}
	}
	b, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	var ends []int // each record's end
	for off := 0; off+4 <= len(b); {
		rl := int(binary.LittleEndian.Uint32(b[off:]) &^ (1 << 31))
		if rl < 22+8 || off+rl > len(b) {
			t.Fatalf("block %s: a record of %d bytes at %d (file %d bytes): not a block this test can read", last, rl, off, len(b))
		}
		off += rl
		ends = append(ends, off)
	}
	if len(ends) <= k {
		t.Fatalf("block %s holds %d records, want more than %d", last, len(ends), k)
	}
	if err := os.Truncate(last, int64(ends[len(ends)-1-k])); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(msgs, "index.db")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
}

// TestConformLostTail: a server that loses the unsynced tail of a stream
// in a crash (the last 3 of 10 messages cut off its last block, its state
// file gone, as a crash with a sync interval leaves them) and the model's
// Stream.LoseTail agree on what follows: the last sequence goes back to
// 7 and message 8 is not found; the next message stored takes sequence 8
// (the sequences lost are used again); a message id of the tail lost is
// stored anew, one of a message kept is still a duplicate (the window is
// rebuilt from the messages kept); the fence answers with the new last
// sequence; a consumer created past the end (at sequence 11) and a
// follow.Follower (the coordinator's and the SDK's reader, which the
// model's readers stand for) that had read all 10 before the crash
// deliver sequence 11 first: the messages stored at 8 to 10 after the
// restart never reach them, as none reaches a reader of the model past
// the end. (A durable consumer the server recovers is reconciled to the
// new end and delivers 8; the follower refuses it and replaces it.)
func TestConformLostTail(t *testing.T) {
	cfg := streams.Topology{}.InputConfig()
	dir := t.TempDir()
	srv := testutil.StartServerIn(t, dir)
	_, js := testutil.Connect(t, srv.ClientURL())
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	model := newStream(cfg)
	now := time.Unix(1_800_000_000, 0)
	subj := func(i int) string { return fmt.Sprintf("tenure.in.worker.w1.j%d.acquire", i) }
	publish := func(js jetstream.JetStream, p pub) answer {
		t.Helper()
		ra := answer{}
		opts := []jetstream.PublishOpt{}
		if id := p.hdr[hdrMsgID]; id != "" {
			opts = append(opts, jetstream.WithMsgID(id))
		}
		if v := p.hdr[hdrExpectSeq]; v != "" {
			n, _ := strconv.ParseUint(v, 10, 64)
			opts = append(opts, jetstream.WithExpectLastSequence(n))
		}
		a, err := js.Publish(ctx, p.subject, []byte(p.body), opts...)
		var ae *jetstream.APIError
		switch {
		case errors.As(err, &ae):
			ra = answer{Stream: cfg.Name, ErrCode: int(ae.ErrorCode)}
		case err != nil:
			t.Fatalf("publish %s: %v", p.subject, err)
		default:
			ra = answer{Stream: a.Stream, Seq: a.Sequence, Duplicate: a.Duplicate}
		}
		ma, ok := model.Publish(now, p.msg())
		now = now.Add(time.Millisecond)
		if m := answerOf(ma, ok); m != ra {
			t.Errorf("publish %s %v: the server answers %+v, the model %+v", p.subject, p.hdr, ra, m)
		}
		return ra
	}
	for i := 1; i <= 10; i++ {
		publish(js, pub{subj(i), `{"v":1}`, h(hdrMsgID, fmt.Sprintf("m%d", i))})
	}
	dur, err := js.CreateOrUpdateConsumer(ctx, cfg.Name, jetstream.ConsumerConfig{Durable: "dur", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := dur.Fetch(10, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		got++
	}
	if got != 10 {
		t.Fatalf("the durable consumer delivered %d messages before the crash, want 10", got)
	}
	// The coordinator's reader (a follow.Follower), reading through the
	// crash on a connection that reconnects to the restarted server.
	fseqs := make(chan uint64, 64)
	fol := follow.Start(ctx, js, follow.Config{Stream: cfg.Name, StartSeq: 1, Heartbeat: time.Second}, func(_ context.Context, m follow.Msg) { fseqs <- m.Seq })
	defer fol.Stop()
	for want := uint64(1); want <= 10; want++ {
		select {
		case seq := <-fseqs:
			if seq != want {
				t.Fatalf("the follower delivered %d, want %d", seq, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the follower did not deliver %d", want)
		}
	}
	port, err := strconv.Atoi(srv.ClientURL()[strings.LastIndex(srv.ClientURL(), ":")+1:])
	if err != nil {
		t.Fatal(err)
	}

	// The crash: the last three messages were never synced.
	srv.Shutdown()
	loseTailOnDisk(t, dir, cfg.Name, 3)
	lost := model.LoseTail(3)
	if len(lost) != 3 || lost[0].Seq != 8 {
		t.Fatalf("the model lost %+v, want messages 8 to 10", lost)
	}
	srv = testutil.StartServerIn(t, dir, testutil.Port(port))
	_, js = testutil.Connect(t, srv.ClientURL())
	s, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	if rl, ml := s.CachedInfo().State.LastSeq, model.Info().State.LastSeq; rl != 7 || ml != 7 {
		t.Fatalf("after the crash the server's last sequence is %d, the model's %d: want 7", rl, ml)
	}
	if _, err := s.GetMsg(ctx, 8); !errors.Is(err, jetstream.ErrMsgNotFound) || model.Get(8) != nil {
		t.Fatalf("message 8 after the crash: the server says %v, the model %v; want none", err, model.Get(8))
	}
	// Consumers positioned past the new end.
	fresh, err := js.CreateOrUpdateConsumer(ctx, cfg.Name, jetstream.ConsumerConfig{Durable: "fresh", AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: 11})
	if err != nil {
		t.Fatal(err)
	}
	dur, err = js.Consumer(ctx, cfg.Name, "dur")
	if err != nil {
		t.Fatal(err)
	}
	mfresh := modelReader(11)

	publish(js, pub{subj(9), `{"v":1}`, h(hdrMsgID, "m9")})                       // an id of the tail lost: stored anew, at 8
	publish(js, pub{subj(5), `{"v":1}`, h(hdrMsgID, "m5")})                       // an id kept: a duplicate of 5
	publish(js, pub{subj(11), `{"v":1}`, h(hdrMsgID, "m11", hdrExpectSeq, "10")}) // the fence: the last sequence is 8
	publish(js, pub{subj(11), `{"v":1}`, h(hdrMsgID, "m11", hdrExpectSeq, "8")})
	publish(js, pub{subj(12), `{"v":1}`, h(hdrMsgID, "m12")})
	publish(js, pub{subj(13), `{"v":1}`, h(hdrMsgID, "m13")}) // at 11
	publish(js, pub{subj(14), `{"v":1}`, h(hdrMsgID, "m14")})

	first := func(c jetstream.Consumer) []uint64 {
		b, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for m := range b.Messages() {
			md, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, md.Sequence.Stream)
		}
		return seqs
	}
	if seqs, want := first(fresh), []uint64{mfresh(model)}; !slices.Equal(seqs, want) {
		t.Errorf("a consumer created past the end: the server delivers %v first, the model's reader %v", seqs, want)
	}
	// A consumer the server recovers from its store is reconciled to the
	// new end (nats-server's consumer.go: "delivered sequence past last
	// stream sequence"): it delivers 8. The model has no such consumer:
	// its readers are followers, which refuse a stream sequence before
	// their next one and replace the consumer (below).
	if seqs := first(dur); !slices.Equal(seqs, []uint64{8}) {
		t.Errorf("the durable consumer recovered past the end delivers %v first, want [8] (reconciled to the new end)", seqs)
	}
	// The follower replaces its consumer (the server reconciles a
	// consumer it recovers to the new end, and the follower refuses a
	// stream sequence before its next one) and reads on from 11.
	select {
	case seq := <-fseqs:
		if want := mfresh(model); seq != want {
			t.Errorf("the follower past the end delivers %d first, the model %d", seq, want)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the follower delivered nothing after the crash (replaced its consumer %d times)", fol.Replaced())
	}
	var stored []Msg
	for seq := uint64(1); seq <= 12; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			break
		}
		stored = append(stored, Msg{Seq: m.Sequence, Subject: m.Subject, Header: m.Header, Data: m.Data})
	}
	if c, mc := comparable(stored), comparable(model.Msgs); !equalMsgs(c, mc) {
		t.Errorf("stored after the crash:\n server %+v\n model  %+v", c, mc)
	}
}

// modelReader returns what a reader of the model from sequence from
// delivers first once the stream has grown (feedLocked's rule: the next
// sequence, when the stream holds it).
func modelReader(from uint64) func(*Stream) uint64 {
	return func(s *Stream) uint64 {
		if from > s.Last() {
			return 0
		}
		return s.Get(from).Seq
	}
}

func equalMsgs(a, b []Msg) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Seq != b[i].Seq || a[i].Subject != b[i].Subject || string(a[i].Data) != string(b[i].Data) || a[i].Header.Get(hdrMsgID) != b[i].Header.Get(hdrMsgID) {
			return false
		}
	}
	return true
}
