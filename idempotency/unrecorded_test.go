package idempotency_test

import (
	"context"
	"errors"
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
	for i := range 130 { // enough new marks to sweep the old ones
		require.Error(t, g.Write(ctx, "filler-"+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	fs.completeErr = nil
	require.NoError(t, g.Write(ctx, "order-2"), "forgotten: claimed and written again")
	assert.Equal(t, 2, count(rec.items(), "order-2"))
	assert.Equal(t, int64(132), g.Stats().Unrecorded)
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
