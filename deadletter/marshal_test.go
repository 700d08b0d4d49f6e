package deadletter_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// MarshalEnvelope fills in the error's text and the item's type, and
// UnmarshalEnvelope gives the item back as JSON; an item that cannot be
// encoded is left out, with why and what it was.
func TestMarshalEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()
	type order struct{ ID string }
	b, err := deadletter.MarshalEnvelope(deadletter.Envelope{Item: order{"ord-7"}, Err: errors.New("HTTP 400"), CorrelationID: "ord-7"})
	require.NoError(t, err)
	env, err := deadletter.UnmarshalEnvelope(b)
	require.NoError(t, err)
	assert.Equal(t, "HTTP 400", env.ErrText)
	assert.Equal(t, "ord-7", env.CorrelationID)
	assert.Contains(t, env.ItemType, "order")
	assert.JSONEq(t, `{"ID":"ord-7"}`, string(env.Item.(json.RawMessage)))

	b, err = deadletter.MarshalEnvelope(deadletter.Envelope{Item: make(chan int), Err: errors.New("bad")})
	require.NoError(t, err, "an item that cannot be encoded does not fail the envelope")
	env, err = deadletter.UnmarshalEnvelope(b)
	require.NoError(t, err)
	assert.NotEmpty(t, env.ItemError)
	assert.NotEmpty(t, env.ItemText)
	assert.Equal(t, json.RawMessage("null"), env.Item, "the item is left out")

	_, err = deadletter.UnmarshalEnvelope([]byte("{"))
	assert.Error(t, err)
}
