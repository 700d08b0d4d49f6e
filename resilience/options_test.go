package resilience_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
)

func TestProfiles(t *testing.T) {
	t.Parallel()
	d := resilience.ForProfile(resilience.ProfileDefault)
	require.NoError(t, d.Validate())
	assert.Equal(t, 3, d.ItemRetry.MaxRetries)
	assert.Equal(t, resilience.Exponential(200*ms).WithMaxDelay(30*time.Second), d.ItemRetry.Backoff)
	assert.Equal(t, resilience.JitterFull, d.ItemRetry.Backoff.Jitter)
	assert.Equal(t, resilience.Fail, d.OnItemFailure)
	assert.Equal(t, resilience.DefaultReplayWindow, d.NodeRestart.MaxReplayWindow)
	assert.False(t, d.CircuitBreaker.Enabled)

	h := resilience.ForProfile(resilience.ProfileHighThroughput)
	require.NoError(t, h.Validate())
	assert.Zero(t, h.ItemRetry.MaxRetries)
	assert.Zero(t, h.NodeRetry.MaxRetries)
	assert.Zero(t, h.NodeRestart.MaxRestarts)

	assert.NoError(t, resilience.Options{}.Validate(), "a zero Options is valid: it retries nothing")
}

func TestOptionsValidateJoinsEveryProblem(t *testing.T) {
	t.Parallel()
	o := resilience.ForProfile(resilience.ProfileDefault)
	o.ItemRetry.MaxRetries = -1
	o.ItemRetry.Backoff = o.ItemRetry.Backoff.WithFactor(0.5)
	o.NodeRestart.MaxRestarts = 101
	o.NodeRestart.MaxReplayWindow = 0
	o.NodeRestart.ResetAfterItems = -5
	o.NodeRetry.Backoff.Base = -time.Second
	o.CircuitBreaker.Enabled = true
	o.CircuitBreaker.OpenDuration = 0
	o.OnItemFailure = 9

	err := o.Validate()
	require.ErrorIs(t, err, resilience.ErrInvalidOptions)
	assert.Equal(t, []string{
		"ItemRetry.MaxRetries",
		"ItemRetry.Backoff.Factor",
		"NodeRestart.MaxRestarts",
		"NodeRestart.MaxReplayWindow",
		"NodeRestart.ResetAfterItems",
		"NodeRetry.Backoff.Base",
		"CircuitBreaker.OpenDuration",
		"OnItemFailure",
	}, optionFields(err))
	assert.Contains(t, err.Error(), "resilience: NodeRestart.MaxRestarts = 101: must be at most 100")
}

func TestMaxRepeatsIsTheLimit(t *testing.T) {
	t.Parallel()
	o := resilience.Options{}
	o.ItemRetry.MaxRetries = resilience.MaxRepeats
	o.NodeRetry.MaxRetries = resilience.MaxRepeats
	assert.NoError(t, o.Validate())
	o.NodeRetry.MaxRetries = resilience.MaxRepeats + 1
	assert.Equal(t, []string{"NodeRetry.MaxRetries"}, optionFields(o.Validate()))
}

func TestCircuitBreakerOptionsValidate(t *testing.T) {
	t.Parallel()
	on := func(f func(*resilience.CircuitBreakerOptions)) resilience.CircuitBreakerOptions {
		o := resilience.DefaultCircuitBreaker()
		o.Enabled = true
		f(&o)
		return o
	}
	tests := []struct {
		name   string
		o      resilience.CircuitBreakerOptions
		fields []string
	}{
		{"defaults", on(func(*resilience.CircuitBreakerOptions) {}), nil},
		{"disabled is never checked", resilience.CircuitBreakerOptions{ConsecutiveFailures: -1}, nil},
		{"rate only", on(func(o *resilience.CircuitBreakerOptions) { o.ConsecutiveFailures = 0; o.FailureRate = 0.5 }), nil},
		{"no trip condition", on(func(o *resilience.CircuitBreakerOptions) { o.ConsecutiveFailures = 0 }), []string{"ConsecutiveFailures"}},
		{"negative consecutive", on(func(o *resilience.CircuitBreakerOptions) { o.ConsecutiveFailures = -1; o.FailureRate = 0.5 }), []string{"ConsecutiveFailures"}},
		{"rate above one", on(func(o *resilience.CircuitBreakerOptions) { o.FailureRate = 1.5 }), []string{"FailureRate"}},
		{"rate NaN", on(func(o *resilience.CircuitBreakerOptions) { o.FailureRate = math.NaN() }), []string{"FailureRate"}},
		{"rate without minimum or window", on(func(o *resilience.CircuitBreakerOptions) {
			o.FailureRate = 0.5
			o.MinimumCalls = 0
			o.Window = 0
		}), []string{"MinimumCalls", "Window"}},
		{"zero counts and durations", on(func(o *resilience.CircuitBreakerOptions) {
			o.OpenDuration = 0
			o.HalfOpenProbes = 0
			o.ProbeSuccesses = 0
		}), []string{"OpenDuration", "HalfOpenProbes", "ProbeSuccesses"}},
		{"pause shorter than open", on(func(o *resilience.CircuitBreakerOptions) {
			o.WhenOpen = resilience.OpenPause
			o.MaxPause = o.OpenDuration - time.Second
		}), []string{"MaxPause"}},
		{"pause as long as open", on(func(o *resilience.CircuitBreakerOptions) {
			o.WhenOpen = resilience.OpenPause
			o.MaxPause = o.OpenDuration
		}), nil},
		{"unknown action", on(func(o *resilience.CircuitBreakerOptions) { o.WhenOpen = 5 }), []string{"WhenOpen"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.o.Validate()
			if tt.fields == nil {
				assert.NoError(t, err)
				return
			}
			assert.Equal(t, tt.fields, optionFields(err))
		})
	}
}

func TestEnumStrings(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "dead_letter", resilience.DeadLetter.String())
	assert.Equal(t, "skip", resilience.Skip.String())
	assert.Equal(t, "fail", resilience.Fail.String())
	assert.Equal(t, "pause", resilience.OpenPause.String())
	assert.Equal(t, "half_open", resilience.CircuitHalfOpen.String())
	assert.Equal(t, "high_throughput", resilience.ProfileHighThroughput.String())
	assert.Equal(t, "exponential", resilience.BackoffExponential.String())
	assert.Equal(t, "equal", resilience.JitterEqual.String())
}
