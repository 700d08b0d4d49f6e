package pipeline_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// ForEachBatch's doc: "Each item keeps its own fate ... an item whose
// error is nil is delivered". When one item of a slice fails the run,
// the items after it in the same slice were written by f (their error is
// nil) but are never settled as delivered: the run ends them Failed, so a
// broker source nacks them and they are written a second time (a
// checkpointed source replays them too). The items before the bad one are
// delivered; the ones after it, written by the same call, are not.
func TestReview2ForEachBatchWrittenItemsAfterAFailureAreNotFailed(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	s := store{fail: func(v int) error {
		if v == 1 {
			return boom
		}
		return nil
	}}
	src := pipelinetest.NewTrackedSource(ints(3)...)
	b := pipeline.New("review2-feb-failrun")
	pipeline.ForEachBatch(b, "bulk", pipeline.Source(b, "src", src), 3, 0, s.write)
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.ErrorIs(t, err, boom)
	_, written := s.get()
	require.Equal(t, []int{0, 2}, written, "f wrote items 0 and 2")
	outcomes := src.Outcomes()
	assert.Equal(t, []node.Outcome{node.Delivered}, outcomes[0], "item 0")
	assert.NotContains(t, outcomes[1], node.Delivered, "item 1")
	assert.Equal(t, []node.Outcome{node.Delivered}, outcomes[2], "item 2 was written by f, which returned nil for it")
}
