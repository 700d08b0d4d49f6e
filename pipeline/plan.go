package pipeline

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/resilience"
)

// A Plan describes, node by node, the worst case the configured resilience
// layers allow, so that retry multiplication shows before production does.
type Plan struct {
	Pipeline string
	Nodes    []NodePlan
}

// A NodePlan is the worst case of one node.
type NodePlan struct {
	Node string
	Kind NodeKind

	// ItemCalls is the most calls one item can get: item retries, and the
	// probes of a pause under OpenPause (which spend no retry), within node
	// restarts, (ItemRetry.MaxRetries + 1 + PauseProbes) ×
	// (NodeRestart.MaxRestarts + 1), capped at resilience.MaxRepeats + 1,
	// where the engine fails the node. 0 for a source, whose items are not
	// called.
	ItemCalls int
	// Starts is how often the node can be started: node retry runs it
	// again only while it has consumed nothing, so this multiplies starts,
	// not the calls of an item that was read.
	Starts int
	// Multiplied is ItemCalls × Starts, uncapped: the product of the
	// three layers' attempts (for a source, its starts and restarts).
	Multiplied int
	// ItemWait is the most time the layers can make one item wait in
	// backoffs: item-retry waits in every restart cycle plus the restart
	// waits, with every MaxDelay and the repeat cap applied, and without
	// breaker pauses.
	ItemWait time.Duration
	// StartWait is the most time node retry waits before the node runs.
	StartWait time.Duration
	// Pause is the longest a breaker under OpenPause can hold one item
	// back in one cycle, MaxPause; 0 when the node has no pausing breaker.
	Pause time.Duration
	// AttemptTimeout bounds each call (0: unbounded): an item's calls take
	// at most ItemCalls × AttemptTimeout on top of ItemWait, for calls that
	// heed their context.
	AttemptTimeout time.Duration
	// OnItemFailure is what happens to an item after all that, unless one
	// of the node's FailureRules (their number) decides.
	OnItemFailure resilience.FailureAction
	FailureRules  int
}

// Plan returns the worst case of every node's resilience layers.
func (p *Pipeline) Plan() Plan {
	pl := Plan{Pipeline: p.name, Nodes: make([]NodePlan, len(p.nodes))}
	for i, n := range p.nodes {
		pl.Nodes[i] = planNode(n)
	}
	return pl
}

func planNode(n *spec) NodePlan {
	o := n.res
	np := NodePlan{Node: n.name, Kind: n.kind, Starts: o.NodeRetry.MaxRetries + 1, OnItemFailure: o.OnItemFailure,
		FailureRules: len(o.FailureRules), AttemptTimeout: o.ItemRetry.AttemptTimeout, StartWait: o.NodeRetry.Backoff.TotalDelay(o.NodeRetry.MaxRetries)}
	if o.CircuitBreaker.Enabled && o.CircuitBreaker.WhenOpen == resilience.OpenPause {
		np.Pause = o.CircuitBreaker.MaxPause
	}
	cycles := o.NodeRestart.MaxRestarts + 1
	if !n.consumes {
		// A source's items are not called; its restarts run it again.
		np.Multiplied = cycles * np.Starts
		np.ItemWait = o.NodeRestart.Backoff.TotalDelay(o.NodeRestart.MaxRestarts)
		return np
	}
	probes := o.CircuitBreaker.PauseProbes()
	perCycle := o.ItemRetry.MaxRetries + 1 + probes
	np.Multiplied = perCycle * cycles * np.Starts
	// Walk the cycles as the engine would, stopping at the repeat cap.
	calls := 0
	var wait time.Duration
	for c := 0; c < cycles && calls <= resilience.MaxRepeats; c++ {
		if c > 0 {
			wait = addSat(wait, o.NodeRestart.Backoff.Nominal(c))
		}
		retries := min(o.ItemRetry.MaxRetries, resilience.MaxRepeats-calls)
		wait = addSat(wait, o.ItemRetry.Backoff.TotalDelay(retries))
		calls += retries + 1
		calls = min(calls+probes, resilience.MaxRepeats+1)
	}
	np.ItemCalls = calls
	np.ItemWait = wait
	return np
}

func addSat(a, b time.Duration) time.Duration {
	if a > resilience.MaxDuration-b {
		return resilience.MaxDuration
	}
	return a + b
}

// String returns the plan as a table, one node per line.
func (pl Plan) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "resilience plan of pipeline %q (worst cases)\n", pl.Pipeline)
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "node\tkind\tcalls/item\tstarts\tmultiplied\twait/item\twait to start\tpause/item\tcall limit\tthen")
	for _, n := range pl.Nodes {
		calls := "-"
		if n.Kind != KindSource {
			calls = fmt.Sprint(n.ItemCalls)
		}
		pause := "-"
		if n.Pause > 0 {
			pause = n.Pause.String()
		}
		then := n.OnItemFailure.String()
		switch {
		case n.Kind == KindSource:
			then = "fail"
		case n.FailureRules == 1:
			then += " (1 rule first)"
		case n.FailureRules > 1:
			then += fmt.Sprintf(" (%d rules first)", n.FailureRules)
		}
		limit := "-"
		if n.AttemptTimeout > 0 && n.Kind != KindSource {
			limit = n.AttemptTimeout.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", n.Node, n.Kind, calls, n.Starts, n.Multiplied,
			short(n.ItemWait), short(n.StartWait), pause, limit, then)
	}
	tw.Flush()
	return sb.String()
}

// short formats d for a table: rounded, and "∞" when it saturated.
func short(d time.Duration) string {
	switch {
	case d >= resilience.MaxDuration:
		return "∞"
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}
