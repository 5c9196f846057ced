package verdict

import (
	"errors"
	"fmt"
	"testing"

	"github.com/maknow/tenure/events"
)

// TestMapping checks the table of the package documentation row by row,
// and that ErrNotAccepted goes with every kind that is not accepted.
func TestMapping(t *testing.T) {
	all := []error{ErrNotAccepted, ErrLostAuthority, ErrStaleGeneration, ErrExpired, ErrConflict, ErrRejected,
		ErrDuplicate, ErrLate, ErrLeaseHeld, ErrCancelRequested, ErrNoVerdict}
	na := ErrNotAccepted
	for _, tc := range []struct {
		kind   events.Kind
		reason events.Reason
		want   []error
	}{
		{events.KindStale, events.ReasonStaleGeneration, []error{na, ErrStaleGeneration, ErrLostAuthority}},
		{events.KindLostAuthority, events.ReasonRenewAfterExpiry, []error{na, ErrLostAuthority, ErrExpired}},
		{events.KindLostAuthority, events.ReasonLeaseExpired, []error{na, ErrLostAuthority, ErrExpired}},
		{events.KindLostAuthority, events.ReasonCancelRequested, []error{na, ErrLostAuthority, ErrCancelRequested}},
		{events.KindLostAuthority, events.ReasonStaleGeneration, []error{na, ErrLostAuthority, ErrStaleGeneration}},
		{events.KindLostAuthority, events.ReasonHolderMismatch, []error{na, ErrLostAuthority}},
		{events.KindConflict, events.ReasonOwnershipConflict, []error{na, ErrConflict, ErrLostAuthority}},
		{events.KindRejected, events.ReasonLeaseHeld, []error{na, ErrRejected, ErrLeaseHeld}},
		{events.KindRejected, events.ReasonCancelRequested, []error{na, ErrRejected, ErrCancelRequested}},
		{events.KindRejected, events.ReasonSuccessAfterCancel, []error{na, ErrRejected, ErrCancelRequested}},
		{events.KindRejected, events.ReasonNothingToResolve, []error{na, ErrRejected}},
		{events.KindDuplicate, events.ReasonDuplicateCancel, []error{na, ErrDuplicate}},
		{events.KindLate, events.ReasonAckAfterDeadline, []error{na, ErrLate, ErrExpired, ErrLostAuthority}},
		{events.KindLate, events.ReasonCancelAckAfterExpiry, []error{na, ErrLate, ErrExpired, ErrLostAuthority}},
		{events.KindLate, events.ReasonProgressAfterCancel, []error{na, ErrLate, ErrCancelRequested}},
		{events.KindLate, events.ReasonCancelTimeout, []error{na, ErrLate, ErrCancelRequested, ErrLostAuthority}},
		{events.KindLate, events.ReasonLeaseEnded, []error{na, ErrLate, ErrLostAuthority}},
		{events.KindLate, events.ReasonLateRenew, []error{na, ErrLate}},
		{events.KindExpired, events.ReasonLeaseExpired, []error{na, ErrExpired, ErrLostAuthority}},
		{events.KindAckMissed, events.ReasonAckDeadlinePassed, []error{na, ErrExpired, ErrLostAuthority}},
		{events.KindUnresolved, events.ReasonExpiredCancelUnreconciled, []error{na, ErrLostAuthority, ErrCancelRequested, ErrExpired}},
		{events.KindUnresolved, events.ReasonCancelTimeout, []error{na, ErrLostAuthority, ErrCancelRequested}},
		// Decisions that end a lease without refusing anything: accepted
		// kinds, so not ErrNotAccepted.
		{events.KindCancelRequested, events.ReasonOfferWithdrawn, []error{ErrCancelRequested, ErrLostAuthority}},
		{events.KindCancelRequested, events.ReasonOk, []error{ErrCancelRequested}},
		{events.KindResolved, events.ReasonLeaseRevoked, []error{ErrLostAuthority}},
		{events.KindResolved, events.ReasonConflictAffirmed, nil},
	} {
		for _, role := range []events.Role{events.RoleWorker, events.RoleOps} {
			wrapped := fmt.Errorf("op: %w", New(role, events.Decision{Kind: tc.kind, Reason: tc.reason, Job: events.Job{ID: "j"}}))
			for _, s := range all {
				want := false
				for _, w := range tc.want {
					want = want || w == s
				}
				if got := errors.Is(wrapped, s); got != want {
					t.Errorf("%s/%s (%s): errors.Is(%v) = %v, want %v", tc.kind, tc.reason, role, s, got, want)
				}
			}
			var e *Error
			if !errors.As(wrapped, &e) || e.Kind != tc.kind || e.Reason != tc.reason || e.Role != role {
				t.Errorf("%s/%s: errors.As: %v", tc.kind, tc.reason, e)
			}
		}
	}
	for _, k := range events.Kinds() {
		if got := Of(events.RoleWorker, events.Decision{Kind: k}) == nil; got != k.Accepted() {
			t.Errorf("Of(%s) is nil: %v, want %v", k, got, k.Accepted())
		}
	}
}

// TestMessages: each client's verdicts read as they always have.
func TestMessages(t *testing.T) {
	d := events.Decision{Kind: events.KindRejected, Reason: events.ReasonLeaseHeld, Verb: events.VerbOffer,
		Job: events.Job{ID: "job-1"}, Detail: "held by w1"}
	for _, tc := range []struct {
		role events.Role
		d    events.Decision
		want string
	}{
		{events.RoleWorker, d, "worker: job job-1: rejected (lease_held): held by w1"},
		{events.RoleOps, d, "ops: offer job-1: rejected/lease_held (held by w1)"},
		{events.RoleCoord, d, "verdict: job job-1: rejected (lease_held): held by w1"},
		{events.RoleWorker, events.Decision{Kind: events.KindStale, Reason: events.ReasonStaleGeneration, Job: events.Job{ID: "j"}}, "worker: job j: stale (stale_generation)"},
		{events.RoleOps, events.Decision{Kind: events.KindDuplicate, Reason: events.ReasonDuplicateCancel, Verb: events.VerbCancel, Job: events.Job{ID: "j"}}, "ops: cancel j: duplicate/duplicate_cancel"},
	} {
		if got := New(tc.role, tc.d).Error(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.role, got, tc.want)
		}
	}
}
