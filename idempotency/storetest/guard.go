package storetest

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
	"github.com/sluicehq/sluice/node"
)

// guardKeepsTheClaimOfAnUnknownWrite checks a Guard over the store: a
// write whose outcome is unknown (its context ended, a deadline passed, or
// the sink said so with ErrUnknownOutcome) keeps its claim until the lease
// ends, for the guard itself and for other owners, and is counted in
// Stats.Unknown; a write that failed for sure releases its claim at once.
// Released at once, a write that committed but reported context.Canceled
// was written again by the next delivery.
func guardKeepsTheClaimOfAnUnknownWrite(t *testing.T, s idempotency.Store) {
	ctx := context.Background()
	for i, tc := range []struct {
		name   string
		err    error
		cancel bool // the write's context ends during the write
	}{
		{"canceled", fmt.Errorf("insert: %w", context.Canceled), false},
		{"deadline", context.DeadlineExceeded, false},
		{"unknown", fmt.Errorf("commit: connection reset: %w", idempotency.ErrUnknownOutcome), false},
		{"context done", errors.New("driver: bad connection"), true},
	} {
		key := fmt.Sprintf("unknown-%d", i)
		clock := clockwork.NewFakeClockAt(t0)
		wctx, cancel := context.WithCancel(ctx)
		writes := 0
		sink := node.SinkFunc[string](func(context.Context, string) error {
			writes++
			if writes == 1 {
				if tc.cancel {
					cancel()
				}
				return tc.err
			}
			return nil
		})
		id := func(s string) string { return s }
		a := idempotency.Sink(sink, s, id, idempotency.WithClock(clock), idempotency.WithLease(lease), idempotency.WithOwner("a"))
		b := idempotency.Sink(sink, s, id, idempotency.WithClock(clock), idempotency.WithLease(lease), idempotency.WithOwner("b"))

		require.Error(t, a.Write(wctx, key), tc.name)
		cancel()
		assert.Equal(t, int64(1), a.Stats().Unknown, "%s: counted as unknown", tc.name)
		assert.Zero(t, a.Stats().Released, "%s: the claim is not released", tc.name)
		clock.Advance(lease - time.Nanosecond)
		assert.ErrorIs(t, a.Write(ctx, key), idempotency.ErrInProgress, "%s: the guard itself waits for the lease", tc.name)
		assert.ErrorIs(t, b.Write(ctx, key), idempotency.ErrInProgress, "%s: another owner waits for the lease", tc.name)
		assert.Equal(t, 1, writes, "%s: not written again within the lease", tc.name)

		clock.Advance(time.Nanosecond)
		require.NoError(t, b.Write(ctx, key), tc.name)
		assert.Equal(t, 2, writes, "%s: written again once the lease ended", tc.name)
		require.NoError(t, a.Write(ctx, key), tc.name)
		assert.Equal(t, 2, writes, "%s: then a duplicate", tc.name)
	}

	// A write that failed for sure, under a live context, releases its
	// claim: the next delivery writes it at once.
	clock := clockwork.NewFakeClockAt(t0)
	writes := 0
	sink := node.SinkFunc[string](func(context.Context, string) error {
		writes++
		if writes == 1 {
			return errors.New("constraint violated")
		}
		return nil
	})
	g := idempotency.Sink(sink, s, func(s string) string { return s }, idempotency.WithClock(clock), idempotency.WithLease(lease))
	require.Error(t, g.Write(ctx, "failed"))
	require.NoError(t, g.Write(ctx, "failed"))
	assert.Equal(t, 2, writes)
	assert.Equal(t, idempotency.Stats{Written: 1, Released: 1}, g.Stats())
}
