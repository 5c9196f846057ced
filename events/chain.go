package events

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"strconv"
)

// The decision chain (PROTOCOL.md §20). Every stored decision carries, in
// its HeaderChain header, the chain value
//
//	C(0) = 32 zero bytes
//	C(i) = SHA-256("tenure chain v1\x00" || C(i-1) || BE64 i || BE64 cause ||
//	               BE32 n || BE32 of || BE32 len(subject) || subject ||
//	               BE32 len(body) || body)
//
// of decision i (its stream sequence), its Tenure-Cause and Tenure-N
// headers, its subject and its body as stored. C(i) commits to every
// decision up to i: whoever keeps one chain value (a worker's receipt, a
// signed chain head) can later prove that the log was changed or lost
// decisions at or before i, even when the log still replays cleanly.
//
// The value is defined for every decision from the first, including the
// decisions of a log older than the chain (before its rules input, PROTOCOL
// §1.1), which carry no header: every decision derived at rules revision 2
// or later must carry it.

// HeaderChain carries a decision's chain value: ChainLen bytes as 64
// lower-case hexadecimal digits.
const HeaderChain = "Tenure-Chain"

// ChainLen is the length of a chain value (SHA-256), in bytes.
const ChainLen = 32

// Chain is a chain value: C(i) of decision i.
type Chain [ChainLen]byte

// chainDomain separates chain values from every other SHA-256 in Tenure.
const chainDomain = "tenure chain v1\x00"

// Chainer computes successive chain values with one reused hash state.
// Its zero value is not ready: use NewChainer.
type Chainer struct {
	h   hash.Hash
	pre []byte // the framed bytes before the body, rebuilt for each value
	sum []byte
}

// NewChainer returns a Chainer.
func NewChainer() *Chainer {
	return &Chainer{h: sha256.New(), pre: make([]byte, 0, 256), sum: make([]byte, 0, ChainLen)}
}

// Next returns C(seq) from prev = C(seq-1) and decision seq's stored content.
//
// Everything before the body (about a hundred bytes) is framed into one
// reused buffer and hashed with one Write, the body with another: small
// Writes each cost a call through the interface and a copy into the hash's
// block buffer, and converting the domain and the subject to byte slices
// for them allocated (BenchmarkChainNext).
func (c *Chainer) Next(prev Chain, seq, cause uint64, n, of uint32, subject string, body []byte) Chain {
	b := append(c.pre[:0], chainDomain...)
	b = append(b, prev[:]...)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint64(b, cause)
	b = binary.BigEndian.AppendUint32(b, n)
	b = binary.BigEndian.AppendUint32(b, of)
	b = binary.BigEndian.AppendUint32(b, uint32(len(subject)))
	b = append(b, subject...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	c.pre = b
	h := c.h
	h.Reset()
	h.Write(b)
	h.Write(body)
	var out Chain
	copy(out[:], h.Sum(c.sum[:0]))
	return out
}

// NextChain is Next with a hash state of its own.
func NextChain(prev Chain, seq, cause uint64, n, of uint32, subject string, body []byte) Chain {
	return NewChainer().Next(prev, seq, cause, n, of, subject, body)
}

// String returns the 64 lower-case hexadecimal digits of the header.
func (c Chain) String() string { return hex.EncodeToString(c[:]) }

// IsZero reports whether c is C(0).
func (c Chain) IsZero() bool { return c == Chain{} }

// ParseChain reads a chain value as the header carries it: 64 lower-case
// hexadecimal digits, read from the string itself (the audit parses one per
// decision; converting it to a byte slice first copied it).
func ParseChain(s string) (Chain, bool) {
	var c Chain
	if len(s) != 2*ChainLen {
		return c, false
	}
	for i := range c {
		hi, ok1 := hexDigit(s[2*i])
		lo, ok2 := hexDigit(s[2*i+1])
		if !ok1 || !ok2 {
			return c, false
		}
		c[i] = hi<<4 | lo
	}
	return c, true
}

// ChainCheck checks the chain header of each stored decision of a log, in
// order, against the chain value the decisions before it give: the one
// check the coordinator (verifying what it did not append) and the audit
// share. Once a decision carried a chain value, every later one must: a
// log that loses its chain headers part way was changed, whatever its
// rules revision.
type ChainCheck struct {
	seen bool // a decision carried a chain value
}

// ChainError is why a stored decision's chain header does not check out.
type ChainError struct {
	Kind ChainErrorKind
	Got  string // the header as stored
	Want Chain  // the value the decisions before it give
}

// ChainErrorKind says what is wrong with a chain header.
type ChainErrorKind uint8

const (
	// ChainMissing: no header where one is required.
	ChainMissing ChainErrorKind = iota + 1
	// ChainUnreadable: not 64 lower-case hexadecimal digits.
	ChainUnreadable
	// ChainBroken: another value than the decisions before it give.
	ChainBroken
)

func (e *ChainError) Error() string {
	switch e.Kind {
	case ChainMissing:
		return "no " + HeaderChain + " header (every decision at rules revision 2 carries one, and every one after a decision that did)"
	case ChainUnreadable:
		return "unreadable " + HeaderChain + " header " + strconv.Quote(e.Got)
	}
	return "the chain breaks: its " + HeaderChain + " header is " + e.Got + ", the decisions before it give " + e.Want.String() + " (the log before it was changed or lost decisions)"
}

// Check checks header, the stored chain header of the next decision (""
// when it has none), against want, the chain value the decisions before it
// give; required says the decision was derived at rules revision 2 or
// later. It returns nil or a *ChainError.
func (c *ChainCheck) Check(header string, want Chain, required bool) error {
	if header == "" {
		if required || c.seen {
			return &ChainError{Kind: ChainMissing, Want: want}
		}
		return nil
	}
	c.seen = true
	got, ok := ParseChain(header)
	switch {
	case !ok:
		return &ChainError{Kind: ChainUnreadable, Got: header, Want: want}
	case got != want:
		return &ChainError{Kind: ChainBroken, Got: header, Want: want}
	}
	return nil
}

// Seen reports whether a decision checked carried a chain value.
func (c *ChainCheck) Seen() bool { return c.seen }
