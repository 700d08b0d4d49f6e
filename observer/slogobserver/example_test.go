package slogobserver_test

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/sluicehq/sluice/observer/slogobserver"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A pipeline that skips a bad item logs it at WARN. The handler here drops
// the time and the run id so that the output is the same every run.
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
	b := pipeline.New("orders", pipeline.WithObserver(slogobserver.New(slog.New(h))),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))
	ids := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3))
	checked := pipeline.Transform[int, int](b, "check", ids, pipelinetest.FailAlways(errors.New("order 2 has no lines"), 2))
	pipeline.Sink(b, "store", checked, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	if err != nil {
		panic(err)
	}
	if _, err := p.Run(context.Background()); err != nil {
		panic(err)
	}
	// Output:
	// level=WARN msg="item dropped" pipeline=orders node=check attempts=1 error="order 2 has no lines"
}
