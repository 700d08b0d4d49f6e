package otel

import (
	"context"

	otelglobal "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/observer"
)

// The attribute keys of an attempt's span, beside AttrPipeline and
// AttrNode.
const (
	AttrRunID   = attribute.Key("run_id")
	AttrItemKey = attribute.Key("item_key") // only when the item has a key
	AttrAttempt = attribute.Key("attempt")  // 1 for the item's first call on the node
)

// NewTracer returns an [observer.Tracer] that puts every attempt, one call
// of a node's function on an item, in a span of tp's tracer (the global
// provider when tp is nil), named after the node. The span is a child of
// the span in the context given to Run, if any; the call gets the span's
// context, so the function can add to it, and the span ends with the
// call's error recorded and status Error, or status Unset on success.
//
//	ctx = observer.WithTracer(ctx, otel.NewTracer(tracerProvider))
//	res, err := p.Run(ctx)
//
// An item that arrived with a W3C trace context (pipeline.SourceTraceHeaders,
// such as rabbitmq.TraceHeaders) links each of its attempts' spans to that
// trace: the span that published the message, in the process that did. A
// batch's attempt links to the trace of each item in it.
//
// A span costs what the SDK makes it cost, per attempt: trace a sample of
// runs, or use a sampler, where items are many.
func NewTracer(tp trace.TracerProvider) observer.Tracer {
	if tp == nil {
		tp = otelglobal.GetTracerProvider()
	}
	return tracer{tp.Tracer(ScopeName)}
}

type tracer struct{ t trace.Tracer }

// w3c reads the traceparent and tracestate headers of a W3C trace context.
var w3c propagation.TraceContext

func (t tracer) StartAttempt(ctx context.Context, a observer.Attempt) (context.Context, func(error)) {
	attrs := []attribute.KeyValue{
		AttrPipeline.String(a.Pipeline),
		AttrRunID.String(a.RunID),
		AttrNode.String(a.Node),
		AttrAttempt.Int(a.Number),
	}
	if a.Key != "" {
		attrs = append(attrs, AttrItemKey.String(a.Key))
	}
	opts := []trace.SpanStartOption{trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindInternal)}
	for _, h := range a.Links {
		sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), propagation.MapCarrier(h)))
		if sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	ctx, span := t.t.Start(ctx, a.Node, opts...)
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
