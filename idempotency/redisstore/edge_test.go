package redisstore_test

// Edge cases of the store: a retention kept for ever, takeovers racing
// completions.

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/idempotency/redisstore"
)

// WithRetention(math.MaxInt64) ("keep forever"): a claim lives its lease
// and more on the server (the time to live saturates at 100 years instead
// of wrapping to 1 ms), so no other owner claims the key while the first
// is still writing.
func TestForeverRetentionClaimTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := connect(t)
	s := newStore(t, c, redisstore.WithRetention(time.Duration(math.MaxInt64)))
	st, err := s.Claim(ctx, "k", "a", epoch, lease)
	require.NoError(t, err)
	require.Equal(t, idempotency.Claimed, st)
	ttl, err := c.PTTL(ctx, s.RedisKey("k")).Result()
	require.NoError(t, err)
	t.Logf("PTTL of a fresh claim: %v", ttl)
	assert.Greater(t, ttl, lease, "a claim outlives its lease on the server")
}

// Many clients race to take over an expired lease while the old owner
// completes; exactly one of the two outcomes.
func TestTakeoverRacesComplete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := connect(t)
	prefix := uniquePrefix(t, base)
	var stores []*redisstore.Store
	for range 8 {
		c := connect(t)
		s, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithRetention(time.Hour))
		require.NoError(t, err)
		stores = append(stores, s)
	}
	outcomes := map[string]int{}
	for round := range 100 {
		key := fmt.Sprint("race-", round)
		st, err := stores[0].Claim(ctx, key, "old", epoch, lease)
		require.NoError(t, err)
		require.Equal(t, idempotency.Claimed, st)
		now := epoch.Add(lease)
		states := make([]idempotency.State, len(stores))
		var completeErr error
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { <-start; completeErr = stores[round%len(stores)].Complete(ctx, key, "old", now) })
		for i, s := range stores {
			wg.Go(func() {
				<-start
				var err error
				states[i], err = s.Claim(ctx, key, fmt.Sprint("new-", i), now, lease)
				assert.NoError(t, err)
			})
		}
		close(start)
		wg.Wait()
		claimed := 0
		for _, st := range states {
			if st == idempotency.Claimed {
				claimed++
			}
		}
		if completeErr == nil {
			assert.Zero(t, claimed, "round %d", round)
			outcomes["complete"]++
		} else {
			require.ErrorIs(t, completeErr, idempotency.ErrLostClaim)
			assert.Equal(t, 1, claimed, "round %d", round)
			outcomes["takeover"]++
		}
	}
	t.Logf("outcomes %v", outcomes)
}
