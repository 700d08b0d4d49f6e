package pipeline_test

import (
	"context"
	"errors"
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

// outcomeSource emits n tracked items, then waits for its context, keeping
// each item's outcomes.
type outcomeSource struct {
	n        int
	mu       sync.Mutex
	outcomes map[int][]node.Outcome
	emitted  chan struct{}
}

func newOutcomeSource(n int) *outcomeSource {
	return &outcomeSource{n: n, outcomes: map[int][]node.Outcome{}, emitted: make(chan struct{})}
}

func (s *outcomeSource) Run(ctx context.Context, out node.Emitter[int]) error {
	for i := range s.n {
		if err := out.EmitTracked(ctx, i, func(o node.Outcome) {
			s.mu.Lock()
			s.outcomes[i] = append(s.outcomes[i], o)
			s.mu.Unlock()
		}); err != nil {
			return err
		}
	}
	close(s.emitted)
	<-ctx.Done()
	return context.Cause(ctx)
}

func (s *outcomeSource) outs() map[int][]node.Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[int][]node.Outcome{}
	for k, v := range s.outcomes {
		m[k] = append([]node.Outcome(nil), v...)
	}
	return m
}

var errRestartFlaky = resilience.MarkTransient(errors.New("flaky once"))

// An item that failed its node under the Fail action, while the node
// waits to restart and take it up again, did not fail the run when the
// run stops during that wait (cancelled, or a drain that timed out): it
// ends Failed, which a broker source does not count against it. It ended
// Rejected, a poison message's step toward its dead letter (a review's
// finding). With every restart spent, the item did fail the run: Rejected.
func TestStopDuringARestartWaitDoesNotRejectTheItem(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"cancel", "drain-timeout", "restarts-spent"} {
		for _, shape := range []string{"sink", "parallel", "keyed"} {
			t.Run(how+"/"+shape, func(t *testing.T) {
				t.Parallel()
				clock := clockwork.NewFakeClock()
				src := newOutcomeSource(3)
				b := pipeline.New("restart-blame", pipeline.WithClock(clock), pipeline.WithDrainTimeout(time.Minute),
					pipeline.WithResilience(func(o *resilience.Options) {
						o.ItemRetry.MaxRetries = 0
						o.OnItemFailure = resilience.Fail
						o.NodeRestart.MaxRestarts = 3
						o.NodeRestart.Backoff = resilience.Constant(time.Hour)
					}))
				var mu sync.Mutex
				calls := map[int]int{}
				var opts []pipeline.NodeOption
				switch shape {
				case "parallel":
					opts = append(opts, pipeline.Parallel(2))
				case "keyed":
					opts = append(opts, pipeline.Keyed(2, func(x int) int { return x }))
				}
				pipeline.Sink(b, "sink", pipeline.Source[int](b, "src", src), node.SinkFunc[int](func(_ context.Context, x int) error {
					mu.Lock()
					defer mu.Unlock()
					calls[x]++
					if x == 1 && (calls[x] == 1 || how == "restarts-spent") {
						return errRestartFlaky
					}
					return nil
				}), opts...)
				p := build(t, b)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				run := pipelinetest.Start(ctx, p)
				<-src.emitted
				require.NoError(t, clock.BlockUntilContext(t.Context(), 1)) // the node waits to restart
				want := node.Failed
				switch how {
				case "cancel":
					cancel()
				case "drain-timeout":
					require.True(t, p.Drain())
					require.NoError(t, clock.BlockUntilContext(t.Context(), 2))
					clock.Advance(time.Minute)
				case "restarts-spent":
					for i := range 3 {
						if i > 0 {
							require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
						}
						clock.Advance(time.Hour) // the third restart fails the node for good
					}
					want = node.Rejected
				}
				_, err := waitRun(t, run, how)
				require.Error(t, err)
				assert.Equal(t, []node.Outcome{want}, src.outs()[1], "item 1 (Failed %d, Rejected %d)", int(node.Failed), int(node.Rejected))
			})
		}
	}
}
