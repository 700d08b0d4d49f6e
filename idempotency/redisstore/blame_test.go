package redisstore_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/idempotency/redisstore"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// A Redis server that is down is not the item's fault: every error of the
// store's calls is marked blameless, and the guard passes the mark on
// with its transient one.
func TestStoreErrorsAreBlameless(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now: refused
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond, DialTimeout: 5 * time.Second})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c)
	require.NoError(t, err)
	ctx := t.Context()

	_, err = s.Claim(ctx, "order-1", "owner", epoch, lease)
	require.Error(t, err)
	assert.True(t, resilience.IsBlameless(err), "claim: %v", err)
	err = s.Complete(ctx, "order-1", "owner", epoch)
	require.Error(t, err)
	assert.NotErrorIs(t, err, idempotency.ErrLostClaim, "a failure, not an answer")
	assert.True(t, resilience.IsBlameless(err), "complete: %v", err)
	err = s.Release(ctx, "order-1", "owner")
	require.Error(t, err)
	assert.True(t, resilience.IsBlameless(err), "release: %v", err)

	var wrote int
	inner := node.SinkFunc[string](func(_ context.Context, _ string) error { wrote++; return nil })
	g := idempotency.Sink[string](inner, s, func(v string) string { return v },
		idempotency.WithClock(clockwork.NewFakeClockAt(epoch)))
	err = g.Write(ctx, "order-1")
	require.Error(t, err)
	assert.True(t, resilience.IsBlameless(err), "the guard keeps the mark: %v", err)
	assert.True(t, resilience.IsTransient(err), "and retries the item: %v", err)
	assert.Zero(t, wrote)
}

// The answer that a claim was lost is no failure, and keeps its identity.
func TestLostClaimIsNotMarked(t *testing.T) {
	t.Parallel()
	s := newStore(t, connect(t))
	err := s.Complete(t.Context(), "never-claimed", "owner", epoch)
	require.ErrorIs(t, err, idempotency.ErrLostClaim)
	assert.False(t, resilience.IsBlameless(err))
}
