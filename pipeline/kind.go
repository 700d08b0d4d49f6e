package pipeline

import "github.com/sluicehq/sluice/observer"

// A NodeKind says what a node does: the function that added it. It is
// defined in package observer, so that plug-ins need not import pipeline.
type NodeKind = observer.NodeKind

// The node kinds.
const (
	KindSource    = observer.KindSource    // Source
	KindTransform = observer.KindTransform // Transform
	KindSink      = observer.KindSink      // Sink
	KindFilter    = observer.KindFilter    // Filter
	KindFlatMap   = observer.KindFlatMap   // FlatMap
	KindBatch     = observer.KindBatch     // Batch
	KindUnbatch   = observer.KindUnbatch   // Unbatch
	KindMerge     = observer.KindMerge     // Merge
	KindRoute     = observer.KindRoute     // Route or Split: the node that picks a branch
	KindBranch    = observer.KindBranch    // one branch of a Route or Split
	KindAggregate = observer.KindAggregate // Aggregate: windows of items reduced to a value
	KindJoin      = observer.KindJoin      // Join: two streams joined by key within a time window
)

// NodeKinds returns every kind, in the order of their values.
func NodeKinds() []NodeKind { return observer.NodeKinds() }

// consumes reports whether nodes of the kind read an input stream: all but
// sources.
func consumes(k NodeKind) bool { return k != KindSource }
