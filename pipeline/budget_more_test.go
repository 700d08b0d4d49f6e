package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A Join's tagging transforms only move items: a retry budget counts none
// of their items as first attempts, only those of the nodes that call the
// user's functions (the join node's 2n inputs and the sink's n).
func TestRetryBudgetJoinTaggingCountsNone(t *testing.T) {
	t.Parallel()
	const n = 200
	clock := clockwork.NewFakeClock()
	budget := resilience.NewBudget(resilience.BudgetOptions{Ratio: 0.1, Window: 10 * time.Second, Clock: clock})
	var calls atomic.Int64
	b := pipeline.New("budget-join", pipeline.WithClock(clock), pipeline.WithDeadLetter(deadletter.NewMemory(n)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 3
			o.ItemRetry.Backoff = resilience.NoBackoff()
			o.RetryBudget = budget
			o.OnItemFailure = resilience.DeadLetter
		}))
	left := pipeline.Source(b, "left", pipelinetest.NewSliceSource(ints(n)...))
	right := pipeline.Source(b, "right", pipelinetest.NewSliceSource(ints(n)...))
	id := func(v int) int { return v }
	joined := pipeline.Join(b, "join", left, right, id, id, time.Hour, func(l, r int) int { return l })
	pipeline.ForEach(b, "sink", joined, func(context.Context, int) error {
		calls.Add(1)
		return resilience.MarkTransient(errors.New("down"))
	})
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(n), nodeOf(t, res, "sink").In)
	firsts := nodeOf(t, res, "join").In + nodeOf(t, res, "sink").In
	retries := calls.Load() - n
	assert.LessOrEqual(t, retries, int64(0.1*float64(firsts)),
		"retries allowed by first attempts of user-calling nodes only (join/left, join/right In = %d, %d)",
		nodeOf(t, res, "join/left").In, nodeOf(t, res, "join/right").In)
}
