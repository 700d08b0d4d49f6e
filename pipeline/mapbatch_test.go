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

// batchCalls records the slices a MapBatch function was called on.
type batchCalls struct {
	mu    sync.Mutex
	calls [][]int
}

func (c *batchCalls) add(ins []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, slices.Clone(ins))
}

func (c *batchCalls) get() [][]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

// callsOf counts the calls that held item v.
func (c *batchCalls) callsOf(v int) int {
	n := 0
	for _, call := range c.get() {
		if slices.Contains(call, v) {
			n++
		}
	}
	return n
}

// tenfold is a MapBatch function that records its calls and multiplies
// each item by 10; fail, when not nil, gives an item's error.
func tenfold(c *batchCalls, fail func(int) error) func(context.Context, []int) ([]int, []error) {
	return func(_ context.Context, ins []int) ([]int, []error) {
		c.add(ins)
		outs := make([]int, len(ins))
		var errs []error
		for i, v := range ins {
			outs[i] = v * 10
			if fail == nil {
				continue
			}
			if err := fail(v); err != nil {
				if errs == nil {
					errs = make([]error, len(ins))
				}
				errs[i] = err
			}
		}
		return outs, errs
	}
}

func timesTen(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i * 10
	}
	return out
}

// Every item is handed on once, in order, from one call per slice of size
// items (the last slice holds the rest): no items, one item, fewer than a
// slice, exactly a slice, several slices and a part. Counts are items.
func TestMapBatchCallsOncePerSlice(t *testing.T) {
	t.Parallel()
	const size = 4
	for _, n := range []int{0, 1, 3, size, 2*size + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			var calls batchCalls
			src := pipelinetest.NewTrackedSource(ints(n)...)
			sink := &pipelinetest.Collector[int]{}
			b := pipeline.New("mapbatch")
			out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", src), size, 0, tenfold(&calls, nil))
			pipeline.Sink(b, "sink", out, sink)
			p, err := b.Build()
			require.NoError(t, err)
			res, err := p.Run(t.Context())
			require.NoError(t, err)

			assert.Equal(t, timesTen(n), append([]int{}, sink.Items()...))
			var want [][]int
			for lo := 0; lo < n; lo += size {
				want = append(want, ints(n)[lo:min(lo+size, n)])
			}
			assert.Equal(t, want, calls.get())
			st := nodeOf(t, res, "bulk")
			assert.Equal(t, int64(n), st.In)
			assert.Equal(t, int64(n), st.Out)
			for i := range n {
				assert.Equal(t, []node.Outcome{node.Delivered}, src.Outcomes()[i], "item %d", i)
			}
		})
	}
}

// waitingSource emits its items, closes emitted, and waits for release
// before it ends.
type waitingSource struct {
	items   []int
	emitted chan struct{}
	release chan struct{}
}

func newWaitingSource(items ...int) *waitingSource {
	return &waitingSource{items: items, emitted: make(chan struct{}), release: make(chan struct{})}
}

func (s *waitingSource) Run(ctx context.Context, out node.Emitter[int]) error {
	for _, v := range s.items {
		if err := out.Emit(ctx, v); err != nil {
			return err
		}
	}
	close(s.emitted)
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// A slice that does not fill is called once linger passed on the
// pipeline's clock since its first item, not before.
func TestMapBatchLingerCallsAPartSliceOnTheClock(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	var calls batchCalls
	src := newWaitingSource(7)
	got := make(chan int, 1)
	b := pipeline.New("mapbatch-linger", pipeline.WithClock(clock))
	out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", src), 100, time.Second, tenfold(&calls, nil))
	pipeline.ForEach(b, "sink", out, func(_ context.Context, v int) error { got <- v; return nil })
	p, err := b.Build()
	require.NoError(t, err)
	run := pipelinetest.Start(t.Context(), p)

	// The linger timer is the only waiter on the clock.
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(time.Second - time.Nanosecond)
	// A timer that fired leaves the clock's waiters at once, in Advance:
	// the linger timer still waiting says the slice was not called, before
	// the check reads the calls. The bound only turns a hang into a failure.
	wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(wctx, 1), "the linger timer fired before linger passed")
	assert.Empty(t, calls.get(), "called before linger passed")
	clock.Advance(time.Nanosecond)
	select {
	case v := <-got:
		assert.Equal(t, 70, v)
	case <-t.Context().Done():
		t.Fatal("the part slice was not called once linger passed")
	}
	close(src.release)
	_, err = run.Wait()
	require.NoError(t, err)
	assert.Equal(t, [][]int{{7}}, calls.get())
}

// One failing item of a slice is retried alone, then dead-lettered alone;
// the other items of its slice are called once and delivered once, in
// order.
func TestMapBatchRetriesAndDeadLettersAFailedItemAlone(t *testing.T) {
	t.Parallel()
	const n, bad = 8, 3
	clock := clockwork.NewFakeClock()
	dlq := deadletter.NewMemory(10)
	var calls batchCalls
	boom := resilience.MarkTransient(errors.New("boom"))
	src := pipelinetest.NewTrackedSource(ints(n)...)
	sink := &pipelinetest.Collector[int]{}
	b := pipeline.New("mapbatch-fail", pipeline.WithClock(clock), pipeline.WithDeadLetter(dlq),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.Backoff = resilience.Constant(time.Second)
			o.OnItemFailure = resilience.DeadLetter
		}))
	keyed := pipeline.Source(b, "src", src, pipeline.SourceKey(func(v int) string { return fmt.Sprintf("k%d", v) }))
	out := pipeline.MapBatch(b, "bulk", keyed, n, 0, tenfold(&calls, func(v int) error {
		if v == bad {
			return boom
		}
		return nil
	}))
	pipeline.Sink(b, "sink", out, sink)
	p, err := b.Build()
	require.NoError(t, err)
	res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), p), time.Second)
	require.NoError(t, err)

	want := slices.DeleteFunc(timesTen(n), func(v int) bool { return v == bad*10 })
	assert.Equal(t, want, append([]int{}, sink.Items()...))
	assert.Equal(t, [][]int{ints(n), {bad}, {bad}}, calls.get(), "one batch call, then the failed item alone")
	envs := dlq.Envelopes()
	require.Len(t, envs, 1)
	assert.Equal(t, bad, envs[0].Item)
	assert.Equal(t, "bulk", envs[0].OriginNode)
	assert.Equal(t, 3, envs[0].Attempts)
	assert.Equal(t, fmt.Sprintf("k%d", bad), envs[0].CorrelationID, "the item's own key")
	assert.ErrorIs(t, envs[0].Err, boom)
	st := nodeOf(t, res, "bulk")
	assert.Equal(t, int64(n-1), st.Out)
	assert.Equal(t, int64(1), st.DeadLettered)
	assert.Equal(t, int64(2), st.ItemRetries)
	for i := range n {
		want := node.Delivered
		if i == bad {
			want = node.DeadLettered
		}
		assert.Equal(t, []node.Outcome{want}, src.Outcomes()[i], "item %d", i)
	}
}

// An item that fails its slice but succeeds alone is delivered in its
// place: order is kept.
func TestMapBatchRetriedItemKeepsItsPlace(t *testing.T) {
	t.Parallel()
	var calls batchCalls
	var once sync.Once
	sink := &pipelinetest.Collector[int]{}
	b := pipeline.New("mapbatch-again", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 1
		o.ItemRetry.Backoff = resilience.NoBackoff()
	}))
	out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(5)...)), 5, 0,
		tenfold(&calls, func(v int) error {
			var err error
			if v == 1 {
				once.Do(func() { err = resilience.MarkTransient(errors.New("once")) })
			}
			return err
		}))
	pipeline.Sink(b, "sink", out, sink)
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, timesTen(5), append([]int{}, sink.Items()...))
	assert.Equal(t, [][]int{ints(5), {1}}, calls.get())
}

// Slices of the wrong length fail the items left without a result or an
// error, naming the node, and never lose one: with DeadLetter they are
// dead-lettered; with Fail the run fails with ErrBatchResults.
func TestMapBatchWrongLengthsFailTheItemsLeftOut(t *testing.T) {
	t.Parallel()
	const n = 4
	for _, c := range []struct {
		name       string
		outs, errs int   // lengths returned for a slice of n
		bad        []int // the items that fail
	}{
		{"short-results", n - 1, -1, []int{n - 1}},
		{"short-errors", n, n - 2, []int{n - 2, n - 1}},
		{"long-results", n + 1, -1, ints(n)},
		{"long-errors", n, n + 1, ints(n)},
	} {
		f := func(_ context.Context, ins []int) ([]int, []error) {
			if len(ins) < n {
				return ins, nil // a lone retry answers rightly
			}
			var errs []error
			if c.errs >= 0 {
				errs = make([]error, c.errs)
			}
			return make([]int, c.outs), errs
		}
		t.Run(c.name+"/dead-letter", func(t *testing.T) {
			t.Parallel()
			dlq := deadletter.NewMemory(10)
			sink := &pipelinetest.Collector[int]{}
			b := pipeline.New("mapbatch-len", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.Classifier = resilience.AllTransient()
				o.OnItemFailure = resilience.DeadLetter
			}))
			out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(n)...)), n, 0, f)
			pipeline.Sink(b, "sink", out, sink)
			p, err := b.Build()
			require.NoError(t, err)
			res, err := p.Run(t.Context())
			require.NoError(t, err)
			var dead []int
			for _, e := range dlq.Envelopes() {
				dead = append(dead, e.Item.(int))
				assert.ErrorIs(t, e.Err, pipeline.ErrBatchResults)
				assert.Equal(t, 1, e.Attempts, "permanent: not retried")
			}
			assert.Equal(t, c.bad, dead)
			assert.Equal(t, int64(n-len(c.bad)), nodeOf(t, res, "bulk").Out)
			assert.Equal(t, n-len(c.bad), sink.Len())
		})
		t.Run(c.name+"/fail", func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("mapbatch-len")
			out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(n)...)), n, 0, f)
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
			p, err := b.Build()
			require.NoError(t, err)
			_, err = p.Run(t.Context())
			require.ErrorIs(t, err, pipeline.ErrBatchResults)
			var ne *pipeline.NodeError
			require.ErrorAs(t, err, &ne)
			assert.Equal(t, "bulk", ne.Node)
			assert.Contains(t, err.Error(), "for 4 items")
		})
	}
}

// A panic in f fails every item of its slice with the PanicError, which
// is permanent: with DeadLetter each is dead-lettered alone, with Fail
// the run fails; other slices are delivered.
func TestMapBatchPanicFailsItsSlice(t *testing.T) {
	t.Parallel()
	f := func(_ context.Context, ins []int) ([]int, []error) {
		if slices.Contains(ins, 5) {
			panic("bad slice")
		}
		return ins, nil
	}
	t.Run("dead-letter", func(t *testing.T) {
		t.Parallel()
		dlq := deadletter.NewMemory(10)
		src := pipelinetest.NewTrackedSource(ints(8)...)
		sink := &pipelinetest.Collector[int]{}
		b := pipeline.New("mapbatch-panic", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 3
			o.OnItemFailure = resilience.DeadLetter
		}))
		out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", src), 4, 0, f)
		pipeline.Sink(b, "sink", out, sink)
		p, err := b.Build()
		require.NoError(t, err)
		_, err = p.Run(t.Context())
		require.NoError(t, err)
		assert.Equal(t, []int{0, 1, 2, 3}, append([]int{}, sink.Items()...))
		var dead []int
		for _, e := range dlq.Envelopes() {
			dead = append(dead, e.Item.(int))
			var pe *resilience.PanicError
			require.ErrorAs(t, e.Err, &pe)
			assert.Equal(t, "bad slice", pe.Value)
			assert.Equal(t, 1, e.Attempts)
		}
		assert.Equal(t, []int{4, 5, 6, 7}, dead)
		for i := 4; i < 8; i++ {
			assert.Equal(t, []node.Outcome{node.DeadLettered}, src.Outcomes()[i], "item %d", i)
		}
	})
	t.Run("fail", func(t *testing.T) {
		t.Parallel()
		b := pipeline.New("mapbatch-panic")
		out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(8)...)), 4, 0, f)
		pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		p, err := b.Build()
		require.NoError(t, err)
		_, err = p.Run(t.Context())
		var pe *resilience.PanicError
		require.ErrorAs(t, err, &pe)
		var ne *pipeline.NodeError
		require.ErrorAs(t, err, &ne)
		assert.Equal(t, "bulk", ne.Node)
	})
}

// Cancelling the run while f runs returns the cancellation at once: no
// item of the slice is retried, counted as failed or dead-lettered, and
// each ends Failed, once.
func TestMapBatchCancelMidSlice(t *testing.T) {
	t.Parallel()
	dlq := deadletter.NewMemory(10)
	src := pipelinetest.NewTrackedSource(ints(4)...)
	entered := make(chan struct{})
	var calls batchCalls
	b := pipeline.New("mapbatch-cancel", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 3
		o.ItemRetry.Classifier = resilience.AllTransient()
		o.OnItemFailure = resilience.DeadLetter
	}))
	out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", src), 4, 0, func(ctx context.Context, ins []int) ([]int, []error) {
		calls.add(ins)
		close(entered)
		<-ctx.Done()
		errs := make([]error, len(ins))
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return make([]int, len(ins)), errs
	})
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	run := pipelinetest.Start(ctx, p)
	<-entered
	cancel()
	res, err := run.Wait()
	require.ErrorIs(t, err, context.Canceled)
	assert.Len(t, calls.get(), 1, "not retried")
	assert.Empty(t, dlq.Envelopes())
	st := nodeOf(t, res, "bulk")
	assert.Zero(t, st.Failed)
	assert.Zero(t, st.ItemRetries)
	for i := range 4 {
		assert.Equal(t, []node.Outcome{node.Failed}, src.Outcomes()[i], "item %d", i)
	}
}

// A drain ends the input: the part slice gathered is called and every
// item delivered, and Run returns nil.
func TestMapBatchDrainCallsThePartSlice(t *testing.T) {
	t.Parallel()
	var calls batchCalls
	src := newWaitingSource(ints(5)...)
	sink := &pipelinetest.Collector[int]{}
	b := pipeline.New("mapbatch-drain")
	out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", src), 100, 0, tenfold(&calls, nil))
	pipeline.Sink(b, "sink", out, sink)
	p, err := b.Build()
	require.NoError(t, err)
	run := pipelinetest.Start(t.Context(), p)
	<-src.emitted
	require.True(t, p.Drain())
	res, err := run.Wait()
	require.NoError(t, err)
	assert.Equal(t, timesTen(5), append([]int{}, sink.Items()...))
	assert.Equal(t, [][]int{ints(5)}, calls.get())
	assert.Equal(t, int64(5), nodeOf(t, res, "bulk").Out)
}

// An item that fails the node is taken up alone after a node restart,
// and the items of its slice after it are settled with the batch call's
// results, not called again: each item is delivered once, in order.
func TestMapBatchRestartResumesAtTheFailedItem(t *testing.T) {
	t.Parallel()
	var calls batchCalls
	var once sync.Once
	src := pipelinetest.NewTrackedSource(ints(6)...)
	sink := &pipelinetest.Collector[int]{}
	b := pipeline.New("mapbatch-restart", pipeline.WithResilience(func(o *resilience.Options) {
		o.NodeRestart.MaxRestarts = 1
	}))
	out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", src), 6, 0, tenfold(&calls, func(v int) error {
		var err error
		if v == 2 {
			once.Do(func() { err = errors.New("once") })
		}
		return err
	}))
	pipeline.Sink(b, "sink", out, sink)
	p, err := b.Build()
	require.NoError(t, err)
	res, err := p.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, timesTen(6), append([]int{}, sink.Items()...))
	assert.Equal(t, [][]int{ints(6), {2}}, calls.get(), "only the item that failed the node is called again")
	assert.Equal(t, int64(1), nodeOf(t, res, "bulk").NodeRestarts)
	for i := range 6 {
		assert.Equal(t, []node.Outcome{node.Delivered}, src.Outcomes()[i], "item %d", i)
	}
}

// Build refuses what MapBatch cannot do, naming the node and the option.
func TestMapBatchBuildRefusesItsOptions(t *testing.T) {
	t.Parallel()
	f := func(_ context.Context, ins []int) ([]int, []error) { return ins, nil }
	for _, c := range []struct {
		name   string
		size   int
		linger time.Duration
		f      func(context.Context, []int) ([]int, []error)
		opts   []pipeline.NodeOption
		want   string
	}{
		{"parallel", 4, 0, f, []pipeline.NodeOption{pipeline.Parallel(4)}, "Parallel(4)"},
		{"unordered", 4, 0, f, []pipeline.NodeOption{pipeline.Unordered()}, "Unordered"},
		{"keyed", 4, 0, f, []pipeline.NodeOption{pipeline.Keyed(4, func(v int) int { return v })}, "Keyed"},
		{"fallback", 4, 0, f, []pipeline.NodeOption{pipeline.Fallback(func(context.Context, int, error) (int, error) { return 0, nil })}, "Fallback"},
		{"rate-limit", 4, 0, f, []pipeline.NodeOption{pipeline.RateLimit(10, 1)}, "RateLimit"},
		{"size", 0, 0, f, nil, "MapBatch size 0"},
		{"linger", 4, -time.Second, f, nil, "MapBatch linger -1s"},
		{"nil", 4, 0, nil, nil, "MapBatch function is nil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("mapbatch-build")
			out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)), c.size, c.linger, c.f, c.opts...)
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
			_, err := b.Build()
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			assert.Contains(t, err.Error(), `node "bulk": `+c.want)
		})
	}
}

// A batch call takes one breaker permit, and a failed batch counts as one
// failure: two failed slices open a breaker of ConsecutiveFailures 2, and
// the next slice is refused without a call, failing the node with the
// open-circuit error.
func TestMapBatchBreakerCountsOneCallPerSlice(t *testing.T) {
	t.Parallel()
	var calls batchCalls
	dlq := deadletter.NewMemory(10)
	b := pipeline.New("mapbatch-breaker", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.OnItemFailure = resilience.DeadLetter
		o.CircuitBreaker.Enabled = true
		o.CircuitBreaker.ConsecutiveFailures = 2
		o.CircuitBreaker.OpenDuration = time.Hour
		o.CircuitBreaker.WhenOpen = resilience.OpenFail
	}))
	out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(6)...)), 2, 0,
		tenfold(&calls, func(int) error { return resilience.MarkTransient(errors.New("down")) }))
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.ErrorIs(t, err, resilience.ErrCircuitOpen)
	assert.Equal(t, [][]int{{0, 1}, {2, 3}}, calls.get(), "the third slice is not called")
	assert.Len(t, dlq.Envelopes(), 4, "the failed slices' items, each dead-lettered alone")
}

// Under AttemptTimeout a batch call has one call's deadline on the
// pipeline's clock: a slice whose call outlives it fails each item with
// an AttemptTimeoutError, and each is retried alone.
func TestMapBatchAttemptTimeoutCoversTheSliceCall(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	var calls batchCalls
	sink := &pipelinetest.Collector[int]{}
	b := pipeline.New("mapbatch-timeout", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 1
		o.ItemRetry.Backoff = resilience.NoBackoff()
		o.ItemRetry.AttemptTimeout = time.Second
	}))
	out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(3)...)), 3, 0,
		func(ctx context.Context, ins []int) ([]int, []error) {
			calls.add(ins)
			if len(ins) == 1 {
				return ins, nil
			}
			<-ctx.Done() // the slice call hangs until its deadline
			return make([]int, len(ins)), []error{ctx.Err(), ctx.Err(), ctx.Err()}
		})
	pipeline.Sink(b, "sink", out, sink)
	p, err := b.Build()
	require.NoError(t, err)
	run := pipelinetest.Start(t.Context(), p)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(time.Second)
	res, err := run.Wait()
	require.NoError(t, err)
	assert.Equal(t, ints(3), append([]int{}, sink.Items()...))
	assert.Equal(t, [][]int{{0, 1, 2}, {0}, {1}, {2}}, calls.get())
	assert.Equal(t, int64(3), nodeOf(t, res, "bulk").ItemRetries)
}
