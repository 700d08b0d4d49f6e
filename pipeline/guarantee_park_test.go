package pipeline_test

// Guarantees of retry parking (issue 28): each test states what the docs
// promise of a parked item and checks that the engine keeps it.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// fnProc adapts a function to a Transform's processor.
type fnProc func(ctx context.Context, x int) (int, error)

func (f fnProc) Process(ctx context.Context, x int) (int, error) { return f(ctx, x) }

var errParkPoison = errors.New("poison")

// An item whose wait ended, and that waits for a worker when the node
// fails, is replayed with its calls so far: its dead letter counts every
// call. Keyed: the node's only worker is in item 1's call. Parallel: one
// worker is in item 1's call, the other in item 2's, which lasts until the
// node fails. resilience-layers.md: "a node restart replays parked items
// from its replay window with their calls so far".
//
// The test moves the clock itself: the calls it waits for wait on
// channels, not on the clock, so that no wait ends before the test says
// so.
func TestParkWokenItemKeepsItsCallsAcrossRestart(t *testing.T) {
	for _, v := range []struct {
		name string
		opts []pipeline.NodeOption
	}{
		{"parallel", []pipeline.NodeOption{pipeline.Parallel(2)}},
		{"keyed", []pipeline.NodeOption{pipeline.Keyed(1, func(x int) int { return x })}},
	} {
		t.Run(v.name, func(t *testing.T) {
			clock := clockwork.NewFakeClock()
			dlq := deadletter.NewMemory(10)
			var mu sync.Mutex
			calls := map[int]int{}
			parallel := v.name == "parallel"
			inCall1, inCall2, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
			f := fnProc(func(ctx context.Context, x int) (int, error) {
				mu.Lock()
				calls[x]++
				n := calls[x]
				mu.Unlock()
				switch {
				case x == 0 && n == 1:
					return 0, resilience.RetryAfter(errors.New("busy"), time.Hour)
				case x == 0:
					return 0, errParkPoison
				case x == 1 && n == 1:
					close(inCall1)
					select {
					case <-release:
					case <-ctx.Done():
						return 0, ctx.Err()
					}
					return 0, errRestartMe
				case x == 2 && n == 1 && parallel:
					// Holds the other worker until the node fails.
					close(inCall2)
					<-ctx.Done()
					return 0, ctx.Err()
				}
				return x, nil
			})
			b := pipeline.New("park", pipeline.WithClock(clock), pipeline.WithDeadLetter(dlq),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 3
					o.ItemRetry.Backoff = resilience.Constant(time.Second)
					o.NodeRestart.MaxRestarts = 2
					o.NodeRestart.Backoff = resilience.NoBackoff()
					o.NodeRestart.MaxReplayWindow = 64
					o.OnItemFailure = resilience.DeadLetter
					o.FailureRules = []resilience.FailureRule{{Match: func(err error) bool { return errors.Is(err, errRestartMe) }, Action: resilience.Fail}}
				}))
			src := pipelinetest.NewTrackedSource(0, 1, 2)
			out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", src), f, v.opts...)
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
			run := pipelinetest.Start(t.Context(), build(t, b))
			// Item 0 parked for its hour; every worker is in a call.
			await(t, inCall1, "item 1's call")
			if parallel {
				await(t, inCall2, "item 2's call")
			}
			if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			// The timer's function runs on a goroutine of its own: the
			// test waits until item 0 joined the woken items, so that the
			// node fails with it there rather than still parked.
			woke := make(chan struct{})
			var once sync.Once
			pipeline.SetParkWokeHook(func() { once.Do(func() { close(woke) }) })
			defer pipeline.SetParkWokeHook(nil)
			clock.Advance(time.Hour)
			await(t, woke, "item 0's wake")
			// Item 0 woke, and no worker is free: item 1 fails the node.
			close(release)
			if _, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Second); err != nil {
				t.Fatal(err)
			}
			envs := dlq.Envelopes()
			if len(envs) != 1 {
				t.Fatalf("%d dead letters, want 1", len(envs))
			}
			mu.Lock()
			c0, c1, c2 := calls[0], calls[1], calls[2]
			mu.Unlock()
			if envs[0].Attempts != c0 || len(envs[0].History) != c0 {
				t.Fatalf("dead letter of item 0: %d attempts, %d history entries; item 0 was called %d times", envs[0].Attempts, len(envs[0].History), c0)
			}
			// The call that the replay made after the restart.
			if c0 != 2 || envs[0].History[1].Layer != resilience.NodeRestart {
				t.Fatalf("item 0: %d calls, history %+v; want its first call, then the replay's", c0, envs[0].History)
			}
			// Item 2 is called in the replay only (Keyed), or in each body.
			if want := 1 + btoi(parallel); c1 != 2 || c2 != want {
				t.Fatalf("items 1 and 2 called %d and %d times, want 2 and %d", c1, c2, want)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// With MaxParked(1) and many workers, every item waiting once: the run
// ends, each item is delivered once, and ordered output keeps its order.
func TestParkMaxParkedOneManyWorkersFinishes(t *testing.T) {
	for k, opts := range [][]pipeline.NodeOption{
		{pipeline.Parallel(8), pipeline.Unordered(), pipeline.MaxParked(1)},
		{pipeline.Parallel(8), pipeline.MaxParked(1)},
		{pipeline.Keyed(8, mod7), pipeline.MaxParked(1)},
		{pipeline.Keyed(8, func(x int) int { return x }), pipeline.MaxParked(1)},
	} {
		ordered := k == 1
		const n = 200
		clock := clockwork.NewFakeClock()
		w := &waiter{waits: map[int]time.Duration{}}
		for i := range n {
			w.waits[i] = time.Duration(1+i%5) * time.Millisecond
		}
		c := newCounter(n)
		src := pipelinetest.NewTrackedSource(ints(n)...)
		b := parkPipeline(clock, w, c, src, opts)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		res, err := pipelinetest.AdvanceUntilDone(ctx, clock, pipelinetest.Start(ctx, build(t, b)), time.Millisecond)
		cancel()
		if err != nil {
			t.Fatalf("case %d: %v", k, err)
		}
		got := c.items()
		if ordered && !slices.Equal(got, ints(n)) {
			t.Fatalf("ordered output out of order: %v", got)
		}
		slices.Sort(got)
		if !slices.Equal(got, ints(n)) {
			t.Fatalf("got %v", got)
		}
		for i, o := range src.Outcomes() {
			if !slices.Equal(o, []node.Outcome{node.Delivered}) {
				t.Fatalf("item %d: outcomes %v", i, o)
			}
		}
		if s := nodeOf(t, res, "call"); s.ItemRetries != n {
			t.Fatalf("%d retries, want %d", s.ItemRetries, n)
		}
	}
}

// A drain with items parked for an hour and WithDrainTimeout(1m) ends at
// the timeout with ErrDrainTimeout, not after the hour; each parked item
// completes once, Failed.
func TestParkDrainTimeoutCutsParkedHourWaits(t *testing.T) {
	for _, opts := range [][]pipeline.NodeOption{
		{pipeline.Parallel(4), pipeline.Unordered()},
		{pipeline.Parallel(4)},
		{pipeline.Keyed(4, func(x int) int { return x })},
	} {
		const n = 20
		clock := clockwork.NewFakeClock()
		w := &waiter{waits: map[int]time.Duration{0: time.Hour, 1: time.Hour}}
		c := newCounter(n - 2)
		src := &trackedEndless{outcomes: map[int][]node.Outcome{}}
		src.items = ints(n)
		b := parkPipeline(clock, w, c, src, opts, pipeline.WithDrainTimeout(time.Minute))
		p := build(t, b)
		run := pipelinetest.Start(t.Context(), p)
		if len(opts) != 1 {
			await(t, c.reached, "the items that do not wait")
		}
		if err := clock.BlockUntilContext(t.Context(), 2); err != nil {
			t.Fatal(err)
		}
		start := clock.Now()
		p.Drain()
		if err := clock.BlockUntilContext(t.Context(), 3); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		select {
		case <-run.Done():
		case <-time.After(time.Minute):
			t.Fatal("the drain did not end at its timeout")
		}
		if _, err := run.Wait(); !errors.Is(err, pipeline.ErrDrainTimeout) {
			t.Fatalf("run error %v, want ErrDrainTimeout", err)
		}
		if d := clock.Since(start); d > time.Minute {
			t.Fatalf("drain took %s", d)
		}
		src.mu.Lock()
		for _, x := range []int{0, 1} {
			if o := src.outcomes[x]; !slices.Equal(o, []node.Outcome{node.Failed}) {
				t.Fatalf("parked item %d: outcomes %v, want [Failed]", x, o)
			}
		}
		src.mu.Unlock()
	}
}

// trackedEndless emits its items with a done callback, then waits for its
// context to end.
type trackedEndless struct {
	items    []int
	mu       sync.Mutex
	outcomes map[int][]node.Outcome
}

func (s *trackedEndless) Run(ctx context.Context, out node.Emitter[int]) error {
	for _, x := range s.items {
		err := out.EmitTracked(ctx, x, func(o node.Outcome) {
			s.mu.Lock()
			s.outcomes[x] = append(s.outcomes[x], o)
			s.mu.Unlock()
		})
		if err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}

// An item that waits on every call (parking each time) and runs out of
// retries is dead-lettered once, with every call counted, on every
// parking node kind.
func TestParkedItemExhaustsRetriesOnce(t *testing.T) {
	for _, opts := range [][]pipeline.NodeOption{
		{pipeline.Parallel(4), pipeline.Unordered()},
		{pipeline.Parallel(4)},
		{pipeline.Keyed(4, mod7)},
	} {
		const n = 30
		clock := clockwork.NewFakeClock()
		dlq := deadletter.NewMemory(10)
		f := fnProc(func(ctx context.Context, x int) (int, error) {
			if x == 3 {
				return 0, resilience.RetryAfter(errors.New("busy"), time.Minute)
			}
			return x, nil
		})
		b := pipeline.New("park", pipeline.WithClock(clock), pipeline.WithDeadLetter(dlq),
			pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 3
				o.ItemRetry.Backoff = resilience.Constant(time.Second)
				o.OnItemFailure = resilience.DeadLetter
			}))
		src := pipelinetest.NewTrackedSource(ints(n)...)
		out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", src), f, opts...)
		col := &pipelinetest.Collector[int]{}
		pipeline.Sink(b, "sink", out, col)
		res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		envs := dlq.Envelopes()
		if len(envs) != 1 || envs[0].Attempts != 4 {
			t.Fatalf("dead letters %+v; want one of 4 attempts", envs)
		}
		for i, o := range src.Outcomes() {
			want := node.Delivered
			if i == 3 {
				want = node.DeadLettered
			}
			if !slices.Equal(o, []node.Outcome{want}) {
				t.Fatalf("item %d: outcomes %v, want [%v]", i, o, want)
			}
		}
		if s := nodeOf(t, res, "call"); s.ItemRetries != 3 || col.Len() != n-1 {
			t.Fatalf("%d retries, %d delivered", s.ItemRetries, col.Len())
		}
	}
}

// retrySignal is an observer that signals each retry event.
type retrySignal struct {
	observer.Nop
	ch chan observer.RetryEvent
}

func (r *retrySignal) OnRetry(e observer.RetryEvent) { r.ch <- e }

// MaxElapsed promises that no retry starts once MaxElapsed has passed
// since the item's first failure (resilience.ItemRetryOptions), and
// resilience-layers.md that parking keeps its meaning. An item whose
// 9 s wait fits a 10 s MaxElapsed, but that finds the parking full
// (MaxParked(1)), waits for room first and parks its 9 s after that: its
// retry starts 18 s after its first failure.
func TestParkFullParkingStartsNoRetryPastMaxElapsed(t *testing.T) {
	for _, max := range []int{2, 1} {
		t.Run(fmt.Sprintf("MaxParked(%d)", max), func(t *testing.T) {
			clock := clockwork.NewFakeClock()
			start := clock.Now()
			var mu sync.Mutex
			calls := map[int][]time.Duration{}
			// Both first calls are made before either fails, so that
			// both items are on a worker when they choose their wait.
			both := make(chan struct{})
			f := fnProc(func(ctx context.Context, x int) (int, error) {
				mu.Lock()
				calls[x] = append(calls[x], clock.Since(start))
				n := len(calls[x])
				if n == 1 && len(calls) == 2 {
					close(both)
				}
				mu.Unlock()
				if n == 1 {
					select {
					case <-both:
					case <-ctx.Done():
						return 0, ctx.Err()
					}
					return 0, resilience.RetryAfter(errors.New("busy"), 9*time.Second)
				}
				return x, nil
			})
			obs := &retrySignal{ch: make(chan observer.RetryEvent, 10)}
			b := pipeline.New("park", pipeline.WithClock(clock), pipeline.WithObserver(obs),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 3
					o.ItemRetry.Backoff = resilience.Constant(time.Second)
					o.ItemRetry.MaxElapsed = 10 * time.Second
					o.OnItemFailure = resilience.Skip
				}))
			src := pipelinetest.NewTrackedSource(0, 1)
			out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", src), f,
				pipeline.Parallel(2), pipeline.Unordered(), pipeline.MaxParked(max))
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
			run := pipelinetest.Start(t.Context(), build(t, b))
			// Both items failed at 0 s and chose their 9 s wait.
			for range 2 {
				select {
				case <-obs.ch:
				case <-time.After(time.Minute):
					t.Fatal("no retry event")
				}
			}
			// The events come before the items park: wait for the timers
			// of the items that fit.
			if err := clock.BlockUntilContext(t.Context(), max); err != nil {
				t.Fatal(err)
			}
			if _, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Second); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for x, cs := range calls {
				for _, at := range cs[1:] {
					if at > 10*time.Second {
						t.Fatalf("item %d: calls at %v; a retry started past MaxElapsed (10s) from its first failure", x, cs)
					}
				}
			}
		})
	}
}

// MaxParked on a node that never parks is a Build error naming the node
// and the option, as are other options a kind does not take.
func TestParkMaxParkedOnNodeThatNeverParksIsRefused(t *testing.T) {
	t.Run("source", func(t *testing.T) {
		b := pipeline.New("park")
		pipeline.Sink(b, "sink", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1), pipeline.MaxParked(4)), newCounter(1))
		if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "MaxParked") {
			t.Fatalf("Build error %v; want one naming src and MaxParked", err)
		}
	})
	t.Run("mapbatch", func(t *testing.T) {
		b := pipeline.New("park")
		in := pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1))
		out := pipeline.MapBatch(b, "batch", in, 8, time.Millisecond, func(_ context.Context, xs []int) ([]int, []error) {
			return xs, make([]error, len(xs))
		}, pipeline.MaxParked(4))
		pipeline.Sink(b, "sink", out, newCounter(1))
		if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "MaxParked") {
			t.Fatalf("Build error %v; want one naming batch and MaxParked", err)
		}
	})
}

// A parked item whose retry, once it can start, would start past
// MaxElapsed is not called again: it ends with Limit LimitElapsed. Item 1
// fails at 0 s (MaxElapsed 10 s) and again at 2 s, asking 3 s; item 0,
// failing at 2 s and asking 10 s, took the only parking place
// (MaxParked(1)), so room comes at 12 s, past item 1's 10 s.
func TestParkedItemPastMaxElapsedOnceResumedIsNotCalled(t *testing.T) {
	for _, v := range []struct {
		name string
		opts []pipeline.NodeOption
	}{
		{"unordered", []pipeline.NodeOption{pipeline.Parallel(2), pipeline.Unordered(), pipeline.MaxParked(1)}},
		{"ordered", []pipeline.NodeOption{pipeline.Parallel(2), pipeline.MaxParked(1)}},
		{"keyed", []pipeline.NodeOption{pipeline.Keyed(2, func(x int) int { return x }), pipeline.MaxParked(1)}},
	} {
		t.Run(v.name, func(t *testing.T) {
			clock := clockwork.NewFakeClock()
			start := clock.Now()
			go0, go1 := make(chan struct{}), make(chan struct{})
			first, second := make(chan struct{}), make(chan struct{}) // item 0's first call, item 1's second began
			var mu sync.Mutex
			calls := map[int][]time.Duration{}
			f := fnProc(func(ctx context.Context, x int) (int, error) {
				mu.Lock()
				calls[x] = append(calls[x], clock.Since(start))
				n := len(calls[x])
				mu.Unlock()
				wait := func(ch chan struct{}) error {
					select {
					case <-ch:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				switch {
				case x == 0 && n == 1:
					close(first)
					if err := wait(go0); err != nil {
						return 0, err
					}
					return 0, resilience.RetryAfter(errors.New("busy"), 10*time.Second)
				case x == 1 && n == 1:
					// Item 0 is on its worker before item 1 fills the
					// parking, which stops intake.
					if err := wait(first); err != nil {
						return 0, err
					}
					return 0, resilience.RetryAfter(errors.New("busy"), 2*time.Second)
				case x == 1 && n == 2:
					close(second)
					if err := wait(go1); err != nil {
						return 0, err
					}
					return 0, resilience.RetryAfter(errors.New("busy"), 3*time.Second)
				}
				return x, nil
			})
			obs := &retrySignal{ch: make(chan observer.RetryEvent, 10)}
			dlq := deadletter.NewMemory(10)
			b := pipeline.New("park", pipeline.WithClock(clock), pipeline.WithObserver(obs), pipeline.WithDeadLetter(dlq),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 5
					o.ItemRetry.Backoff = resilience.Constant(time.Second)
					o.ItemRetry.MaxElapsed = 10 * time.Second
					o.OnItemFailure = resilience.DeadLetter
				}))
			src := pipelinetest.NewTrackedSource(0, 1)
			out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", src), f, v.opts...)
			col := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", out, col)
			run := pipelinetest.Start(t.Context(), build(t, b))
			// Item 1 parks for 2 s while item 0's first call holds a worker.
			await(t, first, "item 0's first call")
			if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			clock.Advance(2 * time.Second)
			await(t, second, "item 1's second call")
			close(go0)
			// Item 0 parks until 12 s.
			if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			close(go1)
			// Item 1's second retry was decided at 2 s; it waits for room.
			for decided := false; !decided; {
				select {
				case e := <-obs.ch:
					decided = e.Attempt == 2
				case <-time.After(time.Minute):
					t.Fatal("no retry event for item 1's second failure")
				}
			}
			clock.Advance(10 * time.Second)
			if _, err := run.Wait(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			c0, c1 := slices.Clone(calls[0]), slices.Clone(calls[1])
			mu.Unlock()
			if !slices.Equal(c1, []time.Duration{0, 2 * time.Second}) {
				t.Fatalf("item 1: calls at %v, want [0s 2s]: none past MaxElapsed", c1)
			}
			if !slices.Equal(c0, []time.Duration{0, 12 * time.Second}) {
				t.Fatalf("item 0: calls at %v, want [0s 12s]", c0)
			}
			envs := dlq.Envelopes()
			var ex *resilience.RetryExhaustedError
			if len(envs) != 1 || envs[0].Item != 1 || !errors.As(envs[0].Err, &ex) || ex.Limit != resilience.LimitElapsed || ex.Attempts != 2 {
				t.Fatalf("dead letters %+v; want item 1's, exhausted by MaxElapsed after 2 calls", envs)
			}
			if got := col.Items(); !slices.Equal(got, []int{0}) {
				t.Fatalf("delivered %v, want [0]", got)
			}
		})
	}
}
