package projector

import (
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/maknow/tenure/events"
)

// Describe renders a decision on one line for humans and golden files:
//
//	#7.0 renewed ok worker/w1 renew -> j1 g2 L5 w1 ACTIVE ack=ACKED exp=+21s renew=3@+11s
//
// Times are offsets from base when base is non-zero, else RFC 3339. Only
// fields that are set are shown, in a fixed order.
func Describe(d *events.Decision, base int64) string {
	o := MatrixOptions{Base: base}
	var b strings.Builder
	b.WriteByte('#')
	b.WriteString(strconv.FormatUint(d.Cause, 10))
	b.WriteByte('.')
	b.WriteString(strconv.Itoa(int(d.N)))
	b.WriteByte(' ')
	b.WriteString(d.Kind.String())
	b.WriteByte(' ')
	b.WriteString(string(d.Reason))
	if d.Detail != "" {
		b.WriteString(" (" + d.Detail + ")")
	}
	b.WriteString(" " + d.Role.String() + "/" + d.Actor + " " + d.Verb.String())
	if d.Addressee != d.Actor {
		b.WriteString(" to=" + d.Addressee)
	}
	if d.Policy != nil {
		b.WriteString(" -> policy ")
		b.Write(events.AppendPolicy(nil, d.Policy))
		return b.String()
	}
	if d.Revision != 0 {
		b.WriteString(" -> rules revision=" + strconv.FormatUint(uint64(d.Revision), 10))
		return b.String()
	}
	if c := d.Capacity; c != nil {
		b.WriteString(" -> capacity " + c.Queue + " slots=" + strconv.FormatUint(c.Slots, 10))
		if c.Until != 0 {
			b.WriteString(" until=" + o.time(c.Until))
		}
		describeStanding(&b, d.Standing, o)
		return b.String()
	}
	if l := d.Limit; l != nil { // revision 9
		b.WriteString(" -> limit " + l.Queue)
		if l.ConcurrencyKey != "" {
			b.WriteString(" key=" + l.ConcurrencyKey)
		}
		if l.HasMaxActive {
			b.WriteString(" max_active=" + strconv.FormatUint(l.MaxActive, 10))
		}
		if l.Rate != 0 {
			b.WriteString(" rate=" + strconv.FormatUint(l.Rate, 10) + "/" + time.Duration(l.PeriodMS*1e6).String())
		}
		if !l.HasMaxActive && l.Rate == 0 {
			b.WriteString(" lifted")
		}
		return b.String()
	}
	if sc := d.Schedule; sc != nil && d.Kind != events.KindFired { // revision 10
		b.WriteString(" -> schedule " + sc.ID)
		describeSchedule(&b, sc, o)
		return b.String()
	}
	if c := d.Checkpoint; c != nil {
		b.WriteString(" -> checkpoint input=" + strconv.FormatUint(c.InputSeq, 10) + " state_hash=" + hex.EncodeToString(c.StateHash[:]))
		return b.String()
	}
	b.WriteString(" -> ")
	b.WriteString(DescribeJob(&d.Job, o))
	describeStanding(&b, d.Standing, o)
	if d.DuplicateOf != "" {
		b.WriteString(" duplicate_of=" + d.DuplicateOf)
	}
	if sc := d.Schedule; sc != nil { // a fire (revision 10)
		b.WriteString(" schedule=" + sc.ID)
		describeSchedule(&b, sc, o)
	}
	return b.String()
}

// describeSchedule appends a decision's schedule object but its id.
func describeSchedule(b *strings.Builder, sc *events.Schedule, o MatrixOptions) {
	if sc.Cron != "" {
		b.WriteString(" cron=" + strconv.Quote(sc.Cron))
		if sc.TZ != "" {
			b.WriteString(" tz=" + strconv.Quote(sc.TZ))
		}
		if sc.Zone != "" {
			b.WriteString(" zone=" + sc.Zone)
		}
		b.WriteString(" q=" + sc.Queue + " by=" + sc.Actor)
		if sc.Missed != events.MissedSkip {
			b.WriteString(" missed=" + sc.Missed.String())
		}
		if sc.Paused {
			b.WriteString(" paused")
		}
		if sc.Anchor != 0 {
			b.WriteString(" anchor=" + o.time(sc.Anchor))
		}
		if t := events.AppendScheduleTemplate(nil, sc.Template); len(t) > 2 {
			b.WriteString(" template=")
			b.Write(t)
		}
	}
	if sc.Next != 0 {
		b.WriteString(" next=" + o.time(sc.Next))
	}
	if sc.Due != 0 {
		b.WriteString(" due=" + o.time(sc.Due))
	}
	if sc.MissedCount != 0 {
		b.WriteString(" missed " + strconv.FormatUint(sc.MissedCount, 10) + ": " + o.time(sc.MissedFrom) + ".." + o.time(sc.MissedTo))
	}
}

// describeStanding appends a decision's standing (revision 5), if any.
func describeStanding(b *strings.Builder, s *events.Standing, o MatrixOptions) {
	if s == nil {
		return
	}
	b.WriteString(" standing(" + s.Queue + " window=" + strconv.FormatUint(s.Window, 10) + " strikes=" + strconv.FormatUint(s.Strikes, 10))
	if s.HeldUntil != 0 {
		b.WriteString(" held=" + o.time(s.HeldUntil))
	}
	b.WriteByte(')')
}

// DescribeJob renders a projection compactly; see Describe.
func DescribeJob(j *events.Job, o MatrixOptions) string {
	var b strings.Builder
	b.WriteString(j.ID)
	w := func(s ...string) {
		b.WriteByte(' ')
		for _, x := range s {
			b.WriteString(x)
		}
	}
	if j.Queue != "" {
		w("q=", j.Queue, "/", j.Submitter)
		if j.Priority != 0 {
			w("pri=", strconv.FormatInt(j.Priority, 10))
		}
		if j.Turn != 0 {
			w("turn=", strconv.FormatUint(j.Turn, 10))
		}
		w("attempt=", strconv.FormatUint(j.Attempt, 10), "/", strconv.FormatUint(j.MaxAttempts, 10))
		if j.RunAt != 0 {
			w("run_at=", o.time(j.RunAt))
		}
		if j.Delay != 0 {
			w("delay=", time.Duration(j.Delay).String())
		}
		if j.UniqueKey != "" {
			w("unique=", j.UniqueKey)
			if j.UniqueFor != 0 {
				w("for=", time.Duration(j.UniqueFor).String())
			}
		}
		if j.ConcurrencyKey != "" {
			w("conc=", j.ConcurrencyKey)
		}
		if j.State == events.StateQueued {
			w("ready=", o.time(j.ReadyAt))
		}
		if j.LastReason != "" {
			w("last=", string(j.LastReason))
		}
		if j.HasPayload {
			w("payload=", strconv.Quote(j.Payload))
		}
		if j.Withheld {
			w("payload=withheld")
		}
		if j.Generation == 0 {
			w(j.State.String())
			if j.Result != events.OutcomeNone {
				w("result=", j.Result.String())
			}
			return b.String()
		}
	}
	if j.Generation == 0 {
		b.WriteString(" NONE")
		return b.String()
	}
	w("g", strconv.FormatUint(j.Generation, 10))
	if j.Withheld {
		w("lease=withheld")
	} else {
		w(j.LeaseID)
	}
	w(j.Holder)
	w(j.State.String())
	w("ack=", j.AckState.String())
	w("dur=", time.Duration(j.Duration).String())
	if j.AckDeadline != 0 && j.AckState == events.AckPending {
		w("ack_by=", o.time(j.AckDeadline))
	}
	if j.ExpiresAt != 0 {
		w("exp=", o.time(j.ExpiresAt))
	}
	if j.RenewSeq != 0 {
		w("renew=", strconv.FormatUint(j.RenewSeq, 10), "@", o.time(j.RenewAt))
	}
	if j.ProgressSeq != 0 {
		w("progress=", strconv.FormatUint(j.ProgressSeq, 10), "/", strconv.FormatInt(j.ProgressValue, 10), "%")
	}
	if j.CancelReq {
		s := "cancel=requested"
		if j.CancelAck {
			s += ",acked"
		}
		if j.CancelBy != 0 {
			s += ",by=" + o.time(j.CancelBy)
		}
		w(s)
	}
	if j.Result != events.OutcomeNone {
		w("result=", j.Result.String())
	}
	if j.EndedAt != 0 {
		w("ended=", o.time(j.EndedAt))
	}
	if j.LeaseExpired {
		w("expired")
	}
	if j.Conflict {
		w("CONFLICT(", j.ConflictWith, ")")
	}
	if j.Stale+j.Late+j.Duplicates+j.Conflicts != 0 {
		w("stale=", strconv.Itoa(int(j.Stale)), " late=", strconv.Itoa(int(j.Late)), " late_progress=", strconv.Itoa(int(j.LateProgress)),
			" dup=", strconv.Itoa(int(j.Duplicates)), " conflicts=", strconv.Itoa(int(j.Conflicts)))
	}
	return b.String()
}
