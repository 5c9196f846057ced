package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/receipt"
	"github.com/maknow/tenure/streams"
)

// files is a repeatable flag of file paths (also comma-separated).
type files []string

func (f *files) String() string { return strings.Join(*f, ",") }

func (f *files) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*f = append(*f, v)
		}
	}
	return nil
}

// witnessSet holds what tenure audit checks against the log besides the
// log itself (receipts, chain heads), by the stream each names, and the
// problems found reading them: each is a finding of the audit.
type witnessSet struct {
	byStream map[string][]audit.Witness
	problems []string
	count    int
}

func (ws *witnessSet) add(stream string, w audit.Witness) {
	if ws.byStream == nil {
		ws.byStream = map[string][]audit.Witness{}
	}
	ws.byStream[stream] = append(ws.byStream[stream], w)
	ws.count++
}

// addReceipts reads receipt files (package receipt). A file that cannot be
// read is an error; a line that is not a valid receipt is a problem.
func (ws *witnessSet) addReceipts(paths []string) error {
	for _, p := range paths {
		lines, err := receipt.ReadFile(p)
		if err != nil {
			return fmt.Errorf("--receipts: %w", err)
		}
		for _, l := range lines {
			if l.Err != nil {
				ws.problems = append(ws.problems, fmt.Sprintf("%s: not a receipt: %v", l.Origin(), l.Err))
				continue
			}
			w := audit.Witness{Origin: l.Origin(), Seq: l.Seq}
			switch l.Kind {
			case receipt.KindInput:
				w.Kind, w.Subject = audit.WitnessInput, l.Subject
				w.BodyHash, _ = l.BodyHash() // checked by Read
			case receipt.KindDecision:
				w.Kind, w.Cause = audit.WitnessDecision, l.Cause
				w.Chain, _ = l.ChainValue()
			}
			ws.add(l.Stream, w)
		}
	}
	return nil
}

// forTopology returns the witnesses of t's input and decision streams, and
// of its intake streams (quotas), each marked with its intake.
func (ws *witnessSet) forTopology(t streams.Topology) []audit.Witness {
	out := append(append([]audit.Witness(nil), ws.byStream[t.InputStream()]...), ws.byStream[t.DecisionStream()]...)
	names := slices.Sorted(maps.Keys(ws.byStream))
	for _, stream := range names {
		if _, ok := t.IntakeWorker(stream); ok && !t.Partition.Partitioned() {
			for _, w := range ws.byStream[stream] {
				w.Intake = stream
				out = append(out, w)
			}
		}
	}
	return out
}

// strays adds a problem for every witness of a stream that is none of the
// topologies' (a receipt of another deployment, or of a stream that is
// gone), and returns how many there were.
func (ws *witnessSet) strays(topos []streams.Topology) int {
	known := map[string]bool{}
	for _, t := range topos {
		known[t.InputStream()], known[t.DecisionStream()] = true, true
	}
	n := 0
	for stream, list := range ws.byStream {
		if known[stream] {
			continue
		}
		if len(topos) == 1 {
			if _, ok := topos[0].IntakeWorker(stream); ok && !topos[0].Partition.Partitioned() {
				continue
			}
		}
		for _, w := range list {
			ws.problems = append(ws.problems, fmt.Sprintf("%s: names stream %s, which this deployment does not have (audited: %s)", w.Origin, stream, auditedStreams(topos)))
			n++
		}
	}
	return n
}

func auditedStreams(topos []streams.Topology) string {
	var s []string
	for _, t := range topos {
		s = append(s, t.InputStream(), t.DecisionStream())
	}
	return strings.Join(s, ", ")
}

// report prints the problems found reading the witnesses (sorted), before
// the audit's summary, and returns an audit failure if there were any.
func (ws *witnessSet) report(w io.Writer) error {
	if len(ws.problems) == 0 {
		return nil
	}
	slices.Sort(ws.problems)
	fmt.Fprintf(w, "witnesses not checked: %d\n", len(ws.problems))
	for _, p := range ws.problems {
		fmt.Fprintf(w, "  %s\n", p)
	}
	return fmt.Errorf("%w: %d witnesses are not receipts or chain heads of this log", errAuditFailed, len(ws.problems))
}
