package idempotency

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jonboulle/clockwork"
)

// DefaultLease is how long a [Guard]'s claim lasts unless [WithLease] says
// otherwise.
const DefaultLease = 30 * time.Second

// DefaultStoreTimeout bounds the store calls that follow a write unless
// [WithStoreTimeout] says otherwise.
const DefaultStoreTimeout = 10 * time.Second

// An Option configures a [Guard].
type Option func(*config)

type config struct {
	lease        time.Duration
	clock        clockwork.Clock
	owner        string
	name         string
	storeTimeout time.Duration
	problems     []string // what the options got wrong, for Sink's panic
}

func defaults() config {
	return config{lease: DefaultLease, clock: clockwork.NewRealClock(), storeTimeout: DefaultStoreTimeout}
}

func (c *config) problem(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// WithLease sets how long a claim lasts: the longest one write may take
// before another owner may take the key over (default [DefaultLease]). It
// must be more than 0; choose it well above the slowest write, retries
// inside the wrapped sink included, since a write that overruns it may be
// duplicated. A lease that ends after the last time Unix nanoseconds hold
// (past 2262, as WithLease(math.MaxInt64) does) never ends, in every store
// here (the conformance suite's LeaseEndingPastTheYear2262).
func WithLease(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.problem("WithLease(%v): must be more than 0", d)
			return
		}
		c.lease = d
	}
}

// WithClock sets the clock whose time the guard passes to its store, that
// leases and retention are measured against (default the real clock). It
// must not be nil. Use the pipeline's clock, so that a test on a fake
// clock moves both.
func WithClock(clock clockwork.Clock) Option {
	return func(c *config) {
		if clock == nil {
			c.problem("WithClock(nil): the clock must not be nil")
			return
		}
		c.clock = clock
	}
}

// WithOwner sets the owner the guard claims keys as (default a random id
// made for each guard, which starts with the host name). Every guard that
// may run at the same time as another, in this process or another, needs
// an owner of its own: two guards with one owner would both be granted a
// key. A stable owner (a pod's name) lets a restarted consumer take its
// own unfinished claims back at once, without waiting for their lease;
// that includes the claim of a write whose outcome was unknown (the
// process died before it knew, or its guard kept the claim for the
// lease), which the restarted consumer then writes again at once, where
// the default owner would wait for the lease to end. It must not be
// empty.
func WithOwner(owner string) Option {
	return func(c *config) {
		if owner == "" {
			c.problem("WithOwner(\"\"): the owner must not be empty")
			return
		}
		if !utf8.ValidString(owner) || strings.ContainsRune(owner, 0) {
			c.problem("WithOwner(%q): the owner must be UTF-8 text without NUL (a SQL store keeps it as text)", owner)
			return
		}
		c.owner = owner
	}
}

// WithName sets the name errors give the guard, such as the sink node's
// name (default none: errors name only the key).
func WithName(name string) Option {
	return func(c *config) { c.name = name }
}

// WithStoreTimeout bounds each store call that follows a write: the
// completion after a write that succeeded, and the release after one that
// failed (default [DefaultStoreTimeout]). Those calls run on a context
// that the caller's cancellation does not end, so that a write's outcome is
// recorded even when the run is stopping; this timeout, on the real clock,
// is what ends them. It must be more than 0.
func WithStoreTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.problem("WithStoreTimeout(%v): must be more than 0", d)
			return
		}
		c.storeTimeout = d
	}
}

// randomOwner returns an owner unique to one guard: the host's name, for
// people reading a store, and 64 random bits.
func randomOwner() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	id := hex.EncodeToString(b[:])
	if host, err := os.Hostname(); err == nil && host != "" {
		return host + "/" + id
	}
	return id
}
