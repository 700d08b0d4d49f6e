package pipeline

import (
	"fmt"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/resilience"
)

// counters are one node's live counts. Each is written with atomic adds by
// the node's goroutines and read by Stats without a lock. The padding keeps
// two nodes' counters off one cache line, so that nodes on different cores
// do not slow each other down.
type counters struct {
	in, out, failed, skipped, deadLettered, filtered atomic.Int64
	fallbacks, handedOff                             atomic.Int64
	retries                                          []atomic.Int64 // by RetryKind - 1
	_                                                [40]byte
}

func newCounters() *counters {
	return &counters{retries: make([]atomic.Int64, len(resilience.RetryKinds()))}
}

func (c *counters) retry(k resilience.RetryKind) { c.retries[k-1].Add(1) }

func (c *counters) snapshot(name string, kind NodeKind) NodeStats {
	return NodeStats{
		Node:         name,
		Kind:         kind,
		In:           c.in.Load(),
		Out:          c.out.Load(),
		Failed:       c.failed.Load(),
		Skipped:      c.skipped.Load(),
		DeadLettered: c.deadLettered.Load(),
		Filtered:     c.filtered.Load(),
		Fallbacks:    c.fallbacks.Load(),
		HandedOff:    c.handedOff.Load(),
		ItemRetries:  c.retries[resilience.ItemRetry-1].Load(),
		NodeRestarts: c.retries[resilience.NodeRestart-1].Load(),
		NodeRetries:  c.retries[resilience.NodeRetry-1].Load(),
	}
}

// NodeStats are the counts of one node.
//
// In counts the items the node took in (for a source: none); Out the items
// it handed downstream (for a sink: the items written). Failed counts items
// whose processing failed after item retries, whatever happened next;
// Skipped and DeadLettered count those the failure action dropped or
// dead-lettered, Filtered those a Filter dropped or a FlatMap or Unbatch
// turned into nothing. The retry counts are the retries each layer made.
type NodeStats struct {
	Node         string
	Kind         NodeKind
	In, Out      int64
	Failed       int64
	Skipped      int64
	DeadLettered int64
	Filtered     int64
	// Fallbacks counts the items a Fallback rescued: layer 1 gave up on
	// them, and the fallback's result was handed on (they count in Out).
	Fallbacks int64
	// HandedOff counts the items whose retry the source's broker took
	// over (HandOffSource): they left the node, to come back in a later
	// delivery.
	HandedOff    int64
	ItemRetries  int64
	NodeRestarts int64
	NodeRetries  int64
	// Circuit is the node's breaker state; CircuitClosed when it has none.
	Circuit resilience.CircuitState
	// InFlight is, for a node that hands on at most one item per item it
	// takes in (see HasInFlight), the items it took in during the current
	// run and has not yet handed on, written, filtered, skipped or
	// dead-lettered: an estimate, since stages publish their counts every
	// 64 items and whenever they wait. It is 0 between runs and for other
	// kinds, and in a Result.
	InFlight int64
}

// HasInFlight reports whether InFlight means something for the node's
// kind: transforms, sinks, filters and merges.
func (s NodeStats) HasInFlight() bool { return s.Kind.inFlight() }

// held is what the node has taken in and not yet let go of, over every run.
func (s NodeStats) held() int64 {
	return s.In - s.Out - s.Filtered - s.Skipped - s.DeadLettered
}

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

func (s NodeStats) minus(o NodeStats) NodeStats {
	s.In -= o.In
	s.Out -= o.Out
	s.Failed -= o.Failed
	s.Skipped -= o.Skipped
	s.DeadLettered -= o.DeadLettered
	s.Filtered -= o.Filtered
	s.Fallbacks -= o.Fallbacks
	s.HandedOff -= o.HandedOff
	s.ItemRetries -= o.ItemRetries
	s.NodeRestarts -= o.NodeRestarts
	s.NodeRetries -= o.NodeRetries
	return s
}

// Stats is a snapshot of a pipeline's counters. The counts add up every run
// of the Pipeline, as metrics counters do; a run's own counts are in its
// [Result].
type Stats struct {
	Pipeline string
	RunID    string // the running or last run; empty before the first
	Running  bool
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

// Result is what one run did.
type Result struct {
	Pipeline string
	RunID    string
	Start    time.Time // from the pipeline's clock
	Duration time.Duration
	Nodes    []NodeStats // this run's counts, in the order the nodes were added
}

// Node returns the counts of the node called name, zero if there is none.
func (r Result) Node(name string) NodeStats {
	for _, n := range r.Nodes {
		if n.Node == name {
			return n
		}
	}
	return NodeStats{}
}

// String returns the per-node counts as a table.
func (r Result) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "pipeline %s run %s in %s\n", r.Pipeline, r.RunID, r.Duration)
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	handOffs := false
	for _, n := range r.Nodes {
		handOffs = handOffs || n.HandedOff != 0
	}
	head := "node\tkind\tin\tout\tfailed\tskipped\tdead-lettered\tfiltered\tretries\trestarts\tnode retries\t"
	if handOffs {
		// Only when a source handed waits to its broker: the items that
		// left the node that way.
		head += "handed off\t"
	}
	fmt.Fprintln(tw, head)
	for _, n := range r.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t", n.Node, n.Kind, n.In, n.Out, n.Failed,
			n.Skipped, n.DeadLettered, n.Filtered, n.ItemRetries, n.NodeRestarts, n.NodeRetries)
		if handOffs {
			fmt.Fprintf(tw, "%d\t", n.HandedOff)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	return sb.String()
}
