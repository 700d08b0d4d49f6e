package progress_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer/progress"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// A drain that WithDrainTimeout cuts short: the final frame says the drain
// timed out, and blames no node (none failed anything).
func TestFinalFrameSaysDrainTimedOut(t *testing.T) {
	clock := clockwork.NewFakeClock()
	var out recorder
	rep := progress.New(&out, progress.WithClock(clock), progress.WithTTY(false))
	defer rep.Stop()
	b := pipeline.New("numbers", pipeline.WithClock(clock), pipeline.WithObserver(rep), pipeline.WithDrainTimeout(time.Second))
	fifth := make(chan struct{})
	pipeline.Sink(b, "store", pipeline.Source[int](b, "read", counting{size: 1_000_000}),
		node.SinkFunc[int](func(ctx context.Context, n int) error {
			if n == 4 {
				close(fifth)
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}))
	p, err := b.Build()
	require.NoError(t, err)
	run := pipelinetest.Start(t.Context(), p)
	<-fifth
	p.Drain()
	_, err = pipelinetest.AdvanceUntilDone(t.Context(), clock, run, 100*time.Millisecond)
	t.Logf("Run: %v", err)
	rep.Stop()
	w := out.take()
	require.NotEmpty(t, w)
	final := w[len(w)-1]
	t.Log(final)
	require.ErrorIs(t, err, pipeline.ErrDrainTimeout)
	assert.False(t, strings.Contains(final, "failed ("), "a drain timeout blames a node: %q", final)
	assert.True(t, strings.HasSuffix(final, "  drain timed out\n"), "final frame: %q", final)
	if t.Failed() {
		t.Logf("all: %q", w)
	}
}
