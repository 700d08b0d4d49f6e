package otel_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/otel"
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

// newObserver returns an Observer on an SDK whose reader the test collects
// from.
func newObserver(t *testing.T) (*otel.Observer, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(t.Context())) })
	o, err := otel.New(mp)
	require.NoError(t, err)
	return o, reader
}

func collect(t *testing.T, r *sdkmetric.ManualReader) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(t.Context(), &rm))
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name == otel.ScopeName {
			return sm.Metrics
		}
	}
	return nil
}

// flat returns every value collected, by name{pipeline/node kind}; a
// histogram gives its count and its sum.
func flat(ms []metricdata.Metrics) map[string]float64 {
	out := make(map[string]float64)
	key := func(name string, set attribute.Set) string {
		pl, _ := set.Value(otel.AttrPipeline)
		n, _ := set.Value(otel.AttrNode)
		k := fmt.Sprintf("%s{%s/%s", name, pl.AsString(), n.AsString())
		if kind, ok := set.Value(otel.AttrKind); ok {
			k += " " + kind.AsString()
		}
		if limit, ok := set.Value(otel.AttrLimit); ok {
			k += " " + limit.AsString()
		}
		return k + "}"
	}
	for _, m := range ms {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range d.DataPoints {
				out[key(m.Name, dp.Attributes)] = float64(dp.Value)
			}
		case metricdata.Gauge[int64]:
			for _, dp := range d.DataPoints {
				out[key(m.Name, dp.Attributes)] = float64(dp.Value)
			}
		case metricdata.Histogram[float64]:
			for _, dp := range d.DataPoints {
				out[key(m.Name+".count", dp.Attributes)] = float64(dp.Count)
				out[key(m.Name+".sum", dp.Attributes)] = dp.Sum
			}
		}
	}
	return out
}

// scripted builds the pipeline of the Prometheus plug-in's test: ten items;
// price retries item 3 twice, ship retries item 6 once and dead-letters it,
// check skips item 8, even filters the odd items, store writes 0, 2 and 4.
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

// expected returns the values after the scripted run: zero for every node
// but those set here.
func expected() map[string]float64 {
	want := make(map[string]float64)
	for _, n := range []string{"src", "price", "ship", "check", "even", "store"} {
		for _, name := range []string{otel.ItemsIn, otel.ItemsOut, otel.ItemsFailed, otel.ItemsFiltered, otel.DeadLetters, otel.Drops, otel.Fallbacks, otel.CircuitState} {
			want[name+"{orders/"+n+"}"] = 0
		}
		if n != "src" {
			want[otel.ItemsInFlight+"{orders/"+n+"}"] = 0
		}
		for _, k := range []string{"item_retry", "node_restart", "node_retry"} {
			want[otel.Retries+"{orders/"+n+" "+k+"}"] = 0
		}
	}
	// Exhaustion counters start at zero only where retries can run out:
	// the nodes that retry items (MaxRetries 2 or 1), by count.
	for _, n := range []string{"price", "ship", "check", "store"} {
		want[otel.RetriesExhausted+"{orders/"+n+" item_retry count}"] = 0
	}
	for k, v := range map[string]float64{
		"sluice.items.in{orders/price}": 10, "sluice.items.in{orders/ship}": 10, "sluice.items.in{orders/check}": 9,
		"sluice.items.in{orders/even}": 8, "sluice.items.in{orders/store}": 3,
		"sluice.items.out{orders/src}": 10, "sluice.items.out{orders/price}": 10, "sluice.items.out{orders/ship}": 9,
		"sluice.items.out{orders/check}": 8, "sluice.items.out{orders/even}": 3, "sluice.items.out{orders/store}": 3,
		"sluice.items.failed{orders/ship}": 1, "sluice.items.failed{orders/check}": 1,
		"sluice.items.filtered{orders/even}":                     5,
		"sluice.dead_letters{orders/ship}":                       1,
		"sluice.drops{orders/check}":                             1,
		"sluice.retries{orders/price item_retry}":                2,
		"sluice.retries{orders/ship item_retry}":                 1,
		"sluice.retries.exhausted{orders/ship item_retry count}": 1,
		"sluice.retry.delay.count{orders/price item_retry}":      2, "sluice.retry.delay.sum{orders/price item_retry}": 2,
		"sluice.retry.delay.count{orders/ship item_retry}": 1, "sluice.retry.delay.sum{orders/ship item_retry}": 1,
	} {
		want[k] = v
	}
	return want
}

func TestCollectAfterAScriptedRun(t *testing.T) {
	t.Parallel()
	o, reader := newObserver(t)
	clock := clockwork.NewFakeClock()
	p := scripted(t, clock, o)

	run := pipelinetest.Start(t.Context(), p)
	_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Second)
	require.NoError(t, err)
	ms := collect(t, reader)
	assert.Equal(t, expected(), flat(ms))

	// The kinds, units and bucket counts, as the SDK reports them.
	byName := make(map[string]metricdata.Metrics)
	for _, m := range ms {
		byName[m.Name] = m
	}
	nodeAttrs := func(n string) attribute.Set {
		return attribute.NewSet(otel.AttrPipeline.String("orders"), otel.AttrNode.String(n))
	}
	var outs []metricdata.DataPoint[int64]
	for n, v := range map[string]int64{"src": 10, "price": 10, "ship": 9, "check": 8, "even": 3, "store": 3} {
		outs = append(outs, metricdata.DataPoint[int64]{Attributes: nodeAttrs(n), Value: v})
	}
	metricdatatest.AssertEqual(t, metricdata.Metrics{
		Name:        otel.ItemsOut,
		Description: "Items a node handed downstream; for a sink, items written.",
		Unit:        "{item}",
		Data:        metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: outs},
	}, byName[otel.ItemsOut], metricdatatest.IgnoreTimestamp())

	bounds := []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	buckets := func(n uint64) []uint64 {
		b := make([]uint64, len(bounds)+1)
		b[7] = n // the bucket (0.5, 1]
		return b
	}
	kindAttrs := func(n string) attribute.Set {
		return attribute.NewSet(otel.AttrPipeline.String("orders"), otel.AttrNode.String(n), otel.AttrKind.String("item_retry"))
	}
	metricdatatest.AssertEqual(t, metricdata.Metrics{
		Name:        otel.RetryDelay,
		Description: "Delays chosen before retries, jitter included, in seconds, by layer (kind).",
		Unit:        "s",
		Data: metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality, DataPoints: []metricdata.HistogramDataPoint[float64]{
			{Attributes: kindAttrs("price"), Count: 2, Sum: 2, Bounds: bounds, BucketCounts: buckets(2),
				Min: metricdata.NewExtrema(1.0), Max: metricdata.NewExtrema(1.0)},
			{Attributes: kindAttrs("ship"), Count: 1, Sum: 1, Bounds: bounds, BucketCounts: buckets(1),
				Min: metricdata.NewExtrema(1.0), Max: metricdata.NewExtrema(1.0)},
		}},
	}, byName[otel.RetryDelay], metricdatatest.IgnoreTimestamp())

	assert.IsType(t, metricdata.Gauge[int64]{}, byName[otel.CircuitState].Data)
	inFlight, ok := byName[otel.ItemsInFlight].Data.(metricdata.Sum[int64])
	require.True(t, ok)
	assert.False(t, inFlight.IsMonotonic, "items in flight go up and down")
}

func TestObserveAndClose(t *testing.T) {
	t.Parallel()
	o, reader := newObserver(t)
	build := func() *pipeline.Pipeline {
		b := pipeline.New("twice", pipeline.WithObserver(o))
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2)), &pipelinetest.Collector[int]{})
		p, err := b.Build()
		require.NoError(t, err)
		return p
	}
	p := build()
	assert.NoError(t, o.UseStats(p), "observing the same pipeline again does nothing")
	b := pipeline.New("twice", pipeline.WithObserver(o))
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2)), &pipelinetest.Collector[int]{})
	_, err := b.Build()
	assert.EqualError(t, err, `pipeline "twice": observer: otel: a pipeline named "twice" is already observed`)
	assert.EqualError(t, o.UseStats(nil), "otel: UseStats: nil reader")

	_, err = p.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 2.0, flat(collect(t, reader))["sluice.items.out{twice/src}"])
	require.NoError(t, o.Close())
	_, ok := flat(collect(t, reader))["sluice.items.out{twice/src}"]
	assert.False(t, ok, "after Close the counters are no longer read")
}
