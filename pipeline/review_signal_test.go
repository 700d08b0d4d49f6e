//go:build unix

package pipeline_test

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// closingSource emits n items and ends; its Close, which runs once every
// node of the run finished (the final Close of a source that emitted
// items), runs inClose.
type closingSource struct {
	n       int
	inClose func(ctx context.Context)
}

func (s *closingSource) Run(ctx context.Context, out node.Emitter[int]) error {
	for i := range s.n {
		if err := out.Emit(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

func (s *closingSource) Close(ctx context.Context) error {
	s.inClose(ctx)
	return nil
}

// Finding 1: RunUntilSignal's godoc says "A signal that came when every
// node had finished changes nothing: the run's own result is returned".
// A signal that comes after every node finished but before Run returned
// (while the sources close, the final checkpoint is saved, ...) is taken
// for a drain: RunUntilSignal reports a run that read its whole input and
// succeeded as drained (errors.Is(err, ErrDrained), "stopped early").
//
// The test sends itself SIGWINCH (ignored by default: the test process
// cannot die of it) from the source's final Close, and waits until
// RunUntilSignal's watcher took it (DrainAsked), before Close returns.
// Not parallel: no other test listens for SIGWINCH.
func TestReviewSignalAfterEveryNodeFinishedChangesNothing(t *testing.T) {
	var delivered int
	src := &closingSource{n: 10, inClose: func(ctx context.Context) {
		asked := pipeline.DrainAsked(ctx)
		if asked == nil {
			t.Error("Close's context is not RunUntilSignal's")
			return
		}
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGWINCH); err != nil {
			t.Error(err)
			return
		}
		select {
		case <-asked:
		case <-t.Context().Done():
		}
	}}
	b := pipeline.New("late-signal")
	pipeline.ForEach(b, "sink", pipeline.Source[int](b, "source", src), func(context.Context, int) error {
		delivered++
		return nil
	})
	p := build(t, b)
	res, err := pipeline.RunUntilSignal(t.Context(), p, syscall.SIGWINCH)
	assert.Equal(t, 10, delivered, "the whole input was read and written")
	require.NoError(t, err, "every node had finished when the signal came: the run's own result (nil) is returned")
	assert.NotErrorIs(t, err, pipeline.ErrDrained)
	_ = res
}

// A first signal that comes while the run drains already (Pipeline.Drain
// was called) drains nothing: the run's own result (nil for a drain that
// ended cleanly) is returned, not a SignalError. Not parallel: no other
// test listens for SIGWINCH.
func TestRunUntilSignalWhileDrainingChangesNothing(t *testing.T) {
	var (
		p         *pipeline.Pipeline
		delivered atomic.Int64
	)
	src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := range 3 {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
		}
		if !p.Drain() {
			t.Error("no run to drain")
		}
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGWINCH); err != nil {
			t.Error(err)
			return nil
		}
		select {
		case <-pipeline.DrainAsked(ctx):
		case <-t.Context().Done():
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	b := pipeline.New("draining")
	pipeline.ForEach(b, "sink", pipeline.Source(b, "source", src), func(context.Context, int) error {
		delivered.Add(1)
		return nil
	})
	p = build(t, b)
	_, err := pipeline.RunUntilSignal(t.Context(), p, syscall.SIGWINCH)
	require.NoError(t, err, "the drain was the caller's: Run's own result")
	assert.Equal(t, int64(3), delivered.Load(), "every item emitted was delivered")
	assert.True(t, p.Stats().Draining, "the run drained")
}
