package otel_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/otel"
)

type statsFunc func() observer.Stats

func (f statsFunc) Stats() observer.Stats { return f() }

// Broker retries, hand-offs and late items are measured apart from dead letters, for
// the nodes that counted some; a node that cannot exhaust its retries has
// no exhaustion series.
func TestBrokerRetriesAndHandOffsMeasured(t *testing.T) {
	t.Parallel()
	o, reader := newObserver(t)
	require.NoError(t, o.UseStats(statsFunc(func() observer.Stats {
		return observer.Stats{Pipeline: "orders", Nodes: []observer.NodeStats{
			{Node: "src", Kind: observer.KindSource},
			{Node: "handle", Kind: observer.KindTransform, DeadLettered: 3, BrokerRetries: 97, HandedOff: 4},
			{Node: "hourly", Kind: observer.KindAggregate, DeadLettered: 5, Late: 5},
		}}
	})))
	got := flat(collect(t, reader))
	assert.Equal(t, float64(3), got[otel.DeadLetters+"{orders/handle}"])
	assert.Equal(t, float64(97), got[otel.BrokerRetries+"{orders/handle}"])
	assert.Equal(t, float64(4), got[otel.HandedOff+"{orders/handle}"])
	assert.NotContains(t, got, otel.BrokerRetries+"{orders/src}")
	assert.Equal(t, float64(5), got[otel.LateItems+"{orders/hourly}"])
	assert.NotContains(t, got, otel.LateItems+"{orders/handle}")
	for k := range got {
		assert.NotContains(t, k, otel.RetriesExhausted, "no node here can exhaust its retries")
	}
}
