package deadletter_test

import (
	"encoding/json"
	"errors"
	"math"
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

// An item that JSON refuses, cyclic ones included, still gives an
// envelope: without the item, with the encoder's error and a bounded
// rendering of it.
func TestMarshalEnvelopeOfAnOddItem(t *testing.T) {
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
		b, err := deadletter.MarshalEnvelope(deadletter.Envelope{Item: c.item, ErrText: "boom", OriginNode: "n"})
		require.NoError(t, err)
		env, err := deadletter.UnmarshalEnvelope(b)
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

type panickyErr struct{}

func (panickyErr) Error() string { panic("Error bug") }

// An item whose MarshalJSON panics, one nested too deep for the encoder,
// and an error whose Error panics give an envelope, not a crash.
func TestMarshalEnvelopeOfItemsThatBreakTheEncoder(t *testing.T) {
	t.Parallel()
	type chain struct{ Next *chain }
	var deep *chain
	for range 2_000_000 {
		deep = &chain{Next: deep}
	}
	for _, item := range []any{panicky{ID: 7}, deep} {
		var b []byte
		var err error
		require.NotPanics(t, func() { b, err = deadletter.MarshalEnvelope(deadletter.Envelope{Item: item, Err: panickyErr{}}) })
		require.NoError(t, err)
		env, err := deadletter.UnmarshalEnvelope(b)
		require.NoError(t, err)
		assert.NotEmpty(t, env.ItemError)
		assert.NotEmpty(t, env.ItemText)
		assert.Contains(t, env.ErrText, "Error method panicked")
	}
}
