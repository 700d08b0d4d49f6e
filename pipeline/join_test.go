package pipeline_test

import (
	"context"
	"fmt"
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
)

// An inner join by key: every pair of a left and a right item with equal
// keys is handed on; an item without a partner ends Filtered, one that
// joined ends with its pairs' outcome, once.
func TestJoinPairsItemsByKey(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			for range 10 {
				b := pipeline.New("join", m.opts...)
				orders := pipelinetest.NewTrackedSource(1, 2, 3)
				payments := pipelinetest.NewTrackedSource(20, 30, 31, 40)
				joined := pipeline.Join(b, "pay", pipeline.Source[int](b, "orders", orders), pipeline.Source[int](b, "payments", payments),
					func(o int) int { return o }, func(p int) int { return p / 10 }, time.Hour,
					func(o, p int) string { return fmt.Sprintf("%d+%d", o, p) })
				col := &pipelinetest.Collector[string]{}
				pipeline.Sink(b, "store", joined, col)
				res, err := build(t, b).Run(t.Context())
				require.NoError(t, err)
				got := col.Items()
				slices.Sort(got)
				assert.Equal(t, []string{"2+20", "3+30", "3+31"}, got)
				assert.Equal(t, []node.Outcome{node.Filtered, node.Delivered, node.Delivered}, once(t, orders, 3))
				assert.Equal(t, []node.Outcome{node.Delivered, node.Delivered, node.Delivered, node.Filtered}, once(t, payments, 4))
				assert.Equal(t, int64(2), nodeOf(t, res, "pay").Filtered)
				assert.Equal(t, int64(3), nodeOf(t, res, "pay").Out)
			}
		})
	}
}

// Items join only when they arrive less than the window apart, on the
// pipeline's clock; an item whose window ended is let go at once.
func TestJoinWindowOnTheClock(t *testing.T) {
	t.Parallel()
	for range 10 {
		clock := clockwork.NewFakeClock()
		left, right := &feed{items: make(chan int)}, &feed{items: make(chan int)}
		b := pipeline.New("join", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1))
		joined := pipeline.Join(b, "j", pipeline.Source[int](b, "l", left), pipeline.Source[int](b, "r", right),
			func(v int) int { return v % 10 }, func(v int) int { return v % 10 }, time.Minute,
			func(l, r int) [2]int { return [2]int{l, r} })
		var mu sync.Mutex
		var got [][2]int
		pipeline.ForEach(b, "store", joined, func(_ context.Context, p [2]int) error {
			mu.Lock()
			got = append(got, p)
			mu.Unlock()
			return nil
		})
		p := build(t, b)
		run := pipelinetest.Start(t.Context(), p)
		taken := func(n int64) {
			for {
				if st, _ := p.Stats().Node("j"); st.In >= n {
					return
				}
				runtime.Gosched()
			}
		}
		left.items <- 1
		taken(1)
		clock.Advance(30 * time.Second)
		right.items <- 11 // 30 s after 1: joins
		taken(2)
		clock.Advance(31 * time.Second)
		right.items <- 21 // 61 s after 1: 1's window ended; 11 still waits
		taken(3)
		close(left.items)
		close(right.items)
		res, err := run.Wait()
		require.NoError(t, err)
		assert.Equal(t, [][2]int{{1, 11}}, got)
		assert.Equal(t, int64(1), nodeOf(t, res, "j").Filtered, "21 found no partner")
	}
}

func TestJoinBadInput(t *testing.T) {
	t.Parallel()
	b := pipeline.New("bad")
	l := pipeline.Source[int](b, "l", pipelinetest.NewSliceSource(1))
	r := pipeline.Source[int](b, "r", pipelinetest.NewSliceSource(1))
	pipeline.Join[int, int, int, int](b, "j", l, r, nil, nil, 0, nil)
	_, err := b.Build()
	assert.ErrorContains(t, err, `"j": Join: the key functions and join must not be nil`)
	assert.ErrorContains(t, err, `"j": Join window 0s: must be positive`)
}
