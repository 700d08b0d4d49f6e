package nats_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
)

// The source and its messages implement the engine's broker hooks, which
// live in deadletter so that the connector needs no import of pipeline.
var (
	_ deadletter.HandOffSource    = (*nats.Source)(nil)
	_ deadletter.DeadLetterWriter = (*nats.Source)(nil)
	_ deadletter.HandOffItem      = nats.Message{}
	_ deadletter.RejectedItem     = nats.Message{}
)

// The source's dead-letter sink tells the engine when it gave an item back
// to the broker.
func TestDeadLetterSinkIsABrokerRetrier(t *testing.T) {
	t.Parallel()
	var src nats.Source
	_, ok := src.DeadLetter(deadletter.NewMemory(1)).(deadletter.BrokerRetrier)
	assert.True(t, ok)
}
