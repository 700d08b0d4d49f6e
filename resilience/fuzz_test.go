package resilience_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/resilience"
)

// FuzzDelayFor checks that no Backoff, valid or not, gives a negative delay
// or one above its MaxDelay, and that validating never panics.
func FuzzDelayFor(f *testing.F) {
	f.Add(uint8(resilience.BackoffExponential), int64(time.Hour), 2.0, int64(0), uint8(resilience.JitterFull), 1000, uint64(1))
	f.Add(uint8(resilience.BackoffLinear), int64(time.Millisecond), 0.0, int64(time.Second), uint8(resilience.JitterEqual), 7, uint64(2))
	f.Add(uint8(resilience.BackoffConstant), int64(-5), math.NaN(), int64(-1), uint8(9), -3, uint64(3))
	f.Add(uint8(resilience.BackoffExponential), int64(math.MaxInt64), math.Inf(1), int64(math.MaxInt64), uint8(resilience.JitterFull), math.MaxInt, uint64(4))
	f.Add(uint8(resilience.BackoffCustom), int64(time.Second), 1.5, int64(time.Minute), uint8(resilience.JitterNone), 3, uint64(5))
	f.Fuzz(func(t *testing.T, kind uint8, base int64, factor float64, maxDelay int64, jitter uint8, n int, seed uint64) {
		b := resilience.Backoff{
			Kind:     resilience.BackoffKind(kind % 6),
			Base:     time.Duration(base),
			Factor:   factor,
			MaxDelay: time.Duration(maxDelay),
			Jitter:   resilience.Jitter(jitter % 4),
		}
		if b.Kind == resilience.BackoffCustom {
			b.Custom = func(retry int) time.Duration { return time.Duration(base) * time.Duration(retry) }
		}
		_ = b.Validate()
		_ = b.String()
		r := rand.New(rand.NewPCG(seed, seed))
		d := b.DelayForRand(n, r)
		if d < 0 {
			t.Fatalf("%+v: DelayFor(%d) = %s, negative", b, n, d)
		}
		if b.MaxDelay > 0 && d > b.MaxDelay {
			t.Fatalf("%+v: DelayFor(%d) = %s, above MaxDelay %s", b, n, d, b.MaxDelay)
		}
		if nom := b.Nominal(n); d > nom {
			t.Fatalf("%+v: DelayFor(%d) = %s, above its nominal %s", b, n, d, nom)
		}
	})
}

// FuzzOptionsValidate checks that Validate never panics on any settings.
func FuzzOptionsValidate(f *testing.F) {
	f.Add(3, uint8(3), int64(200), 2.0, 0, 10000, -1, true, 5, 0.5, 20, int64(0), uint8(1), uint8(2))
	f.Add(-1, uint8(9), int64(-1), math.NaN(), 1000, -1, 0, true, 0, math.Inf(1), -1, int64(-1), uint8(9), uint8(9))
	f.Fuzz(func(t *testing.T, retries int, kind uint8, base int64, factor float64, restarts, window, reset int,
		breaker bool, consecutive int, rate float64, minCalls int, dur int64, whenOpen, onFailure uint8) {
		o := resilience.Options{
			ItemRetry: resilience.ItemRetryOptions{MaxRetries: retries, Backoff: resilience.Backoff{
				Kind: resilience.BackoffKind(kind), Base: time.Duration(base), Factor: factor}},
			NodeRestart: resilience.NodeRestartOptions{MaxRestarts: restarts, MaxReplayWindow: window, ResetAfterItems: reset},
			NodeRetry:   resilience.NodeRetryOptions{MaxRetries: retries},
			CircuitBreaker: resilience.CircuitBreakerOptions{
				Enabled: breaker, ConsecutiveFailures: consecutive, FailureRate: rate, MinimumCalls: minCalls,
				Window: time.Duration(dur), OpenDuration: time.Duration(dur), HalfOpenProbes: minCalls,
				ProbeSuccesses: consecutive, WhenOpen: resilience.OpenAction(whenOpen), MaxPause: time.Duration(dur),
			},
			OnItemFailure: resilience.FailureAction(onFailure),
		}
		_ = o.Validate()
	})
}
