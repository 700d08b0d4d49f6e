package pipeline_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// statsUser records the readers Build hands it, or fails or panics.
type statsUser struct {
	observer.Nop
	readers []observer.StatsReader
	err     error
	panics  bool
}

func (s *statsUser) UseStats(r observer.StatsReader) error {
	if s.panics {
		panic("boom")
	}
	s.readers = append(s.readers, r)
	return s.err
}

// Build hands the pipeline's counters to every observer that reads them,
// through Multi too, once; their errors and panics fail the Build, named.
func TestBuildHandsStatsToObservers(t *testing.T) {
	t.Parallel()
	build := func(obs observer.Observer) (*pipeline.Pipeline, error) {
		b := pipeline.New("stats", pipeline.WithObserver(obs))
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2)), &pipelinetest.Collector[int]{})
		return b.Build()
	}
	a, c := &statsUser{}, &statsUser{}
	p, err := build(observer.Multi(a, observer.Nop{}, observer.Multi(c)))
	require.NoError(t, err)
	require.Len(t, a.readers, 1)
	require.Len(t, c.readers, 1)
	assert.Same(t, p, a.readers[0])
	_, err = p.Run(t.Context())
	require.NoError(t, err)
	s, ok := a.readers[0].Stats().Node("sink")
	require.True(t, ok)
	assert.Equal(t, int64(2), s.Out)
	assert.Len(t, a.readers, 1, "a run hands nothing again")

	_, err = build(observer.Multi(&statsUser{err: errors.New("one")}, &statsUser{err: errors.New("two")}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `pipeline "stats": observer: one`)
	assert.Contains(t, err.Error(), "two")

	_, err = build(&statsUser{panics: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `pipeline "stats": observer: pipeline: UseStats panicked`)
}

// A node that stops because another failed, or because the caller
// cancelled, completes Stopped; the node that failed does not, and names
// nothing.
func TestNodeCompletedSaysWhoStoppedIt(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	run := func(ctx context.Context, cancel func(), fail bool) []observer.NodeEvent {
		rec := &pipelinetest.Recorder{}
		b := pipeline.New("stop", pipeline.WithObserver(rec), pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.OnItemFailure = resilience.Fail
		}))
		src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(1000)...))
		work := pipeline.Map(b, "work", src, func(ctx context.Context, x int) (int, error) {
			if fail && x == 10 {
				return 0, errBoom
			}
			return x, nil
		})
		pipeline.ForEach(b, "sink", work, func(ctx context.Context, x int) error {
			if !fail && x == 10 {
				cancel()
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		})
		_, err := build(t, b).Run(ctx)
		require.Error(t, err)
		return pipelinetest.Of[observer.NodeEvent](rec)
	}
	completed := func(evs []observer.NodeEvent) map[string]observer.NodeEvent {
		out := map[string]observer.NodeEvent{}
		for _, e := range evs {
			if e.Err != nil {
				out[e.Node] = e
			}
		}
		return out
	}
	got := completed(run(t.Context(), nil, true))
	assert.False(t, got["work"].Stopped, "the failing node failed")
	assert.Empty(t, got["work"].StoppedBy)
	assert.ErrorIs(t, got["work"].Err, errBoom)
	assert.Contains(t, got, "sink")
	for _, n := range []string{"src", "sink"} {
		if e, ok := got[n]; ok {
			assert.True(t, e.Stopped, "%s stopped", n)
			assert.Equal(t, "work", e.StoppedBy, n)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got = completed(run(ctx, cancel, false))
	assert.Contains(t, got, "sink")
	for _, e := range got {
		assert.True(t, e.Stopped, "%s: a cancelled run stops every node", e.Node)
		assert.Empty(t, e.StoppedBy, e.Node)
	}
}

type panickySize struct{ pipelinetest.SliceSource[int] }

func (*panickySize) Size() int64 { panic("no size") }

// A source that knows its size shows it in Stats; one whose Size panics or
// is negative shows none, and Stats does not panic.
func TestStatsShowASourcesSize(t *testing.T) {
	t.Parallel()
	b := pipeline.New("sized")
	a := pipeline.Source(b, "a", pipelinetest.NewSliceSource(1, 2, 3))
	c := pipeline.Source[int](b, "c", &panickySize{})
	pipeline.ForEach(b, "sink", pipeline.Merge(b, "m", a, c), func(context.Context, int) error { return nil })
	p := build(t, b)
	s, _ := p.Stats().Node("a")
	assert.True(t, s.Sized)
	assert.Equal(t, int64(3), s.Size)
	s, _ = p.Stats().Node("c")
	assert.False(t, s.Sized)
	s, _ = p.Stats().Node("sink")
	assert.False(t, s.Sized, "only sources have a size")
}
