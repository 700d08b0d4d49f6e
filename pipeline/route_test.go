package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// Every item goes to exactly one branch, the one pick names, in order;
// pick runs once per item; a tracked item's done reports its branch's
// outcome: delivered on one branch, dead-lettered on another, filtered on
// a third. The branches' counts add up.
func TestRouteSendsEachItemToOneBranch(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			for range 20 {
				dl := deadletter.NewMemory(100)
				b := pipeline.New("route", append(m.opts, pipeline.WithDeadLetter(dl), pipeline.WithResilience(func(o *resilience.Options) {
					*o = resilience.Options{OnItemFailure: resilience.DeadLetter}
				}))...)
				src := pipelinetest.NewTrackedSource(ints(90)...)
				var mu sync.Mutex
				picks := map[int]int{}
				branches := pipeline.Route(b, "by-mod", pipeline.Source[int](b, "src", src), 3, func(v int) int {
					mu.Lock()
					picks[v]++
					mu.Unlock()
					return v % 3
				})
				var got [3][]int
				for i, br := range branches[:2] {
					pipeline.ForEach(b, fmt.Sprintf("sink%d", i), br, func(_ context.Context, v int) error {
						if i == 1 && v%2 == 0 {
							return errors.New("even on branch 1")
						}
						mu.Lock()
						got[i] = append(got[i], v)
						mu.Unlock()
						return nil
					})
				}
				pipeline.ForEach(b, "sink2", pipeline.Filter(b, "none", branches[2], func(int) bool { return false }),
					func(context.Context, int) error { return nil })
				res, err := build(t, b).Run(t.Context())
				require.NoError(t, err)

				outcomes := once(t, src, 90)
				for v := range 90 {
					assert.Equal(t, 1, picks[v], "pick runs once for %d", v)
					want := node.Delivered
					switch {
					case v%3 == 1 && v%2 == 0:
						want = node.DeadLettered
					case v%3 == 2:
						want = node.Filtered
					}
					assert.Equal(t, want, outcomes[v], "item %d", v)
				}
				for i := range 2 {
					assert.True(t, slices.IsSorted(got[i]), "branch %d keeps the order", i)
					for _, v := range got[i] {
						assert.Equal(t, i, v%3, "item %d on branch %d", v, i)
					}
				}
				assert.Len(t, got[0], 30)
				assert.Len(t, got[1], 15)
				assert.Len(t, dl.Envelopes(), 15)
				for i := range 3 {
					st := nodeOf(t, res, fmt.Sprintf("by-mod[%d]", i))
					assert.Equal(t, pipeline.KindBranch, st.Kind)
					// Each branch is handed its own items alone.
					assert.Equal(t, int64(30), st.In, "branch %d", i)
					assert.Equal(t, int64(30), st.Out, "branch %d", i)
					assert.Zero(t, st.Filtered, "branch %d", i)
				}
				assert.Equal(t, int64(90), nodeOf(t, res, "by-mod").Out)
			}
		})
	}
}

// A pick out of range fails the item, naming the branch; the router's
// failure action decides (here: dead-letter).
func TestRoutePickOutOfRange(t *testing.T) {
	t.Parallel()
	dl := deadletter.NewMemory(10)
	b := pipeline.New("route", pipeline.WithDeadLetter(dl), pipeline.WithResilience(func(o *resilience.Options) {
		*o = resilience.Options{OnItemFailure: resilience.DeadLetter}
	}))
	src := pipelinetest.NewTrackedSource(0, 1, 7)
	yes := pipeline.Route(b, "r", pipeline.Source[int](b, "src", src), 2, func(v int) int { return v })
	for i, s := range yes {
		pipeline.Sink(b, fmt.Sprintf("s%d", i), s, &pipelinetest.Collector[int]{})
	}
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	require.Len(t, dl.Envelopes(), 1)
	assert.ErrorIs(t, dl.Envelopes()[0].Err, pipeline.ErrNoBranch)
	assert.Equal(t, "r", dl.Envelopes()[0].DecisionNode)
	assert.Contains(t, dl.Envelopes()[0].ErrText, "pick returned 7, and the branches are 0 to 1")
	assert.Equal(t, []node.Outcome{node.DeadLettered}, src.Outcomes()[2])
}

// Split is a two-way Route; Map and ForEach take plain functions.
func TestSplitMapAndForEach(t *testing.T) {
	t.Parallel()
	b := pipeline.New("split")
	doubled := pipeline.Map(b, "double", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(ints(10)...)),
		func(_ context.Context, v int) (string, error) { return fmt.Sprint(2 * v), nil })
	small, large := pipeline.Split(b, "size", doubled, func(s string) bool { return len(s) == 1 })
	var mu sync.Mutex
	var got [2][]string
	pipeline.ForEach(b, "small", small, func(_ context.Context, s string) error {
		mu.Lock()
		got[0] = append(got[0], s)
		mu.Unlock()
		return nil
	})
	pipeline.ForEach(b, "large", large, func(_ context.Context, s string) error {
		mu.Lock()
		got[1] = append(got[1], s)
		mu.Unlock()
		return nil
	})
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"0", "2", "4", "6", "8"}, got[0])
	assert.Equal(t, []string{"10", "12", "14", "16", "18"}, got[1])
}

// Nil functions and a Route without branches are Build errors naming the
// node.
func TestRouteBadInput(t *testing.T) {
	t.Parallel()
	b := pipeline.New("bad")
	src := pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1))
	pipeline.Route(b, "none", src, 0, func(int) int { return 0 })
	pipeline.Split(b, "nil-keep", src, nil)
	m := pipeline.Map[int, int](b, "nil-map", src, nil)
	pipeline.ForEach[int](b, "nil-sink", m, nil)
	_, err := b.Build()
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	for _, want := range []string{`"none": Route: 0 branches`, `"nil-keep": pick function is nil`, `"nil-map": transform is nil`, `"nil-sink": sink is nil`} {
		assert.ErrorContains(t, err, want)
	}
}
