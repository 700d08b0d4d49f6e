package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

func TestRunDeliversEveryItemInOrder(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("double", m.opts...)
			src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(1000)...))
			sink := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", pipeline.Transform(b, "double", src, double()), sink)
			res, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			want := make([]int, 1000)
			for i := range want {
				want[i] = 2 * i
			}
			assert.Equal(t, want, sink.Items())
			assert.Equal(t, int64(1000), nodeOf(t, res, "src").Out)
			assert.Equal(t, int64(0), nodeOf(t, res, "src").In)
			assert.Equal(t, int64(1000), nodeOf(t, res, "double").In)
			assert.Equal(t, int64(1000), nodeOf(t, res, "double").Out)
			assert.Equal(t, int64(1000), nodeOf(t, res, "sink").In)
			assert.Equal(t, int64(1000), nodeOf(t, res, "sink").Out)
			assert.Equal(t, "double", res.Pipeline)
			assert.Len(t, res.RunID, 16)
		})
	}
}

func TestRunAgainAndStatsAddUp(t *testing.T) {
	t.Parallel()
	b := pipeline.New("again")
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2, 3)), sink)
	p := build(t, b)

	r1, err := p.Run(t.Context())
	require.NoError(t, err)
	r2, err := p.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2, 3, 1, 2, 3}, sink.Items())
	assert.NotEqual(t, r1.RunID, r2.RunID)
	assert.Equal(t, int64(3), nodeOf(t, r2, "sink").Out, "a Result holds its own run's counts")

	st := p.Stats()
	assert.Equal(t, r2.RunID, st.RunID)
	assert.False(t, st.Running)
	s, ok := st.Node("sink")
	require.True(t, ok)
	assert.Equal(t, int64(6), s.Out, "Stats add up over every run")
	_, ok = st.Node("nope")
	assert.False(t, ok)
	opens, closes, flushes := sink.Lifecycle()
	assert.Equal(t, [3]int{2, 2, 2}, [3]int{opens, closes, flushes})
}

func TestRunRefusesASecondConcurrentRun(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{})
	b := pipeline.New("busy")
	src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		close(started)
		<-release
		return nil
	}))
	pipeline.Sink(b, "sink", src, &pipelinetest.Collector[int]{})
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)
	<-started
	assert.True(t, p.Stats().Running)
	_, err := p.Run(t.Context())
	assert.ErrorIs(t, err, pipeline.ErrRunning)
	close(release)
	_, err = run.Wait()
	require.NoError(t, err)
}

type lifecycle struct {
	name string
	log  *eventLog
	fail map[string]error
}

type eventLog struct {
	mu  sync.Mutex
	evs []string
}

func (l *eventLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, s)
}

func (l *eventLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.evs...)
}

func (c *lifecycle) Open(context.Context) error { c.log.add(c.name + ".open"); return c.fail["open"] }
func (c *lifecycle) Close(context.Context) error {
	c.log.add(c.name + ".close")
	return c.fail["close"]
}
func (c *lifecycle) Flush(context.Context) error {
	c.log.add(c.name + ".flush")
	return c.fail["flush"]
}

type lcSource struct {
	lifecycle
	items []int
}

func (s *lcSource) Run(ctx context.Context, out node.Emitter[int]) error {
	for _, it := range s.items {
		if err := out.Emit(ctx, it); err != nil {
			return err
		}
	}
	return s.fail["run"]
}

type lcTransform struct {
	lifecycle
	panicOn int
}

func (t *lcTransform) Process(_ context.Context, x int) (int, error) {
	if x == t.panicOn {
		panic("boom on " + string(rune('0'+x)))
	}
	return x, nil
}

type lcSink struct {
	lifecycle
	got atomic.Int64
}

func (s *lcSink) Write(context.Context, int) error { s.got.Add(1); return s.fail["write"] }

func noRetries(o *resilience.Options) {
	o.ItemRetry.MaxRetries = 0
	o.NodeRetry.MaxRetries = 0
}

func lifecyclePipeline(log *eventLog, panicOn int, fail map[string]error) *pipeline.Builder {
	b := pipeline.New("lc", pipeline.WithResilience(noRetries))
	src := pipeline.Source[int](b, "src", &lcSource{lifecycle{"src", log, nil}, []int{1, 2, 3}})
	tr := pipeline.Transform[int, int](b, "tr", src, &lcTransform{lifecycle{"tr", log, nil}, panicOn})
	pipeline.Sink[int](b, "sink", tr, &lcSink{lifecycle: lifecycle{"sink", log, fail}})
	return b
}

func TestLifecycleOnSuccess(t *testing.T) {
	t.Parallel()
	log := &eventLog{}
	_, err := build(t, lifecyclePipeline(log, -1, nil)).Run(t.Context())
	require.NoError(t, err)
	evs := log.all()
	assert.ElementsMatch(t, []string{"src.open", "tr.open", "sink.open", "src.close", "tr.close", "sink.flush", "sink.close"}, evs)
	assert.Less(t, indexOf(evs, "sink.flush"), indexOf(evs, "sink.close"), "flush before close")
}

func TestPanicFailsTheRunAndClosesEveryNode(t *testing.T) {
	t.Parallel()
	log := &eventLog{}
	_, err := build(t, lifecyclePipeline(log, 2, nil)).Run(t.Context())
	var ne *pipeline.NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, "tr", ne.Node)
	var pe *resilience.PanicError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "boom on 2", pe.Value)
	assert.Contains(t, string(pe.Stack), "lcTransform")
	evs := log.all()
	for _, n := range []string{"src", "tr", "sink"} {
		assert.Contains(t, evs, n+".open")
		assert.Contains(t, evs, n+".close", "every node that opened is closed")
	}
	assert.NotContains(t, evs, "sink.flush", "a failed run is not flushed")
}

func TestOpenFailureClosesTheOthers(t *testing.T) {
	t.Parallel()
	log := &eventLog{}
	errDown := errors.New("database down")
	_, err := build(t, lifecyclePipeline(log, -1, map[string]error{"open": errDown})).Run(t.Context())
	require.ErrorIs(t, err, errDown)
	evs := log.all()
	assert.NotContains(t, evs, "sink.close", "a node whose Open failed is not closed")
	assert.Contains(t, evs, "sink.open")
}

func TestFlushAndCloseErrorsFailTheRun(t *testing.T) {
	t.Parallel()
	errFlush := errors.New("flush failed")
	_, err := build(t, lifecyclePipeline(&eventLog{}, -1, map[string]error{"flush": errFlush})).Run(t.Context())
	require.ErrorIs(t, err, errFlush)
	errClose := errors.New("close failed")
	_, err = build(t, lifecyclePipeline(&eventLog{}, -1, map[string]error{"close": errClose})).Run(t.Context())
	require.ErrorIs(t, err, errClose)
}

func TestFirstFailureCancelsTheRest(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			errBad := errors.New("bad item")
			b := pipeline.New("fail", append(m.opts, pipeline.WithResilience(noRetries))...)
			// An endless source: only the failure can stop it.
			src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
				for i := 0; ; i++ {
					if err := out.Emit(ctx, i); err != nil {
						return err
					}
				}
			}))
			tr := pipeline.Transform[int, int](b, "check", src, pipelinetest.FailAlways(errBad, 500))
			pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
			res, err := build(t, b).Run(t.Context())
			var ne *pipeline.NodeError
			require.ErrorAs(t, err, &ne)
			assert.Equal(t, "check", ne.Node)
			assert.ErrorIs(t, err, errBad)
			assert.Equal(t, `pipeline: node "check": bad item`, err.Error())
			assert.Equal(t, int64(1), nodeOf(t, res, "check").Failed)
			assert.LessOrEqual(t, nodeOf(t, res, "sink").Out, int64(500), "nothing after the bad item gets through")
			// Counts are published however the run ends, and agree along
			// the graph: what a node handed over, the next took in or still
			// had queued.
			read, check, write := nodeOf(t, res, "src"), nodeOf(t, res, "check"), nodeOf(t, res, "sink")
			assert.GreaterOrEqual(t, read.Out, check.In)
			assert.GreaterOrEqual(t, check.In, check.Out+check.Failed)
			assert.GreaterOrEqual(t, check.Out, write.In)
			assert.GreaterOrEqual(t, write.In, write.Out)
			assert.GreaterOrEqual(t, check.In, int64(501), "the bad item and those before it were read")
		})
	}
}

func TestSourceErrorFailsTheRun(t *testing.T) {
	t.Parallel()
	errSrc := errors.New("file corrupt")
	b := pipeline.New("src-fail", pipeline.WithResilience(noRetries))
	src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		if err := out.Emit(ctx, 1); err != nil {
			return err
		}
		return errSrc
	}))
	pipeline.Sink(b, "sink", src, &pipelinetest.Collector[int]{})
	_, err := build(t, b).Run(t.Context())
	var ne *pipeline.NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, "src", ne.Node)
	assert.ErrorIs(t, err, errSrc)
}

func TestCancellingTheCallerStopsEverything(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancelCause(t.Context())
			written := make(chan struct{}, 1)
			b := pipeline.New("cancel", m.opts...)
			src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
				for i := 0; ; i++ {
					if err := out.Emit(ctx, i); err != nil {
						return err
					}
				}
			}))
			pipeline.Sink(b, "sink", pipeline.Transform(b, "double", src, double()), node.SinkFunc[int](func(ctx context.Context, x int) error {
				select {
				case written <- struct{}{}:
				default:
				}
				return nil
			}))
			run := pipelinetest.Start(ctx, build(t, b))
			<-written
			errStop := errors.New("operator pressed stop")
			cancel(errStop)
			res, err := run.Wait()
			require.ErrorIs(t, err, errStop, "Run returns the cause of the caller's cancellation")
			var ne *pipeline.NodeError
			assert.False(t, errors.As(err, &ne), "a cancellation is not a node failure")
			assert.Zero(t, nodeOf(t, res, "double").Failed, "cancellation is not counted")
			assert.Zero(t, nodeOf(t, res, "double").ItemRetries)
		})
	}
}

func TestCancelledBeforeStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	b := pipeline.New("early")
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(100)...)), &pipelinetest.Collector[int]{})
	_, err := build(t, b).Run(ctx)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestStatsWhileRunning(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	reached := make(chan struct{})
	b := pipeline.New("live")
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(200)...))
	pipeline.Sink(b, "sink", src, node.SinkFunc[int](func(ctx context.Context, x int) error {
		if x == 100 {
			close(reached)
			<-gate
		}
		return nil
	}))
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)
	<-reached
	s, _ := p.Stats().Node("sink")
	// Counts are published at least every 64 items, so 100 written items
	// show as at least 64.
	assert.GreaterOrEqual(t, s.Out, int64(64))
	assert.LessOrEqual(t, s.Out, int64(100))
	assert.True(t, p.Stats().Running)
	close(gate)
	_, err := run.Wait()
	require.NoError(t, err)
	s, _ = p.Stats().Node("sink")
	assert.Equal(t, int64(200), s.Out)
}

func TestResultString(t *testing.T) {
	t.Parallel()
	b := pipeline.New("table")
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2)), &pipelinetest.Collector[int]{})
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	s := res.String()
	assert.Contains(t, s, "pipeline table run "+res.RunID)
	assert.Regexp(t, `src\s+source\s+0\s+2\s+0`, s)
	assert.Regexp(t, `sink\s+sink\s+2\s+2\s+0`, s)
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// TestIdleSourceItemsAreHandedOver checks that items a source leaves in a
// partly filled batch reach the sink while the source waits: the source
// below returns only after the sink saw its items, so without the
// flusher the run would never end.
func TestIdleSourceItemsAreHandedOver(t *testing.T) {
	t.Parallel()
	seen := make(chan int, 3)
	b := pipeline.New("idle")
	src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := range 3 {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
		}
		for range 3 {
			select {
			case <-seen:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}))
	pipeline.Sink(b, "sink", pipeline.Transform(b, "double", src, double()), node.SinkFunc[int](func(_ context.Context, x int) error {
		seen <- x
		return nil
	}))
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
}

func TestUnbufferedHandOver(t *testing.T) {
	t.Parallel()
	b := pipeline.New("sync", pipeline.WithBuffer(0), pipeline.WithHandOverBatch(1))
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", pipeline.Transform(b, "double", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(100)...)), double()), sink)
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	assert.Len(t, sink.Items(), 100)
}
