package pipeline_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// After a node restart, the items of the failed item's slice that the
// batch call did are settled with the results it returned, not called
// again: a bulk write writes each item once.
func TestMapBatchRestartDoesNotCallSucceededItemsAgain(t *testing.T) {
	t.Parallel()
	var calls batchCalls
	var once sync.Once
	sink := &pipelinetest.Collector[int]{}
	b := pipeline.New("mapbatch-restart-dup", pipeline.WithResilience(func(o *resilience.Options) {
		o.NodeRestart.MaxRestarts = 1
	}))
	out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(6)...)), 6, 0,
		tenfold(&calls, func(v int) error {
			var err error
			if v == 2 {
				once.Do(func() { err = errors.New("fails the node once") })
			}
			return err
		}))
	pipeline.Sink(b, "sink", out, sink)
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, timesTen(6), append([]int{}, sink.Items()...))
	for _, v := range []int{3, 4, 5} {
		assert.Equal(t, 1, calls.callsOf(v), "item %d succeeded in the batch call, and was called again (calls %v)", v, calls.get())
	}
}
