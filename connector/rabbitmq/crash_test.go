package rabbitmq_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// A message keeps its crash-ledger id in every copy the source puts back
// (its count of failed deliveries, its story, x-death); another message
// does not share it.
func TestCrashIDSurvivesCopies(t *testing.T) {
	t.Parallel()
	ts := time.Unix(1_700_000_000, 0)
	orig := amqp.Delivery{Body: []byte(`{"order":1}`), ContentType: "application/json", Timestamp: ts,
		Headers: amqp.Table{"tenant": "a", "n": int64(1), "nested": amqp.Table{"k": []any{"x", int32(2)}}}}
	copied := orig
	copied.Headers = amqp.Table{"tenant": "a", "n": int64(1), "nested": amqp.Table{"k": []any{"x", int32(2)}},
		rabbitmq.HeaderDeliveries: int64(2), rabbitmq.HeaderQueue: "q", rabbitmq.HeaderAttempts: int64(3),
		"x-death": []any{amqp.Table{"queue": "q", "count": int64(1)}}, "x-delivery-count": int64(4),
		"x-first-death-queue": "q", rabbitmq.SeqHeader: int64(9)}
	copied.Redelivered, copied.DeliveryTag, copied.Expiration = true, 42, "1000"
	id := rabbitmq.CrashID(orig)
	assert.Equal(t, id, rabbitmq.CrashID(copied), "a copy is the same message")

	for name, change := range map[string]func(*amqp.Delivery){
		"body":         func(d *amqp.Delivery) { d.Body = []byte(`{"order":2}`) },
		"header":       func(d *amqp.Delivery) { d.Headers = amqp.Table{"tenant": "b", "n": int64(1)} },
		"header type":  func(d *amqp.Delivery) { d.Headers = amqp.Table{"tenant": "a", "n": "1"} },
		"timestamp":    func(d *amqp.Delivery) { d.Timestamp = ts.Add(time.Second) },
		"content type": func(d *amqp.Delivery) { d.ContentType = "text/plain" },
	} {
		other := orig
		change(&other)
		assert.NotEqual(t, id, rabbitmq.CrashID(other), name)
	}
	withID := orig
	withID.MessageId = "order-1"
	assert.Equal(t, "id:order-1", rabbitmq.CrashID(withID), "a message id names the message")
}

// Without the pipeline's dead-letter sink, a source with a crash ledger
// does not open: a message that crashes the consumer would have nowhere
// to go.
func TestCrashLedgerNeedsADeadLetterSink(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := uniqueName(t)
	a.cleanup([]string{q})
	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{},
		CrashLedger: filepath.Join(t.TempDir(), "crash.ledger")})
	require.NoError(t, err)
	b := pipeline.New("no-dlq")
	pipeline.Sink(b, "store", pipeline.Source(b, "consume", src), node.SinkFunc[rabbitmq.Message](func(context.Context, rabbitmq.Message) error { return nil }))
	p, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(testContext(t), 10*time.Second)
	defer cancel()
	_, err = p.Run(ctx)
	var ce *rabbitmq.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "CrashLedger", ce.Field)
}

// Two sources given one ledger path: the second does not open, and says
// why.
func TestCrashLedgerIsOneProcess(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := uniqueName(t)
	a.cleanup([]string{q})
	ctx := testContext(t)
	cfg := rabbitmq.SourceConfig{URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{},
		CrashLedger: filepath.Join(t.TempDir(), "crash.ledger")}
	first, err := rabbitmq.NewSource(cfg)
	require.NoError(t, err)
	first.UseDeadLetter(deadletter.NewMemory(1), deadletter.Envelope{})
	require.NoError(t, first.Open(ctx))
	defer first.Close(ctx)
	second, err := rabbitmq.NewSource(cfg)
	require.NoError(t, err)
	second.UseDeadLetter(deadletter.NewMemory(1), deadletter.Envelope{})
	err = second.Open(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "in use by another process")
	assert.Contains(t, err.Error(), cfg.CrashLedger)
	require.NoError(t, first.Close(ctx))
	require.NoError(t, second.Open(ctx), "free once the first closed")
	require.NoError(t, second.Close(ctx))
}

// The error of a message that crashed the consumer matches ErrCrashed and
// ErrPoison, so that Source.DeadLetter passes it on unretried.
func TestCrashErrorIsPoison(t *testing.T) {
	t.Parallel()
	err := rabbitmq.CrashError("rabbitmq: poison message: message \"m\" of queue \"q\" crashed the consumer")
	assert.ErrorIs(t, err, rabbitmq.ErrCrashed)
	assert.ErrorIs(t, err, rabbitmq.ErrPoison)
	assert.NotErrorIs(t, errors.New("other"), rabbitmq.ErrCrashed)
}
