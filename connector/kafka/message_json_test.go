package kafka_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
)

// A record with an empty key and one with none are told apart by
// RecordKey; a Message read back from its JSON (a dead letter re-driven)
// keeps the difference, so that it keeps its key and its order.
func TestMessageJSONKeepsAnEmptyKeyApartFromNone(t *testing.T) {
	t.Parallel()
	for _, m := range []kafka.Message{
		{Topic: "orders", Partition: 2, Key: []byte{}, Value: []byte("v")},
		{Topic: "orders", Partition: 2, Key: nil, Value: []byte("v")},
		{Topic: "orders", Partition: 2, Key: []byte("k"), Value: []byte("v")},
	} {
		data, err := json.Marshal(m)
		require.NoError(t, err)
		var back kafka.Message
		require.NoError(t, json.Unmarshal(data, &back))
		assert.Equal(t, kafka.RecordKey(m), kafka.RecordKey(back), "%s", data)
		assert.Equal(t, m.Key == nil, back.Key == nil, "%s", data)
	}
}
