package rabbitmq_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
)

// The source and its messages implement the engine's broker hooks, which
// live in deadletter so that the connector needs no import of pipeline.
var (
	_ deadletter.HandOffSource    = (*rabbitmq.Source)(nil)
	_ deadletter.DeadLetterWriter = (*rabbitmq.Source)(nil)
	_ deadletter.HandOffItem      = rabbitmq.Message{}
	_ deadletter.RejectedItem     = rabbitmq.Message{}
)

// The source's dead-letter sink tells the engine when it gave an item back
// to the broker.
func TestDeadLetterSinkIsABrokerRetrier(t *testing.T) {
	t.Parallel()
	var src rabbitmq.Source
	_, ok := src.DeadLetter(deadletter.NewMemory(1)).(deadletter.BrokerRetrier)
	assert.True(t, ok)
}
