//go:build unix && !aix && (!solaris || illumos)

package streams

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// staleHint is for LockedError: a lock file left behind never blocks.
const staleHint = ""

func lockDir(dir string) (*DirLock, error) {
	path := filepath.Join(dir, LockFileName)
	f, err := openLockFile(path, syscall.O_RDWR|syscall.O_CREAT)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
			// A read-only directory or lock file: if somebody holds the
			// lock, say who rather than "permission denied".
			if held := checkDir(dir); held != nil {
				var le *LockedError
				if errors.As(held, &le) {
					return nil, le
				}
			}
			return nil, fmt.Errorf("streams: lock %s: %w (the directory must be writable)", dir, err)
		}
		return nil, fmt.Errorf("streams: lock %s: %w", dir, err)
	}
	if err := flock(f, syscall.LOCK_EX); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &LockedError{Dir: dir, Holder: readHolder(f)}
		}
		return nil, fmt.Errorf("streams: lock %s: flock %s: %w", dir, path, err)
	}
	if err := writeHolder(f, nil); err != nil {
		f.Close()
		return nil, fmt.Errorf("streams: lock %s: write %s: %w", dir, path, err)
	}
	return &DirLock{dir: dir, f: f}, nil
}

func inheritLock(dir string, f *os.File) (*DirLock, error) {
	if f == nil {
		return nil, fmt.Errorf("streams: inherit the lock of %s: no file", dir)
	}
	path := filepath.Join(dir, LockFileName)
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("streams: inherit the lock of %s: %w", dir, err)
	}
	li, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("streams: inherit the lock of %s: %w", dir, err)
	}
	if !li.Mode().IsRegular() || !os.SameFile(fi, li) {
		return nil, fmt.Errorf("streams: inherit the lock of %s: the file passed is not %s", dir, path)
	}
	// flock on a file whose lock this open file already holds succeeds
	// (it converts the lock to the same one); on a file another holds it
	// fails: either way the answer is whether f holds the lock now.
	if err := flock(f, syscall.LOCK_EX); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &LockedError{Dir: dir, Holder: readHolder(f)}
		}
		return nil, fmt.Errorf("streams: inherit the lock of %s: flock: %w", dir, err)
	}
	// The record names the process that took the lock, or a child it
	// passed the lock to before (a node restarted): the parent is the
	// first.
	var parent *Holder
	h := readHolder(f)
	if h.Parent != nil {
		h = *h.Parent
	}
	if h.Known() && h.PID != os.Getpid() {
		parent = &h
	}
	if err := writeHolder(f, parent); err != nil {
		return nil, fmt.Errorf("streams: inherit the lock of %s: write %s: %w", dir, path, err)
	}
	return &DirLock{dir: dir, f: f}, nil
}

func checkDir(dir string) error {
	path := filepath.Join(dir, LockFileName)
	f, err := openLockFile(path, syscall.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("streams: check the lock of %s: %w", dir, err)
	}
	defer f.Close()
	// A shared lock is refused while anyone holds the exclusive one, and
	// closing f drops it at once.
	if err := flock(f, syscall.LOCK_SH); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return &LockedError{Dir: dir, Holder: readHolder(f)}
		}
		return fmt.Errorf("streams: check the lock of %s: flock: %w", dir, err)
	}
	return nil
}

// release closes the lock file, which drops the lock unless a child
// process shares it. It never unlocks explicitly: flock(LOCK_UN) would
// release the lock of every process sharing the open file.
func (l *DirLock) release() error { return l.f.Close() }

// openLockFile opens a lock file without following a symbolic link and
// without blocking on a FIFO, and checks that it is a regular file.
func openLockFile(path string, mode int) (*os.File, error) {
	fd, err := openRetry(path, mode|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is a symbolic link: refusing to follow it (remove it)", path)
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		return nil, fmt.Errorf("%s is not a regular file: remove it", path)
	}
	// O_NONBLOCK was for a FIFO's open only.
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

func openRetry(path string, mode int, perm uint32) (int, error) {
	for {
		fd, err := syscall.Open(path, mode, perm)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}

// flock takes how (LOCK_EX or LOCK_SH) without waiting.
func flock(f *os.File, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = syscall.Flock(int(fd), how|syscall.LOCK_NB)
			if ferr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return ferr
}
