package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// The cache serves a key while it is fresh, fetches it again after its
// TTL on the given clock, and keeps at most Size keys, the least recently
// used going first. Errors are not cached.
func TestLookupCachesWithTTLAndBound(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	var calls sync.Map
	fail := true
	lk := pipeline.NewLookup(func(_ context.Context, k string) (string, error) {
		n, _ := calls.LoadOrStore(k, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		if k == "bad" && fail {
			return "", errors.New("down")
		}
		return "v-" + k, nil
	}, pipeline.LookupOptions{Size: 2, TTL: time.Minute, Clock: clock})
	ctx := t.Context()
	count := func(k string) int64 {
		n, _ := calls.LoadOrStore(k, new(atomic.Int64))
		return n.(*atomic.Int64).Load()
	}
	for range 3 {
		v, err := lk.Get(ctx, "a")
		require.NoError(t, err)
		assert.Equal(t, "v-a", v)
	}
	assert.Equal(t, int64(1), count("a"), "served from the cache")
	clock.Advance(time.Minute)
	_, _ = lk.Get(ctx, "a")
	assert.Equal(t, int64(2), count("a"), "fetched again after its TTL")

	_, _ = lk.Get(ctx, "b")
	_, _ = lk.Get(ctx, "a") // a is the most recently used
	_, _ = lk.Get(ctx, "c") // b goes
	assert.Equal(t, 2, lk.Len())
	_, _ = lk.Get(ctx, "a")
	assert.Equal(t, int64(2), count("a"), "a stayed")
	_, _ = lk.Get(ctx, "b")
	assert.Equal(t, int64(2), count("b"), "b was evicted")

	_, err := lk.Get(ctx, "bad")
	require.EqualError(t, err, "down")
	fail = false
	v, err := lk.Get(ctx, "bad")
	require.NoError(t, err, "the error was not cached")
	assert.Equal(t, "v-bad", v)
	st := lk.Stats()
	assert.Equal(t, int64(4), st.Hits)
	assert.Equal(t, int64(7), st.Fetches)
}

// Callers that ask for a key being fetched share that fetch; when the
// caller that fetches is cancelled, a waiter whose context is live fetches
// again. A fetch that panics releases its waiters with an error.
func TestLookupFetchesAKeyOnceAtATime(t *testing.T) {
	t.Parallel()
	for range 20 {
		entered, release := make(chan struct{}), make(chan struct{})
		var fetches atomic.Int64
		lk := pipeline.NewLookup(func(ctx context.Context, k int) (int, error) {
			if fetches.Add(1) == 1 {
				close(entered)
				select {
				case <-release:
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}
			return k * 10, nil
		}, pipeline.LookupOptions{Clock: clockwork.NewFakeClock()})
		leaderCtx, cancelLeader := context.WithCancel(t.Context())
		leader := make(chan error, 1)
		go func() {
			_, err := lk.Get(leaderCtx, 7)
			leader <- err
		}()
		<-entered
		var wg sync.WaitGroup
		results := make([]int, 8)
		for i := range results {
			wg.Go(func() {
				v, err := lk.Get(t.Context(), 7)
				assert.NoError(t, err)
				results[i] = v
			})
		}
		for lk.Stats().Shared < 8 {
			runtime.Gosched() // until every waiter waits on the fetch
		}
		cancelLeader()
		require.ErrorIs(t, <-leader, context.Canceled)
		wg.Wait()
		for _, v := range results {
			assert.Equal(t, 70, v)
		}
		assert.Equal(t, int64(2), fetches.Load(), "the cancelled fetch, then one for all the waiters")
		close(release)
	}

	boom := pipeline.NewLookup(func(context.Context, int) (int, error) { panic("bad client") }, pipeline.LookupOptions{})
	_, err := boom.Get(t.Context(), 1)
	var pe *resilience.PanicError
	require.ErrorAs(t, err, &pe)
}

// Enrich joins each item with its key's value, fetching each key once
// across eight workers; a transient fetch failure is the item's, and its
// retry is served from the cache once another fetch succeeded.
func TestEnrichFetchesEachKeyOnce(t *testing.T) {
	t.Parallel()
	for range 10 {
		clock := clockwork.NewFakeClock()
		var fetches, failed atomic.Int64
		lk := pipeline.NewLookup(func(_ context.Context, customer int) (string, error) {
			fetches.Add(1)
			if customer == 3 && failed.Add(1) == 1 {
				return "", resilience.MarkTransient(errors.New("503"))
			}
			return fmt.Sprintf("customer-%d", customer), nil
		}, pipeline.LookupOptions{Clock: clock})
		b := pipeline.New("enrich", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.Backoff = resilience.Constant(time.Second)
		}))
		orders := pipeline.Source[int](b, "orders", pipelinetest.NewSliceSource(ints(200)...))
		enriched := pipeline.Enrich(b, "customer", orders, func(o int) int { return o % 10 }, lk,
			func(o int, c string) string { return fmt.Sprintf("%d:%s", o, c) }, pipeline.Parallel(8))
		col := &pipelinetest.Collector[string]{}
		pipeline.Sink(b, "store", enriched, col)
		_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), time.Second)
		require.NoError(t, err)
		require.Equal(t, 200, col.Len())
		for i, s := range col.Items() {
			assert.Equal(t, fmt.Sprintf("%d:customer-%d", i, i%10), s)
		}
		assert.Equal(t, int64(11), fetches.Load(), "ten customers, one of them twice (its first fetch failed)")
	}
}

func TestLookupBadInput(t *testing.T) {
	t.Parallel()
	assert.Panics(t, func() { pipeline.NewLookup[int, int](nil, pipeline.LookupOptions{}) })
	assert.Panics(t, func() {
		pipeline.NewLookup(func(context.Context, int) (int, error) { return 0, nil }, pipeline.LookupOptions{TTL: -1})
	})
	b := pipeline.New("bad")
	pipeline.Enrich[int, int, int, int](b, "e", pipeline.Source[int](b, "s", pipelinetest.NewSliceSource(1)), nil, nil, nil)
	_, err := b.Build()
	assert.ErrorContains(t, err, `"e": Enrich: key, lookup and join must not be nil`)
}

// A key of an interface type whose value cannot be compared (a slice in
// an any) panics in Get, as a map's lookup does, and leaves the Lookup
// usable: the panic came while Get held the Lookup's lock, and every
// later Get, Stats and Len waited for it for good. In a pipeline the
// panic fails the run, naming the node, where the node's other workers
// hung in Get (a review's finding).
func TestLookupUncomparableKeyLeavesItUsable(t *testing.T) {
	t.Parallel()
	lk := pipeline.NewLookup(func(_ context.Context, k any) (string, error) { return fmt.Sprint(k), nil }, pipeline.LookupOptions{})
	assert.Panics(t, func() { _, _ = lk.Get(t.Context(), []int{1}) })
	v, err := lk.Get(t.Context(), "a")
	require.NoError(t, err)
	assert.Equal(t, "a", v)
	assert.Equal(t, 1, lk.Len())
	assert.Equal(t, int64(1), lk.Stats().Fetches)

	for range 20 {
		lk := pipeline.NewLookup(func(_ context.Context, k any) (string, error) { return fmt.Sprint(k), nil }, pipeline.LookupOptions{})
		b := pipeline.New("enrich-panic")
		orders := pipeline.Source[int](b, "orders", pipelinetest.NewSliceSource(ints(100)...))
		enriched := pipeline.Enrich(b, "customer", orders, func(o int) any {
			if o == 50 {
				return []int{o}
			}
			return o % 4
		}, lk, func(o int, c string) string { return c }, pipeline.Parallel(4))
		pipeline.Sink(b, "store", enriched, &pipelinetest.Collector[string]{})
		_, err := build(t, b).Run(t.Context())
		require.Error(t, err)
		assert.ErrorContains(t, err, `"customer"`)
		assert.ErrorContains(t, err, "hash of unhashable type []int")
	}
}
