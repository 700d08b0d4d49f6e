package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// closeOnly is a sink with a Close and no Open.
type closeOnly struct {
	mu                 sync.Mutex
	closes, afterClose int
	closed             bool
	failed             bool
}

func (c *closeOnly) Write(_ context.Context, x int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		c.afterClose++
	}
	if x == 3 && !c.failed {
		c.failed = true
		return errors.New("disk hiccup")
	}
	return nil
}

func (c *closeOnly) Close(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closes++
	c.closed = true
	return nil
}

func TestANodeWithoutOpenIsClosedOnceAtTheEnd(t *testing.T) {
	t.Parallel()
	sink := &closeOnly{}
	b := pipeline.New("close-only", pipeline.WithResilience(restartOnce))
	pipeline.Sink[int](b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...)), sink)
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(1), nodeOf(t, res, "sink").NodeRestarts)
	assert.Equal(t, 1, sink.closes)
	assert.Zero(t, sink.afterClose, "no Write after Close")
}

func TestPanicsInPoliciesFailTheNode(t *testing.T) {
	t.Parallel()
	policies := map[string]func(*resilience.Options){
		"classifier": func(o *resilience.Options) {
			o.ItemRetry.Classifier = resilience.Classifier{}.Transient(func(error) bool { panic("classifier bug") })
		},
		"backoff": func(o *resilience.Options) {
			o.ItemRetry.Backoff = resilience.Custom(func(int) time.Duration { panic("backoff bug") })
		},
	}
	for name, policy := range policies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("policy", pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 2
				o.NodeRestart.MaxRestarts = 2 // a broken policy is not restarted
				policy(o)
			}))
			tr := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)),
				pipelinetest.FailAlways(errFlaky, 1))
			pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
			res, err := build(t, b).Run(t.Context())
			var pe *resilience.PanicError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, name+" bug", pe.Value)
			assert.Zero(t, nodeOf(t, res, "call").NodeRestarts)
		})
	}
}

func TestEmitHonoursItsContext(t *testing.T) {
	t.Parallel()
	var pl atomic.Pointer[pipeline.Pipeline]
	gate := make(chan struct{})
	defer close(gate)
	var emitErr error
	// The sink returns when its context ends: a short grace, so that the
	// failed run does not hold it DefaultFailGrace on the real clock.
	b := pipeline.New("emit-ctx", pipeline.WithHandOverBatch(1), pipeline.WithBuffer(0), pipeline.WithDrainTimeout(10*time.Millisecond),
		pipeline.WithResilience(func(o *resilience.Options) { o.NodeRetry.MaxRetries = 0 }))
	src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		if err := out.Emit(ctx, 0); err != nil {
			return err
		}
		mine, cancel := context.WithCancel(ctx)
		go func() {
			waitStat(&pl, "src", 1) // published when the next Emit blocks
			cancel()
		}()
		emitErr = out.Emit(mine, 1) // the sink holds item 0: this blocks
		return emitErr
	}))
	pipeline.Sink(b, "sink", src, node.SinkFunc[int](func(ctx context.Context, x int) error {
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return nil
	}))
	p := build(t, b)
	pl.Store(p)
	_, err := p.Run(t.Context())
	require.ErrorIs(t, emitErr, context.Canceled, "Emit returns when the context it was given is done")
	require.ErrorIs(t, err, context.Canceled)
}

func TestEmitAfterRunReturnedFails(t *testing.T) {
	t.Parallel()
	var late node.Emitter[int]
	var lateCtx context.Context
	b := pipeline.New("late-emit")
	src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		late, lateCtx = out, ctx
		return out.Emit(ctx, 1)
	}))
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", src, sink)
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	err = late.Emit(context.WithoutCancel(lateCtx), 2)
	require.ErrorIs(t, err, pipeline.ErrEmitAfterReturn)
	assert.Equal(t, []int{1}, sink.Items())
}

// An Emit that races with the end of its source's Run, from a goroutine the
// source left behind, is either taken whole (it returns nil and the item is
// written, its done says Delivered) or refused with ErrEmitAfterReturn (its
// done says Failed): never accepted and lost, never a data race, and the
// run stays a success. The goroutine emits until it is refused, so every
// run crosses the end of Run.
func TestEmitRacingTheEndOfRunIsTakenOrRefused(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		for _, tracked := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/tracked=%t", m.name, tracked), func(t *testing.T) {
				t.Parallel()
				// 50 runs: the code before 8fcad30 panics and races within
				// 10 in 5 of 5 tries.
				for range 50 {
					b := pipeline.New("late", m.opts...)
					var (
						mu       sync.Mutex
						taken    []int
						refusal  error
						outcomes = map[int][]node.Outcome{}
					)
					lateDone := make(chan struct{})
					src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
						started := make(chan struct{})
						go func() {
							defer close(lateDone)
							for i := 0; ; i++ {
								var err error
								if tracked {
									err = out.EmitTracked(context.Background(), i, func(o node.Outcome) {
										mu.Lock()
										defer mu.Unlock()
										outcomes[i] = append(outcomes[i], o)
									})
								} else {
									err = out.Emit(context.Background(), i)
								}
								if i == 0 {
									close(started)
								}
								if err != nil {
									refusal = err
									return
								}
								taken = append(taken, i)
							}
						}()
						<-started
						return nil
					}))
					sink := &pipelinetest.Collector[int]{}
					pipeline.Sink(b, "sink", src, sink)
					_, runErr := build(t, b).Run(t.Context())
					<-lateDone
					require.NoError(t, runErr)
					require.ErrorIs(t, refusal, pipeline.ErrEmitAfterReturn)
					require.Equal(t, taken, sink.Items(), "every Emit that returned nil was written, in order")
					if tracked {
						mu.Lock()
						for _, i := range taken {
							require.Equal(t, []node.Outcome{node.Delivered}, outcomes[i], "item %d", i)
						}
						require.Equal(t, []node.Outcome{node.Failed}, outcomes[len(taken)], "the refused item")
						mu.Unlock()
					}
				}
			})
		}
	}
}
