package observer

import (
	"fmt"

	"github.com/sluicehq/sluice/resilience"
)

// DelayBuckets returns the default upper bounds, in seconds, of the
// metrics plug-ins' retry delay histograms: from a millisecond up to the
// five minutes of the longest pause a breaker allows by default.
func DelayBuckets() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
}

// A StatsReader reads the live counters of one pipeline; a
// *pipeline.Pipeline is one. Reading is lock-free and may happen at any
// time, during a run or between runs.
type StatsReader interface {
	Stats() Stats
}

// A StatsUser is an Observer that also reads the counters of the pipelines
// it observes, such as a metrics exporter that reads them when it is
// scraped. Build hands every pipeline it builds with the observer to
// UseStats, once, before the pipeline's first event; an error fails the
// Build. [Multi] passes it on to the observers it holds.
type StatsUser interface {
	Observer
	UseStats(StatsReader) error
}

// A StatsForgetter is a StatsUser that can let go of a pipeline it was
// handed. When one StatsUser of a [Multi] refuses a pipeline, the Build
// fails, and Multi asks the ones that took it to forget it, so that no
// observer keeps (and exports) a pipeline that Build never returned. The
// plug-ins that take pipelines (metrics, progress, the inspector) are
// StatsForgetters.
type StatsForgetter interface {
	ForgetStats(StatsReader)
}

// A NodeKind says what a node does: the pipeline function that added it.
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
	return nil, fmt.Errorf("observer: cannot encode unknown NodeKind(%d)", int(k))
}

// UnmarshalText parses a name written by MarshalText.
func (k *NodeKind) UnmarshalText(b []byte) error {
	for i, name := range kindNames {
		if i > 0 && name == string(b) {
			*k = NodeKind(i)
			return nil
		}
	}
	return fmt.Errorf("observer: unknown node kind %q", b)
}

// handsOnOnePerItem reports whether a node of the kind hands on at most
// one item per item it takes in, so that what it took and has not let go
// of (NodeStats.InFlight) is a meaningful count.
func (k NodeKind) handsOnOnePerItem() bool {
	switch k {
	case KindTransform, KindSink, KindFilter, KindMerge, KindRoute, KindBranch:
		return true
	}
	return false
}

// NodeStats are the counts of one node.
//
// In counts the items the node took in (for a source: none); Out the items
// it handed downstream (for a sink: the items written). Items are counted
// through a Batch: a node that takes batches counts the items in them, and
// InBatches and OutBatches count the batches themselves. Failed counts items
// whose processing failed after item retries, whatever happened next,
// but for those a Fallback rescued (Fallbacks);
// Skipped and DeadLettered count those the failure action dropped or
// dead-lettered, BrokerRetries those the dead-letter sink gave back to
// their broker to deliver again instead, Filtered those a Filter dropped
// or a FlatMap or Unbatch turned into nothing. The retry counts are the
// retries each layer made.
type NodeStats struct {
	// Node is the node's name.
	Node string
	// Kind is what the node does: the pipeline function that added it.
	Kind NodeKind
	// In counts the items the node took in, 0 for a source; Out the items
	// it handed downstream, or for a sink the items written.
	In, Out int64
	// Failed counts the items whose processing failed after item
	// retries, whatever happened to them next, except those a Fallback
	// rescued, which Fallbacks counts.
	Failed int64
	// Skipped counts the failed items the failure action Skip dropped.
	Skipped int64
	// DeadLettered counts the failed items the dead-letter sink stored.
	DeadLettered int64
	// BrokerRetries counts the failed items the dead-letter sink gave
	// back to the broker they came from, to be delivered again (its retry
	// path; deadletter.BrokerRetrier): not dead letters, and not in
	// DeadLettered.
	BrokerRetries int64
	// Filtered counts the items a Filter dropped or a FlatMap or Unbatch
	// turned into nothing.
	Filtered int64
	// Late counts the items an event-time Aggregate or Join took in
	// behind its watermark, less an Aggregate's allowed lateness: too late
	// for their windows or partners. Each is counted as well where it
	// went: by the failure action (Failed, and DeadLettered or Skipped),
	// or in Out when an Aggregate hands them on through its Late output,
	// or a Join through its JoinLate streams.
	Late int64
	// Fallbacks counts the items a Fallback rescued: layer 1 gave up on
	// them, and the fallback's result was handed on (they count in Out).
	Fallbacks int64
	// HandedOff counts the items whose retry the source's broker took
	// over (deadletter.HandOffSource): they left the node, to come back in a later
	// delivery.
	HandedOff int64
	// InBatches counts the batches a node that takes batches took in, and
	// OutBatches those a node that gives batches handed on or, for a
	// sink, wrote; a node takes batches when what it reads is the output
	// of a Batch, or of a Transform, Filter, Merge or Route that takes
	// batches and hands on a slice. Both are 0 for other nodes, whose
	// items are not batches; In, Out and the failure counts count the
	// items in the batches.
	InBatches, OutBatches int64
	// Tracked counts, for a source, the items it emitted with
	// node.Emitter.EmitTracked, and Settled those of them whose fate is
	// final: their done was called, once every part of the item (its
	// broadcast copies, FlatMap parts, the windows or batches it is in)
	// reached an outcome, or the run ended. Tracked - Settled is the
	// source's tracked items still on their way. Both are exact, counted
	// when it happens, not published later, and 0 for other nodes and for
	// items emitted with Emit, which nobody tracks.
	Tracked, Settled int64
	// ItemRetries counts the retries of layer 1, item retry, each once
	// its call is made (or its item was handed off to its broker for it):
	// a retry whose wait the run's end cuts off, that could start only
	// past MaxElapsed, or that an open breaker never lets through (under
	// OpenPause, until MaxPause or MaxElapsed) is not counted.
	ItemRetries int64
	// NodeRestarts counts the restarts of layer 2, node restart.
	NodeRestarts int64
	// NodeRetries counts the retries of layer 3, node retry.
	NodeRetries int64
	// Size is, for a source that implements node.Sized (Sized set), how
	// many items it emits in a run: with Out, a progress display's ETA.
	Size int64
	// Sized says Size is known: the node is a source that implements
	// node.Sized. When false, Size is 0 and means nothing.
	Sized bool
	// Circuit is the node's breaker state; CircuitClosed when it has none.
	Circuit resilience.CircuitState
	// Exhaustible is the layers and limits that can end the node's
	// retries, from its options: item retry with MaxRetries above 0
	// (count; elapsed with MaxElapsed; budget with a RetryBudget) for the
	// nodes that call user code per item, node restart and node retry
	// with retries allowed (elapsed with their MaxElapsed). A metrics
	// exporter starts these series at 0, and only these. Empty in a
	// Result.
	Exhaustible Exhaustions
	// InFlight is, for a node that hands on at most one item per item it
	// takes in (see HasInFlight), the items it took in during the current
	// run and has not yet handed on, written, filtered, skipped,
	// dead-lettered, given back to its broker (BrokerRetries) or handed
	// off: an estimate, since stages publish their counts every
	// 64 items and whenever they wait. It is 0 between runs and for other
	// kinds, for a transform that takes batches (what it returns may hold
	// fewer items than it took), and in a Result.
	InFlight int64
}

// Exhaustions is a set of the ways a node's retries can run out: a layer
// ([resilience.RetryKind]) with what ends its retries ([resilience.Limit]).
// The zero value is the empty set. It is a value: With returns a new set.
type Exhaustions uint32

// exhaustionBit returns the bit of (k, l), and false for a layer or a
// limit the set does not know.
func exhaustionBit(k resilience.RetryKind, l resilience.Limit) (Exhaustions, bool) {
	nk, nl := len(resilience.RetryKinds()), len(resilience.Limits())
	if k < 1 || int(k) > nk || l < 0 || int(l) >= nl {
		return 0, false
	}
	return 1 << (int(k-1)*nl + int(l)), true
}

// With returns the set with layer k ended by limit l added.
func (e Exhaustions) With(k resilience.RetryKind, l resilience.Limit) Exhaustions {
	b, _ := exhaustionBit(k, l)
	return e | b
}

// Has reports whether the set holds layer k ended by limit l.
func (e Exhaustions) Has(k resilience.RetryKind, l resilience.Limit) bool {
	b, ok := exhaustionBit(k, l)
	return ok && e&b != 0
}

// HasInFlight reports whether InFlight means something for the node's
// kind: transforms, sinks, filters, merges, routes and branches.
func (s NodeStats) HasInFlight() bool { return s.Kind.handsOnOnePerItem() }

// Retries returns the retries of layer k, one of [resilience.RetryKinds].
func (s NodeStats) Retries(k resilience.RetryKind) int64 {
	switch k {
	case resilience.ItemRetry:
		return s.ItemRetries
	case resilience.NodeRestart:
		return s.NodeRestarts
	case resilience.NodeRetry:
		return s.NodeRetries
	}
	return 0
}

// Stats is a snapshot of a pipeline's counters. The counts add up every run
// of the Pipeline, as metrics counters do; a run's own counts are in its
// pipeline's Result.
type Stats struct {
	// Pipeline is the pipeline's name.
	Pipeline string
	RunID    string // the running or last run; empty before the first
	// Running says a run is under way; false before the first run and
	// between runs.
	Running bool
	// Draining says a drain was asked for in run RunID
	// (pipeline.Pipeline.Drain): while Running, the sources take no new
	// items and the items in flight finish; after, the run was drained.
	Draining bool
	Nodes    []NodeStats // in the order the nodes were added
}

// Node returns the stats of the node called name.
func (s Stats) Node(name string) (NodeStats, bool) {
	for _, n := range s.Nodes {
		if n.Node == name {
			return n, true
		}
	}
	return NodeStats{}, false
}
