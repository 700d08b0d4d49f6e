// Package node holds the contracts a Sluice user implements: a [Source]
// that emits items, a [Transform] that turns one item into another, and a
// [Sink] that writes items out, with adapters for plain functions and the
// optional lifecycle interfaces [Opener], [Closer] and [Flusher].
//
// The pipeline package runs these; nothing here starts a goroutine.
package node

import (
	"context"
	"fmt"
	"time"
)

// A Source produces the items of a pipeline. Run emits items until its
// input is exhausted, then returns nil; it returns an error when it cannot
// go on. Run must return soon after ctx is done.
//
// Under node restart a source is restarted by calling Run again; it resumes
// from where its system says (a broker redelivers what was not acked).
type Source[T any] interface {
	Run(ctx context.Context, out Emitter[T]) error
}

// An Emitter hands a source's items to the pipeline. It is used by the
// goroutine that runs [Source.Run], one call at a time: it is not safe for
// concurrent use.
type Emitter[T any] interface {
	// Emit sends item downstream. It blocks while the pipeline is full
	// (backpressure) and returns an error once the run is stopping or ctx
	// is done; the source should then return. Called after Run returned,
	// it fails with pipeline.ErrEmitAfterReturn.
	Emit(ctx context.Context, item T) error
	// EmitTracked is Emit with end-to-end completion: done runs exactly
	// once, when the item and every item derived from it reached a terminal
	// Outcome, or with Failed when the run ended first. It runs on an engine
	// goroutine and must be quick and must not block; a broker source acks
	// or nacks there. If EmitTracked returns an error, done has run with
	// Failed before it returns.
	EmitTracked(ctx context.Context, item T, done func(Outcome)) error
	// EmitAt is Emit for an item at position pos in the source's input:
	// the point just after the item, from which [Resumable.Resume]
	// continues with the next one. When the pipeline keeps checkpoints
	// (pipeline.WithCheckpoint), it saves the highest position at or
	// before which every item, and everything derived from it, has
	// settled. pos is opaque to the pipeline, which keeps it until then:
	// the source must not change it after the call.
	EmitAt(ctx context.Context, item T, pos []byte) error
}

// Resumable is implemented by a source that can continue from a position
// it gave with [Emitter.EmitAt]. The pipeline calls Resume once at the
// start of each of its runs, before any node starts, with the last
// position its checkpoint store saved for the source, or nil to start at
// the beginning; the next Run emits the items after pos. A node restart
// or retry of the source within that run calls Run again without Resume:
// the source goes on from its own state, after the last item it emitted.
// An error fails the run before any node starts.
type Resumable interface {
	Resume(pos []byte) error
}

// Sized is implemented by a source that knows how many items it emits in a
// run, such as a file of known length: progress displays show an ETA.
// Size is called while the pipeline runs, from other goroutines, and must
// be quick and safe for concurrent use; a negative size means unknown.
type Sized interface {
	Size() int64
}

// A Transform turns one input item into one output item.
type Transform[In, Out any] interface {
	Process(ctx context.Context, in In) (Out, error)
}

// A Sink writes items out of the pipeline. An item is Delivered when Write
// returns nil.
type Sink[T any] interface {
	Write(ctx context.Context, item T) error
}

// A Redeliverer is a source whose broker delivers an item again, after a
// delay, when the pipeline gave up on it in process: the outermost retry
// layer (RabbitMQ's retry topology, for one). Redeliveries returns at most
// how many times one item is delivered again, and the delay before each;
// 0 when the source has no such layer. pipeline's Plan multiplies the
// calls of the nodes downstream by it.
type Redeliverer interface {
	Redeliveries() (retries int, delay time.Duration)
}

// An Opener is a node that acquires resources before its first item. Open
// runs once per node start; if it fails, the node has not consumed input,
// so node retry may run it again.
type Opener interface {
	Open(ctx context.Context) error
}

// A Wrapper is a node that wraps another and forwards Open, Close and
// Flush to it when it has them (an idempotent sink around a sink, say).
// Unwrap returns the wrapped node: the engine asks it, not the wrapper,
// whether the node has an Open, so that a wrapped node without Open is
// never closed before the end of the run, as it would not be unwrapped.
type Wrapper interface {
	Unwrap() any
}

// A Closer is a node that releases resources. Close runs once for every Open
// that succeeded (and once at the end for nodes without Open), on success
// and on failure, with a context that is not cancelled by the run's end.
// The final Close of a source that emitted items runs only after the run
// ended and every EmitTracked callback ran, so that the callbacks can still
// use what Close releases; a node restart, though, closes and opens a node
// that has an Open while the run goes on. A node without Open is never
// closed before the end of the run.
type Closer interface {
	Close(ctx context.Context) error
}

// A Flusher is a sink that buffers. Flush runs after the sink's last Write
// when the run succeeds, before Close; an error fails the run. It runs too
// before a node restart closes a sink that has an Open to open it again,
// so that what the sink took before the failure is kept; an error there
// fails the run as well. An item is Delivered once the sink's Write
// returned, before the Flush: a tracked source (a broker's) settles it
// then, so what a Flush that fails held is lost for such a source.
type Flusher interface {
	Flush(ctx context.Context) error
}

// SourceFunc adapts a function to a [Source].
type SourceFunc[T any] func(ctx context.Context, out Emitter[T]) error

// Run calls f(ctx, out).
func (f SourceFunc[T]) Run(ctx context.Context, out Emitter[T]) error { return f(ctx, out) }

// TransformFunc adapts a function to a [Transform].
type TransformFunc[In, Out any] func(ctx context.Context, in In) (Out, error)

// Process calls f(ctx, in).
func (f TransformFunc[In, Out]) Process(ctx context.Context, in In) (Out, error) { return f(ctx, in) }

// SinkFunc adapts a function to a [Sink].
type SinkFunc[T any] func(ctx context.Context, item T) error

// Write calls f(ctx, item).
func (f SinkFunc[T]) Write(ctx context.Context, item T) error { return f(ctx, item) }

// Outcome is the terminal state of one item.
type Outcome int

const (
	// Delivered: the item, or every item derived from it, was written by a
	// sink.
	Delivered Outcome = iota + 1
	// Filtered: a Filter dropped the item on purpose, or a FlatMap turned it
	// into no items.
	Filtered
	// Skipped: the item failed and the node's OnItemFailure said Skip.
	Skipped
	// DeadLettered: the item failed and went to the dead-letter sink.
	DeadLettered
	// Failed: the run ended before the item reached another outcome.
	Failed
	// Rejected: the item failed, its node's failure action said Fail, and
	// the run failed because of it. Like Failed, the item has no other
	// outcome; unlike Failed, it is to blame (a broker source counts it
	// towards a poison message's limit).
	Rejected
	// HandedOff: a node's item retry would have waited longer than the
	// source's hand-off threshold, or was parked when the pipeline
	// drained, and the source's broker took the item over: it holds the
	// item for the wait and delivers it again, and the next delivery
	// continues the retries (see deadletter.HandOffItem). For the source
	// it means: done here, settle the delivery.
	HandedOff
)

// String returns the outcome's name in lower case.
func (o Outcome) String() string {
	switch o {
	case Delivered:
		return "delivered"
	case Filtered:
		return "filtered"
	case Skipped:
		return "skipped"
	case DeadLettered:
		return "dead_lettered"
	case Failed:
		return "failed"
	case HandedOff:
		return "handed_off"
	case Rejected:
		return "rejected"
	default:
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
}

// Combine returns the outcome of an item whose parts ended in o and p: the
// more severe of the two, in the order Filtered, Delivered, Skipped,
// HandedOff, DeadLettered, Failed, Rejected. An item delivered on one branch of a broadcast and
// filtered on the other is Delivered; one with a dead-lettered part is
// DeadLettered. A zero Outcome is no outcome yet.
func (o Outcome) Combine(p Outcome) Outcome {
	if severity(p) > severity(o) {
		return p
	}
	return o
}

func severity(o Outcome) int {
	switch o {
	case Filtered:
		return 1
	case Delivered:
		return 2
	case Skipped:
		return 3
	case HandedOff:
		return 4
	case DeadLettered:
		return 5
	case Failed:
		return 6
	case Rejected:
		return 7
	default:
		return 0
	}
}
