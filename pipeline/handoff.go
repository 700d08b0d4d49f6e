package pipeline

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/deadletter"
)

// A HandOffSource is a source whose broker can take over an item's long
// wait: when a node's item retry would wait at least HandOffAfter before
// its next call, the engine does not hold a worker for the wait; it hands
// the item back to the source's broker (see [HandOffItem]), which delivers
// it again after the wait. Shorter waits stay in process. HandOffAfter
// returns 0 when the source takes over no wait.
//
// RabbitMQ's source offers this with its retry topology's HandOffAfter.
type HandOffSource interface {
	HandOffAfter() time.Duration
}

// A HandOffItem is an item that a [HandOffSource] emits with EmitTracked
// and can hand back to its broker.
//
// HandOff asks the broker to deliver the item again after h.Delay, with
// the story of its calls so far (h.Envelope). It returns nil once the
// broker holds the item: the item's done then runs with node.HandedOff,
// and the delivery is settled. An error keeps the item in process: the
// node waits the delay itself and retries, as without hand-off. HandOff
// runs on the node's goroutine and may block, as a dead-letter write does.
//
// Resumed says where the item's previous delivery was handed off: the node
// and the retry its next call makes there. That node's item retry then
// continues the count (its first call is that retry, its next delay the
// backoff's for the retry after it) instead of starting again.
type HandOffItem interface {
	HandOff(ctx context.Context, h HandOff) error
	Resumed() (node string, retry int, ok bool)
}

// A HandOff is an item's retry given to its source's broker.
type HandOff struct {
	// Envelope tells the item's story so far, as a dead letter would:
	// Item, Err (the failure that asked for the retry), the node
	// (OriginNode and DecisionNode), Attempts, History, FirstFailure and
	// LastFailure. History is kept only when the node may dead-letter.
	Envelope deadletter.Envelope
	// Retry is the item retry that the next delivery makes at the node:
	// the one that would have waited.
	Retry int
	// Delay is the wait the node's backoff (or the error's Retry-After)
	// chose before that retry.
	Delay time.Duration
}

// handOffState is what a root tracker knows of its item's hand-off.
type handOffState struct {
	item  HandOffItem
	after time.Duration
	// resume: the node whose retries the item's delivery continues, and
	// the retry its first call there is ("" once taken).
	node  string
	retry int
	// split: the item was ever split into parts (broadcast, FlatMap,
	// Unbatch): a part cannot be delivered again alone.
	split atomic.Bool
}

// newHandOff returns the hand-off state of item emitted by a source whose
// threshold is after, or nil when the item cannot be handed off.
func newHandOff[T any](item T, after time.Duration) *handOffState {
	hi, ok := any(item).(HandOffItem)
	if !ok {
		return nil
	}
	h := &handOffState{item: hi, after: after}
	if n, r, ok := resumed(hi); ok && r > 0 {
		h.node, h.retry = n, r
	}
	return h
}

// resumed calls the item's Resumed under the panic guard: a panic says
// nothing was handed off.
func resumed(hi HandOffItem) (n string, r int, ok bool) {
	defer func() {
		if recover() != nil {
			n, r, ok = "", 0, false
		}
	}()
	return hi.Resumed()
}

// resume returns the retry that the item's first call at node continues,
// 0 when it starts afresh; it is taken once.
func (t *tracker) resume(node string) int {
	if t == nil || t.ho == nil || t.ho.node == "" || t.ho.node != node {
		return 0
	}
	r := t.ho.retry
	t.ho.node = ""
	return r
}

// handOffFor returns the hand-off state of t when its item can be handed
// off for a wait of d: t is a root tracker whose source takes over waits
// of d and more, and the item was never split into parts (a part of a
// broadcast or a FlatMap could not be delivered again alone, and another
// part may already be written).
func (t *tracker) handOffFor(d time.Duration) *handOffState {
	if t == nil || t.ho == nil || t.ho.after <= 0 || d < t.ho.after || t.done == nil || t.ho.split.Load() || t.refs.Load() != 1 {
		return nil
	}
	return t.ho
}

// handOff gives item's retry to its source's broker; it reports whether
// the broker took it.
func (nr *nodeRun) handOff(ctx context.Context, h *handOffState, item any, fl *failure, retry int, d time.Duration) bool {
	env, err := nr.envelope(item, fl)
	if err != nil {
		return false
	}
	herr := protect(func() {
		err = h.item.HandOff(ctx, HandOff{Envelope: env, Retry: retry, Delay: d})
	})
	return herr == nil && err == nil
}

// A DeadLetterWriter is a source that writes some items to the pipeline's
// dead-letter sink itself, such as a broker source that dead-letters a
// poison message instead of emitting it again. Before each run opens the
// source, the engine calls UseDeadLetter with the run's dead-letter sink
// (nil when the pipeline has none) and an envelope holding what the engine
// knows: Pipeline, RunID, and the source's name as OriginNode and
// DecisionNode. The node fills in the rest (Item, ItemType, Err, ErrText,
// Attempts, ...). A write the sink refuses is the node's to report: it must
// not drop the item.
type DeadLetterWriter interface {
	UseDeadLetter(sink deadletter.Sink, base deadletter.Envelope)
}
