package pipeline_test

import (
	"context"
	"fmt"
	"runtime"
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

// Items a node already processed are handed over before a later item waits
// for its retry backoff (or a breaker pause), not held in the gathered
// batch while the node's goroutine sleeps.
func TestResultsAreHandedOverBeforeARetryWaits(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		name string
		opts []pipeline.NodeOption
	}{
		{"sequential", nil},
		{"unordered", []pipeline.NodeOption{pipeline.Parallel(2), pipeline.Unordered()}},
		{"keyed", []pipeline.NodeOption{pipeline.Keyed(2, func(x int) int { return x })}},
	} {
		for _, m := range modes {
			t.Run(fmt.Sprintf("%s/%s", v.name, m.name), func(t *testing.T) {
				t.Parallel()
				clock := clockwork.NewFakeClock()
				faults := pipelinetest.NewFaults(map[int][]error{5: {errFlaky}})
				b := pipeline.New("held", append([]pipeline.Option{pipeline.WithClock(clock),
					pipeline.WithResilience(func(o *resilience.Options) {
						o.ItemRetry.MaxRetries = 1
						o.ItemRetry.Backoff = resilience.Constant(time.Hour)
					})}, m.opts...)...)
				src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
					for i := range 6 {
						if err := out.Emit(ctx, i); err != nil {
							return err
						}
					}
					<-ctx.Done() // an idle source, e.g. waiting on a broker
					return ctx.Err()
				}))
				tr := pipeline.Transform(b, "work", src, faults, v.opts...)
				sink := &pipelinetest.Collector[int]{}
				pipeline.Sink(b, "sink", tr, sink)
				ctx, cancel := context.WithCancel(t.Context())
				p := build(t, b)
				r := pipelinetest.Start(ctx, p)
				require.NoError(t, clock.BlockUntilContext(t.Context(), 1)) // item 5 waits its hour
				for range 200_000 {
					if sink.Len() >= 5 {
						break
					}
					runtime.Gosched()
				}
				got := sink.Len()
				st, _ := p.Stats().Node("work")
				t.Logf("during item 5's backoff: sink has %d items; Stats of work: In=%d Out=%d InFlight=%d", got, st.In, st.Out, st.InFlight)
				cancel()
				_, _ = r.Wait()
				assert.GreaterOrEqual(t, got, 5, "items 0-4 were processed but are held until item 5's hour-long backoff ends")
			})
		}
	}
}
