package sim

import (
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/chaos"
	"github.com/maknow/tenure/internal/jsmodel"
)

// checkVerdicts: every input a client was acknowledged has exactly one
// verdict in the final decision stream (a batch renew one per lease it
// names, a batch one per element, or one refusing it whole:
// events.Kind.Derived), once the faults
// have stopped and every coordinator has had the time to decide what is
// stored. internal/chaos.Check compares the stored decisions with the
// fold and finds inputs without decisions between two that have some,
// but leaves the tail after the last decision alone (a coordinator's
// pending appends, in a chaos run that stops it anywhere): an input
// acknowledged and never decided at the end of a quiet drain is this
// oracle's finding. excused names the Msg-Ids of inputs the server lost
// after acknowledging them (lost.go): no verdict is owed to those.
func checkVerdicts(rep *Report, l *chaos.Log, entries []chaos.Entry, excused map[string]bool) {
	verdicts := map[uint64]int{}
	whole := map[uint64]bool{} // a batch's inputs refused whole: one verdict about no job
	for _, m := range l.Decisions {
		d, err := events.DecodeDecision(m.Data)
		if err == nil && !d.Kind.Derived() {
			verdicts[d.Cause]++
			if d.Job.ID == events.NoJob && !d.Kind.Accepted() {
				whole[d.Cause] = true
			}
		}
	}
	inputs := map[uint64]*chaos.Message{}
	for i := range l.Inputs {
		inputs[l.Inputs[i].Seq] = &l.Inputs[i]
	}
	done := map[string]bool{}
	var in events.Input
	for _, e := range entries {
		if e.Kind != chaos.EntryAck || done[e.MsgID] || excused[e.MsgID] {
			continue
		}
		done[e.MsgID] = true
		m := inputs[e.Seq]
		if m == nil {
			continue // chaos.Check's Lost finding
		}
		want := 1
		if err := events.DecodeInput(m.Subject, m.Data, &in); err == nil {
			switch {
			case len(in.Leases) > 0:
				want = len(in.Leases)
			case len(in.Batch) > 0:
				want = len(in.Batch)
			}
		}
		if want > 1 && whole[e.Seq] {
			want = 1 // (a batch below rules revision 7, or malformed: refused whole)
		}
		if got := verdicts[e.Seq]; got != want {
			rep.finding("input %d (%s, Msg-Id %s) was acknowledged and has %d verdicts in the decision stream, want %d", e.Seq, e.Subject, e.MsgID, got, want)
		}
	}
}

// allDecided reports whether the decision stream has decided every input
// stored: its last decision names the input stream's last input (every
// input has a verdict, so a decided input has a decision).
func allDecided(net *jsmodel.Net) bool {
	net.Lock()
	defer net.Unlock()
	m := net.Model()
	if m.In.Last() == 0 {
		return true
	}
	last := m.Out.Get(m.Out.Last())
	if last == nil {
		return false
	}
	d, err := events.DecodeDecision(last.Data)
	return err == nil && d.Cause == m.In.Last()
}
