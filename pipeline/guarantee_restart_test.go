package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// failOnce fails each chosen item on its first call only.
type failOnce struct {
	mu    sync.Mutex
	fail  map[int]bool
	calls map[int]int
}

func (f *failOnce) hit(x int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[x]++
	if f.calls[x] == 1 && f.fail[x] {
		return true
	}
	return false
}

var errRestartMe = errors.New("restart me")

// Node restart with random fail-once items, across parallel modes and
// node kinds: every item reaches the sink once, in order where ordered,
// and completes once as Delivered.
func TestRestartsDeliverEveryItemOnce(t *testing.T) {
	t.Parallel()
	const items = 200
	variants := []struct {
		name string
		opts []pipeline.NodeOption
		kind string
	}{
		{"seq-transform", nil, "transform"},
		{"par-ordered", []pipeline.NodeOption{pipeline.Parallel(3)}, "transform"},
		{"par-unordered", []pipeline.NodeOption{pipeline.Parallel(3), pipeline.Unordered()}, "transform"},
		{"seq-flatmap", nil, "flatmap"},
		{"par-flatmap", []pipeline.NodeOption{pipeline.Parallel(3)}, "flatmap"},
		{"seq-sink", nil, "sink"},
		{"par-sink", []pipeline.NodeOption{pipeline.Parallel(3)}, "sink"},
		{"keyed-transform", []pipeline.NodeOption{pipeline.Keyed(3, mod7)}, "transform"},
		{"keyed-flatmap", []pipeline.NodeOption{pipeline.Keyed(3, mod7)}, "flatmap"},
		{"keyed-sink", []pipeline.NodeOption{pipeline.Keyed(3, mod7)}, "sink"},
		{"batch-flatmap-same-len", nil, "batchflat"},
	}
	for _, v := range variants {
		for _, m := range modes {
			t.Run(v.name+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				for it := range 10 {
					r := rand.New(rand.NewPCG(uint64(it), 3))
					f := &failOnce{fail: map[int]bool{}, calls: map[int]int{}}
					for i := range items {
						if r.IntN(15) == 0 {
							f.fail[i] = true
						}
					}
					b := pipeline.New("restart", append([]pipeline.Option{pipeline.WithResilience(func(o *resilience.Options) {
						o.ItemRetry.MaxRetries = 0
						o.NodeRestart.MaxRestarts = 100
						o.NodeRestart.MaxReplayWindow = 1 + r.IntN(20)
						o.NodeRestart.Backoff = resilience.NoBackoff()
						o.NodeRestart.ResetAfterItems = 1
					})}, m.opts...)...)
					src := pipelinetest.NewTrackedSource(ints(items)...)
					s := pipeline.Source[int](b, "src", src)
					var mu sync.Mutex
					var got []int
					collect := node.SinkFunc[int](func(_ context.Context, x int) error {
						runtime.Gosched()
						mu.Lock()
						got = append(got, x)
						mu.Unlock()
						return nil
					})
					switch v.kind {
					case "transform":
						out := pipeline.Transform(b, "work", s, node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
							if f.hit(x) {
								return 0, errRestartMe
							}
							return x, nil
						}), v.opts...)
						pipeline.Sink(b, "sink", out, collect)
					case "flatmap":
						out := pipeline.FlatMap(b, "work", s, func(_ context.Context, x int) ([]int, error) {
							if f.hit(x) {
								return nil, errRestartMe
							}
							return []int{x}, nil
						}, v.opts...)
						pipeline.Sink(b, "sink", out, collect)
					case "batchflat":
						bt := pipeline.Batch(b, "batch", s, 3, 0)
						out := pipeline.FlatMap(b, "work", bt, func(_ context.Context, xs []int) ([]int, error) {
							if f.hit(xs[0]) {
								return nil, errRestartMe
							}
							return slices.Clone(xs), nil
						}, v.opts...)
						pipeline.Sink(b, "sink", out, collect)
					case "sink":
						pipeline.Sink(b, "work", s, node.SinkFunc[int](func(ctx context.Context, x int) error {
							if f.hit(x) {
								return errRestartMe
							}
							return collect(ctx, x)
						}), v.opts...)
					}
					res, err := build(t, b).Run(t.Context())
					require.NoError(t, err, "iteration %d", it)
					if v.kind != "sink" && v.kind != "batchflat" {
						assert.Equal(t, nodeOf(t, res, "src").Out, nodeOf(t, res, "work").In, "iteration %d: src.Out vs work.In", it)
						assert.Equal(t, nodeOf(t, res, "work").Out, nodeOf(t, res, "sink").In, "iteration %d: work.Out vs sink.In", it)
						assert.Equal(t, int64(items), nodeOf(t, res, "work").Out, "iteration %d: work.Out", it)
						assert.Equal(t, int64(items), nodeOf(t, res, "sink").Out, "iteration %d: sink.Out", it)
					}
					mu.Lock()
					sorted := slices.Clone(got)
					mu.Unlock()
					ordered := v.name != "par-unordered" && v.name != "par-sink" && !strings.HasPrefix(v.name, "keyed")
					if ordered {
						assert.Equal(t, ints(items), sorted, "iteration %d: order/once", it)
					}
					if strings.HasPrefix(v.name, "keyed") {
						assertPerKeyOrder(t, sorted, mod7, "iteration %d", it)
					}
					slices.Sort(sorted)
					require.Equal(t, ints(items), sorted, "iteration %d: every item once", it)
					outs := src.Outcomes()
					for i := range items {
						require.Equal(t, []node.Outcome{node.Delivered}, outs[i], "iteration %d item %d", it, i)
					}
				}
			})
		}
	}
	_ = fmt.Sprint
}
