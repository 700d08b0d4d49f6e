package prometheus_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/prometheus"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// A Build that fails because one StatsUser of a Multi refused the
// pipeline leaves it with none: the ones that took it forget it, so no
// Collector exports a pipeline Build never returned, and a later Build of
// that name succeeds.
func TestAFailedBuildLeavesNoPipelineBehind(t *testing.T) {
	t.Parallel()
	first, second := prometheus.New(), prometheus.New()
	build := func(obs observer.Observer) error {
		b := pipeline.New("orders", pipeline.WithObserver(obs))
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2, 3)), &pipelinetest.Collector[int]{})
		_, err := b.Build()
		return err
	}
	require.NoError(t, build(second)) // second observes an "orders" already
	require.Error(t, build(observer.Multi(first, second)), "second refuses a second pipeline named orders")
	assert.NoError(t, build(first), "first never got a pipeline from a Build that succeeded")
}
