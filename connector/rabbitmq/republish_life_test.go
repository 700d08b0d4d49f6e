package rabbitmq_test

import (
	"path/filepath"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
)

// A re-driven message starts a new life: Republishing and Unwrap leave
// every header of the earlier one, the same set the crash ledger leaves
// out of a message's identity (x-death, x-first-death-*, x-last-death-*,
// x-delivery-count, the x-sluice-* story). They kept x-first-death-*,
// x-last-death-* and a quorum queue's x-delivery-count (a review's
// finding). The other headers come back, with the types that JSON keeps
// (docs/dead-letters.md lists what it does not).
func TestRepublishingLeavesEveryLifeHeader(t *testing.T) {
	t.Parallel()
	headers := amqp.Table{
		"x-death": []any{amqp.Table{"queue": "q", "count": int64(2)}}, "x-first-death-queue": "q",
		"x-first-death-reason": "rejected", "x-last-death-queue": "q", "x-last-death-exchange": "",
		"x-delivery-count": int64(3), rabbitmq.HeaderDeliveries: int64(2), rabbitmq.SeqHeader: int64(7),
		"tenant": "acme", "n": int64(4), "whole": 2.0, "f32": float32(1.5),
		"dec": amqp.Decimal{Scale: 2, Value: 12345}, "at": time.Unix(1700000000, 0).UTC(), "raw": []byte("hi"),
	}
	want := amqp.Table{"tenant": "acme", "n": int64(4)}
	// From the item itself, as a sink hands it over.
	pub, err := rabbitmq.Republishing(deadletter.Envelope{Item: rabbitmq.Message{Body: []byte("x"), Headers: headers}})
	require.NoError(t, err)
	for k := range headers {
		if _, user := want[k]; !user && k != "whole" && k != "f32" && k != "dec" && k != "at" && k != "raw" {
			assert.NotContains(t, pub.Headers, k, "a header of the earlier life")
		}
	}
	assert.Equal(t, "acme", pub.Headers["tenant"])
	// Read back from a dead-letter file: what JSON keeps and what not.
	path := filepath.Join(t.TempDir(), "dl.jsonl")
	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	require.NoError(t, f.Write(t.Context(), deadletter.Envelope{Item: rabbitmq.Message{Body: []byte("x"), Headers: headers}}))
	require.NoError(t, f.Close())
	read := 0
	for env, err := range deadletter.ReadFile(path) {
		require.NoError(t, err)
		read++
		pub, err := rabbitmq.Republishing(env)
		require.NoError(t, err)
		assert.Equal(t, amqp.Table{
			"tenant": "acme", "n": int64(4),
			"whole": int64(2),                                             // a whole float is an integer again
			"f32":   1.5,                                                  // a float32 is a float64
			"dec":   amqp.Table{"Scale": int64(2), "Value": int64(12345)}, // a Decimal is a table of its fields
			"at":    "2023-11-14T22:13:20Z",                               // a time is its RFC 3339 text
			"raw":   "aGk=",                                               // a []byte is the string of its base64
		}, pub.Headers)
	}
	assert.Equal(t, 1, read)
	// A delivery that is no envelope: given back as it is, without them.
	pub, err = rabbitmq.Unwrap(amqp.Delivery{Headers: headers, Body: []byte("x")})
	require.NoError(t, err)
	for _, k := range []string{"x-death", "x-first-death-queue", "x-last-death-queue", "x-delivery-count", rabbitmq.HeaderDeliveries, rabbitmq.SeqHeader} {
		assert.NotContains(t, pub.Headers, k)
	}
	assert.Equal(t, "acme", pub.Headers["tenant"])
}
