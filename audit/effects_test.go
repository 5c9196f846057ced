package audit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/fence"
)

// A lease's authority ends at its expires_at, whenever the expiry fires;
// the skew widens it both ways; a lease live at the log's end holds until
// its expires_at.
func TestEffectsAuthority(t *testing.T) {
	const s = int64(time.Second)
	job := func(gen uint64, id string, st events.State, exp int64) events.Job {
		return events.Job{ID: "j", LeaseID: id, Generation: gen, State: st, ExpiresAt: exp}
	}
	ds := []events.Decision{
		{Cause: 3, At: 10 * s, Kind: events.KindGranted, Job: job(1, "L3-a", events.StateActive, 12*s)},
		{Cause: 4, At: 11 * s, Kind: events.KindRenewed, Job: job(1, "L3-a", events.StateActive, 13*s)},
		{Cause: 9, At: 20 * s, Kind: events.KindExpired, Reason: events.ReasonLeaseExpired, Job: job(1, "L3-a", events.StateExpired, 13*s)},
		{Cause: 9, At: 20 * s, Kind: events.KindGranted, Job: job(2, "L9-b", events.StateActive, 30*s)},
	}
	r := func(id string, gen uint64, effect string, at int64) fence.ReceiptLine {
		return fence.ReceiptLine{File: "f", Line: int(at / s), Receipt: fence.Receipt{V: 1, Resource: "r", Job: "j", LeaseID: id, Generation: gen, Effect: effect, Position: uint64(at), CommittedAt: at}}
	}
	for _, c := range []struct {
		name string
		l    fence.ReceiptLine
		skew time.Duration
		want string // "" confirmed
	}{
		{"within", r("L3-a", 1, "e", 12*s+5), 0, ""},
		{"before the grant", r("L3-a", 1, "e", 10*s-1), 0, "no_authority"},
		{"before the grant, within the skew", r("L3-a", 1, "e", 10*s-1), time.Millisecond, ""},
		{"after expires_at, before the expiry fired", r("L3-a", 1, "e", 13*s), 0, "no_authority"},
		{"at expires_at, within the skew", r("L3-a", 1, "e", 13*s), time.Millisecond, ""},
		{"after generation 2 started", r("L3-a", 1, "e", 21*s), 0, "after_newer_generation"},
		{"generation 2, live at the log's end", r("L9-b", 2, "e", 29*s), 0, ""},
		{"generation 2, after its expires_at", r("L9-b", 2, "e", 30*s), 0, "no_authority"},
		{"a generation the lease does not have", r("L9-b", 3, "e", 25*s), 0, "unknown_lease"},
	} {
		e := audit.CheckEffectsOf(ds, []fence.ReceiptLine{c.l}, c.skew, -1)
		switch {
		case c.want == "" && (e.Findings.Count != 0 || e.Confirmed != 1):
			t.Errorf("%s: %+v", c.name, e.Findings.Items)
		case c.want != "" && (e.Findings.Count != 1 || e.Findings.Items[0].Kind != audit.EffectProblem(c.want)):
			t.Errorf("%s: %+v, want %s", c.name, e.Findings.Items, c.want)
		case c.want != "" && !strings.HasPrefix(e.Findings.Items[0].Origin, "f:"):
			t.Errorf("%s: origin %s", c.name, e.Findings.Items[0].Origin)
		}
	}
}
