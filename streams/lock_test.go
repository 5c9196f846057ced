//go:build unix && !aix && (!solaris || illumos)

package streams_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/maknow/tenure/streams"
)

// helperEnv makes the test binary a lock-holding helper process
// (TestLockHelperProcess): "lock:DIR" or "inherit:DIR" (the lock passed
// as file descriptor 3).
const helperEnv = "TENURE_LOCK_HELPER"

// TestLockHelperProcess is not a test: it is the helper process of the
// cross-process tests, run by startHelper. It takes the lock, prints
// "locked", and holds it until its stdin is closed or it is killed.
func TestLockHelperProcess(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("helper process only")
	}
	mode, dir, _ := strings.Cut(spec, ":")
	var l *streams.DirLock
	var err error
	switch mode {
	case "lock":
		l, err = streams.LockDir(dir)
	case "try":
		_, err := streams.LockDir(dir)
		fmt.Println(err)
		os.Exit(0)
	case "inherit":
		l, err = streams.InheritLock(dir, os.NewFile(3, "inherited lock"))
	default:
		err = fmt.Errorf("helper mode %q", mode)
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(3)
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = l.Close()
	os.Exit(0)
}

// helper is a running helper process.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
}

// startHelper starts a helper process in mode on dir (passing extra as its
// file descriptor 3 if not nil) and waits until it holds the lock. It is
// killed in t.Cleanup if still running.
func startHelper(t *testing.T, mode, dir string, extra *os.File) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode+":"+dir)
	if extra != nil {
		cmd.ExtraFiles = []*os.File{extra}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	go func() { _ = cmd.Wait(); close(h.done) }()
	t.Cleanup(h.kill)
	if strings.TrimSpace(line) != "locked" {
		t.Fatalf("helper %s %s: %q %v", mode, dir, line, err)
	}
	return h
}

// kill SIGKILLs the helper and waits until it is gone.
func (h *helper) kill() {
	_ = h.cmd.Process.Kill()
	<-h.done
}

func requireLocked(t *testing.T, err error, dir string, pid int) *streams.LockedError {
	t.Helper()
	var le *streams.LockedError
	if !errors.As(err, &le) {
		t.Fatalf("err = %v, want a *LockedError", err)
	}
	abs, _ := filepath.Abs(dir)
	if le.Dir != abs {
		t.Errorf("LockedError.Dir = %s, want %s", le.Dir, abs)
	}
	if le.Holder.PID != pid {
		t.Errorf("holder pid %d, want %d (%+v)", le.Holder.PID, pid, le.Holder)
	}
	msg := err.Error()
	if !strings.Contains(msg, abs) || !strings.Contains(msg, "pid "+strconv.Itoa(pid)) || strings.ContainsAny(msg, "\n\r") {
		t.Errorf("error message %q should name %s and pid %d on one line", msg, abs, pid)
	}
	return le
}

// The second lock of a directory in one process is refused with a
// *LockedError naming the holder; after Close it is granted again.
func TestLockDirExclusive(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "sub")
	l, err := streams.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("created directory: %v %v, want mode 0700", fi.Mode(), err)
	}
	fi, err = os.Lstat(filepath.Join(dir, streams.LockFileName))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("lock file: %v %v, want a regular file of mode 0600", fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("LockDir created %d entries, want only %s", len(ents), streams.LockFileName)
	}

	_, err = streams.LockDir(dir)
	le := requireLocked(t, err, dir, os.Getpid())
	if !strings.Contains(le.Holder.Command, filepath.Base(os.Args[0])) || time.Since(le.Holder.Started) > time.Minute || le.Holder.Host == "" {
		t.Errorf("holder %+v: want this process's command line, host and a recent start", le.Holder)
	}
	// The same directory under another name is the same lock.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	_, err = streams.LockDir(link + "/")
	var le2 *streams.LockedError
	if !errors.As(err, &le2) {
		t.Fatalf("lock through a symlinked path: %v, want a *LockedError", err)
	}
	if err := streams.CheckDir(dir); !errors.As(err, &le2) {
		t.Errorf("CheckDir of a locked directory: %v", err)
	}

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := streams.CheckDir(dir); err != nil {
		t.Errorf("CheckDir after Close: %v", err)
	}
	l2, err := streams.LockDir(dir)
	if err != nil {
		t.Fatalf("lock after Close: %v", err)
	}
	l2.Close()
}

// Another process's lock is refused, naming it; when it is SIGKILLed,
// the kernel releases the lock, and the lock file it leaves behind (with
// its record) does not block the next one.
func TestLockDirOtherProcess(t *testing.T) {
	dir := t.TempDir()
	h := startHelper(t, "lock", dir, nil)
	_, err := streams.LockDir(dir)
	le := requireLocked(t, err, dir, h.cmd.Process.Pid)
	if !strings.Contains(le.Holder.Command, "-test.run=^TestLockHelperProcess$") {
		t.Errorf("holder command %q", le.Holder.Command)
	}
	if err := streams.CheckDir(dir); err == nil {
		t.Error("CheckDir: the helper's lock not seen")
	}

	h.kill()
	stale, err := os.ReadFile(filepath.Join(dir, streams.LockFileName))
	if err != nil || !strings.Contains(string(stale), fmt.Sprintf(`"pid":%d`, h.cmd.Process.Pid)) {
		t.Fatalf("the dead holder's lock file: %q %v", stale, err)
	}
	if err := streams.CheckDir(dir); err != nil {
		t.Errorf("CheckDir after the holder died: %v", err)
	}
	l, err := streams.LockDir(dir)
	if err != nil {
		t.Fatalf("lock after the holder was killed: %v", err)
	}
	defer l.Close()
	rec, _ := os.ReadFile(filepath.Join(dir, streams.LockFileName))
	if !strings.Contains(string(rec), fmt.Sprintf(`"pid":%d`, os.Getpid())) {
		t.Errorf("the record was not replaced: %q", rec)
	}
}

// A child process given the lock file shares the lock: InheritLock
// takes it over and records the child with its parent (a restarted
// child too), the lock outlives the parent's Close while the child runs,
// and goes when the child goes.
func TestInheritLock(t *testing.T) {
	dir := t.TempDir()
	l, err := streams.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, "inherit", dir, l.File())
	_, err = streams.LockDir(dir)
	le := requireLocked(t, err, dir, h.cmd.Process.Pid)
	if p := le.Holder.Parent; p == nil || p.PID != os.Getpid() || !strings.Contains(err.Error(), ", sharing it with its parent pid "+strconv.Itoa(os.Getpid())+" (") {
		t.Errorf("the child's record does not name its parent: %v", err)
	}
	// A second child (a node restarted) names the parent, not the first.
	h.kill()
	h = startHelper(t, "inherit", dir, l.File())
	_, err = streams.LockDir(dir)
	if le = requireLocked(t, err, dir, h.cmd.Process.Pid); le.Holder.Parent == nil || le.Holder.Parent.PID != os.Getpid() || le.Holder.Parent.Parent != nil {
		t.Errorf("the second child's record: %+v", le.Holder)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = streams.LockDir(dir)
	requireLocked(t, err, dir, h.cmd.Process.Pid)
	h.kill()
	l2, err := streams.LockDir(dir)
	if err != nil {
		t.Fatalf("lock after the child died: %v", err)
	}

	// A file that merely is the lock file does not inherit a lock another
	// open file holds, and another file is not the lock file.
	f, err := os.Open(filepath.Join(dir, streams.LockFileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := streams.InheritLock(dir, f); !errors.As(err, new(*streams.LockedError)) {
		t.Errorf("InheritLock with a fresh open of a held lock file: %v", err)
	}
	other, err := os.Create(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := streams.InheritLock(dir, other); err == nil || errors.As(err, new(*streams.LockedError)) {
		t.Errorf("InheritLock with another file: %v", err)
	}
	l2.Close()
}

// A lock file that is a symbolic link is refused, not followed: nothing
// is created where it points.
func TestLockDirRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Symlink(target, filepath.Join(dir, streams.LockFileName)); err != nil {
		t.Fatal(err)
	}
	_, err := streams.LockDir(dir)
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("LockDir with a symlinked lock file: %v", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the symlink was followed: %s exists (%v)", target, err)
	}
	if err := streams.CheckDir(dir); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("CheckDir with a symlinked lock file: %v", err)
	}
	// A link to an existing file is refused too, and the file is untouched.
	if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.LockDir(dir); err == nil {
		t.Fatal("LockDir followed a symlink to an existing file")
	}
	if b, _ := os.ReadFile(target); string(b) != "precious" {
		t.Errorf("the link's target was changed: %q", b)
	}
}

// What is not a directory, or whose lock file is not a regular file, is
// refused with a plain error, not a *LockedError.
func TestLockDirWrongPlaces(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.LockDir(file); err == nil || errors.As(err, new(*streams.LockedError)) {
		t.Errorf("LockDir of a file: %v", err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, streams.LockFileName), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.LockDir(dir); err == nil || errors.As(err, new(*streams.LockedError)) {
		t.Errorf("LockDir with a directory as lock file: %v", err)
	}
	fifo := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifo, streams.LockFileName), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := streams.LockDir(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("LockDir with a FIFO as lock file: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("LockDir blocked on a FIFO")
	}
}

// A read-only directory without a lock file cannot be locked (and the
// error says why) and gets nothing written into it; one whose holder is
// alive still names the holder. As root, whom permissions do not stop,
// the attempts run in a helper process with the uid of nobody.
func TestLockDirReadOnly(t *testing.T) {
	try := func(dir string) string {
		if os.Geteuid() != 0 {
			_, err := streams.LockDir(dir)
			return fmt.Sprint(err)
		}
		return tryAsNobody(t, dir)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	if msg := try(dir); !strings.Contains(msg, "permission denied") || !strings.Contains(msg, "must be writable") {
		t.Errorf("LockDir of a read-only directory: %s", msg)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("LockDir wrote into a read-only directory: %v", ents)
	}

	held := t.TempDir()
	h := startHelper(t, "lock", held, nil)
	if err := os.Chmod(held, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(held, 0o700) })
	if err := os.Chmod(filepath.Join(held, streams.LockFileName), 0o444); err != nil {
		t.Fatal(err)
	}
	if msg := try(held); !strings.Contains(msg, "is locked by another process: pid "+strconv.Itoa(h.cmd.Process.Pid)) {
		t.Errorf("LockDir of a read-only directory in use: %s", msg)
	}
}

// tryAsNobody runs LockDir(dir) in a helper process with uid and gid
// 65534 and returns what it printed.
func tryAsNobody(t *testing.T, dir string) string {
	t.Helper()
	// The helper must be able to run the test binary and reach dir.
	bin := filepath.Join(t.TempDir(), "streams.test")
	src, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(bin), filepath.Dir(filepath.Dir(bin)), filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-test.run=^TestLockHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=try:"+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// A holder record that is garbage, huge or full of control characters
// gives a bounded one-line message.
func TestLockedErrorGarbageRecord(t *testing.T) {
	dir := t.TempDir()
	l, err := streams.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	path := filepath.Join(dir, streams.LockFileName)
	for name, rec := range map[string]string{
		"empty":   "",
		"binary":  "\x00\x01\x02\xff\xfe",
		"huge":    `{"pid":42,"command":"` + strings.Repeat("x", 1<<20) + `"}`,
		"escapes": `{"pid":42,"command":"tenure\u001b[2J\nserve\r","host":"h\u0007"}`,
		"no pid":  `{"command":"tenure serve"}`,
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(rec), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := streams.LockDir(dir)
			var le *streams.LockedError
			if !errors.As(err, &le) {
				t.Fatalf("%v, want a *LockedError", err)
			}
			msg := err.Error()
			if len(msg) > 600 || strings.ContainsAny(msg, "\n\r\x00\x07\x1b") {
				t.Errorf("message %d bytes: %q", len(msg), msg)
			}
			if name == "escapes" {
				if le.Holder.PID != 42 || !strings.Contains(msg, "pid 42 (tenure?[2J?serve?) on host h?") {
					t.Errorf("escapes: %q", msg)
				}
			} else if le.Holder.Known() || !strings.Contains(msg, "no readable holder record") {
				t.Errorf("%s: holder %+v, message %q", name, le.Holder, msg)
			}
		})
	}
}
