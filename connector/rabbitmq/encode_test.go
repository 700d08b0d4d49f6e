package rabbitmq_test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
)

// A source with a retry topology tells Plan about its broker layer.
func TestSourceRedeliveries(t *testing.T) {
	t.Parallel()
	var _ node.Redeliverer = (*rabbitmq.Source)(nil)
	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: "amqp://localhost", Queue: "q",
		Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 3, Delay: time.Minute}})
	require.NoError(t, err)
	n, d := src.Redeliveries()
	assert.Equal(t, 3, n)
	assert.Equal(t, time.Minute, d)
	plain, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: "amqp://localhost", Queue: "q"})
	require.NoError(t, err)
	n, _ = plain.Redeliveries()
	assert.Zero(t, n)
}

// A Message read back from a dead-letter file is given back with its
// integer headers as int64, exact.
func TestRepublishingKeepsIntegerHeaders(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/d.jsonl"
	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	require.NoError(t, f.Write(t.Context(), deadletter.Envelope{Item: rabbitmq.Message{Body: []byte("x"),
		Headers: amqp.Table{"tenant-id": int64(9007199254740993), "ratio": 0.5, "nested": amqp.Table{"n": int64(7)}}}}))
	require.NoError(t, f.Close())
	for env, err := range deadletter.ReadFile(path) {
		require.NoError(t, err)
		pub, err := rabbitmq.Republishing(env)
		require.NoError(t, err)
		assert.Equal(t, int64(9007199254740993), pub.Headers["tenant-id"])
		assert.Equal(t, 0.5, pub.Headers["ratio"])
		assert.Equal(t, amqp.Table{"n": int64(7)}, pub.Headers["nested"])
		assert.Equal(t, "x", string(pub.Body))
	}
}
