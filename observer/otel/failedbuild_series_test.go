package otel_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/prometheus"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// A Build that fails because another StatsUser of a Multi refused the
// pipeline must leave nothing of it exported (observer.StatsForgetter's
// promise): no sluice.retries.exhausted series of it. (Found by review:
// the zero series recorded at UseStats stayed.)
func TestFailedBuildLeavesNoExhaustedSeries(t *testing.T) {
	o, reader := newObserver(t)
	refuser := prometheus.New()
	build := func(obs observer.Observer) error {
		b := pipeline.New("ghost", pipeline.WithObserver(obs))
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2, 3)), &pipelinetest.Collector[int]{})
		_, err := b.Build()
		return err
	}
	require.NoError(t, build(refuser))
	require.Error(t, build(observer.Multi(o, refuser)))
	for k := range flat(collect(t, reader)) {
		assert.False(t, strings.Contains(k, "{ghost/"), "series of a pipeline Build never returned: %s", k)
	}
}
