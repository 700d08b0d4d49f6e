package resilience_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
)

const ms = time.Millisecond

func TestBackoffCurves(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		b    resilience.Backoff
		want [6]time.Duration // retries 1..6
	}{
		{"zero value", resilience.Backoff{}, [6]time.Duration{}},
		{"none", resilience.NoBackoff(), [6]time.Duration{}},
		{"constant", resilience.Constant(50 * ms), [6]time.Duration{50 * ms, 50 * ms, 50 * ms, 50 * ms, 50 * ms, 50 * ms}},
		{"linear", resilience.Linear(100 * ms).WithJitter(resilience.JitterNone),
			[6]time.Duration{100 * ms, 200 * ms, 300 * ms, 400 * ms, 500 * ms, 600 * ms}},
		{"linear capped", resilience.Linear(100 * ms).WithJitter(resilience.JitterNone).WithMaxDelay(250 * ms),
			[6]time.Duration{100 * ms, 200 * ms, 250 * ms, 250 * ms, 250 * ms, 250 * ms}},
		{"exponential", resilience.Exponential(100 * ms).WithJitter(resilience.JitterNone),
			[6]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms}},
		{"exponential capped", resilience.Exponential(100 * ms).WithJitter(resilience.JitterNone).WithMaxDelay(500 * ms),
			[6]time.Duration{100 * ms, 200 * ms, 400 * ms, 500 * ms, 500 * ms, 500 * ms}},
		{"exponential factor 3", resilience.Exponential(10 * ms).WithFactor(3).WithJitter(resilience.JitterNone),
			[6]time.Duration{10 * ms, 30 * ms, 90 * ms, 270 * ms, 810 * ms, 2430 * ms}},
		{"exponential factor 1.5", resilience.Exponential(100 * ms).WithFactor(1.5).WithJitter(resilience.JitterNone),
			[6]time.Duration{100 * ms, 150 * ms, 225 * ms, 337500 * time.Microsecond, 506250 * time.Microsecond, 759375 * time.Microsecond}},
		{"custom", resilience.Custom(func(n int) time.Duration { return time.Duration(n*n) * ms }),
			[6]time.Duration{1 * ms, 4 * ms, 9 * ms, 16 * ms, 25 * ms, 36 * ms}},
		{"custom capped", resilience.Custom(func(n int) time.Duration { return time.Duration(n*n) * ms }).WithMaxDelay(10 * ms),
			[6]time.Duration{1 * ms, 4 * ms, 9 * ms, 10 * ms, 10 * ms, 10 * ms}},
		{"custom negative counts as zero", resilience.Custom(func(n int) time.Duration { return -time.Second }),
			[6]time.Duration{}},
		{"custom is never jittered", resilience.Custom(func(int) time.Duration { return time.Second }).WithJitter(resilience.JitterFull),
			[6]time.Duration{time.Second, time.Second, time.Second, time.Second, time.Second, time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for n := 1; n <= 6; n++ {
				assert.Equal(t, tt.want[n-1], tt.b.DelayFor(n), "retry %d", n)
				assert.Equal(t, tt.want[n-1], tt.b.Nominal(n), "nominal, retry %d", n)
			}
		})
	}
}

func TestBackoffDefaultJitterOfEachConstructor(t *testing.T) {
	t.Parallel()
	assert.Equal(t, resilience.JitterNone, resilience.NoBackoff().Jitter)
	assert.Equal(t, resilience.JitterNone, resilience.Constant(ms).Jitter)
	assert.Equal(t, resilience.JitterEqual, resilience.Linear(ms).Jitter)
	assert.Equal(t, resilience.JitterFull, resilience.Exponential(ms).Jitter)
	assert.Equal(t, 2.0, resilience.Exponential(ms).Factor)
	assert.Equal(t, resilience.JitterNone, resilience.Custom(func(int) time.Duration { return 0 }).Jitter)
}

func TestBackoffRetryBelowOneWaitsNothing(t *testing.T) {
	t.Parallel()
	b := resilience.Constant(time.Second)
	assert.Zero(t, b.DelayFor(0))
	assert.Zero(t, b.DelayFor(-3))
}

func TestBackoffSaturatesInsteadOfOverflowing(t *testing.T) {
	t.Parallel()
	exp := resilience.Exponential(time.Hour).WithJitter(resilience.JitterNone)
	for _, n := range []int{63, 64, 100, 1000, math.MaxInt32} {
		assert.Equal(t, resilience.MaxDuration, exp.DelayFor(n), "exponential retry %d", n)
	}
	lin := resilience.Linear(time.Hour).WithJitter(resilience.JitterNone)
	assert.Equal(t, resilience.MaxDuration, lin.DelayFor(math.MaxInt), "linear")
	// Jitter over a saturated delay stays within [0, MaxDuration].
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		d := resilience.Exponential(time.Hour).DelayForRand(1000, r)
		assert.GreaterOrEqual(t, d, time.Duration(0))
	}
	// A huge factor that overflows float64 to +Inf saturates too.
	huge := resilience.Exponential(time.Second).WithFactor(math.MaxFloat64).WithJitter(resilience.JitterNone)
	assert.Equal(t, resilience.MaxDuration, huge.DelayFor(3))
}

func TestBackoffZeroBaseExponentialIsZero(t *testing.T) {
	t.Parallel()
	// 0 × Inf is NaN in floating point; a NaN delay counts as 0.
	b := resilience.Exponential(0).WithFactor(math.MaxFloat64).WithJitter(resilience.JitterNone)
	assert.Zero(t, b.DelayFor(10))
}

func TestJitterBoundsAndSpread(t *testing.T) {
	t.Parallel()
	const samples = 20_000
	tests := []struct {
		name     string
		b        resilience.Backoff
		lo, hi   time.Duration // every sample in [lo, hi]
		meanWant time.Duration // expected mean
	}{
		{"full", resilience.Constant(time.Second).WithJitter(resilience.JitterFull), 0, time.Second, 500 * ms},
		{"equal", resilience.Constant(time.Second).WithJitter(resilience.JitterEqual), 500 * ms, time.Second, 750 * ms},
		{"full at the cap", resilience.Exponential(time.Second).WithMaxDelay(2 * time.Second), 0, 2 * time.Second, time.Second},
		{"equal at the cap", resilience.Linear(time.Second).WithMaxDelay(2 * time.Second), time.Second, 2 * time.Second, 1500 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(42, 7))
			var sum float64
			var quarters [4]int
			for range samples {
				d := tt.b.DelayForRand(6, r)
				require.GreaterOrEqual(t, d, tt.lo)
				require.LessOrEqual(t, d, tt.hi)
				sum += float64(d)
				q := int(float64(d-tt.lo) / float64(tt.hi-tt.lo) * 4)
				quarters[min(q, 3)]++
			}
			mean := time.Duration(sum / samples)
			assert.InDelta(t, float64(tt.meanWant), float64(mean), float64(tt.hi-tt.lo)*0.02, "mean")
			// Uniform spread: each quarter of the range holds about a quarter
			// of the samples.
			for i, c := range quarters {
				assert.InDelta(t, samples/4, c, samples*0.02, "quarter %d", i)
			}
		})
	}
}

func TestJitterIsRepeatableWithASeededRand(t *testing.T) {
	t.Parallel()
	b := resilience.Exponential(100 * ms)
	r1 := rand.New(rand.NewPCG(9, 9))
	r2 := rand.New(rand.NewPCG(9, 9))
	for n := 1; n <= 20; n++ {
		assert.Equal(t, b.DelayForRand(n, r1), b.DelayForRand(n, r2))
	}
}

func TestBackoffTotalDelay(t *testing.T) {
	t.Parallel()
	b := resilience.Exponential(100 * ms).WithMaxDelay(500 * ms)
	assert.Equal(t, 100*ms+200*ms+400*ms+500*ms+500*ms, b.TotalDelay(5))
	assert.Zero(t, b.TotalDelay(0))
	assert.Equal(t, resilience.MaxDuration, resilience.Exponential(time.Hour).TotalDelay(100))
}

func TestBackoffValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		b      resilience.Backoff
		fields []string // the fields named by the errors, in order; none means valid
	}{
		{"zero value", resilience.Backoff{}, nil},
		{"every constructor", resilience.Exponential(ms).WithMaxDelay(time.Second), nil},
		{"linear", resilience.Linear(ms), nil},
		{"custom", resilience.Custom(func(int) time.Duration { return 0 }), nil},
		{"negative base", resilience.Constant(-ms), []string{"Base"}},
		{"negative max", resilience.Constant(ms).WithMaxDelay(-1), []string{"MaxDelay"}},
		{"factor below one", resilience.Exponential(ms).WithFactor(0.5), []string{"Factor"}},
		{"factor NaN", resilience.Exponential(ms).WithFactor(math.NaN()), []string{"Factor"}},
		{"factor infinite", resilience.Exponential(ms).WithFactor(math.Inf(1)), []string{"Factor"}},
		{"exponential without factor", resilience.Backoff{Kind: resilience.BackoffExponential, Base: ms}, []string{"Factor"}},
		{"custom without function", resilience.Backoff{Kind: resilience.BackoffCustom}, []string{"Custom"}},
		{"unknown kind", resilience.Backoff{Kind: 99}, []string{"Kind"}},
		{"unknown jitter", resilience.Constant(ms).WithJitter(7), []string{"Jitter"}},
		{"every problem at once", resilience.Backoff{Kind: 99, Jitter: 7, Base: -1, MaxDelay: -1, Factor: 0.1},
			[]string{"Kind", "Jitter", "Base", "MaxDelay", "Factor"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.b.Validate()
			if tt.fields == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, resilience.ErrInvalidOptions)
			assert.Equal(t, tt.fields, optionFields(err))
		})
	}
}

func TestBackoffValidateMessageSaysFieldAndWhy(t *testing.T) {
	t.Parallel()
	err := resilience.Exponential(ms).WithFactor(0.5).Validate()
	require.Error(t, err)
	assert.Equal(t, "resilience: Factor = 0.5: must be at least 1: a smaller factor shrinks the delays", err.Error())
}

func TestBackoffString(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "exponential 200ms×2^(n-1) max 30s jitter full",
		resilience.Exponential(200*ms).WithMaxDelay(30*time.Second).String())
	assert.Equal(t, "constant 1s", resilience.Constant(time.Second).String())
	assert.Equal(t, "none", resilience.Backoff{}.String())
}
