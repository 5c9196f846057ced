package jsmodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// The behaviours the model shares with JetStream, each run as the same
// script against the real embedded nats-server and the model, comparing
// what each answers and stores (issue "Deterministic simulation": every
// behaviour the simulator's model has is pinned by a test on the real
// server).

// answer is a publish's reply as the coordinator reads it.
type answer struct {
	Stream    string
	Seq       uint64
	Duplicate bool
	Batch     string
	Count     uint64
	ErrCode   int
	NoReply   bool
}

func answerOf(a PubAck, ok bool) answer {
	if !ok {
		return answer{NoReply: true}
	}
	r := answer{Stream: a.Stream, Seq: a.Seq, Duplicate: a.Duplicate, Batch: a.Batch, Count: a.Count}
	if a.Error != nil {
		r = answer{Stream: a.Stream, ErrCode: int(a.Error.ErrorCode)}
	}
	return r
}

// pub is one publish of a script: subject, body, headers.
type pub struct {
	subject, body string
	hdr           map[string]string
}

func (p pub) msg() *nats.Msg {
	m := nats.NewMsg(p.subject)
	m.Data = []byte(p.body)
	for k, v := range p.hdr {
		m.Header.Set(k, v)
	}
	return m
}

// realAnswers publishes the script on a real server to a fresh stream
// like cfg, with a reply subject on every message (a batch's messages
// before its commit are published without one, as the coordinator does),
// and returns the answers and the stored messages.
func realAnswers(t *testing.T, cfg jetstream.StreamConfig, script []pub) ([]answer, []Msg) {
	t.Helper()
	srv := testutil.StartServer(t)
	nc, js := testutil.Connect(t, srv.ClientURL())
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var out []answer
	for _, p := range script {
		m := p.msg()
		if m.Header.Get(hdrBatchID) != "" && m.Header.Get(hdrBatchCommit) == "" {
			if err := nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
			out = append(out, answer{NoReply: true})
			continue
		}
		rep, err := nc.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatalf("publish %s: %v", p.subject, err)
		}
		var a PubAck
		if err := jsonUnmarshal(rep.Data, &a); err != nil {
			t.Fatalf("reply %q: %v", rep.Data, err)
		}
		out = append(out, answerOf(a, true))
	}
	s, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	var stored []Msg
	for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, Msg{Seq: m.Sequence, Subject: m.Subject, Header: m.Header, Data: m.Data})
	}
	return out, stored
}

func modelAnswers(cfg jetstream.StreamConfig, script []pub) ([]answer, []Msg) {
	s := newStream(cfg)
	now := time.Unix(1_800_000_000, 0)
	var out []answer
	for _, p := range script {
		out = append(out, answerOf(s.Publish(now, p.msg())))
		now = now.Add(time.Millisecond)
	}
	return out, s.Msgs
}

// comparable drops what only one side has: stored times, and the headers
// a direct get adds (the message's sequence, stream, subject and time).
func comparable(ms []Msg) []Msg {
	out := make([]Msg, len(ms))
	for i, m := range ms {
		hd := cloneHeader(m.Header)
		for _, k := range []string{"Nats-Sequence", "Nats-Stream", "Nats-Subject", "Nats-Time-Stamp"} {
			delete(hd, k)
		}
		if len(hd) == 0 {
			hd = nil
		}
		out[i] = Msg{Seq: m.Seq, Subject: m.Subject, Header: hd, Data: m.Data}
	}
	return out
}

func compareScripts(t *testing.T, cfg jetstream.StreamConfig, script []pub) {
	t.Helper()
	ra, rs := realAnswers(t, cfg, script)
	ma, ms := modelAnswers(cfg, script)
	for i := range script {
		if ra[i] != ma[i] {
			t.Errorf("publish %d (%s %v): the server answers %+v, the model %+v", i+1, script[i].subject, script[i].hdr, ra[i], ma[i])
		}
	}
	if !reflect.DeepEqual(comparable(rs), comparable(ms)) {
		t.Errorf("stored:\n server %+v\n model  %+v", comparable(rs), comparable(ms))
	}
}

func h(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// The fence and the duplicate window of single publishes: an expected
// last sequence stores or refuses (10071), a message id seen is a
// duplicate naming the first sequence (nothing stored), even with a
// wrong expectation; an expected stream that is another's refuses
// (10060). Headers but JetStream's are stored as sent.
func TestConformPublishFenceAndDuplicates(t *testing.T) {
	cfg := streams.Topology{}.DecisionConfig()
	s := "tenure.out.w1.j1.granted"
	compareScripts(t, cfg, []pub{
		{s, `{"a":1}`, h(hdrExpectSeq, "0", hdrMsgID, "d-1-0", "Tenure-Cause", "1")},
		{s, `{"a":2}`, h(hdrExpectSeq, "1", hdrMsgID, "d-2-0")},
		{s, `{"a":3}`, h(hdrExpectSeq, "1", hdrMsgID, "d-3-0")},          // wrong last sequence
		{s, `{"a":2}`, h(hdrExpectSeq, "2", hdrMsgID, "d-2-0")},          // duplicate
		{s, `{"a":9}`, h(hdrExpectSeq, "7", hdrMsgID, "d-2-0")},          // duplicate, wrong expectation
		{s, `{"a":4}`, h(hdrMsgID, "d-4-0", hdrExpectStrm, "TENURE_IN")}, // another stream
		{s, `{"a":5}`, h(hdrMsgID, "d-5-0", hdrExpectStrm, cfg.Name)},
		{s, `{"a":6}`, nil},
	})
}

// Atomic batches (the appender's units): stored whole at the commit with
// one reply naming the last sequence, the batch and its count; the
// expectation on the first message only (10164 on another, which
// refuses the whole batch); a wrong expectation refuses it whole
// (10071); a message id the window holds refuses it whole (10201).
func TestConformAtomicBatches(t *testing.T) {
	cfg := streams.Topology{}.DecisionConfig()
	s := "tenure.out.w1.j1.renewed"
	b := func(id string, seq int, commit bool, kv ...string) pub {
		hd := h(kv...)
		hd[hdrBatchID], hd[hdrBatchSeq] = id, strconv.Itoa(seq)
		if commit {
			hd[hdrBatchCommit] = "1"
		}
		return pub{s, fmt.Sprintf(`{"b":%q,"n":%d}`, id, seq), hd}
	}
	compareScripts(t, cfg, []pub{
		b("b1", 1, false, hdrExpectSeq, "0", hdrMsgID, "d-1-0"),
		b("b1", 2, false, hdrMsgID, "d-1-1"),
		b("b1", 3, true, hdrMsgID, "d-1-2"),
		b("b2", 1, false, hdrExpectSeq, "2", hdrMsgID, "d-2-0"), // wrong last sequence: refused whole
		b("b2", 2, true, hdrMsgID, "d-2-1"),
		b("b3", 1, false, hdrExpectSeq, "3", hdrMsgID, "d-3-0"),
		b("b3", 2, true, hdrExpectSeq, "4", hdrMsgID, "d-3-1"),  // an expectation on the second
		b("b4", 1, false, hdrExpectSeq, "3", hdrMsgID, "d-1-2"), // a message id seen
		b("b4", 2, true, hdrMsgID, "d-4-1"),
		b("b5", 1, false, hdrExpectSeq, "3", hdrMsgID, "d-5-0"),
		b("b5", 2, true, hdrMsgID, "d-5-1"),
	})
}

// The duplicate window expires: an id published again after the window
// is stored anew (the real server forgets it within twice the window).
func TestConformDuplicateWindowExpires(t *testing.T) {
	const window = 300 * time.Millisecond
	cfg := streams.Topology{}.DecisionConfig()
	cfg.Duplicates = window
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	s := newStream(cfg)
	now := time.Now()
	first, err := js.Publish(ctx, "tenure.out.w1.j1.granted", []byte("x"), jetstream.WithMsgID("id1"))
	if err != nil {
		t.Fatal(err)
	}
	ma, _ := s.Publish(now, (pub{"tenure.out.w1.j1.granted", "x", h(hdrMsgID, "id1")}).msg())
	again, err := js.Publish(ctx, "tenure.out.w1.j1.granted", []byte("x"), jetstream.WithMsgID("id1"))
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := s.Publish(now.Add(window/2), (pub{"tenure.out.w1.j1.granted", "x", h(hdrMsgID, "id1")}).msg())
	if !again.Duplicate || again.Sequence != first.Sequence || !mb.Duplicate || mb.Seq != ma.Seq {
		t.Fatalf("within the window: server %+v, model %+v: want both duplicates of the first", again, mb)
	}
	var later *jetstream.PubAck
	testutil.WaitFor(t, 10*time.Second, "the server to forget the id", func() bool {
		later, err = js.Publish(ctx, "tenure.out.w1.j1.granted", []byte("x"), jetstream.WithMsgID("id1"))
		return err == nil && !later.Duplicate
	})
	mc, _ := s.Publish(now.Add(2*window), (pub{"tenure.out.w1.j1.granted", "x", h(hdrMsgID, "id1")}).msg())
	if later.Sequence != 2 || mc.Duplicate || mc.Seq != 2 {
		t.Fatalf("after the window: server %+v, model %+v: want both stored as 2", later, mc)
	}
}

// The leadership bucket: create, compare-and-set, read back, delete with
// a revision, and its entries living TTL after their last write, on the
// bucket streams.Ensure makes, against the model's KV.
func TestConformLeaderKV(t *testing.T) {
	const ttl = time.Second
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	ctx := context.Background()
	hs, err := streams.Ensure(ctx, js, streams.Topology{}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	real := hs.Leader
	model := newKV(ttl)
	now := time.Now()
	type res struct {
		Rev uint64
		Err error
	}
	norm := func(err error) error {
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrKeyExists):
			return jetstream.ErrKeyExists
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return jetstream.ErrKeyNotFound
		}
		return err
	}
	same := func(what string, r, m res) {
		t.Helper()
		if norm(r.Err) != norm(m.Err) || (r.Err == nil && r.Rev != m.Rev) {
			t.Errorf("%s: server %d %v, model %d %v", what, r.Rev, r.Err, m.Rev, m.Err)
		}
	}
	create := func(v string) (res, res) {
		r, err := real.Create(ctx, "leader", []byte(v))
		m, merr := model.Create(now, "leader", []byte(v))
		return res{r, err}, res{m, merr}
	}
	update := func(v string, last uint64) (res, res) {
		r, err := real.Update(ctx, "leader", []byte(v), last)
		m, merr := model.Update(now, "leader", []byte(v), last)
		return res{r, err}, res{m, merr}
	}
	get := func() (res, res, string, string) {
		e, err := real.Get(ctx, "leader")
		var r res
		rv := ""
		if err == nil {
			r.Rev, rv = e.Revision(), string(e.Value())
		}
		r.Err = err
		mv, mrev, merr := model.Get(now, "leader")
		return r, res{mrev, merr}, rv, string(mv)
	}
	r, m := create("c1")
	same("create", r, m)
	r, m = create("c2")
	same("create of a key that exists", r, m)
	r, m = update("c1", 1)
	same("update at its revision", r, m)
	r, m = update("c2", 1)
	same("update at an old revision", r, m)
	gr, gm, rv, mv := get()
	same("get", gr, gm)
	if rv != mv || rv != "c1" {
		t.Errorf("get: server %q, model %q", rv, mv)
	}
	rd := real.Delete(ctx, "leader", jetstream.LastRevision(1))
	md := model.Delete(now, "leader", 1)
	same("delete at an old revision", res{0, rd}, res{0, md})
	rd = real.Delete(ctx, "leader", jetstream.LastRevision(2))
	md = model.Delete(now, "leader", 2)
	same("delete at its revision", res{0, rd}, res{0, md})
	gr, gm, _, _ = get()
	same("get of a deleted key", gr, gm)
	r, m = create("c2")
	same("create after a delete", r, m)
	// The entry ages out TTL after its last write.
	written := time.Now()
	testutil.WaitFor(t, 10*time.Second, "the server's entry to age out", func() bool {
		_, err := real.Get(ctx, "leader")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if aged := time.Since(written); aged < ttl/2 {
		t.Errorf("the server's entry aged out after %v, TTL %v", aged, ttl)
	}
	now = now.Add(ttl)
	gr, gm, _, _ = get()
	same("get of an aged-out key", gr, gm)
	r, m = update("c2", 4)
	same("update of an aged-out key", r, m)
	r, m = create("c3")
	same("create after it aged out", r, m)
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// TestConformFilters pins the model's subject filters (SubjectMatches:
// its readers' filters, Transport.LastMsg) to a real server's: for each
// filter, the messages a consumer filtered by it delivers, and the last
// message a get by subject finds.
func TestConformFilters(t *testing.T) {
	subjects := []string{
		"tenure.out.w1.j1.acked", "tenure.out.w2.j1.offered", "tenure.out.w1.j2.acked",
		"tenure.out.w1.j1.acked.p0", "tenure.out.w1", "tenure.out.w1.j1", "tenure.out.w10.j1.acked",
		"tenure.out.ops.j1.cancelled", "tenure.out.ops._.policy_set", "tenure.out.ops._.policy_set.p3",
	}
	filters := []string{
		"tenure.out.*.j1.*", "tenure.out.w1.>", "tenure.out.*.j1.>", "tenure.out.w1.j1.acked",
		"tenure.out.*.*.*", "tenure.out.>", "tenure.out.*", "tenure.out.*._.policy_set",
		"tenure.out.*._.policy_set.p3", "tenure.out.w1.*.>", "tenure.out.x.>",
	}
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "F", Subjects: []string{"tenure.out.>"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range subjects {
		if _, err := js.Publish(ctx, subj, []byte(subj)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range filters {
		var want []uint64
		cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{f}})
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := int(info.NumPending); n > 0 {
			batch, err := cons.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for m := range batch.Messages() {
				md, err := m.Metadata()
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, md.Sequence.Stream)
			}
		}
		var got []uint64
		for i, subj := range subjects {
			if SubjectMatches(f, subj) {
				got = append(got, uint64(i+1))
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("filter %s: the model delivers %v, the server %v", f, got, want)
		}
		var wantLast uint64
		if m, err := s.GetLastMsgForSubject(ctx, f); err == nil {
			wantLast = m.Sequence
		} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatal(err)
		}
		var gotLast uint64
		if len(got) > 0 {
			gotLast = got[len(got)-1]
		}
		if gotLast != wantLast {
			t.Errorf("filter %s: the model's last message is %d, the server's %d", f, gotLast, wantLast)
		}
	}
}
