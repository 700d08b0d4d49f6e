package pipeline_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// nanKeyOf keys items 0 to 2 by NaN, the others by 1.
func nanKeyOf(e ev) float64 {
	if e.ID < 3 {
		return math.NaN()
	}
	return 1
}

// An Aggregate item whose key is not equal to itself (a NaN) goes to the
// node's failure action: no map finds such a key again, and such items
// panicked the node (time and session windows) or were never settled
// (count windows). The other items are windowed as ever.
func TestAggregateKeyNotEqualToItselfIsRefused(t *testing.T) {
	t.Parallel()
	for name, spec := range map[string]pipeline.WindowSpec{
		"count": pipeline.CountWindow(2), "time": pipeline.TimeWindow(time.Minute),
		"sliding": pipeline.SlidingWindow(time.Minute, 30*time.Second), "session": pipeline.SessionWindow(time.Minute),
	} {
		for _, et := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/eventtime=%v", name, et), func(t *testing.T) {
				t.Parallel()
				items := []ev{{ID: 0, At: epoch, V: 1}, {ID: 1, At: epoch, V: 2}, {ID: 2, At: epoch.Add(time.Second), V: 4}, {ID: 3, At: epoch.Add(5 * time.Minute), V: 8}}
				src := pipelinetest.NewTrackedSource(items...)
				dl := deadletter.NewMemory(10)
				b := pipeline.New("agg", pipeline.WithDeadLetter(dl), pipeline.WithResilience(func(o *resilience.Options) {
					o.OnItemFailure = resilience.DeadLetter
				}))
				var opts []pipeline.NodeOption
				if et {
					opts = append(opts, pipeline.EventTime(evAt, 0, 0))
				}
				wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", src), nanKeyOf, spec, evZero, evSum, opts...)
				out := &pipelinetest.Collector[pipeline.Window[float64, int]]{}
				pipeline.Sink(b, "store", wins, out)
				res, err := build(t, b).Run(t.Context())
				require.NoError(t, err)
				for i := range 3 {
					assert.Equal(t, []node.Outcome{node.DeadLettered}, src.Outcomes()[i], "item %d", i)
				}
				assert.Equal(t, []node.Outcome{node.Delivered}, src.Outcomes()[3], "item 3")
				total := 0
				for _, w := range out.Items() {
					assert.Equal(t, 1.0, w.Key)
					total += w.Value
				}
				assert.Positive(t, total)
				assert.Zero(t, total%8, "only item 3's value is windowed: %v", out.Items())
				for _, env := range dl.Envelopes() {
					assert.True(t, strings.Contains(env.ErrText, "Aggregate: the item's key NaN (float64) is not equal to itself"), env.ErrText)
				}
				assert.Equal(t, int64(3), nodeOf(t, res, "sum").DeadLettered)
			})
		}
	}
}

// A Join item whose key is not equal to itself goes to the node's
// failure action too: it can join nothing, and it was left unsettled,
// failing the run as the engine's fault, with map entries no delete found.
func TestJoinKeyNotEqualToItselfIsRefused(t *testing.T) {
	t.Parallel()
	for _, et := range []bool{false, true} {
		left := pipelinetest.NewTrackedSource(ev{ID: 3, At: epoch, V: 1}, ev{ID: 0, At: epoch, V: 2})
		right := pipelinetest.NewTrackedSource(ev{ID: 4, At: epoch, V: 10}, ev{ID: 1, At: epoch, V: 20})
		dl := deadletter.NewMemory(10)
		b := pipeline.New("join", pipeline.WithDeadLetter(dl), pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
		}))
		var opts []pipeline.NodeOption
		if et {
			opts = append(opts, pipeline.JoinEventTime(evAt, evAt, 0, 0))
		}
		joined := pipeline.Join(b, "j", pipeline.Source(b, "l", left), pipeline.Source(b, "r", right), nanKeyOf, nanKeyOf, time.Hour,
			func(l, r ev) int { return l.V + r.V }, opts...)
		out := &pipelinetest.Collector[int]{}
		pipeline.Sink(b, "store", joined, out)
		res, err := build(t, b).Run(t.Context())
		require.NoError(t, err, "event time %v", et)
		assert.Equal(t, []int{11}, out.Items())
		assert.Equal(t, []node.Outcome{node.DeadLettered}, left.Outcomes()[1])
		assert.Equal(t, []node.Outcome{node.DeadLettered}, right.Outcomes()[1])
		assert.Equal(t, []node.Outcome{node.Delivered}, left.Outcomes()[0])
		var texts []string
		for _, env := range dl.Envelopes() {
			texts = append(texts, env.ErrText)
		}
		assert.Equal(t, 2, len(texts))
		assert.True(t, strings.Contains(strings.Join(texts, "|"), "Join: the left item's key NaN") && strings.Contains(strings.Join(texts, "|"), "Join: the right item's key NaN"), "%q", texts)
		assert.Equal(t, int64(2), nodeOf(t, res, "j").DeadLettered)
	}
}
