// Package storetest is the conformance suite of [idempotency.Store]: every
// store Sluice provides passes it, and so should a store of your own.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) idempotency.Store {
//			return mystore.New(..., mystore.WithRetention(storetest.Retention))
//		})
//	}
//
// The suite passes times of its own to the store, so it needs no clock, and
// its concurrency cases are meant to run under the race detector.
package storetest

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// Retention is the retention of completed keys that the stores given to
// [Run] must have: the suite checks that a key completed this long ago is
// claimed again, and that one completed a moment less long ago is not.
const Retention = time.Hour

// lease is the lease of the suite's claims.
const lease = 30 * time.Second

// t0 is the time of the suite's first claims; later times are offsets
// from it.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Run checks the stores that newStore makes against the contract of
// [idempotency.Store]. It runs its cases as parallel subtests, each with a
// store of its own that newStore makes with the subtest's t (so that
// t.Cleanup can drop what it created); newStore must be safe to call from
// several goroutines, and each store it returns must keep completed keys
// for [Retention]. A store whose keys outlive the test (a table, keys in a
// server) should use names that no other test uses at the same time.
func Run(t *testing.T, newStore func(t *testing.T) idempotency.Store) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newStore(t))
		})
	}
}

// A suite case checks one clause of the contract.
type suiteCase struct {
	name string
	run  func(t *testing.T, s idempotency.Store)
}

var cases = []suiteCase{
	{"FirstClaimIsClaimed", firstClaimIsClaimed},
	{"CompletedKeyIsCompleted", completedKeyIsCompleted},
	{"LiveClaimOfAnotherOwnerIsBusy", liveClaimOfAnotherOwnerIsBusy},
	{"SameOwnerClaimsAgainAndExtendsTheLease", sameOwnerClaimsAgain},
	{"TakeoverAfterTheLease", takeoverAfterTheLease},
	{"LeaseEndingPastTheYear2262", leaseEndingPastTheYear2262},
	{"CompleteAfterTheLeaseWithoutTakeover", completeAfterTheLeaseWithoutTakeover},
	{"CompleteTwiceByTheOwner", completeTwiceByTheOwner},
	{"CompleteWithoutTheClaimIsLost", completeWithoutTheClaimIsLost},
	{"ReleaseLetsAnotherOwnerClaimAtOnce", releaseLetsAnotherOwnerClaim},
	{"ReleaseByAnotherOwnerDoesNothing", releaseByAnotherOwnerDoesNothing},
	{"ReleaseOfACompletedKeyDoesNothing", releaseOfACompletedKeyDoesNothing},
	{"ReleaseOfAnUnknownKey", releaseOfAnUnknownKey},
	{"RetentionOfCompletedKeys", retentionOfCompletedKeys},
	{"ConcurrentClaimsOfOneKey", concurrentClaimsOfOneKey},
	{"ConcurrentTakeoversOfOneLapsedClaim", concurrentTakeovers},
	{"NegativeLeaseHasEnded", negativeLeaseHasEnded},
	{"ConcurrentClaimsOfManyKeys", concurrentClaimsOfManyKeys},
	{"KeysWithOddBytes", keysWithOddBytes},
	{"CancelledContext", cancelledContext},
	{"GuardKeepsTheClaimOfAnUnknownWrite", guardKeepsTheClaimOfAnUnknownWrite},
}

// at returns the time d after t0.
func at(d time.Duration) time.Time { return t0.Add(d) }

func claim(t *testing.T, s idempotency.Store, key, owner string, now time.Time) idempotency.State {
	t.Helper()
	st, err := s.Claim(context.Background(), key, owner, now, lease)
	require.NoError(t, err, "Claim(%q, %q)", key, owner)
	return st
}

func complete(t *testing.T, s idempotency.Store, key, owner string, now time.Time) error {
	t.Helper()
	return s.Complete(context.Background(), key, owner, now)
}

func release(t *testing.T, s idempotency.Store, key, owner string) {
	t.Helper()
	require.NoError(t, s.Release(context.Background(), key, owner), "Release(%q, %q)", key, owner)
}

func firstClaimIsClaimed(t *testing.T, s idempotency.Store) {
	assert.Equal(t, idempotency.Claimed, claim(t, s, "k", "a", at(0)))
	assert.Equal(t, idempotency.Claimed, claim(t, s, "other", "b", at(0)), "another key is independent")
}

func completedKeyIsCompleted(t *testing.T, s idempotency.Store) {
	require.Equal(t, idempotency.Claimed, claim(t, s, "k", "a", at(0)))
	require.NoError(t, complete(t, s, "k", "a", at(time.Second)))
	assert.Equal(t, idempotency.Completed, claim(t, s, "k", "b", at(2*time.Second)), "another owner")
	assert.Equal(t, idempotency.Completed, claim(t, s, "k", "a", at(2*time.Second)), "the owner that completed it")
	assert.Equal(t, idempotency.Completed, claim(t, s, "k", "b", at(10*lease)), "long after the lease, within the retention")
}

func liveClaimOfAnotherOwnerIsBusy(t *testing.T, s idempotency.Store) {
	require.Equal(t, idempotency.Claimed, claim(t, s, "k", "a", at(0)))
	assert.Equal(t, idempotency.Busy, claim(t, s, "k", "b", at(0)))
	assert.Equal(t, idempotency.Busy, claim(t, s, "k", "b", at(lease-time.Nanosecond)), "a nanosecond before the lease ends")
	require.NoError(t, complete(t, s, "k", "a", at(time.Second)), "Busy claims took nothing from the owner")
}

func sameOwnerClaimsAgain(t *testing.T, s idempotency.Store) {
	require.Equal(t, idempotency.Claimed, claim(t, s, "k", "a", at(0)))
	assert.Equal(t, idempotency.Claimed, claim(t, s, "k", "a", at(lease/2)))
	assert.Equal(t, idempotency.Busy, claim(t, s, "k", "b", at(lease)), "the second claim extended the lease to 1.5 leases")
	assert.Equal(t, idempotency.Claimed, claim(t, s, "k", "b", at(lease+lease/2)), "until it ended")
}

func takeoverAfterTheLease(t *testing.T, s idempotency.Store) {
	require.Equal(t, idempotency.Claimed, claim(t, s, "k", "crashed", at(0)))
	assert.Equal(t, idempotency.Claimed, claim(t, s, "k", "b", at(lease)), "the lease ends at claim time plus lease")
	err := complete(t, s, "k", "crashed", at(lease+time.Second))
	assert.ErrorIs(t, err, idempotency.ErrLostClaim, "the old owner lost its claim")
	require.NoError(t, complete(t, s, "k", "b", at(lease+time.Second)))
	assert.Equal(t, idempotency.Completed, claim(t, s, "k", "c", at(lease+2*time.Second)))
	assert.ErrorIs(t, complete(t, s, "k", "crashed", at(lease+3*time.Second)), idempotency.ErrLostClaim,
		"nor can it complete the key once the new owner did")
}

// leaseEndingPastTheYear2262: a lease as long as a Duration goes
// (WithLease(math.MaxInt64), "never hand the key on") ends after the last
// time that Unix nanoseconds hold. It must keep other owners out, not wrap
// around and read as ended, and the key must still complete.
func leaseEndingPastTheYear2262(t *testing.T, s idempotency.Store) {
	ctx := context.Background()
	st, err := s.Claim(ctx, "k", "a", at(0), time.Duration(math.MaxInt64))
	require.NoError(t, err)
	require.Equal(t, idempotency.Claimed, st)
	assert.Equal(t, idempotency.Busy, claim(t, s, "k", "b", at(time.Second)))
	assert.Equal(t, idempotency.Busy, claim(t, s, "k", "b", at(100*365*24*time.Hour)), "a century later")
	st, err = s.Claim(ctx, "k2", "a", at(0), time.Duration(math.MaxInt64)-time.Duration(at(0).UnixNano())+1)
	require.NoError(t, err)
	require.Equal(t, idempotency.Claimed, st)
	assert.Equal(t, idempotency.Busy, claim(t, s, "k2", "b", at(time.Second)), "a lease ending a nanosecond past the last")
	require.NoError(t, complete(t, s, "k", "a", at(2*time.Second)))
	assert.Equal(t, idempotency.Completed, claim(t, s, "k", "b", at(3*time.Second)))
}

func completeAfterTheLeaseWithoutTakeover(t *testing.T, s idempotency.Store) {
	require.Equal(t, idempotency.Claimed, claim(t, s, "k", "slow", at(0)))
	require.NoError(t, complete(t, s, "k", "slow", at(2*lease)), "nobody took the key over: the claim is still the owner's")
	assert.Equal(t, idempotency.Completed, claim(t, s, "k", "b", at(2*lease+time.Second)))
}

func completeTwiceByTheOwner(t *testing.T, s idempotency.Store) {
	require.Equal(t, idempotency.Claimed, claim(t, s, "k", "a", at(0)))
	require.NoError(t, complete(t, s, "k", "a", at(time.Second)))
	assert.NoError(t, complete(t, s, "k", "a", at(2*time.Second)), "a repeated completion, as after a lost reply")
	assert.ErrorIs(t, complete(t, s, "k", "b", at(2*time.Second)), idempotency.ErrLostClaim, "but not by another owner")
	assert.Equal(t, idempotency.Completed, claim(t, s, "k", "b", at(3*time.Second)))
}

func completeWithoutTheClaimIsLost(t *testing.T, s idempotency.Store) {
	assert.ErrorIs(t, complete(t, s, "never", "a", at(0)), idempotency.ErrLostClaim, "a key never claimed")
	require.Equal(t, idempotency.Claimed, claim(t, s, "k", "a", at(0)))
	assert.ErrorIs(t, complete(t, s, "k", "b", at(time.Second)), idempotency.ErrLostClaim, "a live claim of another owner")
	assert.Equal(t, idempotency.Busy, claim(t, s, "k", "b", at(time.Second)), "which keeps its claim")
	require.NoError(t, complete(t, s, "k", "a", at(time.Second)))
	release(t, s, "k2", "a")
	require.Equal(t, idempotency.Claimed, claim(t, s, "k2", "a", at(0)))
	release(t, s, "k2", "a")
	assert.ErrorIs(t, complete(t, s, "k2", "a", at(time.Second)), idempotency.ErrLostClaim, "a released claim")
}

func releaseLetsAnotherOwnerClaim(t *testing.T, s idempotency.Store) {
	require.Equal(t, idempotency.Claimed, claim(t, s, "k", "a", at(0)))
	release(t, s, "k", "a")
	assert.Equal(t, idempotency.Claimed, claim(t, s, "k", "b", at(0)), "at once, the lease notwithstanding")
}

func releaseByAnotherOwnerDoesNothing(t *testing.T, s idempotency.Store) {
	require.Equal(t, idempotency.Claimed, claim(t, s, "k", "a", at(0)))
	release(t, s, "k", "b")
	assert.Equal(t, idempotency.Busy, claim(t, s, "k", "b", at(time.Second)))
	require.NoError(t, complete(t, s, "k", "a", at(time.Second)))
}

func releaseOfACompletedKeyDoesNothing(t *testing.T, s idempotency.Store) {
	require.Equal(t, idempotency.Claimed, claim(t, s, "k", "a", at(0)))
	require.NoError(t, complete(t, s, "k", "a", at(time.Second)))
	release(t, s, "k", "a")
	assert.Equal(t, idempotency.Completed, claim(t, s, "k", "b", at(2*time.Second)), "a completion is never undone")
}

func releaseOfAnUnknownKey(t *testing.T, s idempotency.Store) {
	release(t, s, "never", "a")
	assert.Equal(t, idempotency.Claimed, claim(t, s, "never", "b", at(0)))
}

func retentionOfCompletedKeys(t *testing.T, s idempotency.Store) {
	require.Equal(t, idempotency.Claimed, claim(t, s, "k", "a", at(0)))
	done := at(time.Second)
	require.NoError(t, complete(t, s, "k", "a", done))
	assert.Equal(t, idempotency.Completed, claim(t, s, "k", "b", done.Add(Retention-time.Nanosecond)), "a nanosecond before the retention ends")
	assert.Equal(t, idempotency.Claimed, claim(t, s, "k", "b", done.Add(Retention)), "a completed key older than the retention counts as never seen")
	assert.Equal(t, idempotency.Busy, claim(t, s, "k", "c", done.Add(Retention+time.Second)), "and is claimed afresh")
	assert.ErrorIs(t, complete(t, s, "k", "a", done.Add(Retention+time.Second)), idempotency.ErrLostClaim, "the first owner's completion is gone")
	require.NoError(t, complete(t, s, "k", "b", done.Add(Retention+time.Second)))
	assert.Equal(t, idempotency.Completed, claim(t, s, "k", "c", done.Add(Retention+2*time.Second)))
}

// contenders is how many owners claim one key at once.
const contenders = 16

func concurrentClaimsOfOneKey(t *testing.T, s idempotency.Store) {
	for round := range 5 {
		key := fmt.Sprintf("contended-%d", round)
		states := make([]idempotency.State, contenders)
		errs := make([]error, contenders)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range contenders {
			wg.Go(func() {
				<-start
				states[i], errs[i] = s.Claim(context.Background(), key, fmt.Sprintf("owner-%d", i), at(0), lease)
			})
		}
		close(start)
		wg.Wait()
		claimed, busy := 0, 0
		for i := range contenders {
			require.NoError(t, errs[i], "owner-%d", i)
			switch states[i] {
			case idempotency.Claimed:
				claimed++
			case idempotency.Busy:
				busy++
			}
		}
		assert.Equal(t, 1, claimed, "round %d: exactly one owner claims the key", round)
		assert.Equal(t, contenders-1, busy, "round %d: the others find it busy", round)
	}
}

// concurrentTakeovers: many owners at once find the claim of an owner
// that crashed lapsed; exactly one takes it over, the others find it busy
// (the way a crashed consumer's keys are taken up, where a store that
// decides and then writes apart lets several owners write one key).
func concurrentTakeovers(t *testing.T, s idempotency.Store) {
	for round := range 5 {
		key := fmt.Sprintf("lapsed-%d", round)
		require.Equal(t, idempotency.Claimed, claim(t, s, key, "crashed", at(0)))
		states := make([]idempotency.State, contenders)
		errs := make([]error, contenders)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range contenders {
			wg.Go(func() {
				<-start
				states[i], errs[i] = s.Claim(context.Background(), key, fmt.Sprintf("owner-%d", i), at(2*lease), lease)
			})
		}
		close(start)
		wg.Wait()
		claimed := 0
		for i := range contenders {
			require.NoError(t, errs[i], "owner-%d", i)
			if states[i] == idempotency.Claimed {
				claimed++
			} else {
				assert.Equal(t, idempotency.Busy, states[i], "round %d: owner-%d", round, i)
			}
		}
		assert.Equal(t, 1, claimed, "round %d: exactly one owner takes the lapsed claim over", round)
		assert.ErrorIs(t, complete(t, s, key, "crashed", at(2*lease)), idempotency.ErrLostClaim, "round %d", round)
	}
}

// negativeLeaseHasEnded: a claim until now+lease with a negative lease
// (a Store called directly; the Guard refuses one) ended before now: it
// must not saturate to a lease that never ends.
func negativeLeaseHasEnded(t *testing.T, s idempotency.Store) {
	ctx := context.Background()
	st, err := s.Claim(ctx, "k", "a", at(0), -time.Second)
	require.NoError(t, err)
	require.Equal(t, idempotency.Claimed, st)
	assert.Equal(t, idempotency.Claimed, claim(t, s, "k", "b", at(time.Hour)), "the lease ended an hour ago")
	st, err = s.Claim(ctx, "k2", "a", at(0), time.Duration(math.MinInt64))
	require.NoError(t, err)
	require.Equal(t, idempotency.Claimed, st)
	assert.Equal(t, idempotency.Claimed, claim(t, s, "k2", "b", at(time.Second)), "the most negative lease")
}

func concurrentClaimsOfManyKeys(t *testing.T, s idempotency.Store) {
	const keys = 32
	errs := make([]error, keys)
	states := make([]idempotency.State, keys)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			key, owner := fmt.Sprintf("many-%d", i), fmt.Sprintf("owner-%d", i)
			states[i], errs[i] = s.Claim(context.Background(), key, owner, at(0), lease)
			if errs[i] == nil && states[i] == idempotency.Claimed {
				errs[i] = s.Complete(context.Background(), key, owner, at(time.Second))
			}
		})
	}
	wg.Wait()
	for i := range keys {
		require.NoError(t, errs[i], "key %d", i)
		assert.Equal(t, idempotency.Claimed, states[i], "key %d", i)
		assert.Equal(t, idempotency.Completed, claim(t, s, fmt.Sprintf("many-%d", i), "late", at(2*time.Second)), "key %d", i)
	}
}

// oddKeys returns keys that a store must keep apart and store faithfully:
// unicode, quotes and SQL, glob and Lua characters, bytes that are not
// UTF-8, a NUL, and keys of 4 KiB that differ only in their last byte.
func oddKeys() []string {
	long := strings.Repeat("ключ-🔑-", 4096/len("ключ-🔑-")+1)[:4095]
	return []string{
		"clé-🔑-ключ-鍵",
		`it's "quoted"`,
		`'; DROP TABLE sluice_idempotency; --`,
		"glob*?[a-z]{}\\",
		"lua ]] -- %s %d",
		"spaces and\ttabs\nand lines",
		"\xff\xfe not utf-8",
		"nul\x00byte",
		"nul\x00bytf", // differs from the one above after the NUL
		long + "a",
		long + "b",
		strings.Repeat("x", 4096),
	}
}

func keysWithOddBytes(t *testing.T, s idempotency.Store) {
	keys := oddKeys()
	for i, k := range keys {
		require.Equal(t, idempotency.Claimed, claim(t, s, k, "a", at(0)), "key %d", i)
	}
	for i, k := range keys {
		assert.Equal(t, idempotency.Busy, claim(t, s, k, "b", at(time.Second)), "key %d", i)
	}
	for i, k := range keys[:len(keys)/2] {
		require.NoError(t, complete(t, s, k, "a", at(2*time.Second)), "key %d", i)
	}
	for i, k := range keys {
		want := idempotency.Busy
		if i < len(keys)/2 {
			want = idempotency.Completed
		}
		assert.Equal(t, want, claim(t, s, k, "b", at(3*time.Second)), "key %d: each key keeps its own state", i)
	}
	for i, k := range keys[len(keys)/2:] {
		release(t, s, k, "a")
		assert.Equal(t, idempotency.Claimed, claim(t, s, k, "b", at(4*time.Second)), "key %d", len(keys)/2+i)
	}
}

func cancelledContext(t *testing.T, s idempotency.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Claim(ctx, "k", "a", at(0), lease)
	assert.ErrorIs(t, err, context.Canceled, "Claim")
	assert.Equal(t, idempotency.Claimed, claim(t, s, "k", "b", at(0)), "the cancelled claim took nothing")

	err = s.Complete(ctx, "k", "b", at(time.Second))
	assert.ErrorIs(t, err, context.Canceled, "Complete")
	assert.NotErrorIs(t, err, idempotency.ErrLostClaim, "Complete")
	err = s.Release(ctx, "k", "b")
	assert.ErrorIs(t, err, context.Canceled, "Release")
	assert.Equal(t, idempotency.Busy, claim(t, s, "k", "c", at(time.Second)), "the cancelled calls changed nothing")
	require.NoError(t, complete(t, s, "k", "b", at(time.Second)))
}
