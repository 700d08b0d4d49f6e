package observer

import "context"

// A Tracer puts each call of a node's function on an item, one attempt,
// in a span of its own: the OpenTelemetry plug-in's NewTracer is one. A
// run traces when the context given to Run carries a Tracer
// ([WithTracer]); without one, the engine calls nothing and keeps its
// fast paths.
//
// StartAttempt is called before the attempt with the context the call
// would get, and returns the context the call gets instead (a span's
// child context, so that the user's function can add to the span) and a
// function that ends the span with the call's error, nil on success. Both
// are called from the node's goroutines, concurrently under Parallel; a
// panic in either fails the run, naming the tracer.
type Tracer interface {
	StartAttempt(ctx context.Context, a Attempt) (context.Context, func(err error))
}

// An Attempt is one call of a node's function on an item.
type Attempt struct {
	// Pipeline is the name of the pipeline the call runs in.
	Pipeline string
	// RunID identifies the run, as in [Event].
	RunID string
	// Node is the name of the node whose function is called.
	Node string
	// Key is the item's correlation key (pipeline.SourceKey, or the item's
	// own Correlated), empty when it has none.
	Key string
	// Number counts the item's calls on this node: 1 for its first,
	// across the item retries and node restarts of this run. It counts
	// the calls that failed: a call replayed after a node restart that
	// another item caused, when the item's last call had succeeded but
	// was not yet handed on (under Parallel), repeats the number before.
	Number int
	// Links are the trace headers the item arrived with
	// (pipeline.SourceTraceHeaders), such as a message's W3C traceparent:
	// one map for an item, one per item that has some for a batch or
	// window; nil without. They must not be changed.
	Links []map[string]string
}

type tracerKey struct{}

// WithTracer returns a copy of ctx that carries t: a run given it traces
// every attempt with t.
func WithTracer(ctx context.Context, t Tracer) context.Context {
	return context.WithValue(ctx, tracerKey{}, t)
}

// TracerFrom returns the Tracer ctx carries, or nil.
func TracerFrom(ctx context.Context) Tracer {
	t, _ := ctx.Value(tracerKey{}).(Tracer)
	return t
}
