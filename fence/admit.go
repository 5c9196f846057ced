package fence

import (
	"errors"
	"fmt"
	"time"

	"github.com/maknow/tenure/verdict"
)

// Held is what a resource remembers of a job: the newest lease it
// admitted (zero: none yet).
type Held struct {
	Seq        uint64 // the input sequence in LeaseID
	LeaseID    string
	Generation uint64
}

// IsZero reports whether nothing is held.
func (h Held) IsZero() bool { return h.Seq == 0 && h.LeaseID == "" && h.Generation == 0 }

// Token is the lease held, as a token of job.
func (h Held) Token(job string) Token {
	return Token{Job: job, LeaseID: h.LeaseID, Generation: h.Generation}
}

// HeldOf is what a resource holds once it admitted t (t checked).
func HeldOf(t Token) Held {
	seq, _ := t.Seq()
	return Held{Seq: seq, LeaseID: t.LeaseID, Generation: t.Generation}
}

// Admit applies the fence to token t, which must pass Check, against h,
// what the resource holds for t's job. It returns nil when t may write,
// and then the resource holds HeldOf(t) (which may be h itself); a
// *RefusedError otherwise:
//
//   - nothing held: admitted;
//   - the same lease (same sequence, lease id and generation): admitted;
//   - an older lease (lower sequence): refused, ReasonStale;
//   - the same sequence with another lease id or generation: refused,
//     ReasonMismatch (no coordinator gives two such tokens);
//   - a later lease whose generation is higher, or 1 (a job id used again
//     after its retirement starts again at generation 1, PROTOCOL.md
//     §13.1): admitted;
//   - a later lease whose generation is from 2 up to h's: refused,
//     ReasonMismatch (a later lease of one life has a higher generation).
//
// Order by the sequence and not by the generation alone: generations
// restart at 1 when a retired job id is used again, sequences never go
// down.
func Admit(h Held, t Token) error {
	seq, _ := t.Seq()
	switch {
	case h.IsZero():
		return nil
	case seq < h.Seq:
		return &RefusedError{Reason: ReasonStale, Token: t, Held: h.Token(t.Job)}
	case seq == h.Seq:
		if t.LeaseID == h.LeaseID && t.Generation == h.Generation {
			return nil
		}
		return &RefusedError{Reason: ReasonMismatch, Token: t, Held: h.Token(t.Job),
			Detail: "the same lease sequence with another lease id or generation"}
	case t.Generation > h.Generation || t.Generation == 1:
		return nil
	default:
		return &RefusedError{Reason: ReasonMismatch, Token: t, Held: h.Token(t.Job),
			Detail: fmt.Sprintf("a later lease whose generation %d does not follow %d", t.Generation, h.Generation)}
	}
}

// Reason says why a resource refused a write.
type Reason string

// Reasons of refusals.
const (
	// ReasonStale: a newer lease of the job was admitted (it claimed the
	// job or wrote): this one lost its authority.
	ReasonStale Reason = "stale"
	// ReasonMismatch: the token contradicts what the resource holds, or
	// names another job than the one the write is for.
	ReasonMismatch Reason = "mismatch"
	// ReasonExpired: the lease's deadline had passed by the resource's
	// clock when it was to commit.
	ReasonExpired Reason = "expired"
	// ReasonReplay: the effect id was committed already (Held names the
	// lease that committed it: this one, after a retry whose first commit
	// was not acknowledged, or another).
	ReasonReplay Reason = "replay"
)

// Sentinels for errors.Is. A *RefusedError matches ErrRefused whatever
// its reason, and:
//
//	reason    matches
//	stale     ErrStale, worker.ErrStaleGeneration, worker.ErrLostAuthority
//	mismatch  ErrMismatch, worker.ErrLostAuthority
//	expired   ErrDeadline, worker.ErrExpired, worker.ErrLostAuthority
//	replay    ErrReplay
var (
	ErrRefused  = errors.New("fence: refused by the resource")
	ErrStale    = errors.New("fence: a newer lease of the job was admitted")
	ErrMismatch = errors.New("fence: the token contradicts the resource's")
	ErrDeadline = errors.New("fence: the lease's deadline passed")
	ErrReplay   = errors.New("fence: effect already committed")
)

// RefusedError is a resource's refusal of a fenced write.
type RefusedError struct {
	Reason Reason
	Token  Token  // presented
	Held   Token  // the lease the resource holds for the job (stale, mismatch), or that committed the effect (replay)
	Effect string // the effect id, when the write named one
	// Deadline is the lease's deadline presented, At the resource's time
	// that was past it (expired).
	Deadline, At time.Time
	Detail       string
}

// Error says why, naming the tokens.
func (e *RefusedError) Error() string {
	s := "fence: " + string(e.Reason) + ": " + e.Token.String()
	if e.Effect != "" {
		s += " effect " + e.Effect
	}
	switch e.Reason {
	case ReasonStale:
		if e.Held.LeaseID != "" {
			s += ": the resource admitted the newer lease " + e.Held.String()
		} else {
			s += ": the resource admitted a newer lease"
		}
	case ReasonMismatch:
		if e.Held.LeaseID != "" {
			s += ": the resource holds " + e.Held.String()
		}
	case ReasonExpired:
		s += ": deadline " + e.Deadline.UTC().Format(time.RFC3339Nano) + " passed (resource time " + e.At.UTC().Format(time.RFC3339Nano) + ")"
	case ReasonReplay:
		if e.Held.LeaseID != "" {
			s += ": committed already by " + e.Held.String()
		} else {
			s += ": committed already by another lease"
		}
	}
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

// Is matches the sentinels of the reason (see ErrRefused).
func (e *RefusedError) Is(target error) bool {
	if target == ErrRefused {
		return true
	}
	switch e.Reason {
	case ReasonStale:
		return target == ErrStale || target == verdict.ErrStaleGeneration || target == verdict.ErrLostAuthority
	case ReasonMismatch:
		return target == ErrMismatch || target == verdict.ErrLostAuthority
	case ReasonExpired:
		return target == ErrDeadline || target == verdict.ErrExpired || target == verdict.ErrLostAuthority
	case ReasonReplay:
		return target == ErrReplay
	}
	return false
}

// CommittedBy reports whether err is a replay refusal of an effect that
// lease t committed itself: a retry of a write whose first commit was
// not acknowledged. The effect is in place; the caller may go on.
func CommittedBy(err error, t Token) bool {
	var re *RefusedError
	return errors.As(err, &re) && re.Reason == ReasonReplay && re.Held == t
}

// CheckDeadline refuses a write at time now (the resource's clock) for a
// lease whose deadline has passed; a zero deadline is none.
func CheckDeadline(t Token, deadline, now time.Time) error {
	if deadline.IsZero() || now.Before(deadline) {
		return nil
	}
	return &RefusedError{Reason: ReasonExpired, Token: t, Deadline: deadline, At: now}
}

// CheckJob refuses a token of another job than job, the one the write is
// for (an HTTP request's route, a key's job).
func CheckJob(t Token, job string) error {
	if t.Job == job {
		return nil
	}
	return &RefusedError{Reason: ReasonMismatch, Token: t, Detail: "the write is for job " + job}
}
