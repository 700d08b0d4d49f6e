package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// txSink buffers in a transaction: Open begins it, Write adds to it, Flush
// commits it, and Close rolls back what was not committed. Its Write
// fails once, on item failOn; flushErr, when set, fails every Flush but
// the run's last.
type txSink struct {
	failOn   int
	flushErr error

	mu       sync.Mutex
	buf      []int
	durable  []int
	failed   bool
	opens    int
	flushes  int
	rollback []int // what Close threw away
}

func (s *txSink) Open(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opens++
	s.buf = nil
	return nil
}

func (s *txSink) Write(_ context.Context, v int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v == s.failOn && !s.failed {
		s.failed = true
		return errors.New("connection reset")
	}
	s.buf = append(s.buf, v)
	return nil
}

func (s *txSink) Flush(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushes++
	if s.flushErr != nil {
		return s.flushErr
	}
	s.durable = append(s.durable, s.buf...)
	s.buf = nil
	return nil
}

func (s *txSink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rollback = append(s.rollback, s.buf...)
	s.buf = nil
	return nil
}

func (s *txSink) state() (durable, rollback []int, opens, flushes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.durable...), append([]int(nil), s.rollback...), s.opens, s.flushes
}

func restartingSink(o *resilience.Options) {
	o.ItemRetry.MaxRetries = 0
	o.NodeRetry.MaxRetries = 0
	o.NodeRestart.MaxRestarts = 3
	o.NodeRestart.Backoff = resilience.Constant(time.Millisecond)
}

// A sink that buffers (node.Flusher) and has an Open is flushed before a
// node restart closes it to open it again: what it took before the
// failure is kept, not rolled back, and the position saved at the end
// passes only items the sink flushed. Each size: the failure on the first
// item (nothing to flush), in the middle, on the last, and one item alone.
func TestFlusherSinkIsFlushedBeforeARestartClosesIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ n, failOn int }{{6, 0}, {6, 3}, {6, 5}, {1, 0}} {
		t.Run(fmt.Sprintf("%d items, failing on %d", tc.n, tc.failOn), func(t *testing.T) {
			t.Parallel()
			store := newMemStore()
			clock := clockwork.NewFakeClock()
			b := pipeline.New("ck", pipeline.WithCheckpoint(store, time.Hour), pipeline.WithClock(clock),
				pipeline.WithHandOverBatch(1), pipeline.WithResilience(restartingSink))
			sink := &txSink{failOn: tc.failOn}
			pipeline.Sink(b, "sink", pipeline.Source(b, "src", &posSource{n: tc.n}), sink)
			err, ended := endsWithin(runAsync(context.Background(), build(t, b)), clock)
			require.True(t, ended, "the run did not end")
			require.NoError(t, err)
			durable, rollback, opens, flushes := sink.state()
			assert.Equal(t, 2, opens, "opened again after the restart")
			assert.Equal(t, 2, flushes, "flushed before the restart and at the end")
			assert.Empty(t, rollback, "nothing the sink took was rolled back")
			want := make([]int, tc.n)
			for i := range want {
				want[i] = i
			}
			assert.Equal(t, want, durable, "every item committed once, in order")
			assert.Equal(t, "src="+strconv.Itoa(tc.n), store.last())
		})
	}
}

// A Flush before a restart that fails fails the run, saying so: the items
// the sink took may be lost, so no position passes them, and the item
// whose failure asked for the restart did not end the run: it ends
// Failed, not Rejected.
func TestFlusherSinkWhoseFlushBeforeARestartFailsFailsTheRun(t *testing.T) {
	t.Parallel()
	t.Run("checkpoint", func(t *testing.T) {
		t.Parallel()
		store := newMemStore()
		clock := clockwork.NewFakeClock()
		b := pipeline.New("ck", pipeline.WithCheckpoint(store, time.Hour), pipeline.WithClock(clock),
			pipeline.WithHandOverBatch(1), pipeline.WithResilience(restartingSink))
		sink := &txSink{failOn: 3, flushErr: errors.New("commit refused")}
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", &posSource{n: 6}), sink)
		err, ended := endsWithin(runAsync(context.Background(), build(t, b)), clock)
		require.True(t, ended, "the run did not end")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "flush before the restart: commit refused")
		assert.Contains(t, err.Error(), "connection reset")
		assert.Contains(t, err.Error(), `"sink"`)
		assert.Empty(t, store.saved(), "no position passes items the sink did not commit")
		_, _, opens, _ := sink.state()
		assert.Equal(t, 1, opens, "not opened again")
	})
	t.Run("tracked", func(t *testing.T) {
		t.Parallel()
		clock := clockwork.NewFakeClock()
		b := pipeline.New("tr", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithResilience(restartingSink))
		src := pipelinetest.NewTrackedSource(0, 1, 2, 3, 4, 5)
		sink := &txSink{failOn: 3, flushErr: errors.New("commit refused")}
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), sink)
		err, ended := endsWithin(runAsync(context.Background(), build(t, b)), clock)
		require.True(t, ended, "the run did not end")
		require.Error(t, err)
		outcomes := src.Outcomes()
		require.Len(t, outcomes, 6, "every item settled")
		assert.Equal(t, []node.Outcome{node.Failed}, outcomes[3], "the item that asked for the restart is not blamed for the flush")
		for i, o := range outcomes {
			require.Len(t, o, 1, "item %d settled once", i)
			assert.NotEqual(t, node.Rejected, o[0], "item %d", i)
		}
	})
}

// openFlakySink is a buffering sink whose Open fails once on reopen after a
// restart, and whose Flush on a sink that is not open fails (a nil tx).
type openFlakySink struct {
	mu          sync.Mutex
	open        bool
	opens       int
	failedWrite bool
	buf, dur    []int
	flushClosed int
}

func (s *openFlakySink) Open(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opens++
	if s.opens == 2 {
		return errors.New("dial: connection refused") // transient, retried by the restart loop
	}
	s.open = true
	return nil
}

func (s *openFlakySink) Write(_ context.Context, v int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v == 3 && !s.failedWrite {
		s.failedWrite = true
		return errors.New("connection reset")
	}
	s.buf = append(s.buf, v)
	return nil
}

func (s *openFlakySink) Flush(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.open {
		s.flushClosed++
		return errors.New("flush: no open transaction")
	}
	s.dur = append(s.dur, s.buf...)
	s.buf = nil
	return nil
}

func (s *openFlakySink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open = false
	s.buf = nil
	return nil
}

// A restart whose Open fails once is retried by the restart loop, which
// comes back to the flush step with the sink closed: a closed sink is not
// flushed (its Flush would fail: no transaction), and the run goes on.
func TestFlusherSinkWhoseReopenFailsIsNotFlushedClosed(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	clock := clockwork.NewFakeClock()
	b := pipeline.New("ck", pipeline.WithCheckpoint(store, time.Hour), pipeline.WithClock(clock),
		pipeline.WithHandOverBatch(1), pipeline.WithResilience(restartingSink))
	sink := &openFlakySink{}
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", &posSource{n: 6}), sink)
	err, ended := endsWithin(runAsync(context.Background(), build(t, b)), clock)
	require.True(t, ended, "the run did not end")
	require.NoError(t, err, "a failed reopen within MaxRestarts is retried")
	sink.mu.Lock()
	defer sink.mu.Unlock()
	assert.Equal(t, 0, sink.flushClosed, "Flush called on a sink that is not open")
	assert.Equal(t, 3, sink.opens)
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5}, sink.dur)
	assert.Equal(t, "src=6", store.last())
}

// Under Parallel(4), every worker has stopped before the restart's
// flush: nothing is rolled back, and every item is committed.
func TestParallelFlusherSinkRestartCommitsEveryItem(t *testing.T) {
	t.Parallel()
	for range 20 {
		store := newMemStore()
		clock := clockwork.NewFakeClock()
		b := pipeline.New("ck", pipeline.WithCheckpoint(store, time.Hour), pipeline.WithClock(clock),
			pipeline.WithHandOverBatch(1), pipeline.WithResilience(restartingSink))
		sink := &txSink{failOn: 3}
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", &posSource{n: 50}), sink, pipeline.Parallel(4))
		err, ended := endsWithin(runAsync(context.Background(), build(t, b)), clock)
		require.True(t, ended, "the run did not end")
		require.NoError(t, err)
		durable, rollback, _, _ := sink.state()
		assert.Empty(t, rollback)
		seen := map[int]int{}
		for _, v := range durable {
			seen[v]++
		}
		assert.Equal(t, 50, len(seen), "every item committed")
	}
}

// heldFlushSink is a txSink whose Flush waits for release, or for its
// context to end, which it records.
type heldFlushSink struct {
	txSink
	entered, release, cancelled chan struct{}
	once                        sync.Once
}

func (s *heldFlushSink) Flush(ctx context.Context) error {
	s.once.Do(func() { close(s.entered) })
	select {
	case <-s.release:
		return s.txSink.Flush(ctx)
	case <-ctx.Done():
		close(s.cancelled)
		return ctx.Err()
	}
}

// The Flush before a restart is a call of user code like a Write: when
// another node fails the run while it runs, it gets the failure's grace
// period instead of being cancelled at once, so that the items the sink
// took (Delivered already) are committed, not rolled back.
func TestFlushBeforeARestartGetsTheFailGrace(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	b := pipeline.New("ck", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithResilience(restartingSink))
	sink := &heldFlushSink{txSink: txSink{failOn: 4}, entered: make(chan struct{}), release: make(chan struct{}), cancelled: make(chan struct{})}
	gate := make(chan struct{})
	even, odd := pipeline.Split(b, "split", pipeline.Source(b, "src", &posSource{n: 6}), func(v int) bool { return v%2 == 0 })
	pipeline.Sink(b, "sink", even, sink)
	pipeline.ForEach(b, "bad", odd, func(ctx context.Context, v int) error {
		<-gate
		return resilience.MarkPermanent(errors.New("bad item"))
	}, pipeline.NodeResilience(func(o *resilience.Options) { o.NodeRestart.MaxRestarts = 0 }))
	done := runAsync(context.Background(), build(t, b))
	<-sink.entered // item 4 failed the sink: the restart flushes 0 and 2
	close(gate)    // and another node fails the run
	wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(wctx, 1), "the grace timer is armed")
	clock.Advance(pipeline.DefaultFailGrace - time.Nanosecond)
	select {
	case <-sink.cancelled:
		require.FailNow(t, "the flush was cancelled before the grace period ended")
	case err := <-done:
		require.FailNow(t, "the run ended before the flush", "%v", err)
	default:
	}
	close(sink.release)
	err := <-done
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bad item")
	durable, rollback, _, _ := sink.state()
	assert.Equal(t, []int{0, 2}, durable, "what the sink took is committed")
	assert.Empty(t, rollback)
}

// An item a buffering sink took is Delivered once its Write returned,
// before any Flush: a tracked source settles it then. When the Flush
// fails, or the run fails with no Flush (restarts spent), what the sink
// held is lost for such a source, as docs/concepts.md says: this test
// pins that limit, so that a change to it is seen.
func TestFlusherSinkItemsAreDeliveredBeforeTheFlush(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		res  func(*resilience.Options)
		sink *txSink
	}{
		{"the restart's flush fails", restartingSink, &txSink{failOn: 3, flushErr: errors.New("commit refused")}},
		{"restarts spent, no flush", func(o *resilience.Options) { restartingSink(o); o.NodeRestart.MaxRestarts = 0 }, &txSink{failOn: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			b := pipeline.New("tr", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithResilience(tc.res))
			src := pipelinetest.NewTrackedSource(0, 1, 2, 3, 4, 5)
			pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), tc.sink)
			err, ended := endsWithin(runAsync(context.Background(), build(t, b)), clock)
			require.True(t, ended, "the run did not end")
			require.Error(t, err)
			_, rollback, _, _ := tc.sink.state()
			require.Equal(t, []int{0, 1, 2}, rollback, "what the sink held was rolled back")
			for _, v := range rollback {
				assert.Equal(t, []node.Outcome{node.Delivered}, src.Outcomes()[v], "item %d", v)
			}
		})
	}
}

// A caller that cancels the run while the Flush before a restart runs
// gets its cancellation back from Run, not a failure of the sink: the
// Flush's context (the calls' one) may end a moment before the run's,
// and its error is the echo of the caller's cancel.
func TestCallerCancelDuringTheRestartFlushIsTheCallers(t *testing.T) {
	t.Parallel()
	for i := range 200 {
		clock := clockwork.NewFakeClock()
		b := pipeline.New("ck", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithResilience(restartingSink))
		sink := &heldFlushSink{txSink: txSink{failOn: 2}, entered: make(chan struct{}), release: make(chan struct{}), cancelled: make(chan struct{})}
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", &posSource{n: 4}), sink)
		ctx, cancel := context.WithCancel(context.Background())
		done := runAsync(ctx, build(t, b))
		<-sink.entered
		cancel()
		err, ended := endsWithin(done, nil)
		require.True(t, ended, "the run did not end")
		require.ErrorIs(t, err, context.Canceled, "iteration %d", i)
		var ne *pipeline.NodeError
		require.False(t, errors.As(err, &ne), "iteration %d: %v", i, err)
	}
}

// tookSink is a txSink that closes took once it holds n items.
type tookSink struct {
	txSink
	n    int
	took chan struct{}
	once sync.Once
}

func (s *tookSink) Write(ctx context.Context, v int) error {
	if err := s.txSink.Write(ctx, v); err != nil {
		return err
	}
	s.mu.Lock()
	held := len(s.buf)
	s.mu.Unlock()
	if held >= s.n {
		s.once.Do(func() { close(s.took) })
	}
	return nil
}

// Another node's failure ends the run with no Flush of a buffering sink
// whose input has not ended: what it held is rolled back by its Close,
// and those items were Delivered to their tracked source already, as
// docs/concepts.md says.
func TestFlusherSinkItemsAreDeliveredWhenAnotherNodeFailsTheRun(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	b := pipeline.New("tr", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithResilience(restartingSink))
	src := pipelinetest.NewTrackedSource(0, 1, 2, 3, 4, 5)
	// The input does not end: a sink whose input ended would flush at
	// its own end, before the run's failure reached it.
	open := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		if err := src.Run(ctx, out); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	sink := &tookSink{txSink: txSink{failOn: -1}, n: 3, took: make(chan struct{})}
	even, odd := pipeline.Split(b, "split", pipeline.Source(b, "src", open), func(v int) bool { return v%2 == 0 })
	pipeline.Sink(b, "sink", even, sink)
	pipeline.ForEach(b, "bad", odd, func(ctx context.Context, v int) error {
		if v != 5 {
			return nil
		}
		<-sink.took
		return resilience.MarkPermanent(errors.New("bad item"))
	}, pipeline.NodeResilience(func(o *resilience.Options) { o.NodeRestart.MaxRestarts = 0 }))
	err, ended := endsWithin(runAsync(context.Background(), build(t, b)), clock)
	require.True(t, ended, "the run did not end")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bad item")
	durable, rollback, _, flushes := sink.state()
	assert.Empty(t, durable)
	assert.Equal(t, 0, flushes, "no Flush when the run fails")
	require.Equal(t, []int{0, 2, 4}, rollback, "what the sink held was rolled back")
	for _, v := range rollback {
		assert.Equal(t, []node.Outcome{node.Delivered}, src.Outcomes()[v], "item %d", v)
	}
}
