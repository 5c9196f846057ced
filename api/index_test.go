package api

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// idSet against a sorted slice, on random additions and removals (enough
// to split chunks and empty them), with reads from random ids.
func TestIDSetAgainstASortedSlice(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var s idSet
	var ref []string
	id := func() string { return fmt.Sprintf("j%05d", r.IntN(5000)) }
	for step := range 40_000 {
		x := id()
		i, found := slices.BinarySearch(ref, x)
		if step < 25_000 && r.IntN(3) > 0 || step >= 25_000 && r.IntN(3) == 0 {
			if s.Add(x) == found {
				t.Fatalf("step %d: Add(%s) = %v, present %v", step, x, !found, found)
			}
			if !found {
				ref = slices.Insert(ref, i, x)
			}
		} else {
			if s.Remove(x) != found {
				t.Fatalf("step %d: Remove(%s) = %v, present %v", step, x, !found, found)
			}
			if found {
				ref = slices.Delete(ref, i, i+1)
			}
		}
		if s.Len() != len(ref) {
			t.Fatalf("step %d: Len %d, want %d", step, s.Len(), len(ref))
		}
		if step%1000 == 0 {
			checkSet(t, &s, ref, id())
			checkSet(t, &s, ref, "")
			for _, c := range s.chunks {
				if len(c) == 0 || len(c) > chunkMax {
					t.Fatalf("step %d: a chunk of %d ids", step, len(c))
				}
			}
		}
	}
	if len(s.chunks) < 4 {
		t.Fatalf("%d chunks: the test did not split any", len(s.chunks))
	}
	for _, x := range slices.Clone(ref) {
		s.Remove(x)
	}
	if s.Len() != 0 || len(s.chunks) != 0 {
		t.Fatalf("emptied: %d ids in %d chunks", s.Len(), len(s.chunks))
	}
	checkSet(t, &s, nil, "")
}

// checkSet reads s from after on and compares with ref.
func checkSet(t *testing.T, s *idSet, ref []string, after string) {
	t.Helper()
	var got []string
	for c := s.After(after); ; c.Next() {
		x, ok := c.Peek()
		if !ok {
			break
		}
		got = append(got, x)
	}
	i, found := slices.BinarySearch(ref, after)
	if found {
		i++
	}
	if want := ref[i:]; !slices.Equal(got, want) {
		t.Fatalf("after %q: %d ids, want %d (first %v, want %v)", after, len(got), len(want), got[:min(3, len(got))], want[:min(3, len(want))])
	}
	for _, x := range ref[:min(len(ref), 50)] {
		if !s.Has(x) {
			t.Fatalf("Has(%s) false", x)
		}
	}
}

// The merge of disjoint sets reads their union in order.
func TestMerged(t *testing.T) {
	sets := make([]*idSet, 4)
	var all []string
	for i := range 1000 {
		x := fmt.Sprintf("k%04d", i)
		all = append(all, x)
		k := (i * 7) % 5
		if k == 4 {
			continue // not in any set
		}
		if sets[k] == nil {
			sets[k] = &idSet{}
		}
		sets[k].Add(x)
	}
	var want []string
	for i, x := range all {
		if (i*7)%5 != 4 && x > "k0500" {
			want = append(want, x)
		}
	}
	var got []string
	for m := mergeAfter(append(sets, nil), "k0500"); ; {
		x, ok := m.Next()
		if !ok {
			break
		}
		got = append(got, x)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("merged: %d ids, want %d", len(got), len(want))
	}
}
