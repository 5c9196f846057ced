package fence

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/maknow/tenure/events"
)

// MaxGeneration is the largest generation a token may carry: the
// protocol's integers stop at 2^53-1 (events.MaxSeq), and so does every
// adapter's storage (a PostgreSQL or SQLite BIGINT is signed: 2^63-1).
// The same bound holds for the input sequence in a lease id.
const MaxGeneration = events.MaxSeq

// Token is a lease's fencing token: its job, its lease id and its
// generation, as the coordinator's verdict gave them (worker.FencingToken
// is this type). Pass it with every side effect the lease protects.
type Token struct {
	Job        string
	LeaseID    string
	Generation uint64
}

// String renders the token as "<job>/<lease id>/<generation>", which
// ParseToken reads back.
func (t Token) String() string {
	return t.Job + "/" + t.LeaseID + "/" + strconv.FormatUint(t.Generation, 10)
}

// ErrBadToken is the error of a token that is not one a coordinator gives:
// a job or lease id that is no valid id, a lease id that is not
// L<seq> or L<seq>-<tag>, a generation or sequence of 0 or above
// MaxGeneration. Adapters refuse such a token before touching anything.
var ErrBadToken = errors.New("fence: bad fencing token")

// ParseToken parses the form String writes, and checks it (Check).
func ParseToken(s string) (Token, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return Token{}, fmt.Errorf("%w %q: want <job>/<lease id>/<generation>", ErrBadToken, s)
	}
	gen, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil || strings.HasPrefix(parts[2], "+") || len(parts[2]) > 1 && parts[2][0] == '0' {
		return Token{}, fmt.Errorf("%w %q: generation", ErrBadToken, s)
	}
	t := Token{Job: parts[0], LeaseID: parts[1], Generation: gen}
	if err := t.Check(); err != nil {
		return Token{}, err
	}
	return t, nil
}

// Check reports whether t could have come from a coordinator: valid job
// and lease ids, the lease id L<seq> or L<seq>-<tag> with seq from 1 to
// MaxGeneration, and a generation from 1 to MaxGeneration. The error
// matches ErrBadToken.
func (t Token) Check() error {
	switch {
	case !events.ValidToken(t.Job):
		return fmt.Errorf("%w: job %q", ErrBadToken, t.Job)
	case !events.ValidToken(t.LeaseID):
		return fmt.Errorf("%w: lease id %q", ErrBadToken, t.LeaseID)
	case t.Generation == 0 || t.Generation > MaxGeneration:
		return fmt.Errorf("%w: %s: generation %d, want 1 to %d", ErrBadToken, t, t.Generation, uint64(MaxGeneration))
	}
	if _, ok := LeaseSeq(t.LeaseID); !ok {
		return fmt.Errorf("%w: lease id %q: want L<seq> or L<seq>-<tag>, seq 1 to %d", ErrBadToken, t.LeaseID, uint64(MaxGeneration))
	}
	return nil
}

// Seq is the input sequence of the offer or acquire that created t's
// lease, read from its lease id; false if the id has no valid one.
func (t Token) Seq() (uint64, bool) { return LeaseSeq(t.LeaseID) }

// LeaseSeq reads the input sequence from a lease id, L<seq> (rules
// revision 1) or L<seq>-<tag> (PROTOCOL.md §14): digits without a leading
// zero, from 1 to MaxGeneration.
func LeaseSeq(id string) (uint64, bool) {
	if len(id) < 2 || id[0] != 'L' {
		return 0, false
	}
	digits := id[1:]
	if i := strings.IndexByte(digits, '-'); i >= 0 {
		if i == len(digits)-1 {
			return 0, false
		}
		digits = digits[:i]
	}
	if digits == "" || digits[0] == '0' || len(digits) > 16 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	if v > MaxGeneration {
		return 0, false
	}
	return v, true
}
