package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// outcomeOf waits until item id of f has an outcome and returns its
// outcomes.
func outcomeOf(f *evTrackedFeed, id int) []node.Outcome {
	deadline := time.Now().Add(spinBound)
	for {
		if o := f.get()[id]; len(o) > 0 {
			return o
		}
		spun(deadline, fmt.Sprintf("item %d to end", id))
	}
}

// waitLen waits until c holds n items.
func waitLen[T any](c *pipelinetest.Collector[T], n int) {
	deadline := time.Now().Add(spinBound)
	for c.Len() < n {
		spun(deadline, fmt.Sprintf("%d items collected", n))
	}
}

// wait waits until the join took the time of n items: it read the clock
// for each before.
func (a *arrivals) wait(n int) {
	deadline := time.Now().Add(spinBound)
	for {
		a.mu.Lock()
		got := len(a.seen)
		a.mu.Unlock()
		if got >= n {
			return
		}
		spun(deadline, fmt.Sprintf("the join to take %d items", n))
	}
}

func newTrackedFeed() *evTrackedFeed {
	return &evTrackedFeed{items: make(chan ev), outcomes: map[int][]node.Outcome{}}
}

// A Join on event time whose left input brings nothing: once it was quiet
// for idle since the node started, it no longer holds the watermark, which
// follows the right input alone and lets go of a right item it passed.
// The right input, which brought an item within idle, still holds it.
// When the left input comes back, it holds the watermark again from where
// it is: an item older than it is late (to the JoinLate stream), a newer
// one joins.
func TestJoinEventTimeIdleQuietInputStopsHoldingTheWatermark(t *testing.T) {
	t.Parallel()
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	clock := clockwork.NewFakeClockAt(epoch.Add(24 * time.Hour))
	left, right := newTrackedFeed(), newTrackedFeed()
	b := pipeline.New("join", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1))
	var lateL, lateR pipeline.Stream[ev]
	arr := &arrivals{}
	joined := pipeline.Join(b, "j", pipeline.Source[ev](b, "l", left), pipeline.Source[ev](b, "r", right), evKey, evKey, time.Minute,
		func(l, r ev) string { return fmt.Sprintf("%d-%d", l.ID, r.ID) },
		pipeline.JoinEventTime(arr.at(true), arr.at(false), 0, 5*time.Second), pipeline.JoinLate(&lateL, &lateR))
	col := &pipelinetest.Collector[string]{}
	pipeline.Sink(b, "store", joined, col)
	colL, colR := &pipelinetest.Collector[ev]{}, &pipelinetest.Collector[ev]{}
	pipeline.Sink(b, "late left", lateL, colL)
	pipeline.Sink(b, "late right", lateR, colR)
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)

	right.items <- ev{ID: 100, At: at(10 * time.Minute)}
	arr.wait(1)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(3 * time.Second)
	right.items <- ev{ID: 101, At: at(12 * time.Minute)}
	arr.wait(2)
	assert.Len(t, right.get()[100], 0, "the left input brought nothing and is not idle yet: item 100 waits")
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(2 * time.Second) // the left input is idle; the right one brought 101 2 s ago
	assert.Equal(t, []node.Outcome{node.Filtered}, outcomeOf(right, 100), "the watermark 12:00 passed 100's time by within")
	assert.Len(t, right.get()[101], 0, "101 waits: the watermark is at its time")

	left.items <- ev{ID: 0, At: at(11*time.Minute + 30*time.Second)} // behind the watermark 12:00
	waitLen(colL, 1)
	left.items <- ev{ID: 1, At: at(12*time.Minute + 30*time.Second)} // joins 101
	waitLen(col, 1)
	close(left.items)
	close(right.items)
	res, err := run.Wait()
	require.NoError(t, err)
	assert.Equal(t, []string{"1-101"}, col.Items())
	assert.Equal(t, []int{0}, evIDs(colL.Items()))
	assert.Equal(t, 0, colR.Len())
	st := nodeOf(t, res, "j")
	assert.Equal(t, int64(1), st.Late)
	assert.Equal(t, int64(1), st.Filtered)
	assert.Equal(t, map[int][]node.Outcome{0: {node.Delivered}, 1: {node.Delivered}}, left.get())
	assert.Equal(t, map[int][]node.Outcome{100: {node.Filtered}, 101: {node.Delivered}}, right.get())
}

// Once both inputs of a Join on event time are idle, the items waiting are
// let go as at the end of input, and the watermark stays: a later item
// that is not late joins only the items that came after.
func TestJoinEventTimeIdleBothInputsLetGo(t *testing.T) {
	t.Parallel()
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	clock := clockwork.NewFakeClockAt(epoch.Add(24 * time.Hour))
	left, right := newTrackedFeed(), newTrackedFeed()
	dlq := deadletter.NewMemory(1)
	b := pipeline.New("join", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithDeadLetter(dlq))
	arr := &arrivals{}
	joined := pipeline.Join(b, "j", pipeline.Source[ev](b, "l", left), pipeline.Source[ev](b, "r", right), evKey, evKey, time.Minute,
		func(l, r ev) string { return fmt.Sprintf("%d-%d", l.ID, r.ID) },
		pipeline.JoinEventTime(arr.at(true), arr.at(false), time.Hour, 5*time.Second))
	col := &pipelinetest.Collector[string]{}
	pipeline.Sink(b, "store", joined, col)
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)

	left.items <- ev{ID: 0, At: at(10 * time.Hour)}
	right.items <- ev{ID: 100, At: at(10*time.Hour + 30*time.Minute)}
	arr.wait(2)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(4 * time.Second)
	assert.Len(t, left.get()[0], 0, "not idle yet")
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(time.Second)
	assert.Equal(t, []node.Outcome{node.Filtered}, outcomeOf(left, 0))
	assert.Equal(t, []node.Outcome{node.Filtered}, outcomeOf(right, 100))

	left.items <- ev{ID: 1, At: at(10*time.Hour + 30*time.Minute + 10*time.Second)} // 100 was let go
	right.items <- ev{ID: 101, At: at(10*time.Hour + 30*time.Minute + 20*time.Second)}
	waitLen(col, 1)
	close(left.items)
	close(right.items)
	res, err := run.Wait()
	require.NoError(t, err)
	assert.Equal(t, []string{"1-101"}, col.Items())
	st := nodeOf(t, res, "j")
	assert.Equal(t, int64(0), st.Late)
	assert.Equal(t, int64(2), st.Filtered)
	assert.Len(t, dlq.Envelopes(), 0)
	assert.Equal(t, map[int][]node.Outcome{0: {node.Filtered}, 1: {node.Delivered}}, left.get())
	assert.Equal(t, map[int][]node.Outcome{100: {node.Filtered}, 101: {node.Delivered}}, right.get())
}

// With one input quiet, the other's idle instant moves with each of its
// items: the idle timer that fires for the quiet input does not make the
// busy one idle, and each item moves the watermark and lets go of the one
// it passed by within; once the busy input is quiet for idle too, its
// last item is let go.
func TestJoinEventTimeIdleFollowsEachInputsLastItem(t *testing.T) {
	t.Parallel()
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	clock := clockwork.NewFakeClockAt(epoch.Add(24 * time.Hour))
	left, right := newTrackedFeed(), newTrackedFeed()
	b := pipeline.New("join", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithDeadLetter(deadletter.NewMemory(1)))
	arr := &arrivals{}
	joined := pipeline.Join(b, "j", pipeline.Source[ev](b, "l", left), pipeline.Source[ev](b, "r", right), evKey, evKey, time.Minute,
		func(l, r ev) string { return "" }, pipeline.JoinEventTime(arr.at(true), arr.at(false), 0, 5*time.Second))
	pipeline.Sink(b, "store", joined, &pipelinetest.Collector[string]{})
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)
	for i := range 4 { // at 0, 3, 6 and 9 s on the clock; 10:00, 10:02, 10:04, 10:06 in event time
		if i > 0 {
			require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
			clock.Advance(3 * time.Second)
		}
		right.items <- ev{ID: i, At: at(10*time.Minute + time.Duration(2*i)*time.Minute)}
		arr.wait(i + 1)
		if i >= 2 {
			// The left input went idle at 5 s: the watermark is this item's time.
			assert.Equal(t, []node.Outcome{node.Filtered}, outcomeOf(right, i-1), "item %d, passed by item %d", i-1, i)
		}
	}
	assert.Equal(t, []node.Outcome{node.Filtered}, outcomeOf(right, 0))
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(4 * time.Second) // 13 s: the right input brought its last item 4 s ago
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	assert.Len(t, right.get()[3], 0, "the right input is not idle yet")
	clock.Advance(time.Second)
	assert.Equal(t, []node.Outcome{node.Filtered}, outcomeOf(right, 3), "both inputs idle")
	close(left.items)
	close(right.items)
	res, err := run.Wait()
	require.NoError(t, err)
	assert.Equal(t, int64(4), nodeOf(t, res, "j").Filtered)
	assert.Equal(t, int64(0), nodeOf(t, res, "j").Late)
}

// gatedSink holds the first item it gets until gate closes or the run is
// cancelled, and collects what it wrote.
type gatedSink struct {
	gate, entered chan struct{}
	once          sync.Once
	mu            sync.Mutex
	got           []int
}

func (g *gatedSink) write(ctx context.Context, e ev) error {
	g.once.Do(func() { close(g.entered) })
	select {
	case <-g.gate:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	g.mu.Lock()
	g.got = append(g.got, e.ID)
	g.mu.Unlock()
	return nil
}

func (g *gatedSink) ids() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(slices.Values(g.got))
}

// Cancelled or drained while late items of a Join are on their way to the
// JoinLate streams (one held by a slow sink, others queued behind it):
// every tracked item ends exactly once. Drained, every late item reaches
// its stream and ends Delivered; cancelled, a late item ends Delivered
// exactly when its sink wrote it, else Failed.
func TestJoinLateCancelAndDrainWithLateItemsPending(t *testing.T) {
	t.Parallel()
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	for _, drain := range []bool{false, true} {
		t.Run(map[bool]string{false: "cancel", true: "drain"}[drain], func(t *testing.T) {
			t.Parallel()
			left, right := newTrackedFeed(), newTrackedFeed()
			b := pipeline.New("join", pipeline.WithClock(clockwork.NewFakeClock()), pipeline.WithHandOverBatch(1))
			var lateL, lateR pipeline.Stream[ev]
			joined := pipeline.Join(b, "j", pipeline.Source[ev](b, "l", left), pipeline.Source[ev](b, "r", right), evKey, evKey, time.Minute,
				func(l, r ev) string { return fmt.Sprintf("%d-%d", l.ID, r.ID) },
				pipeline.JoinEventTime(evAt, evAt, time.Minute, 0), pipeline.JoinLate(&lateL, &lateR))
			col := &pipelinetest.Collector[string]{}
			pipeline.Sink(b, "store", joined, col)
			slow := &gatedSink{gate: make(chan struct{}), entered: make(chan struct{})}
			pipeline.ForEach(b, "late left", lateL, slow.write)
			colR := &pipelinetest.Collector[ev]{}
			pipeline.Sink(b, "late right", lateR, colR)
			p := build(t, b)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			run := pipelinetest.Start(ctx, p)

			right.items <- ev{ID: 100, At: at(10 * time.Minute)}
			taken(p, "j", 1)
			left.items <- ev{ID: 0, At: at(10 * time.Minute)} // the watermark 9:00
			taken(p, "j", 2)
			for i := range 5 {
				left.items <- ev{ID: 1 + i, At: at(time.Duration(i) * time.Second)}
			}
			for i := range 3 {
				right.items <- ev{ID: 101 + i, At: at(time.Minute + time.Duration(i)*time.Second)}
			}
			left.items <- ev{ID: 6, At: at(10*time.Minute + 30*time.Second)} // joins 100
			taken(p, "j", 11)
			<-slow.entered
			if drain {
				require.True(t, p.Drain())
				close(slow.gate)
				_, err := run.Wait()
				require.NoError(t, err)
			} else {
				cancel()
				_, err := run.Wait()
				require.ErrorIs(t, err, context.Canceled)
			}
			lo, ro := left.get(), right.get()
			require.Len(t, lo, 7)
			require.Len(t, ro, 4)
			for id, o := range lo {
				require.Len(t, o, 1, "left item %d", id)
			}
			for id, o := range ro {
				require.Len(t, o, 1, "right item %d", id)
			}
			wroteL := slow.ids()
			wroteR := evIDs(colR.Items())
			if drain {
				assert.Equal(t, []int{1, 2, 3, 4, 5}, wroteL)
				assert.Equal(t, []int{101, 102, 103}, wroteR)
				got := col.Items()
				slices.Sort(got)
				assert.Equal(t, []string{"0-100", "6-100"}, got)
				for id, o := range lo {
					assert.Equal(t, node.Delivered, o[0], "left item %d", id)
				}
				for id, o := range ro {
					assert.Equal(t, node.Delivered, o[0], "right item %d", id)
				}
				return
			}
			assert.NotContains(t, wroteL, 1, "the held item was not written")
			for id := 1; id <= 5; id++ {
				want := node.Failed
				if slices.Contains(wroteL, id) {
					want = node.Delivered
				}
				assert.Equal(t, want, lo[id][0], "late left item %d", id)
			}
			for id := 101; id <= 103; id++ {
				want := node.Failed
				if slices.Contains(wroteR, id) {
					want = node.Delivered
				}
				assert.Equal(t, want, ro[id][0], "late right item %d", id)
			}
		})
	}
}
