package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// An item whose completion kept failing until its retries ran out was
// written and not recorded: a redelivery to another guard after the lease
// writes it again. Its first guard counted it in Unrecorded, so the rows
// written twice stay within Unknown plus LostClaims plus Unrecorded.
func TestGivenUpCompletionIsCountedUnrecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	fs := &faultyStore{Store: mem, completeErr: errors.New("store unreachable")}
	rec := &recorder{}
	a := guard(rec, fs, clock, idempotency.WithOwner("a"))
	for range 3 {
		require.Error(t, a.Write(ctx, "order-1"), "the store away: the retries run out")
	}
	fs.completeErr = nil
	clock.Advance(lease)
	b := guard(rec, mem, clock, idempotency.WithOwner("b"))
	require.NoError(t, b.Write(ctx, "order-1"), "the redelivery, after the lease")
	require.Equal(t, []string{"order-1", "order-1"}, rec.items(), "written twice")
	sa, sb := a.Stats(), b.Stats()
	assert.Equal(t, idempotency.Stats{Written: 1, Unrecorded: 1}, sa)
	assert.Equal(t, idempotency.Stats{Written: 1}, sb)
	twice := int64(len(rec.items()) - 1)
	assert.True(t, twice <= sa.Unknown+sa.LostClaims+sa.Unrecorded+sb.Unknown+sb.LostClaims+sb.Unrecorded,
		"the rows written twice are within the counts: %+v %+v", sa, sb)
}

// panicComplete panics in its first Complete.
type panicComplete struct {
	idempotency.Store
	panicked bool
}

func (s *panicComplete) Complete(ctx context.Context, key, owner string, now time.Time) error {
	if !s.panicked {
		s.panicked = true
		panic("the store's driver has a bug")
	}
	return s.Store.Complete(ctx, key, owner, now)
}

// A Complete that panics after the item was written leaves the key
// pending, as a failed one does: the item's retry (the engine turns the
// panic into the item's error) records the key and does not write it
// again.
func TestPanicInCompleteIsRecordedByTheRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := idempotency.NewMemory()
	rec := &recorder{}
	g := guard(rec, &panicComplete{Store: mem}, clockwork.NewFakeClockAt(epoch))
	func() {
		defer func() { require.NotNil(t, recover(), "the panic goes on up") }()
		_ = g.Write(ctx, "order-1")
	}()
	require.NoError(t, g.Write(ctx, "order-1"), "the retry records the key")
	assert.Equal(t, []string{"order-1"}, rec.items(), "written once")
	assert.Equal(t, idempotency.Stats{Written: 1, Unrecorded: 1}, g.Stats())
	st, err := mem.Claim(ctx, "order-1", "other", epoch, lease)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Completed, st)
}

// A write not recorded is remembered a lease after its claim's lease
// ended, then forgotten: a retry that comes later than that claims and
// writes the item again (counted in Unrecorded already). Before, the
// guard remembered it for ever, one entry per item given up.
func TestUnrecordedWriteIsForgottenTwoLeasesOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	fs := &faultyStore{Store: mem, completeErr: errors.New("store unreachable")}
	rec := &recorder{}
	g := guard(rec, fs, clock)
	require.Error(t, g.Write(ctx, "order-1"))
	clock.Advance(2*lease - 1)
	fs.completeErr = nil
	require.NoError(t, g.Write(ctx, "order-1"), "within two leases: recorded, not written again")
	assert.Equal(t, []string{"order-1"}, rec.items())

	fs.completeErr = errors.New("store unreachable")
	require.Error(t, g.Write(ctx, "order-2"))
	clock.Advance(2 * lease)
	fs.completeErr = nil
	require.NoError(t, g.Write(ctx, "order-2"), "forgotten: claimed and written again")
	assert.Equal(t, 2, count(rec.items(), "order-2"))
	assert.Equal(t, int64(2), g.Stats().Unrecorded)
}

func count(items []string, item string) int {
	n := 0
	for _, it := range items {
		if it == item {
			n++
		}
	}
	return n
}

// A mark is forgotten once its time has passed, also when the guard holds
// fewer marks than a sweep waits for: a later item with the key, after
// the store's retention, is written, not taken for the old write's
// record (which the store answered as a lost claim).
func TestPendingMarkPastItsTimeIsForgottenWithoutASweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := idempotency.NewMemory(idempotency.WithRetention(time.Hour))
	clock := clockwork.NewFakeClockAt(epoch)
	fs := &faultyStore{Store: mem, completeErr: errors.New("store unreachable")}
	rec := &recorder{}
	a := guard(rec, fs, clock, idempotency.WithOwner("a"))
	require.Error(t, a.Write(ctx, "order-1"), "the retries run out")
	fs.completeErr = nil
	clock.Advance(lease)
	b := guard(rec, mem, clock, idempotency.WithOwner("b"))
	require.NoError(t, b.Write(ctx, "order-1"))
	clock.Advance(3 * time.Hour) // past two leases, and the retention
	require.NoError(t, a.Write(ctx, "order-1"))
	assert.Equal(t, 3, count(rec.items(), "order-1"), "a new item with the key, written")
	assert.Equal(t, idempotency.Stats{Written: 2, Unrecorded: 1}, a.Stats(), "no claim was lost")
}

// scriptedComplete answers the Completes of key with script, in turn,
// then with the store's own answers; other keys' Completes always fail.
type scriptedComplete struct {
	idempotency.Store
	key    string
	script []error
}

func (s *scriptedComplete) Complete(ctx context.Context, key, owner string, now time.Time) error {
	if key != s.key {
		return errors.New("store unreachable")
	}
	if len(s.script) > 0 {
		err := s.script[0]
		s.script = s.script[1:]
		return err
	}
	return s.Store.Complete(ctx, key, owner, now)
}

// A mark lasts two leases from the last failure that kept it, not from
// the first: after a lost claim the guard claims the key again (a new
// lease), and a sweep between the first mark's time and the end of that
// lease must not forget the write, or the item's retry, granted the
// guard's own claim, writes it again.
func TestPendingMarkOutlivesTheGuardsNewClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	unreachable := errors.New("store unreachable")
	st := &scriptedComplete{Store: mem, key: "order-1", script: []error{unreachable, idempotency.ErrLostClaim, unreachable}}
	rec := &recorder{}
	g := guard(rec, st, clock, idempotency.WithOwner("a"))
	require.Error(t, g.Write(ctx, "order-1"))
	for i := range 63 {
		require.Error(t, g.Write(ctx, fmt.Sprint("filler-", i)))
	}
	clock.Advance(lease * 3 / 2)
	require.Error(t, g.Write(ctx, "order-1"), "the claim lost, taken again, the completion failed")
	clock.Advance(lease * 6 / 10)
	require.Error(t, g.Write(ctx, "filler-new"), "the 65th mark sweeps")
	clock.Advance(lease / 10)
	require.NoError(t, g.Write(ctx, "order-1"), "recorded")
	assert.Equal(t, 1, count(rec.items(), "order-1"), "written once")
	s := g.Stats()
	assert.Equal(t, int64(1), s.LostClaims)
}

// A Complete that panics on the path that records a write whose claim was
// lost counts as the same failure returned as an error does: in
// LostClaims, not in Unrecorded too.
func TestPanicAfterALostClaimCountsOnce(t *testing.T) {
	t.Parallel()
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprint("panics ", panics), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			mem := idempotency.NewMemory()
			st := &lostThenFailing{Store: mem, panics: panics}
			rec := &recorder{}
			g := guard(rec, st, clockwork.NewFakeClockAt(epoch))
			func() {
				defer func() { _ = recover() }()
				_ = g.Write(ctx, "order-1")
			}()
			require.NoError(t, g.Write(ctx, "order-1"))
			assert.Equal(t, []string{"order-1"}, rec.items())
			assert.Equal(t, idempotency.Stats{Written: 1, LostClaims: 1}, g.Stats())
		})
	}
}

// lostThenFailing answers the first Complete with ErrLostClaim, fails (or
// panics in) the second, and passes the rest to the store.
type lostThenFailing struct {
	idempotency.Store
	panics bool
	calls  int
}

func (s *lostThenFailing) Complete(ctx context.Context, key, owner string, now time.Time) error {
	s.calls++
	switch s.calls {
	case 1:
		return idempotency.ErrLostClaim
	case 2:
		if s.panics {
			panic("the store's driver has a bug")
		}
		return errors.New("store unreachable")
	}
	return s.Store.Complete(ctx, key, owner, now)
}

// scriptedStore answers Completes from script in turn (an error, nil, or
// "panic"), moving clock by adv's entry first when given, then passes
// them to the store.
type scriptedStore struct {
	idempotency.Store
	clock  *clockwork.FakeClock
	script []any
	adv    []time.Duration
	calls  int
}

func (s *scriptedStore) Complete(ctx context.Context, key, owner string, now time.Time) error {
	i := s.calls
	s.calls++
	if i < len(s.adv) {
		s.clock.Advance(s.adv[i])
	}
	if i >= len(s.script) {
		return s.Store.Complete(ctx, key, owner, now)
	}
	if s.script[i] == "panic" {
		panic("the store's driver has a bug")
	}
	err, _ := s.script[i].(error)
	return err
}

// A retry that finds the claim lost claims the key again; a Complete that
// then panics leaves the write marked while that new claim lives, so the
// next retry, granted the guard's own claim, records the item and does
// not write it again.
func TestPanicAfterTheClaimTakenAgainKeepsTheWriteMarked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	st := &scriptedStore{Store: mem, clock: clock, script: []any{errors.New("store unreachable"), idempotency.ErrLostClaim, "panic"}}
	rec := &recorder{}
	g := guard(rec, st, clock, idempotency.WithOwner("a"))
	require.Error(t, g.Write(ctx, "order-1"))
	clock.Advance(lease * 19 / 10)
	func() {
		defer func() { require.NotNil(t, recover()) }()
		_ = g.Write(ctx, "order-1") // lost, claimed again, Complete panics
	}()
	clock.Advance(lease * 2 / 10) // past the first mark's time; the new claim lives
	require.NoError(t, g.Write(ctx, "order-1"))
	assert.Equal(t, 1, count(rec.items(), "order-1"), "written once")
	assert.Equal(t, int64(1), g.Stats().LostClaims)
}

// A Complete that takes past the mark's time (a store timeout longer than
// the lease) and fails keeps the write's mark and its counts: the write
// is counted in Unrecorded once, not again as a new one.
func TestSlowFailedCompleteCountsTheWriteOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(epoch)
	unreachable := errors.New("store unreachable")
	st := &scriptedStore{Store: idempotency.NewMemory(), clock: clock, script: []any{unreachable, unreachable},
		adv: []time.Duration{0, lease + time.Second}}
	rec := &recorder{}
	g := guard(rec, st, clock)
	require.Error(t, g.Write(ctx, "order-1"))
	clock.Advance(lease)
	require.Error(t, g.Write(ctx, "order-1"))
	assert.Equal(t, idempotency.Stats{Written: 1, Unrecorded: 1}, g.Stats())
	require.NoError(t, g.Write(ctx, "order-1"), "recorded by the next retry")
	assert.Equal(t, []string{"order-1"}, rec.items())
}
