package pipeline

import (
	"context"
	"math"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
)

type nanKey struct {
	name string
	f    float64
}

// A key not equal to itself is fetched each time, and leaves nothing in
// the cache's maps: each Get of a NaN left an entry in flights and one in
// entries that no delete could find again, so the bounded cache grew
// without bound while Len said Size (a review's finding).
func TestLookupKeyNotEqualToItselfIsFetchedEachTime(t *testing.T) {
	t.Parallel()
	calls := 0
	l := NewLookup(func(_ context.Context, k nanKey) (int, error) { calls++; return len(k.name), nil }, LookupOptions{Size: 4})
	for i := range 1000 {
		v, err := l.Get(t.Context(), nanKey{"abc", math.NaN()})
		assert.NoError(t, err)
		assert.Equal(t, 3, v, "get %d", i)
	}
	v, err := l.Get(t.Context(), nanKey{"ab", 1})
	assert.NoError(t, err)
	assert.Equal(t, 2, v)
	_, _ = l.Get(t.Context(), nanKey{"ab", 1})
	l.mu.Lock()
	flights, entries := len(l.flights), len(l.entries)
	l.mu.Unlock()
	assert.Zero(t, flights, "fetches left under way")
	assert.Equal(t, 1, entries, "only the key equal to itself is cached")
	assert.Equal(t, 1001, calls, "each NaN get fetches; the other key once")
	st := l.Stats()
	assert.Equal(t, int64(1001), int64(st.Fetches))
	assert.Equal(t, int64(1), int64(st.Hits))
}

// A key of an interface type whose value cannot be compared still fails
// the Get with a panic, not a fetch, as before.
func TestLookupUncomparableKeyStillPanics(t *testing.T) {
	t.Parallel()
	l := NewLookup(func(context.Context, any) (int, error) { return 1, nil }, LookupOptions{})
	defer func() {
		assert.NotNil(t, recover(), "an uncomparable key panics")
		_, err := l.Get(t.Context(), math.NaN())
		assert.NoError(t, err, "the Lookup is not left locked")
	}()
	_, _ = l.Get(t.Context(), []int{1})
}
