package chaos

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"
)

// Kinds of journal entries.
const (
	// EntrySent is an input written to the wire (before the bytes left the
	// process): the client sent it, whatever became of it.
	EntrySent = "sent"
	// EntryAck is a PubAck read from the wire: the stream acknowledged
	// storing the input at Seq.
	EntryAck = "ack"
)

// Entry is one line of a client's journal: an input it sent, or the PubAck
// it received for one. Bodies are kept as their SHA-256 and length.
type Entry struct {
	Kind      string `json:"t"`  // EntrySent or EntryAck
	At        int64  `json:"at"` // local time the tap saw it (Unix ns)
	Subject   string `json:"subject"`
	MsgID     string `json:"msg_id,omitempty"`
	BodySHA   string `json:"sha256"`
	Len       int    `json:"len"`
	Stream    string `json:"stream,omitempty"`    // acks: the stream that stored it
	Seq       uint64 `json:"seq,omitempty"`       // acks: its stream sequence
	Duplicate bool   `json:"duplicate,omitempty"` // acks: already stored (same Msg-Id), Seq is the first
}

// BodySHA is the hex SHA-256 the journal records for a body.
func BodySHA(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Journal appends entries as JSON lines to a file, one write per entry, so
// that a process stopped or killed at any point leaves whole lines (and at
// most one partial last line, which ReadJournal skips). Safe for concurrent
// use.
type Journal struct {
	mu sync.Mutex
	f  *os.File
}

// OpenJournal opens (creating or appending to) the journal file path.
func OpenJournal(path string) (*Journal, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("chaos: journal: %w", err)
	}
	return &Journal{f: f}, nil
}

// Add writes e, stamping At if it is zero.
func (j *Journal) Add(e Entry) error {
	if e.At == 0 {
		e.At = time.Now().UnixNano()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err = j.f.Write(b)
	return err
}

// Close closes the file.
func (j *Journal) Close() error { return j.f.Close() }

// ReadJournal reads every whole line of the journal at path; a missing file
// is an empty journal. A last line without its newline is being written (or
// its writer was killed mid-write) and is skipped; any other undecodable
// line is an error.
func ReadJournal(path string) ([]Entry, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("chaos: journal: %w", err)
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i+1]
	} else {
		data = nil
	}
	var out []Entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("chaos: journal %s line %d: %w", path, line, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}
