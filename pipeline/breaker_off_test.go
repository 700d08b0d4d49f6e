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

// Breaker settings made while the breaker is off do nothing, so Build
// refuses them, naming the node and the field; the defaults every node
// starts from, set but off, are no such setting.
func TestBuildRefusesBreakerSettingsWithoutEnabled(t *testing.T) {
	t.Parallel()
	const off = "set, but CircuitBreaker.Enabled is false, so the breaker is off and the setting does nothing: set Enabled to true to turn it on"
	const offPipeline = "set by WithResilience, but no node sets CircuitBreaker.Enabled to true, so no breaker is on and the setting does nothing"
	for _, tc := range []struct {
		name       string
		pipe, call func(*resilience.Options)
		profile    resilience.Profile
		want       []string // nil: Build succeeds
	}{
		{name: "defaults untouched"},
		{name: "high-throughput defaults untouched", profile: resilience.ProfileHighThroughput},
		{
			name: "node settings without Enabled",
			call: func(o *resilience.Options) {
				o.CircuitBreaker.ConsecutiveFailures = 3
				o.CircuitBreaker.OpenDuration = 10 * time.Second
				o.CircuitBreaker.WhenOpen = resilience.OpenPause
			},
			want: []string{
				"call: resilience: CircuitBreaker.ConsecutiveFailures = 3: " + off,
				"call: resilience: CircuitBreaker.OpenDuration = 10s: " + off,
				"call: resilience: CircuitBreaker.WhenOpen = pause: " + off,
			},
		},
		{
			name:    "node setting without Enabled, high-throughput profile",
			profile: resilience.ProfileHighThroughput,
			call:    func(o *resilience.Options) { o.CircuitBreaker.FailureRate = 0.5 },
			want:    []string{"call: resilience: CircuitBreaker.FailureRate = 0.5: " + off},
		},
		{
			name: "node settings with Enabled",
			call: func(o *resilience.Options) {
				o.CircuitBreaker.Enabled = true
				o.CircuitBreaker.OpenDuration = 10 * time.Second
			},
		},
		{
			name: "a setting back to zero turns a condition off: not refused",
			call: func(o *resilience.Options) { o.CircuitBreaker.ConsecutiveFailures = 0 },
		},
		{
			name: "a setting equal to the default is not told from the default",
			call: func(o *resilience.Options) { o.CircuitBreaker.OpenDuration = 30 * time.Second },
		},
		{
			name: "pipeline settings, one node turns the breaker on",
			pipe: func(o *resilience.Options) { o.CircuitBreaker.OpenDuration = 10 * time.Second },
			call: func(o *resilience.Options) { o.CircuitBreaker.Enabled = true },
		},
		{
			name: "pipeline settings, no node turns the breaker on",
			pipe: func(o *resilience.Options) {
				o.CircuitBreaker.OpenDuration = 10 * time.Second
				o.CircuitBreaker.MaxPause = time.Minute
			},
			want: []string{
				": resilience: CircuitBreaker.OpenDuration = 10s: " + offPipeline,
				": resilience: CircuitBreaker.MaxPause = 1m0s: " + offPipeline,
			},
		},
		{
			name: "pipeline turns the breaker on, the node turns it off again",
			pipe: func(o *resilience.Options) {
				o.CircuitBreaker.Enabled = true
				o.CircuitBreaker.OpenDuration = 10 * time.Second
			},
			call: func(o *resilience.Options) { o.CircuitBreaker.Enabled = false },
		},
		{
			name: "pipeline turns the breaker on, the node turns it off and changes it",
			pipe: func(o *resilience.Options) { o.CircuitBreaker.Enabled = true },
			call: func(o *resilience.Options) {
				o.CircuitBreaker.Enabled = false
				o.CircuitBreaker.HalfOpenProbes = 2
			},
			want: []string{"call: resilience: CircuitBreaker.HalfOpenProbes = 2: " + off},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := []pipeline.Option{pipeline.WithProfile(tc.profile)}
			if tc.pipe != nil {
				opts = append(opts, pipeline.WithResilience(tc.pipe))
			}
			var nodeOpts []pipeline.NodeOption
			if tc.call != nil {
				nodeOpts = append(nodeOpts, pipeline.NodeResilience(tc.call))
			}
			b := pipeline.New("breaker-off", opts...)
			out := pipeline.Transform(b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)), double(), nodeOpts...)
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
			_, err := b.Build()
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, resilience.ErrInvalidOptions, "each is an OptionError")
			assert.ElementsMatch(t, tc.want, problems(t, err))
		})
	}
}

// The refusal reads well in full: pipeline, node, field, value and what
// to do.
func TestBreakerSettingsWithoutEnabledMessage(t *testing.T) {
	t.Parallel()
	b := pipeline.New("orders")
	out := pipeline.Transform(b, "price", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)), double(),
		pipeline.NodeResilience(func(o *resilience.Options) { o.CircuitBreaker.WhenOpen = resilience.OpenPause }))
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	_, err := b.Build()
	require.Error(t, err)
	assert.EqualError(t, err, `pipeline "orders": node "price": resilience: CircuitBreaker.WhenOpen = pause: `+
		`set, but CircuitBreaker.Enabled is false, so the breaker is off and the setting does nothing: set Enabled to true to turn it on`)
}
