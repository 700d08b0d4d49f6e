package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// memStore is a checkpoint.Store in memory that records every Save.
type memStore struct {
	mu      sync.Mutex
	pos     map[string][]byte
	saves   []string // "source=pos", in order
	loads   int
	loadErr error
	saveErr error
	// failFirst fails that many Saves first; attempts counts every Save.
	failFirst int
	attempts  int
}

func newMemStore() *memStore { return &memStore{pos: map[string][]byte{}} }

func (m *memStore) Load(_ context.Context, pipe, src string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loads++
	if m.loadErr != nil {
		return nil, m.loadErr
	}
	return m.pos[pipe+"/"+src], nil
}

func (m *memStore) Save(_ context.Context, pipe, src string, pos []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.attempts++
	if m.saveErr != nil {
		return m.saveErr
	}
	if m.attempts <= m.failFirst {
		return errors.New("store busy")
	}
	m.pos[pipe+"/"+src] = append([]byte(nil), pos...)
	m.saves = append(m.saves, src+"="+string(pos))
	return nil
}

func (m *memStore) saved() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.saves...)
}

func (m *memStore) last() string {
	s := m.saved()
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// posSource emits the ints from where it resumed to n-1, each at the
// position just after it (its index + 1, in decimal). With hold, it then
// waits until hold is closed or its context ends.
type posSource struct {
	n    int
	hold chan struct{}

	mu        sync.Mutex
	from      int
	resumed   []string // the positions Resume got, "nil" for nil
	resumeErr error
	runs      int
}

func (s *posSource) Resume(pos []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pos == nil {
		s.resumed = append(s.resumed, "nil")
	} else {
		s.resumed = append(s.resumed, string(pos))
	}
	if s.resumeErr != nil {
		return s.resumeErr
	}
	s.from = 0
	if pos != nil {
		n, err := strconv.Atoi(string(pos))
		if err != nil {
			return err
		}
		s.from = n
	}
	return nil
}

func (s *posSource) Run(ctx context.Context, emit node.Emitter[int]) error {
	s.mu.Lock()
	s.runs++
	from := s.from
	s.mu.Unlock()
	for i := from; i < s.n; i++ {
		if err := emit.EmitAt(ctx, i, []byte(strconv.Itoa(i+1))); err != nil {
			return err
		}
	}
	if s.hold != nil {
		select {
		case <-s.hold:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

func (s *posSource) resumes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.resumed...)
}

// got counts what a sink wrote.
type got struct {
	mu sync.Mutex
	n  int
	v  []int
}

func (g *got) add(vs ...int) {
	g.mu.Lock()
	g.n += len(vs)
	g.v = append(g.v, vs...)
	g.mu.Unlock()
}

func (g *got) values() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.v...)
}

func (g *got) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// blockOn returns a sink that writes every item but block, on which it
// waits until its call's context ends.
func blockOn(g *got, block int) node.SinkFunc[int] {
	return func(ctx context.Context, v int) error {
		if v == block {
			<-ctx.Done()
			return ctx.Err()
		}
		g.add(v)
		return nil
	}
}

// runAsync runs p and returns where its end arrives.
func runAsync(ctx context.Context, p *pipeline.Pipeline) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := p.Run(ctx)
		ch <- err
	}()
	return ch
}

func newCkpt(store *memStore, opts ...pipeline.Option) *pipeline.Builder {
	return pipeline.New("ck", append([]pipeline.Option{
		pipeline.WithCheckpoint(store, time.Hour),
		pipeline.WithClock(clockwork.NewFakeClock()),
		pipeline.WithResilience(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 0 }),
	}, opts...)...)
}

// cancelAfter waits until cond holds, cancels the run, and returns its
// error.
func cancelAfter(t *testing.T, cancel context.CancelFunc, done <-chan error, cond func() bool, why ...func() string) error {
	t.Helper()
	waitFor(t, cond, why...)
	cancel()
	return <-done
}

func TestCheckpointBuildRefusesBadOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opt  pipeline.Option
		want string
	}{
		{pipeline.WithCheckpoint(nil, time.Second), "WithCheckpoint: the store is nil"},
		{pipeline.WithCheckpoint(newMemStore(), 0), "WithCheckpoint(store, 0s): the interval must be positive"},
		{pipeline.WithCheckpoint(newMemStore(), -time.Second), "the interval must be positive"},
	} {
		b := pipeline.New("ck", c.opt)
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", &posSource{n: 1}), node.SinkFunc[int](func(context.Context, int) error { return nil }))
		_, err := b.Build()
		require.Error(t, err)
		assert.ErrorContains(t, err, c.want)
	}
}

// The end of input saves the last position; nothing is saved for an
// empty input.
func TestCheckpointEndOfInput(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 50} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			t.Parallel()
			for _, m := range modes {
				store := newMemStore()
				b := newCkpt(store, m.opts...)
				g := &got{}
				pipeline.Sink(b, "sink", pipeline.Source(b, "src", &posSource{n: n}), node.SinkFunc[int](func(_ context.Context, v int) error { g.add(v); return nil }))
				_, err := build(t, b).Run(context.Background())
				require.NoError(t, err)
				assert.Equal(t, n, g.count())
				if n == 0 {
					assert.Empty(t, store.saved(), m.name)
				} else {
					assert.Equal(t, []string{"src=" + strconv.Itoa(n)}, store.saved(), m.name)
				}
			}
		})
	}
}

// Items settle out of order on parallel workers: the position stops before
// the oldest one not settled, whatever settled after it.
func TestCheckpointOutOfOrder(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opt  pipeline.NodeOption
	}{
		{"parallel", pipeline.Parallel(4)},
		{"unordered", pipeline.Unordered()},
		{"keyed", pipeline.Keyed(4, func(v int) int { return v })},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			store := newMemStore()
			b := newCkpt(store, pipeline.WithHandOverBatch(1))
			g := &got{}
			src := pipeline.Source(b, "src", &posSource{n: 10, hold: make(chan struct{})})
			opts := []pipeline.NodeOption{c.opt}
			if c.name == "unordered" {
				opts = append(opts, pipeline.Parallel(4))
			}
			work := &got{}
			mid := pipeline.Map(b, "work", src, func(ctx context.Context, v int) (int, error) {
				if v == 3 {
					<-ctx.Done()
					return 0, ctx.Err()
				}
				work.add(v)
				return v, nil
			}, opts...)
			pipeline.Sink(b, "sink", mid, node.SinkFunc[int](func(_ context.Context, v int) error {
				if v < 3 {
					g.add(v)
				}
				return nil
			}))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err := cancelAfter(t, cancel, runAsync(ctx, build(t, b)), func() bool { return work.count() >= 7 && g.count() == 3 }, func() string {
				return fmt.Sprintf("work %v, sink %v", work.values(), g.values())
			})
			require.Error(t, err)
			// 0, 1, 2 settled; 3 never did, and 4..9 wait behind it.
			assert.Equal(t, "src=3", store.last())
			for _, s := range store.saved() {
				assert.LessOrEqual(t, s, "src=3")
			}
		})
	}
}

// A run that fails saves the last position settled before the item that
// failed it.
func TestCheckpointRunFailsSavesLastSettled(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	b := newCkpt(store)
	g := &got{}
	src := pipeline.Source(b, "src", &posSource{n: 10, hold: make(chan struct{})})
	mid := pipeline.Map(b, "check", src, func(ctx context.Context, v int) (int, error) {
		if v == 2 {
			return 0, resilience.MarkPermanent(errors.New("bad"))
		}
		return v, nil
	}, pipeline.Parallel(2))
	pipeline.Sink(b, "sink", mid, node.SinkFunc[int](func(_ context.Context, v int) error { g.add(v); return nil }))
	_, err := build(t, b).Run(context.Background())
	require.Error(t, err)
	assert.ErrorContains(t, err, "bad")
	// Items 0 and 1 may or may not have settled before the run stopped;
	// never past 2.
	if s := store.saved(); len(s) > 0 {
		assert.Len(t, s, 1)
		assert.LessOrEqual(t, s[0], "src=2")
		assert.GreaterOrEqual(t, s[0], "src=1")
	}
}

// A failed item holds the position back for the rest of the run, though
// later items settle.
func TestCheckpointFailedItemStopsPosition(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	b := newCkpt(store)
	g := &got{}
	src := pipeline.Source(b, "src", &posSource{n: 6, hold: make(chan struct{})})
	pipeline.Sink(b, "sink", src, blockOn(g, 1), pipeline.Parallel(3), pipeline.Unordered())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := cancelAfter(t, cancel, runAsync(ctx, build(t, b)), func() bool { return g.count() == 5 })
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []string{"src=1"}, store.saved())
}

// A FlatMap's parts hold their item's position until every part settled;
// an item made into no parts settles at once.
func TestCheckpointFlatMapParts(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			store := newMemStore()
			b := newCkpt(store, m.opts...)
			g := &got{}
			src := pipeline.Source(b, "src", &posSource{n: 6, hold: make(chan struct{})})
			// i makes i%3 parts: 0 → none, 1 → one, 2 → two, ...; the
			// parts are 10*i + k.
			parts := pipeline.FlatMap(b, "split", src, func(_ context.Context, v int) ([]int, error) {
				out := make([]int, 0, v%3)
				for k := range v % 3 {
					out = append(out, 10*v+k)
				}
				return out, nil
			})
			// The second part of item 5 never settles.
			pipeline.Sink(b, "sink", parts, blockOn(g, 51), pipeline.Parallel(2), pipeline.Unordered())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// Parts: 1→10; 2→20,21; 4→40; 5→50,(51). Five written.
			err := cancelAfter(t, cancel, runAsync(ctx, build(t, b)), func() bool { return g.count() == 5 })
			require.Error(t, err)
			assert.Equal(t, "src=5", store.last())
		})
	}
}

// A batch holds its items' positions until it settles; an item of a batch
// not yet full holds its position back.
func TestCheckpointBatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n, want int
	}{{5, 3}, {6, 6}} {
		t.Run(strconv.Itoa(c.n), func(t *testing.T) {
			t.Parallel()
			store := newMemStore()
			b := newCkpt(store)
			g := &got{}
			src := pipeline.Source(b, "src", &posSource{n: c.n, hold: make(chan struct{})})
			batches := pipeline.Batch(b, "batch", src, 3, 0)
			pipeline.Sink(b, "sink", batches, node.SinkFunc[[]int](func(_ context.Context, v []int) error { g.add(v...); return nil }))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err := cancelAfter(t, cancel, runAsync(ctx, build(t, b)), func() bool { return g.count() == c.want })
			require.Error(t, err)
			assert.Equal(t, "src="+strconv.Itoa(c.want), store.last())
		})
	}
}

// An item routed to a branch that has not settled it holds the position,
// though the other branch went on.
func TestCheckpointRoute(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	b := newCkpt(store)
	even, odd := &got{}, &got{}
	src := pipeline.Source(b, "src", &posSource{n: 8, hold: make(chan struct{})})
	branches := pipeline.Route(b, "route", src, 2, func(v int) int { return v % 2 })
	pipeline.Sink(b, "even", branches[0], node.SinkFunc[int](func(_ context.Context, v int) error { even.add(v); return nil }))
	pipeline.Sink(b, "odd", branches[1], blockOn(odd, 3))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := cancelAfter(t, cancel, runAsync(ctx, build(t, b)), func() bool { return even.count() == 4 && odd.count() == 1 })
	require.Error(t, err)
	assert.Equal(t, "src=3", store.last())
}

// An open Aggregate window holds back the positions of its items.
func TestCheckpointAggregateWindowHoldsBack(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	b := newCkpt(store)
	g := &got{}
	src := pipeline.Source(b, "src", &posSource{n: 5, hold: make(chan struct{})})
	wins := pipeline.Aggregate(b, "sum", src, func(int) int { return 0 }, pipeline.CountWindow(3),
		func() int { return 0 }, func(a, v int) int { return a + v })
	pipeline.Sink(b, "sink", wins, node.SinkFunc[pipeline.Window[int, int]](func(_ context.Context, w pipeline.Window[int, int]) error {
		g.add(w.Value)
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := cancelAfter(t, cancel, runAsync(ctx, build(t, b)), func() bool { return g.count() == 1 })
	require.Error(t, err)
	// The window of 0, 1, 2 settled; 3 and 4 are in the open one.
	assert.Equal(t, []string{"src=3"}, store.saved())
}

// slowLetters is a dead-letter sink that holds each write until release
// is closed (or the call's context ends), then fails it with err.
type slowLetters struct {
	release chan struct{}
	err     error
	mu      sync.Mutex
	envs    []deadletter.Envelope
	calls   int
}

func (s *slowLetters) Write(ctx context.Context, env deadletter.Envelope) error {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	if s.release != nil {
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.err != nil {
		return s.err
	}
	s.mu.Lock()
	s.envs = append(s.envs, env)
	s.mu.Unlock()
	return nil
}

func (s *slowLetters) written() []deadletter.Envelope {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]deadletter.Envelope(nil), s.envs...)
}

func (s *slowLetters) called() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// failAt returns a Map that fails v permanently.
func failAt(v int) func(context.Context, int) (int, error) {
	return func(_ context.Context, x int) (int, error) {
		if x == v {
			return 0, resilience.MarkPermanent(fmt.Errorf("bad %d", x))
		}
		return x, nil
	}
}

// A dead-lettered item settles once the sink confirmed the write: a
// write that takes long holds the position, one that fails fails the run
// with the position before it.
func TestCheckpointDeadLetterSettlesAfterWrite(t *testing.T) {
	t.Parallel()
	dlOpts := func(dl deadletter.Sink) []pipeline.Option {
		return []pipeline.Option{pipeline.WithDeadLetter(dl), pipeline.WithDeadLetterRetry(0, resilience.Backoff{}),
			pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter })}
	}
	t.Run("confirmed", func(t *testing.T) {
		t.Parallel()
		store := newMemStore()
		dl := &slowLetters{}
		b := newCkpt(store, dlOpts(dl)...)
		mid := pipeline.Map(b, "check", pipeline.Source(b, "src", &posSource{n: 4}), failAt(1))
		pipeline.Sink(b, "sink", mid, node.SinkFunc[int](func(context.Context, int) error { return nil }))
		_, err := build(t, b).Run(context.Background())
		require.NoError(t, err)
		assert.Equal(t, []string{"src=4"}, store.saved())
		envs := dl.written()
		require.Len(t, envs, 1)
		assert.Equal(t, "src", envs[0].Source)
		assert.Equal(t, []byte("2"), envs[0].Position)
	})
	t.Run("slow", func(t *testing.T) {
		t.Parallel()
		store := newMemStore()
		dl := &slowLetters{release: make(chan struct{})}
		b := newCkpt(store, append(dlOpts(dl), pipeline.WithHandOverBatch(1))...)
		g := &got{}
		mid := pipeline.Map(b, "check", pipeline.Source(b, "src", &posSource{n: 4, hold: make(chan struct{})}), failAt(1), pipeline.Parallel(2), pipeline.Unordered())
		pipeline.Sink(b, "sink", mid, node.SinkFunc[int](func(_ context.Context, v int) error { g.add(v); return nil }))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		err := cancelAfter(t, cancel, runAsync(ctx, build(t, b)), func() bool { return g.count() == 3 && dl.called() == 1 }, func() string {
			return fmt.Sprintf("sink %d, dead-letter writes %d", g.count(), dl.called())
		})
		require.Error(t, err)
		assert.Equal(t, []string{"src=1"}, store.saved())
	})
	t.Run("failing", func(t *testing.T) {
		t.Parallel()
		store := newMemStore()
		dl := &slowLetters{err: errors.New("dlq down")}
		b := newCkpt(store, dlOpts(dl)...)
		mid := pipeline.Map(b, "check", pipeline.Source(b, "src", &posSource{n: 4, hold: make(chan struct{})}), failAt(1))
		pipeline.Sink(b, "sink", mid, node.SinkFunc[int](func(context.Context, int) error { return nil }))
		_, err := build(t, b).Run(context.Background())
		require.Error(t, err)
		assert.ErrorContains(t, err, "dlq down")
		for _, s := range store.saved() {
			assert.Equal(t, "src=1", s)
		}
	})
}

// Without checkpoints, a dead letter still names the source and position
// of the item it derives from; a batch of several items names none.
func TestEmitAtDeadLetterPositionWithoutCheckpoint(t *testing.T) {
	t.Parallel()
	dl := &slowLetters{}
	b := pipeline.New("ck", pipeline.WithDeadLetter(dl), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.OnItemFailure = resilience.DeadLetter
	}))
	src := pipeline.Source(b, "src", &posSource{n: 6})
	parts := pipeline.FlatMap(b, "split", src, func(_ context.Context, v int) ([]int, error) { return []int{v}, nil })
	one := pipeline.Map(b, "one", parts, failAt(2))
	batches := pipeline.Batch(b, "batch", one, 2, 0)
	two := pipeline.Map(b, "two", batches, func(_ context.Context, v []int) ([]int, error) {
		if slices.Contains(v, 4) {
			return nil, resilience.MarkPermanent(errors.New("bad batch"))
		}
		return v, nil
	})
	pipeline.Sink(b, "sink", two, node.SinkFunc[[]int](func(context.Context, []int) error { return nil }))
	_, err := build(t, b).Run(context.Background())
	require.NoError(t, err)
	envs := dl.written()
	require.Len(t, envs, 2)
	byNode := map[string]deadletter.Envelope{}
	for _, e := range envs {
		byNode[e.OriginNode] = e
	}
	assert.Equal(t, "src", byNode["one"].Source)
	assert.Equal(t, []byte("3"), byNode["one"].Position)
	assert.Equal(t, "", byNode["two"].Source)
	assert.Nil(t, byNode["two"].Position)
}

// A drain lets the items in flight settle and saves the last position.
func TestCheckpointDrain(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	b := newCkpt(store)
	g := &got{}
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", &posSource{n: 7, hold: make(chan struct{})}), node.SinkFunc[int](func(_ context.Context, v int) error { g.add(v); return nil }))
	p := build(t, b)
	done := runAsync(context.Background(), p)
	waitFor(t, func() bool { return g.count() == 7 })
	require.True(t, p.Drain())
	require.NoError(t, <-done)
	assert.Equal(t, []string{"src=7"}, store.saved())
}

// Positions are saved at most every interval on the pipeline's clock, and
// only when they moved.
func TestCheckpointSavesAtMostEveryInterval(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	clock := clockwork.NewFakeClock()
	b := pipeline.New("ck", pipeline.WithCheckpoint(store, time.Minute), pipeline.WithClock(clock))
	step := make(chan int)
	g := &got{}
	src := node.SourceFunc[int](func(ctx context.Context, emit node.Emitter[int]) error {
		for n := range step {
			if err := emit.EmitAt(ctx, n, []byte(strconv.Itoa(n+1))); err != nil {
				return err
			}
		}
		return nil
	})
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), node.SinkFunc[int](func(_ context.Context, v int) error { g.add(v); return nil }))
	done := runAsync(context.Background(), build(t, b))

	step <- 0
	waitFor(t, func() bool { return g.count() == 1 })
	clock.Advance(59 * time.Second)
	// Not a minute yet: nothing saved, however long we look.
	assert.Empty(t, store.saved())
	// The tick saves the position once it settled.
	clock.Advance(time.Second)
	waitFor(t, func() bool {
		if len(store.saved()) == 1 {
			return true
		}
		// The sink wrote the item a moment before it settled: a tick that
		// came in between saved nothing, and the next one saves it.
		clock.Advance(time.Minute)
		return false
	})
	assert.Equal(t, []string{"src=1"}, store.saved())

	step <- 1
	step <- 2
	waitFor(t, func() bool { return g.count() == 3 })
	ticks := 1
	waitFor(t, func() bool {
		clock.Advance(time.Minute)
		ticks++
		return len(store.saved()) == 2
	})
	assert.Equal(t, "src=3", store.last())
	// Ticks with nothing new save nothing.
	for range 3 {
		clock.Advance(time.Minute)
		ticks++
	}
	close(step)
	require.NoError(t, <-done)
	assert.Equal(t, []string{"src=1", "src=3"}, store.saved())
	assert.LessOrEqual(t, len(store.saved()), ticks+1)
}

// Every run resumes a Resumable source from the position saved for it;
// without checkpoints, from the start.
func TestCheckpointResume(t *testing.T) {
	t.Parallel()
	t.Run("checkpoint", func(t *testing.T) {
		t.Parallel()
		store := newMemStore()
		store.pos["ck/src"] = []byte("4")
		src := &posSource{n: 6}
		b := newCkpt(store)
		g := &got{}
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), node.SinkFunc[int](func(_ context.Context, v int) error { g.add(v); return nil }))
		p := build(t, b)
		_, err := p.Run(context.Background())
		require.NoError(t, err)
		assert.Equal(t, []int{4, 5}, g.values())
		assert.Equal(t, []string{"src=6"}, store.saved())
		// The next run starts at the end: nothing new, nothing saved.
		_, err = p.Run(context.Background())
		require.NoError(t, err)
		assert.Equal(t, []string{"4", "6"}, src.resumes())
		assert.Equal(t, []string{"src=6"}, store.saved())
	})
	t.Run("none", func(t *testing.T) {
		t.Parallel()
		src := &posSource{n: 2}
		b := pipeline.New("ck")
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), node.SinkFunc[int](func(context.Context, int) error { return nil }))
		_, err := build(t, b).Run(context.Background())
		require.NoError(t, err)
		assert.Equal(t, []string{"nil"}, src.resumes())
	})
	t.Run("wrapped", func(t *testing.T) {
		t.Parallel()
		store := newMemStore()
		store.pos["ck/src"] = []byte("1")
		src := &posSource{n: 2}
		b := newCkpt(store)
		pipeline.Sink(b, "sink", pipeline.Source[int](b, "src", wrapped{src}), node.SinkFunc[int](func(context.Context, int) error { return nil }))
		_, err := build(t, b).Run(context.Background())
		require.NoError(t, err)
		assert.Equal(t, []string{"1"}, src.resumes())
	})
}

// wrapped wraps a source (node.Wrapper) without a Resume of its own.
type wrapped struct{ s *posSource }

func (w wrapped) Run(ctx context.Context, emit node.Emitter[int]) error { return w.s.Run(ctx, emit) }
func (w wrapped) Unwrap() any                                           { return w.s }

// A Load or Resume error fails the run before any node starts, naming the
// source.
func TestCheckpointResumeErrors(t *testing.T) {
	t.Parallel()
	t.Run("load", func(t *testing.T) {
		t.Parallel()
		store := newMemStore()
		store.loadErr = errors.New("store down")
		src := &posSource{n: 2}
		b := newCkpt(store)
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), node.SinkFunc[int](func(context.Context, int) error { return nil }))
		_, err := build(t, b).Run(context.Background())
		require.Error(t, err)
		assert.EqualError(t, err, `pipeline: node "src": pipeline: checkpoint of source "src": Load: store down`)
		var ne *pipeline.NodeError
		require.ErrorAs(t, err, &ne)
		assert.Equal(t, "src", ne.Node)
		assert.Empty(t, src.resumes())
		assert.Equal(t, 0, src.runs)
	})
	t.Run("resume", func(t *testing.T) {
		t.Parallel()
		src := &posSource{n: 2, resumeErr: errors.New("file gone")}
		b := pipeline.New("ck")
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), node.SinkFunc[int](func(context.Context, int) error { return nil }))
		_, err := build(t, b).Run(context.Background())
		require.Error(t, err)
		assert.ErrorContains(t, err, `pipeline: source "src": Resume: file gone`)
		assert.Equal(t, 0, src.runs)
	})
}

// A final save that fails makes Run fail, naming the source.
func TestCheckpointFinalSaveError(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	store.saveErr = errors.New("disk full")
	b := newCkpt(store)
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", &posSource{n: 3}), node.SinkFunc[int](func(context.Context, int) error { return nil }))
	_, err := build(t, b).Run(context.Background())
	require.Error(t, err)
	assert.EqualError(t, err, `pipeline: checkpoint of source "src": disk full`)
}

// Items emitted with Emit take no part in the ledger.
func TestCheckpointIgnoresPlainEmit(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	b := newCkpt(store)
	src := node.SourceFunc[int](func(ctx context.Context, emit node.Emitter[int]) error {
		if err := emit.EmitAt(ctx, 0, []byte("a")); err != nil {
			return err
		}
		if err := emit.Emit(ctx, 1); err != nil {
			return err
		}
		return emit.EmitAt(ctx, 2, []byte("c"))
	})
	g := &got{}
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), blockOn(g, 1), pipeline.Parallel(2), pipeline.Unordered())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := cancelAfter(t, cancel, runAsync(ctx, build(t, b)), func() bool { return g.count() == 2 })
	require.Error(t, err)
	// Item 1 never settled, but it has no position: c is committed.
	assert.Equal(t, []string{"src=c"}, store.saved())
}

// An item waiting in a Join's window holds its position, matched or not,
// until its window ends.
func TestCheckpointJoinHoldsBack(t *testing.T) {
	t.Parallel()
	for _, expire := range []bool{false, true} {
		t.Run(strconv.FormatBool(expire), func(t *testing.T) {
			t.Parallel()
			store := newMemStore()
			clock := clockwork.NewFakeClock()
			b := pipeline.New("ck", pipeline.WithCheckpoint(store, time.Hour), pipeline.WithClock(clock))
			right := node.SourceFunc[int](func(ctx context.Context, emit node.Emitter[int]) error {
				if err := emit.EmitAt(ctx, 1, []byte("r1")); err != nil {
					return err
				}
				<-ctx.Done()
				return context.Cause(ctx)
			})
			g := &got{}
			l := pipeline.Source(b, "l", &posSource{n: 3, hold: make(chan struct{})})
			r := pipeline.Source(b, "r", right)
			pairs := pipeline.Join(b, "join", l, r, func(v int) int { return v }, func(v int) int { return v }, time.Hour,
				func(a, b int) int { return a + b })
			pipeline.Sink(b, "sink", pairs, node.SinkFunc[int](func(_ context.Context, v int) error { g.add(v); return nil }))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := runAsync(ctx, build(t, b))
			if !expire {
				require.Error(t, cancelAfter(t, cancel, done, func() bool { return g.count() == 1 }))
				// Every item still waits in the window: nothing commits,
				// though the pair (1, 1) was written.
				assert.Empty(t, store.saved())
				return
			}
			waitFor(t, func() bool { return g.count() == 1 })
			// The windows end an hour on: the unmatched items are
			// filtered, the matched ones let go, and both sources commit.
			waitFor(t, func() bool {
				clock.Advance(time.Hour)
				s := store.saved()
				return slices.Contains(s, "l=3") && slices.Contains(s, "r=r1")
			})
			cancel()
			require.Error(t, <-done)
		})
	}
}

// A MapBatch holds its items' positions until their slice was called and
// each item settled; an item the call dead-lettered settles as well.
func TestCheckpointMapBatch(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	dl := &slowLetters{}
	b := newCkpt(store, pipeline.WithDeadLetter(dl),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	g := &got{}
	src := pipeline.Source(b, "src", &posSource{n: 5, hold: make(chan struct{})})
	out := pipeline.MapBatch(b, "call", src, 3, 0, func(_ context.Context, in []int) ([]int, []error) {
		errs := make([]error, len(in))
		for i, v := range in {
			if v == 1 {
				errs[i] = resilience.MarkPermanent(errors.New("bad 1"))
			}
		}
		return in, errs
	})
	pipeline.Sink(b, "sink", out, node.SinkFunc[int](func(_ context.Context, v int) error { g.add(v); return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The slice 0, 1, 2 was called; 3 and 4 wait for a third item.
	err := cancelAfter(t, cancel, runAsync(ctx, build(t, b)), func() bool { return g.count() == 2 && len(dl.written()) == 1 })
	require.Error(t, err)
	assert.Equal(t, []string{"src=3"}, store.saved())
	assert.Equal(t, []byte("2"), dl.written()[0].Position)
}

// An item whose retry waits holds the position until the retry settles
// it.
func TestCheckpointRetryHoldsBack(t *testing.T) {
	t.Parallel()
	for _, m := range modes[1:2] { // per item: see TestCheckpointOutOfOrder
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			store := newMemStore()
			clock := clockwork.NewFakeClock()
			b := pipeline.New("ck", pipeline.WithCheckpoint(store, time.Hour), pipeline.WithClock(clock), pipeline.WithHandOverBatch(1),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 1
					o.ItemRetry.Backoff = resilience.Constant(time.Minute)
				}))
			var mu sync.Mutex
			calls := map[int]int{}
			g := &got{}
			hold := make(chan struct{})
			src := pipeline.Source(b, "src", &posSource{n: 4, hold: hold})
			out := pipeline.Map(b, "work", src, func(_ context.Context, v int) (int, error) {
				mu.Lock()
				calls[v]++
				n := calls[v]
				mu.Unlock()
				if v == 1 && n == 1 {
					return 0, errors.New("busy")
				}
				return v, nil
			})
			pipeline.Sink(b, "sink", out, node.SinkFunc[int](func(_ context.Context, v int) error { g.add(v); return nil }))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := runAsync(ctx, build(t, b))
			// Item 1 waits a minute for its retry: the position stays
			// before it.
			require.Error(t, cancelAfter(t, cancel, done, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return g.count() == 1 && calls[1] == 1
			}))
			assert.Equal(t, []string{"src=1"}, store.saved())
		})
	}
}

// A periodic Save that fails is tried again at a later tick; the run does
// not fail for it.
func TestCheckpointPeriodicSaveErrorRetried(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	store.failFirst = 1
	clock := clockwork.NewFakeClock()
	b := pipeline.New("ck", pipeline.WithCheckpoint(store, time.Minute), pipeline.WithClock(clock))
	hold := make(chan struct{})
	g := &got{}
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", &posSource{n: 2, hold: hold}), node.SinkFunc[int](func(_ context.Context, v int) error { g.add(v); return nil }))
	done := runAsync(context.Background(), build(t, b))
	waitFor(t, func() bool { return g.count() == 2 })
	// The sink took both items; the second may settle after a tick, which
	// then saves the first's position: tick until the second's is saved.
	waitFor(t, func() bool {
		clock.Advance(time.Minute)
		saved := store.saved()
		return len(saved) > 0 && saved[len(saved)-1] == "src=2"
	})
	saved := store.saved()
	store.mu.Lock()
	attempts := store.attempts
	store.mu.Unlock()
	assert.Equal(t, len(saved)+1, attempts, "the first Save failed, and was tried again at the next tick")
	close(hold)
	require.NoError(t, <-done)
	// Nothing moved since: no final Save.
	assert.Equal(t, saved, store.saved())
}
