package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/maknow/tenure/events"
)

const sSchedule = "tenure.in.ops.admin._.schedule"

// TestRevision10Gating: the schedule verb is an unknown verb (bad_subject)
// before revision 10; from it on a set, pause, resume and delete decode,
// each refusal typed and named by its field, and what AppendInputBody
// writes decodes to the same input.
func TestRevision10Gating(t *testing.T) {
	const set = `{"v":1,"schedule":"nightly","cron":"0 3 * * *","tz":"CET-1CEST,M3.5.0,M10.5.0/3","zone":"Europe/Berlin","queue":"reports","payload":"x"}`
	for rev := uint32(events.Revision4); rev <= events.Revision10; rev++ {
		var in events.Input
		err := events.DecodeInputAt(sSchedule, []byte(set), rev, &in)
		var de *events.DecodeError
		switch {
		case rev < events.Revision10:
			if !errors.As(err, &de) || de.Code != events.ReasonBadSubject {
				t.Errorf("schedule under revision %d: %v, want bad_subject", rev, err)
			}
		case err != nil || in.Schedule != "nightly" || in.ScheduleOp != events.ScheduleSet || in.Cron != "0 3 * * *" ||
			in.TZ != "CET-1CEST,M3.5.0,M10.5.0/3" || in.Zone != "Europe/Berlin" || in.Queue != "reports" || in.Payload != "x" || !in.HasPayload:
			t.Errorf("schedule under revision %d: %v %+v", rev, err, in)
		}
	}
	for _, c := range []struct {
		name, subject, body string
		code                events.Reason
		field               string
	}{
		{"set_minimal", sSchedule, `{"v":1,"schedule":"s","cron":"@hourly","queue":"q"}`, "", ""},
		{"set_every", sSchedule, `{"v":1,"schedule":"s","cron":"@every 90s","queue":"q","missed":"once","priority":3,"max_attempts":5,"concurrency_key":"k","unique_key":"u"}`, "", ""},
		{"set_explicit", sSchedule, `{"v":1,"schedule":"s","op":"set","cron":"*/5 * * * MON-FRI","tz":"UTC0","queue":"q"}`, "", ""},
		{"pause", sSchedule, `{"v":1,"schedule":"s","op":"pause"}`, "", ""},
		{"resume", sSchedule, `{"v":1,"op":"resume","schedule":"s"}`, "", ""},
		{"delete", sSchedule, `{"v":1,"schedule":"s","op":"delete"}`, "", ""},
		{"no_schedule", sSchedule, `{"v":1,"cron":"@hourly","queue":"q"}`, events.ReasonMissingField, "schedule"},
		{"no_cron", sSchedule, `{"v":1,"schedule":"s","queue":"q"}`, events.ReasonMissingField, "cron"},
		{"no_queue", sSchedule, `{"v":1,"schedule":"s","cron":"@hourly"}`, events.ReasonMissingField, "queue"},
		{"bad_cron", sSchedule, `{"v":1,"schedule":"s","cron":"61 * * * *","queue":"q"}`, events.ReasonBadValue, "cron"},
		{"never_due", sSchedule, `{"v":1,"schedule":"s","cron":"0 0 30 2 *","queue":"q"}`, events.ReasonBadValue, "cron"},
		{"six_fields", sSchedule, `{"v":1,"schedule":"s","cron":"0 0 0 * * *","queue":"q"}`, events.ReasonBadValue, "cron"},
		{"cron_too_long", sSchedule, `{"v":1,"schedule":"s","cron":"` + strings.Repeat("1,", 200) + `1 * * * *","queue":"q"}`, events.ReasonTooLarge, "cron"},
		{"cron_number", sSchedule, `{"v":1,"schedule":"s","cron":5,"queue":"q"}`, events.ReasonWrongType, "cron"},
		{"bad_tz", sSchedule, `{"v":1,"schedule":"s","cron":"@daily","tz":"Europe/Berlin","queue":"q"}`, events.ReasonBadValue, "tz"},
		{"tz_without_rule", sSchedule, `{"v":1,"schedule":"s","cron":"@daily","tz":"EST5EDT","queue":"q"}`, events.ReasonBadValue, "tz"},
		{"tz_too_long", sSchedule, `{"v":1,"schedule":"s","cron":"@daily","tz":"` + strings.Repeat("A", 129) + `","queue":"q"}`, events.ReasonTooLarge, "tz"},
		{"bad_zone", sSchedule, `{"v":1,"schedule":"s","cron":"@daily","zone":"../etc","queue":"q"}`, events.ReasonBadValue, "zone"},
		{"empty_zone", sSchedule, `{"v":1,"schedule":"s","cron":"@daily","zone":"","queue":"q"}`, events.ReasonBadValue, "zone"},
		{"bad_missed", sSchedule, `{"v":1,"schedule":"s","cron":"@daily","missed":"all","queue":"q"}`, events.ReasonBadEnum, "missed"},
		{"bad_op", sSchedule, `{"v":1,"schedule":"s","op":"stop"}`, events.ReasonBadEnum, "op"},
		{"pause_with_cron", sSchedule, `{"v":1,"schedule":"s","op":"pause","cron":"@daily"}`, events.ReasonUnknownField, "cron"},
		{"delete_with_queue", sSchedule, `{"v":1,"queue":"q","schedule":"s","op":"delete"}`, events.ReasonUnknownField, "queue"},
		{"bad_id", sSchedule, `{"v":1,"schedule":"a.b","op":"pause"}`, events.ReasonBadToken, "schedule"},
		{"rate_on_schedule", sSchedule, `{"v":1,"schedule":"s","cron":"@daily","queue":"q","rate":1}`, events.ReasonUnknownField, "rate"},
		{"schedule_with_job", "tenure.in.ops.admin.j1.schedule", `{"v":1,"schedule":"s","op":"pause"}`, events.ReasonBadSubject, "job"},
		{"schedule_by_worker", "tenure.in.worker.w1._.schedule", `{"v":1,"schedule":"s","op":"pause"}`, events.ReasonWrongRole, ""},
		{"cron_on_submit", "tenure.in.ops.disp-1.j1.submit", `{"v":1,"queue":"q","cron":"@daily"}`, events.ReasonUnknownField, "cron"},
	} {
		var in events.Input
		err := events.DecodeInputAt(c.subject, []byte(c.body), events.Revision10, &in)
		var de *events.DecodeError
		switch {
		case c.code == "":
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
				continue
			}
			// What AppendInputBody writes decodes to the same input.
			var again events.Input
			body := events.AppendInputBody(nil, &in)
			if err := events.DecodeInputAt(c.subject, body, events.Revision10, &again); err != nil {
				t.Errorf("%s: %s: %v", c.name, body, err)
			} else if string(events.AppendInputBody(nil, &again)) != string(body) {
				t.Errorf("%s: %s decodes to %s", c.name, body, events.AppendInputBody(nil, &again))
			}
		case !errors.As(err, &de) || de.Code != c.code || de.Field != c.field:
			t.Errorf("%s: %v, want %s on %q", c.name, err, c.code, c.field)
		}
	}
}
