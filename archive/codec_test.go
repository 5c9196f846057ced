package archive

import (
	"bytes"
	"math"
	"os"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// Every message a stream can hold is written losslessly and reads back
// equal, and its line is canonical: subjects and header names and values
// that are no UTF-8 (a publisher chooses them), quotes, backslashes,
// control characters, empty and large bodies, times at the int64 limits.
func TestLineRoundTrip(t *testing.T) {
	cases := []Record{
		{Seq: 1, Time: 0, Subject: "tenure.in.worker.w1.j1.acquire", Data: []byte(`{"v":1}`)},
		{Seq: math.MaxUint64, Time: math.MaxInt64, Subject: "a", Data: nil},
		{Seq: 2, Time: math.MinInt64, Subject: "x", Data: []byte{}},
		{Seq: 3, Time: -1, Subject: "tenure.in.worker.w1.\xff\xfe.acquire", Data: []byte{0, 1, 2}},
		{Seq: 4, Subject: "q\"\\\x00\x1f\x7f<>&\u2028é", Header: map[string][]string{"Nats-Msg-Id": {"a\"b"}, "B": {"1", "2"}}},
		{Seq: 5, Subject: "s", Header: map[string][]string{"K\xff": {"v"}, "Ok": {"\xc3\x28", "fine"}}},
		{Seq: 6, Subject: "s", Header: map[string][]string{"Empty": {}}},
		{Seq: 7, Subject: "big", Data: bytes.Repeat([]byte{0xab}, 1<<20)},
	}
	// Header blocks kept as stored (an input's), whatever their bytes:
	// Header is what a NATS client parses of them.
	for i, raw := range []string{
		"NATS/1.0\r\nNats-Msg-Id: a1\r\n\r\n",
		"NATS/1.0\r\nNats-Msg-Id: a1\r\nno colon\r\n\r\n",
		"NATS/1.0\r\nX-A: 1\r\nX-B: 2\r\nX-A: 3\r\n\r\n",
		"NATS/1.0 503\r\n\r\n",
		"\xff\x00\"\\garbage",
	} {
		cases = append(cases, Record{Seq: uint64(100 + i), Subject: "s", RawHeader: []byte(raw), Header: ParseHeader([]byte(raw)), Data: []byte("{}")})
	}
	for _, r := range cases {
		line := appendLine(nil, &r)
		var got Record
		if err := parseLine(line, &got); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if !got.Equal(&r) {
			t.Fatalf("round trip of %+v gave %+v", r, got)
		}
		if again := appendLine(nil, &got); !bytes.Equal(again, line) {
			t.Fatalf("not canonical:\n%q\n%q", line, again)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		bytesOf := func(label string) string { return string(rapid.SliceOf(rapid.Byte()).Draw(t, label)) }
		r := Record{
			Seq: rapid.Uint64().Draw(t, "seq"), Time: rapid.Int64().Draw(t, "time"),
			Subject: bytesOf("subject"), Data: rapid.SliceOf(rapid.Byte()).Draw(t, "data"),
		}
		if n := rapid.IntRange(0, 3).Draw(t, "headers"); n > 0 {
			r.Header = map[string][]string{}
			for range n {
				var vs []string
				for range rapid.IntRange(1, 3).Draw(t, "values") {
					vs = append(vs, bytesOf("value"))
				}
				r.Header[bytesOf("key")] = vs
			}
		}
		line := appendLine(nil, &r)
		var got Record
		if err := parseLine(line, &got); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if !got.Equal(&r) || !bytes.Equal(appendLine(nil, &got), line) {
			t.Fatalf("round trip of %q", line)
		}
	})
}

// Lines that are not what appendLine writes are refused or, decoded, not
// canonical: a reader cannot be handed two spellings of one message.
func TestLineNotCanonical(t *testing.T) {
	good := string(appendLine(nil, &Record{Seq: 1, Time: 2, Subject: "s", Header: map[string][]string{"A": {"1"}}, Data: []byte("hi")}))
	for _, bad := range []string{
		strings.Replace(good, `"seq":1`, `"seq": 1`, 1),
		strings.Replace(good, `"seq":1`, `"seq":01`, 1),
		strings.Replace(good, `"subject":"s"`, `"subject":"\u0073"`, 1),
		strings.Replace(good, `"subject":"s"`, `"subject":"\n"`, 1),
		strings.Replace(good, `"data":"aGk="`, `"data":"aGk"`, 1),
		strings.Replace(good, "}\n", "}", 1),
		strings.Replace(good, "}\n", "} \n", 1),
		`{"time":2,"seq":1,"subject":"s","data":""}` + "\n",
		`{"seq":1,"time":-9223372036854775809,"subject":"s","data":""}` + "\n",
		`{"seq":18446744073709551616,"time":0,"subject":"s","data":""}` + "\n",
		`{"seq":1,"time":0,"subject":"s","header":{"B":["1"],"A":["2"]},"data":""}` + "\n",
		`{"seq":1,"time":0,"subject_b64":"cw==","data":""}` + "\n",
	} {
		var r Record
		if err := parseLine([]byte(bad), &r); err == nil && string(appendLine(nil, &r)) == bad {
			t.Errorf("accepted as canonical: %q", bad)
		}
	}
	var r Record
	if err := parseLine([]byte(good), &r); err != nil || string(appendLine(nil, &r)) != good {
		t.Fatalf("the good line: %v", err)
	}
}

// FuzzLine: whatever parses encodes back to the same line or is refused by
// the canonical check; nothing panics.
func FuzzLine(f *testing.F) {
	f.Add(appendLine(nil, &Record{Seq: 1, Time: 2, Subject: "s\"", Header: map[string][]string{"A": {"1", "\x00"}}, Data: []byte("hi")}))
	f.Add(appendLine(nil, &Record{Seq: 3, Subject: "\xff", Header: map[string][]string{"\xfe": {"v"}}}))
	f.Fuzz(func(t *testing.T, line []byte) {
		var r Record
		if parseLine(line, &r) != nil {
			return
		}
		again := appendLine(nil, &r)
		var r2 Record
		if err := parseLine(again, &r2); err != nil || !r2.Equal(&r) {
			t.Fatalf("re-encoding %q gave %q (%v)", line, again, err)
		}
	})
}

// PROTOCOL.md §21's example line is canonical.
func TestProtocolLineExample(t *testing.T) {
	doc, err := os.ReadFile("../PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := string(doc)[strings.Index(string(doc), "## 21. The archive"):]
	sec = sec[strings.Index(sec, "For example:"):]
	start := strings.Index(sec, "```\n") + 4
	line := sec[start:start+strings.Index(sec[start:], "\n")] + "\n"
	var r Record
	if err := parseLine([]byte(line), &r); err != nil || string(appendLine(nil, &r)) != line {
		t.Fatalf("the example %q: %v", line, err)
	}
	if r.Seq != 42 || string(r.Data) != `{"v":1}` {
		t.Fatalf("the example decodes to %+v", r)
	}
}
