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

	"github.com/sluicehq/sluice/internal/servicetest"
)

// smallCfg is a quick run of n = 20 messages that all work.
func smallCfg(url, stream string, out *bytes.Buffer) config {
	return config{url: url, stream: stream, n: 20,
		backoff: []time.Duration{300 * time.Millisecond, 600 * time.Millisecond}, handOff: 100 * time.Millisecond,
		maxDeliver: 3, flaky: 0, poison: 0, slow: 0, dup: 0, publishers: 4, reportWriter: out}
}

func randomStream(prefix string) string {
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	return prefix + hex.EncodeToString(suffix[:])
}

// TestRunAgainWithKeepDeliversEveryMessage runs the sample twice on one
// stream with -keep, as a user who keeps the stream to look at it, then runs
// again. Every run published Nats-Msg-Id msg-0 to msg-<n-1>: the stream's
// duplicate window dropped the second run's messages as duplicates of the
// first's, and the second run waited for n deliveries forever.
func TestRunAgainWithKeepDeliversEveryMessage(t *testing.T) {
	url := servicetest.NATS(t)
	stream := randomStream("sluice-test-keep-")
	var out bytes.Buffer
	cfg := smallCfg(url, stream, &out)
	cfg.keep = true
	defer deleteStream(url, stream)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := run(ctx, cfg)
	require.NoError(t, err)
	require.Equal(t, 20, s.delivered)

	ctx2, cancel2 := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel2()
	s, err = run(ctx2, cfg)
	require.NoError(t, err, "the second run ends; summary: %+v", s)
	assert.Equal(t, 20, s.delivered)
	assert.Zero(t, s.duplicates, "-dup 0: nothing was published twice")
}
