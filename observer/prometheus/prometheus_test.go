package prometheus_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/prometheus"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

var (
	errFlaky = resilience.MarkTransient(errors.New("flaky"))
	errBad   = errors.New("bad item")
)

func ints(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// scripted builds a pipeline of six nodes with a known outcome for each of
// ten items: src → price (item 3 retried twice) → ship (item 6 retried once,
// then dead-lettered) → check (item 8 skipped, no retry) → even (odd items
// filtered) → store.
func scripted(t *testing.T, clock clockwork.Clock, obs observer.Observer) *pipeline.Pipeline {
	t.Helper()
	b := pipeline.New("orders", pipeline.WithClock(clock), pipeline.WithObserver(obs),
		pipeline.WithDeadLetter(deadletter.NewMemory(10)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.Backoff = resilience.Constant(time.Second)
			o.NodeRetry.MaxRetries = 0
		}))
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...))
	price := pipeline.Transform[int, int](b, "price", src, pipelinetest.NewFaults(map[int][]error{3: {errFlaky, errFlaky}}))
	ship := pipeline.Transform[int, int](b, "ship", price, pipelinetest.FailAlways(errFlaky, 6),
		pipeline.NodeResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 1
			o.OnItemFailure = resilience.DeadLetter
		}))
	check := pipeline.Transform[int, int](b, "check", ship, pipelinetest.FailAlways(errBad, 8),
		pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))
	even := pipeline.Filter(b, "even", check, func(x int) bool { return x%2 == 0 })
	pipeline.Sink(b, "store", even, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	return p
}

func TestScrapeAfterAScriptedRun(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	c := prometheus.New()
	p := scripted(t, clock, c)
	reg := promclient.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))

	run := pipelinetest.Start(t.Context(), p)
	res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Second)
	require.NoError(t, err)
	store, ok := res.Node("store")
	require.True(t, ok)
	require.Equal(t, int64(3), store.Out, "the script's outcome")

	golden, err := os.Open("testdata/scripted.prom")
	require.NoError(t, err)
	defer golden.Close()
	assert.NoError(t, testutil.GatherAndCompare(reg, golden))

	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

func TestCircuitStateGauge(t *testing.T) {
	t.Parallel()
	c := prometheus.New()
	b := pipeline.New("breaker", pipeline.WithObserver(c), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.NodeRetry.MaxRetries = 0
		o.OnItemFailure = resilience.Skip
		o.CircuitBreaker.Enabled = true
		o.CircuitBreaker.ConsecutiveFailures = 3
		o.CircuitBreaker.WhenOpen = resilience.OpenFail
	}))
	out := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...)),
		pipelinetest.FailAlways(errFlaky, ints(10)...))
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	reg := promclient.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	v, _ := gauge(t, reg, prometheus.CircuitState, "call")
	assert.Equal(t, float64(resilience.CircuitClosed), v)

	_, err = p.Run(t.Context())
	require.ErrorIs(t, err, resilience.ErrCircuitOpen)
	v, _ = gauge(t, reg, prometheus.CircuitState, "call")
	assert.Equal(t, float64(resilience.CircuitOpen), v, "the breaker stays open after the run")
	assert.Equal(t, 1.0, v)
}
