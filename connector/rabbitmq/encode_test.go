package rabbitmq_test

import (
	"math"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
)

// An item that JSON refuses, cyclic ones included, still gives an
// envelope: without the item, with the encoder's error and a bounded
// rendering of it.
func TestEncodeEnvelopeOfAnOddItem(t *testing.T) {
	t.Parallel()
	cyclic := map[string]any{"id": 7}
	cyclic["self"] = cyclic
	for _, c := range []struct {
		item any
		text string
	}{
		{cyclic, "map[id:7 self:<cycle>]"},
		{math.NaN(), "NaN"},
		{make(chan int), ""},
	} {
		b, err := rabbitmq.EncodeEnvelope(deadletter.Envelope{Item: c.item, ErrText: "boom", OriginNode: "n"})
		require.NoError(t, err)
		env, err := rabbitmq.DecodeEnvelope(b)
		require.NoError(t, err)
		assert.NotEmpty(t, env.ItemError)
		if c.text != "" {
			assert.Equal(t, c.text, env.ItemText)
		} else {
			assert.Contains(t, env.ItemText, "chan int")
		}
		assert.Equal(t, "boom", env.ErrText)
	}
}

type panicky struct{ ID int }

func (panicky) MarshalJSON() ([]byte, error) { panic("marshal bug") }

type badErr struct{}

func (badErr) Error() string { panic("Error bug") }

// An item whose MarshalJSON panics, one nested too deep for the encoder,
// and an error whose Error panics give an envelope, not a crash.
func TestEncodeEnvelopeOfItemsThatBreakTheEncoder(t *testing.T) {
	t.Parallel()
	type chain struct{ Next *chain }
	var deep *chain
	for range 2_000_000 {
		deep = &chain{Next: deep}
	}
	for _, item := range []any{panicky{ID: 7}, deep} {
		var b []byte
		var err error
		require.NotPanics(t, func() { b, err = rabbitmq.EncodeEnvelope(deadletter.Envelope{Item: item, Err: badErr{}}) })
		require.NoError(t, err)
		env, err := rabbitmq.DecodeEnvelope(b)
		require.NoError(t, err)
		assert.NotEmpty(t, env.ItemError)
		assert.NotEmpty(t, env.ItemText)
		assert.Contains(t, env.ErrText, "Error method panicked")
	}
}

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
