// Package idempotency makes a sink write each item once, however many times
// the item reaches it. A source that redelivers (a broker that did not see
// an ack, a re-drive of dead letters, a second consumer that got the same
// message) hands a sink the same item again; wrapped by [Sink], the sink
// writes it only if its key was not completed before.
//
// A [Guard] asks a [Store] for a claim on the item's key before it writes:
//
//   - [Claimed]: the guard writes, then marks the key completed;
//   - [Completed]: the key was written before; the guard skips the item and
//     counts a duplicate in [Guard.Stats];
//   - [Busy]: another owner holds a live claim; the guard returns a
//     transient error matching [ErrInProgress], so that the pipeline's item
//     retry tries again later, when the key is completed (skipped) or the
//     claim's lease ran out (taken over).
//
// A write that fails with an unknown outcome (its context ended, a
// deadline passed, or its error wraps [ErrUnknownOutcome]) may have
// happened: the guard keeps its claim until the lease ends, instead of
// releasing it, and counts it in [Stats].Unknown.
//
// A claim lasts a lease, so that a consumer that crashed between claim and
// completion does not hold its keys for ever: once the lease ran out,
// another owner takes the key over and writes it. A write that overran its
// lease may therefore be duplicated; a lease must outlast one write.
//
// Stores: [NewMemory] (one process), the sqlstore sub-package (SQLite or
// PostgreSQL through database/sql), the redisstore sub-package (Redis).
// Every store passes the conformance suite in the storetest sub-package.
// The time a store compares leases and retention against comes from the
// caller, from the guard's clock, so that every store works on a fake
// clock.
package idempotency
