package prometheus_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jonboulle/clockwork"
	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/prometheus"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A Collector reached twice through observer.Multi counts each event once:
// it counted each exhausted retry and each retry delay twice (a review's
// finding).
func TestCollectorGivenTwiceCountsEachEventOnce(t *testing.T) {
	c := prometheus.New()
	b := pipeline.New("twice", pipeline.WithClock(clockwork.NewFakeClock()),
		pipeline.WithObserver(observer.Multi(c, observer.Multi(c))),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 1
			o.ItemRetry.Backoff = resilience.NoBackoff()
			o.OnItemFailure = resilience.Skip
		}))
	f := node.TransformFunc[int, int](func(context.Context, int) (int, error) {
		return 0, resilience.MarkTransient(errors.New("flaky"))
	})
	pipeline.Sink(b, "sink", pipeline.Transform[int, int](b, "t", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)), f),
		node.SinkFunc[int](func(context.Context, int) error { return nil }))
	p, err := b.Build()
	require.NoError(t, err)
	res, err := p.Run(t.Context())
	require.NoError(t, err)
	st, _ := res.Node("t")
	require.EqualValues(t, 1, st.ItemRetries)
	reg := promclient.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var exhausted float64
	var delays uint64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case prometheus.RetriesExhausted:
				exhausted += m.GetCounter().GetValue()
			case prometheus.RetryDelay:
				delays += m.GetHistogram().GetSampleCount()
			}
		}
	}
	assert.Equal(t, 1.0, exhausted, "one item ran out of retries once")
	assert.EqualValues(t, 1, delays, "one retry delay was chosen")
}

type panicForgetter struct{ observer.Nop }

func (panicForgetter) UseStats(observer.StatsReader) error { return nil }
func (panicForgetter) ForgetStats(observer.StatsReader)    { panic("forget") }

type refuser struct{ observer.Nop }

func (refuser) UseStats(observer.StatsReader) error { return errors.New("refused") }

// A Build that another observer refused leaves the Collector without the
// pipeline, though an observer before it panics as it forgets: the
// Collector kept exporting it, and refused its name for ever after.
func TestRefusedBuildLeavesTheCollectorFreeThoughAForgetterPanics(t *testing.T) {
	c := prometheus.New()
	b := pipeline.New("orders", pipeline.WithObserver(observer.Multi(panicForgetter{}, c, refuser{})))
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)),
		node.SinkFunc[int](func(context.Context, int) error { return nil }))
	_, err := b.Build()
	require.Error(t, err, "one observer refused the pipeline")
	assert.Zero(t, testutil.CollectAndCount(c, prometheus.ItemsIn), "a pipeline whose Build failed exports nothing")

	b2 := pipeline.New("orders", pipeline.WithObserver(c))
	pipeline.Sink(b2, "sink", pipeline.Source(b2, "src", pipelinetest.NewSliceSource(1)),
		node.SinkFunc[int](func(context.Context, int) error { return nil }))
	_, err = b2.Build()
	assert.NoError(t, err, "the name is free: the first Build failed")
}
