//go:build !unix || aix || (solaris && !illumos)

package streams

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Without flock(2) the lock is the lock file's existence: best effort
// (DirLock). A holder that was killed leaves the file behind, and the
// directory stays locked until somebody removes it.

// staleHint is for LockedError.
const staleHint = " (if no such process runs, one was killed while it held the lock: remove " + LockFileName + ")"

func lockDir(dir string) (*DirLock, error) {
	path := filepath.Join(dir, LockFileName)
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("streams: lock %s: %s is not a regular file: refusing to use it (remove it)", dir, path)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil, lockedBy(dir, path)
	}
	if err != nil {
		return nil, fmt.Errorf("streams: lock %s: %w", dir, err)
	}
	if err := writeHolder(f, nil); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("streams: lock %s: write %s: %w", dir, path, err)
	}
	return &DirLock{dir: dir, f: f}, nil
}

func inheritLock(dir string, _ *os.File) (*DirLock, error) {
	return nil, fmt.Errorf("streams: inherit the lock of %s: not supported on this platform", dir)
}

func checkDir(dir string) error {
	path := filepath.Join(dir, LockFileName)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("streams: check the lock of %s: %w", dir, err)
	}
	return lockedBy(dir, path)
}

func lockedBy(dir, path string) error {
	h := Holder{}
	if f, err := os.Open(path); err == nil {
		h = readHolder(f)
		f.Close()
	}
	return &LockedError{Dir: dir, Holder: h}
}

// release closes and removes the lock file.
func (l *DirLock) release() error {
	cerr := l.f.Close()
	if err := os.Remove(l.f.Name()); err != nil {
		return err
	}
	return cerr
}
