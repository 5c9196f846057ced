package streams

import "strings"

// Delivery is what the reply subject of a message a JetStream consumer
// delivered says about it.
type Delivery struct {
	// Stream and Consumer name the stream the message was delivered from
	// and the consumer that delivered it (substrings of the reply subject:
	// no copy). A reader accepts a delivery only when they name its own
	// stream and consumer: anyone allowed to create a consumer can make the
	// server deliver messages of its choosing to any subject it can name.
	Stream      string
	Consumer    string
	StreamSeq   uint64 // the message's sequence in its stream
	ConsumerSeq uint64 // the delivery sequence of the consumer
	Time        int64  // the stored timestamp, Unix ns
	Pending     uint64 // messages left for the consumer after this one
}

// ParseAckReply reads a Delivery from the reply subject of a message a
// consumer delivered, without allocating (jetstream.Msg.Metadata does the
// same with an allocation per message, which shows on a replay of millions
// of messages). Both forms are understood:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>
//	$JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>[.<token>...]
//
// The second form (nats-server's js_ack_fc_v2 format, the domain "_" when
// there is none) names the account by a hash; ParseAckReply does not check
// it.
func ParseAckReply(s string) (Delivery, bool) {
	const prefix = "$JS.ACK."
	if !strings.HasPrefix(s, prefix) {
		return Delivery{}, false
	}
	s = s[len(prefix):]
	var tok [9]string
	n := 0
	for ; n < len(tok); n++ {
		i := strings.IndexByte(s, '.')
		if i < 0 {
			tok[n], s = s, ""
			n++
			break
		}
		tok[n], s = s[:i], s[i+1:]
	}
	var names, f []string // stream, consumer; delivered, sseq, cseq, time, pending
	switch {
	case n == 7 && s == "":
		names, f = tok[0:2], tok[2:7]
	case n == 9:
		names, f = tok[2:4], tok[4:9]
	default:
		return Delivery{}, false
	}
	if names[0] == "" || names[1] == "" {
		return Delivery{}, false
	}
	seq, ok1 := parseDigits(f[1])
	cseq, ok2 := parseDigits(f[2])
	t, ok3 := parseDigits(f[3])
	p, ok4 := parseDigits(f[4])
	if !ok1 || !ok2 || !ok3 || !ok4 || t > 1<<63-1 {
		return Delivery{}, false
	}
	return Delivery{Stream: names[0], Consumer: names[1], StreamSeq: seq, ConsumerSeq: cseq, Time: int64(t), Pending: p}, true
}

func parseDigits(s string) (uint64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}
