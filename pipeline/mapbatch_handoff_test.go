package pipeline_test

import (
	"context"
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

// A failed item whose wait is handed off to the broker leaves the node:
// its redelivery is an ordinary item of the input, gathered into a slice
// like any other, and keeps its outcomes (handed off, then delivered).
// Every other item is called once.
func TestMapBatchHandedOffItemComesBackAsAnOrdinaryItem(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	b := pipeline.New("mapbatch-handoff", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 3
		o.ItemRetry.Backoff = resilience.NoBackoff()
	}))
	br := newSimBroker(time.Minute, 1, 2, 3, 4, 5)
	var mu sync.Mutex
	var calls [][]int
	failed := false
	out := pipeline.MapBatch(b, "bulk", pipeline.Source[delivery](b, "src", br), 2, 0,
		func(_ context.Context, ins []delivery) ([]delivery, []error) {
			mu.Lock()
			defer mu.Unlock()
			var ids []int
			var errs []error
			for i, d := range ins {
				ids = append(ids, d.id)
				if d.id == 1 && !failed {
					failed = true
					errs = make([]error, len(ins))
					errs[i] = wait(time.Hour) // a long wait: handed to the broker
				}
			}
			calls = append(calls, ids)
			return ins, errs
		})
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[delivery]{})
	_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), time.Millisecond)
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, br.handOffs, 1, "item 1's wait was handed off")
	assert.Equal(t, []node.Outcome{node.HandedOff, node.Delivered}, br.outcomes[1])
	count := map[int]int{}
	for _, c := range calls {
		for _, id := range c {
			count[id]++
		}
	}
	assert.Equal(t, map[int]int{1: 2, 2: 1, 3: 1, 4: 1, 5: 1}, count,
		"item 1 is called once in its slice and once when redelivered, the others once (calls %v)", calls)
}
