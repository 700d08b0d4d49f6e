package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// nodeNames returns the names of the nodes of s, in order.
func nodeNames(s pipeline.Stats) []string {
	out := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		out[i] = n.Node
	}
	return out
}

// runGuarded runs p on the calling goroutine and turns a panic of Run
// into a value, so that a broken engine fails the test instead of the
// test binary.
func runGuarded(ctx context.Context, p *pipeline.Pipeline) (panicked any, err error) {
	defer func() { panicked = recover() }()
	_, err = p.Run(ctx)
	return nil, err
}

func TestBuildGivesEachPipelineItsOwnCounters(t *testing.T) {
	t.Parallel()
	b := pipeline.New("twins")
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", pipeline.Transform(b, "double", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...)), double()), sink)
	p1 := build(t, b)
	p2 := build(t, b)

	_, err := p1.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(10), p1.Stats().Nodes[0].Out)
	for _, n := range p2.Stats().Nodes {
		assert.Zero(t, n.In, "node %q of a pipeline that never ran took nothing in", n.Node)
		assert.Zero(t, n.Out, "node %q of a pipeline that never ran handed nothing on", n.Node)
	}

	_, err = p2.Run(t.Context())
	require.NoError(t, err)
	s1, _ := p1.Stats().Node("sink")
	s2, _ := p2.Stats().Node("sink")
	assert.Equal(t, int64(10), s1.Out, "the run of p2 does not count in p1's stats")
	assert.Equal(t, int64(10), s2.Out)
	assert.Equal(t, 20, sink.Len())
}

func TestBuildGivesEachPipelineItsOwnBreaker(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	var healthy atomic.Bool
	dep := node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
		if !healthy.Load() {
			return 0, errFlaky
		}
		return x, nil
	})
	b := pipeline.New("twin-breakers", pipeline.WithClock(clock),
		pipeline.WithResilience(breaker(resilience.OpenFail, resilience.Skip)))
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", pipeline.Transform(b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(5)...)), dep), sink)
	p1 := build(t, b)
	p2 := build(t, b)

	_, err := p1.Run(t.Context())
	require.ErrorIs(t, err, resilience.ErrCircuitOpen, "three failures trip p1's breaker")

	healthy.Store(true)
	_, err = p2.Run(t.Context())
	require.NoError(t, err, "p2's breaker is not p1's: it never opened")
	assert.Equal(t, ints(5), sink.Items())
	c1, _ := p1.Stats().Node("call")
	c2, _ := p2.Stats().Node("call")
	assert.Equal(t, resilience.CircuitOpen, c1.Circuit)
	assert.Equal(t, resilience.CircuitClosed, c2.Circuit)
}

// A node added to the Builder after Build must not reach the built
// Pipeline. When it did, Run panicked on the goroutine that calls it,
// before any node goroutine started, so runGuarded catches such a panic;
// per-item hand-over keeps such a run from starting a flusher goroutine it
// would leak (goleak would then fail the whole package).
func TestNodeAddedAfterBuildChangesOnlyLaterBuilds(t *testing.T) {
	t.Parallel()
	b := pipeline.New("late", pipeline.WithHandOverBatch(1))
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...))
	first := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "first", src, first)
	p1 := build(t, b)

	late := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "late", src, late)

	panicked, err := runGuarded(t.Context(), p1)
	require.Nil(t, panicked, "Run of the pipeline built before the node was added panicked")
	require.NoError(t, err)
	assert.Equal(t, ints(10), first.Items())
	assert.Zero(t, late.Len(), "the node added after Build is not part of p1")
	assert.Equal(t, []string{"src", "first"}, nodeNames(p1.Stats()))

	p2 := build(t, b)
	panicked, err = runGuarded(t.Context(), p2)
	require.Nil(t, panicked)
	require.NoError(t, err)
	assert.Equal(t, []string{"src", "first", "late"}, nodeNames(p2.Stats()))
	assert.Equal(t, 20, first.Len())
	assert.Equal(t, ints(10), late.Items())
	s, _ := p1.Stats().Node("first")
	assert.Equal(t, int64(10), s.Out, "p2's run does not count in p1")
}

// buildRounds numbers the runs of TestBuildWhileRunningIsRaceFree.
var buildRounds atomic.Int32

// nested calls f under n more stack frames.
func nested(n int, f func()) {
	if n > 0 {
		nested(n-1, f)
		return
	}
	f()
}

// Not parallel: the race detector blames every test running when it fires.
// The detector works on happens-before, not on timing: Build writes what
// the run reads with nothing ordering the two, so sharing state between them
// is caught on every run under -race. The detector reports a race between the same
// two stacks only once per process, so each run of the test (-count) calls
// Build under a stack of its own depth.
func TestBuildWhileRunningIsRaceFree(t *testing.T) {
	depth := int(buildRounds.Add(1))
	clock := clockwork.NewFakeClock()
	b := pipeline.New("race", pipeline.WithClock(clock), pipeline.WithResilience(noRetries))
	sink := &pipelinetest.Collector[int]{}
	// A breaker makes the transform consult its options and breaker on
	// every item.
	out := pipeline.Transform(b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(500)...)), double(),
		pipeline.NodeResilience(breaker(resilience.OpenFail, resilience.Skip)))
	pipeline.Sink(b, "sink", out, sink)
	p := build(t, b)

	run := pipelinetest.Start(t.Context(), p)
	var later []*pipeline.Pipeline
	for range 20 {
		nested(depth, func() {
			q, err := b.Build()
			assert.NoError(t, err)
			later = append(later, q)
		})
	}
	_, err := run.Wait()
	require.NoError(t, err)
	assert.Equal(t, 500, sink.Len())

	_, err = later[0].Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 1000, sink.Len())
}

func TestClassifierPanicDuringProbeReleasesThePermit(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	errWeird := errors.New("weird")
	const (
		down = iota
		weird
		healthy
	)
	var mode atomic.Int32
	dep := node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
		switch mode.Load() {
		case down:
			return 0, errFlaky
		case weird:
			return 0, errWeird
		}
		return x, nil
	})
	classifier := resilience.Classifier{}.Transient(func(err error) bool {
		if err == errWeird {
			panic("classifier bug")
		}
		return false
	})
	b := pipeline.New("probe-panic", pipeline.WithClock(clock), pipeline.WithResilience(noRetries))
	sink := &pipelinetest.Collector[int]{}
	out := pipeline.Transform(b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(5)...)), dep,
		pipeline.NodeResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.ItemRetry.Classifier = classifier
			o.OnItemFailure = resilience.Skip
			o.CircuitBreaker = resilience.CircuitBreakerOptions{
				Enabled: true, ConsecutiveFailures: 2, OpenDuration: 10 * time.Second,
				HalfOpenProbes: 1, ProbeSuccesses: 1, WhenOpen: resilience.OpenFail, MaxPause: time.Minute,
			}
		}))
	pipeline.Sink(b, "sink", out, sink)
	p := build(t, b)

	// Two transient failures trip the breaker; the third item is refused.
	_, err := p.Run(t.Context())
	require.ErrorIs(t, err, resilience.ErrCircuitOpen)

	// The probe fails with an error whose classification panics.
	clock.Advance(11 * time.Second)
	mode.Store(weird)
	_, err = p.Run(t.Context())
	require.ErrorIs(t, err, resilience.ErrPanic)
	require.ErrorContains(t, err, "classifier bug")

	// The dependency is healthy again: whatever the panicking probe did to
	// the breaker, after another open duration a probe goes through.
	clock.Advance(11 * time.Second)
	mode.Store(healthy)
	for i := range 3 {
		_, err = p.Run(t.Context())
		s, _ := p.Stats().Node("call")
		require.NoError(t, err, "run %d after the outage: the breaker is %s", i+1, s.Circuit)
		assert.Equal(t, resilience.CircuitClosed, s.Circuit)
	}
	assert.Equal(t, slices.Concat(ints(5), ints(5), ints(5)), sink.Items())
}

var errRejected = errors.New("rejected")

func TestTrackedOutcomesAreEachItemsOwn(t *testing.T) {
	t.Parallel()
	const n, bad = 40, 10
	// check dead-letters the items whose value is in bad and passes the
	// others through.
	check := func(b *pipeline.Builder, name string, in pipeline.Stream[int], bad ...int) pipeline.Stream[int] {
		return pipeline.Transform[int, int](b, name, in, pipelinetest.FailAlways(errRejected, bad...),
			pipeline.NodeResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 0
				o.OnItemFailure = resilience.DeadLetter
			}))
	}
	sink := func(b *pipeline.Builder, name string, in pipeline.Stream[int]) {
		pipeline.Sink(b, name, in, &pipelinetest.Collector[int]{})
	}
	batchUnbatch := func(b *pipeline.Builder, in pipeline.Stream[int]) pipeline.Stream[int] {
		return pipeline.Unbatch(b, "unbatch", pipeline.Batch(b, "batch", in, 7, 0))
	}
	dropThirds := func(x int) bool { return x%3 != 0 }
	delivered := func(i int) node.Outcome {
		if i == bad {
			return node.DeadLettered
		}
		return node.Delivered
	}
	filtered := func(i int) node.Outcome {
		if i%3 == 0 {
			return node.Filtered
		}
		return delivered(i)
	}
	tests := []struct {
		name  string
		graph func(b *pipeline.Builder, in pipeline.Stream[int])
		want  func(i int) node.Outcome
		// shared: the items of a batch share its fate (a transform of
		// the slice may have reordered it), so batch-mates of the bad
		// item may report its outcome too, never the reverse.
		shared bool
	}{
		{"batch, unbatch", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			sink(b, "sink", check(b, "check", batchUnbatch(b, in), bad))
		}, delivered, false},
		{"batch, transform of the slice, unbatch", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			batches := pipeline.Batch(b, "batch", in, 7, 0)
			shifted := pipeline.Transform(b, "shift", batches, node.TransformFunc[[]int, []int](func(_ context.Context, xs []int) ([]int, error) {
				out := make([]int, len(xs))
				for i, x := range xs {
					out[i] = x + 1000
				}
				return out, nil
			}))
			sink(b, "sink", check(b, "check", pipeline.Unbatch(b, "unbatch", shifted), 1000+bad))
		}, delivered, true},
		{"batch, unbatch, filter", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			sink(b, "sink", check(b, "check", pipeline.Filter(b, "thirds", batchUnbatch(b, in), dropThirds), bad))
		}, filtered, false},
		{"batch, unbatch, parallel", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			out := pipeline.Transform[int, int](b, "check", batchUnbatch(b, in), pipelinetest.FailAlways(errRejected, bad),
				pipeline.Parallel(3), pipeline.NodeResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 0
					o.OnItemFailure = resilience.DeadLetter
				}))
			sink(b, "sink", out)
		}, delivered, false},
		{"batch, unbatch, broadcast", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			items := batchUnbatch(b, in)
			sink(b, "all", items)
			sink(b, "checked", check(b, "check", items, bad))
		}, delivered, false},
		{"flat map", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			two := pipeline.FlatMap(b, "two", in, func(_ context.Context, x int) ([]int, error) { return []int{x, x + 1000}, nil })
			sink(b, "sink", check(b, "check", two, 1000+bad))
		}, delivered, false},
		{"filter", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			sink(b, "sink", check(b, "check", pipeline.Filter(b, "thirds", in, dropThirds), bad))
		}, filtered, false},
		{"merge", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			other := pipeline.Source(b, "other", pipelinetest.NewSliceSource(100, 101, 102, 103, 104))
			sink(b, "sink", check(b, "check", pipeline.Merge(b, "merge", in, other), bad))
		}, delivered, false},
		{"broadcast", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			sink(b, "all", in)
			sink(b, "checked", check(b, "check", in, bad))
		}, delivered, false},
	}
	for _, m := range modes {
		for _, tt := range tests {
			t.Run(m.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				dlq := deadletter.NewMemory(10)
				b := pipeline.New("own-fate", slices.Concat(m.opts, []pipeline.Option{pipeline.WithDeadLetter(dlq)})...)
				src := pipelinetest.NewTrackedSource(ints(n)...)
				tt.graph(b, pipeline.Source[int](b, "src", src))
				_, err := build(t, b).Run(t.Context())
				require.NoError(t, err)
				require.Equal(t, 1, dlq.Len(), "one item is dead-lettered")
				want := make([]node.Outcome, n)
				for i := range want {
					want[i] = tt.want(i)
				}
				got := once(t, src, n)
				if tt.shared {
					mates := 0
					for i, o := range got {
						switch {
						case i == bad:
							assert.Equal(t, node.DeadLettered, o, "the bad item")
						case o == node.DeadLettered:
							mates++
						default:
							assert.Equal(t, node.Delivered, o, "item %d", i)
						}
					}
					assert.Less(t, mates, 7, "only the bad item's batch-mates share its fate")
					return
				}
				assert.Equal(t, want, got, "each item's done reports its own fate")
			})
		}
	}
}

// statusError is an HTTP-like error; 503 is transient for the default
// classifier.
type statusError int

func (e statusError) Error() string   { return fmt.Sprint(int(e)) }
func (e statusError) StatusCode() int { return int(e) }

func TestOpenPauseTurnsAnOutageIntoBackpressure(t *testing.T) {
	t.Parallel()
	for _, parallel := range []int{1, 4} {
		t.Run(fmt.Sprint("parallel=", parallel), func(t *testing.T) {
			t.Parallel()
			const items, outage = 20, 10 * time.Second
			clock := clockwork.NewFakeClock()
			start := clock.Now()
			dep := node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
				if clock.Since(start) < outage {
					return 0, statusError(503)
				}
				return x, nil
			})
			dlq := deadletter.NewMemory(items)
			closed := &closedAgain{ch: make(chan struct{})}
			b := pipeline.New("outage", pipeline.WithClock(clock), pipeline.WithDeadLetter(dlq),
				pipeline.WithResilience(noRetries), pipeline.WithObserver(closed))
			src := pipelinetest.NewTrackedSource(ints(items)...)
			out := pipeline.Transform(b, "call", pipeline.Source[int](b, "src", src), dep, pipeline.Parallel(parallel),
				pipeline.NodeResilience(func(o *resilience.Options) {
					// Three retries: the three failures that trip the
					// breaker leave the first item one retry.
					o.ItemRetry.MaxRetries = 3
					o.ItemRetry.Backoff = resilience.Constant(100 * time.Millisecond)
					o.OnItemFailure = resilience.DeadLetter
					o.CircuitBreaker = resilience.CircuitBreakerOptions{
						Enabled: true, ConsecutiveFailures: 3, OpenDuration: time.Second,
						HalfOpenProbes: 1, ProbeSuccesses: 1, WhenOpen: resilience.OpenPause, MaxPause: time.Minute,
					}
				}))
			sink := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", out, sink)
			run := pipelinetest.Start(t.Context(), build(t, b))
			res, err := advanceWhileAllWait(t.Context(), clock, run, 100*time.Millisecond, parallel, closed.ch)
			require.NoError(t, err)

			var dead []string
			for _, env := range dlq.Envelopes() {
				dead = append(dead, fmt.Sprintf("item %v: %s", env.Item, env.ErrText))
			}
			assert.Empty(t, dead, "a paused breaker dead-letters nothing")
			assert.Zero(t, nodeOf(t, res, "call").DeadLettered)
			assert.Equal(t, ints(items), sink.Items(), "every item is delivered once the outage ends")
			assert.Equal(t, repeat(node.Delivered, items), once(t, src, items))
			assert.GreaterOrEqual(t, clock.Since(start), outage)
		})
	}
}

// closedAgain closes ch when the breaker first closes again, which ends the
// outage.
type closedAgain struct {
	observer.Nop
	once sync.Once
	ch   chan struct{}
}

func (c *closedAgain) OnCircuitStateChanged(e observer.CircuitEvent) {
	if e.To == resilience.CircuitClosed {
		c.once.Do(func() { close(c.ch) })
	}
}

// advanceWhileAllWait moves clock by step each time all n workers wait on
// it, until closed is closed, then each time one goroutine waits, until the
// run returns. Until the breaker closes again every worker holds an item
// that only time moves on (a retry's backoff, a pause), so no time passes
// while one of them is busy: AdvanceUntilDone would advance on the other
// workers' pause timers while a probe is under way, and under load could
// run the clock past MaxPause before the probe, made after the outage,
// closes the breaker.
func advanceWhileAllWait(ctx context.Context, clock *clockwork.FakeClock, run *pipelinetest.Running, step time.Duration, n int, closed <-chan struct{}) (pipeline.Result, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-run.Done():
			cancel()
		case <-wctx.Done():
		}
	}()
	for {
		bctx, bcancel := wctx, context.CancelFunc(func() {})
		select {
		case <-closed:
			n = 1
		default:
			bctx, bcancel = context.WithCancel(wctx)
			go func() {
				select {
				case <-closed:
					bcancel()
				case <-bctx.Done():
				}
			}()
		}
		err := clock.BlockUntilContext(bctx, n)
		bcancel()
		switch {
		case run.Finished():
			return run.Wait()
		case wctx.Err() != nil:
			return pipeline.Result{}, wctx.Err()
		case err != nil:
			continue // the breaker closed: one waiter is enough now
		}
		clock.Advance(step)
	}
}

// buildGuarded builds what f returns, turning a panic of f or Build into a
// test failure, so that one bad case does not abort the others.
func buildGuarded(t *testing.T, f func() *pipeline.Builder) (ok bool, err error) {
	t.Helper()
	defer func() {
		if v := recover(); v != nil {
			t.Errorf("panicked instead of returning a Build error: %v", v)
			ok = false
		}
	}()
	p, err := f().Build()
	assert.True(t, p == nil, "Build returned a pipeline with its error")
	return true, err
}

func TestBadInputIsABuildError(t *testing.T) {
	t.Parallel()
	// graph builds src -> t -> sink with the given parts.
	graph := func(b *pipeline.Builder, src node.Source[int], tr node.Transform[int, int], sink node.Sink[int], trOpts, sinkOpts []pipeline.NodeOption) *pipeline.Builder {
		out := pipeline.Transform(b, "t", pipeline.Source(b, "src", src), tr, trOpts...)
		pipeline.Sink(b, "sink", out, sink, sinkOpts...)
		return b
	}
	okSrc := pipelinetest.NewSliceSource(1, 2)
	okSink := &pipelinetest.Collector[int]{}
	var (
		nilTransform node.TransformFunc[int, int]
		nilSink      node.SinkFunc[int]
		nilSource    node.SourceFunc[int]
	)
	tests := []struct {
		name  string
		node  string   // the node the problem is about; "" for the pipeline
		words []string // the error's text holds each, in any case
		build func() *pipeline.Builder
	}{
		{"nil Option", "", []string{"option", "nil"}, func() *pipeline.Builder {
			return graph(pipeline.New("p", nil), okSrc, double(), okSink, nil, nil)
		}},
		{"nil NodeOption of a transform", "t", []string{"option", "nil"}, func() *pipeline.Builder {
			return graph(pipeline.New("p"), okSrc, double(), okSink, []pipeline.NodeOption{pipeline.Parallel(2), nil}, nil)
		}},
		{"nil NodeOption of a sink", "sink", []string{"option", "nil"}, func() *pipeline.Builder {
			return graph(pipeline.New("p"), okSrc, double(), okSink, nil, []pipeline.NodeOption{nil})
		}},
		{"WithResilience(nil)", "", []string{"WithResilience", "nil"}, func() *pipeline.Builder {
			return graph(pipeline.New("p", pipeline.WithResilience(nil)), okSrc, double(), okSink, nil, nil)
		}},
		{"NodeResilience(nil)", "t", []string{"NodeResilience", "nil"}, func() *pipeline.Builder {
			return graph(pipeline.New("p"), okSrc, double(), okSink, []pipeline.NodeOption{pipeline.NodeResilience(nil)}, nil)
		}},
		{"typed nil TransformFunc", "t", []string{"transform", "nil"}, func() *pipeline.Builder {
			return graph(pipeline.New("p"), okSrc, nilTransform, okSink, nil, nil)
		}},
		{"typed nil SinkFunc", "sink", []string{"sink", "nil"}, func() *pipeline.Builder {
			return graph(pipeline.New("p"), okSrc, double(), nilSink, nil, nil)
		}},
		{"typed nil SourceFunc", "src", []string{"source", "nil"}, func() *pipeline.Builder {
			return graph(pipeline.New("p"), nilSource, double(), okSink, nil, nil)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ok, err := buildGuarded(t, tt.build)
			if !ok {
				return
			}
			require.Error(t, err, "Build accepts %s", tt.name)
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			var texts []string
			found := false
			for _, e := range unjoinAll(err) {
				var be *pipeline.BuildError
				if !errors.As(e, &be) {
					continue
				}
				texts = append(texts, e.Error())
				if tt.node != "" && be.Node != tt.node {
					continue
				}
				text := strings.ToLower(e.Error())
				all := true
				for _, w := range tt.words {
					all = all && strings.Contains(text, strings.ToLower(w))
				}
				found = found || all
			}
			where := "the pipeline"
			if tt.node != "" {
				where = fmt.Sprintf("node %q", tt.node)
			}
			assert.True(t, found, "no BuildError about %s saying %q among %q", where, tt.words, texts)
		})
	}
}

// unjoinAll returns the errors joined in err, or err alone.
func unjoinAll(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestRunErrorNamesTheNodeOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		opts  func(*resilience.Options)
		check func(t *testing.T, err error)
	}{
		{"item retry exhausted", func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.Backoff = resilience.NoBackoff()
		}, func(t *testing.T, err error) {
			var re *resilience.RetryExhaustedError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, resilience.ItemRetry, re.Kind)
			assert.Equal(t, 3, re.Attempts)
			assert.ErrorIs(t, err, errFlaky)
			assert.ErrorIs(t, err, resilience.ErrRetryExhausted)
		}},
		{"node restarts exhausted", func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.NodeRestart.MaxRestarts = 1
			o.NodeRestart.Backoff = resilience.NoBackoff()
		}, func(t *testing.T, err error) {
			var re *resilience.RetryExhaustedError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, resilience.NodeRestart, re.Kind)
			assert.Equal(t, 2, re.Attempts)
			assert.ErrorIs(t, err, errFlaky)
		}},
		{"circuit open", func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.OnItemFailure = resilience.Skip
			o.CircuitBreaker = resilience.CircuitBreakerOptions{
				Enabled: true, ConsecutiveFailures: 1, OpenDuration: time.Minute,
				HalfOpenProbes: 1, ProbeSuccesses: 1, WhenOpen: resilience.OpenFail, MaxPause: time.Minute,
			}
		}, func(t *testing.T, err error) {
			var coe *resilience.CircuitOpenError
			require.ErrorAs(t, err, &coe)
			assert.ErrorIs(t, err, resilience.ErrCircuitOpen)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("orders", pipeline.WithClock(clockwork.NewFakeClock()), pipeline.WithResilience(noRetries))
			out := pipeline.Transform[int, int](b, "price", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(3)...)),
				pipelinetest.FailAlways(errFlaky, ints(3)...), pipeline.NodeResilience(tt.opts))
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
			_, err := build(t, b).Run(t.Context())
			require.Error(t, err)
			var ne *pipeline.NodeError
			require.ErrorAs(t, err, &ne)
			assert.Equal(t, "price", ne.Node)
			assert.Equal(t, 1, strings.Count(err.Error(), "price"), "the node is named once in %q", err.Error())
			tt.check(t, err)
		})
	}
}
