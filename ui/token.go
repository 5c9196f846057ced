package ui

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// BoardRole is what a credential of the board lets its bearer see and do.
type BoardRole string

// The roles of the board.
const (
	// Viewer sees the jobs, their states, holders, counters and timelines,
	// the queues and the anomalies, but no lease id, no payload and no
	// input body (package doc: What a viewer sees), runs no audit and no
	// action.
	Viewer BoardRole = "viewer"
	// Operator sees everything the board shows, runs audits, and may use
	// the operator actions when the server has them (Config.Actions).
	Operator BoardRole = "operator"
)

// Valid reports whether r is one of the roles.
func (r BoardRole) Valid() bool { return r == Viewer || r == Operator }

// Names of the token files `tenure auth init` writes beside its other
// outputs, and `tenure serve --http` in its data directory on its first
// start.
const (
	OperatorTokenFile = "board-operator.token"
	ViewerTokenFile   = "board-viewer.token"
)

// TokenFile is the file name of role's token.
func TokenFile(role BoardRole) string {
	if role == Operator {
		return OperatorTokenFile
	}
	return ViewerTokenFile
}

// tokenPrefix starts every token: "tenure_<role>_<secret>".
const tokenPrefix = "tenure_"

// tokenSecretBytes is the random part of a token: 256 bits from
// crypto/rand, 43 characters of base64url.
const tokenSecretBytes = 32

// A Token is one credential of the board: "tenure_<role>_<43 characters>",
// the role in clear (so that a person can tell the files apart) and 256
// random bits. The role in the text decides nothing by itself: the server
// knows only the SHA-256 of the tokens it was given (Config.Tokens), each
// with its role, and a token it does not know opens nothing, whatever its
// text says.
type Token struct {
	Role   BoardRole
	secret string // the whole text
}

// ErrBadToken is a token (or a token file) that is not of the form
// "tenure_<viewer|operator>_<43 base64url characters>".
var ErrBadToken = errors.New("ui: not a board token (want tenure_<viewer|operator>_<43 base64url characters>)")

// NewToken makes a token of role from 256 random bits.
func NewToken(role BoardRole) (Token, error) {
	if !role.Valid() {
		return Token{}, fmt.Errorf("ui: unknown board role %q (viewer or operator)", role)
	}
	var b [tokenSecretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Token{}, fmt.Errorf("ui: token: %w", err)
	}
	return Token{Role: role, secret: tokenPrefix + string(role) + "_" + base64.RawURLEncoding.EncodeToString(b[:])}, nil
}

// ParseToken reads the text of a token (surrounding white space ignored).
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok {
		return Token{}, ErrBadToken
	}
	role, secret, ok := strings.Cut(rest, "_")
	if !ok || !BoardRole(role).Valid() {
		return Token{}, ErrBadToken
	}
	if b, err := base64.RawURLEncoding.DecodeString(secret); err != nil || len(b) != tokenSecretBytes {
		return Token{}, ErrBadToken
	}
	return Token{Role: BoardRole(role), secret: s}, nil
}

// String is the token's text: the secret. Keep it out of logs and command
// lines; pass token files instead.
func (t Token) String() string { return t.secret }

// sum is the SHA-256 of the token's text, what the server keeps.
func (t Token) sum() [32]byte { return sha256.Sum256([]byte(t.secret)) }

// ReadTokenFile reads a token file (its one line). On Unix it refuses a
// file that its group or others may read or write: a token is a password.
func ReadTokenFile(path string) (Token, error) {
	f, err := os.Open(path)
	if err != nil {
		return Token{}, fmt.Errorf("ui: token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Token{}, fmt.Errorf("ui: token file: %w", err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return Token{}, fmt.Errorf("ui: token file %s has mode %v: others may read it; chmod 600 it (or make a new one)", path, fi.Mode().Perm())
	}
	b := make([]byte, 256)
	n, _ := f.Read(b)
	t, err := ParseToken(string(b[:n]))
	if err != nil {
		return Token{}, fmt.Errorf("%w: %s", err, path)
	}
	return t, nil
}

// WriteTokenFile writes t into path (mode 0600, through a temporary file
// and a rename); it refuses to replace an existing file.
func WriteTokenFile(path string, t Token) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("ui: token file %s: %w", path, fs.ErrExist)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("ui: token file: %w", err)
	}
	name := tmp.Name()
	fail := func(err error) error {
		_ = tmp.Close()
		_ = os.Remove(name)
		return fmt.Errorf("ui: token file %s: %w", path, err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		return fail(err)
	}
	if _, err := tmp.WriteString(t.secret + "\n"); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	// A link fails where the target exists, so that two starts never
	// replace each other's token.
	if err := os.Link(name, path); err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("ui: token file %s: %w", path, err)
	}
	_ = os.Remove(name)
	return nil
}

// EnsureTokenFiles returns the tokens of both roles kept in dir
// (OperatorTokenFile, ViewerTokenFile), making those missing (mode 0600):
// what `tenure serve --http` does in its data directory. It returns the
// paths of the files it made.
func EnsureTokenFiles(dir string) (tokens []Token, made []string, err error) {
	for _, role := range []BoardRole{Operator, Viewer} {
		path := filepath.Join(dir, TokenFile(role))
		t, err := ReadTokenFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			if t, err = NewToken(role); err != nil {
				return nil, nil, err
			}
			if err = WriteTokenFile(path, t); errors.Is(err, fs.ErrExist) {
				t, err = ReadTokenFile(path) // made meanwhile
			} else if err == nil {
				made = append(made, path)
			}
		}
		if err != nil {
			return nil, nil, err
		}
		if t.Role != role {
			return nil, nil, fmt.Errorf("ui: token file %s holds a %s token, not a %s one", path, t.Role, role)
		}
		tokens = append(tokens, t)
	}
	return tokens, made, nil
}
