package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/servicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSample runs the sample against the broker: every message is
// delivered or dead-lettered, the flaky ones after two trips through the
// retry queue, the poison ones after -max-retry trips.
func TestSample(t *testing.T) {
	url := servicetest.RabbitMQ(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	var out bytes.Buffer
	cfg := config{url: url, queue: "sluice-test.sample." + hex.EncodeToString(suffix[:]), n: 200,
		delay: 50 * time.Millisecond, maxRetry: 2, flaky: 10, poison: 97, publishers: 4, reportWriter: &out}
	s, err := run(ctx, cfg)
	require.NoError(t, err)
	s.print(&out)

	assert.Equal(t, 200, s.published)
	assert.Equal(t, 198, s.delivered)
	assert.Equal(t, 2, s.deadLettered, "msg-96 and msg-193")
	assert.Equal(t, 40, s.brokerRetries, "20 flaky messages, 2 trips each")
	assert.Contains(t, out.String(), "dead-lettered       2 messages")
}

func TestFlags(t *testing.T) {
	assert.ErrorIs(t, config{n: 0, publishers: 1}.validate(), errConfig)
	assert.ErrorIs(t, config{n: 1, publishers: 0}.validate(), errConfig)
	assert.NoError(t, config{n: 1, publishers: 1}.validate())
}
