package idempotency_test

// Edge cases of the guard: a completion that fails or hangs, a claim lost
// to a takeover that failed, stress across guards.

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// slowCompleteOnce is a store whose first Complete does not answer in
// time: the guard's store timeout ends it (context.DeadlineExceeded), and
// the completion is not recorded. Later calls pass through.
type slowCompleteOnce struct {
	idempotency.Store
	failed atomic.Bool
}

func (s *slowCompleteOnce) Complete(ctx context.Context, key, owner string, now time.Time) error {
	if s.failed.CompareAndSwap(false, true) {
		return fmt.Errorf("store: complete: %w", context.DeadlineExceeded)
	}
	return s.Store.Complete(ctx, key, owner, now)
}

// A completion that fails after the write (a store blip, or the store
// timeout) is transient: the item's retry records the key, and the wrapped
// sink does not run again.
func TestGuardCompleteTimeoutDoesNotWriteTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(epoch)
	rec := &recorder{}
	g := guard(rec, &slowCompleteOnce{Store: idempotency.NewMemory()}, clock)
	b := pipeline.New("orders", pipeline.WithClock(clock))
	pipeline.Sink(b, "store", pipeline.Source(b, "read", pipelinetest.NewSliceSource("pay-1")), node.Sink[string](g),
		pipeline.NodeResilience(retryBusy))
	p, err := b.Build()
	require.NoError(t, err)
	_, err = pipelinetest.AdvanceUntilDone(ctx, clock, pipelinetest.Start(ctx, p), time.Second)
	require.NoError(t, err)
	assert.Equal(t, []string{"pay-1"}, rec.items(), "the payment is charged once")
	t.Logf("stats %+v, writes %v", g.Stats(), rec.items())
}

// A "keep forever" retention (math.MaxInt64) keeps a completed key in
// Memory; the SQL and Redis stores have the same test.
func TestMemoryForeverRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := idempotency.NewMemory(idempotency.WithRetention(time.Duration(math.MaxInt64)))
	require.Equal(t, idempotency.Claimed, mustClaim(t, m, "k", "a", epoch))
	require.NoError(t, m.Complete(ctx, "k", "a", epoch))
	assert.Equal(t, idempotency.Completed, mustClaim(t, m, "k", "b", epoch.Add(time.Second)))
}

// Several guards, each called from several goroutines at once, over many
// keys on one Memory store: no key is written twice.
func TestGuardStress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(epoch)
	store := idempotency.NewMemory()
	var mu sync.Mutex
	writes := map[string]int{}
	sink := node.SinkFunc[string](func(_ context.Context, k string) error {
		mu.Lock()
		writes[k]++
		mu.Unlock()
		return nil
	})
	guards := []*idempotency.Guard[string]{guard(sink, store, clock), guard(sink, store, clock), guard(sink, store, clock)}
	var wg sync.WaitGroup
	for gi, g := range guards {
		for w := range 8 {
			wg.Go(func() {
				for i := range 500 {
					k := fmt.Sprint("k", (i*7+w+gi)%100)
					for {
						err := g.Write(ctx, k)
						if err == nil {
							break
						}
						if !assert.True(t, resilience.IsTransient(err), "%v", err) {
							return
						}
					}
				}
			})
		}
	}
	wg.Wait()
	for k, n := range writes {
		assert.Equal(t, 1, n, k)
	}
	assert.Len(t, writes, 100)
}

// A duplicate of a key that this very guard is writing (pipeline.Parallel)
// is refused as Busy and left to the item retry; a write that lasts
// nearly all of the default retries (1.9 s of their 2 s) does not fail the
// run, and the key is written once.
func TestGuardInGuardDuplicateOfASlowWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(epoch)
	var first atomic.Bool
	entered := make(chan struct{})
	rec := &recorder{hook: func(ctx context.Context, item string) error {
		if first.CompareAndSwap(false, true) {
			after := clock.After(1900 * time.Millisecond) // a 1.9 s write
			close(entered)
			<-after
		}
		return nil
	}}
	g := guard(rec, idempotency.NewMemory(), clock)
	b := pipeline.New("orders", pipeline.WithClock(clock))
	logged := node.SinkFunc[string](func(ctx context.Context, item string) error {
		err := g.Write(ctx, item)
		t.Logf("at +%v: Write(%s) = %v", clock.Since(epoch), item, err)
		return err
	})
	pipeline.Sink(b, "store", pipeline.Source(b, "read", pipelinetest.NewSliceSource("a", "a")), logged,
		pipeline.Parallel(2))
	p, err := b.Build()
	require.NoError(t, err)
	run := pipelinetest.Start(ctx, p)
	<-entered
	waitUntil(t, func() bool { return g.Stats().Busy == 1 })
	// Up to the end of the slow write, then let the write return before
	// the clock goes on: a driver that kept advancing while the woken
	// write waited for a processor ran the duplicate's retries out first
	// (4 of 300 runs under -race), which is the test's race, not the
	// guard's. The write ends at 1.9 s, not at the last retry's 2 s, since
	// two timers due at the same instant wake in no set order (the
	// duplicate's last try ran before the write was recorded, once in a
	// clean-clone CI run).
	for clock.Since(epoch) < 1900*time.Millisecond {
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
		clock.Advance(100 * time.Millisecond)
	}
	waitUntil(t, func() bool { return g.Stats().Written == 1 })
	_, err = pipelinetest.AdvanceUntilDone(ctx, clock, run, 100*time.Millisecond)
	t.Logf("stats %+v", g.Stats())
	assert.NoError(t, err, "a duplicate does not fail the run")
	assert.Equal(t, []string{"a"}, rec.items())
}

// A write that succeeded as the run was cancelled is still recorded.
func TestGuardCompletionAfterCancelIsRecorded(t *testing.T) {
	t.Parallel()
	store := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	ctx, cancel := context.WithCancel(context.Background())
	g := guard(&recorder{hook: func(context.Context, string) error { cancel(); return nil }}, store, clock)
	require.NoError(t, g.Write(ctx, "k"))
	st, err := store.Claim(context.Background(), "k", "other", clock.Now(), lease)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Completed, st)
}

// hangingComplete blocks Complete until its context ends.
type hangingComplete struct{ idempotency.Store }

func (h hangingComplete) Complete(ctx context.Context, _, _ string, _ time.Time) error {
	<-ctx.Done()
	return ctx.Err()
}

// WithStoreTimeout bounds a completion that hangs.
func TestGuardStoreTimeoutBoundsAHangingComplete(t *testing.T) {
	t.Parallel()
	g := guard(&recorder{}, hangingComplete{idempotency.NewMemory()}, clockwork.NewFakeClockAt(epoch),
		idempotency.WithStoreTimeout(50*time.Millisecond))
	err := g.Write(context.Background(), "k")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	t.Logf("transient=%v: %v", resilience.IsTransient(err), err)
}

// A slow write overran its lease; the consumer that took the key over
// failed its write and released the claim. The slow guard's Complete finds
// its claim lost; the key being free, it claims and records it, so that
// the item is written once, and a redelivery finds it completed.
func TestGuardLostClaimAfterTakeoverReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	entered, proceed := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	slowRec := &recorder{hook: func(context.Context, string) error {
		if calls.Add(1) == 1 {
			close(entered)
			<-proceed
		}
		return nil
	}}
	slow := guard(slowRec, store, clock)
	done := make(chan error, 1)
	go func() { done <- slow.Write(ctx, "pay-1") }()
	<-entered
	clock.Advance(lease)
	failing := guard(&recorder{hook: func(context.Context, string) error { return fmt.Errorf("card API down") }}, store, clock)
	require.Error(t, failing.Write(ctx, "pay-1")) // took over, failed, released
	close(proceed)
	require.NoError(t, <-done, "written: the lost claim is counted")
	st, err := store.Claim(ctx, "pay-1", "a redelivery elsewhere", clock.Now(), lease)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Completed, st, "the slow guard recorded its write once the key was free again")
	assert.Equal(t, []string{"pay-1"}, slowRec.items(), "pay-1 was charged once by this guard and by nobody else")
}
