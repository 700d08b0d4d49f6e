package idempotency_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/idempotency/storetest"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T) idempotency.Store {
		return idempotency.NewMemory(idempotency.WithRetention(storetest.Retention))
	})
}

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const lease = 30 * time.Second

func mustClaim(t *testing.T, m *idempotency.Memory, key, owner string, now time.Time) idempotency.State {
	t.Helper()
	st, err := m.Claim(context.Background(), key, owner, now, lease)
	require.NoError(t, err)
	return st
}

func TestMemoryFullEvictsTheOldestCompletedKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := idempotency.NewMemory(idempotency.WithMaxKeys(3))
	for i, k := range []string{"a", "b", "c"} {
		require.Equal(t, idempotency.Claimed, mustClaim(t, m, k, "o", epoch))
		require.NoError(t, m.Complete(ctx, k, "o", epoch.Add(time.Duration(i)*time.Second)))
	}
	require.Equal(t, 3, m.Len())

	assert.Equal(t, idempotency.Claimed, mustClaim(t, m, "d", "o", epoch.Add(time.Minute)))
	assert.Equal(t, 3, m.Len())
	assert.Equal(t, idempotency.Claimed, mustClaim(t, m, "a", "p", epoch.Add(time.Minute)), "a, completed first, was evicted")
	assert.Equal(t, idempotency.Completed, mustClaim(t, m, "c", "p", epoch.Add(time.Minute)), "c, completed last, was kept")
}

func TestMemoryFullEvictsLapsedClaimsFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := idempotency.NewMemory(idempotency.WithMaxKeys(2))
	require.Equal(t, idempotency.Claimed, mustClaim(t, m, "done", "o", epoch))
	require.NoError(t, m.Complete(ctx, "done", "o", epoch))
	require.Equal(t, idempotency.Claimed, mustClaim(t, m, "crashed", "x", epoch))

	assert.Equal(t, idempotency.Claimed, mustClaim(t, m, "new", "o", epoch.Add(lease)))
	assert.Equal(t, idempotency.Completed, mustClaim(t, m, "done", "p", epoch.Add(lease)), "the completed key was kept")
	// Evicted, the claim is still x's, as the Store contract says of a
	// claim whose lease ran out and no one took over: it completes.
	assert.NoError(t, m.Complete(ctx, "crashed", "x", epoch.Add(lease)))
	assert.Equal(t, idempotency.Completed, mustClaim(t, m, "crashed", "p", epoch.Add(lease)), "its completion was kept")
	assert.Equal(t, 2, m.Len())
}

// An evicted claim that another owner claimed since is lost to its first
// owner, whose Complete says so; and one its owner released is gone.
func TestMemoryEvictedClaimTakenOverIsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := idempotency.NewMemory(idempotency.WithMaxKeys(1))
	require.Equal(t, idempotency.Claimed, mustClaim(t, m, "a", "x", epoch))
	require.Equal(t, idempotency.Claimed, mustClaim(t, m, "b", "y", epoch.Add(lease)), "a's lapsed claim was evicted")
	require.NoError(t, m.Release(ctx, "b", "y"))
	require.Equal(t, idempotency.Claimed, mustClaim(t, m, "a", "p", epoch.Add(lease)), "p takes a over")
	assert.ErrorIs(t, m.Complete(ctx, "a", "x", epoch.Add(lease)), idempotency.ErrLostClaim)
	require.NoError(t, m.Complete(ctx, "a", "p", epoch.Add(lease)))

	m = idempotency.NewMemory(idempotency.WithMaxKeys(1))
	require.Equal(t, idempotency.Claimed, mustClaim(t, m, "a", "x", epoch))
	require.Equal(t, idempotency.Claimed, mustClaim(t, m, "b", "y", epoch.Add(lease)))
	require.NoError(t, m.Release(ctx, "a", "x"))
	assert.ErrorIs(t, m.Complete(ctx, "a", "x", epoch.Add(lease)), idempotency.ErrLostClaim, "released, the claim is gone")
}

// The store remembers the owners of at most as many evicted claims as it
// holds keys: past that, the oldest one's Complete fails, as a claim lost.
func TestMemoryRemembersBoundedEvictedClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := idempotency.NewMemory(idempotency.WithMaxKeys(2))
	now := epoch
	keys := []string{"k0", "k1", "k2", "k3", "k4"}
	for _, k := range keys {
		require.Equal(t, idempotency.Claimed, mustClaim(t, m, k, "o-"+k, now))
		now = now.Add(lease) // each claim lapses before the next key but one comes
	}
	// k2 found k0 and k1 lapsed and evicted them, k4 evicted k2 and k3:
	// the store remembers the last two.
	assert.ErrorIs(t, m.Complete(ctx, "k0", "o-k0", now), idempotency.ErrLostClaim, "the oldest were forgotten")
	assert.ErrorIs(t, m.Complete(ctx, "k1", "o-k1", now), idempotency.ErrLostClaim)
	assert.NoError(t, m.Complete(ctx, "k2", "o-k2", now))
	assert.NoError(t, m.Complete(ctx, "k3", "o-k3", now))
	assert.Equal(t, idempotency.Completed, mustClaim(t, m, "k3", "p", now))
	assert.LessOrEqual(t, m.Len(), 2)
}

func TestMemoryFullOfLiveClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := idempotency.NewMemory(idempotency.WithMaxKeys(2))
	require.Equal(t, idempotency.Claimed, mustClaim(t, m, "a", "o", epoch))
	require.Equal(t, idempotency.Claimed, mustClaim(t, m, "b", "o", epoch))

	_, err := m.Claim(ctx, "c", "o", epoch.Add(time.Second), lease)
	require.ErrorIs(t, err, idempotency.ErrFull)
	assert.EqualError(t, err, "idempotency: memory store is full of live claims (max keys 2)")
	assert.Equal(t, idempotency.Busy, mustClaim(t, m, "a", "p", epoch.Add(time.Second)), "a full store still answers for the keys it holds")

	require.NoError(t, m.Release(ctx, "a", "o"))
	assert.Equal(t, idempotency.Claimed, mustClaim(t, m, "c", "o", epoch.Add(time.Second)))
}

func TestMemoryDropsKeysPastTheRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := idempotency.NewMemory(idempotency.WithRetention(time.Hour))
	for i := range 10 {
		k := fmt.Sprint(i)
		require.Equal(t, idempotency.Claimed, mustClaim(t, m, k, "o", epoch))
		require.NoError(t, m.Complete(ctx, k, "o", epoch.Add(time.Duration(i)*time.Minute)))
	}
	require.Equal(t, 10, m.Len())

	mustClaim(t, m, "x", "o", epoch.Add(time.Hour+4*time.Minute))
	assert.Equal(t, 6, m.Len(), "the five keys completed an hour or more before were dropped, and x was added")
}

func TestMemoryZeroValueIsReady(t *testing.T) {
	t.Parallel()
	var m idempotency.Memory
	assert.Equal(t, idempotency.Claimed, mustClaim(t, &m, "k", "a", epoch))
	require.NoError(t, m.Complete(context.Background(), "k", "a", epoch))
	assert.Equal(t, idempotency.Completed, mustClaim(t, &m, "k", "b", epoch.Add(idempotency.DefaultRetention-time.Nanosecond)))
	assert.Equal(t, idempotency.Claimed, mustClaim(t, &m, "k", "b", epoch.Add(idempotency.DefaultRetention)))
	assert.Equal(t, 1, m.Len())
}

func TestMemoryOptionsPanic(t *testing.T) {
	t.Parallel()
	assert.PanicsWithValue(t, "sluice: idempotency.NewMemory: WithMaxKeys(0): must be at least 1", func() {
		idempotency.NewMemory(idempotency.WithMaxKeys(0))
	})
	assert.PanicsWithValue(t, "sluice: idempotency.NewMemory: WithRetention(-1s): must be more than 0", func() {
		idempotency.NewMemory(idempotency.WithRetention(-time.Second))
	})
}

func TestStateString(t *testing.T) {
	t.Parallel()
	for st, want := range map[idempotency.State]string{
		idempotency.Claimed: "claimed", idempotency.Completed: "completed", idempotency.Busy: "busy", 9: "State(9)",
	} {
		assert.Equal(t, want, st.String())
	}
}

// A claim evicted, claimed again by its owner and evicted again is the
// newest evicted claim: its owner's Complete completes. The record of its
// first eviction, pushed out by the bound, forgot the second one (a
// review's finding).
func TestMemoryReLapsedClaimIsTheNewest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := idempotency.NewMemory(idempotency.WithMaxKeys(3))
	claim := func(key, owner string, now time.Time, l time.Duration) {
		t.Helper()
		st, err := m.Claim(ctx, key, owner, now, l)
		require.NoError(t, err)
		require.Equal(t, idempotency.Claimed, st)
	}
	claim("K", "A", epoch, lease)
	claim("X", "B", epoch.Add(time.Second), lease)
	claim("Y", "C", epoch.Add(2*time.Second), lease)
	t1 := epoch.Add(2*time.Second + lease)
	claim("W", "D", t1, 10*lease) // evicts K, X and Y, all lapsed
	claim("K", "A", t1, lease)    // A claims K again
	claim("V", "E", t1, 10*lease) // full: W, K, V
	t2 := t1.Add(lease)
	claim("U", "F", t2, lease) // evicts K alone: the newest lapse
	assert.NoError(t, m.Complete(ctx, "K", "A", t2), "no one claimed K since its second eviction")
	assert.NoError(t, m.Complete(ctx, "X", "B", t2), "X's eviction is still remembered: three, with K's")
}
