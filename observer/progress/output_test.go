package progress_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/progress"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// gateWriter is an output whose first Write waits, once entered, until
// the test opens the gate: a slow terminal.
type gateWriter struct {
	entered, open chan struct{}
	once          sync.Once
}

func (w *gateWriter) Write(p []byte) (int, error) {
	first := false
	w.once.Do(func() { first = true })
	if first {
		close(w.entered)
		<-w.open
	}
	return len(p), nil
}

// hookReader is a StatsReader of a fixed run that signals, once armed,
// that its Stats was read.
type hookReader struct {
	st   observer.Stats
	mu   sync.Mutex
	read chan struct{} // nil until armed
}

func (r *hookReader) Stats() observer.Stats {
	r.mu.Lock()
	c := r.read
	r.read = nil
	r.mu.Unlock()
	if c != nil {
		close(c)
	}
	return r.st
}

func (r *hookReader) arm() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.read = make(chan struct{})
	return r.read
}

func within(t *testing.T, c <-chan struct{}, d time.Duration, what string) bool {
	t.Helper()
	select {
	case <-c:
		return true
	case <-time.After(d):
		t.Errorf("%s: still waiting after %s", what, d)
		return false
	}
}

// TestSlowOutputDoesNotHoldUpOtherPipelinesEvents checks that an event
// never waits for a write to the output, as docs/progress.md says: while
// a tick's write to a slow output is under way, the last node of one
// pipeline completes, which draws the run's final frame, and a node of
// another pipeline the Reporter observes starts; neither waits for the
// write.
func TestSlowOutputDoesNotHoldUpOtherPipelinesEvents(t *testing.T) {
	clock := clockwork.NewFakeClock()
	w := &gateWriter{entered: make(chan struct{}), open: make(chan struct{})}
	rep := progress.New(w, progress.WithClock(clock), progress.WithTTY(false),
		progress.WithInterval(time.Second), progress.WithWindow(5*time.Second))
	defer rep.Stop()
	a := &hookReader{st: observer.Stats{Pipeline: "a", RunID: "ra", Running: true, Nodes: []observer.NodeStats{source("read")}}}
	b := &hookReader{st: observer.Stats{Pipeline: "b", RunID: "rb", Running: true, Nodes: []observer.NodeStats{source("read")}}}
	require.NoError(t, rep.UseStats(a))
	require.NoError(t, rep.UseStats(b))
	rep.OnNodeStarted(observer.NodeEvent{Event: observer.Event{Pipeline: "a", RunID: "ra", Node: "read"}})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the Reporter's ticker")
	clock.Advance(rep.TickEvery()) // the tick draws a line, and its write is slow
	require.True(t, within(t, w.entered, 10*time.Second, "the tick's write"))

	// a's last node completes: it draws the final frame, which the
	// Reporter's goroutine writes after the tick's write.
	sampled := a.arm()
	completed := make(chan struct{})
	go func() {
		defer close(completed)
		rep.OnNodeCompleted(observer.NodeEvent{Event: observer.Event{Pipeline: "a", RunID: "ra", Node: "read"}})
	}()
	require.True(t, within(t, sampled, 10*time.Second, "a's final sample"))

	// A node of another pipeline starts: it has nothing to write.
	started := make(chan struct{})
	go func() {
		defer close(started)
		rep.OnNodeStarted(observer.NodeEvent{Event: observer.Event{Pipeline: "b", RunID: "rb", Node: "read"}})
	}()
	within(t, started, 2*time.Second, "b's OnNodeStarted, while a tick writes to a slow output")
	within(t, completed, 2*time.Second, "a's last OnNodeCompleted, while a tick writes to a slow output")
	close(w.open)
	<-started
	<-completed
}

// TestABlockedOutputDoesNotHoldUpRun checks that Run returns, cancelled,
// while the output does not take the run's final frame (a pipe whose
// reader stopped, a terminal on hold): observer methods must be quick and
// must not block (docs/observability.md), so the last OnNodeCompleted only
// draws the frame, and the Reporter's own goroutine writes it.
func TestABlockedOutputDoesNotHoldUpRun(t *testing.T) {
	w := &gateWriter{entered: make(chan struct{}), open: make(chan struct{})}
	rep := progress.New(w, progress.WithClock(clockwork.NewFakeClock()), progress.WithTTY(false))
	defer rep.Stop()
	b := pipeline.New("numbers", pipeline.WithObserver(rep))
	pipeline.Sink(b, "store", pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3)), &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_, _ = p.Run(ctx)
	}()
	require.True(t, within(t, w.entered, 10*time.Second, "the final frame's write"))
	cancel()
	within(t, ran, 2*time.Second, "Run, cancelled, while the output does not take the final frame")
	close(w.open)
	<-ran
}

// gatedRecorder is a recorder whose first write waits for the gate: a
// slow output whose writes the test reads.
type gatedRecorder struct {
	gate gateWriter
	recorder
}

func (w *gatedRecorder) Write(p []byte) (int, error) {
	_, _ = w.gate.Write(p)
	return w.recorder.Write(p)
}

// TestFramesDrawnDuringASlowWriteAreWrittenInOrder checks what the
// Reporter writes once a slow write is done: the final frames of the runs
// that ended meanwhile, in one write, in the order the runs ended, and on
// a terminal moving up over exactly the lines the slow write drew.
func TestFramesDrawnDuringASlowWriteAreWrittenInOrder(t *testing.T) {
	for _, tty := range []bool{false, true} {
		t.Run(fmt.Sprintf("tty=%v", tty), func(t *testing.T) {
			clock := clockwork.NewFakeClock()
			w := &gatedRecorder{gate: gateWriter{entered: make(chan struct{}), open: make(chan struct{})}}
			rep := progress.New(w, progress.WithClock(clock), progress.WithTTY(tty),
				progress.WithInterval(time.Second), progress.WithWindow(5*time.Second))
			defer rep.Stop()
			a := &hookReader{st: observer.Stats{Pipeline: "a", RunID: "ra", Running: true, Nodes: []observer.NodeStats{source("read")}}}
			b := &hookReader{st: observer.Stats{Pipeline: "b", RunID: "rb", Running: true, Nodes: []observer.NodeStats{source("read")}}}
			require.NoError(t, rep.UseStats(a))
			require.NoError(t, rep.UseStats(b))
			rep.OnNodeStarted(observer.NodeEvent{Event: observer.Event{Pipeline: "a", RunID: "ra", Node: "read"}})
			rep.OnNodeStarted(observer.NodeEvent{Event: observer.Event{Pipeline: "b", RunID: "rb", Node: "read"}})
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			require.NoError(t, clock.BlockUntilContext(ctx, 1), "the Reporter's ticker")
			clock.Advance(rep.TickEvery())
			require.True(t, within(t, w.gate.entered, 10*time.Second, "the tick's write"))

			// Both runs end while the tick's write is under way.
			rep.OnNodeCompleted(observer.NodeEvent{Event: observer.Event{Pipeline: "b", RunID: "rb", Node: "read"}})
			rep.OnNodeCompleted(observer.NodeEvent{Event: observer.Event{Pipeline: "a", RunID: "ra", Node: "read"}})
			close(w.gate.open)
			rep.Stop()

			writes := w.take()
			require.Len(t, writes, 2, "the tick's frame, then both final frames in one write: %q", writes)
			assert.Contains(t, writes[0], "a  1.0s")
			assert.Contains(t, writes[0], "b  1.0s")
			final := writes[1]
			ib, ia := strings.Index(final, "b  1.0s"), strings.Index(final, "a  1.0s")
			require.True(t, ib >= 0 && ia >= 0, "both final frames: %q", final)
			assert.Less(t, ib, ia, "b ended first: %q", final)
			assert.Equal(t, 2, strings.Count(final, "done"), final)
			if tty {
				assert.True(t, strings.HasPrefix(final, fmt.Sprintf("\x1b[%dA", strings.Count(writes[0], "\n"))),
					"the final frames move up over the tick's frame: %q then %q", writes[0], final)
			}
		})
	}
}
