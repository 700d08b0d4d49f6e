package pipeline_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// On a Keyed node, items of distinct keys that all wait an hour park
// together: one advance of an hour resumes every one of them, so their
// waits overlap instead of following each other.
func TestKeyedParkedWaitsOverlap(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{1, 4, 16} {
		const n = 40
		clock := clockwork.NewFakeClock()
		w := &waiter{waits: map[int]time.Duration{}}
		for i := range n {
			w.waits[i] = time.Hour
		}
		c := newCounter(n)
		b := parkPipeline(clock, w, c, pipelinetest.NewSliceSource(ints(n)...),
			[]pipeline.NodeOption{pipeline.Keyed(workers, func(x int) int { return x })}, pipeline.WithHandOverBatch(1))
		run := pipelinetest.Start(t.Context(), build(t, b))
		if err := clock.BlockUntilContext(t.Context(), n); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
		if _, err := run.Wait(); err != nil {
			t.Fatal(err)
		}
		got := c.items()
		slices.Sort(got)
		if !slices.Equal(got, ints(n)) {
			t.Fatalf("Keyed(%d): got %d items, want all %d after one hour", workers, len(got), n)
		}
		for i := range n {
			if calls := w.callsOf(i); calls != 2 {
				t.Fatalf("Keyed(%d): item %d called %d times, want 2", workers, i, calls)
			}
		}
	}
}

// firstCalls counts the first calls of the items after item 0 made while
// item 0 waits, and closes reached once there are at items of them.
type firstCalls struct {
	at      int
	mu      sync.Mutex
	n       int
	resumed bool
	reached chan struct{}
}

func (f *firstCalls) before(_ context.Context, x, call int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case x == 0 && call == 2:
		f.resumed = true
	case x > 0 && call == 1 && !f.resumed:
		f.n++
		if f.n == f.at {
			close(f.reached)
		}
	}
	return nil
}

func (f *firstCalls) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// On an ordered Parallel node, while item 0 waits an hour the next 2,000
// items (fewer than the reorder window, four times the default MaxParked)
// are called with the clock standing still; none is delivered before item
// 0, and after the hour all are, in input order.
func TestOrderedWindowCallsPastParkedItem(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		const k = 2000
		const n = k + 1
		clock := clockwork.NewFakeClock()
		f := &firstCalls{at: k, reached: make(chan struct{})}
		w := &waiter{waits: map[int]time.Duration{0: time.Hour}, before: f.before}
		c := newCounter(n)
		b := parkPipeline(clock, w, c, pipelinetest.NewSliceSource(ints(n)...), []pipeline.NodeOption{pipeline.Parallel(4)}, m.opts...)
		run := pipelinetest.Start(t.Context(), build(t, b))
		await(t, f.reached, "the calls of the items after the parked one")
		if got := c.items(); len(got) != 0 {
			t.Fatalf("%s: %d items were delivered before the parked first one", m.name, len(got))
		}
		if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		if _, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Hour); err != nil {
			t.Fatal(err)
		}
		if got := c.items(); !slices.Equal(got, ints(n)) {
			t.Fatalf("%s: output not in input order: %v", m.name, got[:min(len(got), 20)])
		}
	}
}

// The reorder window is bounded: with MaxParked(64) and Parallel(2) on a
// buffer of 64, it holds 256 items (four times MaxParked), so while item 0
// waits at most the 255 items after it are called, and the node fills the
// window, up to one chunk (16 items), before it stops.
func TestOrderedWindowIsBounded(t *testing.T) {
	t.Parallel()
	const window, chunk, n = 256, 16, 1000
	clock := clockwork.NewFakeClock()
	f := &firstCalls{at: window - chunk, reached: make(chan struct{})}
	w := &waiter{waits: map[int]time.Duration{0: time.Hour}, before: f.before}
	c := newCounter(n)
	b := parkPipeline(clock, w, c, pipelinetest.NewSliceSource(ints(n)...),
		[]pipeline.NodeOption{pipeline.Parallel(2), pipeline.MaxParked(64), pipeline.Buffer(64)})
	run := pipelinetest.Start(t.Context(), build(t, b))
	await(t, f.reached, "the calls that fill the window")
	if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := f.count(); got > window-1 {
		t.Fatalf("%d items were called while item 0 waited; the window holds %d", got, window)
	}
	if got := c.items(); !slices.Equal(got, ints(n)) {
		t.Fatalf("output not in input order: %v", got[:min(len(got), 20)])
	}
}

// An ordered Parallel node reads up to its reorder window exactly, not
// fewer: with items handed over one at a time (chunks of one item), while
// item 0 waits, exactly window-1 later items are called, and the next only
// once item 0's result was handed on. The window is 4 × MaxParked, or the
// workers' queues (n × max(buffer/(16n), 4) chunks of up to 16 items) when
// those hold more.
func TestOrderedWindowFillsExactly(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		name   string
		opts   []pipeline.NodeOption
		window int
	}{
		{"4×MaxParked(64)", []pipeline.NodeOption{pipeline.Parallel(2), pipeline.MaxParked(64), pipeline.Buffer(64)}, 4 * 64},
		{"4×MaxParked(100)", []pipeline.NodeOption{pipeline.Parallel(4), pipeline.MaxParked(100)}, 4 * 100},
		{"queues over 4×MaxParked(10)", []pipeline.NodeOption{pipeline.Parallel(2), pipeline.MaxParked(10), pipeline.Buffer(64)}, 2 * 4 * 16},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			n := 3 * v.window
			clock := clockwork.NewFakeClock()
			f := &firstCalls{at: v.window - 1, reached: make(chan struct{})}
			w := &waiter{waits: map[int]time.Duration{0: time.Hour}, before: f.before}
			c := newCounter(n)
			b := parkPipeline(clock, w, c, pipelinetest.NewSliceSource(ints(n)...), v.opts, pipeline.WithHandOverBatch(1))
			run := pipelinetest.Start(t.Context(), build(t, b))
			await(t, f.reached, "the calls that fill the window")
			if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			if got := c.items(); len(got) != 0 {
				t.Fatalf("%d items were delivered before the parked first one", len(got))
			}
			if _, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Hour); err != nil {
				t.Fatal(err)
			}
			if got := f.count(); got != v.window-1 {
				t.Fatalf("%d items were called while item 0 waited; the window of %d holds it and %d more", got, v.window, v.window-1)
			}
			if got := c.items(); !slices.Equal(got, ints(n)) {
				t.Fatalf("output not in input order: %v", got[:min(len(got), 20)])
			}
		})
	}
}
