package audit

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// WriteSummary writes a human summary of r: what was replayed, the stored
// snapshot (checked against its anchor, used, compared with the fold, or
// why not), the count of every class of findings with up to list items
// each (list < 0: all that r holds), the checkpoint claims (those the
// replay does not bear out, "checkpoint at input C (actor) claims state
// hash H for input S; the replay gives H'", and those not checked, as
// notes), both hashes, the rate and the verdict on the last line.
func WriteSummary(w io.Writer, r *Report, list int) error {
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	p("%-12s %d replayed (%d..%d; the input stream ends at %d)\n", "inputs:", r.Inputs, r.From, r.LastInput, r.InputEnd)
	p("%-12s %d read (the decision stream ends at %d), %d verified\n", "decisions:", r.Decisions, r.DecisionEnd, r.Verified)
	if s := r.Snapshot; s != nil {
		head := fmt.Sprintf("snapshot (input %d, decision %d, %d bytes)", s.InputSeq, s.DecisionSeq, s.Size)
		if s.AnchorSeq != 0 {
			head = fmt.Sprintf("snapshot (input %d, decision %d, anchor %d, %d bytes)", s.InputSeq, s.DecisionSeq, s.AnchorSeq, s.Size)
		}
		switch {
		case s.Problem != "":
			p("%s: PROBLEM: %s\n", head, s.Problem)
		case s.Used:
			p("%s: its anchor and position checked, audit started after it\n", head)
		case s.Verified && s.Anchored:
			p("%s: its anchor checked, equal to the fold's state\n", head)
		case s.Verified:
			p("%s: equal to the fold's state\n", head)
		case s.Anchored:
			p("%s: its anchor checked\n", head)
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
	if w := &r.Witnesses; w.Given > 0 {
		p("%-12s %d given, %d confirmed, %d not borne out by the log\n", "witnesses:", w.Given, w.Confirmed, w.Findings.Count)
		n := len(w.Findings.Items)
		if list >= 0 {
			n = min(n, list)
		}
		for _, f := range w.Findings.Items[:n] {
			p("  %s: %s\n", f.Origin, f.Problem)
		}
		if w.Findings.Count > n {
			p("  ... %d more\n", w.Findings.Count-n)
		}
	}
	if e := r.Effects; e != nil {
		p("%-12s %d (%d receipts given, %d confirmed", "effects:", e.Findings.Count, e.Given, e.Confirmed)
		if e.Skew > 0 {
			p(", clocks within %v", e.Skew)
		}
		p(")\n")
		n := len(e.Findings.Items)
		if list >= 0 {
			n = min(n, list)
		}
		for _, f := range e.Findings.Items[:n] {
			p("  %s: %s: %s\n", f.Origin, f.Kind, f.Problem)
		}
		if e.Findings.Count > n {
			p("  ... %d more\n", e.Findings.Count-n)
		}
	}
	writeFlow(p, &r.Flow, list)
	cp := &r.Checkpoints
	p("%-12s %d (%d claims, %d verified", "checkpoints:", cp.Mismatches.Count, cp.Claims, cp.Verified)
	if cp.Unchecked.Count > 0 {
		p(", %d not checked", cp.Unchecked.Count)
	}
	p(")\n")
	n := len(cp.Mismatches.Items)
	if list >= 0 {
		n = min(n, list)
	}
	for _, c := range cp.Mismatches.Items[:n] {
		p("  checkpoint at input %d (%s) claims state hash %s for input %d; the replay gives %s\n",
			c.Input, c.Actor, c.Claimed, c.InputSeq, c.Replayed)
	}
	if cp.Mismatches.Count > n {
		p("  ... %d more\n", cp.Mismatches.Count-n)
	}
	n = len(cp.Unchecked.Items)
	if list >= 0 {
		n = min(n, list)
	}
	for _, c := range cp.Unchecked.Items[:n] {
		p("  note: checkpoint at input %d (%s) claims state hash %s for input %d: %s\n", c.Input, c.Actor, c.Claimed, c.InputSeq, c.Note)
	}
	if cp.Unchecked.Count > n {
		p("  ... %d more not checked\n", cp.Unchecked.Count-n)
	}
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
	if r.ChainSeq != 0 {
		p("chain head:  %s (decision %d)\n", r.ChainHead, r.ChainSeq)
	}
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

// WriteResults writes the results sent about Options.Job (its timeline's
// result inputs): for each, its input sequence, worker, outcome, the
// verdict about it and the worker's own detail, quoted (why it failed: no
// decision carries it, the result input holds it). It writes nothing when
// there is none.
func WriteResults(w io.Writer, r *Report) error {
	bw := bufio.NewWriter(w)
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	n := 0
	for i := range r.Timeline {
		s := &r.Timeline[i]
		subject, _ := r.Partition.StripInput(s.Input.Subject)
		var in events.Input
		if events.DecodeInput(subject, s.Input.Body, &in) != nil || in.Verb != events.VerbResult {
			continue
		}
		if n == 0 {
			fmt.Fprintln(bw, "results sent (the workers' details are in their result inputs, not in the decisions):")
			fmt.Fprintln(tw, "  INPUT\tWORKER\tOUTCOME\tVERDICT\tDETAIL")
		}
		n++
		verdict := "pending"
		if len(s.Decisions) > 0 {
			verdict = s.Decisions[0].Kind.String() + "/" + string(s.Decisions[0].Reason)
		}
		outcome := in.Outcome.String()
		if in.Permanent {
			outcome += " (permanent)"
		}
		detail := "-"
		if in.Text != "" {
			detail = strconv.Quote(in.Text)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\n", s.Input.Seq, in.Actor, outcome, verdict, detail)
	}
	if err := tw.Flush(); err != nil {
		return err
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

// PartitionHeading is the line that heads the report of the partition of t
// in a partitioned deployment, e.g.
// "== partition 2 of 4: TENURE_P2_IN, TENURE_P2_OUT ==".
func PartitionHeading(t streams.Topology) string {
	return fmt.Sprintf("== %s: %s, %s ==", t.Partition, t.InputStream(), t.DecisionStream())
}

// WriteTotals writes the line that sums up the audits of the partitions of
// a deployment ("all 4 partitions: ..." when every partition was audited,
// "1 of 4 partitions: ..." otherwise): OK when every partition audited
// reproduced everything, FAILED with the problems of each partition and the
// partitions that could not be audited otherwise.
func WriteTotals(w io.Writer, audits []PartitionAudit) error {
	t := Sum(audits)
	var b strings.Builder
	count := 0
	if len(audits) > 0 {
		count = int(audits[0].Partition.Count)
	}
	if t.Partitions == count {
		fmt.Fprintf(&b, "all %d partitions: ", count)
	} else {
		fmt.Fprintf(&b, "%d of %d partitions: ", t.Partitions, count)
	}
	if t.AllOK() {
		fmt.Fprintf(&b, "OK: every decision was reproduced (%d inputs replayed, %d decisions verified", t.Inputs, t.Verified)
		if t.Pending > 0 {
			fmt.Fprintf(&b, ", %d inputs pending", t.Pending)
		}
		b.WriteString(")\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, "FAILED: %d problems", t.Problems)
	var where []string
	for _, i := range t.Failed {
		where = append(where, fmt.Sprintf("partition %s: %d", audits[i].Partition.Token(), audits[i].Report.Problems()))
	}
	for _, i := range t.Errors {
		where = append(where, fmt.Sprintf("partition %s: not audited", audits[i].Partition.Token()))
	}
	if len(where) > 0 {
		b.WriteString(" (" + strings.Join(where, "; ") + ")")
	}
	fmt.Fprintf(&b, "; %d of %d partitions OK (%d inputs replayed, %d of %d decisions verified)\n",
		t.OK, t.Partitions, t.Inputs, t.Verified, t.Decisions)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMatrix writes the evidence matrix of several reports in format f:
// every row of their History (history) or their Latest rows. When the
// reports are of an unpartitioned deployment it is projector.WriteMatrix;
// for the partitions of a partitioned one, the rows of all of them, ordered
// by job (then history order), with one more column, the partition of the
// report the row comes from ("Partition" last in a table or CSV, the key
// "partition" in JSON lines, as text like every other value). A job's Latest
// row is taken from its own partition's report: another partition only
// holds its wrong_partition rejections.
func WriteMatrix(w io.Writer, f projector.Format, reps []*Report, history bool, o projector.MatrixOptions) error {
	type row struct {
		part events.Partition
		d    *events.Decision
	}
	var rows []row
	partitioned := false
	for _, r := range reps {
		partitioned = partitioned || r.Partition.Partitioned()
		ds := r.Latest
		if history {
			ds = r.History
		}
		for i := range ds {
			rows = append(rows, row{r.Partition, &ds[i]})
		}
	}
	if !partitioned {
		ds := make([]events.Decision, len(rows))
		for i := range rows {
			ds[i] = *rows[i].d
		}
		return projector.WriteMatrix(w, f, ds, o)
	}
	slices.SortStableFunc(rows, func(a, b row) int { return strings.Compare(a.d.Job.ID, b.d.Job.ID) })
	if !history { // one row per job: its own partition's
		kept := rows[:0]
		for _, r := range rows {
			if n := len(kept); n > 0 && kept[n-1].d.Job.ID == r.d.Job.ID {
				if r.part.Owns(r.d.Job.ID) {
					kept[n-1] = r
				}
				continue
			}
			kept = append(kept, r)
		}
		rows = kept
	}
	switch f {
	case projector.FormatTable, "":
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(projector.MatrixColumns, "\t")+"\tPartition")
		for _, r := range rows {
			mr := projector.MatrixRow(r.d, o)
			fmt.Fprintln(tw, strings.Join(mr[:], "\t")+"\t"+r.part.Token())
		}
		return tw.Flush()
	case projector.FormatCSV:
		cw := csv.NewWriter(w)
		if err := cw.Write(append(slices.Clone(projector.MatrixColumns), "Partition")); err != nil {
			return err
		}
		for _, r := range rows {
			mr := projector.MatrixRow(r.d, o)
			if err := cw.Write(append(mr[:], r.part.Token())); err != nil {
				return err
			}
		}
		cw.Flush()
		return cw.Error()
	case projector.FormatJSON:
		var buf bytes.Buffer
		for _, r := range rows {
			buf.Reset()
			if err := projector.WriteMatrix(&buf, f, []events.Decision{*r.d}, o); err != nil {
				return err
			}
			line := bytes.TrimSuffix(buf.Bytes(), []byte("}\n"))
			line = append(line, `,"partition":`+strconv.Quote(r.part.Token())+"}\n"...)
			if _, err := w.Write(line); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("audit: unknown matrix format %q", f)
}
