package events

import (
	"strconv"
	"strings"
)

// MaxPartitions is the largest partition count of a deployment.
const MaxPartitions = 1024

// Partition names one partition of a partitioned deployment: Index in
// [0, Count). The zero value (Count 0) is the unpartitioned deployment, whose
// subjects are the six-token inputs and five-token decisions of PROTOCOL.md.
//
// A partitioned deployment appends the partition index as one more subject
// token to both: an input of partition k is stored as
// tenure.in.<role>.<actor>.<job>.<verb>.<k> and its decisions are published
// as tenure.out.<addressee>.<job>.<kind>.<k>. A job belongs to partition
// PartitionOf(job, Count), the FNV-32a hash of the job token modulo Count:
// the same function as NATS subject mapping's partition(), so that the
// server mapping
//
//	tenure.in.*.*.*.* -> tenure.in.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{wildcard(4)}}.{{partition(Count,3)}}
//
// routes a partition-unaware client's input to the right partition, while
// clients that know Count compute the subject themselves. Filters that end
// in ">" (a worker's tenure.out.<id>.>) match both forms.
type Partition struct {
	Index uint32
	Count uint32 // 0: unpartitioned
}

// Partitioned reports whether p belongs to a partitioned deployment.
func (p Partition) Partitioned() bool { return p.Count > 0 }

// Valid reports whether p is the unpartitioned zero value or an index below
// a count of at most MaxPartitions.
func (p Partition) Valid() bool {
	return p.Count == 0 && p.Index == 0 || p.Count <= MaxPartitions && p.Index < p.Count
}

// Token is the subject token of the partition ("" when unpartitioned).
func (p Partition) Token() string {
	if p.Count == 0 {
		return ""
	}
	return strconv.FormatUint(uint64(p.Index), 10)
}

func (p Partition) String() string {
	if p.Count == 0 {
		return "unpartitioned"
	}
	return "partition " + p.Token() + " of " + strconv.FormatUint(uint64(p.Count), 10)
}

// PartitionOf is the partition of job among count partitions: FNV-32a of
// the job token modulo count (NATS subject mapping's partition()). It
// returns 0 when count is 0.
func PartitionOf(job string, count uint32) uint32 {
	if count == 0 {
		return 0
	}
	h := uint32(2166136261) // FNV-32a offset basis
	for i := 0; i < len(job); i++ {
		h ^= uint32(job[i])
		h *= 16777619 // FNV-32 prime
	}
	return h % count
}

// Of is the partition of job in p's deployment.
func (p Partition) Of(job string) Partition {
	return Partition{Index: PartitionOf(job, p.Count), Count: p.Count}
}

// Owns reports whether job belongs to p. Every job belongs to the
// unpartitioned deployment; NoJob belongs to every partition.
func (p Partition) Owns(job string) bool {
	return p.Count == 0 || job == NoJob || PartitionOf(job, p.Count) == p.Index
}

func (p Partition) suffix(s string) string {
	if p.Count == 0 {
		return s
	}
	return s + "." + p.Token()
}

// InputSubject is InputSubject with p's partition token appended.
func (p Partition) InputSubject(role Role, actor, job string, verb Verb) string {
	return p.suffix(InputSubject(role, actor, job, verb))
}

// DecisionSubject is DecisionSubject with p's partition token appended
// (built in one allocation: the coordinator calls it for every decision).
func (p Partition) DecisionSubject(d *Decision) string {
	if p.Count == 0 {
		return DecisionSubject(d)
	}
	return DecisionPrefix + "." + d.Addressee + "." + d.Job.ID + "." + d.Kind.String() + "." + p.Token()
}

// InputFilter is the subjects of p's input stream: InputFilter when
// unpartitioned, tenure.in.*.*.*.*.<k> otherwise.
func (p Partition) InputFilter() string {
	if p.Count == 0 {
		return InputFilter
	}
	return InputPrefix + ".*.*.*.*." + p.Token()
}

// DecisionFilter is the subjects of p's decision stream: DecisionFilter when
// unpartitioned, tenure.out.*.*.*.<k> otherwise.
func (p Partition) DecisionFilter() string {
	if p.Count == 0 {
		return DecisionFilter
	}
	return DecisionPrefix + ".*.*.*." + p.Token()
}

// JobDecisionFilter is JobDecisionFilter with p's partition token appended:
// every decision about job in p's decision stream.
func (p Partition) JobDecisionFilter(job string) string {
	return p.suffix(JobDecisionFilter(job))
}

// InputMapping is the NATS subject mapping (source, destination) that routes
// a six-token input subject to its partition in a deployment of count
// partitions.
func InputMapping(count uint32) (src, dst string) {
	return InputPrefix + ".*.*.*.*",
		InputPrefix + ".{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{wildcard(4)}}.{{partition(" +
			strconv.FormatUint(uint64(count), 10) + ",3)}}"
}

// StripInput removes p's partition token from a stored input subject and
// returns the six-token subject PROTOCOL.md describes. ok is false when the
// subject does not end in p's token (it then belongs to no input of p).
// Unpartitioned, it returns the subject unchanged.
func (p Partition) StripInput(subject string) (string, bool) {
	if p.Count == 0 {
		return subject, true
	}
	i := strings.LastIndexByte(subject, '.')
	if i < 0 || subject[i+1:] != p.Token() {
		return subject, false
	}
	return subject[:i], true
}
