package chaos

import (
	"bytes"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/events"
)

// Tap is a nats.CustomDialer that journals, from the bytes on the wire,
// every input a client publishes (a PUB or HPUB on tenure.in.>) and every
// PubAck the server sends back for one. It sees what really left the
// process and what really came back, whatever library produced it, so the
// journal is independent of the worker SDK it observes: an input is
// journaled as sent before its last byte is handed to the socket, and as
// acknowledged when its PubAck is read.
type Tap struct {
	j      *Journal
	dialer net.Dialer

	mu      sync.Mutex
	pending map[string]pendingPub // reply subject -> the input awaiting its PubAck
	err     error                 // first journal write error
}

type pendingPub struct {
	subject, msgID, sha string
	n                   int
	at                  time.Time
}

// NewTap returns a dialer that journals to j.
func NewTap(j *Journal) *Tap {
	return &Tap{j: j, dialer: net.Dialer{Timeout: 2 * time.Second}, pending: make(map[string]pendingPub)}
}

// Option is the nats.Option that makes a connection dial through the tap.
func (t *Tap) Option() nats.Option { return nats.SetCustomDialer(t) }

// Err is the first error writing the journal, if any.
func (t *Tap) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Dial connects to address and wraps the connection.
func (t *Tap) Dial(network, address string) (net.Conn, error) {
	c, err := t.dialer.Dial(network, address)
	if err != nil {
		return nil, err
	}
	tc := &tapConn{Conn: c}
	tc.out.onMsg = t.sent
	tc.in.onMsg = t.received
	return tc, nil
}

func (t *Tap) add(e Entry) {
	if err := t.j.Add(e); err != nil {
		t.mu.Lock()
		if t.err == nil {
			t.err = err
		}
		t.mu.Unlock()
	}
}

// sent is called for each message the client writes.
func (t *Tap) sent(m protoMsg) {
	if !strings.HasPrefix(m.subject, events.InputPrefix+".") {
		return
	}
	p := pendingPub{subject: m.subject, msgID: headerValue(m.hdr, nats.MsgIdHdr), sha: BodySHA(m.payload), n: len(m.payload), at: time.Now()}
	t.add(Entry{Kind: EntrySent, Subject: p.subject, MsgID: p.msgID, BodySHA: p.sha, Len: p.n})
	if m.reply == "" {
		return
	}
	t.mu.Lock()
	t.pending[m.reply] = p
	if len(t.pending) > 4096 { // requests that never got an answer
		for k, v := range t.pending {
			if time.Since(v.at) > time.Minute {
				delete(t.pending, k)
			}
		}
	}
	t.mu.Unlock()
}

// received is called for each message the server delivers.
func (t *Tap) received(m protoMsg) {
	t.mu.Lock()
	p, ok := t.pending[m.subject]
	if ok {
		delete(t.pending, m.subject)
	}
	t.mu.Unlock()
	if !ok || len(m.payload) == 0 {
		return // not a reply to an input, or a status (no responders)
	}
	var ack struct {
		Stream    string `json:"stream"`
		Seq       uint64 `json:"seq"`
		Duplicate bool   `json:"duplicate"`
	}
	if json.Unmarshal(m.payload, &ack) != nil || ack.Stream == "" || ack.Seq == 0 {
		return // an error reply: not stored
	}
	t.add(Entry{Kind: EntryAck, Subject: p.subject, MsgID: p.msgID, BodySHA: p.sha, Len: p.n,
		Stream: ack.Stream, Seq: ack.Seq, Duplicate: ack.Duplicate})
}

// tapConn feeds both directions of a connection to protocol parsers.
type tapConn struct {
	net.Conn
	wmu, rmu sync.Mutex
	out, in  protoParser
}

func (c *tapConn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	c.out.feed(b)
	c.wmu.Unlock()
	return c.Conn.Write(b)
}

func (c *tapConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.rmu.Lock()
		c.in.feed(b[:n])
		c.rmu.Unlock()
	}
	return n, err
}

// protoMsg is one PUB/HPUB (client to server) or MSG/HMSG (server to
// client). The slices alias the parser's buffer: valid during the callback.
type protoMsg struct {
	subject, reply string
	hdr, payload   []byte
}

// protoParser splits one direction of the NATS client protocol into
// operations, across arbitrary fragmentation of the byte stream. It hands
// every message operation to onMsg and skips the others (INFO, CONNECT,
// SUB, UNSUB, PING, PONG, +OK, -ERR).
type protoParser struct {
	buf   []byte
	onMsg func(protoMsg)
	bad   bool // the stream could not be parsed: stop looking
}

var crlf = []byte("\r\n")

func (p *protoParser) feed(b []byte) {
	if p.bad {
		return
	}
	p.buf = append(p.buf, b...)
	for {
		i := bytes.Index(p.buf, crlf)
		if i < 0 {
			if len(p.buf) > 1<<20 {
				p.bad = true // no control line is that long
				p.buf = nil
			}
			break
		}
		f := strings.Fields(string(p.buf[:i]))
		if len(f) == 0 {
			p.buf = p.buf[i+2:]
			continue
		}
		var m protoMsg
		var hdrLen, total int
		var ok bool
		switch strings.ToUpper(f[0]) {
		case "PUB": // PUB <subject> [reply] <size>
			m, hdrLen, total, ok = fields(f, 1, 0, false)
		case "HPUB": // HPUB <subject> [reply] <hdr size> <total size>
			m, hdrLen, total, ok = fields(f, 1, 0, true)
		case "MSG": // MSG <subject> <sid> [reply] <size>
			m, hdrLen, total, ok = fields(f, 1, 1, false)
		case "HMSG": // HMSG <subject> <sid> [reply] <hdr size> <total size>
			m, hdrLen, total, ok = fields(f, 1, 1, true)
		default:
			p.buf = p.buf[i+2:]
			continue
		}
		if !ok {
			p.bad = true
			p.buf = nil
			return
		}
		end := i + 2 + total + 2
		if len(p.buf) < end {
			break // the payload has not all arrived yet
		}
		body := p.buf[i+2 : i+2+total]
		m.hdr, m.payload = body[:hdrLen], body[hdrLen:]
		p.onMsg(m)
		p.buf = p.buf[end:]
	}
	if len(p.buf) == 0 {
		p.buf = p.buf[:0:0] // let the old array go
	}
}

// fields reads the arguments of a message operation: the subject, skip
// tokens (a sid), an optional reply, and the sizes.
func fields(f []string, subj, skip int, headers bool) (protoMsg, int, int, bool) {
	sizes := 1
	if headers {
		sizes = 2
	}
	var m protoMsg
	if len(f) < subj+1+skip {
		return m, 0, 0, false
	}
	m.subject = f[subj]
	rest := f[subj+1+skip:]
	switch len(rest) {
	case sizes:
	case sizes + 1:
		m.reply, rest = rest[0], rest[1:]
	default:
		return m, 0, 0, false
	}
	total, err := strconv.Atoi(rest[len(rest)-1])
	if err != nil || total < 0 {
		return m, 0, 0, false
	}
	hdrLen := 0
	if headers {
		if hdrLen, err = strconv.Atoi(rest[0]); err != nil || hdrLen < 0 || hdrLen > total {
			return m, 0, 0, false
		}
	}
	return m, hdrLen, total, true
}

// headerValue returns the value of header name in a NATS header block
// ("NATS/1.0\r\nName: value\r\n\r\n"), "" if absent.
func headerValue(hdr []byte, name string) string {
	lines := strings.Split(string(hdr), "\r\n")
	for _, l := range lines[min(1, len(lines)):] {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
