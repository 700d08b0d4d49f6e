package idempotency

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// ErrEmptyKey is returned, marked permanent, by [Guard.Write] for an item
// whose key is empty: such an item cannot be told from another, so the
// guard refuses it rather than write it unguarded.
var ErrEmptyKey = errors.New("idempotency: key of item is empty")

// ErrInProgress is matched by the error [Guard.Write] returns when another
// owner, or another call of the same guard, holds a live claim on the
// item's key. The error is marked transient with [resilience.MarkTransient],
// so that the pipeline's item retry tries the item again: by then the key
// is completed (the item is skipped as a duplicate) or the claim's lease ran
// out (the item is written). It is also marked blameless with
// [resilience.MarkBlameless]: a busy key is not the item's fault, so an
// item that still finds it busy after its retries, under the Fail action,
// ends node.Failed, not node.Rejected, and a broker source does not count
// that run towards the message's MaxDeliveries.
var ErrInProgress = errors.New("idempotency: key claimed by another owner")

// ErrUnknownOutcome, wrapped in the error of a sink's Write, says that the
// write may have happened although Write failed: a commit whose answer was
// lost, say. The guard then keeps the key's claim until its lease ends, as
// for a write whose context ended, instead of releasing it (see
// [Guard.Write]).
var ErrUnknownOutcome = errors.New("idempotency: the write's outcome is unknown")

// A Guard is a sink that writes an item through the sink it wraps only if
// the item's key was not completed before in its [Store]. Make one with
// [Sink]; the zero Guard is not usable. It is safe for concurrent use, as
// by a sink node with
// pipeline.Parallel: calls of one guard with the same key at once are told
// apart too, and only one of them writes.
//
// A Guard has Open, Close and Flush, each forwarded to the wrapped sink's
// method when it has one, and is a node.Wrapper: the engine asks the
// wrapped sink whether the node has an Open, so that a node restart closes
// and opens the guard (and so the wrapped sink) only when the wrapped sink
// has an Open, as it would without the guard.
type Guard[T any] struct {
	sink  node.Sink[T]
	store Store
	key   func(T) string
	cfg   config

	mu       sync.Mutex
	inFlight map[string]struct{}     // keys this guard is claiming or writing
	pending  map[string]pendingWrite // keys this guard wrote and could not complete yet
	// unknown holds the keys whose write ended with an unknown outcome, and
	// when their claim's lease ends: until then the guard answers busy for
	// them itself, since the store would grant the claim again to its
	// owner.
	unknown map[string]time.Time

	written, duplicates, busy, released, lost, unknowns, unrecorded atomic.Int64
}

// A pendingWrite is a key this guard wrote and could not record yet: what
// was counted of it, and when the guard forgets it.
type pendingWrite struct {
	lost       bool      // its lost claim was counted in LostClaims
	unrecorded bool      // its failed completion was counted in Unrecorded
	until      time.Time // a lease after its claim's lease ends, or so: then it may be forgotten
}

// Stats counts what a [Guard] did in the calls of its Write: an item that
// was refused as Busy and retried counts in Busy for each refusal, then in
// Written or Duplicates.
type Stats struct {
	// Written is how many items the wrapped sink wrote: its Write returned
	// nil. An item whose completion then failed counts here too.
	Written int64
	// Duplicates is how many items were skipped because their key was
	// completed: the duplicates the guard absorbed.
	Duplicates int64
	// Busy is how many calls were refused with [ErrInProgress] because the
	// key was claimed by another owner, or by another call of this guard.
	Busy int64
	// Released is how many claims were released after the wrapped sink
	// failed, so that a retry, by any owner, writes the item. A release
	// the store took is counted even when the claim was no longer this
	// guard's (the write overran its lease and another owner took the key
	// over): the store then leaves the other owner's claim alone.
	Released int64
	// LostClaims is how many writes completed too late: their lease ran out
	// and another owner took the key over before [Store.Complete]. Each is
	// an item that may have been written twice.
	LostClaims int64
	// Unknown is how many writes failed with an unknown outcome: they may
	// have happened (see [Guard.Write]). Each kept its claim until the
	// lease ended; an item that was written and is then written again once
	// the lease ended is a duplicate the guard could not absorb.
	Unknown int64
	// Unrecorded is how many writes succeeded and could not be recorded
	// at once: the store's Complete failed (the store away, or a panic in
	// it), counted once per write, unless it is counted in LostClaims.
	// The item's retry by this guard records
	// the key without writing again; an item whose retries run out before
	// the store is back, or whose retry comes when the guard has forgotten
	// the write (two leases after the last failure that kept it), may be written
	// again once the lease ends. The rows written twice are at most
	// Unknown plus LostClaims plus Unrecorded, summed over every guard on
	// the store, but for writes whose process ended between the write and
	// its completion, which nobody counts.
	Unrecorded int64
}

// Sink returns a [Guard] that writes each item through sink once per key:
// key(item) names the item (an order's id, a message's id set by its
// producer, never a broker's delivery tag, which changes on redelivery),
// and store records which keys were claimed and completed.
//
// Sink panics, with a message naming every problem, when sink, store or
// key is nil or an option is invalid (see each option): these are
// mistakes in the program, not in its input, and the program's first test
// finds them.
func Sink[T any](sink node.Sink[T], store Store, key func(T) string, opts ...Option) *Guard[T] {
	cfg := defaults()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	var problems []string
	if sink == nil {
		problems = append(problems, "sink is nil")
	}
	if store == nil {
		problems = append(problems, "store is nil")
	}
	if key == nil {
		problems = append(problems, "key function is nil")
	}
	problems = append(problems, cfg.problems...)
	if len(problems) > 0 {
		panic("sluice: idempotency.Sink: " + strings.Join(problems, "; "))
	}
	if cfg.owner == "" {
		cfg.owner = randomOwner()
	}
	return &Guard[T]{sink: sink, store: store, key: key, cfg: cfg, inFlight: make(map[string]struct{})}
}

// Owner returns the owner the guard claims keys as: the one set by
// [WithOwner], or the random one it made.
func (g *Guard[T]) Owner() string { return g.cfg.owner }

// Stats returns what the guard did so far. It is safe to call while the
// guard writes; the counts are read one by one, not as one snapshot.
func (g *Guard[T]) Stats() Stats {
	return Stats{
		Written:    g.written.Load(),
		Duplicates: g.duplicates.Load(),
		Busy:       g.busy.Load(),
		Released:   g.released.Load(),
		LostClaims: g.lost.Load(),
		Unknown:    g.unknowns.Load(),
		Unrecorded: g.unrecorded.Load(),
	}
}

// Write writes item through the wrapped sink unless its key was completed
// before. It claims the key, at the guard's clock's time, for the lease;
// then:
//
//   - the key was completed: Write returns nil without writing, and counts
//     a duplicate;
//   - another owner holds a live claim, or another call of this guard is
//     writing the key: Write returns a transient error matching
//     [ErrInProgress];
//   - the claim is the guard's: Write calls the wrapped sink. If the sink
//     fails (or panics), Write releases the claim and returns the sink's
//     error unchanged, for the pipeline's classifier to judge; if it
//     succeeds, Write marks the key completed.
//
// A write that fails with an unknown outcome may have happened: its
// error matches context.Canceled, context.DeadlineExceeded,
// os.ErrDeadlineExceeded, a net.Error timeout or [ErrUnknownOutcome], or
// the context it was given has ended. Write then keeps the claim until its
// lease ends, instead of releasing it, and counts the write in
// Stats.Unknown: until then every owner, this guard included, finds the
// key busy ([ErrInProgress]) (a guard made anew with the same owner, as a
// restarted process with a stable [WithOwner] is, knows nothing of the
// write: the store grants it the claim at once, and it writes again);
// after, the key is claimed and written again,
// which duplicates the item if the first write had happened. The busy
// error this guard gives its own later calls for the key carries
// [resilience.RetryAfter] of the lease time left, so that the item's
// retry waits for the lease to end instead of spending its retries on a
// claim nobody else holds.
//
// Completion and release run on a context that the caller's cancellation
// does not end, bounded by [WithStoreTimeout], so that a write that
// succeeded is recorded even when the run is stopping.
//
// If completion fails (or panics), the item was written but the key is
// not recorded: Write returns a transient error wrapping the store's,
// counts the write in Stats.Unrecorded, once, and keeps the key pending in
// this guard, so that the item's retry only records it and never writes
// it again (the guard forgets it two leases after the last failure that
// kept it);
// the claim is kept, so that no other owner writes the item before the
// lease runs out. If completion finds the claim lost
// ([ErrLostClaim]: the write overran its lease and another owner took the
// key over, and may have written it too), Write counts it in LostClaims,
// once per write, also when the completion had failed before; since the
// item was written, Write then claims the key again and records it, and
// returns nil (also when another owner completed it meanwhile). While
// another owner holds the key, or that claim fails, Write returns a
// transient error instead (matching [ErrInProgress] and not the item's
// fault in the first case), and keeps the key pending: the item's retry
// records it, never writing it again.
//
// A key that is empty gives a permanent error matching [ErrEmptyKey]; an
// error of the store's Claim is returned wrapped, transient (but for
// [ErrFull]).
func (g *Guard[T]) Write(ctx context.Context, item T) error {
	key := g.key(item)
	if key == "" {
		return resilience.MarkPermanent(fmt.Errorf("%w%s", ErrEmptyKey, g.where("")))
	}
	if !g.enter(key) {
		g.busy.Add(1)
		return g.inProgress(key)
	}
	defer g.leave(key)
	if g.pendingComplete(key) {
		// Written by this guard, not yet recorded: record it, and never
		// write it again.
		return g.complete(key, ctx)
	}
	now := g.cfg.clock.Now()
	if until, ok := g.unknownUntil(key, now); ok {
		// This guard's own claim, kept after a write of unknown outcome:
		// the key is free again when its lease ends, so the item's retry
		// is asked to wait that long rather than spend its retries.
		g.busy.Add(1)
		return resilience.RetryAfter(g.inProgress(key), until.Sub(now))
	}
	state, err := g.store.Claim(ctx, key, g.cfg.owner, now, g.cfg.lease)
	if err != nil {
		err = fmt.Errorf("idempotency: claim%s: %w", g.where(key), err)
		if errors.Is(err, ErrFull) {
			return err // the bound is too small: retrying does not help
		}
		// The store is a dependency like any other: its failure is the
		// item's to retry, not a reason to give the item up.
		return resilience.MarkTransient(err)
	}
	switch state {
	case Claimed:
		return g.write(ctx, key, item, now)
	case Completed:
		g.duplicates.Add(1)
		return nil
	case Busy:
		g.busy.Add(1)
		return g.inProgress(key)
	}
	return fmt.Errorf("idempotency: the store answered %v to a claim%s", state, g.where(key))
}

// write writes item under the claim on key, made at claimed, then
// completes the key; the claim is released however the write fails, a
// panic included, unless its outcome is unknown: then it is kept until its
// lease ends.
func (g *Guard[T]) write(ctx context.Context, key string, item T, claimed time.Time) error {
	written := false
	defer func() {
		if !written {
			g.release(ctx, key)
		}
	}()
	if err := g.sink.Write(ctx, item); err != nil {
		if unknownOutcome(ctx, err) {
			written = true // perhaps: the claim stays
			g.unknowns.Add(1)
			g.setUnknown(key, claimed.Add(g.cfg.lease))
		}
		return err
	}
	written = true
	defer g.written.Add(1) // after Complete, so that a count read says the key is recorded, if it could be
	completed := false
	defer func() {
		if !completed {
			// The store's Complete panicked: the item was written,
			// and its retry must record it, not write it again.
			g.setPending(key, true)
			g.countUnrecorded(key)
		}
	}()
	err := g.complete(key, ctx)
	completed = true
	return err
}

// complete records key as completed after this guard wrote it. A claim
// lost meanwhile (the write overran its lease, and another owner took the
// key over) is counted, and the item is done: it was written; if the key
// is free again, the guard claims and completes it. Another failure keeps
// the key pending in this guard, and returns a transient error: the
// item's retry records it then, without writing again.
func (g *Guard[T]) complete(key string, ctx context.Context) error {
	sctx, cancel := g.storeContext(ctx)
	defer cancel()
	err := g.store.Complete(sctx, key, g.cfg.owner, g.cfg.clock.Now())
	switch {
	case err == nil:
		g.setPending(key, false)
		return nil
	case errors.Is(err, ErrLostClaim):
		g.countLost(key) // once per write, not per retry that records it
		// Nobody may hold the key now (the owner that took it over failed
		// and released it): claim it again and record the write, so that
		// a redelivery does not write it once more. A completion by
		// another owner is theirs. While another owner holds the key, or
		// the claim fails (it may have been granted all the same), the
		// write stays to be recorded: the item's retry tries again.
		st, cerr := g.store.Claim(sctx, key, g.cfg.owner, g.cfg.clock.Now(), g.cfg.lease)
		switch {
		case cerr != nil:
			g.setPending(key, true)
			return resilience.MarkTransient(fmt.Errorf("idempotency: claim again to record the write, after the claim was lost%s: %w", g.where(key), cerr))
		case st == Busy:
			g.setPending(key, true)
			g.busy.Add(1)
			return resilience.MarkBlameless(resilience.MarkTransient(fmt.Errorf("%w%s: written, and held by another owner since; the write is recorded once it is free",
				ErrInProgress, g.where(key))))
		case st == Claimed:
			if err := g.store.Complete(sctx, key, g.cfg.owner, g.cfg.clock.Now()); err != nil && !errors.Is(err, ErrLostClaim) {
				g.setPending(key, true)
				return resilience.MarkTransient(fmt.Errorf("idempotency: complete after the write%s: %w", g.where(key), err))
			}
		}
		g.setPending(key, false)
		return nil
	}
	g.setPending(key, true)
	g.countUnrecorded(key)
	return resilience.MarkTransient(fmt.Errorf("idempotency: complete after the write%s: %w", g.where(key), err))
}

// unknownOutcome reports whether a write that failed with err, under ctx,
// may have happened all the same.
func unknownOutcome(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, ErrUnknownOutcome) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// inProgress is the error of a key that is busy: transient, and not the
// item's fault.
func (g *Guard[T]) inProgress(key string) error {
	return resilience.MarkBlameless(resilience.MarkTransient(fmt.Errorf("%w%s", ErrInProgress, g.where(key))))
}

// unknownUntil reports whether key's last write by this guard had an
// unknown outcome and its claim's lease has not ended at now, and when it
// ends; a key whose lease ended is forgotten.
func (g *Guard[T]) unknownUntil(key string, now time.Time) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	until, ok := g.unknown[key]
	if !ok {
		return time.Time{}, false
	}
	if now.Before(until) {
		return until, true
	}
	delete(g.unknown, key)
	return time.Time{}, false
}

// setUnknown records that key's write had an unknown outcome and its claim
// lasts until until. Keys whose lease ended are swept now and then, so
// that keys never written again do not pile up.
func (g *Guard[T]) setUnknown(key string, until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.unknown == nil {
		g.unknown = map[string]time.Time{}
	}
	if n := len(g.unknown); n >= 64 && n&(n-1) == 0 {
		now := g.cfg.clock.Now()
		for k, u := range g.unknown {
			if !now.Before(u) {
				delete(g.unknown, k)
			}
		}
	}
	g.unknown[key] = until
}

// pendingComplete reports whether this guard wrote key and could not
// record it yet; a mark past its time is forgotten.
func (g *Guard[T]) pendingComplete(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	w, ok := g.pending[key]
	if ok && !g.cfg.clock.Now().Before(w.until) {
		delete(g.pending, key)
		return false
	}
	return ok
}

// setPending marks key as written by this guard and not recorded yet, or
// no longer so; a mark kept keeps what was counted of it, and lasts two
// leases from now, a lease after the lease of any claim this guard made on
// the key before now. Then it is forgotten: marks past their time are
// swept now and then, so that the keys of items whose retries ran out do
// not pile up.
func (g *Guard[T]) setPending(key string, on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !on {
		delete(g.pending, key)
		return
	}
	w := g.pendingLocked(key)
	w.until = g.cfg.clock.Now().Add(2 * g.cfg.lease)
	g.pending[key] = w
}

// pendingLocked returns key's pending mark, made now if it has none; g.mu
// is held. A mark past its time is still this write's (Write forgets such
// a mark before it writes again, in pendingComplete): its counts stand.
func (g *Guard[T]) pendingLocked(key string) pendingWrite {
	now := g.cfg.clock.Now()
	if w, ok := g.pending[key]; ok {
		return w
	}
	if g.pending == nil {
		g.pending = map[string]pendingWrite{}
	}
	if n := len(g.pending); n >= 64 && n&(n-1) == 0 {
		for k, w := range g.pending {
			if !now.Before(w.until) {
				delete(g.pending, k)
			}
		}
	}
	w := pendingWrite{until: now.Add(2 * g.cfg.lease)}
	g.pending[key] = w
	return w
}

// countLost counts key's lost claim in LostClaims, unless it was counted
// for this write already (a retry that records a pending write finds the
// claim lost again). A write pending for another reason (its completion
// failed) whose claim is then found lost is counted: another owner may
// have written it too. The mark is kept two leases from now, as the guard
// is about to claim the key again, so that whatever ends the recording
// (a panic included) leaves the write marked while that claim lives.
func (g *Guard[T]) countLost(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.pendingLocked(key)
	w.until = g.cfg.clock.Now().Add(2 * g.cfg.lease)
	if !w.lost {
		w.lost = true
		g.lost.Add(1)
	}
	g.pending[key] = w
}

// countUnrecorded counts key's failed completion in Unrecorded, once per
// write, and not for a write counted in LostClaims already; key is
// pending.
func (g *Guard[T]) countUnrecorded(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.pendingLocked(key)
	if w.unrecorded || w.lost {
		return
	}
	w.unrecorded = true
	g.pending[key] = w
	g.unrecorded.Add(1)
}

// release drops the claim on key after a failed write. An error is not
// returned: the write's error is the one that matters, and a claim that
// could not be released lapses when its lease runs out.
func (g *Guard[T]) release(ctx context.Context, key string) {
	sctx, cancel := g.storeContext(ctx)
	defer cancel()
	if g.store.Release(sctx, key, g.cfg.owner) == nil {
		g.released.Add(1)
	}
}

// storeContext returns a context for the store calls that follow a write:
// it keeps ctx's values but not its cancellation, and ends after the
// store timeout. The timeout bounds the store's input and output, so it
// runs on the real clock, not the guard's: a fake clock that nobody
// advances must not hold a write for ever.
func (g *Guard[T]) storeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), g.cfg.storeTimeout)
}

// enter marks key as being written by this guard, and reports false if it
// was already: two calls of one guard share an owner, so the store alone
// cannot keep them apart.
func (g *Guard[T]) enter(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.inFlight[key]; ok {
		return false
	}
	g.inFlight[key] = struct{}{}
	return true
}

func (g *Guard[T]) leave(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.inFlight, key)
}

// maxKeyInError is how much of a key an error message shows.
const maxKeyInError = 64

// where names the guard and the key in an error message, as
// ` (guard "g", key "k")`; the guard is left out when it has no name, and
// a long key is cut.
func (g *Guard[T]) where(key string) string {
	var parts []string
	if g.cfg.name != "" {
		parts = append(parts, fmt.Sprintf("guard %q", g.cfg.name))
	}
	if key != "" {
		if len(key) > maxKeyInError {
			parts = append(parts, fmt.Sprintf("key %q… (%d bytes)", key[:maxKeyInError], len(key)))
		} else {
			parts = append(parts, fmt.Sprintf("key %q", key))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// Unwrap returns the wrapped sink (node.Wrapper): a node restart closes
// and opens the guard only when the wrapped sink has an Open.
func (g *Guard[T]) Unwrap() any { return g.sink }

// Open calls the wrapped sink's Open, if it has one.
func (g *Guard[T]) Open(ctx context.Context) error {
	if o, ok := g.sink.(node.Opener); ok {
		return o.Open(ctx)
	}
	return nil
}

// Close calls the wrapped sink's Close, if it has one.
func (g *Guard[T]) Close(ctx context.Context) error {
	if c, ok := g.sink.(node.Closer); ok {
		return c.Close(ctx)
	}
	return nil
}

// Flush calls the wrapped sink's Flush, if it has one.
//
// A sink that buffers reports a write done before the data is durable;
// the guard completes the key when Write returns, so a crash between the
// write and the flush loses the item although its key is completed. Wrap
// only sinks whose Write makes the item durable, or accept that loss.
func (g *Guard[T]) Flush(ctx context.Context) error {
	if f, ok := g.sink.(node.Flusher); ok {
		return f.Flush(ctx)
	}
	return nil
}

var (
	_ node.Sink[int] = (*Guard[int])(nil)
	_ node.Opener    = (*Guard[int])(nil)
	_ node.Closer    = (*Guard[int])(nil)
	_ node.Flusher   = (*Guard[int])(nil)
)
