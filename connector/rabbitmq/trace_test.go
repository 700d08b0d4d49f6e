package rabbitmq_test

import (
	"context"
	"sync/atomic"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/otel"
	"github.com/sluicehq/sluice/pipeline"
)

// A message published inside a span, with its W3C trace context in its
// headers, is consumed by a traced run: the attempt's span links to the
// publisher's span, across the broker. A message without headers gets no
// link, and one with a malformed traceparent none either.
func TestTraceHeadersLinkAttemptsToThePublisher(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	// Publish: "traced" inside a span, its context injected as headers.
	pctx, pubSpan := tp.Tracer("publisher").Start(ctx, "publish")
	headers := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(pctx, headers)
	pubSpan.End()
	require.Contains(t, headers, "traceparent")
	ch := a.channel()
	for id, h := range map[string]amqp.Table{
		"traced":    {"traceparent": headers["traceparent"]},
		"plain":     nil,
		"malformed": {"traceparent": "00-not-a-trace"},
	} {
		require.NoError(t, ch.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte(id), MessageId: id, Headers: h}))
	}

	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: a.url, Queue: q})
	require.NoError(t, err)
	b := pipeline.New("traced-consumer")
	var p *pipeline.Pipeline
	var n atomic.Int64
	msgs := pipeline.Source(b, "consume", src, pipeline.SourceTraceHeaders(rabbitmq.TraceHeaders),
		pipeline.SourceKey(func(m rabbitmq.Message) string { return m.MessageID }))
	pipeline.ForEach(b, "store", msgs, func(context.Context, rabbitmq.Message) error {
		if n.Add(1) == 3 {
			p.Drain()
		}
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)
	_, err = p.Run(observer.WithTracer(ctx, otel.NewTracer(tp)))
	require.NoError(t, err)

	links := map[string][]sdktrace.Link{}
	for _, s := range rec.Ended() {
		if s.Name() != "store" {
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == otel.AttrItemKey {
				links[kv.Value.AsString()] = s.Links()
			}
		}
	}
	require.Len(t, links, 3, "one span per message")
	require.Len(t, links["traced"], 1)
	assert.Equal(t, pubSpan.SpanContext().TraceID(), links["traced"][0].SpanContext.TraceID())
	assert.Equal(t, pubSpan.SpanContext().SpanID(), links["traced"][0].SpanContext.SpanID())
	assert.Empty(t, links["plain"])
	assert.Empty(t, links["malformed"])
}

// TraceHeaders takes the W3C headers that are strings, and nothing else.
func TestTraceHeaders(t *testing.T) {
	t.Parallel()
	assert.Nil(t, rabbitmq.TraceHeaders(rabbitmq.Message{}))
	assert.Nil(t, rabbitmq.TraceHeaders(rabbitmq.Message{Headers: amqp.Table{"traceparent": 7, "other": "x"}}))
	assert.Equal(t, map[string]string{"traceparent": "p", "tracestate": "s"},
		rabbitmq.TraceHeaders(rabbitmq.Message{Headers: amqp.Table{"traceparent": "p", "tracestate": "s", "baggage": "b"}}))
}
