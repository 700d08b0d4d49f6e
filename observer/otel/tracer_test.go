package otel_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/otel"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A run traced through a real SDK: one span per attempt, children of the
// run's span, with the item's key and attempt number; a failed attempt
// has its error recorded and status Error; the user's function sees its
// attempt's span.
func TestTracerSpansPerAttempt(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	b := pipeline.New("orders", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 2
		o.ItemRetry.Backoff = resilience.NoBackoff()
	}))
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3),
		pipeline.SourceKey(func(v int) string { return "ord-" + strconv.Itoa(v) }))
	failed := false
	var seen []trace.SpanID
	price := pipeline.Map(b, "price", src, func(ctx context.Context, v int) (int, error) {
		seen = append(seen, trace.SpanFromContext(ctx).SpanContext().SpanID())
		if v == 2 && !failed {
			failed = true
			return 0, resilience.MarkTransient(errors.New("HTTP 503"))
		}
		return v * 10, nil
	})
	pipeline.Sink(b, "load", price, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)

	ctx, root := tp.Tracer("test").Start(t.Context(), "job")
	_, err = p.Run(observer.WithTracer(ctx, otel.NewTracer(tp)))
	root.End()
	require.NoError(t, err)

	var prices []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "price" {
			prices = append(prices, s)
		}
	}
	require.Len(t, prices, 4, "three items, one retried")
	attrs := func(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
		m := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			m[kv.Key] = kv.Value
		}
		return m
	}
	byKey := map[string][]sdktrace.ReadOnlySpan{}
	for i, s := range prices {
		a := attrs(s)
		assert.Equal(t, "orders", a[otel.AttrPipeline].AsString())
		assert.Equal(t, "price", a[otel.AttrNode].AsString())
		assert.Equal(t, root.SpanContext().SpanID(), s.Parent().SpanID(), "span %d is a child of the run's span", i)
		assert.Equal(t, root.SpanContext().TraceID(), s.SpanContext().TraceID())
		byKey[a[otel.AttrItemKey].AsString()] = append(byKey[a[otel.AttrItemKey].AsString()], s)
	}
	require.Len(t, byKey["ord-2"], 2)
	first, second := byKey["ord-2"][0], byKey["ord-2"][1]
	assert.Equal(t, int64(1), attrs(first)[otel.AttrAttempt].AsInt64())
	assert.Equal(t, codes.Error, first.Status().Code)
	assert.Equal(t, "HTTP 503", first.Status().Description)
	require.Len(t, first.Events(), 1, "the error is recorded")
	assert.Equal(t, int64(2), attrs(second)[otel.AttrAttempt].AsInt64())
	assert.Equal(t, codes.Unset, second.Status().Code)
	for _, s := range byKey["ord-1"] {
		assert.Equal(t, int64(1), attrs(s)[otel.AttrAttempt].AsInt64())
	}
	// The function ran inside each attempt's span.
	var ids []trace.SpanID
	for _, s := range prices {
		ids = append(ids, s.SpanContext().SpanID())
	}
	assert.ElementsMatch(t, ids, seen)
}
