package pipeline_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// blockingStore is a checkpoint.Store whose Save waits until its context
// ends once block is set (or until the test ends); entered is closed at
// the first such wait.
type blockingStore struct {
	*memStore
	block   bool
	once    sync.Once
	entered chan struct{}
	release chan struct{}
	freed   sync.Once
}

// free lets every blocked Save return.
func (s *blockingStore) free() { s.freed.Do(func() { close(s.release) }) }

func newBlockingStore(t *testing.T) *blockingStore {
	s := &blockingStore{memStore: newMemStore(), entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(s.free)
	return s
}

func (s *blockingStore) Save(ctx context.Context, pipe, src string, pos []byte) error {
	s.mu.Lock()
	block := s.block
	s.mu.Unlock()
	if block {
		s.once.Do(func() { close(s.entered) })
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.release:
			return errors.New("released at the end of the test")
		}
	}
	return s.memStore.Save(ctx, pipe, src, pos)
}

// endsWithin reports whether done delivers within a real-clock bound,
// advancing clock (when not nil) meanwhile so that every timeout on the
// pipeline's clock can fire.
func endsWithin(done <-chan error, clock *clockwork.FakeClock) (error, bool) {
	deadline := time.After(3 * time.Second)
	for {
		if clock != nil {
			clock.Advance(time.Minute)
		}
		select {
		case err := <-done:
			return err, true
		case <-deadline:
			return nil, false
		case <-time.After(time.Millisecond):
		}
	}
}

// bufferedSink is a node.Flusher sink: Write only buffers, Flush makes
// what is buffered durable.
type bufferedSink struct {
	mu      sync.Mutex
	buf     []int
	durable []int
}

func (s *bufferedSink) Write(_ context.Context, v int) error {
	s.mu.Lock()
	s.buf = append(s.buf, v)
	s.mu.Unlock()
	return nil
}

func (s *bufferedSink) Flush(context.Context) error {
	s.mu.Lock()
	s.durable = append(s.durable, s.buf...)
	s.buf = nil
	s.mu.Unlock()
	return nil
}

func (s *bufferedSink) written() (buffered, durable int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buf), len(s.durable)
}

// A sink that buffers (node.Flusher) has not written an item until its
// Flush: a run that fails before the Flush must not save a position past
// the items still in the sink's buffer, or a rerun skips them for good.
func TestCheckpointNeverPassesItemsAFlusherSinkHasNotFlushed(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	b := newCkpt(store, pipeline.WithHandOverBatch(1))
	sink := &bufferedSink{}
	src := pipeline.Source(b, "src", &posSource{n: 5})
	out := pipeline.Map(b, "work", src, func(_ context.Context, v int) (int, error) {
		if v == 3 {
			// The sink took 0, 1 and 2 into its buffer; then 3 fails the run.
			waitFor(t, func() bool { buffered, _ := sink.written(); return buffered == 3 })
			return 0, errors.New("bad 3")
		}
		return v, nil
	})
	pipeline.Sink(b, "sink", out, sink)
	_, err := build(t, b).Run(context.Background())
	require.Error(t, err)
	_, durable := sink.written()
	saved := 0
	if last := store.last(); last != "" {
		saved, err = strconv.Atoi(last[len("src="):])
		require.NoError(t, err)
	}
	// Items 0..saved-1 are never read again: each must be durable.
	t.Logf("saves %v, durable %d", store.saved(), durable)
	assert.LessOrEqual(t, saved, durable, "saved %q, but the sink flushed %d items", store.last(), durable)
}

// A periodic Save that is still running when the input ends must not hold
// Run forever: the run's end waits for the saver, whose context only the
// caller's cancellation ends; WithDrainTimeout bounds the final Save but
// not this one.
func TestCheckpointRunEndsWhileAPeriodicSaveBlocks(t *testing.T) {
	t.Parallel()
	store := newBlockingStore(t)
	store.block = true
	clock := clockwork.NewFakeClock()
	b := pipeline.New("ck", pipeline.WithCheckpoint(store, time.Minute), pipeline.WithClock(clock),
		pipeline.WithDrainTimeout(time.Minute))
	hold := make(chan struct{})
	g := &got{}
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", &posSource{n: 2, hold: hold}),
		node.SinkFunc[int](func(_ context.Context, v int) error { g.add(v); return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runAsync(ctx, build(t, b))
	waitFor(t, func() bool { return g.count() == 2 })
	waitFor(t, func() bool {
		clock.Advance(time.Minute)
		select {
		case <-store.entered:
			return true
		default:
			return false
		}
	})
	close(hold) // the input ends while the periodic Save waits
	_, ended := endsWithin(done, clock)
	store.mu.Lock()
	store.block = false
	store.mu.Unlock()
	cancel() // let the hung Save go, so that no goroutine outlives the test
	if !ended {
		<-done
	}
	assert.True(t, ended, "Run did not return while a periodic Save blocked, the drain timeout long past")
}

// Cancelling the run while its final Save blocks must end Run: the
// caller has nothing else to stop a store that hangs with.
func TestCheckpointCancelEndsABlockedFinalSave(t *testing.T) {
	t.Parallel()
	store := newBlockingStore(t)
	b := pipeline.New("ck", pipeline.WithCheckpoint(store, time.Hour), pipeline.WithClock(clockwork.NewFakeClock()))
	hold := make(chan struct{})
	g := &got{}
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", &posSource{n: 2, hold: hold}),
		node.SinkFunc[int](func(_ context.Context, v int) error { g.add(v); return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runAsync(ctx, build(t, b))
	waitFor(t, func() bool { return g.count() == 2 })
	store.mu.Lock()
	store.block = true
	store.mu.Unlock()
	close(hold) // the input ends: the final Save blocks
	<-store.entered
	cancel()
	_, ended := endsWithin(done, nil)
	assert.True(t, ended, "Run did not return after the caller cancelled during the final Save")
	if !ended {
		store.free()
		<-done
	}
}
