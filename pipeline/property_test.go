package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// chaos fails items as a seeded plan says: each item gets a number of
// transient failures before it succeeds (more than the retries allow means
// it never does), or a permanent failure.
type chaos struct {
	mu        sync.Mutex
	transient map[int]int
	permanent map[int]bool
	calls     map[int]int
}

var errPermanent = errors.New("permanent")

func newChaos(r *rand.Rand, n int) *chaos {
	c := &chaos{transient: map[int]int{}, permanent: map[int]bool{}, calls: map[int]int{}}
	for i := range n {
		switch p := r.IntN(100); {
		case p < 10:
			c.transient[i] = 1 + r.IntN(4) // 1..4 failures; 3 retries fix up to 3
		case p < 15:
			c.permanent[i] = true
		}
	}
	return c
}

func (c *chaos) Process(_ context.Context, x int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[x]++
	if c.permanent[x] {
		return 0, errPermanent
	}
	if c.calls[x] <= c.transient[x] {
		return 0, errFlaky
	}
	return x, nil
}

// fate is what the plan says must happen to x at a node with 3 retries.
func (c *chaos) fails(x int) bool { return c.permanent[x] || c.transient[x] > 3 }

func TestPropertyEveryItemReachesOneOutcome(t *testing.T) {
	t.Parallel()
	const n = 10_000
	for seed := range uint64(3) {
		for _, m := range modes {
			t.Run(fmt.Sprintf("seed=%d/%s", seed, m.name), func(t *testing.T) {
				t.Parallel()
				r := rand.New(rand.NewPCG(seed, 99))
				first, second := newChaos(r, n), newChaos(r, n)
				dlq := deadletter.NewMemory(n)
				b := pipeline.New("property", append(m.opts, pipeline.WithDeadLetter(dlq),
					pipeline.WithRand(rand.New(rand.NewPCG(seed, 1))),
					pipeline.WithResilience(func(o *resilience.Options) {
						o.ItemRetry.MaxRetries = 3
						o.ItemRetry.Backoff = resilience.NoBackoff()
					}))...)
				src := pipelinetest.NewTrackedSource(ints(n)...)
				skip := pipeline.Transform[int, int](b, "skip", pipeline.Source[int](b, "src", src), first,
					pipeline.Parallel(int(seed)+1),
					pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))
				dead := pipeline.Transform[int, int](b, "dead", skip, second, pipeline.Parallel(3), pipeline.Unordered(),
					pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
				sink := &pipelinetest.Collector[int]{}
				pipeline.Sink(b, "sink", dead, sink)
				res, err := build(t, b).Run(t.Context())
				require.NoError(t, err)

				outcomes := once(t, src, n)
				var delivered, skipped, deadLettered int
				for i, o := range outcomes {
					switch {
					case first.fails(i):
						assert.Equal(t, node.Skipped, o, "item %d", i)
					case second.fails(i):
						assert.Equal(t, node.DeadLettered, o, "item %d", i)
					default:
						assert.Equal(t, node.Delivered, o, "item %d", i)
					}
					switch o {
					case node.Delivered:
						delivered++
					case node.Skipped:
						skipped++
					case node.DeadLettered:
						deadLettered++
					}
				}
				assert.Equal(t, n, delivered+skipped+deadLettered)
				assert.Equal(t, delivered, sink.Len())
				assert.Equal(t, int64(skipped), nodeOf(t, res, "skip").Skipped)
				assert.Equal(t, int64(deadLettered), nodeOf(t, res, "dead").DeadLettered)
				assert.Equal(t, deadLettered, dlq.Len())
				assert.Equal(t, nodeOf(t, res, "skip").Out, nodeOf(t, res, "dead").In)
				assert.Equal(t, nodeOf(t, res, "skip").In, nodeOf(t, res, "skip").Out+nodeOf(t, res, "skip").Skipped)
				assert.Equal(t, int64(delivered), nodeOf(t, res, "sink").Out)
				if m.name == "default" && seed == 0 {
					assert.Positive(t, nodeOf(t, res, "skip").ItemRetries)
				}
			})
		}
	}
}
