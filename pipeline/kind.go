package pipeline

import "fmt"

// A NodeKind says what a node does: the function that added it.
type NodeKind int

const (
	KindSource    NodeKind = iota + 1 // Source
	KindTransform                     // Transform
	KindSink                          // Sink
	KindFilter                        // Filter
	KindFlatMap                       // FlatMap
	KindBatch                         // Batch
	KindUnbatch                       // Unbatch
	KindMerge                         // Merge
	KindRoute                         // Route or Split: the node that picks a branch
	KindBranch                        // one branch of a Route or Split
	KindAggregate                     // Aggregate: windows of items reduced to a value
	KindJoin                          // Join: two streams joined by key within a time window
)

var kindNames = [...]string{
	KindSource:    "source",
	KindTransform: "transform",
	KindSink:      "sink",
	KindFilter:    "filter",
	KindFlatMap:   "flatmap",
	KindBatch:     "batch",
	KindUnbatch:   "unbatch",
	KindMerge:     "merge",
	KindRoute:     "route",
	KindBranch:    "branch",
	KindAggregate: "aggregate",
	KindJoin:      "join",
}

// NodeKinds returns every kind, in the order of their values.
func NodeKinds() []NodeKind {
	kinds := make([]NodeKind, 0, len(kindNames)-1)
	for k := KindSource; int(k) < len(kindNames); k++ {
		kinds = append(kinds, k)
	}
	return kinds
}

// String returns the kind's name in lower case, as used in tables, logs
// and metric labels: "source", "transform", "sink", "filter", "flatmap",
// "batch", "unbatch", "merge", "route", "branch", "aggregate" or "join".
func (k NodeKind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("NodeKind(%d)", int(k))
}

// MarshalText returns the kind's name.
func (k NodeKind) MarshalText() ([]byte, error) {
	if k > 0 && int(k) < len(kindNames) {
		return []byte(kindNames[k]), nil
	}
	return nil, fmt.Errorf("pipeline: cannot encode unknown NodeKind(%d)", int(k))
}

// UnmarshalText parses a name written by MarshalText.
func (k *NodeKind) UnmarshalText(b []byte) error {
	for i, name := range kindNames {
		if i > 0 && name == string(b) {
			*k = NodeKind(i)
			return nil
		}
	}
	return fmt.Errorf("pipeline: unknown node kind %q", b)
}

// consumes reports whether nodes of the kind read an input stream: all but
// sources.
func (k NodeKind) consumes() bool { return k != KindSource }

// inFlight reports whether a node of the kind hands on at most one item
// per item it takes in, so that what it took and has not let go of is a
// meaningful count.
func (k NodeKind) inFlight() bool {
	switch k {
	case KindTransform, KindSink, KindFilter, KindMerge, KindRoute, KindBranch:
		return true
	}
	return false
}
