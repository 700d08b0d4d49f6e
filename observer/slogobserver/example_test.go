package slogobserver_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer/slogobserver"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A pipeline that skips bad items logs the first one at WARN and sums up
// the others of the same reason: here when the node completes, as the run
// takes less than the summary interval. The handler drops the time and the
// run id so that the output is the same every run.
func Example() {
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "run_id" {
				return slog.Attr{}
			}
			return a
		},
	})
	obs := slogobserver.New(slog.New(h))
	defer obs.Close()
	b := pipeline.New("orders", pipeline.WithObserver(obs),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))
	ids := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3, 4, 5, 6))
	checked := pipeline.Transform(b, "check", ids, node.TransformFunc[int, int](func(_ context.Context, id int) (int, error) {
		if id%2 == 0 {
			return 0, fmt.Errorf("order %d has no lines", id)
		}
		return id, nil
	}))
	pipeline.Sink(b, "store", checked, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	if err != nil {
		panic(err)
	}
	if _, err := p.Run(context.Background()); err != nil {
		panic(err)
	}
	// Output:
	// level=WARN msg="item dropped" pipeline=orders node=check attempts=1 error="order 2 has no lines" reason="order # has no lines"
	// level=WARN msg=drops pipeline=orders node=check count=2 reason="order # has no lines" last_error="order 6 has no lines"
}
