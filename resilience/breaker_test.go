package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
)

type breakerRig struct {
	clock *clockwork.FakeClock
	b     *resilience.Breaker
	mu    sync.Mutex
	ts    []resilience.Transition
}

func newBreakerRig(t *testing.T, f func(*resilience.CircuitBreakerOptions)) *breakerRig {
	t.Helper()
	o := resilience.DefaultCircuitBreaker()
	o.Enabled = true
	o.ConsecutiveFailures = 3
	o.OpenDuration = 10 * time.Second
	if f != nil {
		f(&o)
	}
	require.NoError(t, o.Validate())
	r := &breakerRig{clock: clockwork.NewFakeClock()}
	r.b = resilience.NewBreaker("enrich", o, r.clock, func(tr resilience.Transition) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ts = append(r.ts, tr)
	})
	return r
}

// call takes a permit and records result, failing the test if refused.
func (r *breakerRig) call(t *testing.T, result resilience.CallResult) {
	t.Helper()
	p, err := r.b.Allow()
	require.NoError(t, err)
	r.b.Record(p, result)
}

func (r *breakerRig) transitions() [][2]resilience.CircuitState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([][2]resilience.CircuitState, len(r.ts))
	for i, tr := range r.ts {
		out[i] = [2]resilience.CircuitState{tr.From, tr.To}
	}
	return out
}

var (
	closedToOpen = [2]resilience.CircuitState{resilience.CircuitClosed, resilience.CircuitOpen}
	openToHalf   = [2]resilience.CircuitState{resilience.CircuitOpen, resilience.CircuitHalfOpen}
	halfToOpen   = [2]resilience.CircuitState{resilience.CircuitHalfOpen, resilience.CircuitOpen}
	halfToClosed = [2]resilience.CircuitState{resilience.CircuitHalfOpen, resilience.CircuitClosed}
)

func TestBreakerTripsOnConsecutiveFailures(t *testing.T) {
	t.Parallel()
	r := newBreakerRig(t, nil)
	r.call(t, resilience.CallFailure)
	r.call(t, resilience.CallFailure)
	r.call(t, resilience.CallSuccess) // resets the streak
	r.call(t, resilience.CallFailure)
	r.call(t, resilience.CallIgnored) // a permanent error neither counts nor resets
	r.call(t, resilience.CallFailure)
	assert.Equal(t, resilience.CircuitClosed, r.b.State())
	r.call(t, resilience.CallFailure)
	assert.Equal(t, resilience.CircuitOpen, r.b.State())
	assert.Equal(t, [][2]resilience.CircuitState{closedToOpen}, r.transitions())

	_, err := r.b.Allow()
	var coe *resilience.CircuitOpenError
	require.ErrorAs(t, err, &coe)
	assert.Equal(t, "enrich", coe.Node)
	assert.Equal(t, r.clock.Now().Add(10*time.Second), coe.Until)
}

func TestBreakerHalfOpensAtFirstPermitAfterOpenDuration(t *testing.T) {
	t.Parallel()
	r := newBreakerRig(t, nil)
	for range 3 {
		r.call(t, resilience.CallFailure)
	}
	r.clock.Advance(10*time.Second - time.Nanosecond)
	_, err := r.b.Allow()
	require.ErrorIs(t, err, resilience.ErrCircuitOpen)
	assert.Equal(t, resilience.CircuitOpen, r.b.State())

	r.clock.Advance(time.Nanosecond)
	// No timer: the transition waits until someone asks, while State
	// says what the next Allow finds. It said open for good after a run
	// ended, so that a stopped pipeline's gauge showed an outage (a
	// review's finding).
	assert.Equal(t, resilience.CircuitHalfOpen, r.b.State())
	r.mu.Lock()
	require.Len(t, r.ts, 1, "the trip alone: reading the state is no transition")
	r.mu.Unlock()
	probe, err := r.b.Allow()
	require.NoError(t, err)
	assert.Equal(t, resilience.CircuitHalfOpen, r.b.State())
	r.mu.Lock()
	require.Len(t, r.ts, 2, "the half-open transition, at the Allow")
	r.mu.Unlock()

	// One probe slot by default: the next caller is refused, and one that
	// waits is let through when the probe's result closes the breaker.
	_, err = r.b.Allow()
	require.ErrorIs(t, err, resilience.ErrCircuitOpen)
	waited := make(chan error, 1)
	go func() {
		p, err := r.b.Wait(t.Context(), r.clock.Now().Add(time.Minute))
		if err == nil {
			r.b.Record(p, resilience.CallSuccess)
		}
		waited <- err
	}()
	require.NoError(t, r.clock.BlockUntilContext(t.Context(), 1), "Wait waits on the clock")
	select {
	case err := <-waited:
		t.Fatalf("Wait returned before anything happened: %v", err)
	default:
	}
	r.b.Record(probe, resilience.CallSuccess)
	require.NoError(t, <-waited)
	assert.Equal(t, resilience.CircuitClosed, r.b.State())
	assert.Equal(t, [][2]resilience.CircuitState{closedToOpen, openToHalf, halfToClosed}, r.transitions())
}

func TestBreakerFailedProbeOpensAgain(t *testing.T) {
	t.Parallel()
	r := newBreakerRig(t, nil)
	for range 3 {
		r.call(t, resilience.CallFailure)
	}
	r.clock.Advance(10 * time.Second)
	r.call(t, resilience.CallFailure)
	assert.Equal(t, resilience.CircuitOpen, r.b.State())
	_, err := r.b.Allow()
	var coe *resilience.CircuitOpenError
	require.ErrorAs(t, err, &coe)
	assert.Equal(t, r.clock.Now().Add(10*time.Second), coe.Until, "the open period starts again at the failed probe")
	assert.Equal(t, [][2]resilience.CircuitState{closedToOpen, openToHalf, halfToOpen}, r.transitions())
}

func TestBreakerNeedsEveryProbeSuccess(t *testing.T) {
	t.Parallel()
	r := newBreakerRig(t, func(o *resilience.CircuitBreakerOptions) {
		o.HalfOpenProbes = 2
		o.ProbeSuccesses = 3
	})
	for range 3 {
		r.call(t, resilience.CallFailure)
	}
	r.clock.Advance(10 * time.Second)
	p1, err := r.b.Allow()
	require.NoError(t, err)
	p2, err := r.b.Allow()
	require.NoError(t, err)
	_, err = r.b.Allow()
	require.ErrorIs(t, err, resilience.ErrCircuitOpen, "two probes at most at once")

	r.b.Record(p1, resilience.CallSuccess)
	r.b.Record(p2, resilience.CallIgnored) // frees the slot, proves nothing
	assert.Equal(t, resilience.CircuitHalfOpen, r.b.State())
	r.call(t, resilience.CallSuccess)
	assert.Equal(t, resilience.CircuitHalfOpen, r.b.State())
	r.call(t, resilience.CallSuccess)
	assert.Equal(t, resilience.CircuitClosed, r.b.State())
}

func TestBreakerIgnoresStalePermits(t *testing.T) {
	t.Parallel()
	r := newBreakerRig(t, nil)
	slow, err := r.b.Allow() // a call that began while closed
	require.NoError(t, err)
	for range 3 {
		r.call(t, resilience.CallFailure)
	}
	before := len(r.transitions())
	r.b.Record(slow, resilience.CallSuccess)
	assert.Equal(t, resilience.CircuitOpen, r.b.State(), "a success from before the trip must not close it")
	assert.Len(t, r.transitions(), before)

	r.clock.Advance(10 * time.Second)
	probe, err := r.b.Allow()
	require.NoError(t, err)
	r.b.Record(probe, resilience.CallSuccess)
	assert.Equal(t, resilience.CircuitClosed, r.b.State())

	// A failure from the old closed generation must not count now.
	r.b.Record(slow, resilience.CallFailure)
	r.call(t, resilience.CallFailure)
	r.call(t, resilience.CallFailure)
	assert.Equal(t, resilience.CircuitClosed, r.b.State())
}

func TestBreakerTripsOnFailureRate(t *testing.T) {
	t.Parallel()
	r := newBreakerRig(t, func(o *resilience.CircuitBreakerOptions) {
		o.ConsecutiveFailures = 0
		o.FailureRate = 0.5
		o.MinimumCalls = 10
		o.Window = 10 * time.Second
	})
	// 4 failures among 8 calls: rate reached, minimum not.
	for range 4 {
		r.call(t, resilience.CallFailure)
		r.call(t, resilience.CallSuccess)
	}
	assert.Equal(t, resilience.CircuitClosed, r.b.State())
	// The window slides: after 10 s these calls no longer count.
	r.clock.Advance(10 * time.Second)
	for range 4 {
		r.call(t, resilience.CallSuccess)
	}
	for range 5 {
		r.call(t, resilience.CallFailure)
	}
	// 5 of 9 in the window: below the minimum of 10 calls.
	assert.Equal(t, resilience.CircuitClosed, r.b.State())
	r.call(t, resilience.CallSuccess) // 5 of 10: 50%, minimum reached, but a success cannot trip
	assert.Equal(t, resilience.CircuitClosed, r.b.State())
	r.call(t, resilience.CallFailure) // 6 of 11
	assert.Equal(t, resilience.CircuitOpen, r.b.State())
}

func TestBreakerRateBelowThresholdStaysClosed(t *testing.T) {
	t.Parallel()
	r := newBreakerRig(t, func(o *resilience.CircuitBreakerOptions) {
		o.ConsecutiveFailures = 0
		o.FailureRate = 0.5
		o.MinimumCalls = 4
		o.Window = time.Second
	})
	for range 100 {
		r.call(t, resilience.CallSuccess)
		r.call(t, resilience.CallSuccess)
		r.call(t, resilience.CallFailure)
		r.clock.Advance(100 * time.Millisecond)
	}
	assert.Equal(t, resilience.CircuitClosed, r.b.State())
	assert.Empty(t, r.transitions())
}

func TestBreakerTransitionsCarryGenerationAndTime(t *testing.T) {
	t.Parallel()
	r := newBreakerRig(t, nil)
	start := r.clock.Now()
	for range 3 {
		r.call(t, resilience.CallFailure)
	}
	r.clock.Advance(12 * time.Second)
	r.call(t, resilience.CallSuccess)
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Len(t, r.ts, 3)
	for i, tr := range r.ts {
		assert.Equal(t, uint64(i+1), tr.Generation)
	}
	assert.Equal(t, start, r.ts[0].Time)
	assert.Equal(t, start.Add(12*time.Second), r.ts[1].Time)
}

func TestBreakerConcurrentUse(t *testing.T) {
	t.Parallel()
	r := newBreakerRig(t, func(o *resilience.CircuitBreakerOptions) {
		o.HalfOpenProbes = 3
		o.FailureRate = 0.9
		o.MinimumCalls = 50
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				p, err := r.b.Allow()
				if err != nil {
					if g == 0 && i%50 == 0 {
						r.clock.Advance(time.Second)
					}
					continue
				}
				result := resilience.CallSuccess
				if (i+g)%4 == 0 {
					result = resilience.CallFailure
				}
				r.b.Record(p, result)
			}
		})
	}
	wg.Wait()
	// Every transition moved from the state the previous one left, and
	// generations count up by one.
	r.mu.Lock()
	defer r.mu.Unlock()
	byGen := make(map[uint64]resilience.Transition, len(r.ts))
	for _, tr := range r.ts {
		byGen[tr.Generation] = tr
	}
	require.Len(t, byGen, len(r.ts))
	state := resilience.CircuitClosed
	for g := uint64(1); g <= uint64(len(r.ts)); g++ {
		tr, ok := byGen[g]
		require.True(t, ok, "generation %d missing", g)
		assert.Equal(t, state, tr.From, "generation %d", g)
		state = tr.To
	}
	assert.Equal(t, state, r.b.State())
}

func TestBreakerBeforeTheEpoch(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Date(1960, 1, 1, 0, 0, 4, 0, time.UTC))
	o := resilience.DefaultCircuitBreaker()
	o.Enabled, o.ConsecutiveFailures, o.FailureRate, o.MinimumCalls = true, 0, 0.5, 4
	b := resilience.NewBreaker("old", o, clock, nil)
	for range 4 {
		p, err := b.Allow()
		require.NoError(t, err)
		b.Record(p, resilience.CallFailure)
	}
	assert.Equal(t, resilience.CircuitOpen, b.State())
}

func TestBreakerWaitPausesUntilDeadlineOrCancel(t *testing.T) {
	t.Parallel()
	r := newBreakerRig(t, nil)
	for range 3 {
		r.call(t, resilience.CallFailure)
	}
	// A deadline before the breaker half-opens: Wait gives up at it.
	waited := make(chan error, 1)
	go func() {
		_, err := r.b.Wait(t.Context(), r.clock.Now().Add(4*time.Second))
		waited <- err
	}()
	require.NoError(t, r.clock.BlockUntilContext(t.Context(), 1))
	r.clock.Advance(4 * time.Second)
	var coe *resilience.CircuitOpenError
	require.ErrorAs(t, <-waited, &coe)

	// A cancelled wait returns the cause and takes no permit.
	ctx, cancel := context.WithCancelCause(t.Context())
	cause := errors.New("shutting down")
	go func() {
		_, err := r.b.Wait(ctx, r.clock.Now().Add(time.Hour))
		waited <- err
	}()
	require.NoError(t, r.clock.BlockUntilContext(t.Context(), 1))
	cancel(cause)
	require.ErrorIs(t, <-waited, cause)

	// Past OpenDuration the waiter gets the probe permit.
	go func() {
		p, err := r.b.Wait(t.Context(), r.clock.Now().Add(time.Hour))
		if err == nil && !p.Probe() {
			err = errors.New("expected a probe permit")
		}
		waited <- err
	}()
	require.NoError(t, r.clock.BlockUntilContext(t.Context(), 1))
	r.clock.Advance(6 * time.Second)
	require.NoError(t, <-waited)
	assert.Equal(t, resilience.CircuitHalfOpen, r.b.State())
}

// countingClock counts the reads of its time.
type countingClock struct {
	*clockwork.FakeClock
	reads atomic.Int64
}

func (c *countingClock) Now() time.Time {
	c.reads.Add(1)
	return c.FakeClock.Now()
}

// A closed breaker that trips on consecutive failures alone lets calls
// through and counts their successes without reading the clock: a clock
// read costs more than the rest of Allow and Record on some machines.
func TestClosedBreakerReadsNoClockOnSuccess(t *testing.T) {
	t.Parallel()
	clock := &countingClock{FakeClock: clockwork.NewFakeClock()}
	o := resilience.DefaultCircuitBreaker()
	o.Enabled = true
	b := resilience.NewBreaker("api", o, clock, nil)
	for range 1000 {
		p, err := b.Allow()
		require.NoError(t, err)
		b.Record(p, resilience.CallSuccess)
	}
	assert.Zero(t, clock.reads.Load())

	// The failure-rate window needs the time of each call.
	o.FailureRate = 0.5
	b = resilience.NewBreaker("api", o, clock, nil)
	p, err := b.Allow()
	require.NoError(t, err)
	b.Record(p, resilience.CallSuccess)
	assert.Positive(t, clock.reads.Load())
}

// Many goroutines ask for permits and report results at once while the
// clock moves: the breaker never has more probes running than
// HalfOpenProbes, its transitions follow the state machine, and it ends
// closed once the calls succeed again.
func TestBreakerUnderConcurrentCalls(t *testing.T) {
	t.Parallel()
	for _, rate := range []float64{0, 0.5} {
		t.Run(fmt.Sprint("rate=", rate), func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			o := resilience.DefaultCircuitBreaker()
			o.Enabled = true
			o.ConsecutiveFailures = 3
			o.FailureRate = rate
			o.MinimumCalls = 5
			o.OpenDuration = time.Second
			o.HalfOpenProbes = 2
			var (
				mu     sync.Mutex
				ts     []resilience.Transition
				probes atomic.Int32
				most   atomic.Int32
			)
			b := resilience.NewBreaker("api", o, clock, func(tr resilience.Transition) {
				mu.Lock()
				defer mu.Unlock()
				ts = append(ts, tr)
			})
			var healthy atomic.Bool
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					for i := range 2000 {
						p, err := b.Allow()
						if err != nil {
							continue
						}
						if p.Probe() {
							n := probes.Add(1)
							for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
							}
						}
						result := resilience.CallSuccess
						if !healthy.Load() && (i+w)%10 != 0 {
							result = resilience.CallFailure
						}
						if p.Probe() {
							probes.Add(-1)
						}
						b.Record(p, result)
						if w == 0 && i%50 == 0 {
							clock.Advance(300 * time.Millisecond)
						}
						if w == 0 && i == 1000 {
							healthy.Store(true)
						}
					}
				})
			}
			wg.Wait()
			// Past the open duration, successful probes close it.
			for b.State() != resilience.CircuitClosed {
				clock.Advance(time.Second)
				p, err := b.Allow()
				if err == nil {
					b.Record(p, resilience.CallSuccess)
				}
			}
			assert.LessOrEqual(t, most.Load(), int32(o.HalfOpenProbes))
			mu.Lock()
			defer mu.Unlock()
			require.NotEmpty(t, ts, "the failures tripped it")
			state := resilience.CircuitClosed
			for i, tr := range ts {
				require.Equal(t, state, tr.From, "transition %d starts where the last ended", i)
				require.Equal(t, uint64(i+1), tr.Generation)
				switch tr.From {
				case resilience.CircuitClosed:
					require.Equal(t, resilience.CircuitOpen, tr.To)
				case resilience.CircuitOpen:
					require.Equal(t, resilience.CircuitHalfOpen, tr.To)
				}
				state = tr.To
			}
			assert.Equal(t, resilience.CircuitClosed, state)
		})
	}
}
