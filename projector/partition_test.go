package projector_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
)

// jobsIn returns n job ids of partition idx among count, and n of others.
func jobsIn(idx, count uint32, n int) (own, other []string) {
	for i := 0; len(own) < n || len(other) < n; i++ {
		id := fmt.Sprintf("job-%d", i)
		if events.PartitionOf(id, count) == idx {
			own = append(own, id)
		} else {
			other = append(other, id)
		}
	}
	return own[:n], other[:n]
}

func TestPartitionedFold(t *testing.T) {
	part := events.Partition{Index: 1, Count: 4}
	own, other := jobsIn(1, 4, 2)
	p := projector.NewPartition(part)
	seq := uint64(0)
	step := func(subject, body string) []events.Decision {
		t.Helper()
		seq++
		ds, err := p.Step(events.Raw{Seq: seq, Time: int64(seq) * 1e6, Subject: subject, Body: []byte(body)})
		if err != nil {
			t.Fatalf("step %d: %v", seq, err)
		}
		return append([]events.Decision(nil), ds...)
	}
	one := func(ds []events.Decision, kind events.Kind, reason events.Reason, job string) events.Decision {
		t.Helper()
		if len(ds) != 1 || ds[0].Kind != kind || ds[0].Reason != reason || ds[0].Job.ID != job {
			t.Fatalf("got %+v, want one %s/%s about %s", ds, kind, reason, job)
		}
		return ds[0]
	}
	in := func(actor, job string, verb events.Verb) string {
		return part.InputSubject(events.RoleWorker, actor, job, verb)
	}

	// Job-less inputs belong to every partition.
	d := one(step(part.InputSubject(events.RoleCoord, "c1", events.NoJob, events.VerbPolicy), string(events.AppendInputBody(nil, &events.Input{Verb: events.VerbPolicy, Policy: events.DefaultPolicy()}))), events.KindPolicySet, events.ReasonOk, events.NoJob)
	if got := part.DecisionSubject(&d); got != "tenure.out.c1._.policy_set.1" {
		t.Errorf("decision subject %q", got)
	}
	// A job of this partition: granted.
	g := one(step(in("w1", own[0], events.VerbAcquire), `{"v":1,"lease_ms":60000}`), events.KindGranted, events.ReasonOk, own[0])
	// A job of another partition: rejected, addressed to its worker, nothing tracked.
	r := one(step(in("w1", other[0], events.VerbAcquire), `{"v":1,"lease_ms":60000}`), events.KindRejected, events.ReasonWrongPartition, other[0])
	if r.Addressee != "w1" || r.Detail == "" {
		t.Errorf("wrong_partition rejection: addressee %q detail %q", r.Addressee, r.Detail)
	}
	if _, ok := p.Job(other[0]); ok || p.Len() != 1 {
		t.Errorf("the other partition's job is tracked (%d jobs)", p.Len())
	}
	// Another partition's token, or none: bad_subject, identity kept when readable.
	wrongTok := events.Partition{Index: 2, Count: 4}.InputSubject(events.RoleWorker, "w1", own[1], events.VerbAcquire)
	r = one(step(wrongTok, `{"v":1}`), events.KindRejected, events.ReasonBadSubject, own[1])
	if r.Addressee != "w1" {
		t.Errorf("bad partition token: addressee %q", r.Addressee)
	}
	one(step(events.InputSubject(events.RoleWorker, "w1", own[1], events.VerbAcquire), `{"v":1}`), events.KindRejected, events.ReasonBadSubject, events.NoJob)
	if _, ok := p.Job(own[1]); ok {
		t.Errorf("an input with a wrong partition token created a job")
	}
	// A batch renew: each element judged on its own, another partition's
	// job rejected in its place.
	batch := fmt.Sprintf(`{"v":1,"leases":[{"job":%q,"lease_id":%q,"generation":1,"renew_seq":1},{"job":%q,"lease_id":"L9","generation":1,"renew_seq":1}]}`, own[0], g.Job.LeaseID, other[1])
	ds := step(in("w1", events.NoJob, events.VerbRenew), batch)
	if len(ds) != 2 || ds[0].Kind != events.KindRenewed || ds[0].Job.ID != own[0] ||
		ds[1].Kind != events.KindRejected || ds[1].Reason != events.ReasonWrongPartition || ds[1].Job.ID != other[1] || ds[1].Addressee != "w1" {
		t.Fatalf("batch renew verdicts: %+v", ds)
	}
	if ds[1].N != 1 || ds[1].Of != 2 {
		t.Errorf("batch element index %d/%d", ds[1].N, ds[1].Of)
	}

	// A snapshot restores into the same partition, not into another.
	snap := p.Snapshot()
	q := projector.NewPartition(part)
	if err := q.Restore(snap); err != nil || q.StateHash() != p.StateHash() {
		t.Fatalf("restore into the same partition: %v", err)
	}
	if err := projector.NewPartition(events.Partition{Index: 0, Count: 4}).Restore(snap); !errors.Is(err, projector.ErrBadSnapshot) {
		t.Errorf("restore into another partition: %v, want ErrBadSnapshot", err)
	}
	if err := projector.New().Restore(snap); err != nil {
		t.Errorf("restore into an unpartitioned projector (an auditor's view of one partition): %v", err)
	}
}

func TestNewPartitionRejectsInvalid(t *testing.T) {
	for _, part := range []events.Partition{{Index: 4, Count: 4}, {Index: 1, Count: 0}, {Index: 0, Count: events.MaxPartitions + 1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewPartition(%+v) did not panic", part)
				}
			}()
			projector.NewPartition(part)
		}()
	}
}
