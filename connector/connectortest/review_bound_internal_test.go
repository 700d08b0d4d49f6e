package connectortest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A failRecorder is a test whose assertion failures are recorded, not
// reported: the review test checks whether checkDuplicates would fail a
// case.
type failRecorder struct {
	testing.TB
	failures []string
}

func (r *failRecorder) Errorf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

// TestResetDuplicateBoundTrips: checkDuplicates allows a
// write in flight (the publisher's case: 4, its parallelism) or a prefetch
// (the source's) of duplicates for every connection opened through the
// proxy since the fault began. reset_peer is applied to fresh connections
// too, and each of them is reset at its first byte (the protocol header)
// before it carries a single publish or delivery, so each failed
// reconnection raises the allowance without being able to cost a
// duplicate. In the RabbitMQ chaos run here Fault/reset_peer/Publish
// logged "0 duplicates, 14 connections through the proxy (1 when the
// fault began), 16 restarts or retries": the case then accepts 13 × 4 = 52
// duplicates, where a sound publisher can cost at most the 4 writes in
// flight on the connection the fault reset. A publisher that publishes
// 50 messages twice passes the case. The bound should count the
// connections that carried a write or a delivery (or the allowance once
// for a fault lifted at the first reconnection), not the connections
// attempted; a connector that thrashes harder earns a looser bound.
//
// Fails deterministically (no broker needed).
func TestResetDuplicateBoundTrips(t *testing.T) {
	var reset fault
	for _, f := range faults() {
		if f.name == "reset_peer" {
			reset = f
		}
	}
	// The figures of the chaos run's Fault/reset_peer/Publish: 14
	// connections, 1 when the fault began, 16 retries; 4 writes in
	// parallel.
	in := &injection{f: reset, px: &Proxy{accepted: 14}, connsAtFault: 1}
	counts := map[string]int{}
	for i, k := range keys(faultMessages) {
		counts[k] = 1
		if i < 50 {
			counts[k] = 2 // redelivered
		}
	}
	rec := &failRecorder{TB: t}
	const parallel = 4 // publishUnderFault's
	checkDuplicates(rec, in, counts, parallel, 16, 1)
	assert.NotEmpty(t, rec.failures,
		"50 duplicates of %d messages after one reset_peer fault (a sound publisher can cost at most its %d writes in flight) fail the case",
		faultMessages, parallel)
}

// TestPartitionWithoutReconnectionAllowsNoDuplicates: docs/connectors.md
// said (before the bound counted sessions) a fault that may end connections "costs at most a prefetch of
// duplicates ... for each connection opened since the fault began (each
// replaces one given up)". checkDuplicates takes max(opened, 1): a
// partition (3 s, shorter than either connector's heartbeat, so it ends no
// connection: both chaos runs here logged "0 duplicates, 1 connections
// through the proxy (1 when the fault began), 0 restarts or retries")
// still allows a prefetch of duplicates. With no connection opened since
// the fault and no restart, the doc's rule allows none, and a source that
// emits 20 messages twice on a connection that never broke passes the
// case.
//
// Fails deterministically (no broker needed).
func TestPartitionWithoutReconnectionAllowsNoDuplicates(t *testing.T) {
	var partition fault
	for _, f := range faults() {
		if f.name == "partition" {
			partition = f
		}
	}
	in := &injection{f: partition, px: &Proxy{accepted: 1}, connsAtFault: 1}
	counts := map[string]int{}
	for i, k := range keys(faultMessages) {
		counts[k] = 1
		if i < faultPrefetch {
			counts[k] = 2
		}
	}
	rec := &failRecorder{TB: t}
	checkDuplicates(rec, in, counts, faultPrefetch, 0, 1)
	assert.NotEmpty(t, rec.failures,
		"%d duplicates on the one connection the partition did not end, without a restart, fail the case", faultPrefetch)
}
