package auth_test

import (
	"context"
	"slices"
	"testing"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/ops"
)

// A schedule (rules revision 10) is standing authority to submit in its
// setter's name, outliving the credential that set it: an operator may
// set one, a dispatcher may not publish the input at all (its server
// refuses the subject), whatever its job token and partition.
func TestSchedulesOperatorsOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, auth.Options{Actors: append(slices.Clone(actors), auth.Actor{Name: "op", Role: auth.RoleOperator})})
	ctx := context.Background()
	oc := connect(t, e.b, e.url, "op")
	o, err := ops.New(oc.nc, "op")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	if d, err := o.SetSchedule(ctx, "nightly", ops.Schedule{Cron: "@daily", Queue: "q"}); err != nil || d.Kind != events.KindScheduleSet {
		t.Fatalf("the operator's schedule: %+v, %v", d, err)
	}
	dc := connect(t, e.b, e.url, "disp")
	body := []byte(`{"v":1,"schedule":"mine","cron":"@daily","queue":"q"}`)
	for _, subject := range []string{"tenure.in.ops.disp._.schedule", "tenure.in.ops.disp.x.schedule", "tenure.in.ops.disp._.schedule.p0"} {
		if err := dc.nc.Publish(subject, body); err != nil {
			t.Fatal(err)
		}
		if err := dc.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		dc.errs.expectViolation(t, "disp publishing a schedule", `Publish to "`+subject+`"`)
	}
	// And what a dispatcher does may still be done.
	d, err := ops.New(dc.nc, "disp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if v, err := d.Submit(ctx, "j1", "q"); err != nil || v.Kind != events.KindSubmitted {
		t.Fatalf("the dispatcher's submit: %+v, %v", v, err)
	}
	oc.noViolations(t, "op")
}
