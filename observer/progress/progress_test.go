package progress_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/progress"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// recorder is an output that keeps each write apart.
type recorder struct {
	mu     sync.Mutex
	writes []string
}

func (w *recorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

// take returns the writes since the last take.
func (w *recorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.writes
	w.writes = nil
	return out
}

// reader is a StatsReader whose counters the test sets.
type reader struct {
	mu sync.Mutex
	st observer.Stats
}

func newReader(nodes ...observer.NodeStats) *reader {
	return &reader{st: observer.Stats{Pipeline: "orders", Nodes: nodes}}
}

func (r *reader) Stats() observer.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.st
	st.Nodes = append([]observer.NodeStats(nil), r.st.Nodes...)
	return st
}

// set changes the counters under the lock.
func (r *reader) set(f func(st *observer.Stats)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.st)
}

// startRun marks a run as started.
func (r *reader) startRun(id string) {
	r.set(func(st *observer.Stats) { st.RunID, st.Running = id, true })
}

// harness drives a Reporter on a fake clock, one tick at a time.
type harness struct {
	t      *testing.T
	clock  *clockwork.FakeClock
	out    *recorder
	rep    *progress.Reporter
	ticked chan struct{}
}

func newHarness(t *testing.T, opts ...progress.Option) *harness {
	h := &harness{t: t, clock: clockwork.NewFakeClock(), out: &recorder{}, ticked: make(chan struct{}, 1)}
	opts = append([]progress.Option{
		progress.WithClock(h.clock),
		progress.WithTickHook(func() { h.ticked <- struct{}{} }),
	}, opts...)
	h.rep = progress.New(h.out, opts...)
	t.Cleanup(h.rep.Stop)
	return h
}

// start starts the Reporter and waits for its ticker.
func (h *harness) start() {
	h.rep.Start()
	h.waitTicker()
}

func (h *harness) waitTicker() {
	ctx, cancel := context.WithTimeout(h.t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(h.t, h.clock.BlockUntilContext(ctx, 1), "the Reporter's ticker")
}

// tick moves the clock one tick on and waits for the tick to be drawn.
func (h *harness) tick() {
	h.clock.Advance(h.rep.TickEvery())
	select {
	case <-h.ticked:
	case <-time.After(10 * time.Second):
		h.t.Fatal("no tick")
	}
}

func source(name string) observer.NodeStats {
	return observer.NodeStats{Node: name, Kind: observer.KindSource}
}

func sink(name string) observer.NodeStats {
	return observer.NodeStats{Node: name, Kind: observer.KindSink}
}

var rates = regexp.MustCompile(`read (\d+)(?:/\d+)? \(([\d.k]+)/s, avg ([\d.k]+)/s\)`)

// TestRateOverWindow checks that the recent rate is measured over the
// window: after a burst it falls to 0 once the window is idle, while the
// average since the start stays.
func TestRateOverWindow(t *testing.T) {
	h := newHarness(t, progress.WithTTY(false), progress.WithInterval(time.Second), progress.WithWindow(5*time.Second))
	r := newReader(source("read"), sink("store"))
	require.NoError(t, h.rep.UseStats(r))
	r.startRun("run-1")
	h.start()

	var last []string
	for sec := 1; sec <= 12; sec++ {
		if sec <= 4 { // a burst of 1000 items a second, then nothing
			r.set(func(st *observer.Stats) { st.Nodes[0].Out += 1000 })
		}
		h.tick()
		w := h.out.take()
		require.Len(t, w, 1, "one line a second")
		last = rates.FindStringSubmatch(w[0])
		require.NotNil(t, last, w[0])
		switch sec {
		case 4:
			assert.Equal(t, []string{"4000", "1.0k", "1.0k"}, last[1:], w[0])
			assert.True(t, strings.HasPrefix(w[0], "4.0s  "), w[0])
		case 7: // the window holds two idle seconds of five
			assert.Equal(t, []string{"4000", "400", "571"}, last[1:], w[0])
		}
	}
	assert.Equal(t, []string{"4000", "0", "333"}, last[1:], "idle for more than the window: no recent rate, the average stays")
}

// TestETAFromSizedSource checks the ETA: what a sized source has left to
// settle over the recent rate items settle at.
func TestETAFromSizedSource(t *testing.T) {
	h := newHarness(t, progress.WithTTY(false), progress.WithInterval(time.Second))
	src := source("read")
	src.Size, src.Sized = 10_000, true
	r := newReader(src, sink("store"))
	require.NoError(t, h.rep.UseStats(r))
	r.startRun("run-1")
	h.start()
	for range 3 {
		r.set(func(st *observer.Stats) { st.Nodes[0].Out += 1000; st.Nodes[1].Out += 1000 })
		h.tick()
	}
	w := h.out.take()
	require.Len(t, w, 3)
	assert.Contains(t, w[2], "read 3000/10000 (1.0k/s, avg 1.0k/s)")
	assert.True(t, strings.HasSuffix(w[2], "settled 30%  ETA 7s\n"), w[2])

	// A pipeline that stalled has no ETA, rather than an endless one.
	for range 6 {
		h.tick()
	}
	w = h.out.take()
	assert.NotContains(t, w[len(w)-1], "ETA", w[len(w)-1])
}

// TestLinesOnlyEveryInterval checks that an output that is not a terminal
// gets one line an interval, and none in between.
func TestLinesOnlyEveryInterval(t *testing.T) {
	h := newHarness(t, progress.WithTTY(false), progress.WithInterval(2*time.Second), progress.WithWindow(5*time.Second))
	require.Equal(t, time.Second, h.rep.TickEvery(), "it samples more often than it draws, to measure the rate over the window")
	r := newReader(source("read"), sink("store"))
	require.NoError(t, h.rep.UseStats(r))
	r.startRun("run-1")
	h.start()
	for sec := 1; sec <= 8; sec++ {
		r.set(func(st *observer.Stats) { st.Nodes[0].Out += 100; st.Nodes[1].Out += 90 })
		h.tick()
		w := h.out.take()
		if sec%2 == 1 {
			assert.Empty(t, w, "second %d: no line between intervals", sec)
			continue
		}
		require.Len(t, w, 1, "second %d", sec)
		assert.Equal(t, 1, strings.Count(w[0], "\n"), "one line")
		assert.NotContains(t, w[0], "\x1b", "no terminal codes")
		assert.Contains(t, w[0], "store ")
	}
}

// TestDefaultIntervals checks the defaults: a line every 2 s on an output
// that is not a terminal, a redraw every 200 ms on one.
func TestDefaultIntervals(t *testing.T) {
	h := newHarness(t, progress.WithTTY(false))
	assert.Equal(t, time.Second, h.rep.TickEvery(), "2 s lines, sampled every second for a 5 s window")
	h = newHarness(t, progress.WithTTY(true))
	assert.Equal(t, 200*time.Millisecond, h.rep.TickEvery())
	h = newHarness(t) // a recorder is no terminal
	assert.Equal(t, time.Second, h.rep.TickEvery())
}

// TestTTYRedrawsInPlace checks a terminal's frames: a header and a line
// per node, redrawn over the last frame.
func TestTTYRedrawsInPlace(t *testing.T) {
	h := newHarness(t, progress.WithTTY(true), progress.WithInterval(200*time.Millisecond))
	src := source("read")
	src.Size, src.Sized = 1000, true
	work := observer.NodeStats{Node: "enrich", Kind: observer.KindTransform}
	r := newReader(src, work, sink("store"))
	require.NoError(t, h.rep.UseStats(r))
	h.start()
	h.tick()
	assert.Empty(t, h.out.take(), "nothing to draw before a run")

	r.startRun("run-1")
	var frames []string
	for range 3 {
		r.set(func(st *observer.Stats) {
			st.Nodes[0].Out += 100
			st.Nodes[1].In += 100
			st.Nodes[1].Out += 90
			st.Nodes[1].ItemRetries += 7
			st.Nodes[1].DeadLettered += 10
			st.Nodes[1].Circuit = resilience.CircuitOpen
			st.Nodes[2].In += 90
			st.Nodes[2].Out += 90
		})
		h.tick()
		w := h.out.take()
		require.Len(t, w, 1, "a frame is one write")
		frames = append(frames, w[0])
	}
	assert.NotContains(t, frames[0], "\x1b[5A", "the first frame moves up over nothing")
	for i, f := range frames {
		lines := strings.Split(strings.TrimSuffix(f, "\x1b[J"), "\n")
		require.Len(t, lines, 6, "frame %d: a header, column titles and three nodes, then the erase below", i)
		assert.Contains(t, lines[0], "orders  ")
		assert.Regexp(t, `^\r  node  +in  +out  +rate  +avg\x1b\[K$`, lines[1])
		assert.Contains(t, lines[2], "read")
		assert.Contains(t, lines[3], "enrich")
		assert.Contains(t, lines[4], "store")
		if i > 0 {
			assert.True(t, strings.HasPrefix(f, "\x1b[5A\r"), "frame %d moves up over the last one: %q", i, f)
		}
	}
	last := frames[2]
	assert.Contains(t, last, "of 1000 (30% read)")
	// 300 settled (270 stored, 30 dead) at 500/s: 700 left take 1.4 s.
	assert.Contains(t, last, "orders  0.6s  settled 30%  ETA 1s")
	assert.Contains(t, last, "retries 21  dead 30  breaker open")
	assert.Regexp(t, `enrich +300 +270 +450/s +450/s`, last)
}

// TestFinalFrameWhenRunEnds checks that a run that ends gets a final
// frame at once, and the Reporter draws nothing more until the next run.
func TestFinalFrameWhenRunEnds(t *testing.T) {
	h := newHarness(t, progress.WithTTY(false), progress.WithInterval(2*time.Second))
	r := newReader(source("read"), sink("store"))
	require.NoError(t, h.rep.UseStats(r))
	r.startRun("run-1")
	h.start()
	r.set(func(st *observer.Stats) { st.Nodes[0].Out, st.Nodes[1].Out = 500, 500 })
	h.tick() // between lines
	r.set(func(st *observer.Stats) { st.Nodes[0].Out, st.Nodes[1].Out, st.Running = 1000, 1000, false })
	h.tick()
	w := h.out.take()
	require.Len(t, w, 1)
	assert.Contains(t, w[0], "read 1000 ")
	assert.True(t, strings.HasSuffix(w[0], "  done\n"), w[0])
	for range 4 {
		h.tick()
	}
	assert.Empty(t, h.out.take(), "no run, no lines")

	// The next run shows its own counts, not the sum of both runs.
	r.set(func(st *observer.Stats) { st.RunID, st.Running, st.Nodes[0].Out = "run-2", true, 1200 })
	h.tick()
	h.tick()
	w = h.out.take()
	require.Len(t, w, 1)
	assert.Contains(t, w[0], "read 200 ")
}

// TestEventsDrawFinalFrame runs a real pipeline with the Reporter as its
// observer: it starts on the first node's start, and writes a final frame
// when the run ends, counting that run only.
func TestEventsDrawFinalFrame(t *testing.T) {
	clock := clockwork.NewFakeClock()
	writes := make(chan string, 10)
	rep := progress.New(writerFunc(func(p []byte) (int, error) {
		writes <- string(p)
		return len(p), nil
	}), progress.WithClock(clock))
	defer rep.Stop()
	items := make([]int, 100)
	b := pipeline.New("numbers", pipeline.WithClock(clock), pipeline.WithObserver(observer.Multi(observer.Nop{}, rep)))
	src := pipelinetest.NewSliceSource(items...)
	doubled := pipeline.Transform(b, "double", pipeline.Source(b, "read", src), node.TransformFunc[int, int](func(_ context.Context, n int) (int, error) { return 2 * n, nil }))
	pipeline.Sink(b, "store", doubled, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)

	for run := range 2 {
		_, err = p.Run(t.Context())
		require.NoError(t, err)
		var got string
		select {
		case got = <-writes:
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d: no final frame", run)
		}
		assert.Equal(t, 1, strings.Count(got, "\n"), "run %d: one final line: %q", run, got)
		assert.Regexp(t, `^0\.0s  read 100/100 \(0/s, avg 0/s\)  store 100 .*  done\n$`, got, "run %d", run)
	}
	rep.Stop()
	assert.Empty(t, writes, "one frame a run, and Stop after the final frame draws nothing")
}

// TestStopWritesTheFinalFrame checks that Stop returns once the final
// frame of a run that ended is written: a program that stops the Reporter
// before it prints finds the frame out.
func TestStopWritesTheFinalFrame(t *testing.T) {
	var out recorder
	rep := progress.New(&out, progress.WithClock(clockwork.NewFakeClock()), progress.WithTTY(false))
	b := pipeline.New("numbers", pipeline.WithObserver(rep))
	pipeline.Sink(b, "store", pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3)), &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.NoError(t, err)
	rep.Stop()
	w := out.take()
	require.Len(t, w, 1, "the final frame")
	assert.Contains(t, w[0], "read 3/3 ")
	assert.True(t, strings.HasSuffix(w[0], "  done\n"), w[0])
}

// TestWriteErrorsAreIgnored checks that an output that fails every write
// changes nothing: the Reporter keeps drawing a frame an interval, and
// Stop still draws the final one.
func TestWriteErrorsAreIgnored(t *testing.T) {
	clock := clockwork.NewFakeClock()
	ticked := make(chan struct{}, 1)
	var mu sync.Mutex
	var tried []string
	rep := progress.New(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		tried = append(tried, string(p))
		return 0, errors.New("write /dev/tty: input/output error")
	}), progress.WithClock(clock), progress.WithTTY(false), progress.WithInterval(time.Second),
		progress.WithTickHook(func() { ticked <- struct{}{} }))
	r := newReader(source("read"), sink("store"))
	require.NoError(t, rep.UseStats(r))
	r.startRun("run-1")
	rep.Start()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the Reporter's ticker")
	for range 3 {
		clock.Advance(rep.TickEvery())
		select {
		case <-ticked:
		case <-time.After(10 * time.Second):
			t.Fatal("no tick")
		}
	}
	rep.Stop()
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, tried, 4, "a line a second, and the final one")
	assert.True(t, strings.HasPrefix(tried[2], "3.0s  "), tried[2])
	assert.True(t, strings.HasSuffix(tried[3], "  stopped\n"), tried[3])
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestStopMidRun checks that Stop draws a last frame, says the run was
// not seen to its end, and draws nothing after.
func TestStopMidRun(t *testing.T) {
	h := newHarness(t, progress.WithTTY(true), progress.WithInterval(time.Second))
	r := newReader(source("read"), sink("store"))
	require.NoError(t, h.rep.UseStats(r))
	r.startRun("run-1")
	h.start()
	r.set(func(st *observer.Stats) { st.Nodes[0].Out = 10 })
	h.tick()
	h.out.take()
	h.rep.Stop()
	w := h.out.take()
	require.Len(t, w, 1)
	assert.True(t, strings.HasPrefix(w[0], "\x1b[4A\r"), "%q", w[0])
	assert.Contains(t, w[0], "orders  1.0s  stopped")

	h.rep.Stop()
	h.rep.Start()
	h.rep.OnNodeStarted(observer.NodeEvent{Event: observer.Event{Pipeline: "orders", RunID: "run-2"}})
	assert.Empty(t, h.out.take(), "a stopped Reporter draws nothing")
}

// TestStopIsIdempotent stops Reporters in every state, and from several
// goroutines at once.
func TestStopIsIdempotent(t *testing.T) {
	never := progress.New(&recorder{})
	never.Stop()
	never.Stop()

	h := newHarness(t, progress.WithTTY(false))
	require.NoError(t, h.rep.UseStats(newReader(source("read"))))
	h.start()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(h.rep.Stop)
	}
	wg.Wait()
	h.rep.Stop()
	assert.Empty(t, h.out.take(), "no run, nothing to draw")
}

// TestMultiplePipelines checks that lines name their pipeline when the
// Reporter shows several.
func TestMultiplePipelines(t *testing.T) {
	h := newHarness(t, progress.WithTTY(false), progress.WithInterval(time.Second), progress.WithLineNodes("store", "nope"))
	a, b := newReader(source("read"), sink("store")), newReader(source("read"), sink("store"))
	b.set(func(st *observer.Stats) { st.Pipeline = "refunds" })
	require.NoError(t, h.rep.UseStats(a))
	require.NoError(t, h.rep.UseStats(b))
	assert.Error(t, h.rep.UseStats(nil))
	a.startRun("a-1")
	b.startRun("b-1")
	h.start()
	h.tick()
	w := h.out.take()
	require.Len(t, w, 1)
	lines := strings.Split(strings.TrimSpace(w[0]), "\n")
	require.Len(t, lines, 2)
	assert.True(t, strings.HasPrefix(lines[0], "orders  1.0s  store 0 "), lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "refunds  1.0s  store 0 "), lines[1])
	assert.NotContains(t, w[0], "read", "WithLineNodes picks the nodes")
}

// TestEndsItsGoroutineWithTheRun checks that a Reporter that was never
// started nor stopped leaves no goroutine behind once its run ended.
func TestEndsItsGoroutineWithTheRun(t *testing.T) {
	rep := progress.New(&recorder{}, progress.WithClock(clockwork.NewFakeClock()))
	b := pipeline.New("numbers", pipeline.WithObserver(rep))
	pipeline.Sink(b, "store", pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3)), &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.NoError(t, err)
	goleak.VerifyNone(t)
}
