package pipeline_test

// The retry budget counts the calls the nodes make, when they make them:
// a node that holds a backlog after its source ended (Keyed, a large
// Buffer), or after a drain, keeps the allowance its calls earn.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// onceFlaky fails item v's first call when fails(v), and succeeds after.
// Every tenth first call moves the budget's clock a second on: the
// budget's time is the first calls made, so that its Window holds three
// hundred of them however the goroutines are scheduled against the
// pipeline's clock. (With a Window of a hundred, a loaded CI run had one
// retry refused: the failures of the first calls made while the
// pipeline's clock stands still have their retries released in one
// burst, and a burst of more than twenty passes a hundred calls'
// allowance. Three hundred allow sixty, and 2 000 items still make a tail
// of many Windows.) Retries do not move it: the retries one step of the
// pipeline's clock releases come in a burst, and a burst of calls that
// were not first calls, counted as time, would push the first calls out
// of the Window and leave too little allowance for the next failure (one
// retry in 2 000 was refused, now and then).
type onceFlaky struct {
	fails       func(int64) bool
	budgetClock *clockwork.FakeClock
	mu          sync.Mutex
	seen        map[int64]bool
	failed      map[int64]bool
	firsts      int64
	calls       atomic.Int64
}

func (f *onceFlaky) call(_ context.Context, v int64) (int64, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.seen[v] {
		f.seen[v] = true
		if f.firsts++; f.firsts%10 == 0 {
			f.budgetClock.Advance(time.Second)
		}
	}
	if f.fails(v) && !f.failed[v] {
		f.failed[v] = true
		return 0, errFlaky
	}
	return v, nil
}

// tailFails says which items fail once: from item 100 on, the eighth of
// every ten, so that a tenth of the calls fail, and the first failure
// comes once the node made enough calls for Ratio to allow its retry.
func tailFails(v int64) bool { return v >= 100 && v%10 == 7 }

// budgetTail builds src → work (with nodeOpts) → sink, where work's item
// retries (Constant(1s) on clock, up to 3) draw on a budget of Ratio 0.2
// and Window 30 s that only work uses, and items whose retries are
// refused are dead-lettered. The budget's clock moves with work's calls
// (see onceFlaky).
func budgetTail(clock clockwork.Clock, src node.Source[int64], nodeOpts []pipeline.NodeOption, opts ...pipeline.Option) (*pipeline.Builder, *resilience.Budget, *deadletter.Memory, *onceFlaky) {
	budgetClock := clockwork.NewFakeClock()
	budget := resilience.NewBudget(resilience.BudgetOptions{Ratio: 0.2, Window: 30 * time.Second, Clock: budgetClock})
	dlq := deadletter.NewMemory(100_000)
	f := &onceFlaky{fails: tailFails, budgetClock: budgetClock, seen: map[int64]bool{}, failed: map[int64]bool{}}
	b := pipeline.New("budget-tail", append(opts, pipeline.WithClock(clock), pipeline.WithDeadLetter(dlq))...)
	work := pipeline.Map(b, "work", pipeline.Source(b, "src", src), f.call, append(nodeOpts, pipeline.NodeResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 3
		o.ItemRetry.Backoff = resilience.Constant(time.Second)
		o.RetryBudget = budget
		o.OnItemFailure = resilience.DeadLetter
	}))...)
	pipeline.Sink(b, "sink", work, &pipelinetest.Collector[int64]{})
	return b, budget, dlq, f
}

// tailNodes are the node options of the tail tests: a Keyed node whose
// backlog outlasts the budget's Window once its source ended (the case of
// the issue, scaled down), the same Keyed node with its default buffer,
// Parallel nodes with their default buffer and a large one, and one
// worker with a large buffer.
func tailNodes(n int) []struct {
	name string
	opts []pipeline.NodeOption
} {
	// Blocks of ten items share a key: each key fails a tenth of its
	// calls, and waits a second for each of those retries in turn.
	key := func(v int64) int64 { return v / 10 % 4 }
	return []struct {
		name string
		opts []pipeline.NodeOption
	}{
		{"keyed-backlog", []pipeline.NodeOption{pipeline.Keyed(4, key), pipeline.Buffer(n)}},
		{"keyed", []pipeline.NodeOption{pipeline.Keyed(4, key)}},
		{"parallel", []pipeline.NodeOption{pipeline.Parallel(4)}},
		{"parallel-backlog", []pipeline.NodeOption{pipeline.Parallel(4), pipeline.Buffer(n)}},
		{"one-worker-backlog", []pipeline.NodeOption{pipeline.Buffer(n)}},
	}
}

// The case, scaled down: 2 000 items, nearly a tenth fail once
// then succeed, Constant(1s), Ratio 0.2. The node's retries are a tenth of
// its calls, within the budget all along, the tail included: after the
// source ended, the node still holds most items (in the backlog cases)
// and makes their calls for far longer than the budget's Window. No item is dead-lettered, every
// failed item is retried once, every item is delivered once.
func TestRetryBudgetKeepsTheTailOfABacklog(t *testing.T) {
	t.Parallel()
	const n = 2000
	for _, nd := range tailNodes(n) {
		t.Run(nd.name, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			items := make([]int64, n)
			for i := range items {
				items[i] = int64(i)
			}
			src := pipelinetest.NewTrackedSource(items...)
			b, budget, dlq, f := budgetTail(clock, src, nd.opts)
			run := pipelinetest.Start(t.Context(), build(t, b))
			res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Second)
			require.NoError(t, err)
			assert.Zero(t, budget.Refused(), "retries refused")
			assert.Zero(t, len(dlq.Envelopes()), "items dead-lettered")
			failing := int64(0)
			for i := range int64(n) {
				if tailFails(i) {
					failing++
				}
			}
			assert.Equal(t, failing, nodeOf(t, res, "work").ItemRetries)
			assert.Equal(t, n+failing, f.calls.Load())
			assert.Equal(t, int64(n), nodeOf(t, res, "sink").Out)
			outcomes := src.Outcomes()
			counts := map[string]int{}
			for i := range n {
				counts[fmt.Sprint(outcomes[i])]++
			}
			assert.Equal(t, map[string]int{fmt.Sprint([]node.Outcome{node.Delivered}): n}, counts, "each item's outcomes")
			t.Logf("%s: %d items in %s of fake time", nd.name, n, res.Duration)
		})
	}
}

// A drain while items wait for their retries turns none of them into a
// dead letter: without a drain timeout, each waiting retry happens and
// every emitted item is delivered; with one that ends first, the items
// still on their way end Failed (not their fault: neither dead-lettered
// nor counted against them), each once. The drain takes place while the
// nodes hold a backlog longer than the budget's Window.
func TestDrainTurnsNoWaitingRetryIntoADeadLetter(t *testing.T) {
	t.Parallel()
	const backlog = 2000
	for _, nd := range tailNodes(backlog) {
		for _, timeout := range []time.Duration{0, 40 * time.Second} {
			t.Run(fmt.Sprintf("%s/timeout=%s", nd.name, timeout), func(t *testing.T) {
				t.Parallel()
				clock := clockwork.NewFakeClock()
				src := &endless{watch: true, outcomes: map[int64][]node.Outcome{}}
				b, budget, dlq, _ := budgetTail(clock, src, nd.opts, pipeline.WithDrainTimeout(timeout))
				p := build(t, b)
				run := pipelinetest.Start(t.Context(), p)
				// Items wait for their retries, then the drain.
				for range 3 {
					require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
					clock.Advance(time.Second)
				}
				require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
				require.True(t, p.Drain())
				res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Second)
				assert.Zero(t, budget.Refused(), "retries refused")
				assert.Zero(t, len(dlq.Envelopes()), "items dead-lettered")
				emitted := src.emitted.Load()
				require.Positive(t, emitted)
				src.mu.Lock()
				defer src.mu.Unlock()
				counts := map[node.Outcome]int64{}
				for i := range emitted {
					require.Len(t, src.outcomes[i], 1, "item %d has one outcome: %v", i, src.outcomes[i])
					counts[src.outcomes[i][0]]++
				}
				if timeout == 0 {
					require.NoError(t, err)
					assert.Equal(t, map[node.Outcome]int64{node.Delivered: emitted}, counts)
				} else {
					require.ErrorIs(t, err, pipeline.ErrDrainTimeout)
					assert.Equal(t, emitted, counts[node.Delivered]+counts[node.Failed], "Delivered or Failed: %v", counts)
					assert.Zero(t, nodeOf(t, res, "work").DeadLettered)
				}
				t.Logf("%s: %d items emitted, %v, drain took %s of fake time", nd.name, emitted, counts, res.Duration)
			})
		}
	}
}
