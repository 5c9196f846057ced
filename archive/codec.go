package archive

import (
	"encoding/base64"

	"errors"
	"github.com/nats-io/nats.go"
	"slices"
	"strconv"
	"unicode/utf8"
)

// The line codec (PROTOCOL.md §21). A line is a JSON object whose members
// come in this order, each only as stated:
//
//	"seq"          the stream sequence, a decimal integer
//	"time"         the stored time, Unix nanoseconds, a decimal integer
//	"subject"      the subject, a JSON string, when it is valid UTF-8;
//	"subject_b64"  otherwise its bytes in standard base64 (a NATS subject
//	               is bytes: a publisher may store one that is no UTF-8)
//	"header_raw"   the header block exactly as stored, standard base64, when
//	               the record keeps it (Record.RawHeader: an input's);
//	               otherwise:
//	"header"       the headers, when there are any and every name and value
//	               is valid UTF-8: an object of names (sorted bytewise) to
//	               arrays of values (in stored order);
//	"header_b64"   when there are headers and one is not: an array of
//	               [name, [values...]] pairs, in base64, names sorted
//	"data"         the body, standard base64 with padding
//
// Strings are written with only `"`, `\` and the control characters
// U+0000 to U+001F escaped (`\"`, `\\`, `\u00xx` in lower-case hex), every
// other character as its UTF-8 bytes. So every stored message is written
// losslessly, and a line is canonical: encoding its record again gives its
// bytes, which Verify and every reader of the segment check.

// appendLine appends r's line (with its newline) to b.
func appendLine(b []byte, r *Record) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, r.Seq, 10)
	b = append(b, `,"time":`...)
	b = strconv.AppendInt(b, r.Time, 10)
	if utf8.ValidString(r.Subject) {
		b = append(b, `,"subject":`...)
		b = appendString(b, r.Subject)
	} else {
		b = append(b, `,"subject_b64":`...)
		b = appendB64(b, []byte(r.Subject))
	}
	if r.RawHeader != nil {
		b = append(b, `,"header_raw":`...)
		b = appendB64(b, r.RawHeader)
	} else if len(r.Header) > 0 {
		keys := make([]string, 0, len(r.Header))
		valid := true
		for k, vs := range r.Header {
			keys = append(keys, k)
			valid = valid && utf8.ValidString(k)
			for _, v := range vs {
				valid = valid && utf8.ValidString(v)
			}
		}
		slices.Sort(keys)
		if valid {
			b = append(b, `,"header":{`...)
			for i, k := range keys {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendString(b, k)
				b = append(b, ":["...)
				for j, v := range r.Header[k] {
					if j > 0 {
						b = append(b, ',')
					}
					b = appendString(b, v)
				}
				b = append(b, ']')
			}
			b = append(b, '}')
		} else {
			b = append(b, `,"header_b64":[`...)
			for i, k := range keys {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, '[')
				b = appendB64(b, []byte(k))
				b = append(b, ",["...)
				for j, v := range r.Header[k] {
					if j > 0 {
						b = append(b, ',')
					}
					b = appendB64(b, []byte(v))
				}
				b = append(b, "]]"...)
			}
			b = append(b, ']')
		}
	}
	b = append(b, `,"data":`...)
	b = appendB64(b, r.Data)
	return append(b, "}\n"...)
}

const hexDigits = "0123456789abcdef"

func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func appendB64(b []byte, v []byte) []byte {
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, '"')
}

var errLine = errors.New("not a record line")

// ParseHeader is what a NATS client parses of a stored header block (the
// Header of a message it delivers): nil for an empty block or one it
// cannot parse.
func ParseHeader(raw []byte) map[string][]string {
	if len(raw) == 0 {
		return nil
	}
	h, err := nats.DecodeHeadersMsg(raw)
	if err != nil || len(h) == 0 {
		return nil
	}
	return h
}

// parseLine decodes a line (with its newline) into r. It accepts exactly
// the shapes appendLine writes, and its caller requires appendLine to give
// the line back (canonical form).
func parseLine(line []byte, r *Record) error {
	p := lineParser{b: line}
	*r = Record{}
	if !p.lit(`{"seq":`) {
		return errLine
	}
	var ok bool
	if r.Seq, ok = p.uint(); !ok || !p.lit(`,"time":`) {
		return errLine
	}
	neg := p.lit("-")
	t, ok := p.uint()
	if !ok || t > 1<<63 || !neg && t == 1<<63 {
		return errLine
	}
	r.Time = int64(t)
	if neg {
		r.Time = -r.Time
	}
	switch {
	case p.lit(`,"subject":`):
		s, ok := p.str()
		if !ok {
			return errLine
		}
		r.Subject = s
	case p.lit(`,"subject_b64":`):
		s, ok := p.b64()
		if !ok {
			return errLine
		}
		r.Subject = string(s)
	default:
		return errLine
	}
	switch {
	case p.lit(`,"header_raw":`):
		raw, ok := p.b64()
		if !ok {
			return errLine
		}
		r.RawHeader = raw
		r.Header = ParseHeader(raw)
	case p.lit(`,"header":{`):
		r.Header = map[string][]string{}
		for first := true; !p.lit("}"); first = false {
			if !first && !p.lit(",") {
				return errLine
			}
			k, ok := p.str()
			if !ok || !p.lit(":[") {
				return errLine
			}
			vs, ok := p.list(p.str)
			if !ok {
				return errLine
			}
			r.Header[k] = vs
		}
	case p.lit(`,"header_b64":[`):
		r.Header = map[string][]string{}
		for first := true; !p.lit("]"); first = false {
			if !first && !p.lit(",") {
				return errLine
			}
			if !p.lit("[") {
				return errLine
			}
			k, ok := p.b64()
			if !ok || !p.lit(",[") {
				return errLine
			}
			vs, ok := p.list(func() (string, bool) { v, ok := p.b64(); return string(v), ok })
			if !ok || !p.lit("]") {
				return errLine
			}
			r.Header[string(k)] = vs
		}
	}
	if !p.lit(`,"data":`) {
		return errLine
	}
	if r.Data, ok = p.b64(); !ok || !p.lit("}\n") || p.i != len(p.b) {
		return errLine
	}
	return nil
}

type lineParser struct {
	b []byte
	i int
}

func (p *lineParser) lit(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

func (p *lineParser) uint() (uint64, bool) {
	j := p.i
	for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
		j++
	}
	v, err := strconv.ParseUint(string(p.b[p.i:j]), 10, 64)
	if err != nil {
		return 0, false
	}
	p.i = j
	return v, true
}

// str reads a JSON string as appendString writes it.
func (p *lineParser) str() (string, bool) {
	if !p.lit(`"`) {
		return "", false
	}
	var out []byte
	for start := p.i; p.i < len(p.b); {
		c := p.b[p.i]
		switch {
		case c == '"':
			out = append(out, p.b[start:p.i]...)
			p.i++
			return string(out), true
		case c == '\\':
			out = append(out, p.b[start:p.i]...)
			if p.i+1 >= len(p.b) {
				return "", false
			}
			switch e := p.b[p.i+1]; e {
			case '"', '\\':
				out = append(out, e)
				p.i += 2
			case 'u':
				if p.i+6 > len(p.b) {
					return "", false
				}
				v, err := strconv.ParseUint(string(p.b[p.i+2:p.i+6]), 16, 16)
				if err != nil || v >= 0x20 {
					return "", false // only control characters are escaped
				}
				out = append(out, byte(v))
				p.i += 6
			default:
				return "", false
			}
			start = p.i
		case c < 0x20:
			return "", false
		default:
			p.i++
		}
	}
	return "", false
}

func (p *lineParser) b64() ([]byte, bool) {
	if !p.lit(`"`) {
		return nil, false
	}
	j := p.i
	for j < len(p.b) && p.b[j] != '"' {
		j++
	}
	if j == len(p.b) {
		return nil, false
	}
	v, err := base64.StdEncoding.AppendDecode(nil, p.b[p.i:j])
	if err != nil {
		return nil, false
	}
	p.i = j + 1
	return v, true
}

// list reads `v,v,...]` with item reading each v (the `[` is read).
func (p *lineParser) list(item func() (string, bool)) ([]string, bool) {
	var vs []string
	for first := true; !p.lit("]"); first = false {
		if !first && !p.lit(",") {
			return nil, false
		}
		v, ok := item()
		if !ok {
			return nil, false
		}
		vs = append(vs, v)
	}
	return vs, true
}
