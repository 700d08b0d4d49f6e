package otel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/otel"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// An Observer reports a pipeline's counts as OpenTelemetry metrics. Here
// the SDK's ManualReader collects them on demand; a program uses the
// reader of its exporter (OTLP, Prometheus).
func ExampleNew() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	obs, err := otel.New(mp)
	if err != nil {
		fmt.Println(err)
		return
	}

	b := pipeline.New("orders", pipeline.WithObserver(obs),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))
	orders := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3))
	checked := pipeline.Transform(b, "check", orders,
		pipelinetest.FailAlways(resilience.MarkPermanent(errors.New("bad item")), 2))
	pipeline.Sink(b, "store", checked, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := p.Run(ctx); err != nil {
		fmt.Println(err)
		return
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		fmt.Println(err)
		return
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != otel.ItemsOut && m.Name != otel.ItemsFailed {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				node, _ := dp.Attributes.Value(otel.AttrNode)
				lines = append(lines, fmt.Sprintf("%s{node=%s} %d", m.Name, node.AsString(), dp.Value))
			}
		}
	}
	slices.Sort(lines) // data points come in no set order
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// sluice.items.failed{node=check} 1
	// sluice.items.failed{node=read} 0
	// sluice.items.failed{node=store} 0
	// sluice.items.out{node=check} 2
	// sluice.items.out{node=read} 3
	// sluice.items.out{node=store} 2
}

// NewTracer puts every attempt, one call of a node's function on an item,
// in a span named after the node, a child of the span in the run's
// context. Here the SDK's SpanRecorder keeps the spans; a program uses its
// exporter.
func ExampleNewTracer() {
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(ctx)

	b := pipeline.New("orders", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.Backoff = resilience.NoBackoff()
	}))
	orders := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2),
		pipeline.SourceKey(func(id int) string { return "ord-" + strconv.Itoa(id) }))
	priced := pipeline.Transform(b, "price", orders, pipelinetest.NewFaults(map[int][]error{
		2: {resilience.MarkTransient(errors.New("HTTP 503"))}, // fails once, then passes
	}))
	pipeline.Sink(b, "store", priced, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, job := tp.Tracer("example").Start(ctx, "nightly-job")
	_, err = p.Run(observer.WithTracer(ctx, otel.NewTracer(tp)))
	job.End()
	if err != nil {
		fmt.Println(err)
		return
	}
	var lines []string
	for _, s := range rec.Ended() {
		if s.Name() == "nightly-job" {
			continue
		}
		var key, attempt string
		for _, a := range s.Attributes() {
			switch a.Key {
			case otel.AttrItemKey:
				key = a.Value.AsString()
			case otel.AttrAttempt:
				attempt = a.Value.String()
			}
		}
		child := s.Parent().SpanID() == job.SpanContext().SpanID()
		lines = append(lines, fmt.Sprintf("%s %s attempt %s: %s (child of the job: %t)",
			s.Name(), key, attempt, s.Status().Code, child))
	}
	slices.Sort(lines) // the nodes run concurrently
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// price ord-1 attempt 1: Unset (child of the job: true)
	// price ord-2 attempt 1: Error (child of the job: true)
	// price ord-2 attempt 2: Unset (child of the job: true)
	// store ord-1 attempt 1: Unset (child of the job: true)
	// store ord-2 attempt 1: Unset (child of the job: true)
}
