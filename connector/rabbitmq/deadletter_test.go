package rabbitmq_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/resilience"
)

// TestDeadLetterPublisher publishes envelopes to an exchange and reads
// them back: JSON, persistent, with the error's text and the history; an
// item JSON cannot encode is described instead of failing the envelope;
// an envelope no queue takes fails the write.
func TestDeadLetterPublisher(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	ex, q := uniqueName(t), uniqueName(t)
	a.declareQueue(q, nil)
	a.cleanup(nil, ex)
	ch := a.channel()
	require.NoError(t, ch.ExchangeDeclare(ex, amqp.ExchangeDirect, false, false, false, false, nil))
	require.NoError(t, ch.QueueBind(q, "dead", ex, false, nil))

	dl, err := rabbitmq.NewDeadLetterPublisher(rabbitmq.DeadLetterConfig{URL: a.url, Exchange: ex, RoutingKey: "dead"})
	require.NoError(t, err)
	defer dl.Close()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	env := deadletter.Envelope{
		Item: map[string]int{"order": 7}, Err: errors.New("payment refused"),
		Pipeline: "orders", RunID: "r1", OriginNode: "pay", DecisionNode: "pay", CorrelationID: "c-7",
		Attempts: 2, FirstFailure: now, LastFailure: now,
		History: []deadletter.Attempt{{Time: now, Layer: resilience.ItemRetry, Retry: 0, Err: "payment refused"}},
	}
	require.NoError(t, dl.Write(ctx, env))
	unencodable := env
	unencodable.Item = make(chan int)
	require.NoError(t, dl.Write(ctx, unencodable))

	msg, ok, err := a.channel().Get(q, true)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "application/json", msg.ContentType)
	assert.Equal(t, rabbitmq.EnvelopeType, msg.Type)
	assert.Equal(t, amqp.Persistent, msg.DeliveryMode)
	assert.Equal(t, "c-7", msg.CorrelationId)
	assert.Equal(t, "orders", msg.Headers["x-sluice-pipeline"])
	got, err := deadletter.UnmarshalEnvelope(msg.Body)
	require.NoError(t, err)
	assert.JSONEq(t, `{"order":7}`, string(got.Item.(json.RawMessage)))
	assert.Equal(t, "payment refused", got.ErrText)
	assert.Equal(t, "pay", got.OriginNode)
	assert.Equal(t, 2, got.Attempts)
	require.Len(t, got.History, 1)
	assert.Equal(t, resilience.ItemRetry, got.History[0].Layer)
	assert.True(t, now.Equal(got.FirstFailure))

	msg, ok, err = a.channel().Get(q, true)
	require.NoError(t, err)
	require.True(t, ok)
	got, err = deadletter.UnmarshalEnvelope(msg.Body)
	require.NoError(t, err)
	assert.Contains(t, got.ItemError, "unsupported type")
	assert.Contains(t, got.ItemText, "(chan ")

	lost, err := rabbitmq.NewDeadLetterPublisher(rabbitmq.DeadLetterConfig{URL: a.url, Exchange: ex, RoutingKey: "nowhere"})
	require.NoError(t, err)
	defer lost.Close()
	assert.ErrorIs(t, lost.Write(ctx, env), rabbitmq.ErrReturned, "an envelope no queue takes is not dropped silently")
}
