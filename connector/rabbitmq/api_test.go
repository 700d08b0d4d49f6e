package rabbitmq_test

import (
	"encoding/json"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
)

// The connector's types fit the engine's contracts.
var (
	_ node.Source[rabbitmq.Message] = (*rabbitmq.Source)(nil)
	_ node.Opener                   = (*rabbitmq.Source)(nil)
	_ node.Closer                   = (*rabbitmq.Source)(nil)
	_ node.Sink[string]             = (*rabbitmq.Publisher[string])(nil)
	_ node.Opener                   = (*rabbitmq.Publisher[string])(nil)
	_ node.Flusher                  = (*rabbitmq.Publisher[string])(nil)
	_ node.Closer                   = (*rabbitmq.Publisher[string])(nil)
	_ deadletter.Sink               = (*rabbitmq.DeadLetterPublisher)(nil)
	_ deadletter.Correlated         = rabbitmq.Message{}
)

// TestMessageInEnvelope: a Message dead-lettered to a file or an exchange
// reads well as JSON.
func TestMessageInEnvelope(t *testing.T) {
	t.Parallel()
	m := rabbitmq.Message{
		Body: []byte("hi"), Headers: amqp.Table{"tenant": "acme"}, RoutingKey: "orders", MessageID: "m-1",
		Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Redelivered: true, Retries: 2,
	}
	b, err := deadletter.MarshalEnvelope(deadletter.Envelope{Item: m, ErrText: "boom"})
	require.NoError(t, err)
	env, err := deadletter.UnmarshalEnvelope(b)
	require.NoError(t, err)
	assert.Equal(t, "boom", env.ErrText)
	var got rabbitmq.Message
	require.NoError(t, json.Unmarshal(env.Item.(json.RawMessage), &got))
	assert.Equal(t, "hi", string(got.Body))
	assert.Equal(t, "m-1", got.MessageID)
	assert.Equal(t, "acme", got.Headers["tenant"])
	assert.Equal(t, 2, got.Retries)
	assert.True(t, got.Redelivered)
	assert.Empty(t, got.CorrelationID(), "a decoded message names no delivery")
}
