package nats_test

import (
	"context"
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/connector/nats"
)

// TraceHeaders reads the headers an OpenTelemetry HeaderCarrier writes
// into a NATS message, whose keys keep their case ("Traceparent").
func TestTraceHeadersFromOTelHeaderCarrier(t *testing.T) {
	t.Parallel()
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	h := natsgo.Header{}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
	assert.NotEmpty(t, h, "the propagator wrote the trace context")
	got := nats.TraceHeaders(nats.Message{Header: h})
	assert.NotNil(t, got, "headers written by propagation.HeaderCarrier are missed: %v", h)
}
