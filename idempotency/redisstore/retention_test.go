package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/idempotency/redisstore"
)

// Of two stores sharing a prefix with different retentions, a Claim
// counts a completion as expired by its own store's retention, as
// WithRetention and docs/idempotency.md say (sqlstore keeps the
// completing store's, written in the row): a review found the two
// backends differing and neither saying which counts.
func TestRetentionOfTheClaimingStoreCounts(t *testing.T) {
	t.Parallel()
	c := connect(t)
	ctx := context.Background()
	long := newStore(t, c, redisstore.WithRetention(time.Hour))
	short, err := redisstore.New(c, redisstore.WithPrefix(long.Prefix()), redisstore.WithRetention(time.Minute))
	require.NoError(t, err)
	now := time.Now()
	for _, k := range []string{"a", "b"} {
		st, err := long.Claim(ctx, k, "A", now, time.Second)
		require.NoError(t, err)
		require.Equal(t, idempotency.Claimed, st)
		require.NoError(t, long.Complete(ctx, k, "A", now))
	}
	st, err := long.Claim(ctx, "a", "B", now.Add(2*time.Minute), time.Second)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Completed, st, "within the claiming store's hour")
	st, err = short.Claim(ctx, "b", "B", now.Add(2*time.Minute), time.Second)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Claimed, st, "past the claiming store's minute")
}
