package archive

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/maknow/tenure/streams"
)

// Format is the Manifest.Format of the segments this version of the
// archive seals: its inputs' header blocks are kept as stored
// ("header_raw"). Segments of FormatV1 (which kept every header as names
// and values) are still read.
const Format = "tenure-archive/2"

// FormatV1 is the Manifest.Format of the segments sealed before Format.
const FormatV1 = "tenure-archive/1"

// The files of a segment directory.
const (
	ManifestFile  = "MANIFEST.json"
	InputsFile    = "inputs.jsonl"
	DecisionsFile = "decisions.jsonl"
	SnapshotFile  = "snapshot.bin"
)

// MaxLine bounds one record line of a segment file when it is read back: a
// message of the largest payload nats-server accepts (64 MiB), in base64,
// with its headers.
const MaxLine = 96 << 20

// Record is one stored message, as a line of a segment's inputs.jsonl or
// decisions.jsonl (codec.go, PROTOCOL.md §21): its stream sequence, stored
// time (Unix nanoseconds), subject, headers and body. A line is the
// canonical encoding of its record: a line that is not is a finding of
// Verify.
type Record struct {
	Seq     uint64
	Time    int64
	Subject string
	// Header is the message's headers as a NATS client parses them: nil
	// when it has none, or a header block no client can parse.
	Header map[string][]string
	// RawHeader, when not nil, is the header block exactly as stored (an
	// input's, from Format on): lossless whatever its bytes, and Header is
	// then what a NATS client parses of it. A record without it (a
	// decision's, written by a coordinator in its client's own form, or a
	// FormatV1 segment's) keeps Header's names and values.
	RawHeader []byte
	Data      []byte
}

// Equal reports whether two records are the same message.
func (r *Record) Equal(o *Record) bool {
	return r.Seq == o.Seq && r.Time == o.Time && r.Subject == o.Subject && bytes.Equal(r.Data, o.Data) &&
		bytes.Equal(r.RawHeader, o.RawHeader) && (r.RawHeader == nil) == (o.RawHeader == nil) &&
		maps.EqualFunc(r.Header, o.Header, slices.Equal)
}

// Part is what a manifest says of one of a segment's two message files.
type Part struct {
	File   string `json:"file"`
	First  uint64 `json:"first"` // first stream sequence of the segment
	Last   uint64 `json:"last"`  // last one; the segment holds every record between the two that the stream held
	Count  uint64 `json:"count"` // records in the file
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"` // of the file's bytes, lower-case hexadecimal
}

// SnapshotPart is what a manifest says of the segment's snapshot: the
// coordinator's stored snapshot at the segment's end, with the position and
// anchor its object headers gave (streams.SnapshotAnchor). Its input is
// Inputs.Last and its decision Decisions.Last.
type SnapshotPart struct {
	File        string `json:"file"`
	Bytes       int64  `json:"bytes"`
	StateHash   string `json:"state_hash"` // SHA-256 of the file's bytes, anchored at AnchorSeq
	InputSeq    uint64 `json:"input_seq"`
	DecisionSeq uint64 `json:"decision_seq"`
	AnchorSeq   uint64 `json:"anchor_seq"`
	Chain       string `json:"chain"` // chain value of decision DecisionSeq
}

// Manifest describes one sealed segment (PROTOCOL.md §21).
type Manifest struct {
	Format         string `json:"format"`
	Segment        uint64 `json:"segment"` // 1, 2, ...
	InputStream    string `json:"input_stream"`
	DecisionStream string `json:"decision_stream"`
	// Previous is the SHA-256 of the previous segment's MANIFEST.json
	// ("" for segment 1): the manifests form a chain, so a segment cannot
	// be dropped, replaced or reordered unnoticed.
	Previous  string       `json:"previous"`
	Inputs    Part         `json:"inputs"`
	Decisions Part         `json:"decisions"`
	Snapshot  SnapshotPart `json:"snapshot"`
	Created   time.Time    `json:"created"` // when it was archived (informational)
}

// Segment is a sealed segment found in an archive directory.
type Segment struct {
	Dir      string // its directory
	Manifest Manifest
	Hash     string // SHA-256 of its MANIFEST.json
}

// ErrArchive is matched by every error about an archive's contents (a
// file missing, changed or out of order): a finding, not an I/O failure.
var ErrArchive = errors.New("archive")

func archiveErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrArchive, fmt.Sprintf(format, args...))
}

// StreamDir is the directory under an archive root that holds the segments
// of topology t's streams: one per input stream name, so one root can
// archive every partition of a deployment.
func StreamDir(root string, t streams.Topology) string {
	return filepath.Join(root, t.InputStream())
}

func segmentName(n uint64) string { return fmt.Sprintf("%010d", n) }

// Segments lists the sealed segments of t's streams under root, in order,
// checking that they form one chain: numbered from 1 without a gap, each
// manifest naming t's streams and the previous manifest's hash, each
// segment starting right after the previous one. It reads only the
// manifests (Verify reads the files). An empty or missing directory has no
// segments.
func Segments(root string, t streams.Topology) ([]Segment, error) {
	dir := StreamDir(root, t)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var segs []Segment
	for _, e := range ents {
		n, err := strconv.ParseUint(e.Name(), 10, 64)
		if !e.IsDir() || err != nil || e.Name() != segmentName(n) {
			continue // the lock file, temporary directories, anything else
		}
		if n != uint64(len(segs))+1 {
			return nil, archiveErr("%s: segment %d follows segment %d", dir, n, len(segs))
		}
		sd := filepath.Join(dir, e.Name())
		m, h, err := readManifest(sd)
		if err != nil {
			return nil, err
		}
		s := Segment{Dir: sd, Manifest: m, Hash: h}
		if err := checkLink(s, segs, t); err != nil {
			return nil, err
		}
		segs = append(segs, s)
	}
	return segs, nil
}

func readManifest(dir string) (Manifest, string, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return m, "", archiveErr("%s: no %s", dir, ManifestFile)
	}
	if err != nil {
		return m, "", err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, "", archiveErr("%s: %s does not decode: %v", dir, ManifestFile, err)
	}
	sum := sha256.Sum256(b)
	return m, hex.EncodeToString(sum[:]), nil
}

// checkLink checks segment s against the segments before it.
func checkLink(s Segment, before []Segment, t streams.Topology) error {
	m := s.Manifest
	bad := func(format string, args ...any) error {
		return archiveErr("%s: %s", s.Dir, fmt.Sprintf(format, args...))
	}
	switch {
	case m.Format != Format && m.Format != FormatV1:
		return bad("format %q, want %q (or %q)", m.Format, Format, FormatV1)
	case m.Segment != uint64(len(before))+1:
		return bad("manifest says segment %d", m.Segment)
	case m.InputStream != t.InputStream() || m.DecisionStream != t.DecisionStream():
		return bad("segment of streams %s and %s, not %s and %s", m.InputStream, m.DecisionStream, t.InputStream(), t.DecisionStream())
	case m.Inputs.File != InputsFile || m.Decisions.File != DecisionsFile || m.Snapshot.File != SnapshotFile:
		return bad("unexpected file names")
	case m.Inputs.First > m.Inputs.Last || m.Decisions.First > m.Decisions.Last:
		return bad("empty or reversed ranges")
	case m.Snapshot.InputSeq != m.Inputs.Last || m.Snapshot.DecisionSeq != m.Decisions.Last:
		return bad("its snapshot is at input %d, decision %d, not at its end (%d, %d)",
			m.Snapshot.InputSeq, m.Snapshot.DecisionSeq, m.Inputs.Last, m.Decisions.Last)
	}
	if len(before) == 0 {
		if m.Previous != "" || m.Inputs.First != 1 || m.Decisions.First != 1 {
			return bad("the first segment must start at input 1 and decision 1, with no previous manifest")
		}
		return nil
	}
	p := before[len(before)-1]
	switch {
	case m.Previous != p.Hash:
		return bad("previous manifest hash %s, but segment %d's manifest hashes to %s", m.Previous, p.Manifest.Segment, p.Hash)
	case m.Inputs.First != p.Manifest.Inputs.Last+1 || m.Decisions.First != p.Manifest.Decisions.Last+1:
		return bad("starts at input %d, decision %d; the previous segment ends at %d, %d",
			m.Inputs.First, m.Decisions.First, p.Manifest.Inputs.Last, p.Manifest.Decisions.Last)
	}
	return nil
}

// Verify reads the segment's files back: each hashes to what its manifest
// says and has its size; every line is a canonical record, in increasing
// sequence order within the manifest's range, first and last at its ends,
// and as many as it says; the snapshot hashes to its state hash. It
// returns the first finding (matching ErrArchive) or I/O error.
func (s Segment) Verify() error {
	m := s.Manifest
	for _, p := range []Part{m.Inputs, m.Decisions} {
		c, err := openPart(s.Dir, p)
		if err != nil {
			return err
		}
		for {
			if _, ok := c.next(); !ok {
				break
			}
		}
		c.close()
		if err := c.err; err != nil {
			return err
		}
	}
	return s.verifySnapshot()
}

// verifySnapshot checks that the segment's snapshot file hashes to its
// state hash and has its size.
func (s Segment) verifySnapshot() error {
	m := s.Manifest
	f, err := os.Open(filepath.Join(s.Dir, SnapshotFile))
	if err != nil {
		return archiveErr("%s: %v", s.Dir, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != m.Snapshot.StateHash || n != m.Snapshot.Bytes {
		return archiveErr("%s: %s hashes to %s (%d bytes); the manifest says %s (%d bytes)", s.Dir, SnapshotFile, got, n, m.Snapshot.StateHash, m.Snapshot.Bytes)
	}
	return nil
}

// verifyHashes reads the segment's files through (hashes, sizes, counts,
// sequence order) without decoding their lines: the check of a segment
// verified when it was sealed, whose lines are as its hashes say.
func (s Segment) verifyHashes() error {
	for _, p := range []Part{s.Manifest.Inputs, s.Manifest.Decisions} {
		c, err := openPart(s.Dir, p)
		if err != nil {
			return err
		}
		err = c.drain()
		c.close()
		if err != nil {
			return err
		}
	}
	return s.verifySnapshot()
}

// partCursor reads one segment file's records, checking them (see Verify)
// as it goes; the hash, size and count are checked at its end.
type partCursor struct {
	dir  string
	part Part
	f    *os.File
	r    *bufio.Reader
	h    hash.Hash
	n    uint64
	size int64
	prev uint64
	done bool
	err  error
	// scratch holds the record encoded again (the canonical check) and the
	// line read, reused from record to record.
	scratch, line []byte
}

func openPart(dir string, p Part) (*partCursor, error) {
	f, err := os.Open(filepath.Join(dir, p.File))
	if err != nil {
		return nil, archiveErr("%s: %v", dir, err)
	}
	return &partCursor{dir: dir, part: p, f: f, r: bufio.NewReaderSize(f, 1<<20), h: sha256.New()}, nil
}

func (c *partCursor) fail(format string, args ...any) {
	if c.err == nil {
		c.err = archiveErr("%s: %s: %s", c.dir, c.part.File, fmt.Sprintf(format, args...))
	}
	c.done = true
}

// next returns the next record; false at the end of the file or on a
// finding (err).
func (c *partCursor) next() (Record, bool) {
	var r Record
	line, seq, ok := c.nextLine()
	if !ok {
		return r, false
	}
	if err := parseLine(line, &r); err != nil || r.Seq != seq {
		c.fail("record %d does not decode: %v", c.n, err)
		return Record{}, false
	}
	c.scratch = appendLine(c.scratch[:0], &r)
	if !bytes.Equal(c.scratch, line) {
		c.fail("record %d (sequence %d) is not in canonical form", c.n, r.Seq)
		return Record{}, false
	}
	return r, true
}

// nextLine returns the next line (valid until the next call) and its
// sequence, checking the sequence order and, at the end of the file, its
// hash, size and count; false at the end or on a finding (err). It does not
// decode the line: a caller that compares it with a record's canonical
// encoding (compare) checks all of it at once.
func (c *partCursor) nextLine() ([]byte, uint64, bool) {
	if c.done {
		return nil, 0, false
	}
	line, err := c.readLine()
	if err == io.EOF && len(line) == 0 {
		c.done = true
		got := hex.EncodeToString(c.h.Sum(nil))
		switch {
		case got != c.part.SHA256 || c.size != c.part.Bytes:
			c.fail("hashes to %s (%d bytes); the manifest says %s (%d bytes)", got, c.size, c.part.SHA256, c.part.Bytes)
		case c.n != c.part.Count:
			c.fail("holds %d records; the manifest says %d", c.n, c.part.Count)
		case c.n > 0 && c.prev != c.part.Last:
			c.fail("ends at sequence %d; the manifest says %d", c.prev, c.part.Last)
		}
		return nil, 0, false
	}
	if err != nil && err != io.EOF {
		c.fail("%v", err)
		return nil, 0, false
	}
	if err == io.EOF {
		c.fail("its last line has no newline")
		return nil, 0, false
	}
	p := lineParser{b: line}
	seq, ok := uint64(0), p.lit(`{"seq":`)
	if ok {
		seq, ok = p.uint()
	}
	switch {
	case !ok:
		c.fail("record %d does not decode: no sequence", c.n+1)
		return nil, 0, false
	case c.n == 0 && seq != c.part.First:
		c.fail("starts at sequence %d; the manifest says %d", seq, c.part.First)
		return nil, 0, false
	case c.n > 0 && seq <= c.prev:
		c.fail("sequence %d after %d", seq, c.prev)
		return nil, 0, false
	case seq > c.part.Last:
		c.fail("sequence %d beyond its last, %d", seq, c.part.Last)
		return nil, 0, false
	}
	c.n++
	c.prev = seq
	return line, seq, true
}

// drain reads the rest of the file, checking what nextLine checks, and
// returns the finding, if any.
func (c *partCursor) drain() error {
	for {
		if _, _, ok := c.nextLine(); !ok {
			return c.err
		}
	}
}

// readLine reads one line, newline included, into the hash.
func (c *partCursor) readLine() ([]byte, error) {
	line := c.line[:0]
	defer func() { c.line = line[:0] }()
	for {
		chunk, err := c.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxLine {
			return nil, fmt.Errorf("a line longer than %d bytes", MaxLine)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		c.h.Write(line)
		c.size += int64(len(line))
		if err == io.EOF {
			return line, io.EOF
		}
		return line, err
	}
}

func (c *partCursor) close() {
	if c.f != nil {
		c.f.Close()
		c.f = nil
	}
}

// Cursor reads the records of one kind (inputs or decisions) of a list of
// segments in order, checking each file as Verify does while it reads it.
type Cursor struct {
	segs   []Segment
	inputs bool
	i      int
	cur    *partCursor
	err    error
	ended  bool
}

// Inputs returns a cursor over the inputs of segs (as Segments returns
// them).
func Inputs(segs []Segment) *Cursor { return &Cursor{segs: segs, inputs: true} }

// Decisions returns a cursor over the decisions of segs.
func Decisions(segs []Segment) *Cursor { return &Cursor{segs: segs} }

// Next returns the next record; false at the end of the last segment or on
// a finding (Err).
func (c *Cursor) Next() (Record, bool) {
	for !c.ended {
		if c.cur == nil {
			if c.i == len(c.segs) {
				c.ended = true
				break
			}
			s := c.segs[c.i]
			p := s.Manifest.Decisions
			if c.inputs {
				p = s.Manifest.Inputs
			}
			cur, err := openPart(s.Dir, p)
			if err != nil {
				c.err, c.ended = err, true
				break
			}
			c.cur = cur
		}
		if r, ok := c.cur.next(); ok {
			return r, true
		}
		c.cur.close()
		if c.err = c.cur.err; c.err != nil {
			c.ended = true
			break
		}
		c.cur = nil
		c.i++
	}
	return Record{}, false
}

// Err is the finding or I/O error that ended the cursor, nil at a clean end.
func (c *Cursor) Err() error { return c.err }

// Close releases the open file.
func (c *Cursor) Close() {
	if c.cur != nil {
		c.cur.close()
	}
	c.ended = true
}

// tempPrefix starts the name of a segment being written: such directories
// are left behind only by an archiving that was killed, and the next one
// removes them.
const tempPrefix = ".tmp-"

func isTemp(name string) bool { return strings.HasPrefix(name, tempPrefix) }

func jsonIndent(v any) ([]byte, error) { return json.MarshalIndent(v, "", "  ") }
