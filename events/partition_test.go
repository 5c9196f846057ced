package events

import (
	"hash/fnv"
	"strconv"
	"testing"
)

func TestPartitionOfIsFNV32a(t *testing.T) {
	for i := 0; i < 2000; i++ {
		job := "job-" + strconv.Itoa(i*7919)
		h := fnv.New32a()
		h.Write([]byte(job))
		for _, n := range []uint32{1, 2, 3, 4, 7, 16, 1024} {
			if got, want := PartitionOf(job, n), h.Sum32()%n; got != want {
				t.Fatalf("PartitionOf(%q, %d) = %d, want %d", job, n, got, want)
			}
		}
	}
	if PartitionOf("x", 0) != 0 {
		t.Error("PartitionOf with count 0")
	}
}

func TestPartitionSubjects(t *testing.T) {
	p := Partition{Index: 3, Count: 4}
	if got := p.InputSubject(RoleWorker, "w1", "j", VerbRenew); got != "tenure.in.worker.w1.j.renew.3" {
		t.Errorf("InputSubject %q", got)
	}
	if p.InputFilter() != "tenure.in.*.*.*.*.3" || p.DecisionFilter() != "tenure.out.*.*.*.3" {
		t.Errorf("filters %q %q", p.InputFilter(), p.DecisionFilter())
	}
	if got := p.JobDecisionFilter("j"); got != "tenure.out.*.j.*.3" {
		t.Errorf("JobDecisionFilter %q", got)
	}
	if got := (Partition{}).JobDecisionFilter("j"); got != JobDecisionFilter("j") {
		t.Errorf("unpartitioned JobDecisionFilter %q", got)
	}
	if s, ok := p.StripInput("tenure.in.worker.w1.j.renew.3"); !ok || s != "tenure.in.worker.w1.j.renew" {
		t.Errorf("StripInput: %q %v", s, ok)
	}
	for _, bad := range []string{"tenure.in.worker.w1.j.renew.2", "tenure.in.worker.w1.j.renew", "x", "tenure.in.worker.w1.j.renew.03"} {
		if _, ok := p.StripInput(bad); ok {
			t.Errorf("StripInput(%q) accepted", bad)
		}
	}
	var zero Partition
	if zero.InputSubject(RoleWorker, "w1", "j", VerbRenew) != InputSubject(RoleWorker, "w1", "j", VerbRenew) ||
		zero.InputFilter() != InputFilter || zero.DecisionFilter() != DecisionFilter || !zero.Owns("anything") {
		t.Error("the zero Partition is not the unpartitioned deployment")
	}
	if !p.Owns(NoJob) {
		t.Error("NoJob belongs to every partition")
	}
	src, dst := InputMapping(4)
	if src != "tenure.in.*.*.*.*" || dst != "tenure.in.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{wildcard(4)}}.{{partition(4,3)}}" {
		t.Errorf("InputMapping: %q -> %q", src, dst)
	}
	for _, v := range []Partition{{}, {0, 1}, {3, 4}, {1023, 1024}} {
		if !v.Valid() {
			t.Errorf("%+v not valid", v)
		}
	}
	for _, v := range []Partition{{1, 0}, {4, 4}, {0, 1025}} {
		if v.Valid() {
			t.Errorf("%+v valid", v)
		}
	}
}
