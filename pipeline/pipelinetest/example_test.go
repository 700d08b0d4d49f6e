package pipelinetest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A test of a pipeline's resilience: a tracked source records each item's
// outcome, Faults fails chosen items with chosen errors, a Collector keeps
// what is written and a Recorder the events. On a fake clock the retries'
// waits take no time.
func Example() {
	clock := clockwork.NewFakeClock()
	src := pipelinetest.NewTrackedSource(1, 2, 3)
	faults := pipelinetest.NewFaults(map[int][]error{
		2: {resilience.MarkTransient(errors.New("timeout"))}, // fails once, then passes
		3: {resilience.MarkPermanent(errors.New("bad item"))},
	})
	sink := &pipelinetest.Collector[int]{}
	events := &pipelinetest.Recorder{}

	b := pipeline.New("test", pipeline.WithClock(clock), pipeline.WithObserver(events),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))
	checked := pipeline.Transform(b, "check", pipeline.Source(b, "read", src), faults)
	pipeline.Sink(b, "store", checked, sink)
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}

	run := pipelinetest.Start(context.Background(), p)
	if _, err := pipelinetest.AdvanceUntilDone(context.Background(), clock, run, time.Second); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("written:", sink.Items())
	fmt.Println("calls on 2:", faults.Calls(2))
	fmt.Println("outcomes by index:", src.Outcomes())
	for _, e := range pipelinetest.Of[observer.RetryEvent](events) {
		fmt.Println("retry:", e.Node, e.Kind, e.Attempt, e.Err)
	}
	// Output:
	// written: [1 2]
	// calls on 2: 2
	// outcomes by index: map[0:[delivered] 1:[delivered] 2:[skipped]]
	// retry: check item_retry 1 timeout
}
