package deadletter

import (
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
)

type bigKey struct {
	A, B, C int
	S       string
}

// The walk in the order of map keys sorts each map once: a cyclic map,
// met again at every depth down to MaxDepth, was sorted 10 000 times, and
// refusing it took seconds (a second review's finding). Measured in
// allocations, which a sort makes many of: the sorted walk costs about
// what the plain walk does.
func TestSortedWalkOfACycleSortsEachMapOnce(t *testing.T) {
	m := map[bigKey]any{}
	for i := range 10 {
		m[bigKey{i, i, i, "k"}] = i
	}
	m[bigKey{-1, 0, 0, ""}] = m
	var plainErr, sortedErr error
	plain := testing.AllocsPerRun(1, func() { plainErr = walk(m, true, false) })
	sorted := testing.AllocsPerRun(1, func() { sortedErr = walk(m, true, true) })
	assert.ErrorIs(t, plainErr, ErrTooDeep)
	assert.ErrorIs(t, sortedErr, ErrTooDeep)
	assert.Less(t, sorted, 2*plain+1000, "allocations: sorted walk %v, plain walk %v", sorted, plain)
}
