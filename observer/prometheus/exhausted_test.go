package prometheus_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/prometheus"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// exhaustedSeries returns the exhausted-retries series of reg, as
// "node kind limit".
func exhaustedSeries(t *testing.T, reg *promclient.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != prometheus.RetriesExhausted {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			out = append(out, strings.Join([]string{l["node"], l["kind"], l["limit"]}, " "))
		}
	}
	slices.Sort(out)
	return out
}

// Only the layers and limits that can end a node's retries have an
// exhausted series before they move: none for a node without retries, no
// item retries for a source or a filter, no elapsed limit without
// MaxElapsed, no budget without a retry budget.
func TestExhaustedSeriesOnlyWhereRetriesCanRunOut(t *testing.T) {
	t.Parallel()
	c := prometheus.New()
	b := pipeline.New("orders", pipeline.WithClock(clockwork.NewFakeClock()), pipeline.WithObserver(c),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.NodeRestart.MaxRestarts = 0
			o.NodeRetry.MaxRetries = 0
		}))
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2, 3),
		pipeline.NodeResilience(func(o *resilience.Options) { o.NodeRetry.MaxRetries = 3 }))
	work := pipeline.Transform[int, int](b, "work", src, pipelinetest.NewFaults(map[int][]error{}),
		pipeline.NodeResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.MaxElapsed = time.Minute
			o.NodeRestart.MaxRestarts = 1
		}))
	kept := pipeline.Filter(b, "keep", work, func(int) bool { return true },
		pipeline.NodeResilience(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 5 }))
	pipeline.Sink(b, "store", kept, &pipelinetest.Collector[int]{},
		pipeline.NodeResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 1
			o.RetryBudget = resilience.NewBudget(resilience.BudgetOptions{Ratio: 0.1})
		}))
	_, err := b.Build()
	require.NoError(t, err)
	reg := promclient.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))

	assert.Equal(t, []string{
		"src node_retry count",
		"store item_retry budget",
		"store item_retry count",
		"work item_retry count",
		"work item_retry elapsed",
		"work node_restart count",
	}, exhaustedSeries(t, reg))

	// A series that no option armed still appears when it moves.
	c.OnRetryExhausted(observer.RetryExhaustedEvent{Event: observer.Event{Pipeline: "orders", Node: "keep"},
		Kind: resilience.ItemRetry, Limit: resilience.LimitCount})
	assert.Contains(t, exhaustedSeries(t, reg), "keep item_retry count")
}

// Broker retries, hand-offs and late items have series of their own, apart from dead
// letters, for the nodes that counted some.
func TestBrokerRetriesAndHandOffsExported(t *testing.T) {
	t.Parallel()
	c := prometheus.New()
	require.NoError(t, c.UseStats(statsFunc(func() observer.Stats {
		return observer.Stats{Pipeline: "orders", Nodes: []observer.NodeStats{
			{Node: "src", Kind: observer.KindSource},
			{Node: "handle", Kind: observer.KindTransform, DeadLettered: 3, BrokerRetries: 97, HandedOff: 4},
			{Node: "hourly", Kind: observer.KindAggregate, DeadLettered: 5, Late: 5},
		}}
	})))
	reg := promclient.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "node" {
					if got[mf.GetName()] == nil {
						got[mf.GetName()] = map[string]float64{}
					}
					got[mf.GetName()][lp.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	assert.Equal(t, map[string]float64{"src": 0, "handle": 3, "hourly": 5}, got[prometheus.DeadLetters])
	assert.Equal(t, map[string]float64{"hourly": 5}, got[prometheus.LateItems], "late items: a series for the nodes that counted some")
	assert.Equal(t, map[string]float64{"handle": 97}, got[prometheus.BrokerRetries])
	assert.Equal(t, map[string]float64{"handle": 4}, got[prometheus.HandedOff])
}
