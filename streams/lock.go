package streams

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// LockFileName is the lock file LockDir keeps in the directory it locks.
// It is never removed on platforms with flock(2): its existence means
// nothing, the lock on it is what counts.
const LockFileName = "tenure.lock"

// maxHolderRecord bounds what is read back from a lock file: a holder
// record is a few hundred bytes; anything longer is not one.
const maxHolderRecord = 4 << 10

// maxHolderCommand bounds the command line written into a holder record.
const maxHolderCommand = 1 << 10

// Holder describes the process holding a directory lock, as it wrote
// itself into the lock file when it took the lock. It is information for
// people, not a proof: the lock, not the record, decides who may write.
type Holder struct {
	// PID is the holder's process id (0: unknown).
	PID int `json:"pid"`
	// Command is its command line, arguments separated by spaces.
	Command string `json:"command"`
	// Host is the name of the machine it runs on.
	Host string `json:"host"`
	// Started is when it took the lock.
	Started time.Time `json:"started"`
	// Parent is the process that took the lock (LockDir) and passed it
	// to this one (InheritLock), nil if none did. Both hold the lock.
	Parent *Holder `json:"parent,omitempty"`
}

// Known reports whether the lock file held a readable holder record.
func (h Holder) Known() bool { return h.PID > 0 }

// String is one line for an error message, e.g. `pid 4711 (tenure serve
// --data ./tenure-data) on host db1, since 2026-05-01T07:07:17Z`; control
// characters and overlong fields of a garbled record are neutralised.
func (h Holder) String() string {
	if !h.Known() {
		return "a process that left no readable holder record in " + LockFileName
	}
	var b strings.Builder
	b.WriteString("pid " + strconv.Itoa(h.PID))
	if h.Command != "" {
		b.WriteString(" (" + printable(h.Command, 300) + ")")
	}
	if h.Host != "" {
		b.WriteString(" on host " + printable(h.Host, 64))
	}
	if !h.Started.IsZero() {
		b.WriteString(", since " + h.Started.UTC().Format(time.RFC3339))
	}
	if p := h.Parent; p != nil && p.Known() {
		p := *p
		p.Parent = nil
		b.WriteString(", sharing it with its parent " + p.String())
	}
	return b.String()
}

// LockedError is the error of LockDir (and of everything that locks a
// directory before opening a store in it, embedded.Start first) when
// another process, or another DirLock of this one, holds the lock. Match
// it with errors.As.
type LockedError struct {
	// Dir is the locked directory (absolute).
	Dir string
	// Holder is the process holding the lock, as its lock file says.
	Holder Holder
}

// Error names the directory and the holder, on one line.
func (e *LockedError) Error() string {
	return fmt.Sprintf("streams: directory %s is locked by another process: %s%s", e.Dir, e.Holder, staleHint)
}

// DirLock is an exclusive lock on a directory, held until Close, so that
// one process at a time opens the JetStream store in it (DESIGN.md §7).
//
// With flock(2) (Linux, the BSDs, macOS, illumos) the lock belongs to the
// open lock file: the kernel releases it when the last process holding
// that file exits, however it exits (SIGKILL included), so a lock file
// left behind never blocks anybody. A child process started with File in
// its exec.Cmd.ExtraFiles shares the lock and keeps it while it lives
// (InheritLock takes it over in the child). Elsewhere (Windows, AIX,
// Solaris, plan9, wasm) the lock is best effort: the lock file is created
// exclusively and removed by Close, so a holder that was killed leaves it
// behind and it must be removed by hand once no such process runs.
type DirLock struct {
	dir  string
	f    *os.File
	once sync.Once
	err  error
}

// Dir is the locked directory (absolute).
func (l *DirLock) Dir() string { return l.dir }

// File is the open lock file. Pass it in exec.Cmd.ExtraFiles to let a
// child process share the lock (for as long as either runs); closing or
// reading it otherwise is the DirLock's business.
func (l *DirLock) File() *os.File { return l.f }

// Close releases the lock (unless a child process shares it, see File).
// It may be called more than once.
func (l *DirLock) Close() error {
	l.once.Do(func() { l.err = l.release() })
	return l.err
}

// LockDir takes the exclusive lock of dir, creating dir (mode 0700) and
// its lock file LockFileName (mode 0600) if they are missing, and writes
// this process's Holder record into the lock file. It creates nothing
// else in dir. When another process, or another DirLock of this process,
// holds the lock, it returns a *LockedError naming the holder. It refuses
// a lock file that is a symbolic link or not a regular file.
func LockDir(dir string) (*DirLock, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("streams: lock %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("streams: lock %s: %w", abs, err)
	}
	return lockDir(abs)
}

// InheritLock takes over, in a child process, the lock of dir that its
// parent holds and passed it as f (the parent's DirLock.File in
// exec.Cmd.ExtraFiles; in the child os.NewFile(3, ...) for the first
// one). It checks that f is dir's lock file and that f holds the lock
// (a *LockedError if another process holds it), then writes the child's
// Holder record, so that a process refused later names the child, which
// is what keeps the lock once the parent is gone. Closing the returned
// DirLock leaves the parent's lock in place.
func InheritLock(dir string, f *os.File) (*DirLock, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("streams: inherit the lock of %s: %w", dir, err)
	}
	return inheritLock(abs, f)
}

// CheckDir reports whether another process holds the lock of dir,
// without taking it and without writing anything into dir: a *LockedError
// when one does, nil when none does or dir has no lock file. It is for
// tools that read a store directory another process may be writing (an
// audit copies it): the answer may change right after.
func CheckDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("streams: check the lock of %s: %w", dir, err)
	}
	return checkDir(abs)
}

// selfRecord is this process's holder record, with parent if it is not
// nil.
func selfRecord(parent *Holder) []byte {
	host, _ := os.Hostname()
	cmd := strings.Join(os.Args, " ")
	if len(cmd) > maxHolderCommand {
		// Cut, dropping the rune cut in two.
		cmd = strings.ToValidUTF8(cmd[:maxHolderCommand], "") + "..."
	}
	if parent != nil {
		parent.Parent = nil
	}
	b, _ := json.Marshal(Holder{PID: os.Getpid(), Command: cmd, Host: host, Started: time.Now().UTC().Truncate(time.Millisecond), Parent: parent})
	return append(b, '\n')
}

// parseHolder reads a holder record; a record that is not one gives the
// zero Holder (unknown).
func parseHolder(b []byte) Holder {
	var h Holder
	if len(b) >= maxHolderRecord || json.Unmarshal(b, &h) != nil || h.PID <= 0 {
		return Holder{}
	}
	return h
}

// readHolder reads the holder record of an open lock file, bounded to
// maxHolderRecord bytes. A holder that has just taken the lock may not
// have written it yet: an empty file is read again a few times.
func readHolder(f *os.File) Holder {
	buf := make([]byte, maxHolderRecord)
	for range 5 {
		n, _ := f.ReadAt(buf, 0)
		if n > 0 {
			return parseHolder(buf[:n])
		}
		time.Sleep(20 * time.Millisecond)
	}
	return Holder{}
}

// writeHolder replaces the record of an open, locked lock file with
// this process's (and parent's, when it inherited the lock).
func writeHolder(f *os.File, parent *Holder) error {
	rec := selfRecord(parent)
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt(rec, 0)
	return err
}

// printable makes s safe for a one-line message: invalid UTF-8, control
// and other non-graphic characters become '?', and it is cut to max runes.
func printable(s string, max int) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == max {
			b.WriteString("...")
			break
		}
		if r == utf8.RuneError || !unicode.IsGraphic(r) {
			r = '?'
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}
