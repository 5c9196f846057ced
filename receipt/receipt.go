// Package receipt keeps, for whoever takes part in a Tenure deployment,
// proof of what it was told (PROTOCOL.md §20.2): a receipt of every input
// whose append the input stream acknowledged (its stream, sequence,
// subject and the SHA-256 of its body) and of every decision received
// (its stream, sequence, cause and chain value, events.HeaderChain). A
// chain value commits to the decision and every decision before it.
//
// Receipts are JSON lines, one object per line:
//
//	{"v":1,"kind":"input","stream":"TENURE_IN","seq":3,"subject":"tenure.in.worker.w1.j1.acquire","sha256":"<64 hex>","by":"worker w1"}
//	{"v":1,"kind":"decision","stream":"TENURE_OUT","seq":4,"cause":3,"chain":"<64 hex>","by":"worker w1"}
//
// `tenure audit --receipts FILE` checks every receipt against the log: an
// input missing or different, a decision missing or with another chain
// value, is a finding, even when the log replays cleanly (it lost or
// rewrote what the receipt's keeper was shown).
//
// A File appends each receipt with one write (no fsync: a process crash
// loses nothing written, a machine crash may lose the last receipts, which
// then prove nothing rather than something false). Func adapts a function.
// The worker SDK keeps receipts with worker.WithReceipts; ops with
// ops.WithReceipts; `tenure watch --receipts FILE` for what it prints.
package receipt

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/maknow/tenure/events"
)

// Version is the receipt format version (field "v").
const Version = 1

// Kind is what a receipt is about.
type Kind string

// Kinds of receipts.
const (
	KindInput    Kind = "input"    // an input whose append was acknowledged
	KindDecision Kind = "decision" // a decision received
)

// Receipt is one thing its keeper was told.
type Receipt struct {
	V      int    `json:"v"`
	Kind   Kind   `json:"kind"`
	Stream string `json:"stream"` // the input or decision stream (its partition's, when partitioned)
	Seq    uint64 `json:"seq"`    // the message's sequence in it
	// Subject and SHA256 (hex of the body's SHA-256) are the input's.
	Subject string `json:"subject,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
	// Cause and Chain (events.HeaderChain, hex) are the decision's.
	Cause uint64 `json:"cause,omitempty"`
	Chain string `json:"chain,omitempty"`
	// By names the keeper ("worker w1"), for the audit's findings.
	By string `json:"by,omitempty"`
}

// Input returns the receipt of input body published on subject and stored
// at seq of stream.
func Input(stream string, seq uint64, subject string, body []byte, by string) Receipt {
	sum := sha256.Sum256(body)
	return Receipt{V: Version, Kind: KindInput, Stream: stream, Seq: seq, Subject: subject, SHA256: hex.EncodeToString(sum[:]), By: by}
}

// Decision returns the receipt of the decision at seq of stream, caused by
// input cause, whose chain value is chain (the Tenure-Chain header as
// received; "" if it carried none: such a receipt is kept but proves
// nothing, and the audit reports it).
func Decision(stream string, seq, cause uint64, chain, by string) Receipt {
	return Receipt{V: Version, Kind: KindDecision, Stream: stream, Seq: seq, Cause: cause, Chain: chain, By: by}
}

// Check reports what is wrong with r, nil if nothing: the version, the
// kind, the stream, a sequence above zero, and the fields of its kind.
func (r Receipt) Check() error {
	switch {
	case r.V != Version:
		return fmt.Errorf("receipt: version %d, want %d", r.V, Version)
	case r.Stream == "" || r.Seq == 0:
		return errors.New("receipt: no stream or sequence")
	}
	switch r.Kind {
	case KindInput:
		if r.Subject == "" {
			return errors.New("receipt: an input receipt without a subject")
		}
		if _, err := r.BodyHash(); err != nil {
			return err
		}
		if r.Cause != 0 || r.Chain != "" {
			return errors.New("receipt: an input receipt with a decision's fields")
		}
	case KindDecision:
		if _, ok := events.ParseChain(r.Chain); !ok {
			return fmt.Errorf("receipt: chain value %q: want %d lower-case hexadecimal digits", r.Chain, 2*events.ChainLen)
		}
		if r.Subject != "" || r.SHA256 != "" {
			return errors.New("receipt: a decision receipt with an input's fields")
		}
	default:
		return fmt.Errorf("receipt: kind %q: want %s or %s", r.Kind, KindInput, KindDecision)
	}
	return nil
}

// BodyHash returns the input's body hash.
func (r Receipt) BodyHash() ([sha256.Size]byte, error) {
	h, ok := events.ParseStateHash([]byte(r.SHA256))
	if !ok {
		return h, fmt.Errorf("receipt: sha256 %q: want %d lower-case hexadecimal digits", r.SHA256, 2*sha256.Size)
	}
	return h, nil
}

// ChainValue returns the decision's chain value.
func (r Receipt) ChainValue() (events.Chain, bool) { return events.ParseChain(r.Chain) }

// Sink keeps receipts. Keep is called from the goroutines of the SDK that
// learn of the message (never with a lock of the SDK held); an error is
// reported to the SDK's error handler and the receipt is lost.
type Sink interface {
	Keep(Receipt) error
}

// Func is a Sink calling f.
type Func func(Receipt) error

// Keep calls f.
func (f Func) Keep(r Receipt) error { return f(r) }

// File appends receipts to a file as JSON lines. Safe for concurrent use.
type File struct {
	mu   sync.Mutex
	f    *os.File
	buf  []byte
	path string
}

// OpenFile opens (creating it, mode 0600) the file at path for appending.
// Receipts already in it are kept: one file may collect the receipts of
// many runs.
func OpenFile(path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	return &File{f: f, path: path}, nil
}

// Keep appends r as one line, in one write.
func (f *File) Keep(r Receipt) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.f == nil {
		return fmt.Errorf("receipt: %s: closed", f.path)
	}
	f.buf = r.AppendJSON(f.buf[:0])
	f.buf = append(f.buf, '\n')
	if _, err := f.f.Write(f.buf); err != nil {
		return fmt.Errorf("receipt: %w", err)
	}
	return nil
}

// Close closes the file (after syncing it); Keep then fails.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.f == nil {
		return nil
	}
	err := errors.Join(f.f.Sync(), f.f.Close())
	f.f = nil
	return err
}

// AppendJSON appends r's JSON object (the field order of Receipt, empty
// fields left out) without reflection.
func (r Receipt) AppendJSON(b []byte) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(r.V), 10)
	b = append(b, `,"kind":`...)
	b = appendString(b, string(r.Kind))
	b = append(b, `,"stream":`...)
	b = appendString(b, r.Stream)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, r.Seq, 10)
	if r.Subject != "" {
		b = append(b, `,"subject":`...)
		b = appendString(b, r.Subject)
	}
	if r.SHA256 != "" {
		b = append(b, `,"sha256":`...)
		b = appendString(b, r.SHA256)
	}
	if r.Cause != 0 {
		b = append(b, `,"cause":`...)
		b = strconv.AppendUint(b, r.Cause, 10)
	}
	if r.Chain != "" {
		b = append(b, `,"chain":`...)
		b = appendString(b, r.Chain)
	}
	if r.By != "" {
		b = append(b, `,"by":`...)
		b = appendString(b, r.By)
	}
	return append(b, '}')
}

// Line is a receipt read back, with where it was read. Err is why the
// line is not a valid receipt (nil if it is): the audit reports it as a
// finding rather than stopping.
type Line struct {
	Receipt
	File string
	Line int
	Err  error
}

// Origin names where the receipt was read and who kept it: "FILE:LINE (BY)".
func (l Line) Origin() string {
	if l.By == "" {
		return l.File + ":" + strconv.Itoa(l.Line)
	}
	return l.File + ":" + strconv.Itoa(l.Line) + " (" + l.By + ")"
}

// MaxLine bounds a receipt line when reading: far more than any receipt
// (subjects are at most a few hundred bytes).
const MaxLine = 64 << 10

// Read reads the receipts of r, named name in errors: one JSON object per
// line, blank lines skipped, strictly: a line with unknown fields, a bad
// version, kind or value is returned with its Err set. The error is an
// I/O error, or a line longer than MaxLine.
func Read(r io.Reader, name string) ([]Line, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), MaxLine)
	var out []Line
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		l := Line{File: name, Line: n}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		switch err := dec.Decode(&l.Receipt); {
		case err != nil:
			l.Err = fmt.Errorf("receipt: %w", err)
		case dec.More():
			l.Err = errors.New("receipt: more than one JSON value on the line")
		default:
			l.Err = l.Receipt.Check()
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("%s:%d: %w", name, n+1, err)
	}
	return out, nil
}

// ReadFile reads the receipts of the file at path (Read).
func ReadFile(path string) ([]Line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	defer f.Close()
	return Read(f, path)
}

// appendString appends s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced by U+FFFD (as encoding/json
// does).
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, "\\ufffd"...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
