package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

type spanKey struct{}

// A span is what recordingTracer saw of one attempt.
type span struct {
	observer.Attempt
	id    int
	ended bool
	err   error
}

// recordingTracer records every attempt and hands the call a context that
// names its span.
type recordingTracer struct {
	mu    sync.Mutex
	spans []*span
	panic string // "start" or "end": panic there
}

func (r *recordingTracer) StartAttempt(ctx context.Context, a observer.Attempt) (context.Context, func(error)) {
	if r.panic == "start" {
		panic("tracer down")
	}
	r.mu.Lock()
	s := &span{Attempt: a, id: len(r.spans) + 1}
	r.spans = append(r.spans, s)
	r.mu.Unlock()
	return context.WithValue(ctx, spanKey{}, s.id), func(err error) {
		if r.panic == "end" {
			panic("tracer down")
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		s.ended, s.err = true, err
	}
}

// With a tracer in Run's context, every call of a node's function is one
// span: its number counts the item's calls, its key is the item's, its
// end has the call's error, and the call runs in the span's context; the
// same on one worker, several, and per-key workers.
func TestTracerSpansEveryAttempt(t *testing.T) {
	t.Parallel()
	opts := map[string][]pipeline.NodeOption{
		"single":   nil,
		"parallel": {pipeline.Parallel(3)},
		"keyed":    {pipeline.Keyed(2, func(v int) int { return v % 5 })},
	}
	for name, o := range opts {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const n = 60
			tracer := &recordingTracer{}
			var mu sync.Mutex
			calls := map[int]int{}
			var outside []int
			b := pipeline.New("traced", pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 3
				o.ItemRetry.Backoff = resilience.NoBackoff()
			}))
			src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(n)...),
				pipeline.SourceKey(func(v int) string { return "k" + strconv.Itoa(v) }))
			out := pipeline.Map(b, "work", src, func(ctx context.Context, v int) (int, error) {
				mu.Lock()
				calls[v]++
				c := calls[v]
				if ctx.Value(spanKey{}) == nil {
					outside = append(outside, v)
				}
				mu.Unlock()
				if c <= v%3 { // item v fails its first v%3 calls
					return 0, resilience.MarkTransient(fmt.Errorf("call %d of %d", c, v))
				}
				return v, nil
			}, o...)
			got := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", out, got)
			res, err := build(t, b).Run(observer.WithTracer(t.Context(), tracer))
			require.NoError(t, err)
			assert.Len(t, got.Items(), n)
			assert.Empty(t, outside, "every call ran in its span's context")

			byKey := map[string][]*span{}
			for _, s := range tracer.spans {
				if s.Node == "work" {
					byKey[s.Key] = append(byKey[s.Key], s)
				}
				assert.Equal(t, "traced", s.Pipeline)
				assert.Equal(t, res.RunID, s.RunID)
				assert.True(t, s.ended, "span %d ended", s.id)
			}
			// The sink's writes are attempts too.
			sinkSpans := 0
			for _, s := range tracer.spans {
				if s.Node == "sink" {
					sinkSpans++
					assert.NoError(t, s.err)
				}
			}
			assert.Equal(t, n, sinkSpans)
			for v := range n {
				ss := byKey["k"+strconv.Itoa(v)]
				require.Len(t, ss, v%3+1, "item %d: one span per call", v)
				for i, s := range ss {
					assert.Equal(t, i+1, s.Number, "item %d", v)
					if i < v%3 {
						assert.ErrorContains(t, s.err, fmt.Sprintf("call %d of %d", i+1, v))
					} else {
						assert.NoError(t, s.err)
					}
				}
			}
		})
	}
}

// A tracer that panics fails the run, naming the tracer and the node; no
// item is taken for delivered because of it.
func TestTracerPanicFailsTheRun(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"start", "end"} {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			tracer := &recordingTracer{panic: where}
			b := pipeline.New("traced")
			src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(100)...))
			got := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", src, got)
			res, err := build(t, b).Run(observer.WithTracer(t.Context(), tracer))
			var ne *pipeline.NodeError
			require.True(t, errors.As(err, &ne), "err: %v", err)
			assert.Equal(t, "sink", ne.Node)
			assert.ErrorContains(t, err, "tracer panicked "+map[string]string{"start": "starting", "end": "ending"}[where]+" attempt 1")
			assert.ErrorContains(t, err, "tracer down")
			assert.Zero(t, nodeOf(t, res, "sink").Out, "no write counts once the tracer failed")
		})
	}
}

// retryTracer panics when it starts attempt 2, a retry.
type retryTracer struct{}

func (retryTracer) StartAttempt(ctx context.Context, a observer.Attempt) (context.Context, func(error)) {
	if a.Number == 2 {
		panic("tracer down")
	}
	return ctx, func(error) {}
}

// A retry whose attempt the tracer fails to start is not made, and not
// counted in the node's ItemRetries, with a breaker or without: it was
// counted as made (second review).
func TestTracerPanicAtARetryIsNoRetry(t *testing.T) {
	t.Parallel()
	for _, breaker := range []bool{false, true} {
		var n atomic.Int32
		f := node.TransformFunc[int, int](func(context.Context, int) (int, error) {
			n.Add(1)
			return 0, errFlaky
		})
		b := pipeline.New("tracer-retry", pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 1
			o.ItemRetry.Backoff = resilience.NoBackoff()
			o.NodeRetry.MaxRetries = 0
			o.OnItemFailure = resilience.Skip
			o.CircuitBreaker.Enabled = breaker
		}))
		out := pipeline.Transform(b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)), f)
		pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		res, err := build(t, b).Run(observer.WithTracer(t.Context(), retryTracer{}))
		assert.ErrorContains(t, err, "tracer panicked starting attempt 2")
		assert.Equal(t, int32(1), n.Load(), "breaker %v: the retry's call was not made", breaker)
		assert.Zero(t, nodeOf(t, res, "call").ItemRetries, "breaker %v", breaker)
	}
}

// SourceTraceHeaders: each attempt gets the headers its item arrived with;
// a batch's attempt gets those of each item that had some, in order; an
// item without any gets none; tracked and untracked items alike.
func TestTracerLinksTraceHeaders(t *testing.T) {
	t.Parallel()
	for _, tracked := range []bool{false, true} {
		tracer := &recordingTracer{}
		b := pipeline.New("links")
		var src node.Source[int] = pipelinetest.NewSliceSource(ints(6)...)
		if tracked {
			src = pipelinetest.NewTrackedSource(ints(6)...)
		}
		items := pipeline.Source(b, "src", src, pipeline.SourceTraceHeaders(func(v int) map[string]string {
			if v%3 == 2 {
				return nil
			}
			return map[string]string{"traceparent": "tp-" + strconv.Itoa(v)}
		}))
		one := pipeline.Map(b, "one", items, func(_ context.Context, v int) (int, error) { return v, nil })
		pipeline.ForEach(b, "batches", pipeline.Batch(b, "batch", one, 3, 0), func(context.Context, []int) error { return nil })
		_, err := build(t, b).Run(observer.WithTracer(t.Context(), tracer))
		require.NoError(t, err)
		var single [][]map[string]string
		var batched [][]map[string]string
		for _, s := range tracer.spans {
			switch s.Node {
			case "one":
				single = append(single, s.Links)
			case "batches":
				batched = append(batched, s.Links)
			}
		}
		tp := func(v int) map[string]string { return map[string]string{"traceparent": "tp-" + strconv.Itoa(v)} }
		assert.Equal(t, [][]map[string]string{{tp(0)}, {tp(1)}, nil, {tp(3)}, {tp(4)}, nil}, single, "tracked %v", tracked)
		assert.Equal(t, [][]map[string]string{{tp(0), tp(1)}, {tp(3), tp(4)}}, batched, "tracked %v", tracked)
	}
}

// SourceTraceHeaders is checked at Build, naming the node, and a panic in it
// fails the source, naming the function.
func TestSourceTraceHeadersErrors(t *testing.T) {
	t.Parallel()
	b := pipeline.New("bad")
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(1), pipeline.SourceTraceHeaders[int](nil))
	pipeline.Source(b, "src2", pipelinetest.NewSliceSource("x"), pipeline.SourceTraceHeaders(func(int) map[string]string { return nil }))
	pipeline.ForEach(b, "sink", src, func(context.Context, int) error { return nil }, pipeline.SourceTraceHeaders(func(int) map[string]string { return nil }))
	_, err := b.Build()
	require.Error(t, err)
	assert.ErrorContains(t, err, `node "src": SourceTraceHeaders: the headers function is nil`)
	assert.ErrorContains(t, err, `node "src2": SourceTraceHeaders: the source emits string`)
	assert.ErrorContains(t, err, `node "sink": SourceTraceHeaders: only a source`)

	b = pipeline.New("panics")
	src = pipeline.Source(b, "src", pipelinetest.NewSliceSource(1), pipeline.SourceTraceHeaders(func(int) map[string]string { panic("no headers") }))
	pipeline.ForEach(b, "sink", src, func(context.Context, int) error { return nil })
	_, err = build(t, b).Run(observer.WithTracer(t.Context(), &recordingTracer{}))
	assert.ErrorContains(t, err, "SourceTraceHeaders function")
	assert.ErrorContains(t, err, "no headers")
}
