package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// printRetries prints each retry as it is about to wait.
type printRetries struct{ observer.Nop }

func (printRetries) OnRetry(e observer.RetryEvent) {
	fmt.Printf("%s: %s %d in %s after: %v\n", e.Node, e.Kind, e.Attempt, e.Delay, e.Err)
}

// Item retry fixes a dependency that fails now and then; what it cannot fix
// goes to the dead-letter sink. A fake clock makes the waits instant and
// exact.
func ExampleWithResilience_itemRetry() {
	clock := clockwork.NewFakeClock()
	dlq := deadletter.NewMemory(10)
	errBusy := resilience.MarkTransient(errors.New("503 busy"))
	calls := map[string]int{}
	api := node.TransformFunc[string, string](func(_ context.Context, id string) (string, error) {
		calls[id]++
		if id == "b" && calls[id] <= 2 || id == "c" {
			return "", errBusy // b recovers on its third call, c never does
		}
		return id + "!", nil
	})

	b := pipeline.New("enrich", pipeline.WithClock(clock), pipeline.WithObserver(printRetries{}),
		pipeline.WithDeadLetter(dlq),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.Backoff = resilience.Exponential(100 * time.Millisecond).WithJitter(resilience.JitterNone)
			o.OnItemFailure = resilience.DeadLetter
		}))
	out := pipeline.Transform(b, "api", pipeline.Source(b, "ids", pipelinetest.NewSliceSource("a", "b", "c")), api)
	sink := &pipelinetest.Collector[string]{}
	pipeline.Sink(b, "store", out, sink)
	p, _ := b.Build()

	run := pipelinetest.Start(context.Background(), p)
	res, err := pipelinetest.AdvanceUntilDone(context.Background(), clock, run, 100*time.Millisecond)
	fmt.Println(sink.Items(), err)
	apiCounts, _ := res.Node("api")
	fmt.Println("retries:", apiCounts.ItemRetries, "dead letters:", apiCounts.DeadLettered)
	env := dlq.Envelopes()[0]
	fmt.Println(env.Item, env.Attempts, env.ErrText)
	// Output:
	// api: item_retry 1 in 100ms after: 503 busy
	// api: item_retry 2 in 200ms after: 503 busy
	// api: item_retry 1 in 100ms after: 503 busy
	// api: item_retry 2 in 200ms after: 503 busy
	// [a! b!] <nil>
	// retries: 4 dead letters: 1
	// c 3 resilience: item_retry exhausted after 3 attempts: 503 busy
}

// Plan shows how the layers multiply before anything runs.
func ExamplePipeline_Plan() {
	b := pipeline.New("orders", pipeline.WithResilience(func(o *resilience.Options) {
		o.NodeRestart.MaxRestarts = 2 // on top of the default 3 item retries
	}))
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1))
	out := pipeline.Transform(b, "price", src, node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
		return x, nil
	}))
	pipeline.Sink(b, "store", out, &pipelinetest.Collector[int]{})
	p, _ := b.Build()
	fmt.Print(p.Plan())
	// Output:
	// resilience plan of pipeline "orders" (worst cases)
	// node   kind       calls/item  starts  multiplied  wait/item  wait to start  pause/item  call limit  deliveries  all calls  all time  then
	// read   source     -           4       12          3s         7s             -           -           1           -          -         fail
	// price  transform  12          4       48          7.2s       7s             -           -           1           12         7.2s      fail
	// store  sink       12          4       48          7.2s       7s             -           -           1           12         7.2s      fail
}

// printCircuit prints breaker transitions.
type printCircuit struct{ observer.Nop }

func (printCircuit) OnCircuitStateChanged(e observer.CircuitEvent) {
	fmt.Printf("%s: breaker %s -> %s\n", e.Node, e.From, e.To)
}

// A breaker that pauses: after three failures in a row the node stops
// calling the dependency (and stops reading, which holds the source back)
// until a probe succeeds.
func ExampleWithResilience_circuitBreaker() {
	clock := clockwork.NewFakeClock()
	down := true
	api := node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
		if down {
			return 0, resilience.MarkTransient(errors.New("connection refused"))
		}
		return x, nil
	})
	b := pipeline.New("sync", pipeline.WithClock(clock), pipeline.WithObserver(printCircuit{}),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.OnItemFailure = resilience.Skip
			o.CircuitBreaker.Enabled = true
			o.CircuitBreaker.ConsecutiveFailures = 3
			o.CircuitBreaker.OpenDuration = 30 * time.Second
			o.CircuitBreaker.WhenOpen = resilience.OpenPause
		}))
	out := pipeline.Transform(b, "api", pipeline.Source(b, "ids", pipelinetest.NewSliceSource(1, 2, 3, 4, 5)), api)
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "store", out, sink)
	p, _ := b.Build()

	run := pipelinetest.Start(context.Background(), p)
	_ = clock.BlockUntilContext(context.Background(), 1) // paused, waiting for the probe
	down = false                                         // the dependency comes back meanwhile
	clock.Advance(30 * time.Second)
	res, err := run.Wait()
	apiCounts, _ := res.Node("api")
	fmt.Println(sink.Items(), "skipped:", apiCounts.Skipped, err)
	// Output:
	// api: breaker closed -> open
	// api: breaker open -> half_open
	// api: breaker half_open -> closed
	// [4 5] skipped: 3 <nil>
}
