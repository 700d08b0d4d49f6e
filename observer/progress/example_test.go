package progress_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/observer/progress"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// On an output that is not a terminal, a Reporter prints a compact line
// every few seconds and a final one when the run ends, with the counts of
// the sources and sinks and what was skipped; Stop returns once every line
// is written. The fake clock (of the pipeline and the Reporter alike)
// stands still, so the time and the rates are the same every run; a
// program passes os.Stderr and keeps the real clock.
func Example() {
	clock := clockwork.NewFakeClock()
	var out bytes.Buffer
	rep := progress.New(&out, progress.WithClock(clock), progress.WithTTY(false))
	b := pipeline.New("orders", pipeline.WithClock(clock), pipeline.WithObserver(rep),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))
	orders := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3, 4, 5))
	checked := pipeline.Transform(b, "check", orders,
		pipelinetest.FailAlways(resilience.MarkPermanent(errors.New("bad item")), 4))
	pipeline.Sink(b, "store", checked, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	rep.Stop()
	fmt.Print(out.String())
	// Output:
	// 0.0s  read 5/5 (0/s, avg 0/s)  store 4 (0/s, avg 0/s)  skipped 1  done
}
