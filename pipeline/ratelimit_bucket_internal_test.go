package pipeline

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// waitAsync starts l.wait(ctx) and returns where its result arrives, with
// the clock's instant when it returned.
func waitAsync(ctx context.Context, l *limiter, clock *clockwork.FakeClock) <-chan waited {
	ch := make(chan waited, 1)
	go func() {
		err := l.wait(ctx)
		ch <- waited{clock.Now(), err}
	}()
	return ch
}

type waited struct {
	at  time.Time
	err error
}

// A full bucket of burst n lets n calls through at once; the next waits
// one slot (100 ms at 10/s).
func TestLimiterBurstGoesAtOnce(t *testing.T) {
	for _, burst := range []int{1, 3, 50} {
		clock := clockwork.NewFakeClock()
		l := newLimiter(10, burst, clock)
		for i := range burst {
			now, at := l.book()
			assert.Equal(t, now, at, "burst %d: call %d goes at once", burst, i+1)
		}
		next := waitAsync(t.Context(), l, clock)
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "burst %d: call %d waits", burst, burst+1)
		start := clock.Now()
		clock.Advance(99 * time.Millisecond)
		select {
		case <-next:
			t.Fatalf("burst %d: call %d went before its slot", burst, burst+1)
		default:
		}
		clock.Advance(time.Millisecond)
		w := <-next
		require.NoError(t, w.err)
		assert.Equal(t, 100*time.Millisecond, w.at.Sub(start), "burst %d", burst)
	}
}

// A refilled bucket holds no more than burst: after a long pause, burst
// calls go at once and the next waits a slot.
func TestLimiterRefillsUpToBurst(t *testing.T) {
	clock := clockwork.NewFakeClock()
	l := newLimiter(10, 2, clock)
	for range 2 {
		require.NoError(t, l.wait(t.Context()))
	}
	clock.Advance(time.Hour)
	for range 2 {
		_, at := l.book()
		assert.Equal(t, clock.Now(), at, "the refilled burst goes at once")
	}
	_, at := l.book()
	assert.Equal(t, 100*time.Millisecond, at.Sub(clock.Now()), "then one slot")
}

// Bookings are made ahead, one slot after the other, by the order they
// ask in: the fifth call at 10/s burst 1 asked at once goes at 400 ms.
func TestLimiterBooksSlotsAhead(t *testing.T) {
	clock := clockwork.NewFakeClock()
	l := newLimiter(10, 1, clock)
	for i := range 5 {
		_, at := l.book()
		assert.Equal(t, time.Duration(i)*100*time.Millisecond, at.Sub(clock.Now()), "call %d", i+1)
	}
}

// A cancelled wait that was the latest booking gives its token back
// whole: the next call takes its slot, not the one after.
// TestRateLimitCancelledWaitGivesItsSlotBack shows it half way through
// the wait; here it is cancelled before any time passed, and twice in a
// row.
func TestLimiterCancelledWaitDoesNotEatTheToken(t *testing.T) {
	clock := clockwork.NewFakeClock()
	l := newLimiter(10, 1, clock)
	require.NoError(t, l.wait(t.Context()))
	for range 2 {
		ctx, cancel := context.WithCancel(t.Context())
		w := waitAsync(ctx, l, clock)
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
		cancel()
		require.ErrorIs(t, (<-w).err, context.Canceled)
	}
	_, at := l.book()
	assert.Equal(t, 100*time.Millisecond, at.Sub(clock.Now()), "two cancelled waits took no slot")
}

// A cancelled wait followed by a later booking gives nothing back, as
// x/time/rate's CancelAt: the later call keeps its slot, and the slot of
// the cancelled one stays used.
func TestLimiterCancelledWaitBeforeALaterBooking(t *testing.T) {
	clock := clockwork.NewFakeClock()
	l := newLimiter(10, 1, clock)
	require.NoError(t, l.wait(t.Context()))
	ctx, cancel := context.WithCancel(t.Context())
	first := waitAsync(ctx, l, clock) // books 100 ms
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	_, second := l.book() // books 200 ms
	assert.Equal(t, 200*time.Millisecond, second.Sub(clock.Now()))
	cancel()
	require.ErrorIs(t, (<-first).err, context.Canceled)
	_, third := l.book()
	assert.Equal(t, 300*time.Millisecond, third.Sub(clock.Now()), "the cancelled slot is not given back")
}

// A wait cancelled once its instant has passed gives nothing back: the
// token was due and counts as taken.
func TestLimiterCancelAfterTheSlotGivesNothingBack(t *testing.T) {
	clock := clockwork.NewFakeClock()
	l := newLimiter(10, 1, clock)
	require.NoError(t, l.wait(t.Context()))
	_, at := l.book() // 100 ms
	clock.Advance(150 * time.Millisecond)
	l.cancel(at)
	_, next := l.book()
	assert.Equal(t, 50*time.Millisecond, next.Sub(clock.Now()), "the slot at 200 ms")
}

// Goroutines that share a limiter share its rate: 8 of them asking
// tokens at 100/s burst 1, on a clock moved a millisecond once all wait,
// get one 10 ms slot each in turn, 200 calls in 1.99 s (to within the
// tick), as one goroutine would.
func TestLimiterSharedByConcurrentWaiters(t *testing.T) {
	const workers, calls, tick, slot = 8, 200, time.Millisecond, 10 * time.Millisecond
	clock := clockwork.NewFakeClock()
	start := clock.Now()
	l := newLimiter(100, 1, clock)
	var mu sync.Mutex
	var at []time.Duration
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			// Each keeps asking, so that all of them wait on the clock
			// until the test has its calls.
			for l.wait(ctx) == nil {
				mu.Lock()
				at = append(at, clock.Since(start))
				mu.Unlock()
			}
		})
	}
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	for {
		mu.Lock()
		n := len(at)
		mu.Unlock()
		if n >= calls {
			break
		}
		require.NoError(t, clock.BlockUntilContext(wctx, workers), "every goroutine waits on the clock")
		clock.Advance(tick)
	}
	cancel()
	wg.Wait()
	require.GreaterOrEqual(t, len(at), calls)
	slices.Sort(at)
	for i, d := range at[:calls] {
		assert.GreaterOrEqual(t, d, time.Duration(i)*slot, "call %d came before its slot", i+1)
		assert.LessOrEqual(t, d, time.Duration(i)*slot+tick, "call %d came a tick after its slot or later", i+1)
	}
}
