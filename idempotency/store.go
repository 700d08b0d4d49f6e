package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// State is the answer of [Store.Claim]: what the caller may do with a key.
// The zero State is none: a Store answers it only with an error.
type State int

const (
	// Claimed: the caller holds the claim and may write the item; it then
	// calls [Store.Complete], or [Store.Release] if the write failed.
	Claimed State = iota + 1
	// Completed: the key was written before, within the store's retention;
	// the item is a duplicate.
	Completed
	// Busy: another owner holds a live claim on the key; ask again later.
	Busy
)

// String returns the state's name in lower case: "claimed", "completed" or
// "busy".
func (s State) String() string {
	switch s {
	case Claimed:
		return "claimed"
	case Completed:
		return "completed"
	case Busy:
		return "busy"
	default:
		return fmt.Sprintf("State(%d)", int(s))
	}
}

// A Store records, per key, a claim (an owner and the end of its lease) or
// a completion (an owner and its time). Every method is safe for concurrent
// use, also from several processes when the store is shared (SQL, Redis),
// and each is atomic: of owners that claim one key at once, exactly one
// gets [Claimed].
//
// Time comes from the caller: a claim is live while now is before the time
// it was claimed plus its lease, and a completed key is kept while now is
// before its completion plus the store's retention. A store never reads a
// clock of its own to decide, so that it works on a fake clock.
//
// A store's failure is seldom the item's: mark an error that no key
// causes (the store unreachable, locked, out of room) with
// [resilience.MarkBlameless]. The [Guard] keeps the mark, so that a good
// item is not dead-lettered, nor counted against a broker's delivery
// limit, while the store is away. Leave unmarked an error that a key can
// cause (a key too long for a column): under a dead-letter action its item
// is then set aside instead of delivered again and again. The stores of
// the sqlstore and redisstore packages mark every error but
// [ErrLostClaim], since no key makes them fail.
//
// The [github.com/sluicehq/sluice/idempotency/storetest] package checks an
// implementation against this contract.
type Store interface {
	// Claim tries to claim key for owner until now+lease. A key never
	// seen, or whose claim's lease ended (at or before now), or whose
	// completion is older than the retention, or already claimed by the
	// same owner (whose lease is then extended) is Claimed; a completed key
	// is Completed; a live claim of another owner is Busy. A done ctx
	// gives an error and changes nothing.
	Claim(ctx context.Context, key, owner string, now time.Time, lease time.Duration) (State, error)
	// Complete marks key completed at now. It returns an error matching
	// [ErrLostClaim] when owner no longer holds the claim: another owner
	// took it over, or it was released or never made. A claim whose lease
	// ran out but that no other owner took over is still owner's, and
	// completes, until the store drops it as abandoned (the sqlstore and
	// redisstore packages drop it a retention after its lease ended).
	// Completing a key that owner completed already returns nil.
	Complete(ctx context.Context, key, owner string, now time.Time) error
	// Release drops owner's claim on key, so that another owner may claim
	// it at once. It returns nil, and changes nothing, when owner does not
	// hold a claim on key; a completed key stays completed.
	Release(ctx context.Context, key, owner string) error
}

// ErrLostClaim is returned by [Store.Complete] when the owner no longer
// holds the claim on the key: its lease ran out and another owner took the
// key over, or the claim was released.
var ErrLostClaim = errors.New("idempotency: claim lost: the owner no longer holds it")

// DefaultRetention is how long stores keep a completed key unless told
// otherwise: a redelivery within a week of the first write is recognised.
const DefaultRetention = 7 * 24 * time.Hour
