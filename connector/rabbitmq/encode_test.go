package rabbitmq_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
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
