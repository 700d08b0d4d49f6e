package prometheus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/prometheus"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// The retry delay histogram counts a retry when its delay is chosen, the
// retries counter when its call is made (docs/observability.md, from
// OnRetry and Stats), whether the item waits in place or parked
// (Parallel): a run cancelled during the wait leaves the retry in the
// histogram alone. One that waited in place was counted before its wait.
func TestRetryDelayCountsChosenRetriesAndRetriesCountsMadeOnes(t *testing.T) {
	for _, par := range []int{1, 2} {
		clock := clockwork.NewFakeClock()
		c := prometheus.New()
		rec := &pipelinetest.Recorder{}
		b := pipeline.New("park", pipeline.WithClock(clock), pipeline.WithObserver(observer.Multi(c, rec)),
			pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 3
				o.ItemRetry.Backoff = resilience.Constant(time.Hour)
			}))
		hold := make(chan struct{})
		src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
			if err := out.Emit(ctx, 1); err != nil {
				return err
			}
			<-ctx.Done()
			close(hold)
			return nil
		})
		f := node.TransformFunc[int, int](func(context.Context, int) (int, error) {
			return 0, resilience.MarkTransient(errors.New("flaky"))
		})
		pipeline.Sink(b, "sink", pipeline.Transform[int, int](b, "t", pipeline.Source(b, "src", src), f, pipeline.Parallel(par)), node.SinkFunc[int](func(context.Context, int) error { return nil }))
		p, err := b.Build()
		require.NoError(t, err)
		reg := promclient.NewRegistry()
		reg.MustRegister(c)
		ctx, cancel := context.WithCancel(t.Context())
		run := pipelinetest.Start(ctx, p)
		_, err = pipelinetest.WaitFor[observer.RetryEvent](t.Context(), rec, 1)
		require.NoError(t, err)
		cancel()
		_, _ = run.Wait()
		<-hold
		n, _ := p.Stats().Node("t")
		events := len(pipelinetest.Of[observer.RetryEvent](rec))
		assert.Equal(t, 1, events, "Parallel(%d): one delay chosen", par)
		assert.Zero(t, n.ItemRetries, "Parallel(%d): cut off before it was made", par)
	}
}
