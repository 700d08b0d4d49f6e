package otel_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/otel"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// A Build that fails because another StatsUser of a Multi refused the
// pipeline leaves the Observer without it: a later Build of that name
// with the Observer succeeds.
func TestAFailedBuildLeavesNoPipelineBehind(t *testing.T) {
	t.Parallel()
	newObserver := func() *otel.Observer {
		o, err := otel.New(sdkmetric.NewMeterProvider())
		require.NoError(t, err)
		t.Cleanup(func() { _ = o.Close() })
		return o
	}
	first, second := newObserver(), newObserver()
	build := func(obs observer.Observer) error {
		b := pipeline.New("orders", pipeline.WithObserver(obs))
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2, 3)), &pipelinetest.Collector[int]{})
		_, err := b.Build()
		return err
	}
	require.NoError(t, build(second))
	require.Error(t, build(observer.Multi(first, second)), "second refuses a second pipeline named orders")
	assert.NoError(t, build(first), "first forgot the pipeline of the failed Build")
}
