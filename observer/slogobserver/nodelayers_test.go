package slogobserver_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/resilience"
)

// A node's own retry layers running out (node_restart, node_retry) are
// logged each time, with no reason, never summed up: the table in
// docs/observability.md said every "retries exhausted" line had a reason
// (a review's finding; the table now says which).
func TestNodeLayersExhaustedAreLoggedEachTime(t *testing.T) {
	t.Parallel()
	obs, h, _ := quiet(t)
	for _, k := range []resilience.RetryKind{resilience.NodeRestart, resilience.NodeRestart, resilience.NodeRetry} {
		obs.OnRetryExhausted(observer.RetryExhaustedEvent{Event: ev("src", 0), Kind: k, Attempts: 3,
			Limit: resilience.LimitCount, Err: errors.New("conn 7 refused")})
	}
	obs.Flush()
	got := h.lines()
	require.Len(t, got, 3, "one record each, no summary")
	for _, l := range got {
		assert.Equal(t, "retries exhausted", l["msg"])
		_, has := l["reason"]
		assert.False(t, has, "no reason: %v", l)
	}
	assert.Equal(t, "node_retry", got[2]["kind"])
}
