package idempotency_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
)

// A write whose completion failed (the store away), and whose claim is
// found lost on the retry that records it (the lease ran out, and another
// owner took the key over and wrote the item too), is counted in
// LostClaims: the rows written twice stay at most Unknown plus
// LostClaims. It is counted once, however many retries find the claim
// lost, and the busy answers on the way count in Busy.
func TestLostClaimAfterAFailedCompletionIsCounted(t *testing.T) {
	t.Parallel()
	for _, busyFirst := range []bool{false, true} {
		name := "taken over and completed"
		if busyFirst {
			name = "taken over, busy on the first retry"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			mem := idempotency.NewMemory()
			clock := clockwork.NewFakeClockAt(epoch)
			fs := &faultyStore{Store: mem, completeErr: resilience.MarkBlameless(errors.New("store unreachable"))}
			rec := &recorder{}
			a := guard(rec, fs, clock, idempotency.WithOwner("a"))
			require.Error(t, a.Write(ctx, "order-1"), "the completion failed")
			fs.completeErr = nil
			clock.Advance(lease)
			wantBusy := int64(0)
			if busyFirst {
				// b holds the key, writing it: a's retry is refused.
				st, err := mem.Claim(ctx, "order-1", "b", clock.Now(), lease)
				require.NoError(t, err)
				require.Equal(t, idempotency.Claimed, st)
				err = a.Write(ctx, "order-1")
				require.ErrorIs(t, err, idempotency.ErrInProgress)
				assert.True(t, resilience.IsBlameless(err), "a busy key is not the item's fault")
				assert.Equal(t, int64(1), a.Stats().LostClaims, "counted when first found lost")
				wantBusy = 1
				require.NoError(t, rec.Write(ctx, "order-1")) // b's write
				require.NoError(t, mem.Complete(ctx, "order-1", "b", clock.Now()))
			} else {
				b := guard(rec, mem, clock, idempotency.WithOwner("b"))
				require.NoError(t, b.Write(ctx, "order-1"))
			}
			require.NoError(t, a.Write(ctx, "order-1"), "a's retry finds it recorded by b")
			assert.Equal(t, []string{"order-1", "order-1"}, rec.items(), "written twice")
			st := a.Stats()
			assert.Equal(t, int64(1), st.LostClaims, "%+v", st)
			assert.Equal(t, wantBusy, st.Busy, "%+v", st)
			assert.Equal(t, int64(1), st.Written, "%+v", st)
			// Nothing is left pending: a later duplicate is absorbed.
			require.NoError(t, a.Write(ctx, "order-1"))
			assert.Equal(t, int64(1), a.Stats().Duplicates)
			assert.Len(t, rec.items(), 2)
		})
	}
}

// A memory store full of live claims is not the item's fault: its
// ErrFull is marked blameless, so that a tracked item is delivered again
// rather than dead-lettered, and stays permanent (retrying at once does
// not help).
func TestErrFullIsNotTheItemsFault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := idempotency.NewMemory(idempotency.WithMaxKeys(1))
	clock := clockwork.NewFakeClockAt(epoch)
	_, err := store.Claim(ctx, "other", "another consumer", clock.Now(), lease)
	require.NoError(t, err)
	_, err = store.Claim(ctx, "order-1", "me", clock.Now(), lease)
	require.ErrorIs(t, err, idempotency.ErrFull)
	assert.True(t, resilience.IsBlameless(err), "the store's own error")
	err = guard(&recorder{}, store, clock).Write(ctx, "order-1")
	require.ErrorIs(t, err, idempotency.ErrFull)
	assert.True(t, resilience.IsBlameless(err), "the guard keeps the mark")
	assert.False(t, resilience.IsTransient(err), "permanent: the bound is too small")
}

// A write that overran its lease and then failed releases the claim: the
// store leaves the claim another owner took over alone, and the guard
// counts the release in Released all the same, as its godoc says.
func TestReleaseOfAClaimTakenOverLeavesItAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := idempotency.NewMemory()
	clock := clockwork.NewFakeClockAt(epoch)
	rec := &recorder{hook: func(context.Context, string) error {
		clock.Advance(lease) // the write overruns its lease
		st, err := mem.Claim(ctx, "order-1", "b", clock.Now(), lease)
		if err != nil || st != idempotency.Claimed {
			return errors.Join(err, errors.New("b did not take the key over"))
		}
		return errors.New("constraint violated")
	}}
	a := guard(rec, mem, clock, idempotency.WithOwner("a"))
	err := a.Write(ctx, "order-1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "constraint violated")
	st, err := mem.Claim(ctx, "order-1", "c", clock.Now(), lease)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Busy, st, "b still holds the key")
	assert.Equal(t, int64(1), a.Stats().Released)
}
