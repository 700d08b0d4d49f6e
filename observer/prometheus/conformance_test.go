package prometheus_test

import (
	"fmt"
	"maps"
	"testing"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/observer/observertest"
	"github.com/sluicehq/sluice/observer/prometheus"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	c := prometheus.New()
	reg := promclient.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	observertest.Run(t, observertest.Subject{
		Observer: c,
		Events:   []observertest.Event{observertest.Retry, observertest.RetryExhausted, observertest.DeadLetter, observertest.Drop},
		Counts:   func() (observertest.Counts, error) { return scraped(reg) },
	})
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// scraped reads the events a registry's metrics account for. Retries are
// counted twice, by the engine's counter and by the delay histogram fed
// from events: both must agree.
func scraped(g promclient.Gatherer) (observertest.Counts, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	counts, delays := observertest.Counts{}, observertest.Counts{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := func(ev observertest.Event, detail bool) observertest.Key {
				k := observertest.Key{Event: ev, Pipeline: label(m, "pipeline"), Node: label(m, "node")}
				if detail {
					k.Detail = label(m, "kind")
				}
				return k
			}
			switch mf.GetName() {
			case prometheus.Retries:
				counts.Add(key(observertest.Retry, true), int(m.GetCounter().GetValue()))
			case prometheus.RetryDelay:
				delays.Add(key(observertest.Retry, true), int(m.GetHistogram().GetSampleCount()))
			case prometheus.RetriesExhausted:
				counts.Add(key(observertest.RetryExhausted, true), int(m.GetCounter().GetValue()))
			case prometheus.DeadLetters:
				counts.Add(key(observertest.DeadLetter, false), int(m.GetCounter().GetValue()))
			case prometheus.Drops:
				counts.Add(key(observertest.Drop, false), int(m.GetCounter().GetValue()))
			}
		}
	}
	if retries := counts.Only(observertest.Retry); !maps.Equal(retries, delays) {
		return nil, fmt.Errorf("%s says %v, %s counts %v", prometheus.Retries, retries, prometheus.RetryDelay, delays)
	}
	return counts, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
