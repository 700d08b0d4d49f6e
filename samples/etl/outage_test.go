package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/resilience"
)

// The breaker reports its transitions after it unlocks, so parallel
// workers' transitions can reach the observer out of order: the demo's
// outages follow CircuitEvent.Generation, not arrival. Here the
// Closed->Open of a second outage (gen 4) arrives before the
// HalfOpen->Closed that ended the first (gen 3).
func TestOutagesFollowGenerationNotArrival(t *testing.T) {
	t.Parallel()
	tr := &tracker{reasons: map[reason]int{}}
	ev := func(gen uint64, from, to resilience.CircuitState) {
		tr.OnCircuitStateChanged(observer.CircuitEvent{
			Event: observer.Event{Node: "enrich"}, From: from, To: to, Generation: gen})
	}
	ev(1, resilience.CircuitClosed, resilience.CircuitOpen)
	ev(2, resilience.CircuitOpen, resilience.CircuitHalfOpen)
	ev(4, resilience.CircuitClosed, resilience.CircuitOpen) // arrives first
	ev(3, resilience.CircuitHalfOpen, resilience.CircuitClosed)
	assert.Equal(t, []outage{
		{opened: 1, failedProbes: 0, closed: true},
		{opened: 1, failedProbes: 0, closed: false},
	}, tr.breakerOutages())
}
