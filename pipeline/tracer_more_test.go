package pipeline_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// Attempt.Number counts an item's calls across node restarts: an item
// that fails its node and is replayed after a restart is number 2; a
// panicking call's span ends with the panic's error. Under Parallel, a
// restart for another item can replay an item whose last call succeeded
// but was not handed on yet: that call repeats the number before it (the
// count is of failed calls, as the repeat cap's is), so numbers start at
// 1, never fall, and never pass the calls made.
func TestTracerNumberAcrossNodeRestart(t *testing.T) {
	t.Parallel()
	opts := map[string][]pipeline.NodeOption{
		"single":   nil,
		"parallel": {pipeline.Parallel(2)},
		"keyed":    {pipeline.Keyed(2, func(v int) int { return v % 2 })},
	}
	for name, o := range opts {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tracer := &recordingTracer{}
			var mu sync.Mutex
			calls := map[int]int{}
			b := pipeline.New("restart", pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 0
				o.OnItemFailure = resilience.Fail
				o.NodeRestart = resilience.NodeRestartOptions{MaxRestarts: 3, MaxReplayWindow: 100}
			}))
			src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(8)...),
				pipeline.SourceKey(func(v int) string { return "k" + strconv.Itoa(v) }))
			out := pipeline.Map(b, "work", src, func(_ context.Context, v int) (int, error) {
				mu.Lock()
				calls[v]++
				c := calls[v]
				mu.Unlock()
				if v == 3 && c == 1 {
					return 0, errors.New("first call of 3 fails")
				}
				if v == 5 && c == 1 {
					panic("first call of 5 panics")
				}
				return v, nil
			}, o...)
			got := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", out, got)
			res, err := build(t, b).Run(observer.WithTracer(t.Context(), tracer))
			require.NoError(t, err)
			assert.ElementsMatch(t, ints(8), got.Items())
			assert.Positive(t, nodeOf(t, res, "work").NodeRestarts)
			tracer.mu.Lock()
			defer tracer.mu.Unlock()
			byKey := map[string][]*span{}
			for _, s := range tracer.spans {
				assert.True(t, s.ended, "span %d (%s %s #%d) ended", s.id, s.Node, s.Key, s.Number)
				if s.Node == "work" {
					byKey[s.Key] = append(byKey[s.Key], s)
				}
			}
			for _, k := range []string{"k3", "k5"} {
				mu.Lock()
				n := calls[int(k[1]-'0')]
				mu.Unlock()
				var numbers []int
				for _, s := range byKey[k] {
					numbers = append(numbers, s.Number)
				}
				require.Len(t, numbers, n, "%s: one span per call", k)
				assert.Equal(t, 1, numbers[0], "%s: numbers %v", k, numbers)
				for i := 1; i < n; i++ {
					assert.GreaterOrEqual(t, numbers[i], numbers[i-1], "%s: numbers %v", k, numbers)
					assert.LessOrEqual(t, numbers[i], i+1, "%s: numbers %v", k, numbers)
				}
				if name != "parallel" {
					// One worker, or per-key workers: a replay follows a
					// failure, and every call has its own number.
					assert.Equal(t, n, numbers[n-1], "%s: numbers %v", k, numbers)
				}
			}
			if ss := byKey["k5"]; len(ss) > 0 {
				assert.ErrorContains(t, ss[0].err, "first call of 5 panics")
			}
		})
	}
}

// Nodes that only move items (Merge, Unbatch, a route's branches, a
// Join's tagging) make no spans: only calls of the user's functions do.
func TestTracerNoSpansForMovingNodes(t *testing.T) {
	t.Parallel()
	tracer := &recordingTracer{}
	b := pipeline.New("moving")
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(6)...))
	branches := pipeline.Route(b, "route", src, 2, func(v int) int { return v % 2 })
	merged := pipeline.Merge(b, "merge", branches[0], branches[1])
	flat := pipeline.Unbatch(b, "unbatch", pipeline.Batch(b, "batch", merged, 3, 0))
	pipeline.ForEach(b, "sink", flat, func(context.Context, int) error { return nil })
	_, err := build(t, b).Run(observer.WithTracer(t.Context(), tracer))
	require.NoError(t, err)
	perNode := map[string]int{}
	for _, s := range tracer.spans {
		perNode[s.Node]++
	}
	assert.Equal(t, map[string]int{"route": 6, "sink": 6}, perNode,
		"spans only for the user's functions (route's pick, sink write)")
}

// SourceTraceHeaders costs no allocation per item when the run has no
// tracer, nor for an item whose headers function returns none.
func TestTraceHeadersNoneCostsNothing(t *testing.T) {
	const n = 2000
	run := func(opts ...pipeline.NodeOption) float64 {
		b := pipeline.New("alloc")
		src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(n)...), opts...)
		pipeline.ForEach(b, "sink", src, func(context.Context, int) error { return nil })
		p := build(t, b)
		return testing.AllocsPerRun(5, func() {
			if _, err := p.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
	plain := run()
	none := run(pipeline.SourceTraceHeaders(func(int) map[string]string { return nil }))
	t.Logf("allocs per run: plain %.0f, SourceTraceHeaders returning nil %.0f", plain, none)
	assert.Less(t, none-plain, float64(n)/10, "items without headers allocate per item")
}

var _ = time.Second
