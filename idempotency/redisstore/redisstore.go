// Package redisstore is an [idempotency.Store] in Redis, through
// github.com/redis/go-redis/v9: for consumers on many machines that share
// a Redis server. Every call touches a single key, as Redis Cluster asks
// of a script; the tests run on a single server.
//
// Each key is a hash under a prefix, named by the SHA-256 of the key (see
// [Store.RedisKey]); claim, complete and release are Lua
// scripts, so each is atomic on the server. Leases and retention are
// compared against the time the caller passes, kept in the hash, so the
// store works on a fake clock; besides, every key gets a time to live on
// the server's clock, so that Redis drops completed keys after the
// retention and abandoned claims a retention after their lease.
//
// Every error the store returns, but [idempotency.ErrLostClaim], is
// marked with [resilience.MarkBlameless]: Redis takes any key, so a
// failure is the server's (unreachable, out of memory, refusing writes),
// not the item's, and a good item is not dead-lettered, nor counted
// against a broker's delivery limit, while Redis is away.
package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/resilience"
)

// DefaultPrefix is what a [Store] puts before each key unless
// [WithPrefix] says otherwise.
const DefaultPrefix = "sluice:idem:"

// A Store keeps claims and completed keys in Redis. It is safe for
// concurrent use, and several Stores, in several processes, may share a
// prefix: that is what makes it fit consumers on several machines. Make
// one with [New]; the zero Store is not usable.
type Store struct {
	client    redis.UniversalClient
	prefix    string
	retention time.Duration
}

// An Option configures a [Store].
type Option func(*config)

type config struct {
	prefix    string
	retention time.Duration
	problems  []error
}

// WithPrefix sets what the store puts before each key's hash to make its
// Redis key (default [DefaultPrefix]; see [Store.RedisKey]); stores that
// share a prefix share their keys, and stores of other prefixes share
// none, even prefixes that start alike. An empty prefix is allowed, for a
// database of its own.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithRetention sets how long a completed key is kept (default
// [idempotency.DefaultRetention]); after that a duplicate of it is written
// again. Of stores sharing a prefix, a Claim counts a completion as
// expired by its own store's retention (the key's time to live is the
// completing store's): give them one retention. It must be at least a
// millisecond, Redis's finest time to live.
func WithRetention(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond {
			c.problems = append(c.problems, fmt.Errorf("redisstore: WithRetention(%v): must be at least 1ms", d))
			return
		}
		c.retention = d
	}
}

// New returns a Store on client. It returns an error naming every problem
// when client is nil or an option is invalid. It does not touch the
// server: the scripts are loaded by the first call that runs them.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	cfg := config{prefix: DefaultPrefix, retention: idempotency.DefaultRetention}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	problems := cfg.problems
	if client == nil {
		problems = append(problems, errors.New("redisstore: client is nil"))
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return &Store{client: client, prefix: cfg.prefix, retention: cfg.retention}, nil
}

// Prefix returns what the store puts before each key.
func (s *Store) Prefix() string { return s.prefix }

// RedisKey returns the Redis key that holds key: the prefix, then the
// SHA-256 of key in hex. Being of one length, the hash keeps the keys of
// prefixes that start alike apart ("charge" with key "21" and "charge2"
// with key "1" would otherwise be one Redis key), and a key of any length
// makes a Redis key of 64 bytes past the prefix.
func (s *Store) RedisKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return s.prefix + hex.EncodeToString(sum[:])
}

// A key's hash has the fields state ("claimed" or "completed"), owner,
// until (a claim's lease end) and done (a completion's time). Times are
// Unix nanoseconds written as 20 digits, zero-padded, so that Lua compares
// them exactly as strings: its numbers are doubles, which cannot hold
// every nanosecond, while strings of digits of one length order as their
// numbers do, in any collation.

// claimScript: KEYS[1] the key; ARGV: owner, now, until (now+lease),
// cutoff (now-retention: a completion at or before it has expired), the
// time to live in ms. Returns 1 claimed, 2 completed, 3 busy.
var claimScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'state', 'owner', 'until', 'done')
if v[1] == 'completed' then
	if v[4] > ARGV[4] then return 2 end
elseif v[1] == 'claimed' then
	if v[2] ~= ARGV[1] and v[3] > ARGV[2] then return 3 end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', 'claimed', 'owner', ARGV[1], 'until', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
`)

// completeScript: KEYS[1] the key; ARGV: owner, done, the time to live in
// ms. Returns 1 completed, 0 lost.
var completeScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'state', 'owner')
if v[2] ~= ARGV[1] then return 0 end
if v[1] == 'completed' then return 1 end
redis.call('HSET', KEYS[1], 'state', 'completed', 'done', ARGV[2])
redis.call('HDEL', KEYS[1], 'until')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// releaseScript: KEYS[1] the key; ARGV: owner.
var releaseScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'state', 'owner')
if v[1] == 'claimed' and v[2] == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
`)

// Claim implements [idempotency.Store.Claim]. The key's time to live on
// the server becomes the lease plus the retention.
func (s *Store) Claim(ctx context.Context, key, owner string, now time.Time, lease time.Duration) (idempotency.State, error) {
	n, err := claimScript.Run(ctx, s.client, []string{s.RedisKey(key)},
		owner, stamp(now), leaseEnd(now, lease), stamp(before(now, s.retention)), ms(addSat(lease, s.retention))).Int()
	if err != nil {
		return 0, resilience.MarkBlameless(fmt.Errorf("redisstore: claim: %w", err))
	}
	switch n {
	case 1:
		return idempotency.Claimed, nil
	case 2:
		return idempotency.Completed, nil
	case 3:
		return idempotency.Busy, nil
	}
	return 0, resilience.MarkBlameless(fmt.Errorf("redisstore: claim: the script answered %d", n))
}

// Complete implements [idempotency.Store.Complete]. The key's time to live
// on the server becomes the retention.
func (s *Store) Complete(ctx context.Context, key, owner string, now time.Time) error {
	n, err := completeScript.Run(ctx, s.client, []string{s.RedisKey(key)}, owner, stamp(now), ms(s.retention)).Int()
	if err != nil {
		return resilience.MarkBlameless(fmt.Errorf("redisstore: complete: %w", err))
	}
	if n != 1 {
		return idempotency.ErrLostClaim
	}
	return nil
}

// Release implements [idempotency.Store.Release].
func (s *Store) Release(ctx context.Context, key, owner string) error {
	if err := releaseScript.Run(ctx, s.client, []string{s.RedisKey(key)}, owner).Err(); err != nil {
		return resilience.MarkBlameless(fmt.Errorf("redisstore: release: %w", err))
	}
	return nil
}

// stamp writes t as Unix nanoseconds in 20 digits; a time before 1970
// counts as 1970.
func stamp(t time.Time) string { return fmt.Sprintf("%020d", max(t.UnixNano(), 0)) }

// leaseEnd writes now+lease as stamp does, saturating: a lease ending
// past 2262 (WithLease(math.MaxInt64)) would wrap around to a time long
// gone, and read as ended. A lease taken before 1970 ends lease after
// now, not after 1970.
func leaseEnd(now time.Time, lease time.Duration) string {
	return fmt.Sprintf("%020d", max(int64(addSat(time.Duration(now.UnixNano()), lease)), 0))
}

// maxTTL caps a key's time to live on the server: a "keep forever"
// retention (math.MaxInt64) would overflow the server's expiry time.
const maxTTL = 100 * 365 * 24 * time.Hour

// ms returns d in whole milliseconds, at least 1 and at most maxTTL's,
// for PEXPIRE.
func ms(d time.Duration) int64 { return max(min(d, maxTTL).Milliseconds(), 1) }

// addSat is a+b, saturating instead of wrapping around: a negative
// lease (given to a Store directly) ends before now, not in 2262.
func addSat(a, b time.Duration) time.Duration {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

// before is now less d, no earlier than 1970 (stamp's floor), without
// overflow for a d as long as math.MaxInt64.
func before(now time.Time, d time.Duration) time.Time {
	if since := now.Sub(time.Unix(0, 0)); d > since {
		return time.Unix(0, 0)
	}
	return now.Add(-d)
}

var _ idempotency.Store = (*Store)(nil)
