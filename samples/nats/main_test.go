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

// TestSample runs the sample against the server: the stream stores each
// duplicate once, every message is delivered or dead-lettered, the flaky
// ones on their third delivery, the poison ones after -max-deliver
// deliveries; the slow ones' long waits are handed to the server, but for
// those that are flaky too (msg-49, 99, 149, 199): on their third and last
// delivery the server would not deliver them again, so they wait in
// process.
func TestSample(t *testing.T) {
	url := servicetest.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	var out bytes.Buffer
	cfg := config{url: url, stream: "sluice-test-sample-" + hex.EncodeToString(suffix[:]), n: 200,
		backoff: []time.Duration{300 * time.Millisecond, 600 * time.Millisecond}, handOff: 100 * time.Millisecond,
		maxDeliver: 3, flaky: 10, poison: 97, slow: 25, dup: 50, publishers: 4, reportWriter: &out}
	s, err := run(ctx, cfg)
	require.NoError(t, err)
	s.print(&out)

	assert.Equal(t, 204, s.published, "200, and 4 of them twice")
	assert.Equal(t, 4, s.duplicates, "msg-49, 99, 149 and 199 were stored once")
	assert.Equal(t, 198, s.delivered)
	assert.Equal(t, 2, s.deadLettered, "msg-96 and msg-193")
	assert.Equal(t, 40+4, s.redeliveries, "20 flaky messages, 2 redeliveries each, and 4 hand-offs")
	assert.Equal(t, int64(4), s.handedOff, "every 25th message's long wait, but on a last delivery")
	assert.Contains(t, out.String(), "dead-lettered       2 messages")
}

func TestFlags(t *testing.T) {
	ok := config{stream: "S", n: 1, publishers: 1, maxDeliver: 4, backoff: []time.Duration{time.Second}}
	assert.NoError(t, ok.validate())
	bad := ok
	bad.n = 0
	assert.ErrorIs(t, bad.validate(), errConfig)
	bad = ok
	bad.maxDeliver = 1
	assert.ErrorIs(t, bad.validate(), errConfig, "-max-deliver must exceed the backoff")
	bad = ok
	bad.backoff = []time.Duration{10 * time.Millisecond}
	assert.ErrorIs(t, bad.validate(), errConfig, "the first wait is the ack wait")
	bad = ok
	bad.slow = 5
	assert.ErrorIs(t, bad.validate(), errConfig, "-slow needs -hand-off")
	ds, err := parseDelays("1s, 10s,1m")
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{time.Second, 10 * time.Second, time.Minute}, ds)
	_, err = parseDelays("1s,soon")
	assert.ErrorIs(t, err, errConfig)
}
