// Package jsmodel is a model of the JetStream that Tenure needs, for the
// deterministic simulator (internal/sim; issue "Deterministic
// simulation"): streams with sequences and stored timestamps from the
// simulated clock, the expected-last-sequence fence, the duplicate window
// (which expires), atomic batches, a KV bucket with revisions,
// compare-and-set and a TTL, and a snapshot object; and a network (Net)
// through which every request and every reply travels, in an order and
// with faults the seed chooses: lost, late, duplicated and reordered
// replies, publishes whose outcome is unknown (stored but the reply lost,
// or never stored), readers that stall, actors cut off for a while.
//
// It implements coordinator.Backend (Backend) for real coordinators and a
// worker's side (Client) for the simulator's workers. Each behaviour it
// shares with JetStream is pinned by a test that runs the same script
// against the real embedded nats-server and the model and compares what
// each answers (conform_test.go). The tenure binary never links it.
//
// Everything the model stores happens under one lock, in the order the
// Net applies operations; the model reads the time from time.Now, which
// in the simulator's synctest bubble is the bubble's clock.
package jsmodel

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream's publish headers the model reads.
const (
	hdrMsgID       = "Nats-Msg-Id"
	hdrExpectSeq   = "Nats-Expected-Last-Sequence"
	hdrExpectSubj  = "Nats-Expected-Last-Subject-Sequence"
	hdrExpectStrm  = "Nats-Expected-Stream"
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// JetStream API error codes the model answers with.
const (
	codeWrongLastSeq      = 10071 // wrong last sequence: {seq}
	codeStreamNotMatch    = 10060 // expected stream does not match
	codeBatchExpectNotFst = 10164 // wrong last sequence (an expectation on a batch message but the first)
	codeBatchDuplicate    = 10201 // atomic publish batch contains duplicate message id
	codeBatchIncomplete   = 10176 // atomic publish batch is incomplete
)

// Msg is one stored message.
type Msg struct {
	Seq     uint64
	Time    time.Time
	Subject string
	Header  nats.Header
	Data    []byte
}

// Raw is m as jetstream.Stream.GetMsg returns it.
func (m *Msg) Raw() *jetstream.RawStreamMsg {
	return &jetstream.RawStreamMsg{Subject: m.Subject, Sequence: m.Seq, Header: m.Header, Data: m.Data, Time: m.Time}
}

// Stream is a stream of the model: every message since sequence 1 (the
// simulator never removes one), and its duplicate window.
type Stream struct {
	Name   string
	Config jetstream.StreamConfig
	Msgs   []Msg // Msgs[i].Seq == i+1
	window time.Duration
	dedup  map[string]dedupEntry
	// Atomic batches being assembled, by batch id: their messages before
	// the commit.
	batches map[string][]*nats.Msg
}

type dedupEntry struct {
	seq uint64
	at  time.Time
}

func newStream(cfg jetstream.StreamConfig) *Stream {
	return &Stream{Name: cfg.Name, Config: cfg, window: cfg.Duplicates, dedup: map[string]dedupEntry{}, batches: map[string][]*nats.Msg{}}
}

// Last is the stream's last sequence.
func (s *Stream) Last() uint64 { return uint64(len(s.Msgs)) }

// Get returns message seq (nil: none).
func (s *Stream) Get(seq uint64) *Msg {
	if seq == 0 || seq > s.Last() {
		return nil
	}
	return &s.Msgs[seq-1]
}

// PubAck is what a publish is answered with: JetStream's PubAck or its
// error (the JSON nats-server sends).
type PubAck struct {
	Stream    string              `json:"stream"`
	Seq       uint64              `json:"seq,omitempty"`
	Duplicate bool                `json:"duplicate,omitempty"`
	Batch     string              `json:"batch,omitempty"`
	Count     uint64              `json:"count,omitempty"`
	Error     *jetstream.APIError `json:"error,omitempty"`
}

// JSON is the reply's body.
func (a *PubAck) JSON() []byte {
	b, _ := json.Marshal(a) // plain fields: never fails
	return b
}

func apiErr(code int, status int, desc string) *jetstream.APIError {
	return &jetstream.APIError{Code: status, ErrorCode: jetstream.ErrorCode(code), Description: desc}
}

// expire forgets the ids of the duplicate window stored before now-window.
func (s *Stream) expire(now time.Time) {
	for id, e := range s.dedup {
		if now.Sub(e.at) >= s.window {
			delete(s.dedup, id)
		}
	}
}

// Publish stores msg as JetStream does, at time now, and returns the
// reply; reply false means there is none (a message of an atomic batch
// before its commit).
func (s *Stream) Publish(now time.Time, msg *nats.Msg) (PubAck, bool) {
	s.expire(now)
	h := msg.Header
	if id := h.Get(hdrBatchID); id != "" {
		return s.batch(now, id, msg)
	}
	if want := h.Get(hdrExpectStrm); want != "" && want != s.Name {
		return PubAck{Stream: s.Name, Error: apiErr(codeStreamNotMatch, 400, "expected stream does not match")}, true
	}
	// The expectation first, then the window (a duplicate with a wrong
	// expectation is refused, not answered as a duplicate).
	if v := h.Get(hdrExpectSeq); v != "" {
		want, err := strconv.ParseUint(v, 10, 64)
		if err != nil || want != s.Last() {
			return PubAck{Stream: s.Name, Error: apiErr(codeWrongLastSeq, 400, "wrong last sequence: "+strconv.FormatUint(s.Last(), 10))}, true
		}
	}
	id := h.Get(hdrMsgID)
	if e, ok := s.dedup[id]; ok && id != "" {
		return PubAck{Stream: s.Name, Seq: e.seq, Duplicate: true}, true
	}
	s.store(now, msg)
	return PubAck{Stream: s.Name, Seq: s.Last()}, true
}

func (s *Stream) store(now time.Time, msg *nats.Msg) {
	h := cloneHeader(msg.Header) // as sent, JetStream's publish headers too
	if len(h) == 0 {
		h = nil
	}
	seq := s.Last() + 1
	s.Msgs = append(s.Msgs, Msg{Seq: seq, Time: now, Subject: msg.Subject, Header: h, Data: append([]byte(nil), msg.Data...)})
	if id := msg.Header.Get(hdrMsgID); id != "" {
		s.dedup[id] = dedupEntry{seq: seq, at: now}
	}
}

// batch adds msg to atomic batch id; at its commit, the batch is stored
// whole or not at all: an expected last sequence only on its first
// message, checked against the stream at the commit; a message id the
// window holds refuses it whole.
func (s *Stream) batch(now time.Time, id string, msg *nats.Msg) (PubAck, bool) {
	s.batches[id] = append(s.batches[id], msg)
	if msg.Header.Get(hdrBatchCommit) == "" {
		return PubAck{}, false
	}
	ms := s.batches[id]
	delete(s.batches, id)
	for i, m := range ms {
		if n, err := strconv.Atoi(m.Header.Get(hdrBatchSeq)); err != nil || n != i+1 {
			return PubAck{Stream: s.Name, Error: apiErr(codeBatchIncomplete, 400, "atomic publish batch is incomplete")}, true
		}
		if i > 0 && m.Header.Get(hdrExpectSeq) != "" {
			return PubAck{Stream: s.Name, Error: apiErr(codeBatchExpectNotFst, 400, "wrong last sequence")}, true
		}
		if mid := m.Header.Get(hdrMsgID); mid != "" {
			if _, ok := s.dedup[mid]; ok {
				return PubAck{Stream: s.Name, Error: apiErr(codeBatchDuplicate, 400, "atomic publish batch contains duplicate message id")}, true
			}
		}
	}
	if v := ms[0].Header.Get(hdrExpectSeq); v != "" {
		want, err := strconv.ParseUint(v, 10, 64)
		if err != nil || want != s.Last() {
			return PubAck{Stream: s.Name, Error: apiErr(codeWrongLastSeq, 400, "wrong last sequence: "+strconv.FormatUint(s.Last(), 10))}, true
		}
	}
	for _, m := range ms {
		s.store(now, m)
	}
	return PubAck{Stream: s.Name, Seq: s.Last(), Batch: id, Count: uint64(len(ms))}, true
}

// KV is a KV bucket of the model: JetStream's KV on a stream whose
// messages live TTL (its MaxAge), revisions its sequences.
type KV struct {
	ttl     time.Duration
	rev     uint64 // the bucket stream's last sequence
	entries map[string]*kvEntry
}

type kvEntry struct {
	value   []byte
	rev     uint64
	at      time.Time
	deleted bool
}

func newKV(ttl time.Duration) *KV { return &KV{ttl: ttl, entries: map[string]*kvEntry{}} }

// live returns key's entry if it has not aged out (nil: none, or aged
// out: the stream removed it).
func (kv *KV) live(now time.Time, key string) *kvEntry {
	e := kv.entries[key]
	if e != nil && kv.ttl > 0 && now.Sub(e.at) >= kv.ttl {
		delete(kv.entries, key)
		return nil
	}
	return e
}

func (kv *KV) put(now time.Time, key string, value []byte, deleted bool) uint64 {
	kv.rev++
	kv.entries[key] = &kvEntry{value: append([]byte(nil), value...), rev: kv.rev, at: now, deleted: deleted}
	return kv.rev
}

// Create writes key if it has no live entry (a delete marker is none).
func (kv *KV) Create(now time.Time, key string, value []byte) (uint64, error) {
	if e := kv.live(now, key); e != nil && !e.deleted {
		return 0, jetstream.ErrKeyExists
	}
	return kv.put(now, key, value, false), nil
}

// Get reads key.
func (kv *KV) Get(now time.Time, key string) ([]byte, uint64, error) {
	e := kv.live(now, key)
	if e == nil || e.deleted {
		return nil, 0, jetstream.ErrKeyNotFound
	}
	return append([]byte(nil), e.value...), e.rev, nil
}

// Update writes key if its last revision is last.
func (kv *KV) Update(now time.Time, key string, value []byte, last uint64) (uint64, error) {
	var cur uint64
	if e := kv.live(now, key); e != nil {
		cur = e.rev
	}
	if cur != last {
		return 0, jetstream.ErrKeyExists
	}
	return kv.put(now, key, value, false), nil
}

// Delete puts a delete marker if key's last revision is last.
func (kv *KV) Delete(now time.Time, key string, last uint64) error {
	var cur uint64
	if e := kv.live(now, key); e != nil {
		cur = e.rev
	}
	if last != 0 && cur != last {
		return jetstream.ErrKeyExists
	}
	kv.put(now, key, nil, true)
	return nil
}

// Object is the stored snapshot object.
type Object struct {
	Info *jetstream.ObjectInfo
	Data []byte
}

// Model is the whole of what the model stores: the input and decision
// streams, the leader bucket and the snapshot object.
type Model struct {
	In, Out *Stream
	Leader  *KV
	Snap    *Object
	nuid    uint64 // the next object version's NUID
}

// NewModel returns a model of the topology's streams as streams.Ensure
// leaves them once genesis has ended (every input subject taken), with
// the leadership TTL ttl.
func NewModel(in, out jetstream.StreamConfig, ttl time.Duration) *Model {
	return &Model{In: newStream(in), Out: newStream(out), Leader: newKV(ttl)}
}

// PutSnapshot replaces the snapshot object.
func (m *Model) PutSnapshot(now time.Time, name string, headers nats.Header, data []byte) {
	m.nuid++
	m.Snap = &Object{Info: &jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name, Headers: cloneHeader(headers)},
		NUID:       "obj" + strconv.FormatUint(m.nuid, 10), Size: uint64(len(data)), ModTime: now,
	}, Data: append([]byte(nil), data...)}
}

// Info is s's jetstream.StreamInfo.
func (s *Stream) Info() *jetstream.StreamInfo {
	st := jetstream.StreamState{Msgs: s.Last(), LastSeq: s.Last()}
	if s.Last() > 0 {
		st.FirstSeq = 1
		st.FirstTime, st.LastTime = s.Msgs[0].Time, s.Msgs[len(s.Msgs)-1].Time
	}
	return &jetstream.StreamInfo{Config: s.Config, State: st}
}

func cloneHeader(h nats.Header) nats.Header {
	if h == nil {
		return nil
	}
	c := make(nats.Header, len(h))
	for k, v := range h {
		c[k] = append([]string(nil), v...)
	}
	return c
}
