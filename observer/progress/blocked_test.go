package progress_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/progress"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// heldWriter holds every Write until release is closed, then records it.
type heldWriter struct {
	release chan struct{}
	recorder
}

func (w *heldWriter) Write(p []byte) (int, error) {
	<-w.release
	return w.recorder.Write(p)
}

// ordersOf builds a pipeline "orders" of n items observed by obs.
func ordersOf(t *testing.T, clock clockwork.Clock, obs *progress.Reporter, n int) *pipeline.Pipeline {
	t.Helper()
	b := pipeline.New("orders", pipeline.WithClock(clock), pipeline.WithObserver(obs))
	pipeline.Sink(b, "store", pipeline.Source(b, "read", pipelinetest.NewSliceSource(make([]int, n)...)),
		node.SinkFunc[int](func(context.Context, int) error { return nil }))
	p, err := b.Build()
	require.NoError(t, err)
	return p
}

// While the output is blocked (a pipe nobody reads), each run of a
// pipeline started one more goroutine of the Reporter, waiting for the
// one before: a service running a pipeline every few seconds with its
// stderr stuck grew without bound (a review's finding). The goroutine
// still writing now takes up the next run; once the output takes writes
// again, every run's final frame is written, in order.
func TestBlockedOutputAddsNoGoroutinePerRun(t *testing.T) {
	clock := clockwork.NewFakeClock()
	w := &heldWriter{release: make(chan struct{})}
	rep := progress.New(w, progress.WithClock(clock), progress.WithTTY(false))
	p := ordersOf(t, clock, rep, 3)
	_, err := p.Run(t.Context())
	require.NoError(t, err)
	base := runtime.NumGoroutine()
	const runs = 100
	for range runs {
		_, err := p.Run(t.Context())
		require.NoError(t, err)
	}
	grown := runtime.NumGoroutine() - base
	close(w.release)
	rep.Stop()
	assert.Less(t, grown, 3, "goroutines added by %d runs while the output was blocked", runs)
	all := strings.Join(w.take(), "")
	assert.Equal(t, runs+1, strings.Count(all, "done"), "a final frame per run:\n%s", all)
	assert.NotContains(t, all, "read 6", "each frame counts its own run")
}

// A pipeline built with the Reporter as its observer and also handed to
// UseStats, as the package doc allows, is shown once: it was shown twice,
// two final frames per run, and its lines took its name as a prefix as
// for two pipelines (a review's finding).
func TestUseStatsOfAnObservedPipelineShowsItOnce(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	var out recorder
	rep := progress.New(&out, progress.WithClock(clock), progress.WithTTY(false))
	p := ordersOf(t, clock, rep, 3)
	require.NoError(t, rep.UseStats(p))
	_, err := p.Run(t.Context())
	require.NoError(t, err)
	rep.Stop()
	all := strings.Join(out.take(), "")
	assert.Equal(t, 1, strings.Count(all, "done"), all)
	assert.False(t, strings.HasPrefix(all, "orders"), "one pipeline's lines have no name prefix:\n%s", all)
}

// Runs ended one after the other, each while the Reporter's goroutine
// was still writing the frame before, with the output slow: no frame is
// lost, none is written twice, and Stop returns (many times, under
// -race).
func TestRunsWhileTheWriterFinishes(t *testing.T) {
	t.Parallel()
	for range 20 {
		clock := clockwork.NewFakeClock()
		w := &heldWriter{release: make(chan struct{})}
		rep := progress.New(w, progress.WithClock(clock), progress.WithTTY(false))
		p := ordersOf(t, clock, rep, 1)
		var wg sync.WaitGroup
		wg.Go(func() {
			for range 5 {
				_, err := p.Run(t.Context())
				assert.NoError(t, err)
			}
		})
		close(w.release)
		wg.Wait()
		rep.Stop()
		assert.Equal(t, 5, strings.Count(strings.Join(w.take(), ""), "done"))
	}
}

// firstHeld holds its first Write until release is closed, telling
// entered; the later ones go through.
type firstHeld struct {
	entered chan struct{}
	release chan struct{}
	n       atomic.Int32
	recorder
}

func (w *firstHeld) Write(p []byte) (int, error) {
	if w.n.Add(1) == 1 {
		close(w.entered)
		<-w.release
	}
	return w.recorder.Write(p)
}

// waitClosed waits for c, failing the test after a long real time (a
// hang, not a timing).
func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(time.Minute):
		t.Fatal("waiting for " + what)
	}
}

// A run that starts and ends while the Reporter's goroutine writes the
// final frame of the run before: once the output takes the write, the
// goroutine writes that run's final frame too before it ends, without
// waiting for Stop or another run. The first version of the goroutine's
// revival left it drawn and unwritten until Stop (a review's finding).
func TestRunDuringTheLastWriteHasItsFrameWritten(t *testing.T) {
	for try := range 40 {
		clock := clockwork.NewFakeClock()
		w := &firstHeld{entered: make(chan struct{}), release: make(chan struct{})}
		rep := progress.New(w, progress.WithClock(clock), progress.WithTTY(false))
		p := ordersOf(t, clock, rep, 1)
		_, err := p.Run(t.Context())
		require.NoError(t, err)
		waitClosed(t, w.entered, "the first write")
		_, err = p.Run(t.Context())
		require.NoError(t, err)
		close(w.release)
		waitClosed(t, rep.LoopDone(), "the goroutine's end")
		require.Equal(t, 2, strings.Count(strings.Join(w.take(), ""), "done"), "try %d: final frames written before Stop", try)
		rep.Stop()
		assert.Empty(t, w.take(), "nothing left for Stop")
	}
}

// statsFunc is a StatsReader of func type: its values cannot be compared.
type statsFunc func() observer.Stats

func (f statsFunc) Stats() observer.Stats { return f() }

// UseStats and ForgetStats look for a pipeline they hold already by
// comparing readers: one whose type cannot be compared (a func adapter)
// made the second UseStats panic (a review's finding). Such a reader is
// taken, never found equal to another, and ForgetStats of it does
// nothing.
func TestUseStatsOfAnUncomparableReader(t *testing.T) {
	t.Parallel()
	rep := progress.New(&recorder{}, progress.WithClock(clockwork.NewFakeClock()), progress.WithTTY(false))
	defer rep.Stop()
	one := statsFunc(func() observer.Stats { return observer.Stats{Pipeline: "a"} })
	two := statsFunc(func() observer.Stats { return observer.Stats{Pipeline: "b"} })
	assert.NotPanics(t, func() {
		require.NoError(t, rep.UseStats(one))
		require.NoError(t, rep.UseStats(two))
		rep.ForgetStats(one)
	})
}
