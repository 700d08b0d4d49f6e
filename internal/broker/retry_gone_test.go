package broker_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
)

// a batch whose deliveries are partly gone (a Batch node
// that holds items across a source's reconnect) is retried whole, so the
// gone delivery's message, which its broker delivers again by itself
// (RetrySink's own doc), is also given back through Retry: on RabbitMQ a
// copy goes to the retry queue beside the requeued original, a duplicate.
func TestRetrySinkRetriesNoGoneDelivery(t *testing.T) {
	t.Parallel()
	gone, live := &dlv{id: "gone", gone: true}, &dlv{id: "live"}
	src := &fake{enabled: true, max: 2}
	sink := &broker.RetrySink[*dlv]{Source: src, Next: deadletter.NewMemory(1)}
	retried, err := sink.WriteOrRetry(t.Context(), deadletter.Envelope{Item: []msg{{gone}, {live}}, Err: transient()})
	require.NoError(t, err)
	assert.True(t, retried)
	assert.NotContains(t, src.retried, gone, "the broker delivers a gone delivery's message again by itself; retrying it too makes two")
}
