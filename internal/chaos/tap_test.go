package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// The parser finds every message operation of a byte stream however it is
// cut into writes, and skips the other operations.
func TestProtoParser(t *testing.T) {
	hdr := "NATS/1.0\r\nNats-Msg-Id: w1-abc\r\nNats-Expected-Stream: TENURE_IN\r\n\r\n"
	body := `{"v":1,"lease_ms":1000}`
	ack := `{"stream":"TENURE_IN","seq":7,"x":123456}`
	stream := "INFO {\"server_id\":\"x\"}\r\nCONNECT {\"verbose\":false}\r\nPING\r\n" +
		fmt.Sprintf("HPUB tenure.in.worker.w1.j1.acquire _INBOX.a.1 %d %d\r\n%s%s\r\n", len(hdr), len(hdr)+len(body), hdr, body) +
		"SUB _INBOX.a.* 1\r\nPUB plain.subject 5\r\nhello\r\npub lower.case reply.to 0\r\n\r\n" +
		fmt.Sprintf("MSG _INBOX.a.1 1 %d\r\n%s\r\n", len(ack), ack) +
		"HMSG _INBOX.a.2 1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n+OK\r\n-ERR 'x'\r\n"
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var got []protoMsg
		p := protoParser{onMsg: func(m protoMsg) {
			m.hdr, m.payload = append([]byte(nil), m.hdr...), append([]byte(nil), m.payload...)
			got = append(got, m)
		}}
		for b := []byte(stream); len(b) > 0; {
			n := 1 + rng.IntN(min(len(b), 1+round%40))
			p.feed(b[:n])
			b = b[n:]
		}
		if len(got) != 5 || p.bad {
			t.Fatalf("round %d: %d messages, bad %v: %+v", round, len(got), p.bad, got)
		}
		if m := got[0]; m.subject != "tenure.in.worker.w1.j1.acquire" || m.reply != "_INBOX.a.1" || string(m.payload) != body || headerValue(m.hdr, nats.MsgIdHdr) != "w1-abc" {
			t.Fatalf("HPUB: %+v", m)
		}
		if m := got[1]; m.subject != "plain.subject" || m.reply != "" || string(m.payload) != "hello" {
			t.Fatalf("PUB: %+v", m)
		}
		if m := got[2]; m.subject != "lower.case" || m.reply != "reply.to" || len(m.payload) != 0 {
			t.Fatalf("pub: %+v", m)
		}
		if m := got[3]; m.subject != "_INBOX.a.1" || string(m.payload) != ack {
			t.Fatalf("MSG: %+v", m)
		}
		if m := got[4]; m.subject != "_INBOX.a.2" || len(m.hdr) != 16 || len(m.payload) != 0 {
			t.Fatalf("HMSG: %+v", m)
		}
	}
}

// Through a real server, the tap journals what the client sent and what
// the stream acknowledged, including a retry answered as a duplicate, and
// the checks find the journal and the stream in agreement.
func TestTapJournal(t *testing.T) {
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	ctx := context.Background()
	if _, err := streams.Ensure(ctx, js, streams.Topology{}, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.EndGenesis(ctx, js, streams.Topology{}); err != nil { // no coordinator: inputs by hand
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	tap := NewTap(j)
	nc, err := nats.Connect(srv.ClientURL(), tap.Option())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tjs, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(subject, body, id string) uint64 {
		msg := nats.NewMsg(subject)
		msg.Data = []byte(body)
		ack, err := tjs.PublishMsg(ctx, msg, jetstream.WithMsgID(id))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	s1 := publish("tenure.in.worker.w1.j1.acquire", `{"v":1}`, "w1-1")
	s2 := publish("tenure.in.worker.w1.j1.acquire", `{"v":1}`, "w1-1") // a retry
	s3 := publish("tenure.in.worker.w1.j2.acquire", `{"v":1,"lease_ms":500}`, "w1-2")
	if err := nc.Publish("not.an.input", []byte("x")); err != nil { // not journaled
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if s1 != 1 || s2 != 1 || s3 != 2 {
		t.Fatalf("sequences %d %d %d", s1, s2, s3)
	}
	es, err := ReadJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	var sent, acks, dups int
	for _, e := range es {
		switch e.Kind {
		case EntrySent:
			sent++
		case EntryAck:
			acks++
			if e.Duplicate {
				dups++
			}
			if e.Stream != "TENURE_IN" || e.MsgID == "" || e.BodySHA == "" {
				t.Errorf("ack %+v", e)
			}
		}
	}
	if sent != 3 || acks != 3 || dups != 1 || tap.Err() != nil {
		t.Fatalf("sent %d, acks %d (duplicates %d), err %v: %+v", sent, acks, dups, tap.Err(), es)
	}
	l, err := ReadLog(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := Check(l, &Clients{Entries: es})
	if r.Lost.Count+r.Phantom.Count != 0 || r.Stats.Acked != 2 || r.Stats.Attempted != 2 || r.Stats.Stored != 2 {
		t.Fatalf("check: lost %+v, phantom %+v, stats %+v", r.Lost, r.Phantom, r.Stats)
	}
	// Read again after more inputs: only the new ones are fetched, and the
	// log equals one read in full.
	publish("tenure.in.worker.w1.j3.acquire", `{"v":1}`, "w1-3")
	more, err := ReadLog(ctx, js, l)
	if err != nil {
		t.Fatal(err)
	}
	all, err := ReadLog(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(more.Inputs) != 3 || len(l.Inputs) != 2 || len(all.Inputs) != 3 {
		t.Fatalf("inputs: %d after %d, %d in full", len(more.Inputs), len(l.Inputs), len(all.Inputs))
	}
	for i := range all.Inputs {
		if a, b := all.Inputs[i], more.Inputs[i]; a.Seq != b.Seq || a.Subject != b.Subject || string(a.Data) != string(b.Data) || a.Time != b.Time {
			t.Fatalf("input %d: %+v, read in full %+v", i, b, a)
		}
	}
}

// A journal whose last line was cut short (its writer was killed) reads
// without it; a damaged line in the middle is an error.
func TestReadJournal(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "j.jsonl")
	j, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := j.Add(Entry{Kind: EntrySent, Subject: "tenure.in.x", MsgID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"t":"sent","subj`)
	f.Close()
	es, err := ReadJournal(path)
	if err != nil || len(es) != 3 || es[2].MsgID != "2" || es[0].At == 0 {
		t.Fatalf("%v: %+v", err, es)
	}
	// Journals reads what was appended since, once the line is whole.
	js := NewJournals(dir)
	if es, err := js.Read(); err != nil || len(es) != 3 {
		t.Fatalf("journals: %v %+v", err, es)
	}
	f, _ = os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`ect":"tenure.in.y","msg_id":"3"}` + "\n")
	f.Close()
	if es, err := js.Read(); err != nil || len(es) != 4 || es[3].MsgID != "3" || es[3].Subject != "tenure.in.y" {
		t.Fatalf("journals after the line was finished: %v %+v", err, es)
	}
	if es, err := ReadJournal(filepath.Join(dir, "none.jsonl")); err != nil || es != nil {
		t.Fatalf("missing journal: %v %v", es, err)
	}
	os.WriteFile(path, []byte("{}\nnot json\n{}\n"), 0o644)
	if _, err := ReadJournal(path); err == nil {
		t.Fatal("a damaged line must be an error")
	}
}
