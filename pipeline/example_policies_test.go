package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// printDelays prints each retry's delay.
type printDelays struct{ observer.Nop }

func (printDelays) OnRetry(e observer.RetryEvent) {
	fmt.Printf("retry %d of %s after %s: %v\n", e.Attempt, e.Node, e.Delay, e.Err)
}

// A server that answers 429 with Retry-After sets the wait; MaxElapsed
// gives up on an item once retrying would pass 10 s; an attempt timeout
// ends a call that hangs. On a fake clock, as a test would run it.
// (MaxElapsed counts from the first failure: the hanging call's first
// failure comes when its minute is up.)
func Example_retryPolicies() {
	clock := clockwork.NewFakeClock()
	calls := map[string]int{}
	quotes := node.TransformFunc[string, string](func(ctx context.Context, sym string) (string, error) {
		calls[sym]++
		switch {
		case sym == "ACME" && calls[sym] == 1:
			return "", resilience.RetryAfter(errors.New("429 too many requests"), 4*time.Second)
		case sym == "SLOW" && calls[sym] == 1:
			<-ctx.Done() // hangs until its attempt timeout
			return "", ctx.Err()
		case sym == "DOWN":
			return "", resilience.MarkTransient(errors.New("503 unavailable"))
		}
		return sym + ": 42.00", nil
	})
	b := pipeline.New("quotes", pipeline.WithClock(clock), pipeline.WithObserver(printDelays{}),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 10
			o.ItemRetry.Backoff = resilience.Constant(3 * time.Second)
			o.ItemRetry.MaxElapsed = 10 * time.Second
			// Long against the driver's 100 ms steps, which move fake time
			// while a call runs too (see AdvanceUntilDone).
			o.ItemRetry.AttemptTimeout = time.Minute
			o.OnItemFailure = resilience.Skip
		}))
	syms := pipeline.Source(b, "read", pipelinetest.NewSliceSource("ACME", "SLOW", "DOWN"))
	got := pipeline.Transform(b, "quote", syms, quotes)
	out := &pipelinetest.Collector[string]{}
	pipeline.Sink(b, "store", got, out)
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := pipelinetest.AdvanceUntilDone(context.Background(), clock, pipelinetest.Start(context.Background(), p), 100*time.Millisecond)
	fmt.Println(out.Items())
	quote, _ := res.Node("quote")
	fmt.Println("error:", err, "skipped:", quote.Skipped, "calls of DOWN:", calls["DOWN"])
	// Output:
	// retry 1 of quote after 4s: 429 too many requests
	// retry 1 of quote after 3s: resilience: attempt timed out after 1m0s: context deadline exceeded
	// retry 1 of quote after 3s: 503 unavailable
	// retry 2 of quote after 3s: 503 unavailable
	// retry 3 of quote after 3s: 503 unavailable
	// [ACME: 42.00 SLOW: 42.00]
	// error: <nil> skipped: 1 calls of DOWN: 4
}

// A Fallback serves a stale price when the price service gave up.
func ExampleFallback() {
	cache := map[string]float64{"ACME": 41.50}
	b := pipeline.New("prices")
	syms := pipeline.Source(b, "read", pipelinetest.NewSliceSource("ACME", "NEW"))
	prices := pipeline.Transform(b, "price", syms,
		node.TransformFunc[string, string](func(context.Context, string) (string, error) {
			return "", resilience.MarkPermanent(errors.New("price service: 500"))
		}),
		pipeline.Fallback(func(_ context.Context, sym string, err error) (string, error) {
			if p, ok := cache[sym]; ok {
				return fmt.Sprintf("%s: %.2f (cached)", sym, p), nil
			}
			return "", err
		}),
		pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))
	pipeline.Sink(b, "print", prices, node.SinkFunc[string](func(_ context.Context, s string) error {
		fmt.Println(s)
		return nil
	}))
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := p.Run(context.Background())
	price, _ := res.Node("price")
	fmt.Println("error:", err, "rescued:", price.Fallbacks, "skipped:", price.Skipped)
	// Output:
	// ACME: 41.50 (cached)
	// error: <nil> rescued: 1 skipped: 1
}

// RateLimit keeps a node's calls within a metered API's quota: 2 calls a
// second, in bursts of 1, shown on a fake clock.
func ExampleRateLimit() {
	clock := clockwork.NewFakeClock()
	start := clock.Now()
	b := pipeline.New("geo", pipeline.WithClock(clock))
	addrs := pipeline.Source(b, "read", pipelinetest.NewSliceSource("a", "b", "c", "d"))
	geo := pipeline.Transform(b, "geocode", addrs,
		node.TransformFunc[string, string](func(_ context.Context, a string) (string, error) {
			fmt.Printf("%s at %s\n", a, clock.Since(start))
			return a, nil
		}),
		pipeline.RateLimit(2, 1))
	pipeline.Sink(b, "store", geo, &pipelinetest.Collector[string]{})
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = pipelinetest.AdvanceUntilDone(context.Background(), clock, pipelinetest.Start(context.Background(), p), 100*time.Millisecond)
	fmt.Println("error:", err)
	// Output:
	// a at 0s
	// b at 500ms
	// c at 1s
	// d at 1.5s
	// error: <nil>
}
