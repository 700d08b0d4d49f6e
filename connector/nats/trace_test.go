package nats_test

import (
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/connector/nats"
)

// TraceHeaders takes the W3C headers, and nothing else; none gives nil.
func TestTraceHeaders(t *testing.T) {
	t.Parallel()
	assert.Nil(t, nats.TraceHeaders(nats.Message{}))
	assert.Nil(t, nats.TraceHeaders(nats.Message{Header: natsgo.Header{"other": {"x"}}}))
	assert.Equal(t, map[string]string{"traceparent": "p", "tracestate": "s"},
		nats.TraceHeaders(nats.Message{Header: natsgo.Header{"traceparent": {"p"}, "tracestate": {"s"}, "baggage": {"b"}}}))
}
