package projector

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/maknow/tenure/events"
)

// MatrixColumns are the columns of the evidence matrix of seed 000 §13, in order.
var MatrixColumns = []string{
	"Job ID", "Lease ID", "Generation", "Holder Identity", "Issued At", "Lease Duration",
	"Expires At", "ACK Deadline", "ACK State", "Renew Sequence/Time", "Progress Sequence/Value",
	"Cancel Requested/ACK", "Terminal Result", "Stale Generation", "Late Progress",
	"Lease Expired", "Ownership Conflict", "Decision", "Reason",
}

// jsonKeys are the JSON-lines keys of the same columns.
var jsonKeys = []string{
	"job_id", "lease_id", "generation", "holder", "issued_at", "lease_duration",
	"expires_at", "ack_deadline", "ack_state", "renew", "progress",
	"cancel", "result", "stale_generation", "late_progress",
	"lease_expired", "ownership_conflict", "decision", "reason",
}

// Row is one evidence-matrix row: the job's projection after a decision,
// with the decision and its reason, every value rendered as text.
type Row [19]string

// MatrixOptions say how times are rendered.
type MatrixOptions struct {
	// Base, when non-zero, renders times as offsets from it ("+1.5s");
	// otherwise as RFC 3339 UTC.
	Base int64
	// TimeLayout, when Base is zero and it is not empty, renders times in
	// UTC with this time.Format layout instead (e.g. "15:04:05.000").
	TimeLayout string
}

func (o MatrixOptions) time(t int64) string {
	if t == 0 {
		return "-"
	}
	if o.Base == 0 && o.TimeLayout != "" {
		return time.Unix(0, t).UTC().Format(o.TimeLayout)
	}
	if o.Base != 0 {
		d := time.Duration(t - o.Base)
		if d >= 0 {
			return "+" + d.String()
		}
		return d.String()
	}
	return events.FormatTime(t)
}

// MatrixRow renders the evidence row of decision d.
func MatrixRow(d *events.Decision, o MatrixOptions) Row {
	j := &d.Job
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	var r Row
	r[0] = j.ID
	r[17] = d.Kind.String()
	r[18] = string(d.Reason)
	if j.Generation == 0 {
		for i := 1; i < 17; i++ {
			r[i] = "-"
		}
		return r
	}
	r[1] = j.LeaseID
	r[2] = strconv.FormatUint(j.Generation, 10)
	r[3] = j.Holder
	r[4] = o.time(j.IssuedAt)
	r[5] = time.Duration(j.Duration).String()
	r[6] = o.time(j.ExpiresAt)
	r[7] = o.time(j.AckDeadline)
	r[8] = j.AckState.String()
	if j.RenewSeq == 0 {
		r[9] = "0"
	} else {
		r[9] = strconv.FormatUint(j.RenewSeq, 10) + " @ " + o.time(j.RenewAt)
	}
	r[10] = strconv.FormatUint(j.ProgressSeq, 10) + " / " + strconv.FormatInt(j.ProgressValue, 10) + "%"
	switch {
	case !j.CancelReq:
		r[11] = "no"
	case j.CancelAck:
		r[11] = "requested " + o.time(j.CancelAt) + " / acked"
	default:
		r[11] = "requested " + o.time(j.CancelAt) + " / not acked"
	}
	r[12] = dash(j.Result.String())
	r[13] = strconv.FormatUint(uint64(j.Stale), 10)
	r[14] = strconv.FormatUint(uint64(j.LateProgress), 10)
	r[15] = yes(j.LeaseExpired)
	switch {
	case j.Conflict:
		r[16] = "yes: " + j.ConflictWith + " vs " + j.Holder
	case j.Conflicts > 0:
		r[16] = "resolved (" + strconv.FormatUint(uint64(j.Conflicts), 10) + " claims)"
	default:
		r[16] = "no"
	}
	return r
}

// LatestByJob keeps, for every job, its last decision, ordered by job id.
// Job-less decisions (policy, tick) are skipped.
func LatestByJob(ds []events.Decision) []events.Decision {
	last := make(map[string]int)
	var ids []string
	for i := range ds {
		id := ds[i].Job.ID
		if id == events.NoJob {
			continue
		}
		if _, ok := last[id]; !ok {
			ids = append(ids, id)
		}
		last[id] = i
	}
	slices.Sort(ids)
	out := make([]events.Decision, 0, len(ids))
	for _, id := range ids {
		out = append(out, ds[last[id]])
	}
	return out
}

// Format is an evidence-matrix output format.
type Format string

// Formats.
const (
	FormatTable Format = "table"
	FormatCSV   Format = "csv"
	FormatJSON  Format = "json" // JSON lines, one object per row
	// FormatBlocks is one block per row: the job id, then two fields a
	// line, each under its column name. With times of a short TimeLayout it
	// fits a terminal of 120 columns, where the table needs twice that.
	FormatBlocks Format = "blocks"
)

// WriteMatrix writes the rows of ds in format f.
func WriteMatrix(w io.Writer, f Format, ds []events.Decision, o MatrixOptions) error {
	switch f {
	case FormatTable, "":
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(MatrixColumns, "\t"))
		for i := range ds {
			r := MatrixRow(&ds[i], o)
			fmt.Fprintln(tw, strings.Join(r[:], "\t"))
		}
		return tw.Flush()
	case FormatBlocks:
		// The widest column name ("Progress Sequence/Value") and two
		// spaces, and the widest value of a short time layout ("requested
		// 15:04:05.000 / not acked"): 2+25+34+2+25 columns, and the right
		// value (at most a reason, 27) within 120.
		const label, value = 25, 34
		for i := range ds {
			r := MatrixRow(&ds[i], o)
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "%s  %s\n", MatrixColumns[0], r[0])
			for k := 1; k < len(r); k += 2 {
				line := fmt.Sprintf("  %-*s%-*s", label, MatrixColumns[k], value, r[k])
				if k+1 < len(r) {
					line += fmt.Sprintf("  %-*s%s", label, MatrixColumns[k+1], r[k+1])
				}
				if _, err := fmt.Fprintln(w, strings.TrimRight(line, " ")); err != nil {
					return err
				}
			}
		}
		return nil
	case FormatCSV:
		cw := csv.NewWriter(w)
		if err := cw.Write(MatrixColumns); err != nil {
			return err
		}
		for i := range ds {
			r := MatrixRow(&ds[i], o)
			if err := cw.Write(r[:]); err != nil {
				return err
			}
		}
		cw.Flush()
		return cw.Error()
	case FormatJSON:
		var b []byte
		for i := range ds {
			r := MatrixRow(&ds[i], o)
			b = append(b[:0], '{')
			for k, key := range jsonKeys {
				if k > 0 {
					b = append(b, ',')
				}
				kb, _ := json.Marshal(key)
				vb, _ := json.Marshal(r[k])
				b = append(append(append(b, kb...), ':'), vb...)
			}
			b = append(b, '}', '\n')
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("projector: unknown matrix format %q", f)
}
