// Package deadletter holds the items a pipeline could not deliver: the
// [Envelope] that carries a failed item with its error and history, the
// [Sink] interface the engine writes envelopes to, and the sinks Sluice
// provides: an in-memory sink for tests ([NewMemory]), a [Func] adapter,
// and the durable JSON-lines file sink that is the embedded default
// ([OpenFile]).
//
// Dead letters are read back with [ReadFile] (one file), [ReadAll] (a
// file with the files its rotation produced) and [ReadRecords] (with line
// numbers and raw lines, for tools), and re-driven into a pipeline with
// [Source]. The command sluice dlq (cmd/sluice) lists, counts, shows and
// filters dead-letter files.
package deadletter

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/sluicehq/sluice/resilience"
)

// An Envelope is one dead-lettered item with everything known of its
// failure.
type Envelope struct {
	// Item is the item that failed. Read back from a file it is a
	// json.RawMessage of the encoded item.
	Item any `json:"item"`
	// ItemType is the Go type of Item as [TypeOf] names it, so that a
	// re-drive can refuse an item of another type instead of decoding it
	// into the wrong one. The engine and the file sink fill it in; it is
	// empty for a nil item and in files written before it existed.
	ItemType string `json:"item_type,omitempty"`
	// Err is the error that decided the item's fate. It does not survive a
	// file; ErrText does.
	Err error `json:"-"`
	// ErrText is Err's text, which a file keeps; empty when Err is nil.
	ErrText string `json:"error"`

	// Pipeline is the name of the pipeline the item failed in.
	Pipeline string `json:"pipeline"`
	// RunID identifies the run the item failed in, as the pipeline's
	// events do.
	RunID        string `json:"run_id"`
	OriginNode   string `json:"origin_node"`   // where the item failed
	DecisionNode string `json:"decision_node"` // where it was dead-lettered
	// CorrelationID names the item: its own ([Correlated]), else the key
	// its source gave it; empty when it has neither.
	CorrelationID string `json:"correlation_id,omitempty"`
	// Source is the source node the item, or the item it derives from,
	// was emitted by with a position (node.Emitter's EmitAt); empty
	// otherwise.
	Source string `json:"source,omitempty"`
	// Position is the position that item was emitted at; empty otherwise.
	// A resumed run replays the items after its last checkpoint, and the
	// file sink writes no second envelope for one it already holds (see
	// OpenFile).
	Position []byte `json:"position,omitempty"`

	Attempts int `json:"attempts"` // calls made
	// History is the item's failed calls, oldest first, across item
	// retries and node restarts; empty when the engine did not record
	// them.
	History []Attempt `json:"history"`
	// FirstFailure is when the item's first failed call ended, on the
	// pipeline's clock; zero when no call was recorded.
	FirstFailure time.Time `json:"first_failure"`
	// LastFailure is when its last failed call ended; zero when no call
	// was recorded.
	LastFailure time.Time `json:"last_failure"`

	// ItemError is set when the file sink could not encode Item, or its
	// JSON would not give Item back as it is ([ErrLossy]): it holds the
	// encoder's error, the file holds a null item, and ItemText holds
	// the item as [Describe] renders it (bounded, safe for cyclic items),
	// so that a person can still see what failed. Both are empty when Item
	// was encoded.
	ItemError string `json:"item_error,omitempty"`
	// ItemText is the item as [Describe] renders it, when ItemError is
	// set; empty otherwise.
	ItemText string `json:"item_text,omitempty"`
}

// TypeOf names the Go type of item with its full package path, as
// "github.com/acme/shop.Order", "*github.com/acme/shop.Order" or
// "[]int"; "" for a nil item. Only the outermost named type, under any
// pointers, has its full path; other composite types are named as
// reflect.Type.String does.
func TypeOf(item any) string {
	if item == nil {
		return ""
	}
	return typeName(reflect.TypeOf(item))
}

func typeName(t reflect.Type) string {
	if t.Kind() == reflect.Pointer && t.Name() == "" {
		return "*" + typeName(t.Elem())
	}
	if t.Name() != "" && t.PkgPath() != "" {
		return t.PkgPath() + "." + t.Name()
	}
	return t.String()
}

// An Attempt is one failed call in an envelope's history.
type Attempt struct {
	// Time is when the call failed, on the pipeline's clock.
	Time time.Time `json:"time"`
	// Layer is the resilience layer that made the call: item retry, or
	// node restart for the first call after a restart.
	Layer resilience.RetryKind `json:"layer"`
	Retry int                  `json:"retry"` // 0 for the first call of the layer
	Delay time.Duration        `json:"delay"` // the wait chosen after this call, before the next; 0 after the last
	// Err is the text of the call's error.
	Err string `json:"error"`
	// Node is the node that made the call, when it is not the envelope's
	// OriginNode: a broker source's poison envelope tells each failed run
	// of the message, and each may have failed at another node. "" means
	// the envelope's OriginNode.
	Node string `json:"node,omitempty"`
}

// A Correlated item names itself for its envelope: the engine copies
// CorrelationID into [Envelope.CorrelationID].
type Correlated interface {
	CorrelationID() string
}

// A Sink stores envelopes. Write must be safe for concurrent use; an error
// makes the engine retry the write with its own backoff, then fail the run.
type Sink interface {
	Write(ctx context.Context, env Envelope) error
}

// A BrokerRetrier is a [Sink] that may give an envelope's item back to the
// broker it came from, to be delivered again, instead of storing it: the
// broker's own retry path, the outermost layer. The dead-letter sinks of
// the broker sources (rabbitmq.Source.DeadLetter, nats.Source.DeadLetter)
// are BrokerRetriers. The engine calls WriteOrRetry instead of Write, and
// counts an item that went back to its broker as a broker retry
// (NodeStats.BrokerRetries), never as a dead letter. A sink that wraps a
// BrokerRetrier hides it, unless it is one itself: give the broker
// source's sink to the pipeline as it is.
type BrokerRetrier interface {
	Sink
	// WriteOrRetry stores env as Write does, and returns retried false;
	// or it gives the item back to its broker, and returns retried true.
	// An error is a write that failed, as Write's.
	WriteOrRetry(ctx context.Context, env Envelope) (retried bool, err error)
}

// Func adapts a function to a [Sink].
type Func func(ctx context.Context, env Envelope) error

// Write calls f(ctx, env).
func (f Func) Write(ctx context.Context, env Envelope) error { return f(ctx, env) }

// ErrFull is returned by a [Memory] sink past its capacity.
var ErrFull = errors.New("deadletter: sink full")
