package deadletter

import (
	"context"
	"time"
)

// This file holds the hooks a broker connector implements so that the
// engine can hand an item's long wait to its broker, let a source write
// dead letters itself, and tell an item why it failed a run. They live
// here, beside [BrokerRetrier], because each speaks in an [Envelope]: a
// connector implements them without importing the engine (package
// pipeline), which calls them.

// A HandOffSource is a source whose broker can take over an item's long
// wait: when a node's item retry would wait at least HandOffAfter before
// its next call, the engine does not hold a worker for the wait; it hands
// the item back to the source's broker (see [HandOffItem]), which delivers
// it again after the wait. Shorter waits stay in process, except that a
// pipeline that drains hands back, whatever is left of its wait, an item
// parked on a Parallel node (see pipeline.Pipeline.Drain). HandOffAfter
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
// Resumed says where the item's previous delivery was handed off (ok
// false for none): the node, the retry its next call makes there, and
// when the retries started. That node's item retry then continues the
// count (its first call is that retry, its next delay the backoff's for
// the retry after it, and MaxElapsed counts from Since) instead of
// starting again.
type HandOffItem interface {
	HandOff(ctx context.Context, h HandOff) error
	Resumed() (r Resume, ok bool)
}

// A Resume is where a hand-off left an item's retries.
type Resume struct {
	// Node is the node whose item retry handed the item off.
	Node string
	// Retry is the retry the item's next call at Node makes (HandOff.Retry).
	Retry int
	// Since is when the retries started (HandOff.Since); zero for unknown.
	Since time.Time
}

// A HandOff is an item's retry given to its source's broker.
type HandOff struct {
	// Envelope tells the item's story so far, as a dead letter would:
	// Item, Err (the failure that asked for the retry), the node
	// (OriginNode and DecisionNode), Attempts, History, FirstFailure and
	// LastFailure. History is kept only when the node may dead-letter.
	Envelope Envelope
	// Retry is the item retry that the next delivery makes at the node:
	// the one that would have waited.
	Retry int
	// Delay is the wait the node's backoff (or the error's Retry-After)
	// chose before that retry; for an item parked when its pipeline
	// drained, what was left of it.
	Delay time.Duration
	// Since is when the item's retries at the node started, on the
	// pipeline's clock: the item retry's MaxElapsed counts from there, in
	// this delivery and the next ones. Give it back in Resume.Since.
	Since time.Time
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
//
// A letter the sink stores counts in the source's DeadLettered, one the
// sink gives back to the broker (a [BrokerRetrier]) in its
// BrokerRetries, and observers get OnDeadLetter for either, as for a
// letter a node writes.
type DeadLetterWriter interface {
	UseDeadLetter(sink Sink, base Envelope)
}

// A RejectedItem is an item a source emits with EmitTracked that wants to
// know why it failed the run: when a node's failure action is Fail and the
// item (or a batch holding only it) fails that node, the engine calls
// Rejected with what a dead letter would say of the failure, before the
// run ends and the item's done runs with node.Rejected. A broker source
// keeps it, so that the envelope of a message it stops as poison names
// the node and the error of each failed run.
//
// The envelope holds Err and ErrText (the error or the panic's text),
// OriginNode and DecisionNode (the node that failed), Attempts (the calls
// the node made on the item in this run), LastFailure (when, on the
// pipeline's clock), and History when the node keeps one. Its Item is the
// node's input, which may be derived from the emitted item. A node
// restart may take the item up again after this call: only an outcome of
// node.Rejected says that the failure stood. Rejected runs on the node's
// goroutine and must be quick; a panic in it is ignored.
type RejectedItem interface {
	Rejected(env Envelope)
}
