package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/idempotency/redisstore"
	"github.com/sluicehq/sluice/idempotency/storetest"
	"github.com/sluicehq/sluice/internal/servicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// connect returns a client of the test server, or skips t.
func connect(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: servicetest.Redis(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

// uniquePrefix returns a key prefix no other test uses, and deletes its
// keys when t ends.
func uniquePrefix(t *testing.T, c *redis.Client) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "sluice:idem:test:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			assert.NoError(t, c.Del(ctx, iter.Val()).Err())
		}
		assert.NoError(t, iter.Err())
	})
	return prefix
}

func newStore(t *testing.T, c *redis.Client, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	opts = append([]redisstore.Option{redisstore.WithPrefix(uniquePrefix(t, c)), redisstore.WithRetention(storetest.Retention)}, opts...)
	s, err := redisstore.New(c, opts...)
	require.NoError(t, err)
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) idempotency.Store {
		return newStore(t, connect(t))
	})
}

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const lease = 30 * time.Second

// The server drops keys on its own clock too: a completed key after the
// retention, a claim after its lease and the retention.
func TestKeysExpireOnTheServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := connect(t)
	s := newStore(t, c, redisstore.WithRetention(time.Hour))

	_, err := s.Claim(ctx, "k", "a", epoch, lease)
	require.NoError(t, err)
	ttl, err := c.PTTL(ctx, s.RedisKey("k")).Result()
	require.NoError(t, err)
	assert.InDelta(t, (time.Hour + lease).Seconds(), ttl.Seconds(), 5, "a claim lives for its lease and the retention")

	require.NoError(t, s.Complete(ctx, "k", "a", epoch.Add(time.Second)))
	ttl, err = c.PTTL(ctx, s.RedisKey("k")).Result()
	require.NoError(t, err)
	assert.InDelta(t, time.Hour.Seconds(), ttl.Seconds(), 5, "a completed key lives for the retention")

	fields, err := c.HGetAll(ctx, s.RedisKey("k")).Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"state": "completed", "owner": "a", "done": "01772366401000000000"}, fields)
}

func TestPrefix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := connect(t)
	prefix := uniquePrefix(t, c)
	a, err := redisstore.New(c, redisstore.WithPrefix(prefix+"a:"))
	require.NoError(t, err)
	b, err := redisstore.New(c, redisstore.WithPrefix(prefix+"b:"))
	require.NoError(t, err)

	_, err = a.Claim(ctx, "k", "owner-1", epoch, lease)
	require.NoError(t, err)
	st, err := b.Claim(ctx, "k", "owner-2", epoch, lease)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Claimed, st, "stores with different prefixes share nothing")
	n, err := c.Exists(ctx, a.RedisKey("k"), b.RedisKey("k")).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(2), n)
	assert.True(t, strings.HasPrefix(a.RedisKey("k"), prefix+"a:"), a.RedisKey("k"))
	assert.Len(t, a.RedisKey("k"), len(prefix+"a:")+64, "the key's SHA-256 in hex")

	def, err := redisstore.New(c)
	require.NoError(t, err)
	assert.Equal(t, "sluice:idem:", def.Prefix())
}

func TestNewRefusesBadArguments(t *testing.T) {
	t.Parallel()
	_, err := redisstore.New(nil, redisstore.WithRetention(time.Microsecond))
	require.Error(t, err)
	assert.Equal(t, "redisstore: WithRetention(1µs): must be at least 1ms\nredisstore: client is nil", err.Error())
}

// A clock set to a date before 1970: a 30 s lease taken then lets another
// owner take the key an hour later. The saturating lease end first took
// now as 1970 and added the lease to that, so the lease ended 30 s after
// 1970 and the key stayed Busy (found by review). Times before 1970
// count as 1970, as stamp says.
func TestTakeoverAfterTheLeaseBefore1970(t *testing.T) {
	t.Parallel()
	s := newStore(t, connect(t))
	ctx := context.Background()
	t0 := time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)
	st, err := s.Claim(ctx, "k", "a", t0, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, idempotency.Claimed, st)
	st, err = s.Claim(ctx, "k", "b", t0.Add(time.Hour), 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, idempotency.Claimed, st, "the lease ended 59m30s ago")
}

// Stores whose prefixes start alike share no key: "charge" with key "21"
// and "charge2" with key "1" were one Redis key when the key followed the
// prefix as it is, and the second sink skipped its order 1 as a duplicate
// of the first's order 21. A key of any length, empty to a megabyte, is
// kept apart too.
func TestPrefixesThatStartAlikeShareNoKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := connect(t)
	base := uniquePrefix(t, c)
	charge, err := redisstore.New(c, redisstore.WithPrefix(base+"charge"))
	require.NoError(t, err)
	charge2, err := redisstore.New(c, redisstore.WithPrefix(base+"charge2"))
	require.NoError(t, err)
	st, err := charge.Claim(ctx, "21", "a", epoch, lease)
	require.NoError(t, err)
	require.Equal(t, idempotency.Claimed, st)
	require.NoError(t, charge.Complete(ctx, "21", "a", epoch))
	st, err = charge2.Claim(ctx, "1", "b", epoch, lease)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Claimed, st, "order 1 of charge2 was never written")

	huge := strings.Repeat("k", 1<<20)
	for _, key := range []string{huge, huge + "x"} {
		st, err := charge.Claim(ctx, key, "a", epoch, lease)
		require.NoError(t, err)
		assert.Equal(t, idempotency.Claimed, st, "a key of %d bytes", len(key))
	}
}
