package heads

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/maknow/tenure/events"
)

// Version is the version of the heads this package writes and reads (the
// JSON field "v" and the domain of SignedBytes).
const Version = 1

// domain separates head signatures from every other signature made with
// the same key.
const domain = "tenure head v1\x00"

// KeyPrefix is the nkeys type of head keys: server keys (public keys start
// with "N", seeds with "SN").
const KeyPrefix = nkeys.PrefixByteServer

// A Head is a coordinator's signed statement that decision Seq of decision
// stream Stream has chain value Chain (events.HeaderChain, PROTOCOL.md
// §20.1). Chain commits to every decision up to Seq: a log that does not
// give decision Seq this chain value is not the log the coordinator kept.
type Head struct {
	Stream      string       // the decision stream: TENURE_OUT, TENURE_P2_OUT for partition 2
	Seq         uint64       // the decision: the last one the stream acknowledged when the head was signed
	Chain       events.Chain // C(Seq)
	InputSeq    uint64       // the input decision Seq answers (its Tenure-Cause)
	At          time.Time    // when it was signed, by the coordinator's clock (evidence only)
	Coordinator string       // the coordinator's id
	Key         string       // the public nkey that signed it
	Sig         []byte       // ed25519 signature of SignedBytes
}

// ErrMalformed is the error (wrapped) of a head that does not parse or
// whose fields are out of range.
var ErrMalformed = errors.New("heads: malformed head")

// ErrSignature is the error (wrapped) of a head whose signature does not
// verify against its key.
var ErrSignature = errors.New("heads: bad signature")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// SignedBytes is what a head's signature signs, in this order (BE64 and
// BE32 are big-endian unsigned integers):
//
//	"tenure head v1" 0x00
//	BE32(len(stream)) || stream
//	BE64(seq)
//	chain (32 bytes)
//	BE64(input_seq)
//	BE64(at as Unix nanoseconds, two's complement)
//	BE32(len(coordinator)) || coordinator
//
// The key is not in it: an ed25519 signature verifies under one key only.
func (h *Head) SignedBytes() []byte {
	b := make([]byte, 0, len(domain)+4+len(h.Stream)+8+events.ChainLen+8+8+4+len(h.Coordinator))
	b = append(b, domain...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(h.Stream)))
	b = append(b, h.Stream...)
	b = binary.BigEndian.AppendUint64(b, h.Seq)
	b = append(b, h.Chain[:]...)
	b = binary.BigEndian.AppendUint64(b, h.InputSeq)
	b = binary.BigEndian.AppendUint64(b, uint64(h.At.UnixNano()))
	b = binary.BigEndian.AppendUint32(b, uint32(len(h.Coordinator)))
	b = append(b, h.Coordinator...)
	return b
}

// check validates the fields a signature covers.
func (h *Head) check() error {
	switch {
	case !validName(h.Stream):
		return malformed("stream %q: want 1 to 64 of [A-Za-z0-9_-]", h.Stream)
	case h.Seq == 0:
		return malformed("seq 0: decision sequences start at 1")
	case h.InputSeq == 0:
		return malformed("input_seq 0: input sequences start at 1")
	case !events.ValidToken(h.Coordinator):
		return malformed("coordinator %q: want 1 to %d of [A-Za-z0-9_-]", h.Coordinator, events.MaxTokenLen)
	case h.At.IsZero() || h.At.Before(time.Unix(0, math.MinInt64)) || h.At.After(time.Unix(0, math.MaxInt64)):
		return malformed("at %v: want a time Unix nanoseconds can hold (1678 to 2262)", h.At)
	}
	return nil
}

// validName reports whether s may be a stream name here: what
// streams.Topology names streams with.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 64+len("_P1023_OUT") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// CheckSigner returns the public key of kp, a key pair that can sign heads:
// a server nkey with its seed.
func CheckSigner(kp nkeys.KeyPair) (string, error) {
	if kp == nil {
		return "", errors.New("heads: no key")
	}
	if err := nkeys.CompatibleKeyPair(kp, KeyPrefix); err != nil {
		return "", fmt.Errorf("heads: not a server nkey: %w", err)
	}
	if _, err := kp.Seed(); err != nil {
		return "", fmt.Errorf("heads: a public key cannot sign: %w", err)
	}
	return kp.PublicKey()
}

// Sign returns h signed with kp: At in UTC, Key kp's public key, Sig the
// signature of SignedBytes. It refuses a head that Parse would refuse.
func Sign(kp nkeys.KeyPair, h Head) (Head, error) {
	pub, err := CheckSigner(kp)
	if err != nil {
		return Head{}, err
	}
	h.At = h.At.UTC() // and no monotonic reading
	if err := h.check(); err != nil {
		return Head{}, err
	}
	h.Key = pub
	if h.Sig, err = kp.Sign(h.SignedBytes()); err != nil {
		return Head{}, fmt.Errorf("heads: sign: %w", err)
	}
	return h, nil
}

// Verify checks h's signature against h.Key, which must be a server nkey
// (ErrSignature if it does not verify). Whether the key is one to trust is
// the caller's question.
func Verify(h Head) error {
	if !nkeys.IsValidPublicServerKey(h.Key) {
		return malformed("key %q is not a public server nkey", h.Key)
	}
	if err := h.check(); err != nil {
		return err
	}
	kp, err := nkeys.FromPublicKey(h.Key)
	if err != nil {
		return malformed("key %q: %v", h.Key, err)
	}
	if len(h.Sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrSignature, len(h.Sig), ed25519.SignatureSize)
	}
	if err := kp.Verify(h.SignedBytes(), h.Sig); err != nil {
		return fmt.Errorf("%w: the head of decision %d of %s does not verify under key %s", ErrSignature, h.Seq, h.Stream, h.Key)
	}
	return nil
}

// wire is a head's JSON, field for field, in this order.
type wire struct {
	V           int    `json:"v"`
	Stream      string `json:"stream"`
	Seq         uint64 `json:"seq"`
	Chain       string `json:"chain"`
	InputSeq    uint64 `json:"input_seq"`
	At          string `json:"at"`
	Coordinator string `json:"coordinator"`
	Key         string `json:"key"`
	Sig         string `json:"sig"`
}

// MarshalJSON writes the head's JSON (one line, no newline).
func (h Head) MarshalJSON() ([]byte, error) {
	return json.Marshal(wire{
		V: Version, Stream: h.Stream, Seq: h.Seq, Chain: h.Chain.String(), InputSeq: h.InputSeq,
		At: h.At.UTC().Format(time.RFC3339Nano), Coordinator: h.Coordinator, Key: h.Key,
		Sig: base64.RawURLEncoding.EncodeToString(h.Sig),
	})
}

// UnmarshalJSON reads a head as strictly as Parse.
func (h *Head) UnmarshalJSON(b []byte) error {
	p, err := Parse(b)
	if err != nil {
		return err
	}
	*h = p
	return nil
}

// Parse reads one head from its JSON line (surrounding white space
// allowed), strictly: every field present, no other field, version 1, the
// chain as 64 lower-case hexadecimal digits, at in RFC 3339 UTC as
// MarshalJSON writes it, the signature as unpadded base64url of 64 bytes,
// and every field in range. It does not verify the signature (Verify does).
// Its errors wrap ErrMalformed.
func Parse(line []byte) (Head, error) {
	line = bytes.TrimSpace(line)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return Head{}, malformed("not a JSON object: %v", err)
	}
	fields := []string{"v", "stream", "seq", "chain", "input_seq", "at", "coordinator", "key", "sig"}
	// Exactly the keys of wire, spelt exactly so (encoding/json alone would take
	// "SEQ" for "seq").
	for k := range raw {
		if !slices.Contains(fields, k) {
			return Head{}, malformed("unknown field %q", k)
		}
	}
	for _, k := range fields {
		if _, ok := raw[k]; !ok {
			return Head{}, malformed("no %q field", k)
		}
	}
	var w wire
	if err := json.Unmarshal(line, &w); err != nil {
		return Head{}, malformed("%v", err)
	}
	if w.V != Version {
		return Head{}, malformed("version %d: this Tenure reads version %d", w.V, Version)
	}
	h := Head{Stream: w.Stream, Seq: w.Seq, InputSeq: w.InputSeq, Coordinator: w.Coordinator, Key: w.Key}
	var ok bool
	if h.Chain, ok = events.ParseChain(w.Chain); !ok {
		return Head{}, malformed("chain %q: want 64 lower-case hexadecimal digits", w.Chain)
	}
	at, err := time.Parse(time.RFC3339Nano, w.At)
	if err != nil || at.UTC().Format(time.RFC3339Nano) != w.At {
		return Head{}, malformed("at %q: want an RFC 3339 time in UTC, as 2006-01-02T15:04:05.999999999Z", w.At)
	}
	h.At = at.UTC()
	if h.Sig, err = base64.RawURLEncoding.Strict().DecodeString(w.Sig); err != nil {
		return Head{}, malformed("sig: not unpadded base64url: %v", err)
	}
	if len(h.Sig) != ed25519.SignatureSize {
		return Head{}, malformed("sig: %d bytes, want %d", len(h.Sig), ed25519.SignatureSize)
	}
	if !nkeys.IsValidPublicServerKey(h.Key) {
		return Head{}, malformed("key %q is not a public server nkey (N...)", h.Key)
	}
	if err := h.check(); err != nil {
		return Head{}, err
	}
	return h, nil
}
