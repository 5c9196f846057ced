package api

import (
	"slices"
	"sort"
	"strings"
)

// chunkMax bounds the ids of one chunk of an idSet: an insertion or a
// removal moves at most this many.
const chunkMax = 512

// idSet is a set of ids (job ids, queue names) in byte order, kept as
// sorted chunks of at most chunkMax ids: adding or removing an id costs a
// binary search and a move within one chunk, and reading in order from
// any id costs a binary search, so that a page of a listing never sorts
// or scans the whole set. The zero value is an empty set.
type idSet struct {
	chunks [][]string
	n      int
}

// Len is the number of ids in the set.
func (s *idSet) Len() int { return s.n }

// locate returns the chunk that holds id or would hold it (the first
// whose last id is not below it; the last chunk when id is beyond all),
// and id's position in it.
func (s *idSet) locate(id string) (ci, i int, found bool) {
	ci = sort.Search(len(s.chunks), func(k int) bool {
		c := s.chunks[k]
		return c[len(c)-1] >= id
	})
	if ci == len(s.chunks) {
		if ci == 0 {
			return 0, 0, false
		}
		ci--
		return ci, len(s.chunks[ci]), false
	}
	i, found = slices.BinarySearch(s.chunks[ci], id)
	return ci, i, found
}

// Add inserts id; it reports whether id was new.
func (s *idSet) Add(id string) bool {
	if len(s.chunks) == 0 {
		s.chunks = [][]string{{id}}
		s.n = 1
		return true
	}
	ci, i, found := s.locate(id)
	if found {
		return false
	}
	c := slices.Insert(s.chunks[ci], i, id)
	if len(c) > chunkMax {
		half := len(c) / 2
		right := slices.Clone(c[half:])
		c = slices.Clip(c[:half])
		s.chunks = slices.Insert(s.chunks, ci+1, right)
	}
	s.chunks[ci] = c
	s.n++
	return true
}

// Remove deletes id; it reports whether it was there.
func (s *idSet) Remove(id string) bool {
	if len(s.chunks) == 0 {
		return false
	}
	ci, i, found := s.locate(id)
	if !found {
		return false
	}
	c := slices.Delete(s.chunks[ci], i, i+1)
	if len(c) == 0 {
		s.chunks = slices.Delete(s.chunks, ci, ci+1)
	} else {
		s.chunks[ci] = c
	}
	s.n--
	return true
}

// Has reports whether id is in the set.
func (s *idSet) Has(id string) bool {
	if len(s.chunks) == 0 {
		return false
	}
	_, _, found := s.locate(id)
	return found
}

// After returns a cursor at the first id of the set above after ("" is
// the first id of all).
func (s *idSet) After(after string) cursor {
	if len(s.chunks) == 0 {
		return cursor{s: s}
	}
	ci, i, found := s.locate(after)
	if found {
		i++
	}
	c := cursor{s: s, ci: ci, i: i}
	c.settle()
	return c
}

// cursor reads an idSet in order. The set must not change while it is
// read.
type cursor struct {
	s     *idSet
	ci, i int
}

// settle moves the cursor past the end of a chunk to the next one.
func (c *cursor) settle() {
	for c.ci < len(c.s.chunks) && c.i >= len(c.s.chunks[c.ci]) {
		c.ci++
		c.i = 0
	}
}

// Peek returns the id at the cursor, false at the end.
func (c *cursor) Peek() (string, bool) {
	if c.s == nil || c.ci >= len(c.s.chunks) {
		return "", false
	}
	return c.s.chunks[c.ci][c.i], true
}

// Next moves the cursor to the next id.
func (c *cursor) Next() {
	c.i++
	c.settle()
}

// merged reads several disjoint idSets as one, in order: the k-way merge
// of their cursors (k is small: one set per state).
type merged []cursor

// mergeAfter returns the merge of sets from the first id above after.
func mergeAfter(sets []*idSet, after string) merged {
	m := make(merged, 0, len(sets))
	for _, s := range sets {
		if s != nil && s.Len() > 0 {
			m = append(m, s.After(after))
		}
	}
	return m
}

// Next returns the least id of all the cursors and moves past it, false
// when every cursor is at its end.
func (m merged) Next() (string, bool) {
	best, bestK := "", -1
	for k := range m {
		if id, ok := m[k].Peek(); ok && (bestK < 0 || strings.Compare(id, best) < 0) {
			best, bestK = id, k
		}
	}
	if bestK < 0 {
		return "", false
	}
	m[bestK].Next()
	return best, true
}
