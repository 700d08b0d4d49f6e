package pipeline

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// LookupOptions configure a [Lookup].
type LookupOptions struct {
	// Size is how many keys the cache holds; the least recently used goes
	// first. 0 takes 10 000.
	Size int
	// TTL is how long a fetched value is served from the cache, on Clock.
	// 0 takes 1 minute; errors are never cached.
	TTL time.Duration
	// Clock is what TTL is measured on; nil takes the real clock. Give it
	// the pipeline's clock (pipeline.WithClock) in tests.
	Clock clockwork.Clock
}

// A Lookup fetches values by key through a bounded cache with a time to
// live, and fetches one key once at a time: callers that ask for a key
// being fetched wait for that fetch instead of starting their own. It is
// safe for concurrent use; use it from a Map or with [Enrich].
type Lookup[K comparable, V any] struct {
	fetch func(context.Context, K) (V, error)
	size  int
	ttl   time.Duration
	clock clockwork.Clock

	mu      sync.Mutex
	entries map[K]*list.Element // of *lookupEntry[K, V]
	order   *list.List          // most recently used first
	flights map[K]*flight[V]
	stats   LookupStats
}

// LookupStats count a Lookup's answers.
type LookupStats struct {
	Hits    int64 // served from the cache
	Fetches int64 // calls of the fetch function
	Shared  int64 // waited for another caller's fetch of the same key
}

type lookupEntry[K comparable, V any] struct {
	key     K
	val     V
	expires time.Time
}

type flight[V any] struct {
	done chan struct{}
	val  V
	err  error
	// cancelled: the caller that fetched was cancelled, so its error is
	// not the key's.
	cancelled bool
}

// NewLookup returns a Lookup that fetches with fetch. It panics when fetch
// is nil or an option is negative: a mistake in the program.
func NewLookup[K comparable, V any](fetch func(context.Context, K) (V, error), o LookupOptions) *Lookup[K, V] {
	switch {
	case fetch == nil:
		panic("sluice: pipeline.NewLookup: fetch is nil")
	case o.Size < 0:
		panic(fmt.Sprintf("sluice: pipeline.NewLookup: Size %d is negative", o.Size))
	case o.TTL < 0:
		panic(fmt.Sprintf("sluice: pipeline.NewLookup: TTL %s is negative", o.TTL))
	}
	if o.Size == 0 {
		o.Size = 10_000
	}
	if o.TTL == 0 {
		o.TTL = time.Minute
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	return &Lookup[K, V]{fetch: fetch, size: o.Size, ttl: o.TTL, clock: o.Clock,
		entries: map[K]*list.Element{}, order: list.New(), flights: map[K]*flight[V]{}}
}

// Get returns the value of key: from the cache while it is fresh, else
// from the fetch that is under way for key, else from a fetch of its own
// under ctx. A key not equal to itself (a NaN, or a value holding one) is
// fetched each time. An error is returned as the fetch returned it, and not cached.
// When the caller whose fetch others wait for is cancelled, each waiter
// whose own ctx is live fetches again.
func (l *Lookup[K, V]) Get(ctx context.Context, key K) (V, error) {
	if selfUnequal(key) {
		// A NaN, or a key holding one: no map finds it again, so it is
		// fetched each time, neither cached nor shared (each left an
		// entry in the cache's maps for good).
		l.mu.Lock()
		l.stats.Fetches++
		l.mu.Unlock()
		return l.call(ctx, key)
	}
	shared := false
	for {
		v, hit, f, lead := l.begin(key, &shared)
		switch {
		case hit:
			return v, nil
		case lead:
			l.lead(ctx, key, f)
			return f.val, f.err
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			var zero V
			return zero, context.Cause(ctx)
		}
		if f.cancelled && ctx.Err() == nil {
			continue // the fetcher was cancelled, not this caller
		}
		return f.val, f.err
	}
}

// begin is Get's look at the cache and the fetches under way, under the
// lock: key's fresh value (hit), or the flight to wait for, or, with lead,
// a new flight for the caller to fetch. The lock is released however it
// ends: a key of an interface type K whose value cannot be compared
// panics at the map's lookup, and left the Lookup locked for good.
func (l *Lookup[K, V]) begin(key K, shared *bool) (v V, hit bool, f *flight[V], lead bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.entries[key]; ok {
		ent := e.Value.(*lookupEntry[K, V])
		if l.clock.Now().Before(ent.expires) {
			l.order.MoveToFront(e)
			l.stats.Hits++
			return ent.val, true, nil, false
		}
		l.order.Remove(e)
		delete(l.entries, key)
	}
	if f, ok := l.flights[key]; ok {
		if !*shared {
			l.stats.Shared++
			*shared = true
		}
		return v, false, f, false
	}
	f = &flight[V]{done: make(chan struct{})}
	l.flights[key] = f
	l.stats.Fetches++
	return v, false, f, true
}

// lead fetches key for flight f and releases its waiters, however the
// fetch ends (a runtime.Goexit included).
func (l *Lookup[K, V]) lead(ctx context.Context, key K, f *flight[V]) {
	defer func() {
		l.mu.Lock()
		delete(l.flights, key)
		if f.err == nil {
			l.store(key, f.val)
		}
		l.mu.Unlock()
		close(f.done)
	}()
	f.err = errors.New("pipeline: Lookup fetch did not return") // until it does
	f.val, f.err = l.call(ctx, key)
	f.cancelled = f.err != nil && ctx.Err() != nil
}

// call calls fetch; a panic becomes an error, so that the waiters are
// released.
func (l *Lookup[K, V]) call(ctx context.Context, key K) (v V, err error) {
	defer recovered(&err)
	return l.fetch(ctx, key)
}

func (l *Lookup[K, V]) store(key K, v V) {
	ent := &lookupEntry[K, V]{key: key, val: v, expires: l.clock.Now().Add(l.ttl)}
	l.entries[key] = l.order.PushFront(ent)
	for l.order.Len() > l.size {
		last := l.order.Back()
		l.order.Remove(last)
		delete(l.entries, last.Value.(*lookupEntry[K, V]).key)
	}
}

// Stats returns the counts of the Lookup's answers so far.
func (l *Lookup[K, V]) Stats() LookupStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Len returns how many keys the cache holds, fresh or not.
func (l *Lookup[K, V]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}

// Enrich adds a transform that joins each item of in with the value of its
// key from lookup: join(item, value). A lookup's error is the item's error,
// for the node's layers (a transient fetch failure is retried, and a
// retry finds the value cached once a fetch succeeded).
func Enrich[T any, K comparable, V, Out any](b *Builder, name string, in Stream[T], key func(T) K, lookup *Lookup[K, V], join func(T, V) Out, opts ...NodeOption) Stream[Out] {
	var f func(context.Context, T) (Out, error)
	if key != nil && lookup != nil && join != nil {
		f = func(ctx context.Context, v T) (Out, error) {
			val, err := lookup.Get(ctx, key(v))
			if err != nil {
				var zero Out
				return zero, err
			}
			return join(v, val), nil
		}
	}
	out := Map(b, name, in, f, opts...)
	if f == nil {
		b.errs = append(b.errs, &BuildError{Node: name, Err: errors.New("Enrich: key, lookup and join must not be nil")})
	}
	return out
}
