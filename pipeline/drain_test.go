package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// endless emits tracked numbers until its context ends (watch) or Emit
// refuses (a source that does not watch its context), and records each
// item's outcomes.
type endless struct {
	watch    bool
	emitted  atomic.Int64
	mu       sync.Mutex
	outcomes map[int64][]node.Outcome
}

func (s *endless) Run(ctx context.Context, out node.Emitter[int64]) error {
	for i := int64(0); ; i++ {
		if s.watch && ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if err := out.EmitTracked(ctx, i, func(o node.Outcome) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.outcomes[i] = append(s.outcomes[i], o)
		}); err != nil {
			return err
		}
		s.emitted.Add(1)
	}
}

// Drain ends a run whose source never runs out: the source stops, every
// item it emitted is delivered exactly once, and Run returns nil. Both a
// source that watches its context and one that only sees Emit refuse.
func TestDrainSettlesEveryEmittedItem(t *testing.T) {
	t.Parallel()
	for _, watch := range []bool{true, false} {
		for _, m := range modes {
			for range 10 {
				src := &endless{watch: watch, outcomes: map[int64][]node.Outcome{}}
				b := pipeline.New("drain", m.opts...)
				var p *pipeline.Pipeline
				var written atomic.Int64
				pipeline.ForEach(b, "sink", pipeline.Source[int64](b, "src", src), func(context.Context, int64) error {
					if written.Add(1) == 500 {
						require.True(t, p.Drain())
						require.True(t, p.Drain(), "a second Drain is harmless")
					}
					return nil
				})
				p = build(t, b)
				res, err := p.Run(t.Context())
				require.NoError(t, err, "%s watch=%v", m.name, watch)
				n := src.emitted.Load()
				assert.GreaterOrEqual(t, n, int64(500))
				assert.Equal(t, n, written.Load(), "every emitted item was written")
				assert.Equal(t, n, nodeOf(t, res, "sink").In)
				src.mu.Lock()
				for i := range n {
					assert.Equal(t, []node.Outcome{node.Delivered}, src.outcomes[i], "item %d", i)
				}
				src.mu.Unlock()
				assert.False(t, p.Drain(), "no run to drain")
			}
		}
	}
}

// A drain that takes longer than WithDrainTimeout cancels the run: Run
// returns ErrDrainTimeout, and the item in flight ends Failed.
func TestDrainTimeoutCancelsTheRun(t *testing.T) {
	t.Parallel()
	for range 20 {
		clock := clockwork.NewFakeClock()
		src := &endless{watch: true, outcomes: map[int64][]node.Outcome{}}
		b := pipeline.New("drain", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithDrainTimeout(time.Minute))
		var p *pipeline.Pipeline
		stuck := make(chan struct{})
		pipeline.ForEach(b, "sink", pipeline.Source[int64](b, "src", src), func(ctx context.Context, v int64) error {
			if v == 3 {
				p.Drain()
				close(stuck)
				<-ctx.Done() // a write that never ends
				return ctx.Err()
			}
			return nil
		})
		p = build(t, b)
		run := pipelinetest.Start(t.Context(), p)
		<-stuck
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
		clock.Advance(time.Minute)
		_, err := run.Wait()
		require.ErrorIs(t, err, pipeline.ErrDrainTimeout)
		src.mu.Lock()
		assert.Equal(t, []node.Outcome{node.Failed}, src.outcomes[3])
		assert.Equal(t, []node.Outcome{node.Delivered}, src.outcomes[2])
		src.mu.Unlock()
	}
}

// A source that fails on its own after a drain is not taken for drained:
// the run fails with its error.
func TestDrainDoesNotHideASourceFailure(t *testing.T) {
	t.Parallel()
	errBroken := errors.New("broken")
	b := pipeline.New("drain")
	var p *pipeline.Pipeline
	drained := make(chan struct{})
	src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		if err := out.Emit(ctx, 1); err != nil {
			return err
		}
		<-drained
		return errBroken
	})
	pipeline.ForEach(b, "sink", pipeline.Source[int](b, "src", src), func(context.Context, int) error {
		p.Drain()
		close(drained)
		return nil
	})
	p = build(t, b)
	_, err := p.Run(t.Context())
	require.ErrorIs(t, err, errBroken)
}
