package progress_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer/progress"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// residueSource emits ten tracked items, then waits for the run's end.
type residueSource struct{}

func (residueSource) Size() int64 { return 10 }

func (residueSource) Run(ctx context.Context, out node.Emitter[int]) error {
	for i := range 10 {
		if err := out.EmitTracked(ctx, i, func(node.Outcome) {}); err != nil {
			return nil
		}
	}
	<-ctx.Done()
	return nil
}

// A run cancelled with tracked items still queued fails them after its
// last node completed, after the Reporter's last sample of it. The next
// run's line counts from the counters as it starts, so none of those is
// shown as settled in it. (Found by review: run 2 showed "settled 30%"
// while none of its items had settled.)
func TestNextRunDoesNotCountWhatTheLastRunsEndSettled(t *testing.T) {
	h := newHarness(t, progress.WithTTY(false), progress.WithInterval(time.Second))
	reached := make(chan struct{}, 1)
	var calls atomic.Int64
	b := pipeline.New("p", pipeline.WithObserver(h.rep), pipeline.WithBuffer(16))
	pipeline.Sink(b, "store", pipeline.Source[int](b, "read", residueSource{}), node.SinkFunc[int](func(ctx context.Context, x int) error {
		if calls.Add(1) == 1 {
			// The first item of each run holds the sink until the run is
			// cancelled: the other nine wait in the buffer.
			reached <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}))
	p, err := b.Build()
	require.NoError(t, err)
	// Ticking from Start, one goroutine throughout: one started by a run
	// ends after it, and one ending as the next starts may take a tick.
	h.start()
	for run := 1; run <= 2; run++ {
		calls.Store(0)
		ctx, cancel := context.WithCancel(t.Context())
		r := pipelinetest.Start(ctx, p)
		<-reached
		if run == 2 {
			for range 5 { // a line each second, five ticks
				h.tick()
			}
			w := h.out.take()
			require.NotEmpty(t, w)
			line := w[len(w)-1]
			rd, _ := p.Stats().Node("read")
			t.Logf("run 2: %q; the source over both runs: tracked %d, settled %d", line, rd.Tracked, rd.Settled)
			assert.Contains(t, line, "settled 0%", "nothing of run 2 settled yet")
		}
		cancel()
		_, _ = r.Wait()
		h.out.take()
	}
}
