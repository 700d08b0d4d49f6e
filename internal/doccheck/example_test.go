package doccheck_test

// Examples whose output the docs show: CheckOutputs compares each block
// marked <!-- output: internal/doccheck ExampleName --> with the output
// here, and go test checks that the code prints it.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/observer/slogobserver"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// httpError is an HTTP status, which the default classifier and the
// reasons of slogobserver read.
type httpError int

func (e httpError) Error() string   { return fmt.Sprintf("HTTP %d", int(e)) }
func (e httpError) StatusCode() int { return int(e) }

func keep(_ context.Context, n int) (int, error) { return n, nil }

// docs/concepts.md, "Building": Build returns every problem at once.
func Example_conceptsBuild() {
	b := pipeline.New("orders")
	pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3))
	in := pipeline.Source(b, "fetch", pipelinetest.NewSliceSource(4, 5))
	priced := pipeline.Map(b, "price", in, keep, pipeline.Parallel(0),
		pipeline.NodeResilience(func(o *resilience.Options) {
			o.ItemRetry.Backoff = resilience.Exponential(100 * time.Millisecond).WithFactor(0.5)
		}))
	pipeline.Sink(b, "store", priced, &pipelinetest.Collector[int]{})
	_, err := b.Build()
	fmt.Println(err)
	// Output:
	// pipeline "orders": node "read": output stream is consumed by no node: every stream needs a consumer, such as a sink
	// pipeline "orders": node "price": Parallel(0): must be at least 1
	// pipeline "orders": node "price": resilience: ItemRetry.Backoff.Factor = 0.5: must be at least 1: a smaller factor shrinks the delays
}

// docs/circuit-breakers.md: a breaker setting without Enabled.
func Example_circuitBreakerNeedsEnabled() {
	b := pipeline.New("orders")
	in := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3))
	priced := pipeline.Map(b, "price", in, keep, pipeline.NodeResilience(func(o *resilience.Options) {
		o.CircuitBreaker.WhenOpen = resilience.OpenPause
	}))
	pipeline.Sink(b, "store", priced, &pipelinetest.Collector[int]{})
	_, err := b.Build()
	fmt.Println(err)
	// Output:
	// pipeline "orders": node "price": resilience: CircuitBreaker.WhenOpen = pause: set, but CircuitBreaker.Enabled is false, so the breaker is off and the setting does nothing: set Enabled to true to turn it on
}

// docs/retry-strategies.md, "Validation".
func Example_backoffValidate() {
	fmt.Println(resilience.Exponential(100 * time.Millisecond).WithFactor(0.5).Validate())
	// Output:
	// resilience: Factor = 0.5: must be at least 1: a smaller factor shrinks the delays
}

// docs/observability.md, "Repeated failures are summed up": 3,000 orders
// of which 38 fail pricing with HTTP 400 (time and run_id left out).
func Example_slogSummary() {
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "run_id" {
				return slog.Attr{}
			}
			return a
		},
	})
	logs := slogobserver.New(slog.New(h))
	dlq := deadletter.NewMemory(100)
	b := pipeline.New("orders", pipeline.WithObserver(logs), pipeline.WithDeadLetter(dlq),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	ids := make([]int, 3000)
	for i := range ids {
		ids[i] = i + 1
	}
	in := pipeline.Source(b, "read", pipelinetest.NewSliceSource(ids...),
		pipeline.SourceKey(func(id int) string { return fmt.Sprintf("order %d", id) }))
	priced := pipeline.Map(b, "price", in, func(_ context.Context, id int) (int, error) {
		if id == 17 || id >= 87 && id <= 123 {
			return 0, fmt.Errorf("price order %d: %w", id, httpError(400))
		}
		return id, nil
	})
	pipeline.Sink(b, "store", priced, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	if err != nil {
		panic(err)
	}
	if _, err := p.Run(context.Background()); err != nil {
		panic(err)
	}
	logs.Close()
	// Output:
	// level=WARN msg="item dead-lettered" pipeline=orders node=price key="order 17" origin_node=price attempts=1 error="price order 17: HTTP 400" reason="price order #: HTTP 400"
	// level=WARN msg="dead letters" pipeline=orders node=price origin_node=price count=37 reason="price order #: HTTP 400" last_key="order 123" last_error="price order 123: HTTP 400"
}

// docs/dead-letters.md, "The file format": the line an envelope becomes.
func Example_envelopeLine() {
	type Order struct {
		ID    int    `json:"id"`
		Total string `json:"total"`
	}
	dir, err := os.MkdirTemp("", "doccheck")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "orders.dlq.jsonl")
	dlq, err := deadletter.OpenFile(path)
	if err != nil {
		panic(err)
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const cause = "price service: status 503"
	err = dlq.Write(context.Background(), deadletter.Envelope{
		Item:     Order{ID: 1042, Total: "19.90"},
		ItemType: "github.com/acme/shop.Order", // the type's package, where the page's Order lives
		Err:      &resilience.RetryExhaustedError{Kind: resilience.ItemRetry, Attempts: 2, Err: errors.New(cause)},
		Pipeline: "orders", RunID: "run-7", OriginNode: "price", DecisionNode: "price",
		CorrelationID: "order-1042", Attempts: 2,
		History: []deadletter.Attempt{
			{Time: at, Layer: resilience.ItemRetry, Retry: 0, Delay: 200 * time.Millisecond, Err: cause},
			{Time: at.Add(200 * time.Millisecond), Layer: resilience.ItemRetry, Retry: 1, Err: cause},
		},
		FirstFailure: at, LastFailure: at.Add(200 * time.Millisecond),
	})
	if err != nil {
		panic(err)
	}
	if err := dlq.Close(); err != nil {
		panic(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	fmt.Print(string(data))
	// Output:
	// {"item":{"id":1042,"total":"19.90"},"item_type":"github.com/acme/shop.Order","error":"resilience: item_retry exhausted after 2 attempts: price service: status 503","pipeline":"orders","run_id":"run-7","origin_node":"price","decision_node":"price","correlation_id":"order-1042","attempts":2,"history":[{"time":"2026-03-01T12:00:00Z","layer":"item_retry","retry":0,"delay":200000000,"error":"price service: status 503"},{"time":"2026-03-01T12:00:00.2Z","layer":"item_retry","retry":1,"delay":0,"error":"price service: status 503"}],"first_failure":"2026-03-01T12:00:00Z","last_failure":"2026-03-01T12:00:00.2Z"}
}
