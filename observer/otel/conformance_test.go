package otel_test

import (
	"fmt"
	"maps"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/sluice/observer/observertest"
	"github.com/sluicehq/sluice/observer/otel"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	o, reader := newObserver(t)
	observertest.Run(t, observertest.Subject{
		Observer: o,
		Events:   []observertest.Event{observertest.Retry, observertest.RetryExhausted, observertest.DeadLetter, observertest.Drop},
		Counts:   func() (observertest.Counts, error) { return collected(t, reader) },
	})
}

// collected reads the events the SDK's data accounts for. Retries are
// counted twice, by the engine's counter and by the delay histogram fed
// from events: both must agree.
func collected(t *testing.T, r *sdkmetric.ManualReader) (observertest.Counts, error) {
	counts, delays := observertest.Counts{}, observertest.Counts{}
	key := func(ev observertest.Event, set attribute.Set) observertest.Key {
		pl, _ := set.Value(otel.AttrPipeline)
		n, _ := set.Value(otel.AttrNode)
		k, _ := set.Value(otel.AttrKind)
		return observertest.Key{Event: ev, Pipeline: pl.AsString(), Node: n.AsString(), Detail: k.AsString()}
	}
	events := map[string]observertest.Event{
		otel.Retries: observertest.Retry, otel.RetriesExhausted: observertest.RetryExhausted,
		otel.DeadLetters: observertest.DeadLetter, otel.Drops: observertest.Drop,
	}
	for _, m := range collect(t, r) {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			if ev, ok := events[m.Name]; ok {
				for _, dp := range d.DataPoints {
					counts.Add(key(ev, dp.Attributes), int(dp.Value))
				}
			}
		case metricdata.Histogram[float64]:
			for _, dp := range d.DataPoints {
				delays.Add(key(observertest.Retry, dp.Attributes), int(dp.Count))
			}
		}
	}
	if retries := counts.Only(observertest.Retry); !maps.Equal(retries, delays) {
		return nil, fmt.Errorf("%s says %v, %s counts %v", otel.Retries, retries, otel.RetryDelay, delays)
	}
	return counts, nil
}
