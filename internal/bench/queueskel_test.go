package bench

import (
	"strings"
	"testing"

	"github.com/maknow/tenure/events"
	"github.com/nats-io/nats.go"
)

// An input of the skeleton carries its job ids in a body of the template's
// bytes per job, with the template's headers but its own message id and
// its own stream expected.
func TestSkeletonInput(t *testing.T) {
	sh := inShape{perJob: 40, header: nats.Header{
		"Nats-Msg-Id":                 {"w1-ack-77"},
		"Nats-Expected-Stream":        {"TENURE_IN"},
		"Nats-Expected-Last-Sequence": {"9"},
		"Tenure-Other":                {"x"},
	}}
	jobs := []string{"3-0", "3-1", "3-2"}
	m := skelInput("w1", events.VerbAck, jobs, sh, 12)
	if m.Subject != "skel.in.w1.ack" {
		t.Errorf("subject %q", m.Subject)
	}
	if len(m.Data) != 3*40 {
		t.Errorf("body of %d bytes, want %d", len(m.Data), 3*40)
	}
	if got := skelJobs(m.Data); strings.Join(got, ",") != strings.Join(jobs, ",") {
		t.Errorf("jobs read back %q, want %q", got, jobs)
	}
	if m.Header.Get("Nats-Msg-Id") != "w1-12" || m.Header.Get("Nats-Expected-Stream") != skelInStream ||
		m.Header.Get("Nats-Expected-Last-Sequence") != "" || m.Header.Get("Tenure-Other") != "x" {
		t.Errorf("headers %v", m.Header)
	}
	// Job ids longer than the template's bytes: the body is the ids.
	long := skelInput("disp", events.VerbSubmit, jobs, inShape{perJob: 1}, 1)
	if string(long.Data) != "3-0,3-1,3-2" {
		t.Errorf("body %q", long.Data)
	}
}

// The relay answers each input as Tenure's rules would for an honest
// worker: submitted and assigned to the freest worker, acked, completed
// (which frees the slot for the next ready job).
func TestSkeletonRelayDecides(t *testing.T) {
	var got []string
	r := &skelRelay{workers: []string{"w0", "w1"}, free: []int{1, 1}}
	r.publish = func(m *nats.Msg) error { got = append(got, strings.TrimPrefix(m.Subject, skelOut)); return nil }
	r.shapes = &queueShapes{out: map[events.Kind]*nats.Msg{}}
	for _, k := range skelKinds {
		r.shapes.out[k] = &nats.Msg{Header: nats.Header{"Nats-Expected-Last-Sequence": {"5"}}, Data: []byte("{}")}
	}
	steps := []struct{ subject, body string }{
		{"skel.in.disp.submit", "1-0,1-1,1-2"},
		{"skel.in.w0.ack", "1-0"},
		{"skel.in.w0.result", "1-0"},
	}
	for _, s := range steps {
		if err := r.input(s.subject, []byte(s.body+"   ")); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"disp.1-0.submitted", "disp.1-1.submitted", "disp.1-2.submitted",
		"w0.1-0.assigned", "w1.1-1.assigned",
		"w0.1-0.acked",
		"w0.1-0.completed", "w0.1-2.assigned",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("decisions\n got %v\nwant %v", got, want)
	}
	if r.last != uint64(len(want)) {
		t.Errorf("%d decisions counted, want %d", r.last, len(want))
	}
	if err := r.input("skel.in.w0.renew", []byte("1-0")); err == nil {
		t.Error("an input of another verb was taken")
	}
	if err := r.input("skel.in.stranger.result", []byte("1-0")); err == nil {
		t.Error("a result of no worker was taken")
	}
}

// Grouped, the decisions of one input to one addressee of one kind leave
// as one message whose body names the jobs; the addressee reads them back.
func TestSkeletonRelayGroups(t *testing.T) {
	var got []*nats.Msg
	r := &skelRelay{workers: []string{"w0", "w1"}, free: []int{2, 1}, grouped: true}
	r.publish = func(m *nats.Msg) error { got = append(got, m); return nil }
	r.shapes = &queueShapes{out: map[events.Kind]*nats.Msg{}}
	for _, k := range skelKinds {
		r.shapes.out[k] = &nats.Msg{Data: []byte(strings.Repeat("x", 100))}
	}
	if err := r.input("skel.in.disp.submit", []byte("1-0,1-1,1-2,1-3")); err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, m := range got {
		d, ok := parseSkelDecision(m.Subject, m.Data)
		if !ok {
			t.Fatalf("unreadable %s", m.Subject)
		}
		subjects = append(subjects, strings.TrimPrefix(m.Subject, skelOut)+"="+strings.Join(d.jobs, ","))
	}
	// w0 has the most free slots, then both one (ties to the first), then
	// w1 alone; 1-3 waits.
	want := "disp._.submitted=1-0,1-1,1-2,1-3 w0._.assigned=1-0,1-1 w1._.assigned=1-2"
	if strings.Join(subjects, " ") != want {
		t.Errorf("messages\n got %v\nwant %v", subjects, want)
	}
	if len(got[0].Data) != 4*100 || r.last != 3 || len(r.groups) != 0 {
		t.Errorf("a group of 4 in %d bytes, %d messages counted, %d groups left", len(got[0].Data), r.last, len(r.groups))
	}
}
