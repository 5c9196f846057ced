package events

import "fmt"

// Reason is a code from the closed set documented in PROTOCOL.md. Every
// decision carries one; every decode failure is one.
type Reason string

// Reasons returns every reason code with its one-line meaning, in a fixed order.
func Reasons() []struct {
	Reason Reason
	Doc    string
} {
	return append(reasonDocs[:0:0], reasonDocs...)
}

// Known reports whether r is in the closed set.
func (r Reason) Known() bool {
	for _, d := range reasonDocs {
		if d.Reason == r {
			return true
		}
	}
	return false
}

// DecodeError is a rejected input: a broken subject or body. Code is the
// reason recorded in the rejection decision; Field names the offending field
// (dotted path, empty when the body as a whole is at fault).
type DecodeError struct {
	Code   Reason
	Field  string
	Detail string
}

func (e *DecodeError) Error() string {
	s := "events: " + string(e.Code)
	if e.Field != "" {
		s += " (" + e.Field + ")"
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is matches another *DecodeError with the same code, so that
// errors.Is(err, events.ErrUnknownField) works.
func (e *DecodeError) Is(target error) bool {
	t, ok := target.(*DecodeError)
	return ok && t.Code == e.Code
}

func decodeErr(code Reason, field, format string, args ...any) *DecodeError {
	d := format
	if len(args) > 0 {
		d = fmt.Sprintf(format, args...)
	}
	return &DecodeError{Code: code, Field: field, Detail: d}
}

// Sentinels for errors.Is, one per decode cause.
var (
	ErrBadSubject         = &DecodeError{Code: ReasonBadSubject}
	ErrWrongRole          = &DecodeError{Code: ReasonWrongRole}
	ErrSyntax             = &DecodeError{Code: ReasonSyntaxError}
	ErrNotObject          = &DecodeError{Code: ReasonNotObject}
	ErrUnknownField       = &DecodeError{Code: ReasonUnknownField}
	ErrDuplicateKey       = &DecodeError{Code: ReasonDuplicateKey}
	ErrCaseVariantKey     = &DecodeError{Code: ReasonCaseVariantKey}
	ErrInvalidUTF8        = &DecodeError{Code: ReasonInvalidUtf8}
	ErrControlChar        = &DecodeError{Code: ReasonControlChar}
	ErrTrailingData       = &DecodeError{Code: ReasonTrailingData}
	ErrMissingField       = &DecodeError{Code: ReasonMissingField}
	ErrWrongType          = &DecodeError{Code: ReasonWrongType}
	ErrNullValue          = &DecodeError{Code: ReasonNullValue}
	ErrBadNumber          = &DecodeError{Code: ReasonBadNumber}
	ErrBadDuration        = &DecodeError{Code: ReasonBadDuration}
	ErrBadSequence        = &DecodeError{Code: ReasonBadSequence}
	ErrBadValue           = &DecodeError{Code: ReasonBadValue}
	ErrBadToken           = &DecodeError{Code: ReasonBadToken}
	ErrBadEnum            = &DecodeError{Code: ReasonBadEnum}
	ErrBadTime            = &DecodeError{Code: ReasonBadTime}
	ErrTooLarge           = &DecodeError{Code: ReasonTooLarge}
	ErrTooDeep            = &DecodeError{Code: ReasonTooDeep}
	ErrUnsupportedVersion = &DecodeError{Code: ReasonUnsupportedVersion}
	ErrIdentityMismatch   = &DecodeError{Code: ReasonIdentityMismatch}
	ErrBadPolicy          = &DecodeError{Code: ReasonBadPolicy}
)
