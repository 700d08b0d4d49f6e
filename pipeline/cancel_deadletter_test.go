package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// The caller cancels while an item is being written to the dead-letter
// sink, which then fails with an error of its own ("bad connection"): that
// is the echo of the cancellation, not a failure of the sink, and the item
// is reported Failed.
func TestCancelDuringDeadLetterWriteIsNotASinkFailure(t *testing.T) {
	t.Parallel()
	for _, dlRetries := range []int{0, 2} {
		t.Run(fmt.Sprint("dlRetries=", dlRetries), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(t.Context())
			entered := make(chan struct{})
			dl := deadletter.Func(func(c context.Context, _ deadletter.Envelope) error {
				close(entered)
				<-c.Done()
				return errOwn
			})
			rec := &pipelinetest.Recorder{}
			b := pipeline.New("dl-cancel", pipeline.WithDeadLetter(dl), pipeline.WithObserver(rec),
				pipeline.WithClock(clockwork.NewFakeClock()),
				pipeline.WithDeadLetterRetry(dlRetries, resilience.NoBackoff()),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 0
					o.OnItemFailure = resilience.DeadLetter
				}))
			src := pipelinetest.NewTrackedSource(ints(10)...)
			out := pipeline.Transform[int, int](b, "work", pipeline.Source[int](b, "src", src), pipelinetest.FailAlways(errRejected, 3))
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
			r := pipelinetest.Start(ctx, build(t, b))
			<-entered
			cancel()
			res, err := r.Wait()
			require.ErrorIs(t, err, context.Canceled)
			for _, e := range pipelinetest.Of[observer.NodeEvent](rec) {
				if e.Err != nil && !errors.Is(e.Err, context.Canceled) {
					t.Errorf("node %q completed with a non-cancellation error: %v", e.Node, e.Err)
				}
			}
			t.Logf("work: Failed=%d DeadLettered=%d; outcome of 3: %v", nodeOf(t, res, "work").Failed, nodeOf(t, res, "work").DeadLettered, src.Outcomes()[3])
			assert.Equal(t, []node.Outcome{node.Failed}, src.Outcomes()[3])
		})
	}
}
