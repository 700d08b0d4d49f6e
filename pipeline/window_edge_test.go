package pipeline_test

// Aggregate, Join and Lookup at their edges: tracked and untracked items
// in one window or pair, windows due together, cancellation, a fetch that
// times out.

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
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

func rvNoResilience(o *resilience.Options) { *o = resilience.Options{} }

// Lookup: waiters fetch again only when the caller whose fetch they wait
// for was cancelled, not when the fetch returns a context error of its own
// (an HTTP client timeout wraps context.DeadlineExceeded).
func TestLookupWaitersRefetchOnFetchTimeout(t *testing.T) {
	t.Parallel()
	var fetches atomic.Int64
	release := make(chan struct{})
	lk := pipeline.NewLookup(func(ctx context.Context, k int) (int, error) {
		fetches.Add(1)
		<-release
		return 0, fmt.Errorf("GET /customers/%d: %w", k, context.DeadlineExceeded)
	}, pipeline.LookupOptions{Clock: clockwork.NewFakeClock()})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = lk.Get(t.Context(), 1) })
	}
	for lk.Stats().Shared < int64(len(errs)-1) {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	for _, err := range errs {
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	}
	t.Logf("stats %+v", lk.Stats())
	assert.Equal(t, int64(1), fetches.Load(), "one fetch for one key at a time: no caller was cancelled")
}

// Cancelling a run while windows are open (sliding, tracked): every item
// ends exactly once, Failed.
func TestAggregateCancelWithOpenWindows(t *testing.T) {
	t.Parallel()
	for range 20 {
		clock := clockwork.NewFakeClock()
		src := &rvTrackedFeed{items: make(chan int), outcomes: map[int][]node.Outcome{}}
		b := pipeline.New("agg", pipeline.WithClock(clock))
		wins := pipeline.Aggregate(b, "sum", pipeline.Source[int](b, "src", src), func(v int) int { return v % 3 },
			pipeline.SlidingWindow(10*time.Second, 3*time.Second), zero, sum)
		pipeline.ForEach(b, "store", wins, func(context.Context, pipeline.Window[int, int]) error { return nil })
		p := build(t, b)
		ctx, cancel := context.WithCancel(t.Context())
		run := pipelinetest.Start(ctx, p)
		for i := range 30 {
			src.items <- i
			if i%5 == 4 {
				clock.Advance(4 * time.Second)
			}
		}
		cancel()
		_, err := run.Wait()
		require.ErrorIs(t, err, context.Canceled)
		got := src.get()
		require.Len(t, got, 30)
		for i, o := range got {
			require.Len(t, o, 1, "item %d", i)
		}
	}
}

// rvTrackedFeed is feed with EmitTracked.
type rvTrackedFeed struct {
	items    chan int
	mu       sync.Mutex
	outcomes map[int][]node.Outcome
}

func (f *rvTrackedFeed) Run(ctx context.Context, out node.Emitter[int]) error {
	for {
		select {
		case v, ok := <-f.items:
			if !ok {
				return nil
			}
			if err := out.EmitTracked(ctx, v, func(o node.Outcome) {
				f.mu.Lock()
				f.outcomes[v] = append(f.outcomes[v], o)
				f.mu.Unlock()
			}); err != nil {
				return err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func (f *rvTrackedFeed) get() map[int][]node.Outcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int][]node.Outcome{}
	for k, v := range f.outcomes {
		out[k] = append([]node.Outcome(nil), v...)
	}
	return out
}

// A failing sink (Fail action) while sliding windows are open: every
// tracked item ends exactly once.
func TestAggregateFailingSink(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		for range 10 {
			b := pipeline.New("agg", append(m.opts, pipeline.WithResilience(rvNoResilience))...)
			src := pipelinetest.NewTrackedSource(ints(200)...)
			wins := pipeline.Aggregate(b, "sum", pipeline.Source[int](b, "src", src), func(v int) int { return v % 7 },
				pipeline.CountWindow(3), zero, sum)
			var n atomic.Int64
			pipeline.ForEach(b, "store", wins, func(context.Context, pipeline.Window[int, int]) error {
				if n.Add(1) == 5 {
					return errors.New("disk full")
				}
				return nil
			})
			_, err := build(t, b).Run(t.Context())
			require.Error(t, err)
			outs := src.Outcomes()
			for i := range 200 {
				if len(outs[i]) > 1 {
					t.Fatalf("item %d: %v", i, outs[i])
				}
			}
		}
	}
}

// Join: one left item joins many tracked rights, a few pairs are skipped
// by the sink; every tracked item ends once, with the combined outcome.
func TestJoinManyPartners(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		for range 10 {
			b := pipeline.New("join", m.opts...)
			lefts := pipelinetest.NewTrackedSource(1, 2)
			rightsT := pipelinetest.NewTrackedSource(ints(50)...)
			out := pipeline.Join(b, "j", pipeline.Source[int](b, "l", lefts), pipeline.Source[int](b, "r2", rightsT),
				func(v int) int { return v }, func(v int) int { return v % 2 }, time.Hour,
				func(l, r int) [2]int { return [2]int{l, r} })
			pipeline.ForEach(b, "store", out, func(_ context.Context, p [2]int) error {
				if p[1] == 13 {
					return errors.New("bad")
				}
				return nil
			}, pipeline.NodeResilience(func(o *resilience.Options) {
				*o = resilience.Options{}
				o.OnItemFailure = resilience.Skip
			}))
			_, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			lo := once(t, lefts, 2)
			assert.Equal(t, node.Skipped.Combine(node.Delivered), lo[0], "1 joined 13")
			assert.Equal(t, node.Filtered, lo[1], "2 has no partner")
			ro := once(t, rightsT, 50)
			assert.Equal(t, node.Filtered, ro[0], "key 0 has no left")
			assert.Equal(t, node.Skipped, ro[13])
		}
	}
}

// Sliding windows whose step does not divide the size, items exactly at a
// boundary: each item falls in exactly the windows that span its arrival.
func TestSlidingNonDividingStep(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) // a multiple of 3 s? check below
	clock := clockwork.NewFakeClockAt(start)
	f := &feed{items: make(chan int)}
	b := pipeline.New("agg", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1))
	wins := pipeline.Aggregate(b, "sum", pipeline.Source[int](b, "src", f), func(int) int { return 0 },
		pipeline.SlidingWindow(10*time.Second, 3*time.Second), zero, sum)
	var mu sync.Mutex
	var got []pipeline.Window[int, int]
	pipeline.ForEach(b, "store", wins, func(_ context.Context, w pipeline.Window[int, int]) error {
		mu.Lock()
		got = append(got, w)
		mu.Unlock()
		return nil
	})
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)
	taken := func(n int64) {
		for {
			if st, _ := p.Stats().Node("sum"); st.In >= n {
				return
			}
			runtime.Gosched()
		}
	}
	// Move to a step boundary.
	clock.Advance(start.Sub(start.Truncate(3*time.Second)) % (3 * time.Second))
	base := clock.Now()
	for i := range 12 {
		f.items <- 1 << i
		taken(int64(i + 1))
		clock.Advance(time.Second)
	}
	close(f.items)
	_, err := run.Wait()
	require.NoError(t, err)
	// Each item's bit must appear in exactly the windows that span its
	// arrival, and each window's count matches its bits.
	for _, w := range got {
		bits := 0
		for i := range 12 {
			at := base.Add(time.Duration(i) * time.Second)
			if !at.Before(w.Start) && at.Before(w.End) {
				bits |= 1 << i
			}
		}
		assert.Equal(t, bits, w.Value, "window %s-%s", w.Start.Format("05"), w.End.Format("05"))
	}
}

// mixedSource emits its items tracked (even) and untracked (odd).
type mixedSource struct {
	n        int
	mu       sync.Mutex
	outcomes map[int][]node.Outcome
}

func (s *mixedSource) Run(ctx context.Context, out node.Emitter[int]) error {
	for i := range s.n {
		var err error
		if i%2 == 0 {
			err = out.EmitTracked(ctx, i, func(o node.Outcome) {
				s.mu.Lock()
				defer s.mu.Unlock()
				if s.outcomes == nil {
					s.outcomes = map[int][]node.Outcome{}
				}
				s.outcomes[i] = append(s.outcomes[i], o)
			})
		} else {
			err = out.Emit(ctx, i)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// A pair of a tracked and an untracked item: the tracked one ends with the
// pair's outcome, and the untracked one, which a group tracker holds as
// nil, is passed over (it crashed the process before).
func TestJoinTrackedWithUntracked(t *testing.T) {
	t.Parallel()
	b := pipeline.New("join")
	lefts := pipelinetest.NewTrackedSource(1, 2)
	rights := pipelinetest.NewSliceSource(1, 2) // untracked
	out := pipeline.Join(b, "j", pipeline.Source[int](b, "l", lefts), pipeline.Source[int](b, "r", rights),
		func(v int) int { return v }, func(v int) int { return v }, time.Hour, func(l, r int) int { return l + r })
	var writes atomic.Int64
	pipeline.ForEach(b, "store", out, func(context.Context, int) error { writes.Add(1); return nil })
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(2), writes.Load(), "each pair written once")
	assert.Equal(t, []node.Outcome{node.Delivered, node.Delivered}, once(t, lefts, 2))
}

// Same through Aggregate: a window holding tracked and untracked items.
func TestAggregateTrackedWithUntracked(t *testing.T) {
	t.Parallel()
	b := pipeline.New("agg")
	src := &mixedSource{n: 10}
	wins := pipeline.Aggregate(b, "sum", pipeline.Source[int](b, "src", src), func(int) int { return 0 },
		pipeline.CountWindow(5), zero, sum)
	var writes atomic.Int64
	pipeline.ForEach(b, "store", wins, func(context.Context, pipeline.Window[int, int]) error { writes.Add(1); return nil })
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(2), writes.Load(), "each window written once")
	src.mu.Lock()
	defer src.mu.Unlock()
	for i := 0; i < 10; i += 2 {
		assert.Equal(t, []node.Outcome{node.Delivered}, src.outcomes[i], "item %d", i)
	}
}

// The same for Batch: a batch of tracked and untracked items.
func TestBatchTrackedWithUntracked(t *testing.T) {
	t.Parallel()
	b := pipeline.New("batch")
	src := &mixedSource{n: 10}
	bs := pipeline.Batch(b, "b", pipeline.Source[int](b, "src", src), 5, 0)
	var writes atomic.Int64
	pipeline.ForEach(b, "store", bs, func(context.Context, []int) error { writes.Add(1); return nil })
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(2), writes.Load(), "each batch written once")
}

// Windows are handed on in the order they complete, also when several are
// due at one flush (a clock jump): by their ends, not the order they
// opened.
func TestWindowsOutOfCompletionOrder(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clock := clockwork.NewFakeClockAt(start)
	f := &feed{items: make(chan int)}
	b := pipeline.New("agg", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1))
	wins := pipeline.Aggregate(b, "sum", pipeline.Source[int](b, "src", f), func(v int) int { return v },
		pipeline.SlidingWindow(2*time.Second, time.Second), zero, sum)
	var mu sync.Mutex
	var got []pipeline.Window[int, int]
	pipeline.ForEach(b, "store", wins, func(_ context.Context, w pipeline.Window[int, int]) error {
		mu.Lock()
		got = append(got, w)
		mu.Unlock()
		return nil
	})
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)
	f.items <- 1 // A: [-1,1), [0,2)
	f.items <- 2 // B: [-1,1), [0,2)
	for st, _ := p.Stats().Node("sum"); st.In < 2; st, _ = p.Stats().Node("sum") {
		runtime.Gosched()
	}
	clock.Advance(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 4 {
			break
		}
		runtime.Gosched()
	}
	close(f.items)
	_, err := run.Wait()
	require.NoError(t, err)
	for i := 1; i < len(got); i++ {
		assert.False(t, got[i].End.Before(got[i-1].End), "window %d (key %d, end %s) after one that ends later (key %d, end %s)",
			i, got[i].Key, got[i].End.Format("05"), got[i-1].Key, got[i-1].End.Format("05"))
	}
}

// Join: a run cancelled while items wait and pairs are in flight: every
// tracked item ends exactly once.
func TestJoinCancel(t *testing.T) {
	t.Parallel()
	for range 20 {
		clock := clockwork.NewFakeClock()
		l := &rvTrackedFeed{items: make(chan int), outcomes: map[int][]node.Outcome{}}
		r := &rvTrackedFeed{items: make(chan int), outcomes: map[int][]node.Outcome{}}
		b := pipeline.New("join", pipeline.WithClock(clock))
		pipeline.ForEach(b, "store", pipeline.Join(b, "j", pipeline.Source[int](b, "l", l), pipeline.Source[int](b, "r", r),
			func(v int) int { return v % 5 }, func(v int) int { return v % 5 }, time.Minute, func(a, b int) int { return a + b }),
			func(ctx context.Context, _ int) error { return nil })
		ctx, cancel := context.WithCancel(t.Context())
		run := pipelinetest.Start(ctx, build(t, b))
		for i := range 20 {
			l.items <- i
			r.items <- 100 + i
			if i%7 == 6 {
				clock.Advance(40 * time.Second)
			}
		}
		cancel()
		_, err := run.Wait()
		require.Error(t, err)
		for _, f := range []*rvTrackedFeed{l, r} {
			got := f.get()
			require.Len(t, got, 20)
			for k, o := range got {
				require.Len(t, o, 1, "item %d", k)
			}
		}
	}
}

// Lookup: a waiter whose own ctx ends returns at once; the leader's fetch
// goes on and its value is cached; Size holds under concurrent eviction.
func TestLookupWaiterCancelAndEviction(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	lk := pipeline.NewLookup(func(ctx context.Context, k int) (int, error) {
		if k == 0 {
			close(entered)
			<-release
		}
		return k * 2, nil
	}, pipeline.LookupOptions{Size: 3, Clock: clockwork.NewFakeClock()})
	done := make(chan struct{})
	go func() {
		defer close(done)
		v, err := lk.Get(context.Background(), 0)
		assert.NoError(t, err)
		assert.Equal(t, 0, v)
	}()
	<-entered
	wctx, wcancel := context.WithCancelCause(t.Context())
	werr := make(chan error)
	go func() { _, err := lk.Get(wctx, 0); werr <- err }()
	for lk.Stats().Shared < 1 {
		runtime.Gosched()
	}
	wcancel(errors.New("caller gone"))
	assert.EqualError(t, <-werr, "caller gone")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				v, err := lk.Get(t.Context(), 1+(i+g)%7)
				assert.NoError(t, err)
				assert.Equal(t, 2*(1+(i+g)%7), v)
				assert.LessOrEqual(t, lk.Len(), 3)
			}
		})
	}
	wg.Wait()
	close(release)
	<-done
	st := lk.Stats()
	assert.Equal(t, int64(1602), st.Hits+st.Fetches+st.Shared, "every Get counted once: %+v", st)
}
