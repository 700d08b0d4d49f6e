package pipeline

import (
	"fmt"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/resilience"
)

// counters are one node's live counts. Each is written with atomic adds by
// the node's goroutines and read by Stats without a lock. The padding keeps
// two nodes' counters off one cache line, so that nodes on different cores
// do not slow each other down.
type counters struct {
	in, out, failed, skipped, deadLettered, filtered atomic.Int64
	fallbacks, handedOff, brokerRetries              atomic.Int64
	late                                             atomic.Int64
	inBatches, outBatches                            atomic.Int64
	// tracked and settled count, for a source, the items it emitted with
	// EmitTracked and those of them whose fate is final (their done was
	// called): one add each per tracked item.
	tracked, settled atomic.Int64
	retries          []atomic.Int64 // by RetryKind - 1
	// calls counts the first calls of the node's function, when they
	// are made: a retry budget's first attempts (see nodeRun.run). It is
	// kept only for a node that draws on a budget, and shown nowhere.
	calls atomic.Int64
	_     [24]byte
}

func newCounters() *counters {
	return &counters{retries: make([]atomic.Int64, len(resilience.RetryKinds()))}
}

func (c *counters) retry(k resilience.RetryKind) { c.retries[k-1].Add(1) }

func (c *counters) snapshot(name string, kind NodeKind) NodeStats {
	return NodeStats{
		Node:          name,
		Kind:          kind,
		In:            c.in.Load(),
		Out:           c.out.Load(),
		Failed:        c.failed.Load(),
		Skipped:       c.skipped.Load(),
		DeadLettered:  c.deadLettered.Load(),
		Filtered:      c.filtered.Load(),
		Fallbacks:     c.fallbacks.Load(),
		HandedOff:     c.handedOff.Load(),
		BrokerRetries: c.brokerRetries.Load(),
		Late:          c.late.Load(),
		InBatches:     c.inBatches.Load(),
		OutBatches:    c.outBatches.Load(),
		Tracked:       c.tracked.Load(),
		Settled:       c.settled.Load(),
		ItemRetries:   c.retries[resilience.ItemRetry-1].Load(),
		NodeRestarts:  c.retries[resilience.NodeRestart-1].Load(),
		NodeRetries:   c.retries[resilience.NodeRetry-1].Load(),
	}
}

// NodeStats are the counts of one node; see [observer.NodeStats]. They
// are defined in package observer, so that plug-ins need not import
// pipeline.
type NodeStats = observer.NodeStats

// Stats is a snapshot of a pipeline's counters; see [observer.Stats]. The
// counts add up every run of the Pipeline, as metrics counters do; a run's
// own counts are in its [Result].
type Stats = observer.Stats

// held is what the node has taken in and not yet let go of, over every run.
func held(s NodeStats) int64 {
	return s.In - s.Out - s.Filtered - s.Skipped - s.DeadLettered - s.BrokerRetries - s.HandedOff
}

func minus(s, o NodeStats) NodeStats {
	s.In -= o.In
	s.Out -= o.Out
	s.Failed -= o.Failed
	s.Skipped -= o.Skipped
	s.DeadLettered -= o.DeadLettered
	s.Filtered -= o.Filtered
	s.Fallbacks -= o.Fallbacks
	s.HandedOff -= o.HandedOff
	s.BrokerRetries -= o.BrokerRetries
	s.Late -= o.Late
	s.InBatches -= o.InBatches
	s.OutBatches -= o.OutBatches
	s.Tracked -= o.Tracked
	s.Settled -= o.Settled
	s.ItemRetries -= o.ItemRetries
	s.NodeRestarts -= o.NodeRestarts
	s.NodeRetries -= o.NodeRetries
	return s
}

// Result is what one run did.
type Result struct {
	// Pipeline is the pipeline's name.
	Pipeline string
	// RunID names the run, as the events and dead letters of the run do.
	RunID string
	// Start is when the run started, on the pipeline's clock.
	Start time.Time
	// Duration is how long the run took, on the pipeline's clock.
	Duration time.Duration
	// Nodes are this run's counts, in the order the nodes were added.
	Nodes []NodeStats
}

// Node returns this run's counts of the node called name, and whether
// there is one; it reads as [Stats.Node] does.
func (r Result) Node(name string) (NodeStats, bool) {
	for _, n := range r.Nodes {
		if n.Node == name {
			return n, true
		}
	}
	return NodeStats{}, false
}

// String returns the per-node counts as a table. The columns "late",
// "handed off" and "broker retries" are there only when a node counted
// some, and "batches in" and "batches out" only when a Batch ran.
func (r Result) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "pipeline %s run %s in %s\n", r.Pipeline, r.RunID, r.Duration)
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	late, handOffs, brokerRetries, batches := false, false, false, false
	for _, n := range r.Nodes {
		late = late || n.Late != 0
		handOffs = handOffs || n.HandedOff != 0
		brokerRetries = brokerRetries || n.BrokerRetries != 0
		batches = batches || n.InBatches != 0 || n.OutBatches != 0
	}
	head := "node\tkind\tin\tout\tfailed\tskipped\tdead-lettered\tfiltered\tretries\trestarts\tnode retries\t"
	if late {
		// Only when an event-time node took items behind its watermark:
		// they count as well where they went.
		head += "late\t"
	}
	if handOffs {
		// Only when a source handed waits to its broker: the items that
		// left the node that way.
		head += "handed off\t"
	}
	if brokerRetries {
		// Only when the dead-letter sink gave failed items back to their
		// broker's retry path: they are not dead letters.
		head += "broker retries\t"
	}
	if batches {
		// Only when a Batch ran: in and out count items, these batches.
		head += "batches in\tbatches out\t"
	}
	fmt.Fprintln(tw, head)
	for _, n := range r.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t", n.Node, n.Kind, n.In, n.Out, n.Failed,
			n.Skipped, n.DeadLettered, n.Filtered, n.ItemRetries, n.NodeRestarts, n.NodeRetries)
		if late {
			fmt.Fprintf(tw, "%d\t", n.Late)
		}
		if handOffs {
			fmt.Fprintf(tw, "%d\t", n.HandedOff)
		}
		if brokerRetries {
			fmt.Fprintf(tw, "%d\t", n.BrokerRetries)
		}
		if batches {
			fmt.Fprintf(tw, "%d\t%d\t", n.InBatches, n.OutBatches)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	return sb.String()
}
