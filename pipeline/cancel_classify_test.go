package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A cancellation that lands after a failed call was checked, while the
// classifier runs (it is user code), is not counted as an item retry nor
// reported with OnRetry: layer 1 looks at the context again after
// classifying. The classifier rule cancels the run to stand for it.
func TestCancellationDuringClassificationIsNoRetry(t *testing.T) {
	t.Parallel()
	for _, par := range []int{1, 2} {
		for _, backoff := range []string{"none", "constant"} {
			t.Run(fmt.Sprintf("par=%d/%s", par, backoff), func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				clock := clockwork.NewFakeClock()
				rec := &pipelinetest.Recorder{}
				b := pipeline.New("rc", pipeline.WithClock(clock), pipeline.WithObserver(rec), pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 3
					o.ItemRetry.Backoff = resilience.NoBackoff()
					if backoff == "constant" {
						o.ItemRetry.Backoff = resilience.Constant(time.Second)
					}
					o.ItemRetry.Classifier = resilience.Classifier{}.Transient(func(err error) bool {
						if errors.Is(err, errFlaky) {
							cancel() // the caller cancels while the classifier runs
							return true
						}
						return false
					})
				}))
				tr := pipeline.Transform[int, int](b, "work", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...)),
					pipelinetest.FailAlways(errFlaky, 3), pipeline.Parallel(par))
				pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
				res, err := build(t, b).Run(ctx)
				require.ErrorIs(t, err, context.Canceled)
				assert.Zero(t, nodeOf(t, res, "work").ItemRetries, "a retry counted for a cancelled run, none made")
				assert.Empty(t, pipelinetest.Of[observer.RetryEvent](rec), "OnRetry for a retry that never happens")
			})
		}
	}
}
