package deadletter_test

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// A map that holds itself under keys alike (NaNs) is described and
// refused without end: ordering its entries by their values rendered the
// map again, and again, until the stack overflowed and killed the
// process (a third review's finding).
func TestMapHoldingItselfUnderKeysAlikeIsDescribed(t *testing.T) {
	m := map[any]any{}
	m[math.NaN()] = m
	m[math.NaN()] = m
	text := deadletter.Describe(m)
	assert.Contains(t, text, "<cycle>")
	f, err := deadletter.OpenFile(filepath.Join(t.TempDir(), "dlq.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	env := sampleEnvelope(1)
	env.Item = m
	env.ItemType = ""
	require.NoError(t, f.Write(context.Background(), env))
	_, err = deadletter.EncodeItem(m, nil)
	require.ErrorIs(t, err, deadletter.ErrTooDeep)
}

// nanChain nests k maps, each holding the next under two NaN keys.
func nanChain(k int) any {
	var m any = 1
	for range k {
		m = map[float64]any{math.NaN(): m, math.NaN(): m}
	}
	return m
}

// Ordering the entries of nested maps alike costs in proportion to what
// Describe shows, not more: each level here doubles what there is to show
// (two entries hold the next map), 16 times from 4 levels to 8, and the
// ordering allocated 256 times (a third review's finding); past the 8
// levels Describe shows, more levels cost nothing.
func TestDescribeOfNestedMapsAlikeIsBounded(t *testing.T) {
	allocs := func(k int) float64 {
		item := nanChain(k)
		return testing.AllocsPerRun(1, func() { _ = deadletter.Describe(item) })
	}
	four, eight, forty := allocs(4), allocs(8), allocs(40)
	assert.Less(t, eight, 32*four, "allocations: 4 levels %v, 8 levels %v", four, eight)
	assert.Less(t, forty, 2*eight, "allocations: 8 levels %v, 40 levels %v (Describe shows 8)", eight, forty)
}

type urlStatus struct {
	URL    string
	Status int
}

// Struct keys whose text is long (a URL of 300 bytes) are ordered by all
// of it: a cap of 256 bytes on the ordering text made them tie, and each
// Describe of one map gave another text (a fourth review's finding).
func TestLongStructKeysAreDescribedOneWay(t *testing.T) {
	long := "https://example.com/search?q=" + strings.Repeat("x", 300)
	m := map[urlStatus]int{{long, 200}: 1, {long, 404}: 1, {long, 500}: 1}
	texts := map[string]bool{}
	for range 100 {
		texts[deadletter.Describe(m)] = true
	}
	assert.Len(t, texts, 1)
}
