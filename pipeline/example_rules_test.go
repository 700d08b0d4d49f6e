package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

var (
	errValidation = errors.New("validation")
	errNotFound   = errors.New("not found")
)

// Failure rules pick what happens to an item by its error: a row that does
// not validate is skipped, an order the service does not know is
// dead-lettered, anything else fails the run (OnItemFailure).
func ExampleNodeResilience_failureRules() {
	dlq := deadletter.NewMemory(10)
	b := pipeline.New("orders", pipeline.WithDeadLetter(dlq))
	rows := pipeline.Source(b, "read", pipelinetest.NewSliceSource("A-1", "bad row", "A-404", "A-2"))
	checked := pipeline.Transform(b, "check", rows,
		node.TransformFunc[string, string](func(_ context.Context, row string) (string, error) {
			switch {
			case !strings.HasPrefix(row, "A-"):
				return "", fmt.Errorf("%w: %q", errValidation, row)
			case row == "A-404":
				return "", fmt.Errorf("order %s: %w", row, errNotFound)
			}
			return row, nil
		}),
		pipeline.NodeResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.OnItemFailure = resilience.Fail
			o.FailureRules = []resilience.FailureRule{
				{Match: func(err error) bool { return errors.Is(err, errValidation) }, Action: resilience.Skip},
				{Match: func(err error) bool { return errors.Is(err, errNotFound) }, Action: resilience.DeadLetter},
			}
		}))
	pipeline.Sink(b, "print", checked, node.SinkFunc[string](func(_ context.Context, row string) error {
		fmt.Println("loaded", row)
		return nil
	}))
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := p.Run(context.Background())
	fmt.Println("run error:", err)
	check, _ := res.Node("check")
	fmt.Println("skipped:", check.Skipped, "dead-lettered:", check.DeadLettered)
	for _, env := range dlq.Envelopes() {
		fmt.Println("dead letter:", env.ErrText)
	}
	// Output:
	// loaded A-1
	// loaded A-2
	// run error: <nil>
	// skipped: 1 dead-lettered: 1
	// dead letter: order A-404: not found
}
