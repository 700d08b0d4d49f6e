package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
)

// claimAnswerLost wraps a store: the claim number failAt made by owner
// is committed in the store, then its answer is lost.
type claimAnswerLost struct {
	idempotency.Store
	owner  string
	failAt int64
	n      atomic.Int64
}

func (s *claimAnswerLost) Claim(ctx context.Context, key, owner string, now time.Time, lease time.Duration) (idempotency.State, error) {
	st, err := s.Store.Claim(ctx, key, owner, now, lease)
	if owner == s.owner && s.n.Add(1) == s.failAt {
		return 0, errors.New("store: claim: read reply: i/o timeout")
	}
	return st, err
}

// A write that overran its lease finds its claim lost. The guard records
// the write once the key is free: when its claim to record it fails (its
// answer lost), or another owner still holds the key, Write returns a
// transient error and keeps the write to record, and the item's retry
// records it without writing again. The item is written once.
func TestLostClaimRecordedOnceTheKeyIsFree(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		name      string
		failAt    int64 // the slow guard's claim whose answer is lost; 0: none
		otherHold bool  // the owner that took the key over still holds it
	}{
		{name: "claim answer lost", failAt: 2},
		{name: "other owner holds the key", otherHold: true},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			clock := clockwork.NewFakeClockAt(epoch)
			entered, proceed := make(chan struct{}), make(chan struct{})
			var calls atomic.Int64
			slowRec := &recorder{hook: func(context.Context, string) error {
				if calls.Add(1) == 1 {
					close(entered)
					<-proceed
				}
				return nil
			}}
			store := &claimAnswerLost{Store: idempotency.NewMemory(), owner: "slow", failAt: v.failAt}
			slow := guard(slowRec, store, clock, idempotency.WithOwner("slow"))
			done := make(chan error, 1)
			go func() { done <- slow.Write(ctx, "pay-1") }()
			select {
			case <-entered:
			case <-time.After(20 * time.Second):
				t.Fatal("the write did not start")
			}
			clock.Advance(lease)
			if v.otherHold {
				st, err := store.Claim(ctx, "pay-1", "other", clock.Now(), lease)
				require.NoError(t, err)
				require.Equal(t, idempotency.Claimed, st)
			} else {
				failing := guard(&recorder{hook: func(context.Context, string) error { return fmt.Errorf("card API down") }}, store, clock)
				require.Error(t, failing.Write(ctx, "pay-1")) // took the key over, failed, released it
			}
			close(proceed)
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the write hung")
			}
			require.Error(t, err, "the write is not recorded yet")
			assert.True(t, resilience.IsTransient(err), "%v", err)
			if v.otherHold {
				assert.ErrorIs(t, err, idempotency.ErrInProgress)
				assert.True(t, resilience.IsBlameless(err), "%v", err)
				require.Error(t, slow.Write(ctx, "pay-1"), "still held by the other owner")
				require.NoError(t, store.Release(ctx, "pay-1", "other"))
			}
			require.NoError(t, slow.Write(ctx, "pay-1"), "the retry records the write")
			assert.Equal(t, []string{"pay-1"}, slowRec.items(), "written once")
			assert.Equal(t, int64(1), slow.Stats().Written)
			assert.Equal(t, int64(1), slow.Stats().LostClaims)
			require.NoError(t, slow.Write(ctx, "pay-1"), "a redelivery")
			assert.Equal(t, []string{"pay-1"}, slowRec.items(), "a redelivery finds it completed")
		})
	}
}

// A guard made anew with the owner of one whose write had an unknown
// outcome (a restarted process with a stable WithOwner) knows nothing of
// that write: the store grants it the claim at once, inside the lease,
// and it writes the item again, as docs/idempotency.md ("Owners") says.
// Under the default owner, a guard made anew finds the key busy until the
// lease ends.
func TestRestartedSameOwnerTakesBackAnUnknownWrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, stable := range []bool{true, false} {
		clock := clockwork.NewFakeClockAt(epoch)
		store := idempotency.NewMemory()
		var opts []idempotency.Option
		if stable {
			opts = append(opts, idempotency.WithOwner("pod-0"))
		}
		first := &recorder{hook: func(context.Context, string) error {
			return fmt.Errorf("commit reply lost: %w", idempotency.ErrUnknownOutcome)
		}}
		require.Error(t, guard(first, store, clock, opts...).Write(ctx, "pay-1"))
		clock.Advance(time.Second) // well inside the lease
		second := &recorder{}
		err := guard(second, store, clock, opts...).Write(ctx, "pay-1")
		if stable {
			require.NoError(t, err)
			assert.Equal(t, []string{"pay-1"}, second.items(), "written again at once")
		} else {
			require.ErrorIs(t, err, idempotency.ErrInProgress)
			assert.Empty(t, second.items())
		}
	}
}
