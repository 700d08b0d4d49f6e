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
// delivered once or dead-lettered, the flaky ones after two trips through
// the retry queues, the poison ones after -max-retry trips; the slow ones'
// long waits are handed to the broker, and the duplicates are skipped.
func TestSample(t *testing.T) {
	url := servicetest.RabbitMQ(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	var out bytes.Buffer
	cfg := config{url: url, queue: "sluice-test.sample." + hex.EncodeToString(suffix[:]), n: 200,
		delays: []time.Duration{50 * time.Millisecond, 150 * time.Millisecond}, handOff: 100 * time.Millisecond,
		maxRetry: 2, flaky: 10, poison: 97, slow: 25, dup: 50, publishers: 4, reportWriter: &out}
	s, err := run(ctx, cfg)
	require.NoError(t, err)
	s.print(&out)

	assert.Equal(t, 204, s.published, "200, and 4 of them twice")
	assert.Equal(t, 198, s.delivered)
	assert.Equal(t, 4, s.duplicates, "msg-49, 99, 149 and 199 were published twice and written once")
	assert.Equal(t, 2, s.deadLettered, "msg-96 and msg-193")
	assert.Equal(t, 40, s.brokerRetries, "20 flaky messages, 2 trips each")
	assert.Equal(t, int64(8), s.handedOff, "every 25th message's long wait")
	assert.Contains(t, out.String(), "dead-lettered       2 messages")
}

func TestFlags(t *testing.T) {
	ok := config{n: 1, publishers: 1, queue: "q", maxRetry: 1, delays: []time.Duration{time.Second}}
	assert.NoError(t, ok.validate())
	bad := ok
	bad.n = 0
	assert.ErrorIs(t, bad.validate(), errConfig)
	bad = ok
	bad.publishers = 0
	assert.ErrorIs(t, bad.validate(), errConfig)
	bad = ok
	bad.slow = 5
	assert.ErrorIs(t, bad.validate(), errConfig, "-slow needs -hand-off")
	ds, err := parseDelays("1s, 10s,1m")
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{time.Second, 10 * time.Second, time.Minute}, ds)
	_, err = parseDelays("1s,soon")
	assert.ErrorIs(t, err, errConfig)
}
