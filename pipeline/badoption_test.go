package pipeline_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// Bad input is a Build error naming the option, never a panic at Run: a
// nil value inside an option's interface (a nil *FakeClock, a nil
// deadletter.Func, a nil observer pointer) is refused by Build.
func TestTypedNilOptionsAreBuildErrors(t *testing.T) {
	t.Parallel()
	var nilClock *clockwork.FakeClock
	var nilDL deadletter.Func
	var nilObs *pipelinetest.Recorder
	for _, tt := range []struct {
		name string
		opt  pipeline.Option
	}{
		{"WithClock(typed nil)", pipeline.WithClock(nilClock)},
		{"WithDeadLetter(typed nil)", pipeline.WithDeadLetter(nilDL)},
		{"WithObserver(typed nil)", pipeline.WithObserver(nilObs)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("p", pipeline.WithDeadLetter(deadletter.NewMemory(10)), tt.opt, pipeline.WithResilience(func(o *resilience.Options) {
				o.OnItemFailure = resilience.DeadLetter
				o.ItemRetry.MaxRetries = 0
			}))
			out := pipeline.Transform[int, int](b, "t", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2)),
				pipelinetest.FailAlways(errRejected, 1))
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
			p, err := b.Build()
			if !assert.Error(t, err, "Build accepted %s", tt.name) {
				func() {
					defer func() {
						if v := recover(); v != nil {
							t.Errorf("Run panicked: %v", v)
						}
					}()
					_, rerr := p.Run(context.Background())
					t.Errorf("Build accepted it; Run returned: %v", fmt.Sprint(rerr))
				}()
			}
		})
	}
}
