package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A rejectable is an item that records what the engine tells it when it
// fails the run (deadletter.RejectedItem).
type rejectable struct {
	n    int
	told *told
}

type told struct {
	mu   sync.Mutex
	envs []deadletter.Envelope
}

func (r rejectable) Rejected(env deadletter.Envelope) {
	r.told.mu.Lock()
	defer r.told.mu.Unlock()
	r.told.envs = append(r.told.envs, env)
}

var errBadItem = errors.New("bad item")

// rejectedRun runs three tracked rejectables, item 1 failing the node
// "check" under action, through batches of batch (0: none), and returns
// what item 1 was told and each item's outcome.
func rejectedRun(t *testing.T, action resilience.FailureAction, batch int) ([]deadletter.Envelope, []node.Outcome, time.Time) {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC))
	tl := &told{}
	var mu sync.Mutex
	outcomes := make([]node.Outcome, 3)
	src := node.SourceFunc[rejectable](func(ctx context.Context, out node.Emitter[rejectable]) error {
		for i := range 3 {
			err := out.EmitTracked(ctx, rejectable{n: i, told: tl}, func(o node.Outcome) {
				mu.Lock()
				outcomes[i] = o
				mu.Unlock()
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	p := rejectedPipeline(t, clock, src, action, batch)
	_, _ = p.Run(t.Context())
	tl.mu.Lock()
	defer tl.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	return tl.envs, outcomes, clock.Now()
}

// rejectedPipeline builds the pipeline of rejectedRun from src: item 1
// fails the node "check" under action, through batches of batch (0:
// none).
func rejectedPipeline(t *testing.T, clock clockwork.Clock, src node.Source[rejectable], action resilience.FailureAction, batch int) *pipeline.Pipeline {
	t.Helper()
	b := pipeline.New("rej", pipeline.WithClock(clock), pipeline.WithDeadLetter(deadletter.NewMemory(10)),
		pipeline.WithResilience(func(o *resilience.Options) {
			*o = resilience.Options{}
			o.OnItemFailure = action
		}))
	in := pipeline.Source(b, "src", src)
	check := func(_ context.Context, r rejectable) (rejectable, error) {
		if r.n == 1 {
			return r, errBadItem
		}
		return r, nil
	}
	if batch > 0 {
		bt := pipeline.Batch(b, "batch", in, batch, 0)
		checked := pipeline.Transform(b, "check", bt, node.TransformFunc[[]rejectable, []rejectable](
			func(ctx context.Context, rs []rejectable) ([]rejectable, error) {
				for _, r := range rs {
					if _, err := check(ctx, r); err != nil {
						return rs, err
					}
				}
				return rs, nil
			}))
		pipeline.ForEach(b, "store", pipeline.Unbatch(b, "unbatch", checked), func(context.Context, rejectable) error { return nil })
	} else {
		checked := pipeline.Transform(b, "check", in, node.TransformFunc[rejectable, rejectable](check))
		pipeline.ForEach(b, "store", checked, func(context.Context, rejectable) error { return nil })
	}
	p, err := b.Build()
	require.NoError(t, err)
	return p
}

// An item that fails its node under Fail is told, before its done runs
// with Rejected, which node failed, with what error, after how many calls
// and when, on the pipeline's clock.
func TestRejectedItemIsToldWhy(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{0, 1} {
		envs, outcomes, now := rejectedRun(t, resilience.Fail, batch)
		assert.Equal(t, node.Rejected, outcomes[1], "batch %d", batch)
		require.Len(t, envs, 1, "told once, batch %d", batch)
		env := envs[0]
		assert.Equal(t, "check", env.OriginNode)
		assert.Equal(t, "check", env.DecisionNode)
		assert.ErrorIs(t, env.Err, errBadItem)
		assert.Equal(t, errBadItem.Error(), env.ErrText)
		assert.Equal(t, 1, env.Attempts)
		assert.Equal(t, now, env.LastFailure)
		assert.Equal(t, now, env.FirstFailure)
	}
}

// Only the item to blame is told: not under DeadLetter (its outcome is
// DeadLettered), and not in a batch of several (its neighbours could be
// to blame as well).
func TestRejectedItemNotToldWhenNotToBlame(t *testing.T) {
	t.Parallel()
	envs, outcomes, _ := rejectedRun(t, resilience.DeadLetter, 0)
	assert.Empty(t, envs)
	assert.Equal(t, node.DeadLettered, outcomes[1])
	envs, outcomes, _ = rejectedRun(t, resilience.Fail, 3)
	assert.Empty(t, envs, "a batch of three blames none of them")
	assert.Equal(t, node.Failed, outcomes[1])
}

// A rejectingDone is a done given to EmitTrackedWith that is a
// deadletter.RejectedItem itself, as a broker source's per-item value is.
type rejectingDone struct {
	told    *told
	outcome *node.Outcome
	mu      *sync.Mutex
}

func (d rejectingDone) Done(o node.Outcome) {
	d.mu.Lock()
	defer d.mu.Unlock()
	*d.outcome = o
}

func (d rejectingDone) Rejected(env deadletter.Envelope) {
	d.told.mu.Lock()
	defer d.told.mu.Unlock()
	d.told.envs = append(d.told.envs, env)
}

// A done given to EmitTrackedWith that is a RejectedItem is told why the
// item failed the run in the item's stead (the engine keeps no copy of
// the item then), alone, directly and through a batch of one; a done that
// is not one leaves the item told, as rejectedRun shows.
func TestDoneThatIsRejectedItemIsToldInItsItemsStead(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{0, 1} {
		clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 3, 1, 0, 0, 0, time.UTC))
		itemTold, doneTold := &told{}, &told{}
		var mu sync.Mutex
		outcomes := make([]node.Outcome, 3)
		withDone := false
		src := node.SourceFunc[rejectable](func(ctx context.Context, out node.Emitter[rejectable]) error {
			w, ok := out.(interface {
				EmitTrackedWith(context.Context, rejectable, interface{ Done(node.Outcome) }) error
			})
			withDone = ok
			if !ok {
				return errors.New("the pipeline's emitter has no EmitTrackedWith")
			}
			for i := range 3 {
				if err := w.EmitTrackedWith(ctx, rejectable{n: i, told: itemTold}, rejectingDone{told: doneTold, outcome: &outcomes[i], mu: &mu}); err != nil {
					return err
				}
			}
			return nil
		})
		p := rejectedPipeline(t, clock, src, resilience.Fail, batch)
		_, err := p.Run(t.Context())
		require.ErrorIs(t, err, errBadItem)
		require.True(t, withDone)
		mu.Lock()
		assert.Equal(t, node.Rejected, outcomes[1], "batch %d", batch)
		mu.Unlock()
		assert.Empty(t, itemTold.envs, "the item is not told when its done is, batch %d", batch)
		require.Len(t, doneTold.envs, 1, "the done is told once, batch %d", batch)
		env := doneTold.envs[0]
		assert.Equal(t, "check", env.OriginNode)
		assert.ErrorIs(t, env.Err, errBadItem)
		assert.Equal(t, 1, env.Attempts)
		assert.Equal(t, clock.Now(), env.LastFailure)
	}
}
