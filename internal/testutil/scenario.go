package testutil

import (
	"fmt"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/maknow/tenure/events"
)

// ScenarioBase is the stored time of t=0 in scenario files: 2026-01-01T00:00:00Z.
const ScenarioBase int64 = 1767225600 * int64(time.Second)

// ScenarioInput turns an `in` command of a scenario file into a stored input
// with sequence seq. The command reads
//
//	in t=<offset> <role>.<actor>.<job>.<verb>
//	<body, verbatim, possibly empty>
//
// where the subject is tenure.in. followed by the positional argument, or
// `in t=<offset> subject=<whole subject>` for subjects outside the scheme.
func ScenarioInput(d *datadriven.TestData, seq uint64) (events.Raw, error) {
	raw := events.Raw{Seq: seq, Body: []byte(d.Input)}
	var haveT bool
	for _, a := range d.CmdArgs {
		switch {
		case a.Key == "t" && len(a.Vals) == 1:
			off, err := time.ParseDuration(a.Vals[0])
			if err != nil {
				return raw, fmt.Errorf("%s: bad t: %w", d.Pos, err)
			}
			raw.Time = ScenarioBase + int64(off)
			haveT = true
		case a.Key == "subject" && len(a.Vals) == 1:
			raw.Subject = a.Vals[0]
		case len(a.Vals) == 0 && raw.Subject == "":
			raw.Subject = events.InputPrefix + "." + a.Key
		default:
			return raw, fmt.Errorf("%s: unexpected argument %s", d.Pos, a.String())
		}
	}
	if !haveT || raw.Subject == "" {
		return raw, fmt.Errorf("%s: in needs t=<offset> and a subject", d.Pos)
	}
	return raw, nil
}
