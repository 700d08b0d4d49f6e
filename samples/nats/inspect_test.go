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
	"github.com/sluicehq/sluice/samples/internal/inspectcheck"
)

// -inspect-addr serves the consuming pipeline's page while it runs, and
// the items still go back to the server through the inspector's
// dead-letter sink: the counts are those of TestSample.
func TestInspectAddr(t *testing.T) {
	url := servicetest.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	var out bytes.Buffer
	served := 0
	cfg := config{url: url, stream: "sluice-test-inspect-" + hex.EncodeToString(suffix[:]), n: 200,
		backoff: []time.Duration{300 * time.Millisecond, 600 * time.Millisecond}, handOff: 100 * time.Millisecond,
		maxDeliver: 3, flaky: 10, poison: 97, slow: 25, dup: 50, publishers: 4, reportWriter: &out,
		inspectAddr: "127.0.0.1:0", inspectorReady: func(url string) {
			served++
			inspectcheck.ReadOnlyGraph(t, url, "consume", "consume", "handle", "store")
		}}
	s, err := run(ctx, cfg)
	require.NoError(t, err)
	assert.Equal(t, 1, served)
	assert.Contains(t, out.String(), "nats: inspector on http://127.0.0.1:")
	assert.Equal(t, 2, s.deadLettered, "msg-96 and msg-193")
	assert.Equal(t, 40+4, s.redeliveries, "the server's redeliveries, not dead letters")
	assert.Equal(t, 198, s.delivered)
}
