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
	assert.ErrorIs(t, m.Complete(ctx, "crashed", "x", epoch.Add(lease)), idempotency.ErrLostClaim, "the lapsed claim was evicted")
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
