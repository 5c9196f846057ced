package fence

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
	"unicode/utf8"
)

// ReceiptVersion is the effect receipt format version (field "v").
const ReceiptVersion = 1

// Receipt is the record of one effect a resource committed, kept by the
// adapter in the same transaction (a table, a key's history) and exported
// as JSON lines, one object per line:
//
//	{"v":1,"resource":"postgres tenure_effects","job":"j1","lease_id":"L5-...","generation":2,"effect":"transfer","position":17,"committed_at":1767225600123456789,"deadline":1767225601000000000}
//
// `tenure audit --effects FILE` checks each against the log.
type Receipt struct {
	V int `json:"v"`
	// Resource names the resource: positions of one resource are
	// comparable, those of two are not.
	Resource   string `json:"resource"`
	Job        string `json:"job"`
	LeaseID    string `json:"lease_id"`
	Generation uint64 `json:"generation"`
	// Effect is the effect's id: at most one commit of it per job.
	Effect string `json:"effect"`
	// Position is the resource's own commit position (a row's serial, a
	// key's revision): for one job at one resource, the order its effects
	// were committed in.
	Position uint64 `json:"position"`
	// CommittedAt is the resource's clock when it committed (ns since the
	// Unix epoch); Deadline the lease's deadline it checked against (0:
	// none).
	CommittedAt int64 `json:"committed_at"`
	Deadline    int64 `json:"deadline,omitempty"`
	// By names who exported the receipt, for the audit's findings.
	By string `json:"by,omitempty"`
}

// Token is the receipt's fencing token.
func (r Receipt) Token() Token {
	return Token{Job: r.Job, LeaseID: r.LeaseID, Generation: r.Generation}
}

// Time is CommittedAt as a time.
func (r Receipt) Time() time.Time { return time.Unix(0, r.CommittedAt) }

// MaxEffectLen bounds an effect id (bytes).
const MaxEffectLen = 200

// CheckEffect reports whether id may be an effect id: 1 to MaxEffectLen
// bytes of printable ASCII without spaces.
func CheckEffect(id string) error {
	if id == "" || len(id) > MaxEffectLen {
		return fmt.Errorf("%w: effect id of %d bytes, want 1 to %d", ErrBadEffect, len(id), MaxEffectLen)
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return fmt.Errorf("%w: effect id %q: want printable ASCII without spaces", ErrBadEffect, id)
		}
	}
	return nil
}

// ErrBadEffect is the error of an effect id CheckEffect refuses.
var ErrBadEffect = errors.New("fence: bad effect id")

// Check reports what is wrong with r, nil if nothing.
func (r Receipt) Check() error {
	switch {
	case r.V != ReceiptVersion:
		return fmt.Errorf("fence: receipt version %d, want %d", r.V, ReceiptVersion)
	case r.Resource == "":
		return errors.New("fence: receipt without a resource")
	case r.Position == 0:
		return errors.New("fence: receipt without a position")
	case r.CommittedAt <= 0:
		return errors.New("fence: receipt without a commit time")
	case r.Deadline < 0:
		return errors.New("fence: receipt with a negative deadline")
	}
	if err := r.Token().Check(); err != nil {
		return err
	}
	return CheckEffect(r.Effect)
}

// AppendJSON appends r's JSON object (the field order of Receipt, empty
// optional fields left out).
func (r Receipt) AppendJSON(b []byte) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(r.V), 10)
	b = append(b, `,"resource":`...)
	b = appendString(b, r.Resource)
	b = append(b, `,"job":`...)
	b = appendString(b, r.Job)
	b = append(b, `,"lease_id":`...)
	b = appendString(b, r.LeaseID)
	b = append(b, `,"generation":`...)
	b = strconv.AppendUint(b, r.Generation, 10)
	b = append(b, `,"effect":`...)
	b = appendString(b, r.Effect)
	b = append(b, `,"position":`...)
	b = strconv.AppendUint(b, r.Position, 10)
	b = append(b, `,"committed_at":`...)
	b = strconv.AppendInt(b, r.CommittedAt, 10)
	if r.Deadline != 0 {
		b = append(b, `,"deadline":`...)
		b = strconv.AppendInt(b, r.Deadline, 10)
	}
	if r.By != "" {
		b = append(b, `,"by":`...)
		b = appendString(b, r.By)
	}
	return append(b, '}')
}

// ReceiptLine is a receipt read back, with where it was read. Err is why
// the line is not a valid receipt (nil if it is): the audit reports it as
// a finding.
type ReceiptLine struct {
	Receipt
	File string
	Line int
	Err  error
}

// Origin names where the receipt was read: "FILE:LINE".
func (l ReceiptLine) Origin() string { return l.File + ":" + strconv.Itoa(l.Line) }

// MaxReceiptLine bounds a receipt line when reading.
const MaxReceiptLine = 4 << 10

// ReadReceipts reads the receipts of r, named name: one JSON object per
// line, blank lines skipped, strictly (unknown fields, a bad version or
// value: the line's Err). The error is an I/O error or a line longer than
// MaxReceiptLine.
func ReadReceipts(r io.Reader, name string) ([]ReceiptLine, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), MaxReceiptLine)
	var out []ReceiptLine
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		l := ReceiptLine{File: name, Line: n}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		switch err := dec.Decode(&l.Receipt); {
		case err != nil:
			l.Err = fmt.Errorf("fence: receipt: %w", err)
		case dec.More():
			l.Err = errors.New("fence: receipt: more than one JSON value on the line")
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

// ReadReceiptFile reads the receipts of the file at path ("-": standard
// input).
func ReadReceiptFile(path string) ([]ReceiptLine, error) {
	if path == "-" {
		return ReadReceipts(os.Stdin, "stdin")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	defer f.Close()
	return ReadReceipts(f, path)
}

// WriteReceipts writes rs as JSON lines to w.
func WriteReceipts(w io.Writer, rs []Receipt) error {
	var b []byte
	for _, r := range rs {
		b = append(r.AppendJSON(b), '\n')
		if len(b) >= 64<<10 {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	_, err := w.Write(b)
	return err
}

// appendString appends s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced by U+FFFD.
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
