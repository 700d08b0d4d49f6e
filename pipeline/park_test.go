package pipeline_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A waiter is a node function that asks, on an item's first call, for the
// wait that waits[item] gives (none: the call succeeds), and counts calls.
type waiter struct {
	waits map[int]time.Duration
	// fail, when set, fails an item's first call for good instead.
	fail map[int]error
	// before, when set, runs before each call.
	before func(ctx context.Context, x, call int) error

	mu    sync.Mutex
	calls map[int]int
	order []int
}

func (w *waiter) Process(ctx context.Context, x int) (int, error) {
	w.mu.Lock()
	if w.calls == nil {
		w.calls = map[int]int{}
	}
	w.calls[x]++
	n := w.calls[x]
	w.order = append(w.order, x)
	w.mu.Unlock()
	if w.before != nil {
		if err := w.before(ctx, x, n); err != nil {
			return 0, err
		}
	}
	if n == 1 {
		if err := w.fail[x]; err != nil {
			return 0, err
		}
		if d, ok := w.waits[x]; ok {
			return 0, resilience.RetryAfter(errors.New("busy"), d)
		}
	}
	return x, nil
}

func (w *waiter) callsOf(x int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[x]
}

// A counter is a sink that keeps what it got and closes reached once it
// got at items.
type counter struct {
	at      int
	mu      sync.Mutex
	got     []int
	reached chan struct{}
}

func newCounter(at int) *counter { return &counter{at: at, reached: make(chan struct{})} }

func (c *counter) Write(_ context.Context, x int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, x)
	if len(c.got) == c.at {
		close(c.reached)
	}
	return nil
}

func (c *counter) items() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// await waits for ch, failing the test after a generous real-time bound
// (only a broken run waits that long).
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func parkPipeline(clock clockwork.Clock, w *waiter, sink node.Sink[int], src node.Source[int], opts []pipeline.NodeOption, popts ...pipeline.Option) *pipeline.Builder {
	b := pipeline.New("park", append([]pipeline.Option{pipeline.WithClock(clock),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 3
			o.ItemRetry.Backoff = resilience.Exponential(time.Millisecond).WithMaxDelay(100 * time.Hour)
		})}, popts...)...)
	out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", src), w, opts...)
	pipeline.Sink(b, "sink", out, sink)
	return b
}

// With Parallel(4) Unordered, an item that waits an hour parks: the 1,000
// items after it are all called and delivered while the clock stands
// still, and the parked item is delivered once the hour passed.
func TestParkedItemHoldsNoWorkerUnordered(t *testing.T) {
	t.Parallel()
	const n = 1001
	clock := clockwork.NewFakeClock()
	w := &waiter{waits: map[int]time.Duration{0: time.Hour}}
	c := newCounter(n - 1)
	rec := &pipelinetest.Recorder{}
	b := parkPipeline(clock, w, c, pipelinetest.NewSliceSource(ints(n)...), []pipeline.NodeOption{pipeline.Parallel(4), pipeline.Unordered()}, pipeline.WithObserver(rec))
	run := pipelinetest.Start(t.Context(), build(t, b))
	await(t, c.reached, "the items after the waiting one")
	// The observer heard of the retry before its wait, as without parking.
	if evs := pipelinetest.Of[observer.RetryEvent](rec); len(evs) != 1 || evs[0].Delay != time.Hour || evs[0].Attempt != 1 {
		t.Fatalf("retry events %+v; want one, of retry 1 after an hour", evs)
	}
	if got := c.items(); slices.Contains(got, 0) {
		t.Fatalf("item 0 was delivered before its wait ended")
	}
	if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	res, err := run.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.items(); len(got) != n || got[n-1] != 0 {
		t.Fatalf("got %d items, last %v; want %d, the parked item last", len(got), got[len(got)-1], n)
	}
	if s := nodeOf(t, res, "call"); s.ItemRetries != 1 || s.Out != n {
		t.Fatalf("call: %d retries, %d out; want 1, %d", s.ItemRetries, s.Out, n)
	}
}

// With Keyed, the waiting item's key stays blocked (its later items are
// not called) while every other key flows; each key keeps its order. The
// items held behind a key count against the node's buffer: Buffer(2048)
// holds the hundred of key 0.
func TestParkedItemBlocksOnlyItsKey(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{1, 4} {
		const n = 1000
		key := func(x int) int { return x % 10 }
		clock := clockwork.NewFakeClock()
		w := &waiter{waits: map[int]time.Duration{0: time.Hour}}
		c := newCounter(n - n/10)
		b := parkPipeline(clock, w, c, pipelinetest.NewSliceSource(ints(n)...), []pipeline.NodeOption{pipeline.Keyed(workers, key), pipeline.Buffer(2048)})
		run := pipelinetest.Start(t.Context(), build(t, b))
		await(t, c.reached, "the other keys' items")
		for x := 10; x < n; x += 10 {
			if calls := w.callsOf(x); calls != 0 {
				t.Fatalf("Keyed(%d): item %d of the waiting key was called while item 0 waited", workers, x)
			}
		}
		if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
		if _, err := run.Wait(); err != nil {
			t.Fatal(err)
		}
		got := c.items()
		if len(got) != n {
			t.Fatalf("Keyed(%d): got %d items, want %d", workers, len(got), n)
		}
		last := map[int]int{}
		for _, x := range got {
			if prev, ok := last[key(x)]; ok && prev > x {
				t.Fatalf("Keyed(%d): key %d out of order: %d after %d", workers, key(x), x, prev)
			}
			last[key(x)] = x
		}
	}
}

// With ordered Parallel(4), later items are called while the first item
// waits, but their results wait behind it: the output keeps input order.
func TestParkedItemKeepsItsPlaceInOrderedOutput(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		const n = 300
		clock := clockwork.NewFakeClock()
		called := make(chan struct{})
		var once sync.Once
		w := &waiter{waits: map[int]time.Duration{0: time.Hour, 150: time.Minute}}
		w.before = func(_ context.Context, x, _ int) error {
			if x == 20 {
				once.Do(func() { close(called) })
			}
			return nil
		}
		c := newCounter(n)
		b := parkPipeline(clock, w, c, pipelinetest.NewSliceSource(ints(n)...), []pipeline.NodeOption{pipeline.Parallel(4)}, m.opts...)
		run := pipelinetest.Start(t.Context(), build(t, b))
		await(t, called, "a later item's call")
		if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		if got := c.items(); len(got) != 0 {
			t.Fatalf("%s: %d items overtook the waiting first one", m.name, len(got))
		}
		if _, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Minute); err != nil {
			t.Fatal(err)
		}
		if got := c.items(); !slices.Equal(got, ints(n)) {
			t.Fatalf("%s: output not in input order: %v", m.name, got[:min(len(got), 20)])
		}
	}
}

// A node with the default single worker keeps its call order: while an
// item waits, no later call starts.
func TestDefaultWorkerStartsNoLaterCallWhileAnItemWaits(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	w := &waiter{waits: map[int]time.Duration{0: time.Hour}}
	c := newCounter(3)
	b := parkPipeline(clock, w, c, pipelinetest.NewSliceSource(0, 1, 2), nil)
	run := pipelinetest.Start(t.Context(), build(t, b))
	if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if calls := w.callsOf(1); calls != 0 {
		t.Fatalf("item 1 was called %d times while item 0 waited", calls)
	}
	clock.Advance(time.Hour)
	if _, err := run.Wait(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w.order, []int{0, 0, 1, 2}) {
		t.Fatalf("calls %v, want [0 0 1 2]", w.order)
	}
}

// MaxParked caps the parked items: every item waits once (item i for
// i+1 hours), and with MaxParked(2) and four workers no more than the
// parked two and one item per worker have had their first call and not
// their second; nothing is dropped.
func TestMaxParkedBoundsParkedItems(t *testing.T) {
	t.Parallel()
	for range 3 {
		const n = 10
		clock := clockwork.NewFakeClock()
		w := &waiter{waits: map[int]time.Duration{}}
		for i := range n {
			w.waits[i] = time.Duration(i+1) * time.Hour
		}
		var mu sync.Mutex
		waiting, most := 0, 0
		w.before = func(_ context.Context, x, call int) error {
			mu.Lock()
			defer mu.Unlock()
			if call == 1 {
				waiting++
				most = max(most, waiting)
			} else {
				waiting--
			}
			return nil
		}
		c := newCounter(n)
		b := parkPipeline(clock, w, c, pipelinetest.NewSliceSource(ints(n)...),
			[]pipeline.NodeOption{pipeline.Parallel(4), pipeline.Unordered(), pipeline.MaxParked(2)}, pipeline.WithHandOverBatch(1))
		run := pipelinetest.Start(t.Context(), build(t, b))
		for range n {
			if err := clock.BlockUntilContext(t.Context(), 2); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			if most > 2+4 {
				t.Fatalf("%d items waited at once; MaxParked(2) with 4 workers allows 6", most)
			}
			mu.Unlock()
			clock.Advance(time.Hour)
			if run.Finished() {
				break
			}
		}
		if _, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Hour); err != nil {
			t.Fatal(err)
		}
		if got := c.items(); len(got) != n {
			t.Fatalf("got %d items, want %d", len(got), n)
		}
	}
}

// Without MaxParked the ten waiting items all park at once (the default
// cap is far above): the cap above is what held them back.
func TestParkedItemsWaitTogether(t *testing.T) {
	t.Parallel()
	const n = 10
	clock := clockwork.NewFakeClock()
	w := &waiter{waits: map[int]time.Duration{}}
	for i := range n {
		w.waits[i] = time.Hour
	}
	c := newCounter(n)
	b := parkPipeline(clock, w, c, pipelinetest.NewSliceSource(ints(n)...),
		[]pipeline.NodeOption{pipeline.Parallel(2), pipeline.Unordered()}, pipeline.WithHandOverBatch(1))
	run := pipelinetest.Start(t.Context(), build(t, b))
	if err := clock.BlockUntilContext(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if _, err := run.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := c.items(); len(got) != n {
		t.Fatalf("got %d items, want %d", len(got), n)
	}
}

func TestMaxParkedMustBePositive(t *testing.T) {
	t.Parallel()
	b := pipeline.New("bad")
	out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1)), &waiter{}, pipeline.Parallel(2), pipeline.MaxParked(0))
	pipeline.Sink(b, "sink", out, newCounter(1))
	_, err := b.Build()
	if err == nil || !strings.Contains(err.Error(), "call") || !strings.Contains(err.Error(), "MaxParked(0)") {
		t.Fatalf("Build error %v; want one naming the node and MaxParked(0)", err)
	}
}

// A node restart while an item is parked replays it: each item reaches the
// sink once and completes once as Delivered, and the parked item's replay
// carries on its calls.
func TestRestartReplaysParkedItemOnce(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]pipeline.NodeOption{
		{pipeline.Parallel(3), pipeline.Unordered()},
		{pipeline.Parallel(3)},
		{pipeline.Keyed(3, mod7)},
	} {
		const n = 50
		clock := clockwork.NewFakeClock()
		w := &waiter{waits: map[int]time.Duration{0: time.Hour}, fail: map[int]error{5: errRestartMe}}
		w.before = func(ctx context.Context, x, call int) error {
			if x == 5 && call == 1 {
				// Item 0 is parked before item 5 fails the node.
				return clock.BlockUntilContext(ctx, 1)
			}
			return nil
		}
		c := newCounter(n)
		src := pipelinetest.NewTrackedSource(ints(n)...)
		b := parkPipeline(clock, w, c, src, opts, pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 3
			o.ItemRetry.Classifier = o.ItemRetry.Classifier.PermanentIs(errRestartMe)
			o.NodeRestart.MaxRestarts = 2
			o.NodeRestart.MaxReplayWindow = 100
			o.NodeRestart.Backoff = resilience.NoBackoff()
		}))
		// The clock stands still: the replay calls the parked item at once.
		res, err := pipelinetest.Start(t.Context(), build(t, b)).Wait()
		if err != nil {
			t.Fatal(err)
		}
		got := c.items()
		slices.Sort(got)
		if !slices.Equal(got, ints(n)) {
			t.Fatalf("%d items reached the sink, want each of %d once: %v", len(got), n, got)
		}
		for i, o := range src.Outcomes() {
			if !slices.Equal(o, []node.Outcome{node.Delivered}) {
				t.Fatalf("item %d: outcomes %v, want [Delivered]", i, o)
			}
		}
		if calls := w.callsOf(0); calls != 2 {
			t.Fatalf("the parked item was called %d times, want 2", calls)
		}
		if s := nodeOf(t, res, "call"); s.NodeRestarts != 1 {
			t.Fatalf("%d restarts, want 1", s.NodeRestarts)
		}
	}
}

// A drain lets parked items finish: the source stops, the parked items
// are delivered once their waits end, and the run ends cleanly.
func TestDrainFinishesParkedItems(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		opts    []pipeline.NodeOption
		flowing int // items delivered while two wait
	}{
		{[]pipeline.NodeOption{pipeline.Parallel(4), pipeline.Unordered()}, 98},
		{[]pipeline.NodeOption{pipeline.Parallel(4)}, 0},
		{[]pipeline.NodeOption{pipeline.Keyed(4, func(x int) int { return x })}, 98},
	} {
		const n = 100
		clock := clockwork.NewFakeClock()
		w := &waiter{waits: map[int]time.Duration{0: time.Hour, 1: time.Hour}}
		c := newCounter(v.flowing)
		src := &endlessSource{items: ints(n), sent: make(chan struct{})}
		b := parkPipeline(clock, w, c, src, v.opts)
		p := build(t, b)
		run := pipelinetest.Start(t.Context(), p)
		if v.flowing > 0 {
			await(t, c.reached, "the items that do not wait")
		}
		// Every item is taken before the drain, which stops the source:
		// with none flowing, the two timers may be armed before the
		// source emitted the rest.
		await(t, src.sent, "the source's last emit")
		if err := clock.BlockUntilContext(t.Context(), 2); err != nil {
			t.Fatal(err)
		}
		if !p.Drain() {
			t.Fatal("no run to drain")
		}
		clock.Advance(time.Hour)
		if _, err := run.Wait(); err != nil {
			t.Fatal(err)
		}
		if got := c.items(); len(got) != n {
			t.Fatalf("%v: got %d items, want %d", v.opts, len(got), n)
		}
	}
}

// An endlessSource emits its items, closes sent, then waits for its
// context to end.
type endlessSource struct {
	items []int
	sent  chan struct{}
}

func (s *endlessSource) Run(ctx context.Context, out node.Emitter[int]) error {
	for _, x := range s.items {
		if err := out.Emit(ctx, x); err != nil {
			return err
		}
	}
	close(s.sent)
	<-ctx.Done()
	return nil
}

// Cancelling a run with parked items returns at once, with the clock
// standing still: the parked items end Failed and no goroutine is left.
func TestCancelWithParkedItemsReturnsAtOnce(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, opts := range [][]pipeline.NodeOption{
		{pipeline.Parallel(4), pipeline.Unordered()},
		{pipeline.Parallel(4)},
		{pipeline.Keyed(4, mod7)},
	} {
		const n = 100
		clock := clockwork.NewFakeClock()
		w := &waiter{waits: map[int]time.Duration{}}
		for i := range n {
			w.waits[i] = time.Hour
		}
		src := pipelinetest.NewTrackedSource(ints(n)...)
		b := parkPipeline(clock, w, newCounter(n), src, opts)
		ctx, cancel := context.WithCancel(t.Context())
		run := pipelinetest.Start(ctx, build(t, b))
		// Keyed parks one item per key, the others wait behind their keys.
		parked := n
		if len(opts) == 1 {
			parked = 7
		}
		if err := clock.BlockUntilContext(t.Context(), parked); err != nil {
			t.Fatal(err)
		}
		cancel()
		select {
		case <-run.Done():
		case <-time.After(time.Minute):
			t.Fatal("the cancelled run did not return")
		}
		if _, err := run.Wait(); !errors.Is(err, context.Canceled) {
			t.Fatalf("run error %v, want context.Canceled", err)
		}
		for i, o := range src.Outcomes() {
			if !slices.Equal(o, []node.Outcome{node.Failed}) {
				t.Fatalf("item %d: outcomes %v, want [Failed]", i, o)
			}
		}
	}
}

// Parked items cost no goroutine each: with 1,000 items parked, the
// process has about as many goroutines as before the run.
func TestParkedItemsCostNoGoroutine(t *testing.T) {
	const n = 1000
	for _, opts := range [][]pipeline.NodeOption{
		{pipeline.Parallel(4), pipeline.Unordered()},
		// A Keyed node's items inside are bounded by its buffer.
		{pipeline.Keyed(4, func(x int) int { return x }), pipeline.Buffer(2048)},
	} {
		before := runtime.NumGoroutine()
		clock := clockwork.NewFakeClock()
		w := &waiter{waits: map[int]time.Duration{}}
		for i := range n {
			w.waits[i] = time.Hour
		}
		c := newCounter(n)
		b := parkPipeline(clock, w, c, pipelinetest.NewSliceSource(ints(n)...), opts)
		run := pipelinetest.Start(t.Context(), build(t, b))
		if err := clock.BlockUntilContext(t.Context(), n); err != nil {
			t.Fatal(err)
		}
		if during := runtime.NumGoroutine(); during-before > 50 {
			t.Fatalf("%d goroutines with %d items parked, %d before the run", during, n, before)
		}
		clock.Advance(time.Hour)
		if _, err := run.Wait(); err != nil {
			t.Fatal(err)
		}
		if got := c.items(); len(got) != n {
			t.Fatalf("got %d items, want %d", len(got), n)
		}
	}
}

// A wait shorter than the source's HandOffAfter parks; when its next call
// asks for a long wait, the parked item is handed to the broker, and the
// other items flowed meanwhile.
func TestParkedItemHandsOffItsLongWait(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	ids := make([]int, 20)
	for i := range ids {
		ids[i] = i + 1
	}
	br := newSimBroker(time.Minute, ids...)
	f := &scripted{script: map[int][]error{1: {wait(time.Second), wait(time.Hour), nil}}}
	b := pipeline.New("park-handoff", pipeline.WithClock(clock),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 5
			o.ItemRetry.Backoff = resilience.Exponential(time.Second).WithMaxDelay(3 * time.Hour)
		}))
	out := pipeline.Transform[delivery, delivery](b, "call", pipeline.Source[delivery](b, "src", br), f, pipeline.Parallel(4), pipeline.Unordered())
	col := &pipelinetest.Collector[delivery]{}
	pipeline.Sink(b, "sink", out, col)
	run := pipelinetest.Start(t.Context(), build(t, b))
	if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	start := clock.Now()
	res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if clock.Since(start) >= time.Minute {
		t.Fatalf("the run held a long wait in process: %s", clock.Since(start))
	}
	br.mu.Lock()
	defer br.mu.Unlock()
	if len(br.handOffs) != 1 || br.handOffs[0].Retry != 2 || br.handOffs[0].Envelope.Attempts != 2 {
		t.Fatalf("hand-offs %+v; want one, of retry 2 after 2 calls", br.handOffs)
	}
	if o := br.outcomes[1]; !slices.Equal(o, []node.Outcome{node.HandedOff, node.Delivered}) {
		t.Fatalf("item 1: outcomes %v, want [HandedOff Delivered]", o)
	}
	for _, id := range ids[1:] {
		if o := br.outcomes[id]; !slices.Equal(o, []node.Outcome{node.Delivered}) {
			t.Fatalf("item %d: outcomes %v, want [Delivered]", id, o)
		}
	}
	if s := nodeOf(t, res, "call"); s.HandedOff != 1 {
		t.Fatalf("%d handed off, want 1", s.HandedOff)
	}
	if col.Len() != len(ids) {
		t.Fatalf("%d delivered, want %d", col.Len(), len(ids))
	}
}
