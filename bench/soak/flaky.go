package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicehq/sluice/resilience"
)

// A flaky is the soak's dependency: a transform that fails now and then,
// from a seed. An item is poison (it fails every time, permanently, and
// is dead-lettered) when its id's hash falls under poisonPerMille; any
// other call fails transiently with probability transient, or asks to be
// retried after retryAfter with probability asksLater.
type flaky struct {
	seed           uint64
	poisonPerMille uint64
	transient      float64
	asksLater      float64
	retryAfter     time.Duration
	backoff        time.Duration // between two tries of an item

	mu  sync.Mutex
	rng *rand.Rand
}

func newFlaky(seed uint64) *flaky {
	return &flaky{seed: seed, poisonPerMille: 2, transient: 0.03, asksLater: 0.01, retryAfter: 20 * time.Millisecond, backoff: 5 * time.Millisecond,
		rng: rand.New(rand.NewPCG(seed, 0xf1a4))}
}

var (
	errPoison = errors.New("poison item")
	errBusy   = errors.New("dependency busy")
	errLater  = errors.New("dependency throttled")
)

// poison says whether id is a poison item, the same for every call and
// every process of one seed.
func (f *flaky) poison(id int) bool {
	x := uint64(id)*0x9e3779b97f4a7c15 ^ f.seed
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 29
	return x%1000 < f.poisonPerMille
}

// call is one call of the dependency for id.
func (f *flaky) call(ctx context.Context, id int) (int, error) {
	if f.poison(id) {
		return 0, resilience.MarkPermanent(fmt.Errorf("item %d: %w", id, errPoison))
	}
	return f.callGood(ctx, id)
}

// callGood is call for an item that is never poison: it fails only
// transiently.
func (f *flaky) callGood(_ context.Context, id int) (int, error) {
	f.mu.Lock()
	r := f.rng.Float64()
	f.mu.Unlock()
	switch {
	case r < f.transient:
		return 0, resilience.MarkTransient(errBusy)
	case r < f.transient+f.asksLater:
		return 0, resilience.RetryAfter(errLater, f.retryAfter)
	}
	return id, nil
}

// retries is the item retry of the flaky steps: enough that a good item
// is never given up on for transient failures alone (a 4% failure ten
// times running is one in 10^14), a dead letter for what fails for good.
func (f *flaky) retries(o *resilience.Options) {
	o.ItemRetry.MaxRetries = 10
	o.ItemRetry.Backoff = resilience.Constant(f.backoff)
	o.OnItemFailure = resilience.DeadLetter
}
