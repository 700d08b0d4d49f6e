package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
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

// Empty input, one item, and all items but the first late.
func TestEventTimeEdges(t *testing.T) {
	t.Parallel()
	t.Run("empty", func(t *testing.T) {
		t.Parallel()
		got, late, st := runEventWindows(t, nil, nil, pipeline.TimeWindow(time.Minute), time.Minute, 0)
		assert.Len(t, got, 0)
		assert.Len(t, late, 0)
		assert.Equal(t, int64(0), st.Late)
	})
	t.Run("one item", func(t *testing.T) {
		t.Parallel()
		e := ev{ID: 1, Key: 7, V: 5, At: epoch.Add(90 * time.Second)}
		got, late, _ := runEventWindows(t, nil, []ev{e}, pipeline.TimeWindow(time.Minute), 0, 0)
		assert.Len(t, late, 0)
		assert.Equal(t, []pipeline.Window[int, int]{{Key: 7, Start: epoch.Add(time.Minute), End: epoch.Add(2 * time.Minute), Count: 1, Value: 5, Partial: true}}, got)
	})
	t.Run("all late", func(t *testing.T) {
		t.Parallel()
		items := []ev{{ID: 0, V: 1, At: epoch.Add(time.Hour)}}
		for i := 1; i <= 50; i++ {
			items = append(items, ev{ID: i, V: 1, At: epoch.Add(time.Duration(i) * time.Second)})
		}
		got, late, st := runEventWindows(t, []pipeline.Option{pipeline.WithHandOverBatch(4)}, items, pipeline.SlidingWindow(time.Minute, 10*time.Second), time.Minute, 0)
		require.Len(t, late, 50)
		for i, e := range late {
			assert.Equal(t, i+1, e.ID, "late items keep their order")
		}
		assert.Equal(t, int64(50), st.Late)
		assert.Equal(t, int64(51), st.In)
		assert.Equal(t, int64(50+6), st.Out, "the late items and the first item's six windows")
		for _, w := range got {
			assert.Equal(t, 1, w.Count)
			assert.True(t, w.Partial)
		}
	})
}

// evFeed is a source whose items the test hands in, so that it moves the
// clock only once the aggregate has taken them.
type evFeed struct{ items chan ev }

func (f *evFeed) Run(ctx context.Context, out node.Emitter[ev]) error {
	for {
		select {
		case v, ok := <-f.items:
			if !ok {
				return nil
			}
			if err := out.Emit(ctx, v); err != nil {
				return err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// windowLog collects windows a ForEach hands it.
type windowLog struct {
	mu  sync.Mutex
	got []pipeline.Window[int, int]
}

func (l *windowLog) write(_ context.Context, w pipeline.Window[int, int]) error {
	l.mu.Lock()
	l.got = append(l.got, w)
	l.mu.Unlock()
	return nil
}

// wait returns the windows once there are n.
func (l *windowLog) wait(n int) []pipeline.Window[int, int] {
	deadline := time.Now().Add(spinBound)
	for {
		l.mu.Lock()
		if len(l.got) >= n {
			out := slices.Clone(l.got)
			l.mu.Unlock()
			return out
		}
		l.mu.Unlock()
		spun(deadline, "windows written")
	}
}

func (l *windowLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.got)
}

// taken waits until node name took n items in.
func taken(p *pipeline.Pipeline, name string, n int64) {
	deadline := time.Now().Add(spinBound)
	for {
		if st, _ := p.Stats().Node(name); st.In >= n {
			return
		}
		spun(deadline, fmt.Sprintf("node %q to take %d items", name, n))
	}
}

// spinBound bounds, in real time, a test's wait that yields the processor
// until the pipeline's goroutines get somewhere.
const spinBound = 30 * time.Second

// spun yields the processor, and panics (with every goroutine's stack,
// for the test binary's traceback) once deadline passed: a wait that
// cannot end fails at once instead of holding the package to its timeout.
func spun(deadline time.Time, what string) {
	if time.Now().After(deadline) {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("waited %s for %s", spinBound, what))
	}
	runtime.Gosched()
}

// A quiet source does not hold windows open: idle after its last item,
// the windows open then are handed on, Partial, while the input is still
// open. The watermark stays: an item after that which is not behind it
// adds to its window, handed on again as an Update, and is not late.
func TestEventTimeIdleSourceClosesWindows(t *testing.T) {
	t.Parallel()
	for range 10 {
		clock := clockwork.NewFakeClockAt(epoch.Add(24 * time.Hour)) // the pipeline's clock is not event time
		f := &evFeed{items: make(chan ev)}
		dlq := deadletter.NewMemory(10)
		b := pipeline.New("et", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithDeadLetter(dlq))
		wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", f), evKey, pipeline.TimeWindow(time.Minute), evZero, evSum,
			pipeline.EventTime(evAt, time.Minute, 5*time.Second))
		log := &windowLog{}
		pipeline.ForEach(b, "store", wins, log.write)
		p := build(t, b)
		run := pipelinetest.Start(t.Context(), p)
		f.items <- ev{V: 1, At: epoch.Add(30 * time.Second)}
		f.items <- ev{V: 2, At: epoch.Add(70 * time.Second)} // watermark 0:10
		taken(p, "sum", 2)
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
		clock.Advance(4 * time.Second)
		assert.Equal(t, 0, log.len(), "not idle yet")
		clock.Advance(time.Second) // idle: both open windows are handed on
		w := log.wait(2)
		assert.Equal(t, pipeline.Window[int, int]{Start: epoch, End: epoch.Add(time.Minute), Count: 1, Value: 1, Partial: true}, w[0])
		assert.Equal(t, pipeline.Window[int, int]{Start: epoch.Add(time.Minute), End: epoch.Add(2 * time.Minute), Count: 1, Value: 2, Partial: true}, w[1])
		f.items <- ev{ID: 9, V: 4, At: epoch.Add(90 * time.Second)} // ahead of the watermark 0:10
		taken(p, "sum", 3)
		close(f.items)
		res, err := run.Wait()
		require.NoError(t, err)
		w = log.wait(0)
		require.Len(t, w, 3)
		assert.Equal(t, pipeline.Window[int, int]{Start: epoch.Add(time.Minute), End: epoch.Add(2 * time.Minute), Count: 2, Value: 6, Partial: true, Update: true}, w[2])
		assert.Len(t, dlq.Envelopes(), 0)
		assert.Equal(t, int64(0), nodeOf(t, res, "sum").Late)
	}
}

// idle 0 is no idle timeout: however long the source is quiet, the
// windows wait for items or the end of input.
func TestEventTimeNoIdleTimeout(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	f := &evFeed{items: make(chan ev)}
	b := pipeline.New("et", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithDeadLetter(deadletter.NewMemory(1)))
	wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", f), evKey, pipeline.TimeWindow(time.Minute), evZero, evSum,
		pipeline.EventTime(evAt, 0, 0))
	log := &windowLog{}
	pipeline.ForEach(b, "store", wins, log.write)
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)
	f.items <- ev{V: 1, At: epoch}
	taken(p, "sum", 1)
	clock.Advance(24 * time.Hour)
	assert.Equal(t, 0, log.len())
	f.items <- ev{V: 2, At: epoch.Add(time.Minute)} // the watermark to 1:00
	w := log.wait(1)
	assert.Equal(t, pipeline.Window[int, int]{Start: epoch, End: epoch.Add(time.Minute), Count: 1, Value: 1}, w[0])
	close(f.items)
	_, err := run.Wait()
	require.NoError(t, err)
	assert.True(t, log.wait(2)[1].Partial)
}

// evTrackedFeed is evFeed with EmitTracked; it records each item's
// outcomes by ID.
type evTrackedFeed struct {
	items    chan ev
	mu       sync.Mutex
	outcomes map[int][]node.Outcome
}

func (f *evTrackedFeed) Run(ctx context.Context, out node.Emitter[ev]) error {
	for {
		select {
		case v, ok := <-f.items:
			if !ok {
				return nil
			}
			if err := out.EmitTracked(ctx, v, func(o node.Outcome) {
				f.mu.Lock()
				f.outcomes[v.ID] = append(f.outcomes[v.ID], o)
				f.mu.Unlock()
			}); err != nil {
				return err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func (f *evTrackedFeed) get() map[int][]node.Outcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int][]node.Outcome{}
	for k, v := range f.outcomes {
		out[k] = slices.Clone(v)
	}
	return out
}

// Cancelled with event-time windows open (sliding, one window handed on,
// allowed lateness keeping it): every tracked item ends exactly once, and
// those still in open windows end Failed. Drained instead, the open
// windows are handed on Partial and every item is Delivered.
func TestEventTimeCancelAndDrainWithOpenWindows(t *testing.T) {
	t.Parallel()
	for _, drain := range []bool{false, true} {
		t.Run(map[bool]string{false: "cancel", true: "drain"}[drain], func(t *testing.T) {
			t.Parallel()
			for range 20 {
				clock := clockwork.NewFakeClock()
				src := &evTrackedFeed{items: make(chan ev), outcomes: map[int][]node.Outcome{}}
				b := pipeline.New("et", pipeline.WithClock(clock), pipeline.WithDeadLetter(deadletter.NewMemory(10)))
				wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", src), evKey, pipeline.SlidingWindow(time.Minute, 20*time.Second), evZero, evSum,
					pipeline.EventTime(evAt, 10*time.Second, 0), pipeline.AllowedLateness(time.Minute))
				log := &windowLog{}
				pipeline.ForEach(b, "store", wins, log.write)
				p := build(t, b)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				run := pipelinetest.Start(ctx, p)
				for i := range 30 {
					src.items <- ev{ID: i, Key: i % 2, V: 1, At: epoch.Add(time.Duration(i) * 3 * time.Second)}
				}
				taken(p, "sum", 30)
				if drain {
					require.True(t, p.Drain())
					_, err := run.Wait()
					require.NoError(t, err)
				} else {
					cancel()
					_, err := run.Wait()
					require.ErrorIs(t, err, context.Canceled)
				}
				got := src.get()
				require.Len(t, got, 30)
				failed := 0
				for i, o := range got {
					require.Len(t, o, 1, "item %d", i)
					if drain {
						assert.Equal(t, node.Delivered, o[0], "item %d", i)
					}
					if o[0] == node.Failed {
						failed++
					}
				}
				if !drain {
					assert.True(t, failed > 0, "the last items were in open windows")
				} else {
					total := 0
					for _, w := range log.wait(0) {
						if w.End.After(epoch.Add(87*time.Second - 10*time.Second)) {
							assert.True(t, w.Partial, "window %v ends past the watermark", w.End)
						}
						total += w.Count
					}
					assert.Equal(t, 30*3, total, "each item in three sliding windows")
				}
			}
		})
	}
}

// Items later than the watermark but within the allowed lateness make
// their window fire again, marked Update, with the whole window's count
// and value; a tracked item ends with the hand-over it is in.
func TestEventTimeAllowedLatenessUpdates(t *testing.T) {
	t.Parallel()
	items := []ev{
		{ID: 0, V: 1, At: epoch.Add(10 * time.Second)},
		{ID: 1, V: 2, At: epoch.Add(65 * time.Second)},  // the watermark to 1:05: [0:00, 1:00) fires
		{ID: 2, V: 4, At: epoch.Add(20 * time.Second)},  // 45 s behind, allowed: an update
		{ID: 3, V: 8, At: epoch.Add(30 * time.Second)},  // another update
		{ID: 4, V: 16, At: epoch.Add(3 * time.Minute)},  // the watermark to 3:00: [0:00, 1:00) is gone
		{ID: 5, V: 32, At: epoch.Add(50 * time.Second)}, // late
	}
	b := pipeline.New("et", pipeline.WithHandOverBatch(1))
	src := pipelinetest.NewTrackedSource(items...)
	var late pipeline.Stream[ev]
	wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", src), evKey, pipeline.TimeWindow(time.Minute), evZero, evSum,
		pipeline.EventTime(evAt, 0, 0), pipeline.AllowedLateness(time.Minute), pipeline.Late(&late))
	col := &pipelinetest.Collector[pipeline.Window[int, int]]{}
	lateCol := &pipelinetest.Collector[ev]{}
	pipeline.Sink(b, "store", wins, col)
	pipeline.Sink(b, "late", late, lateCol)
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	first := pipeline.Window[int, int]{Start: epoch, End: epoch.Add(time.Minute)}
	want := []pipeline.Window[int, int]{first, first, first,
		{Start: epoch.Add(time.Minute), End: epoch.Add(2 * time.Minute), Count: 1, Value: 2},
		{Start: epoch.Add(3 * time.Minute), End: epoch.Add(4 * time.Minute), Count: 1, Value: 16, Partial: true}}
	want[0].Count, want[0].Value = 1, 1
	want[1].Count, want[1].Value, want[1].Update = 2, 5, true
	want[2].Count, want[2].Value, want[2].Update = 3, 13, true
	assert.Equal(t, want, col.Items())
	assert.Equal(t, []ev{items[5]}, lateCol.Items())
	for i, o := range onceOf(t, src, 6) {
		assert.Equal(t, node.Delivered, o, "item %d", i)
	}
	st := nodeOf(t, res, "sum")
	assert.Equal(t, int64(1), st.Late)
	assert.Equal(t, int64(6), st.Out, "five windows and one late item")
	lateNode := nodeOf(t, res, "sum[late]")
	assert.Equal(t, int64(1), lateNode.Out)
}

// A failure rule can skip late items instead: no dead-letter sink is
// needed, and each is counted Late and Skipped.
func TestEventTimeLateFailureRule(t *testing.T) {
	t.Parallel()
	b := pipeline.New("et", pipeline.WithDeadLetter(deadletter.NewMemory(10)), pipeline.WithResilience(func(o *resilience.Options) {
		o.FailureRules = []resilience.FailureRule{{Match: func(err error) bool { return errors.Is(err, pipeline.ErrLate) }, Action: resilience.Skip}}
	}))
	items := []ev{{At: epoch.Add(time.Hour)}, {ID: 1, At: epoch}}
	wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", pipelinetest.NewSliceSource(items...)), evKey, pipeline.TimeWindow(time.Minute), evZero, evSum,
		pipeline.EventTime(evAt, 0, 0))
	pipeline.Sink(b, "store", wins, &pipelinetest.Collector[pipeline.Window[int, int]]{})
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	st := nodeOf(t, res, "sum")
	assert.Equal(t, int64(1), st.Late)
	assert.Equal(t, int64(1), st.Skipped)
}

// A failure rule that fails the run on a late item fails it with the
// LateError, naming the node.
func TestEventTimeLateFailsRun(t *testing.T) {
	t.Parallel()
	b := pipeline.New("et", pipeline.WithDeadLetter(deadletter.NewMemory(10)), pipeline.WithResilience(func(o *resilience.Options) {
		o.FailureRules = []resilience.FailureRule{{Match: func(err error) bool { return errors.Is(err, pipeline.ErrLate) }, Action: resilience.Fail}}
	}))
	items := []ev{{At: epoch.Add(time.Hour)}, {ID: 1, At: epoch}}
	wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", pipelinetest.NewSliceSource(items...)), evKey, pipeline.TimeWindow(time.Minute), evZero, evSum,
		pipeline.EventTime(evAt, 0, 0))
	pipeline.Sink(b, "store", wins, &pipelinetest.Collector[pipeline.Window[int, int]]{})
	_, err := build(t, b).Run(t.Context())
	require.ErrorIs(t, err, pipeline.ErrLate)
	var ne *pipeline.NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, "sum", ne.Node)
}

// Build names each misuse of the event-time options.
func TestEventTimeBuildErrors(t *testing.T) {
	t.Parallel()
	src := func(b *pipeline.Builder) pipeline.Stream[ev] {
		return pipeline.Source(b, "src", pipelinetest.NewSliceSource[ev]())
	}
	agg := func(b *pipeline.Builder, spec pipeline.WindowSpec, opts ...pipeline.NodeOption) {
		wins := pipeline.Aggregate(b, "sum", src(b), evKey, spec, evZero, evSum, opts...)
		pipeline.Sink(b, "store", wins, &pipelinetest.Collector[pipeline.Window[int, int]]{})
	}
	dl := pipeline.WithDeadLetter(deadletter.NewMemory(1))
	for name, tc := range map[string]struct {
		build func(b *pipeline.Builder)
		opts  []pipeline.Option
		want  string
	}{
		"no dead-letter sink": {func(b *pipeline.Builder) {
			agg(b, pipeline.TimeWindow(time.Minute), pipeline.EventTime(evAt, 0, 0))
		}, nil, `node "sum": EventTime: late items are dead-lettered, and the pipeline has no dead-letter sink`},
		"nil function": {func(b *pipeline.Builder) {
			agg(b, pipeline.TimeWindow(time.Minute), pipeline.EventTime[ev](nil, 0, 0))
		}, []pipeline.Option{dl}, `node "sum": EventTime: the time function is nil`},
		"wrong type": {func(b *pipeline.Builder) {
			agg(b, pipeline.TimeWindow(time.Minute), pipeline.EventTime(func(int) time.Time { return time.Time{} }, 0, 0))
		}, []pipeline.Option{dl}, `node "sum": EventTime: the time function takes int, and the node's items are pipeline_test.ev`},
		"negative": {func(b *pipeline.Builder) {
			agg(b, pipeline.TimeWindow(time.Minute), pipeline.EventTime(evAt, -time.Second, -time.Second))
		}, []pipeline.Option{dl}, `node "sum": EventTime: maxLateness -1s: must not be negative`},
		"negative idle": {func(b *pipeline.Builder) {
			agg(b, pipeline.TimeWindow(time.Minute), pipeline.EventTime(evAt, 0, -time.Second))
		}, []pipeline.Option{dl}, `node "sum": EventTime: idle -1s: must not be negative`},
		"allowed without event time": {func(b *pipeline.Builder) {
			agg(b, pipeline.TimeWindow(time.Minute), pipeline.AllowedLateness(time.Minute))
		}, nil, `node "sum": AllowedLateness: needs EventTime`},
		"allowed on count": {func(b *pipeline.Builder) {
			agg(b, pipeline.CountWindow(3), pipeline.EventTime(evAt, 0, 0), pipeline.AllowedLateness(time.Minute))
		}, []pipeline.Option{dl}, `node "sum": AllowedLateness: a CountWindow on event time has no window to correct`},
		"allowed on session": {func(b *pipeline.Builder) {
			agg(b, pipeline.SessionWindow(time.Minute), pipeline.EventTime(evAt, 0, 0), pipeline.AllowedLateness(time.Minute))
		}, []pipeline.Option{dl}, `node "sum": AllowedLateness: a late item could join a SessionWindow`},
		"negative allowed": {func(b *pipeline.Builder) {
			agg(b, pipeline.TimeWindow(time.Minute), pipeline.EventTime(evAt, 0, 0), pipeline.AllowedLateness(-time.Minute))
		}, []pipeline.Option{dl}, `node "sum": AllowedLateness(-1m0s): must not be negative`},
		"session gap": {func(b *pipeline.Builder) {
			agg(b, pipeline.SessionWindow(0))
		}, nil, `node "sum": SessionWindow(0s): the gap must be positive`},
		"late without event time": {func(b *pipeline.Builder) {
			var late pipeline.Stream[ev]
			agg(b, pipeline.TimeWindow(time.Minute), pipeline.Late(&late))
			pipeline.Sink(b, "late", late, &pipelinetest.Collector[ev]{})
		}, nil, `node "sum": Late: needs EventTime`},
		"late not read": {func(b *pipeline.Builder) {
			var late pipeline.Stream[ev]
			agg(b, pipeline.TimeWindow(time.Minute), pipeline.EventTime(evAt, 0, 0), pipeline.Late(&late))
		}, nil, `node "sum[late]": output stream is consumed by no node`},
		"late of another type": {func(b *pipeline.Builder) {
			var late pipeline.Stream[int]
			agg(b, pipeline.TimeWindow(time.Minute), pipeline.EventTime(evAt, 0, 0), pipeline.Late(&late))
			pipeline.Sink(b, "late", late, &pipelinetest.Collector[int]{})
		}, nil, `node "sum": Late: the stream is of int, and the node's items are pipeline_test.ev`},
		"on a transform": {func(b *pipeline.Builder) {
			out := pipeline.Map(b, "map", src(b), func(_ context.Context, e ev) (ev, error) { return e, nil }, pipeline.EventTime(evAt, 0, 0))
			pipeline.Sink(b, "store", out, &pipelinetest.Collector[ev]{})
		}, nil, `node "map": EventTime, AllowedLateness and Late: only an Aggregate has windows, not a transform`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("et", tc.opts...)
			tc.build(b)
			_, err := b.Build()
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			assert.True(t, strings.Contains(err.Error(), tc.want), "%v\nwants %s", err, tc.want)
		})
	}
}

// The late items of a tracked source that go to a Late output end with the
// outcome they have there; a batched hand-over changes nothing.
func TestEventTimeLateOutputTracked(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(1, 2))
			items := genItems(r, 100, 3, 10*time.Minute)
			slices.Reverse(items) // all but the first are late, or in its window
			for i := range items {
				items[i].ID = i
			}
			b := pipeline.New("et", m.opts...)
			src := pipelinetest.NewTrackedSource(items...)
			var late pipeline.Stream[ev]
			wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", src), evKey, pipeline.TimeWindow(time.Minute), evZero, evSum,
				pipeline.EventTime(evAt, 0, 0), pipeline.Late(&late))
			pipeline.Sink(b, "store", wins, &pipelinetest.Collector[pipeline.Window[int, int]]{})
			lateCol := &pipelinetest.Collector[ev]{}
			pipeline.ForEach(b, "late", late, func(ctx context.Context, e ev) error { return lateCol.Write(ctx, e) })
			res, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			for i, o := range onceOf(t, src, 100) {
				assert.Equal(t, node.Delivered, o, "item %d", i)
			}
			st := nodeOf(t, res, "sum")
			assert.Equal(t, int64(lateCol.Len()), st.Late)
			assert.True(t, st.Late > 50)
		})
	}
}

// onceOf is once for a source of any items: each of the n items ended
// exactly once; it returns their outcomes by position.
func onceOf[T any](t *testing.T, src *pipelinetest.SliceSource[T], n int) []node.Outcome {
	t.Helper()
	got := src.Outcomes()
	require.Len(t, got, n)
	out := make([]node.Outcome, n)
	for i := range n {
		require.Len(t, got[i], 1, "item %d must complete exactly once", i)
		out[i] = got[i][0]
	}
	return out
}

// With a Late output, the graph shows the aggregate's two branches, each
// read by its own node.
func TestEventTimeLateOutputGraph(t *testing.T) {
	t.Parallel()
	b := pipeline.New("et")
	var late pipeline.Stream[ev]
	wins := pipeline.Aggregate(b, "hourly", pipeline.Source(b, "src", pipelinetest.NewSliceSource[ev]()), evKey, pipeline.TimeWindow(time.Hour), evZero, evSum,
		pipeline.EventTime(evAt, 0, 0), pipeline.Late(&late))
	pipeline.Sink(b, "store", wins, &pipelinetest.Collector[pipeline.Window[int, int]]{})
	pipeline.Sink(b, "late store", late, &pipelinetest.Collector[ev]{})
	m := build(t, b).Graph().Mermaid()
	for _, name := range []string{"hourly", "hourly[windows]", "hourly[late]", "store", "late store"} {
		assert.True(t, strings.Contains(m, name), "%s in\n%s", name, m)
	}
}

// A time window the idle timeout handed on, Partial, stays Partial in its
// updates while the watermark is before its end, and is handed on once
// more, an Update that is not Partial, when the watermark passes its end:
// its last hand-over says it is complete. One the watermark never passes
// ends Partial.
func TestEventTimeIdleWindowCompletesOnTheWatermark(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(epoch.Add(24 * time.Hour))
	f := &evFeed{items: make(chan ev)}
	b := pipeline.New("et", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithDeadLetter(deadletter.NewMemory(1)))
	wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", f), evKey, pipeline.TimeWindow(time.Minute), evZero, evSum,
		pipeline.EventTime(evAt, time.Minute, 5*time.Second))
	log := &windowLog{}
	pipeline.ForEach(b, "store", wins, log.write)
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)
	f.items <- ev{V: 1, At: epoch.Add(30 * time.Second)}
	f.items <- ev{V: 2, At: epoch.Add(70 * time.Second)} // watermark 0:10
	taken(p, "sum", 2)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(5 * time.Second) // idle: both handed on, Partial
	log.wait(2)
	f.items <- ev{V: 4, At: epoch.Add(80 * time.Second)} // watermark 0:20: an update, still Partial
	w := log.wait(3)
	assert.Equal(t, pipeline.Window[int, int]{Start: epoch.Add(time.Minute), End: epoch.Add(2 * time.Minute), Count: 2, Value: 6, Partial: true, Update: true}, w[2])
	f.items <- ev{V: 8, At: epoch.Add(2*time.Minute + 10*time.Second)} // watermark 1:10, past the first window's end
	w = log.wait(4)
	assert.Equal(t, pipeline.Window[int, int]{Start: epoch, End: epoch.Add(time.Minute), Count: 1, Value: 1, Update: true}, w[3], "complete now")
	close(f.items)
	_, err := run.Wait()
	require.NoError(t, err)
	w = log.wait(0)
	require.Len(t, w, 5, "the first window is handed on once more only")
	assert.Equal(t, pipeline.Window[int, int]{Start: epoch.Add(2 * time.Minute), End: epoch.Add(3 * time.Minute), Count: 1, Value: 8, Partial: true}, w[4])
}
