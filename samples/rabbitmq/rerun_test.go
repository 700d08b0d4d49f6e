package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/servicetest"
)

// TestLeftoversOfAKeptQueueDoNotHideTheRun runs the sample on a kept queue
// (-keep) that holds messages an earlier, interrupted run left. Every run
// named its messages msg-0 to msg-<n-1>: the idempotent sink skipped the
// run's own messages as duplicates of the leftovers, and the run could stop
// before consuming its own. Now each run names its messages after itself:
// it delivers its n, and counts the leftovers apart.
func TestLeftoversOfAKeptQueueDoNotHideTheRun(t *testing.T) {
	url := servicetest.RabbitMQ(t)
	var out bytes.Buffer
	cfg := smallCfg(url, randomQueue("leftover"), &out)
	cfg.keep = true
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := run(ctx, cfg) // declares the queue, consumes its 20
	require.NoError(t, err)
	left := cfg
	left.n = 5
	require.NoError(t, publish(ctx, left, "0earlier")) // 5 left in the queue
	cfg.keep = false
	s, err := run(ctx, cfg)
	require.NoError(t, err)
	assert.Equal(t, 0, s.duplicates, "-dup 0: nothing was published twice")
	assert.Equal(t, 20, s.delivered)

}
