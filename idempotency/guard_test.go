package idempotency_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A recorder is a sink that records the items it wrote. Before each write
// it runs hook, when set: an error from hook fails the write.
type recorder struct {
	hook func(ctx context.Context, item string) error

	mu      sync.Mutex
	written []string
}

func (r *recorder) Write(ctx context.Context, item string) error {
	if r.hook != nil {
		if err := r.hook(ctx, item); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.written = append(r.written, item)
	return nil
}

func (r *recorder) items() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.written...)
}

func identity(s string) string { return s }

// guard returns a guard over sink and store on clock, named "store".
func guard(sink node.Sink[string], store idempotency.Store, clock clockwork.Clock, opts ...idempotency.Option) *idempotency.Guard[string] {
	opts = append([]idempotency.Option{idempotency.WithClock(clock), idempotency.WithLease(lease), idempotency.WithName("store")}, opts...)
	return idempotency.Sink(sink, store, identity, opts...)
}

// waitUntil spins until cond holds. It yields the processor instead of
// sleeping, and gives up after ten seconds of real time.
func waitUntil(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		runtime.Gosched()
	}
}

func TestGuardSkipsDuplicates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &recorder{}
	g := guard(rec, idempotency.NewMemory(), clockwork.NewFakeClockAt(epoch))
	for _, item := range []string{"a", "b", "a", "a", "c", "b"} {
		require.NoError(t, g.Write(ctx, item))
	}
	assert.Equal(t, []string{"a", "b", "c"}, rec.items())
	assert.Equal(t, idempotency.Stats{Written: 3, Duplicates: 3}, g.Stats())
}

func TestTwoGuardsWriteAKeyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	rec := &recorder{}
	guards := []*idempotency.Guard[string]{guard(rec, store, clock), guard(rec, store, clock)}
	require.NotEqual(t, guards[0].Owner(), guards[1].Owner(), "each guard has an owner of its own")

	const perGuard = 8
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, g := range guards {
		for range perGuard {
			wg.Go(func() {
				<-start
				for {
					err := g.Write(ctx, "order-1")
					if err == nil {
						return
					}
					if !assert.ErrorIs(t, err, idempotency.ErrInProgress) {
						return
					}
					runtime.Gosched() // the item retry's wait, in short
				}
			})
		}
	}
	close(start)
	wg.Wait()

	assert.Equal(t, []string{"order-1"}, rec.items(), "exactly one write")
	s0, s1 := guards[0].Stats(), guards[1].Stats()
	assert.Equal(t, int64(1), s0.Written+s1.Written)
	assert.Equal(t, int64(2*perGuard-1), s0.Duplicates+s1.Duplicates, "every other call was absorbed")
}

func TestGuardBusyIsTransientInProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	st, err := store.Claim(ctx, "order-1", "another consumer", clock.Now(), lease)
	require.NoError(t, err)
	require.Equal(t, idempotency.Claimed, st)
	rec := &recorder{}
	g := guard(rec, store, clock)

	err = g.Write(ctx, "order-1")
	require.ErrorIs(t, err, idempotency.ErrInProgress)
	assert.EqualError(t, err, `idempotency: key claimed by another owner (guard "store", key "order-1")`)
	assert.True(t, resilience.Classifier{}.IsTransient(err), "the item retry tries again")
	assert.True(t, resilience.IsTransient(err))
	assert.Empty(t, rec.items())
	assert.Equal(t, idempotency.Stats{Busy: 1}, g.Stats())

	require.NoError(t, store.Complete(ctx, "order-1", "another consumer", clock.Now()))
	require.NoError(t, g.Write(ctx, "order-1"), "the retry finds the key completed")
	assert.Empty(t, rec.items())
	assert.Equal(t, idempotency.Stats{Busy: 1, Duplicates: 1}, g.Stats())
}

func TestGuardOneKeyTwiceAtOnceInOneGuard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	entered, proceed := make(chan struct{}), make(chan struct{})
	rec := &recorder{hook: func(ctx context.Context, item string) error {
		close(entered)
		<-proceed
		return nil
	}}
	g := guard(rec, idempotency.NewMemory(), clockwork.NewFakeClockAt(epoch))
	first := make(chan error, 1)
	go func() { first <- g.Write(ctx, "k") }()
	<-entered

	err := g.Write(ctx, "k")
	require.ErrorIs(t, err, idempotency.ErrInProgress, "the two calls share an owner: the guard keeps them apart itself")
	assert.True(t, resilience.IsTransient(err))
	close(proceed)
	require.NoError(t, <-first)
	require.NoError(t, g.Write(ctx, "k"))
	assert.Equal(t, []string{"k"}, rec.items())
	assert.Equal(t, idempotency.Stats{Written: 1, Duplicates: 1, Busy: 1}, g.Stats())
}

func TestGuardFailedWriteReleasesTheClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	boom := errors.New("database down")
	failing := guard(&recorder{hook: func(context.Context, string) error { return boom }}, store, clock)

	err := failing.Write(ctx, "order-1")
	require.True(t, err == boom, "the write's error is returned unchanged, got %v", err)
	assert.Equal(t, idempotency.Stats{Released: 1}, failing.Stats())

	rec := &recorder{}
	other := guard(rec, store, clock)
	require.NoError(t, other.Write(ctx, "order-1"), "another owner writes at once, without waiting for the lease")
	assert.Equal(t, []string{"order-1"}, rec.items())
}

// A write that the caller's cancellation ended may have happened (a
// commit whose answer the cancellation cut off): the claim is kept until
// its lease ends, not released for another owner to write the item again.
func TestGuardKeepsTheClaimWhenTheCallerIsCancelled(t *testing.T) {
	t.Parallel()
	store := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	ctx, cancel := context.WithCancel(context.Background())
	g := guard(&recorder{hook: func(ctx context.Context, _ string) error {
		cancel() // the run stops during the write
		return ctx.Err()
	}}, store, clock)

	require.ErrorIs(t, g.Write(ctx, "order-1"), context.Canceled)
	assert.Equal(t, idempotency.Stats{Unknown: 1}, g.Stats(), "the outcome is unknown: the claim is kept")
	st, err := store.Claim(context.Background(), "order-1", "other", clock.Now(), lease)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Busy, st)
	st, err = store.Claim(context.Background(), "order-1", "other", clock.Now().Add(lease), lease)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Claimed, st, "until its lease ends")
}

func TestGuardReleasesWhenTheWritePanics(t *testing.T) {
	t.Parallel()
	store := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	g := guard(&recorder{hook: func(_ context.Context, item string) error {
		if item == "order-1" {
			panic("bug")
		}
		return nil
	}}, store, clock)

	assert.PanicsWithValue(t, "bug", func() { _ = g.Write(context.Background(), "order-1") })
	assert.Equal(t, idempotency.Stats{Released: 1}, g.Stats())
	rec := &recorder{}
	require.NoError(t, guard(rec, store, clock).Write(context.Background(), "order-1"))
	assert.Equal(t, []string{"order-1"}, rec.items())
	require.NoError(t, g.Write(context.Background(), "order-2"), "the panic left no key marked in flight")
}

func TestGuardTakesOverACrashedOwnersClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	// A consumer claimed the key and crashed before it completed it.
	_, err := store.Claim(ctx, "order-1", "crashed", clock.Now(), lease)
	require.NoError(t, err)
	rec := &recorder{}
	g := guard(rec, store, clock)

	clock.Advance(lease - time.Nanosecond)
	require.ErrorIs(t, g.Write(ctx, "order-1"), idempotency.ErrInProgress, "the lease has not run out")
	clock.Advance(time.Nanosecond)
	require.NoError(t, g.Write(ctx, "order-1"), "the lease ran out: the key is taken over")
	assert.Equal(t, []string{"order-1"}, rec.items())
	assert.Equal(t, idempotency.Stats{Written: 1, Busy: 1}, g.Stats())
	assert.ErrorIs(t, store.Complete(ctx, "order-1", "crashed", clock.Now()), idempotency.ErrLostClaim)
}

func TestGuardWriteThatOverranItsLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	entered, proceed := make(chan struct{}), make(chan struct{})
	slowRec := &recorder{hook: func(context.Context, string) error {
		close(entered)
		<-proceed
		return nil
	}}
	slow := guard(slowRec, store, clock)
	done := make(chan error, 1)
	go func() { done <- slow.Write(ctx, "order-1") }()
	<-entered

	// The slow write overruns its lease; another consumer takes over.
	clock.Advance(lease)
	fastRec := &recorder{}
	fast := guard(fastRec, store, clock)
	require.NoError(t, fast.Write(ctx, "order-1"))
	close(proceed)

	require.NoError(t, <-done, "the item was written: the lost claim is counted, not an error")
	assert.Equal(t, idempotency.Stats{Written: 1, LostClaims: 1}, slow.Stats())
	assert.Equal(t, []string{"order-1"}, slowRec.items())
	assert.Equal(t, []string{"order-1"}, fastRec.items(), "the item was written twice: the lease was too short")

	require.NoError(t, slow.Write(ctx, "order-1"), "a redelivery finds the key completed")
	assert.Equal(t, int64(1), slow.Stats().Duplicates)
}

// A faultyStore fails the calls it is told to, and passes the others on.
type faultyStore struct {
	idempotency.Store
	claimErr, completeErr error
	state                 idempotency.State // answered to every claim when set
}

func (s *faultyStore) Claim(ctx context.Context, key, owner string, now time.Time, lease time.Duration) (idempotency.State, error) {
	if s.claimErr != nil {
		return 0, s.claimErr
	}
	if s.state != 0 {
		return s.state, nil
	}
	return s.Store.Claim(ctx, key, owner, now, lease)
}

func (s *faultyStore) Complete(ctx context.Context, key, owner string, now time.Time) error {
	if s.completeErr != nil {
		return s.completeErr
	}
	return s.Store.Complete(ctx, key, owner, now)
}

func TestGuardCompleteFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	unreachable := errors.New("store unreachable")
	rec := &recorder{}
	fs := &faultyStore{Store: mem, completeErr: unreachable}
	g := guard(rec, fs, clock)
	err := g.Write(ctx, "order-1")
	require.ErrorIs(t, err, unreachable)
	assert.EqualError(t, err, `idempotency: complete after the write (guard "store", key "order-1"): store unreachable`)
	assert.True(t, resilience.IsTransient(err), "the item's retry records the key")
	assert.Equal(t, idempotency.Stats{Written: 1, Unrecorded: 1}, g.Stats(), "the claim is kept, not released")
	st, err := mem.Claim(ctx, "order-1", "other", clock.Now(), lease)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Busy, st, "so no other owner writes the item before the lease runs out")

	require.Error(t, g.Write(ctx, "order-1"), "the store still fails")
	fs.completeErr = nil
	require.NoError(t, g.Write(ctx, "order-1"), "the retry records the key")
	assert.Equal(t, []string{"order-1"}, rec.items(), "and the item was written once: retries only complete it")
	assert.Equal(t, idempotency.Stats{Written: 1, Unrecorded: 1}, g.Stats(), "counted once, however many retries failed")
	st, err = mem.Claim(ctx, "order-1", "other", clock.Now(), lease)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Completed, st)
}

func TestGuardClaimFails(t *testing.T) {
	t.Parallel()
	unreachable := errors.New("store unreachable")
	rec := &recorder{}
	g := guard(rec, &faultyStore{claimErr: unreachable}, clockwork.NewFakeClockAt(epoch))

	err := g.Write(context.Background(), "order-1")
	require.ErrorIs(t, err, unreachable)
	assert.EqualError(t, err, `idempotency: claim (guard "store", key "order-1"): store unreachable`)
	assert.True(t, resilience.IsTransient(err), "a store that fails is retried, the item not given up")
	assert.Empty(t, rec.items())

	g = guard(rec, &faultyStore{state: 7}, clockwork.NewFakeClockAt(epoch))
	assert.EqualError(t, g.Write(context.Background(), "order-1"),
		`idempotency: the store answered State(7) to a claim (guard "store", key "order-1")`)
	assert.Empty(t, rec.items())
}

func TestGuardOnAFullMemoryStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := idempotency.NewMemory(idempotency.WithMaxKeys(1))
	clock := clockwork.NewFakeClockAt(epoch)
	_, err := store.Claim(ctx, "other", "another consumer", clock.Now(), lease)
	require.NoError(t, err)
	rec := &recorder{}

	err = guard(rec, store, clock).Write(ctx, "order-1")
	require.ErrorIs(t, err, idempotency.ErrFull)
	assert.EqualError(t, err, `idempotency: claim (guard "store", key "order-1"): idempotency: memory store is full of live claims (max keys 1)`)
	assert.False(t, resilience.IsTransient(err), "the bound is too small for the claims in flight")
	assert.Empty(t, rec.items())
}

func TestGuardEmptyKey(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	g := idempotency.Sink[string](rec, idempotency.NewMemory(), func(string) string { return "" }, idempotency.WithName("orders"))

	err := g.Write(context.Background(), "order-1")
	require.ErrorIs(t, err, idempotency.ErrEmptyKey)
	assert.EqualError(t, err, `idempotency: key of item is empty (guard "orders")`)
	assert.False(t, resilience.IsTransient(err))
	assert.Empty(t, rec.items())

	g = idempotency.Sink[string](rec, idempotency.NewMemory(), func(string) string { return "" })
	assert.EqualError(t, g.Write(context.Background(), "order-1"), "idempotency: key of item is empty", "a guard without a name")
}

func TestGuardErrorCutsALongKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	key := strings.Repeat("k", 4096)
	_, err := store.Claim(ctx, key, "other", clock.Now(), lease)
	require.NoError(t, err)

	err = guard(&recorder{}, store, clock).Write(ctx, key)
	assert.EqualError(t, err, `idempotency: key claimed by another owner (guard "store", key "`+strings.Repeat("k", 64)+`"… (4096 bytes))`)
}

func TestGuardForwardsTheLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var inner pipelinetest.Collector[string]
	g := guard(&inner, idempotency.NewMemory(), clockwork.NewFakeClockAt(epoch))
	require.NoError(t, g.Open(ctx))
	require.NoError(t, g.Write(ctx, "a"))
	require.NoError(t, g.Flush(ctx))
	require.NoError(t, g.Close(ctx))
	opens, closes, flushes := inner.Lifecycle()
	assert.Equal(t, [3]int{1, 1, 1}, [3]int{opens, closes, flushes})
	assert.Equal(t, []string{"a"}, inner.Items())

	plain := guard(node.SinkFunc[string](func(context.Context, string) error { return nil }),
		idempotency.NewMemory(), clockwork.NewFakeClockAt(epoch))
	assert.NoError(t, plain.Open(ctx), "a sink without Open")
	assert.NoError(t, plain.Flush(ctx), "a sink without Flush")
	assert.NoError(t, plain.Close(ctx), "a sink without Close")

	boom := errors.New("boom")
	failing := guard(&lifecycleSink{err: boom}, idempotency.NewMemory(), clockwork.NewFakeClockAt(epoch))
	assert.Same(t, boom, failing.Open(ctx))
	assert.Same(t, boom, failing.Flush(ctx))
	assert.Same(t, boom, failing.Close(ctx))
}

// A lifecycleSink fails Open, Close and Flush with err.
type lifecycleSink struct{ err error }

func (s *lifecycleSink) Write(context.Context, string) error { return nil }
func (s *lifecycleSink) Open(context.Context) error          { return s.err }
func (s *lifecycleSink) Close(context.Context) error         { return s.err }
func (s *lifecycleSink) Flush(context.Context) error         { return s.err }

func TestGuardOwner(t *testing.T) {
	t.Parallel()
	store := idempotency.NewMemory()
	g := idempotency.Sink[string](&recorder{}, store, identity, idempotency.WithOwner("pod-7"))
	assert.Equal(t, "pod-7", g.Owner())
	require.NoError(t, g.Write(context.Background(), "k"))
	assert.NoError(t, store.Complete(context.Background(), "k", "pod-7", epoch), "the key was claimed as pod-7")
}

func TestSinkPanicsOnMisuse(t *testing.T) {
	t.Parallel()
	assert.PanicsWithValue(t, "sluice: idempotency.Sink: sink is nil; store is nil; key function is nil", func() {
		idempotency.Sink[string](nil, nil, nil)
	})
	assert.PanicsWithValue(t, `sluice: idempotency.Sink: WithLease(0s): must be more than 0; WithClock(nil): the clock must not be nil; `+
		`WithOwner(""): the owner must not be empty; WithStoreTimeout(-1s): must be more than 0`, func() {
		idempotency.Sink[string](&recorder{}, idempotency.NewMemory(), identity,
			idempotency.WithLease(0), idempotency.WithClock(nil), idempotency.WithOwner(""), idempotency.WithStoreTimeout(-time.Second))
	})
}
