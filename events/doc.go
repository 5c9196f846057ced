// Package events is Tenure's wire schema: the subjects inputs are published on,
// the versioned JSON envelope of every input kind, the decision envelope the
// coordinator appends, the closed sets of decision kinds and reason codes, and
// a strict decoder that rejects, with a typed error per cause, everything
// Go's encoding/json would silently accept (duplicate keys, keys differing
// only in case, invalid UTF-8, trailing data, out-of-range numbers...).
//
// Identity comes from the subject, never from the body:
//
//	tenure.in.<role>.<actor>.<job>.<verb>
//
// where role is worker, ops or coord. A body may repeat the actor or job it
// was published for (fields "actor" and "job"); if it names another one the
// input is rejected with ReasonIdentityMismatch.
//
// Decisions are published on
//
//	tenure.out.<addressee>.<job>.<kind>
//
// so that a worker can be allowed to read only tenure.out.<its id>.>.
//
// The package does no I/O and reads no clock; times are Unix nanoseconds
// taken from the input stream's stored timestamps.
package events
