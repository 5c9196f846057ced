package heads

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nats-io/nkeys"
)

// maxKeyFile bounds what LoadKey reads: a seed is 58 characters.
const maxKeyFile = 4096

// LoadKey reads a head key: a file holding one server nkey seed ("SN...",
// surrounding white space allowed), readable and writable by its owner
// only. A file that others may read or write (any group or other
// permission bit, as ssh judges private keys), that is not a regular file,
// or that holds anything else is refused with an error saying which.
func LoadKey(path string) (nkeys.KeyPair, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("heads: head key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("heads: head key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("heads: head key %s is not a regular file (%v)", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("heads: head key %s is accessible to others than its owner (mode %04o): a signing key must be private (chmod 600 %s)", path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("heads: head key %s: %w", path, err)
	}
	defer wipe(b)
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("heads: head key %s: more than %d bytes: not an nkey seed file", path, maxKeyFile)
	}
	seed := bytes.TrimSpace(b)
	prefix, _, err := nkeys.DecodeSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("heads: head key %s does not hold an nkey seed (want one line SN..., as LoadOrCreateKey writes): %w", path, err)
	}
	if prefix != KeyPrefix {
		return nil, fmt.Errorf("heads: head key %s holds a %s seed; head keys are %s nkeys (nk -gen server)", path, prefix, KeyPrefix)
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("heads: head key %s: %w", path, err)
	}
	return kp, nil
}

// LoadOrCreateKey loads the head key at path (LoadKey) or, if there is no
// file there, creates one: a new server nkey, its seed written to a
// temporary file of mode 0600 in the same directory (created 0700 if
// missing), synced, then hard-linked to path, which fails rather than
// replace a file that appeared meanwhile (that one is then loaded). So it
// is safe to run twice, even at once, and never leaves a partial key at
// path. created reports whether it made the key.
func LoadOrCreateKey(path string) (kp nkeys.KeyPair, created bool, err error) {
	kp, err = LoadKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return kp, false, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("heads: head key: %w", err)
	}
	kp, err = nkeys.CreateServer()
	if err != nil {
		return nil, false, fmt.Errorf("heads: create a head key: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, false, fmt.Errorf("heads: create a head key: %w", err)
	}
	line := append(append(make([]byte, 0, len(seed)+1), seed...), '\n') // (seed is kp's own: not wiped)
	defer wipe(line)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*") // mode 0600
	if err != nil {
		return nil, false, fmt.Errorf("heads: create head key %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(line)
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, false, fmt.Errorf("heads: write head key %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Another process made one first: use it.
			kp, err := LoadKey(path)
			return kp, false, err
		}
		return nil, false, fmt.Errorf("heads: create head key %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the link survives a crash
		d.Close()
	}
	return kp, true, nil
}

// wipe overwrites secret bytes once they are no longer needed.
func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}
