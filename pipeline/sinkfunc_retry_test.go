package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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

// Item retry guards a plain function sink as it guards a transform: a
// transient failure is retried after its exact delay, a permanent one is
// not, and an item whose retries ran out goes to the failure action, with
// every call in its dead letter.
func TestItemRetryOnAPlainSink(t *testing.T) {
	t.Parallel()
	for _, sinkKind := range []string{"pipeline.ForEach", "node.SinkFunc"} {
		for _, m := range modes {
			t.Run(sinkKind+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				clock := clockwork.NewFakeClock()
				rec := &pipelinetest.Recorder{}
				dlq := deadletter.NewMemory(10)
				errBad := errors.New("bad row")
				// 3 fails twice and then goes through; 5 is refused for
				// good; 7 fails every time.
				script := map[int][]error{3: {errFlaky, errFlaky}, 5: {errBad}}
				var mu sync.Mutex
				calls := map[int]int{}
				var written []int
				write := func(_ context.Context, x int) error {
					mu.Lock()
					defer mu.Unlock()
					calls[x]++
					if x == 7 {
						return errFlaky
					}
					if s := script[x]; len(s) > 0 {
						script[x] = s[1:]
						return s[0]
					}
					written = append(written, x)
					return nil
				}
				total := func() int {
					mu.Lock()
					defer mu.Unlock()
					n := 0
					for _, c := range calls {
						n += c
					}
					return n
				}

				b := pipeline.New("plain-sink", append(m.opts, pipeline.WithClock(clock), pipeline.WithObserver(rec),
					pipeline.WithDeadLetter(dlq), pipeline.WithResilience(exact(3, resilience.Constant(time.Second))),
					pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))...)
				src := pipelinetest.NewTrackedSource(ints(10)...)
				in := pipeline.Source[int](b, "src", src)
				if sinkKind == "pipeline.ForEach" {
					pipeline.ForEach(b, "store", in, write)
				} else {
					pipeline.Sink(b, "store", in, node.SinkFunc[int](write))
				}
				res, err := stepRetries(t, clock, rec, pipelinetest.Start(t.Context(), build(t, b)), total)
				require.NoError(t, err)

				assert.Equal(t, []int{0, 1, 2, 3, 4, 6, 8, 9}, written)
				assert.Equal(t, map[int]int{0: 1, 1: 1, 2: 1, 3: 3, 4: 1, 5: 1, 6: 1, 7: 4, 8: 1, 9: 1}, calls,
					"3 twice retried, 5 not retried, 7 retried 3 times")

				retries := pipelinetest.Of[observer.RetryEvent](rec)
				require.Len(t, retries, 5)
				for _, r := range retries {
					assert.Equal(t, "store", r.Node)
					assert.Equal(t, resilience.ItemRetry, r.Kind)
					assert.Equal(t, time.Second, r.Delay)
				}

				store := nodeOf(t, res, "store")
				assert.Equal(t, int64(5), store.ItemRetries)
				assert.Equal(t, int64(8), store.Out)
				assert.Equal(t, int64(2), store.DeadLettered)
				outcomes := once(t, src, 10)
				assert.Equal(t, node.DeadLettered, outcomes[5])
				assert.Equal(t, node.DeadLettered, outcomes[7])
				assert.Equal(t, node.Delivered, outcomes[3])

				envs := dlq.Envelopes()
				require.Len(t, envs, 2)
				byItem := map[any]deadletter.Envelope{}
				for _, e := range envs {
					byItem[e.Item] = e
				}
				assert.Equal(t, 1, byItem[5].Attempts)
				assert.ErrorIs(t, byItem[5].Err, errBad)
				assert.Equal(t, 4, byItem[7].Attempts)
				var exhausted *resilience.RetryExhaustedError
				assert.ErrorAs(t, byItem[7].Err, &exhausted)
				for _, e := range envs {
					assert.Equal(t, "store", e.OriginNode)
					assert.Equal(t, "store", e.DecisionNode)
				}
			})
		}
	}
}
