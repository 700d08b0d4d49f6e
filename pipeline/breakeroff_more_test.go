package pipeline_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

func buildWithBreaker(pipe func(*resilience.Options), src, call []pipeline.NodeOption) error {
	var opts []pipeline.Option
	if pipe != nil {
		opts = append(opts, pipeline.WithResilience(pipe))
	}
	b := pipeline.New("breaker", opts...)
	out := pipeline.Transform(b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1), src...), double(), call...)
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	_, err := b.Build()
	return err
}

// A node may turn off a breaker the pipeline turned on by resetting it to
// resilience.DefaultCircuitBreaker(): fields equal to the profile's
// defaults are not settings, whatever WithResilience made.
func TestBreakerOffResetToDefaultsBuilds(t *testing.T) {
	t.Parallel()
	err := buildWithBreaker(
		func(o *resilience.Options) {
			o.CircuitBreaker.Enabled = true
			o.CircuitBreaker.ConsecutiveFailures = 3
			o.CircuitBreaker.OpenDuration = 10 * time.Second
		}, nil,
		[]pipeline.NodeOption{pipeline.NodeResilience(func(o *resilience.Options) {
			o.CircuitBreaker = resilience.DefaultCircuitBreaker()
		})})
	assert.NoError(t, err, "a node resetting its breaker to the documented defaults (off) is refused")
}

// The same with one field: the node turns the breaker off and sets
// OpenDuration to its documented default, 30 s, which Build accepts.
func TestBreakerOffFieldEqualToDefaultBuilds(t *testing.T) {
	t.Parallel()
	err := buildWithBreaker(
		func(o *resilience.Options) {
			o.CircuitBreaker.Enabled = true
			o.CircuitBreaker.OpenDuration = 10 * time.Second
		}, nil,
		[]pipeline.NodeOption{pipeline.NodeResilience(func(o *resilience.Options) {
			o.CircuitBreaker.Enabled = false
			o.CircuitBreaker.OpenDuration = 30 * time.Second
		})})
	assert.NoError(t, err, "a field set to its documented default is refused")
}

// Pipeline-wide breaker settings need a node whose breaker runs: Enabled
// on a source, where a breaker guards nothing, does not count, and Build
// says the settings do nothing.
func TestBreakerEnabledOnlyOnSourceIsRefused(t *testing.T) {
	t.Parallel()
	err := buildWithBreaker(
		func(o *resilience.Options) {
			o.CircuitBreaker.ConsecutiveFailures = 2
			o.CircuitBreaker.WhenOpen = resilience.OpenPause
		},
		[]pipeline.NodeOption{pipeline.NodeResilience(func(o *resilience.Options) { o.CircuitBreaker.Enabled = true })},
		nil)
	require.Error(t, err, "no transform or sink has a breaker, yet the pipeline's breaker settings are accepted")
}
