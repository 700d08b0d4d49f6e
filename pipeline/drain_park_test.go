package pipeline_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// drainParkPipeline is src, a node "call" running f with opts, and a
// collecting sink; waits below the broker's hand-off threshold park.
func drainParkPipeline(clock clockwork.Clock, rec *pipelinetest.Recorder, src node.Source[delivery], f node.Transform[delivery, delivery], col *pipelinetest.Collector[delivery], opts ...pipeline.NodeOption) *pipeline.Pipeline {
	b := pipeline.New("drain-park", pipeline.WithClock(clock), pipeline.WithObserver(rec),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 5
			o.ItemRetry.Backoff = resilience.Exponential(time.Second)
		}))
	out := pipeline.Transform(b, "call", pipeline.Source[delivery](b, "src", src), f, opts...)
	pipeline.Sink(b, "sink", out, col)
	p, err := b.Build()
	if err != nil {
		panic(err)
	}
	return p
}

// A callCount passes calls on to f and closes reached once at calls
// were made: every item had its first call.
type callCount struct {
	f       node.Transform[delivery, delivery]
	at      int
	mu      sync.Mutex
	n       int
	reached chan struct{}
}

func counted(f node.Transform[delivery, delivery], at int) *callCount {
	return &callCount{f: f, at: at, reached: make(chan struct{})}
}

func (c *callCount) Process(ctx context.Context, d delivery) (delivery, error) {
	c.mu.Lock()
	if c.n++; c.n == c.at {
		close(c.reached)
	}
	c.mu.Unlock()
	return c.f.Process(ctx, d)
}

// idsOf returns the ids of ds, in their order.
func idsOf(ds []delivery) []int {
	out := make([]int, len(ds))
	for i, d := range ds {
		out[i] = d.id
	}
	return out
}

// seq returns from, from+1, ..., to.
func seq(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// waitRun waits, on the real clock, for run to end: the fake clock stands
// still, so a run that waits on it would never end.
func waitRun(t *testing.T, run *pipelinetest.Running, what string) (pipeline.Result, error) {
	t.Helper()
	select {
	case <-run.Done():
	case <-time.After(time.Minute):
		t.Fatalf("%s: the run did not end with the clock standing still", what)
	}
	return run.Wait()
}

// On a Parallel node, a drain hands the parked items of a broker source
// back to the broker at once, instead of waiting out their waits: the run
// ends with the clock standing still, each parked item ends HandedOff once
// with the story of a HandOffAfter hand-off (retry 1, the rest of its
// wait, its one call), and the broker holds exactly those items. A later
// run takes them up where they stopped: each is called once more, and
// every item is delivered exactly once in all.
func TestDrainHandsParkedItemsBackToTheBroker(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		name string
		opts []pipeline.NodeOption
	}{
		{"unordered", []pipeline.NodeOption{pipeline.Parallel(4), pipeline.Unordered()}},
		{"ordered", []pipeline.NodeOption{pipeline.Parallel(4)}},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			const n = 20
			clock := clockwork.NewFakeClock()
			rec := &pipelinetest.Recorder{}
			br := newSimBroker(2*time.Hour, seq(1, n)...)
			f := &scripted{script: map[int][]error{1: {wait(time.Hour), nil}, 2: {wait(time.Hour), nil}}}
			col := &pipelinetest.Collector[delivery]{}
			cc := counted(f, n)
			p := drainParkPipeline(clock, rec, br, cc, col, v.opts...)
			start := clock.Now()
			run := pipelinetest.Start(t.Context(), p)
			await(t, cc.reached, "every item's first call")
			require.NoError(t, clock.BlockUntilContext(t.Context(), 2), "the two items park")
			require.True(t, p.Drain())
			res, err := waitRun(t, run, v.name)
			require.NoError(t, err)
			assert.Equal(t, start, clock.Now())

			br.mu.Lock()
			handOffs := slices.Clone(br.handOffs)
			outcomes := map[int][]node.Outcome{}
			for id, o := range br.outcomes {
				outcomes[id] = slices.Clone(o)
			}
			br.mu.Unlock()
			require.Len(t, handOffs, 2)
			var back []int
			for _, h := range handOffs {
				back = append(back, h.Envelope.Item.(delivery).id)
				assert.Equal(t, 1, h.Retry)
				assert.Equal(t, time.Hour, h.Delay, "the rest of the wait")
				assert.Equal(t, start, h.Since)
				assert.Equal(t, 1, h.Envelope.Attempts)
				assert.Equal(t, "call", h.Envelope.DecisionNode)
				assert.Error(t, h.Envelope.Err)
			}
			slices.Sort(back)
			assert.Equal(t, []int{1, 2}, back)
			for id := 1; id <= n; id++ {
				want := []node.Outcome{node.Delivered}
				if id <= 2 {
					want = []node.Outcome{node.HandedOff}
				}
				assert.Equal(t, want, outcomes[id], "item %d", id)
			}
			s := nodeOf(t, res, "call")
			assert.Equal(t, int64(2), s.HandedOff)
			assert.Equal(t, int64(2), s.ItemRetries, "a handed-back retry counts, as a hand-off's does")
			assert.Zero(t, s.Failed)
			assert.Equal(t, 1, f.calls[1])
			assert.Equal(t, 1, f.calls[2])
			got := idsOf(col.Items())
			if v.name == "ordered" {
				assert.Equal(t, seq(3, n), got, "the others in input order")
			}
			events := pipelinetest.Of[observer.RetryEvent](rec)
			assert.Len(t, events, 2, "each retry is announced once, when the item parks")

			// What the broker holds: the two items, each once.
			require.Len(t, br.queue, 2)
			var queued []int
			for range 2 {
				d := <-br.queue
				assert.Equal(t, "call", d.node)
				assert.Equal(t, 1, d.retry)
				queued = append(queued, d.id)
				br.queue <- d
			}
			slices.Sort(queued)
			assert.Equal(t, []int{1, 2}, queued)

			// The next run delivers them with their second call.
			res, err = waitRun(t, pipelinetest.Start(t.Context(), p), v.name+" again")
			require.NoError(t, err)
			assert.Equal(t, 2, f.calls[1])
			assert.Equal(t, 2, f.calls[2])
			assert.Zero(t, nodeOf(t, res, "call").ItemRetries, "the resumed call is the retry counted at the hand-off")
			all := idsOf(col.Items())
			slices.Sort(all)
			assert.Equal(t, seq(1, n), all, "every item delivered exactly once")
			br.mu.Lock()
			assert.Equal(t, []node.Outcome{node.HandedOff, node.Delivered}, br.outcomes[1])
			assert.Equal(t, []node.Outcome{node.HandedOff, node.Delivered}, br.outcomes[2])
			br.mu.Unlock()
		})
	}
}

// gate is a node function that holds the first call of item held until
// open is closed, then asks for a wait of an hour; every other call
// succeeds. entered is closed when that call started.
type gate struct {
	held    int
	entered chan struct{}
	open    chan struct{}
	mu      sync.Mutex
	calls   map[int]int
}

func (g *gate) Process(_ context.Context, d delivery) (delivery, error) {
	g.mu.Lock()
	g.calls[d.id]++
	n := g.calls[d.id]
	g.mu.Unlock()
	if d.id == g.held && n == 1 {
		close(g.entered)
		<-g.open
		return d, wait(time.Hour)
	}
	return d, nil
}

// An item whose wait is decided while the run drains goes back to the
// broker at once, instead of parking: the drain never waits for it.
func TestDrainHandsBackAnItemThatParksDuringIt(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]pipeline.NodeOption{
		{pipeline.Parallel(4), pipeline.Unordered()},
		{pipeline.Parallel(4)},
	} {
		clock := clockwork.NewFakeClock()
		br := newSimBroker(2*time.Hour, seq(1, 5)...)
		g := &gate{held: 3, entered: make(chan struct{}), open: make(chan struct{}), calls: map[int]int{}}
		col := &pipelinetest.Collector[delivery]{}
		p := drainParkPipeline(clock, &pipelinetest.Recorder{}, br, g, col, opts...)
		run := pipelinetest.Start(t.Context(), p)
		await(t, g.entered, "item 3's first call")
		require.True(t, p.Drain())
		close(g.open)
		res, err := waitRun(t, run, "drain")
		require.NoError(t, err)
		br.mu.Lock()
		assert.Equal(t, []node.Outcome{node.HandedOff}, br.outcomes[3])
		require.Len(t, br.handOffs, 1)
		assert.Equal(t, time.Hour, br.handOffs[0].Delay)
		br.mu.Unlock()
		assert.Equal(t, int64(1), nodeOf(t, res, "call").HandedOff)
		assert.Equal(t, 1, g.calls[3])
	}
}

// When the broker refuses to take a parked item back, the drain loses
// nothing: the item waits its wait here and is delivered, once.
func TestDrainKeepsAParkedItemTheBrokerRefuses(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]pipeline.NodeOption{
		{pipeline.Parallel(4), pipeline.Unordered()},
		{pipeline.Parallel(4)},
	} {
		clock := clockwork.NewFakeClock()
		br := newSimBroker(2*time.Hour, seq(1, 10)...)
		br.handable, br.refusals = false, make(chan int, 4)
		f := &scripted{script: map[int][]error{1: {wait(time.Hour), nil}, 2: {wait(time.Hour), nil}}}
		col := &pipelinetest.Collector[delivery]{}
		cc := counted(f, 10)
		p := drainParkPipeline(clock, &pipelinetest.Recorder{}, br, cc, col, opts...)
		run := pipelinetest.Start(t.Context(), p)
		await(t, cc.reached, "every item's first call")
		require.NoError(t, clock.BlockUntilContext(t.Context(), 2))
		start := clock.Now()
		require.True(t, p.Drain())
		for range 2 {
			select {
			case <-br.refusals:
			case <-time.After(time.Minute):
				t.Fatal("the drain did not try to hand the parked items back")
			}
		}
		// Both wait again, for the rest of their hour.
		require.NoError(t, clock.BlockUntilContext(t.Context(), 2))
		assert.False(t, run.Finished())
		clock.Advance(time.Hour)
		res, err := waitRun(t, run, "refused")
		require.NoError(t, err)
		assert.Equal(t, time.Hour, clock.Since(start))
		assert.Len(t, br.refusals, 0, "one attempt per item")
		br.mu.Lock()
		for id := 1; id <= 10; id++ {
			assert.Equal(t, []node.Outcome{node.Delivered}, br.outcomes[id], "item %d", id)
		}
		br.mu.Unlock()
		s := nodeOf(t, res, "call")
		assert.Zero(t, s.HandedOff)
		assert.Equal(t, int64(2), s.ItemRetries)
		assert.Equal(t, 2, f.calls[1])
		assert.Equal(t, 10, col.Len())
	}
}

// A parked item whose wait ends at the drain's instant (the clock reached
// it before the drain) is retried here, not handed back: the broker gets
// nothing, and each item is delivered once.
func TestDrainRetriesHereAnItemWhoseWaitEnded(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]pipeline.NodeOption{
		{pipeline.Parallel(4), pipeline.Unordered()},
		{pipeline.Parallel(4)},
	} {
		clock := clockwork.NewFakeClock()
		br := newSimBroker(2*time.Hour, seq(1, 10)...)
		f := &scripted{script: map[int][]error{1: {wait(time.Hour), nil}, 2: {wait(time.Hour), nil}}}
		cc := counted(f, 10)
		p := drainParkPipeline(clock, &pipelinetest.Recorder{}, br, cc, &pipelinetest.Collector[delivery]{}, opts...)
		run := pipelinetest.Start(t.Context(), p)
		await(t, cc.reached, "every item's first call")
		require.NoError(t, clock.BlockUntilContext(t.Context(), 2))
		// The timers fire on goroutines of their own: the drain may come
		// before they took the items out of their waits.
		clock.Advance(time.Hour)
		require.True(t, p.Drain())
		res, err := waitRun(t, run, "woken")
		require.NoError(t, err)
		br.mu.Lock()
		assert.Empty(t, br.handOffs)
		for id := 1; id <= 10; id++ {
			assert.Equal(t, []node.Outcome{node.Delivered}, br.outcomes[id], "item %d", id)
		}
		br.mu.Unlock()
		assert.Equal(t, int64(2), nodeOf(t, res, "call").ItemRetries)
		assert.Equal(t, 2, f.calls[1])
		assert.Equal(t, 2, f.calls[2])
	}
}

// A drain and the end of the parked items' waits at the same moment, in
// either order: each item ends once, handed back (one call, one
// hand-off) or retried here (two calls, none), never both.
func TestDrainRacingTheEndOfAWaitSettlesEachItemOnce(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]pipeline.NodeOption{
		{pipeline.Parallel(4), pipeline.Unordered()},
		{pipeline.Parallel(4)},
	} {
		const n, waiting = 10, 4
		clock := clockwork.NewFakeClock()
		br := newSimBroker(2*time.Hour, seq(1, n)...)
		f := &scripted{script: map[int][]error{}}
		for id := 1; id <= waiting; id++ {
			f.script[id] = []error{wait(time.Hour), nil}
		}
		col := &pipelinetest.Collector[delivery]{}
		cc := counted(f, n)
		p := drainParkPipeline(clock, &pipelinetest.Recorder{}, br, cc, col, opts...)
		run := pipelinetest.Start(t.Context(), p)
		await(t, cc.reached, "every item's first call")
		require.NoError(t, clock.BlockUntilContext(t.Context(), waiting))
		go clock.Advance(time.Hour)
		// The run may have ended before the drain came (every wait ended,
		// every item delivered): Drain then reports false, and the books
		// below hold all the same.
		p.Drain()
		res, err := waitRun(t, run, "race")
		require.NoError(t, err)
		br.mu.Lock()
		handed := map[int]int{}
		for _, h := range br.handOffs {
			handed[h.Envelope.Item.(delivery).id]++
		}
		for id := 1; id <= n; id++ {
			switch {
			case handed[id] == 1:
				assert.Equal(t, []node.Outcome{node.HandedOff}, br.outcomes[id], "item %d", id)
				assert.Equal(t, 1, f.calls[id], "item %d", id)
			case handed[id] == 0:
				assert.Equal(t, []node.Outcome{node.Delivered}, br.outcomes[id], "item %d", id)
			default:
				t.Errorf("item %d handed off %d times", id, handed[id])
			}
		}
		assert.Equal(t, int64(len(br.handOffs)), nodeOf(t, res, "call").HandedOff)
		assert.Equal(t, n-len(br.handOffs), col.Len())
		br.mu.Unlock()
	}
}

// A drain hands back nothing that cannot go back, and waits for it: a
// Keyed node's parked item (its key's later items would be written
// first; they leave in order), a default single worker's wait in place,
// and a parked item that is one of two broadcast parts.
func TestDrainWaitsForWhatCannotGoBack(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		name    string
		opts    []pipeline.NodeOption
		waiting int // the item that waits an hour
		first   int // first calls before the drain: every item was emitted
	}{
		// Items 4 and 7 wait behind item 1 for their first calls.
		{"keyed", []pipeline.NodeOption{pipeline.Keyed(4, func(d delivery) int { return d.id % 3 })}, 1, 7},
		{"single worker", nil, 9, 9},
		{"broadcast", []pipeline.NodeOption{pipeline.Parallel(4)}, 1, 9},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			br := newSimBroker(2*time.Hour, seq(1, 9)...)
			f := &scripted{script: map[int][]error{v.waiting: {wait(time.Hour), nil}}}
			cc := counted(f, v.first)
			col := &pipelinetest.Collector[delivery]{}
			b := pipeline.New("drain-park", pipeline.WithClock(clock),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 5
					o.ItemRetry.Backoff = resilience.Exponential(time.Second)
				}))
			src := pipeline.Source[delivery](b, "src", br)
			out := pipeline.Transform(b, "call", src, node.Transform[delivery, delivery](cc), v.opts...)
			pipeline.Sink(b, "sink", out, col)
			if v.name == "broadcast" {
				pipeline.Sink(b, "other", src, &pipelinetest.Collector[delivery]{})
			}
			p := build(t, b)
			run := pipelinetest.Start(t.Context(), p)
			await(t, cc.reached, "the first calls before the drain")
			require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
			require.True(t, p.Drain())
			start := clock.Now()
			res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Hour)
			require.NoError(t, err)
			assert.Equal(t, time.Hour, clock.Since(start), "the drain waited for the item")
			br.mu.Lock()
			assert.Empty(t, br.handOffs)
			for id := 1; id <= 9; id++ {
				assert.Equal(t, []node.Outcome{node.Delivered}, br.outcomes[id], "item %d", id)
			}
			br.mu.Unlock()
			assert.Zero(t, nodeOf(t, res, "call").HandedOff)
			assert.Equal(t, 2, f.calls[v.waiting])
			got := idsOf(col.Items())
			if v.name != "keyed" {
				assert.Equal(t, seq(1, 9), got, "in input order")
				return
			}
			var key1 []int
			for _, id := range got {
				if id%3 == 1 {
					key1 = append(key1, id)
				}
			}
			assert.Equal(t, []int{1, 4, 7}, key1, "the key's items in order")
		})
	}
}

// When the broker refuses to take a parked item back, a drain with a
// timeout shorter than the item's wait ends at the timeout, as without a
// broker: the item ends Failed (its broker delivers it again).
func TestDrainRefusedHandBackEndsAtTheDrainTimeout(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	br := newSimBroker(2*time.Hour, seq(1, 5)...)
	br.handable, br.refusals = false, make(chan int, 4)
	f := &scripted{script: map[int][]error{1: {wait(time.Hour), nil}}}
	b := pipeline.New("drain-park", pipeline.WithClock(clock), pipeline.WithDrainTimeout(time.Minute),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 5
			o.ItemRetry.Backoff = resilience.Exponential(time.Second)
		}))
	out := pipeline.Transform(b, "call", pipeline.Source[delivery](b, "src", br), f, pipeline.Parallel(4))
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[delivery]{})
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	require.True(t, p.Drain())
	select {
	case <-br.refusals:
	case <-time.After(time.Minute):
		t.Fatal("the drain did not try to hand the parked item back")
	}
	// The item's new timer and the drain's.
	require.NoError(t, clock.BlockUntilContext(t.Context(), 2))
	clock.Advance(time.Minute)
	_, err := waitRun(t, run, "timeout")
	assert.True(t, errors.Is(err, pipeline.ErrDrainTimeout), "run error %v", err)
	br.mu.Lock()
	assert.Equal(t, []node.Outcome{node.Failed}, br.outcomes[1])
	br.mu.Unlock()
}
