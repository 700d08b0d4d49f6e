package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// store is a bulk writer for ForEachBatch: it records its calls and the
// items written; fail, when not nil, gives an item's error.
type store struct {
	mu      sync.Mutex
	calls   [][]int
	written []int
	fail    func(int) error
}

func (s *store) write(_ context.Context, ins []int) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, slices.Clone(ins))
	var errs []error
	for i, v := range ins {
		if s.fail != nil {
			if err := s.fail(v); err != nil {
				if errs == nil {
					errs = make([]error, len(ins))
				}
				errs[i] = err
				continue
			}
		}
		s.written = append(s.written, v)
	}
	return errs
}

func (s *store) get() (calls [][]int, written []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls), slices.Clone(s.written)
}

// A ForEachBatch writes slices of its size and a last part slice, delivers
// every tracked item, counts items, and is a sink in the graph.
func TestForEachBatchWritesSlicesAndDelivers(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 3, 4, 10} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			src := pipelinetest.NewTrackedSource(ints(n)...)
			var s store
			b := pipeline.New("foreachbatch")
			pipeline.ForEachBatch(b, "bulk", pipeline.Source(b, "src", src), 4, 0, s.write)
			p, err := b.Build()
			require.NoError(t, err)
			res, err := p.Run(t.Context())
			require.NoError(t, err)

			calls, written := s.get()
			var want [][]int
			for i := 0; i < n; i += 4 {
				want = append(want, ints(n)[i:min(i+4, n)])
			}
			assert.Equal(t, want, calls)
			assert.Equal(t, ints(n), append([]int{}, written...))
			st := nodeOf(t, res, "bulk")
			assert.Equal(t, int64(n), st.In)
			assert.Equal(t, int64(n), st.Out)
			assert.Equal(t, pipeline.KindSink, st.Kind)
			for i := range n {
				assert.Equal(t, []node.Outcome{node.Delivered}, src.Outcomes()[i], "item %d", i)
			}
			g := p.Graph()
			assert.Equal(t, pipeline.KindSink, g.Nodes[1].Kind)
			assert.Contains(t, g.Mermaid(), "bulk[(")
		})
	}
}

// An untracked stream is counted as well.
func TestForEachBatchCountsUntrackedItems(t *testing.T) {
	t.Parallel()
	var s store
	b := pipeline.New("foreachbatch-untracked")
	pipeline.ForEachBatch(b, "bulk", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(100)...)), 7, 0, s.write)
	p, err := b.Build()
	require.NoError(t, err)
	res, err := p.Run(t.Context())
	require.NoError(t, err)
	_, written := s.get()
	assert.Equal(t, ints(100), written)
	assert.Equal(t, int64(100), nodeOf(t, res, "bulk").Out)
}

// An item that fails its slice is retried alone and dead-lettered alone;
// the others of its slice are delivered once.
func TestForEachBatchDeadLettersAFailedItemAlone(t *testing.T) {
	t.Parallel()
	const n, bad = 8, 3
	clock := clockwork.NewFakeClock()
	dlq := deadletter.NewMemory(10)
	boom := resilience.MarkTransient(errors.New("boom"))
	s := store{fail: func(v int) error {
		if v == bad {
			return boom
		}
		return nil
	}}
	src := pipelinetest.NewTrackedSource(ints(n)...)
	b := pipeline.New("foreachbatch-fail", pipeline.WithClock(clock), pipeline.WithDeadLetter(dlq),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.Backoff = resilience.Constant(time.Second)
			o.OnItemFailure = resilience.DeadLetter
		}))
	pipeline.ForEachBatch(b, "bulk", pipeline.Source(b, "src", src), n, 0, s.write)
	p, err := b.Build()
	require.NoError(t, err)
	res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), p), time.Second)
	require.NoError(t, err)

	calls, written := s.get()
	assert.Equal(t, [][]int{ints(n), {bad}, {bad}}, calls)
	assert.Equal(t, slices.DeleteFunc(ints(n), func(v int) bool { return v == bad }), written)
	envs := dlq.Envelopes()
	require.Len(t, envs, 1)
	assert.Equal(t, bad, envs[0].Item)
	assert.Equal(t, "bulk", envs[0].OriginNode)
	assert.ErrorIs(t, envs[0].Err, boom)
	st := nodeOf(t, res, "bulk")
	assert.Equal(t, int64(n-1), st.Out)
	assert.Equal(t, int64(1), st.DeadLettered)
	for i := range n {
		want := node.Delivered
		if i == bad {
			want = node.DeadLettered
		}
		assert.Equal(t, []node.Outcome{want}, src.Outcomes()[i], "item %d", i)
	}
}

// A transient failure that passes on a retry delivers the item.
func TestForEachBatchRetriesToSuccess(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	var once sync.Once
	s := store{}
	s.fail = func(v int) error {
		var err error
		if v == 2 {
			once.Do(func() { err = resilience.MarkTransient(errors.New("deadlock")) })
		}
		return err
	}
	src := pipelinetest.NewTrackedSource(ints(5)...)
	b := pipeline.New("foreachbatch-retry", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 1
		o.ItemRetry.Backoff = resilience.Constant(time.Second)
	}))
	pipeline.ForEachBatch(b, "bulk", pipeline.Source(b, "src", src), 5, 0, s.write)
	p, err := b.Build()
	require.NoError(t, err)
	res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), p), time.Second)
	require.NoError(t, err)
	_, written := s.get()
	assert.Equal(t, []int{0, 1, 3, 4, 2}, written)
	assert.Equal(t, int64(5), nodeOf(t, res, "bulk").Out)
	assert.Equal(t, int64(1), nodeOf(t, res, "bulk").ItemRetries)
	for i := range 5 {
		assert.Equal(t, []node.Outcome{node.Delivered}, src.Outcomes()[i], "item %d", i)
	}
}

// A permanent failure under the default action fails the run, naming the
// node.
func TestForEachBatchFailsTheRun(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	s := store{fail: func(v int) error {
		if v == 1 {
			return boom
		}
		return nil
	}}
	b := pipeline.New("foreachbatch-failrun")
	pipeline.ForEachBatch(b, "bulk", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(3)...)), 3, 0, s.write)
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.ErrorIs(t, err, boom)
	var ne *pipeline.NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, "bulk", ne.Node)
}

// A cancelled run writes nothing more and settles no item as delivered.
func TestForEachBatchCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	src := pipelinetest.NewTrackedSource(ints(10)...)
	var s store
	b := pipeline.New("foreachbatch-cancel")
	pipeline.ForEachBatch(b, "bulk", pipeline.Source(b, "src", src), 4, 0, func(ctx context.Context, ins []int) []error {
		cancel()
		<-ctx.Done()
		errs := make([]error, len(ins))
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(ctx)
	require.ErrorIs(t, err, context.Canceled)
	_, written := s.get()
	assert.Empty(t, written)
	for i, o := range src.Outcomes() {
		assert.NotContains(t, o, node.Delivered, "item %d", i)
		assert.NotContains(t, o, node.DeadLettered, "item %d", i)
	}
}

// Build refuses what MapBatch refuses, naming ForEachBatch.
func TestForEachBatchBuildRefusesItsOptions(t *testing.T) {
	t.Parallel()
	var s store
	for _, c := range []struct {
		name   string
		size   int
		linger time.Duration
		f      func(context.Context, []int) []error
		opts   []pipeline.NodeOption
		want   string
	}{
		{"parallel", 4, 0, s.write, []pipeline.NodeOption{pipeline.Parallel(4)}, "Parallel(4): ForEachBatch"},
		{"size", 0, 0, s.write, nil, "ForEachBatch size 0"},
		{"linger", 4, -time.Second, s.write, nil, "ForEachBatch linger -1s"},
		{"nil", 4, 0, nil, nil, "ForEachBatch function is nil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("foreachbatch-build")
			pipeline.ForEachBatch(b, "bulk", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)), c.size, c.linger, c.f, c.opts...)
			_, err := b.Build()
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			assert.Contains(t, err.Error(), `node "bulk": `+c.want)
		})
	}
}
