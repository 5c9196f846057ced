package ui

import (
	"cmp"
	"strings"
)

// compareIDs orders job ids (and holders) naturally: runs of digits compare
// by their value, so batch-2 comes before batch-10; everything else
// compares byte by byte. Ids equal by value but spelled differently
// (batch-01, batch-1) fall back to byte order, so the order is total and
// two ids compare equal only when they are the same id.
//
// It is a total order because it is lexicographic over tokens (a number,
// or one byte that is not a digit) and then over the bytes: a number and a
// non-digit byte compare as a digit and that byte do, whatever the digits,
// since the digits are contiguous in ASCII.
func compareIDs(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if isDigit(a[i]) && isDigit(b[j]) {
			si, sj := i, j
			for i < len(a) && isDigit(a[i]) {
				i++
			}
			for j < len(b) && isDigit(b[j]) {
				j++
			}
			na, nb := strings.TrimLeft(a[si:i], "0"), strings.TrimLeft(b[sj:j], "0")
			if c := cmp.Or(cmp.Compare(len(na), len(nb)), strings.Compare(na, nb)); c != 0 {
				return c
			}
			continue
		}
		if a[i] != b[j] {
			return cmp.Compare(a[i], b[j])
		}
		i, j = i+1, j+1
	}
	return cmp.Or(cmp.Compare(len(a)-i, len(b)-j), strings.Compare(a, b))
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
