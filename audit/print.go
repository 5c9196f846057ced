package audit

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
)

// WriteSummary writes a human summary of r: what was replayed, the count of
// every class of findings with up to list items each (list < 0: all that r
// holds), both hashes, the rate and the verdict on the last line.
func WriteSummary(w io.Writer, r *Report, list int) error {
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	p("%-12s %d replayed (%d..%d; the input stream ends at %d)\n", "inputs:", r.Inputs, r.From, r.LastInput, r.InputEnd)
	p("%-12s %d read (the decision stream ends at %d), %d verified\n", "decisions:", r.Decisions, r.DecisionEnd, r.Verified)
	if s := r.Snapshot; s != nil {
		switch {
		case s.Problem != "":
			p("snapshot (input %d, decision %d, %d bytes): PROBLEM: %s\n", s.InputSeq, s.DecisionSeq, s.Size, s.Problem)
		case s.Used:
			p("snapshot (input %d, decision %d, %d bytes): checked, audit started after it\n", s.InputSeq, s.DecisionSeq, s.Size)
		case s.Verified:
			p("snapshot (input %d, decision %d, %d bytes): equal to the fold's state\n", s.InputSeq, s.DecisionSeq, s.Size)
		}
		if s.Note != "" {
			p("snapshot: %s\n", s.Note)
		}
	}
	if r.Lockdown != "" {
		p("streams not locked down: %s\n", r.Lockdown)
	}
	section := func(name string, count, held int, item func(i int) string) {
		p("%-12s %d\n", name+":", count)
		n := held
		if list >= 0 {
			n = min(n, list)
		}
		for i := range n {
			p("  %s\n", item(i))
		}
		if count > n {
			p("  ... %d more\n", count-n)
		}
	}
	section("mismatches", r.Mismatches.Count, len(r.Mismatches.Items), func(i int) string {
		m := r.Mismatches.Items[i]
		return fmt.Sprintf("decision %d (%d.%d of %d): %s", m.Seq, m.Cause, m.N, m.Of, m.Summary())
	})
	section("missing", r.Missing.Count, len(r.Missing.Items), func(i int) string {
		m := r.Missing.Items[i]
		return fmt.Sprintf("decision %d.%d of %d (%s, job %s), expected before decision %d", m.Cause, m.N, m.Of, m.Kind, m.Job, m.Before)
	})
	section("extra", r.Extra.Count, len(r.Extra.Items), func(i int) string {
		e := r.Extra.Items[i]
		return fmt.Sprintf("decision %d (%d.%d): %s: %s", e.Seq, e.Cause, e.N, e.Why, e.Detail)
	})
	section("orphans", r.Orphans.Count, len(r.Orphans.Items), func(i int) string {
		o := r.Orphans.Items[i]
		return fmt.Sprintf("decision %d (cause %d): %s", o.Seq, o.Cause, o.Detail)
	})
	section("holes", r.Holes.Count, len(r.Holes.Items), func(i int) string {
		h := r.Holes.Items[i]
		return fmt.Sprintf("input %d %s: none of its %d decisions stored", h.Input, h.Subject, h.Decisions)
	})
	section("chain", r.Chain.Count, len(r.Chain.Items), func(i int) string {
		b := r.Chain.Items[i]
		return fmt.Sprintf("%s stream at %d: %s: %s", b.Stream, b.Seq, b.Kind, b.Detail)
	})
	switch pe := r.Pending; {
	case pe.Count == 0 && pe.Partial == nil:
		p("%-12s 0\n", "pending:")
	default:
		p("%-12s %d", "pending:", pe.Count)
		if pe.Count > 0 {
			p(" (inputs %d..%d, stored but not decided yet)", pe.From, pe.To)
		}
		if pe.Partial != nil {
			p("; input %d has %d of its %d decisions stored", pe.Partial.Input, pe.Partial.Stored, pe.Partial.Of)
		}
		p("\n")
	}
	if r.Undecodable > 0 {
		p("%-12s %d stored decisions left out of the stored hash\n", "undecodable:", r.Undecodable)
	}
	eq := "equal"
	if !r.HashesEqual() {
		eq = "DIFFERENT"
		if r.Pending.Partial != nil {
			eq += " (expected: the last input is partly decided)"
		}
	}
	p("fold hash:   %s\nstored hash: %s (%s)\n", r.FoldHash, r.StoredHash, eq)
	p("elapsed:     %v (%.0f inputs/s)\n", r.Elapsed.Round(time.Millisecond), r.Rate())
	if r.OK() {
		p("result:      OK: every decision was reproduced\n")
	} else {
		p("result:      FAILED: %d problems\n", r.Problems())
	}
	return bw.Flush()
}

// WriteTimeline writes the timeline of Options.Job: every input (sequence,
// stored time, subject, body) followed by the fold's verdicts about the job
// (projector.Describe, times relative to base when base is not 0) and the
// problems found with them.
func WriteTimeline(w io.Writer, r *Report, base int64) error {
	bw := bufio.NewWriter(w)
	for i := range r.Timeline {
		s := &r.Timeline[i]
		fmt.Fprintf(bw, "input %d  %s  %s  %s\n", s.Input.Seq, timeText(s.Input.Time, base), s.Input.Subject, oneLine(s.Input.Body))
		for j := range s.Decisions {
			fmt.Fprintf(bw, "    %s\n", projector.Describe(&s.Decisions[j], base))
		}
		if s.Pending {
			fmt.Fprintf(bw, "    (pending: no verdict stored yet)\n")
		}
		for _, n := range s.Notes {
			fmt.Fprintf(bw, "    !! %s\n", n)
		}
	}
	return bw.Flush()
}

func timeText(t, base int64) string {
	if base != 0 {
		d := time.Duration(t - base)
		if d >= 0 {
			return "+" + d.String()
		}
		return d.String()
	}
	return events.FormatTime(t)
}

func oneLine(b []byte) string {
	s := string(b)
	if strings.ContainsAny(s, "\r\n") {
		s = strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(s)
	}
	return s
}
