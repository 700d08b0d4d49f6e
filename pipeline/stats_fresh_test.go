package pipeline_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// A source that emits n items, then waits in its own code until the
// test lets it return.
type pausingSource struct {
	n       int
	release chan struct{}
}

func (s pausingSource) Run(ctx context.Context, out node.Emitter[int]) error {
	for i := range s.n {
		if err := out.Emit(ctx, i); err != nil {
			return err
		}
	}
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats read while every stage waits (the source in its own code, the
// others on their input) show every item that went through: counts kept
// in a stage's tally are published before it waits, wherever it waits.
func TestStatsFreshWhileStagesWait(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 63, 100, 1000} {
		for _, kind := range []string{"default", "parallel", "unordered", "keyed", "batched", "batched-parallel"} {
			t.Run(fmt.Sprint(kind, "/", n), func(t *testing.T) {
				t.Parallel()
				var opts []pipeline.NodeOption
				var popts []pipeline.Option
				switch kind {
				case "batched":
					popts = append(popts, pipeline.WithHandOverBatch(64))
				case "batched-parallel":
					popts = append(popts, pipeline.WithHandOverBatch(64))
					opts = append(opts, pipeline.Parallel(4))
				case "parallel":
					opts = append(opts, pipeline.Parallel(4))
				case "unordered":
					opts = append(opts, pipeline.Parallel(4), pipeline.Unordered())
				case "keyed":
					opts = append(opts, pipeline.Keyed(4, func(i int) string { return fmt.Sprint(i % 7) }))
				}
				src := pausingSource{n: n, release: make(chan struct{})}
				var stored atomic.Int64
				b := pipeline.New("fresh", popts...)
				in := pipeline.Source(b, "read", src)
				doubled := pipeline.Map(b, "double", in, func(_ context.Context, i int) (int, error) { return 2 * i, nil }, opts...)
				pipeline.Sink(b, "store", doubled, node.SinkFunc[int](func(context.Context, int) error {
					stored.Add(1)
					return nil
				}), opts...)
				p, err := b.Build()
				require.NoError(t, err)
				done := make(chan error, 1)
				go func() { _, err := p.Run(context.Background()); done <- err }()
				deadline := time.Now().Add(10 * time.Second)
				fresh := func() bool {
					s := p.Stats()
					for _, ns := range s.Nodes {
						if ns.Out != int64(n) || ns.Node != "read" && ns.In != int64(n) {
							return false
						}
					}
					return true
				}
				for stored.Load() < int64(n) || !fresh() {
					if time.Now().After(deadline) {
						t.Fatalf("after 10 s with every stage waiting, %d of %d stored, stats %+v", stored.Load(), n, p.Stats().Nodes)
					}
					runtime.Gosched()
				}
				close(src.release)
				require.NoError(t, <-done)
			})
		}
	}
}
