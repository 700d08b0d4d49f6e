package progress_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/progress"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// counting emits 0, 1, 2, ... until its context ends; it says it has
// size items, though it may be stopped before.
type counting struct{ size int64 }

func (c counting) Size() int64 { return c.size }

func (c counting) Run(ctx context.Context, out node.Emitter[int]) error {
	for i := 0; ; i++ {
		if err := out.Emit(ctx, i); err != nil {
			return nil
		}
	}
}

// The final frame says how the run ended: done, drained, cancelled or
// failed (naming the node), never "done" for a run that did not get to
// its end.
func TestFinalFrameSaysHowTheRunEnded(t *testing.T) {
	t.Parallel()
	errBad := errors.New("bad item")
	for _, tc := range []struct {
		name string
		// stop ends the run once the sink got its fifth item, which it
		// holds until release is closed or the run stops.
		stop func(p *pipeline.Pipeline, cancel context.CancelFunc, release chan struct{})
		// fail makes the sink fail its fifth item.
		fail bool
		want string
	}{
		{name: "drained", stop: func(p *pipeline.Pipeline, _ context.CancelFunc, release chan struct{}) {
			p.Drain()
			close(release)
		}, want: "drained"},
		{name: "cancelled", stop: func(_ *pipeline.Pipeline, cancel context.CancelFunc, _ chan struct{}) { cancel() }, want: "cancelled"},
		{name: "failed", fail: true, want: "failed (store)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			var out recorder
			rep := progress.New(&out, progress.WithClock(clock), progress.WithTTY(false))
			defer rep.Stop()
			b := pipeline.New("numbers", pipeline.WithClock(clock), pipeline.WithObserver(rep))
			fifth, release := make(chan struct{}), make(chan struct{})
			pipeline.Sink(b, "store", pipeline.Source[int](b, "read", counting{size: 1_000_000}),
				node.SinkFunc[int](func(ctx context.Context, n int) error {
					if n == 4 {
						close(fifth)
						if tc.fail {
							return resilience.MarkPermanent(errBad)
						}
						select {
						case <-release:
						case <-ctx.Done():
						}
					}
					return nil
				}), pipeline.NodeResilience(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 0 }))
			p, err := b.Build()
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			run := pipelinetest.Start(ctx, p)
			<-fifth
			if tc.stop != nil {
				tc.stop(p, cancel, release)
			}
			_, _ = run.Wait()
			rep.Stop()
			w := out.take()
			require.NotEmpty(t, w)
			final := w[len(w)-1]
			assert.True(t, strings.HasSuffix(final, "  "+tc.want+"\n"), final)
			assert.NotContains(t, final, "done")
		})
	}
}

// Percent and ETA are measured from the sink side: the items settled
// (written, or ended otherwise) over the source's size, at the rate items
// settle, not at the rate the source reads.
func TestPercentAndETAFromTheSinkSide(t *testing.T) {
	h := newHarness(t, progress.WithTTY(false), progress.WithInterval(time.Second))
	src := source("read")
	src.Size, src.Sized = 10_000, true
	work := observer.NodeStats{Node: "check", Kind: observer.KindTransform}
	r := newReader(src, work, sink("store"))
	require.NoError(t, h.rep.UseStats(r))
	r.startRun("run-1")
	h.start()
	for range 3 {
		r.set(func(st *observer.Stats) {
			st.Nodes[0].Out += 1000
			st.Nodes[1].In += 1000
			st.Nodes[1].Out += 90
			st.Nodes[1].DeadLettered += 10
			st.Nodes[2].In += 90
			st.Nodes[2].Out += 90
		})
		h.tick()
	}
	w := h.out.take()
	require.Len(t, w, 3)
	// 300 of 10000 settled (270 written, 30 dead-lettered), 100 a second:
	// 9700 left take 97 s.
	assert.True(t, strings.HasSuffix(w[2], "  settled 3%  ETA 1m37s\n"), w[2])
}

// While a drain runs, the display says so, and its ETA is that of the
// items in flight, not of the source's size.
func TestDrainingShowsWhatIsLeft(t *testing.T) {
	h := newHarness(t, progress.WithTTY(false), progress.WithInterval(time.Second))
	src := source("read")
	src.Size, src.Sized = 10_000, true
	r := newReader(src, sink("store"))
	require.NoError(t, h.rep.UseStats(r))
	r.startRun("run-1")
	h.start()
	r.set(func(st *observer.Stats) { st.Nodes[0].Out = 4000 })
	h.tick()
	r.set(func(st *observer.Stats) { st.Nodes[1].Out = 1000; st.Draining = true })
	h.tick()
	w := h.out.take()
	require.Len(t, w, 2)
	// docs/progress.md shows these two lines.
	assert.Equal(t, "2.0s  read 4000/10000 (2.0k/s, avg 2.0k/s)  store 1000 (500/s, avg 500/s)  draining 3000 left  ETA 6s\n", w[1], "the items in flight at 500/s")
	r.set(func(st *observer.Stats) { st.Nodes[1].Out = 3000 })
	h.tick()
	w = h.out.take()
	require.Len(t, w, 1)
	assert.Equal(t, "3.0s  read 4000/10000 (1.3k/s, avg 1.3k/s)  store 3000 (1.0k/s, avg 1.0k/s)  draining 1000 left  ETA 1s\n", w[0], "the ETA shrinks as the drain goes")
	r.set(func(st *observer.Stats) { st.Nodes[1].Out = 4000; st.Running = false })
	h.tick()
	w = h.out.take()
	require.Len(t, w, 1)
	assert.True(t, strings.HasSuffix(w[0], "  drained\n"), w[0])
}

// Broker retries and hand-offs are shown on their own, not as dead
// letters, on both outputs.
func TestBrokerRetriesShownApart(t *testing.T) {
	for _, tty := range []bool{false, true} {
		h := newHarness(t, progress.WithTTY(tty), progress.WithInterval(time.Second))
		work := observer.NodeStats{Node: "handle", Kind: observer.KindTransform}
		r := newReader(source("read"), work, sink("store"))
		require.NoError(t, h.rep.UseStats(r))
		r.startRun("run-1")
		h.start()
		r.set(func(st *observer.Stats) {
			st.Nodes[0].Out = 100
			st.Nodes[1].In, st.Nodes[1].Out = 100, 90
			st.Nodes[1].DeadLettered, st.Nodes[1].BrokerRetries, st.Nodes[1].HandedOff = 2, 5, 3
		})
		h.tick()
		w := h.out.take()
		require.Len(t, w, 1)
		assert.Contains(t, w[0], "dead 2  broker retries 5  handed off 3", "tty %v", tty)
	}
}

// Late items of an event-time window are shown on their own, beside the
// dead letters they also count in, on both outputs.
func TestLateItemsShown(t *testing.T) {
	for _, tty := range []bool{false, true} {
		h := newHarness(t, progress.WithTTY(tty), progress.WithInterval(time.Second))
		agg := observer.NodeStats{Node: "hourly", Kind: observer.KindAggregate}
		r := newReader(source("read"), agg, sink("store"))
		require.NoError(t, h.rep.UseStats(r))
		r.startRun("run-1")
		h.start()
		r.set(func(st *observer.Stats) {
			st.Nodes[0].Out = 100
			st.Nodes[1].In, st.Nodes[1].Out = 100, 3
			st.Nodes[1].DeadLettered, st.Nodes[1].Late = 7, 7
		})
		h.tick()
		w := h.out.take()
		require.Len(t, w, 1)
		assert.Contains(t, w[0], "dead 7  late 7", "tty %v", tty)
	}
}
