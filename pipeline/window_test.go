package pipeline_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
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

func sum(a, v int) int { return a + v }
func zero() int        { return 0 }

// Count windows per key: every 4 items of a key make a window; at the end
// of input each key's last window is handed on, Partial. Each tracked item
// is Delivered once, with its window.
func TestAggregateCountWindowsByKey(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			for range 10 {
				b := pipeline.New("agg", m.opts...)
				src := pipelinetest.NewTrackedSource(ints(30)...)
				wins := pipeline.Aggregate(b, "sum", pipeline.Source[int](b, "src", src), func(v int) int { return v % 3 },
					pipeline.CountWindow(4), zero, sum)
				col := &pipelinetest.Collector[pipeline.Window[int, int]]{}
				pipeline.Sink(b, "store", wins, col)
				res, err := build(t, b).Run(t.Context())
				require.NoError(t, err)
				got := map[int][]pipeline.Window[int, int]{}
				for _, w := range col.Items() {
					got[w.Key] = append(got[w.Key], w)
				}
				for k := range 3 {
					ws := got[k]
					require.Len(t, ws, 3, "key %d: 10 items in windows of 4", k)
					// Key k's items are k, k+3, ...; in order.
					assert.Equal(t, 4*k+18, ws[0].Value)
					assert.Equal(t, 4*k+66, ws[1].Value)
					assert.Equal(t, 2*k+51, ws[2].Value)
					assert.Equal(t, []int{4, 4, 2}, []int{ws[0].Count, ws[1].Count, ws[2].Count})
					assert.Equal(t, []bool{false, false, true}, []bool{ws[0].Partial, ws[1].Partial, ws[2].Partial})
				}
				for i, o := range once(t, src, 30) {
					assert.Equal(t, node.Delivered, o, "item %d", i)
				}
				assert.Equal(t, int64(9), nodeOf(t, res, "sum").Out)
			}
		})
	}
}

// feed is a source whose items the test hands in, so that the test moves
// the clock only once the aggregate has taken them.
type feed struct{ items chan int }

func (f *feed) Run(ctx context.Context, out node.Emitter[int]) error {
	for {
		select {
		case v, ok := <-f.items:
			if !ok {
				return nil
			}
			if err := out.Emit(ctx, v); err != nil {
				return err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// Tumbling and sliding time windows on the pipeline's clock: a window is
// handed on once its end has passed, without waiting for more input;
// an item falls in every sliding window that spans its arrival.
func TestAggregateTimeWindows(t *testing.T) {
	t.Parallel()
	for name, spec := range map[string]pipeline.WindowSpec{
		"tumbling": pipeline.TimeWindow(time.Second),
		"sliding":  pipeline.SlidingWindow(2*time.Second, time.Second),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for range 10 {
				start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
				clock := clockwork.NewFakeClockAt(start)
				f := &feed{items: make(chan int)}
				b := pipeline.New("agg", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1))
				var p *pipeline.Pipeline
				wins := pipeline.Aggregate(b, "sum", pipeline.Source[int](b, "src", f), func(int) string { return "all" }, spec, zero, sum)
				var mu sync.Mutex
				var got []pipeline.Window[string, int]
				pipeline.ForEach(b, "store", wins, func(_ context.Context, w pipeline.Window[string, int]) error {
					mu.Lock()
					got = append(got, w)
					mu.Unlock()
					return nil
				})
				p = build(t, b)
				run := pipelinetest.Start(t.Context(), p)
				taken := func(n int64) {
					for {
						if st, _ := p.Stats().Node("sum"); st.In >= n {
							return
						}
						runtime.Gosched()
					}
				}
				windows := func(n int) []pipeline.Window[string, int] {
					for {
						mu.Lock()
						if len(got) >= n {
							out := slices.Clone(got)
							mu.Unlock()
							return out
						}
						mu.Unlock()
						runtime.Gosched()
					}
				}
				f.items <- 1
				f.items <- 2
				taken(2)
				clock.Advance(time.Second) // [0s, 1s) ends
				w := windows(1)
				if name == "tumbling" {
					assert.Equal(t, pipeline.Window[string, int]{Key: "all", Start: start, End: start.Add(time.Second), Count: 2, Value: 3}, w[0])
				} else {
					assert.Equal(t, pipeline.Window[string, int]{Key: "all", Start: start.Add(-time.Second), End: start.Add(time.Second), Count: 2, Value: 3}, w[0])
				}
				f.items <- 10
				taken(3)
				close(f.items)
				_, err := run.Wait()
				require.NoError(t, err)
				w = windows(0)
				if name == "tumbling" {
					require.Len(t, w, 2)
					assert.Equal(t, pipeline.Window[string, int]{Key: "all", Start: start.Add(time.Second), End: start.Add(2 * time.Second), Count: 1, Value: 10, Partial: true}, w[1])
				} else {
					require.Len(t, w, 3)
					assert.Equal(t, pipeline.Window[string, int]{Key: "all", Start: start, End: start.Add(2 * time.Second), Count: 3, Value: 13, Partial: true}, w[1])
					assert.Equal(t, pipeline.Window[string, int]{Key: "all", Start: start.Add(time.Second), End: start.Add(3 * time.Second), Count: 1, Value: 10, Partial: true}, w[2])
				}
			}
		})
	}
}

// A node restart upstream replays only what the aggregate did not take:
// every item is counted once.
func TestAggregateRestartDoesNotDoubleCount(t *testing.T) {
	t.Parallel()
	for range 20 {
		b := pipeline.New("agg", pipeline.WithResilience(func(o *resilience.Options) {
			*o = resilience.Options{}
		}))
		once := &failAtOnce{at: 17}
		up := pipeline.Transform[int, int](b, "flaky", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(ints(100)...)), once,
			pipeline.NodeResilience(func(o *resilience.Options) {
				o.NodeRestart = resilience.NodeRestartOptions{MaxRestarts: 1, Backoff: resilience.NoBackoff(), MaxReplayWindow: 64}
			}))
		wins := pipeline.Aggregate(b, "sum", up, func(int) bool { return true }, pipeline.CountWindow(10), zero, sum)
		col := &pipelinetest.Collector[pipeline.Window[bool, int]]{}
		pipeline.Sink(b, "store", wins, col)
		res, err := build(t, b).Run(t.Context())
		require.NoError(t, err)
		assert.Equal(t, int64(1), nodeOf(t, res, "flaky").NodeRestarts)
		total, count := 0, 0
		for _, w := range col.Items() {
			total += w.Value
			count += w.Count
		}
		assert.Equal(t, 100, count, "each item counted once")
		assert.Equal(t, 4950, total)
	}
}

// failAtOnce fails the node at item at, once.
type failAtOnce struct {
	mu     sync.Mutex
	at     int
	failed bool
}

func (f *failAtOnce) Process(_ context.Context, v int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v == f.at && !f.failed {
		f.failed = true
		return 0, errors.New("boom")
	}
	return v, nil
}

func TestAggregateBadInput(t *testing.T) {
	t.Parallel()
	b := pipeline.New("bad")
	src := pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1))
	pipeline.Aggregate(b, "a", src, func(int) int { return 0 }, pipeline.CountWindow(-1), zero, sum)
	pipeline.Aggregate(b, "b", src, func(int) int { return 0 }, pipeline.SlidingWindow(time.Second, time.Minute), zero, sum)
	pipeline.Aggregate[int, int, int](b, "c", src, nil, pipeline.TimeWindow(time.Second), nil, nil)
	_, err := b.Build()
	for _, want := range []string{`"a": CountWindow(-1)`, `"b": SlidingWindow(1s, 1m0s): the step must not be longer`, `"c": Aggregate: key, init and add must not be nil`} {
		assert.ErrorContains(t, err, want)
	}
}

// Build names the constructor of a bad WindowSpec and what is wrong with
// it: CountWindow(0) and TimeWindow(0) were reported as a "window size 0s
// and step 0s" the user never wrote. A SlidingWindow whose items would
// each fall in more than 10 000 windows is refused: with a step of 1 ns,
// one item's windows, a billion, hung the node past any cancellation
// (a review's findings).
func TestAggregateBadWindowSpecs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		spec pipeline.WindowSpec
		want string // "" for a spec Build takes
	}{
		{pipeline.CountWindow(0), `node "agg": CountWindow(0): must be at least 1`},
		{pipeline.CountWindow(1), ""},
		{pipeline.TimeWindow(0), `node "agg": TimeWindow(0s): the size must be positive`},
		{pipeline.TimeWindow(-time.Second), `node "agg": TimeWindow(-1s): the size must be positive`},
		{pipeline.TimeWindow(time.Nanosecond), ""},
		{pipeline.SlidingWindow(0, time.Second), `node "agg": SlidingWindow(0s, 1s): the size must be positive`},
		{pipeline.SlidingWindow(time.Second, 0), `node "agg": SlidingWindow(1s, 0s): the step must be positive`},
		{pipeline.SlidingWindow(time.Second, -time.Second), `node "agg": SlidingWindow(1s, -1s): the step must be positive`},
		{pipeline.SlidingWindow(time.Second, time.Nanosecond), `node "agg": SlidingWindow(1s, 1ns): an item would fall in up to 1000000000 windows, more than 10000`},
		{pipeline.SlidingWindow(10_001*time.Millisecond, time.Millisecond), `an item would fall in up to 10001 windows`},
		// An item on a step's start falls in 10 001 windows (second review).
		{pipeline.SlidingWindow(10_000*time.Millisecond+time.Nanosecond, time.Millisecond), `an item would fall in up to 10001 windows`},
		{pipeline.SlidingWindow(10_000*time.Millisecond, time.Millisecond), ""},
		{pipeline.SessionWindow(0), `node "agg": SessionWindow(0s): the gap must be positive`},
		{pipeline.WindowSpec{}, `node "agg": the zero WindowSpec: make one with CountWindow, TimeWindow, SlidingWindow or SessionWindow`},
	} {
		b := pipeline.New("bad-spec")
		src := pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1))
		out := pipeline.Aggregate(b, "agg", src, func(int) int { return 0 }, c.spec, zero, sum)
		pipeline.Sink(b, "sink", out, &pipelinetest.Collector[pipeline.Window[int, int]]{})
		_, err := b.Build()
		if c.want == "" {
			assert.NoError(t, err, "%+v", c.spec)
			continue
		}
		assert.ErrorContains(t, err, c.want)
	}
}

// A panic in add fails the node for good, naming it, even with node
// restart armed: the item it was placing would be lost by a restart. Every
// tracked item still ends once.
func TestAggregatePanicFailsTheRun(t *testing.T) {
	t.Parallel()
	b := pipeline.New("agg", pipeline.WithResilience(func(o *resilience.Options) {
		*o = resilience.Options{}
		o.NodeRestart = resilience.NodeRestartOptions{MaxRestarts: 3, Backoff: resilience.NoBackoff(), MaxReplayWindow: 64}
	}))
	src := pipelinetest.NewTrackedSource(ints(20)...)
	wins := pipeline.Aggregate(b, "sum", pipeline.Source[int](b, "src", src), func(int) int { return 0 }, pipeline.CountWindow(5), zero,
		func(a, v int) int {
			if v == 7 {
				panic("bad add")
			}
			return a + v
		})
	pipeline.Sink(b, "store", wins, &pipelinetest.Collector[pipeline.Window[int, int]]{})
	res, err := build(t, b).Run(t.Context())
	var ne *pipeline.NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, "sum", ne.Node)
	assert.ErrorContains(t, err, "bad add")
	assert.Zero(t, nodeOf(t, res, "sum").NodeRestarts, "not restarted")
	for i, os := range src.Outcomes() {
		assert.Len(t, os, 1, "item %d ends once", i)
	}
}
