package pipeline_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A batch call counts as one call for the breaker: a slice in which any
// item failed transiently is one failure, whatever the order of its items
// (a permanent error first does not hide the outage); a slice whose
// failed items all failed permanently says nothing of the dependency.
func TestMapBatchBreakerSeesATransientFailureWhateverTheItemOrder(t *testing.T) {
	t.Parallel()
	bad := resilience.MarkPermanent(errors.New("bad input"))
	down := resilience.MarkTransient(errors.New("dependency down"))
	for _, c := range []struct {
		name  string
		perms []int // the items of the first slice {0, 1} with a permanent error
	}{
		{"transient-first", []int{1}},
		{"permanent-first", []int{0}},
		{"all-permanent", []int{0, 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var calls batchCalls
			dlq := deadletter.NewMemory(10)
			b := pipeline.New("mapbatch-breaker-order", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 0
				o.OnItemFailure = resilience.DeadLetter
				o.CircuitBreaker.Enabled = true
				o.CircuitBreaker.ConsecutiveFailures = 1
				o.CircuitBreaker.OpenDuration = time.Hour
				o.CircuitBreaker.WhenOpen = resilience.OpenFail
			}))
			out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", pipelinetest.NewSliceSource(0, 1, 2, 3)), 2, 0,
				tenfold(&calls, func(v int) error {
					switch {
					case slices.Contains(c.perms, v):
						return bad
					case v < 2:
						return down
					}
					return nil
				}))
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
			p, err := b.Build()
			require.NoError(t, err)
			_, err = p.Run(t.Context())
			if len(c.perms) == 2 {
				// Bad input only: the breaker stays closed, the second
				// slice is called.
				require.NoError(t, err)
				assert.Equal(t, [][]int{{0, 1}, {2, 3}}, calls.get())
				assert.Len(t, dlq.Envelopes(), 2)
				return
			}
			// The first slice failed (the dependency was down for one of
			// its items): one failure opens the breaker, and the second
			// slice is refused without a call.
			require.ErrorIs(t, err, resilience.ErrCircuitOpen)
			assert.False(t, slices.ContainsFunc(calls.get(), func(c []int) bool { return slices.Contains(c, 2) }),
				"the second slice was called: the breaker missed the first slice's failure (calls %v)", calls.get())
		})
	}
}
