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
	// Pipeline is the pipeline's name.
	Pipeline string
	// Nodes are the nodes' worst cases, in the order the nodes were
	// added.
	Nodes []NodePlan
}

// A NodePlan is the worst case of one node.
type NodePlan struct {
	// Node is the node's name.
	Node string
	// Kind is what the node does: the pipeline function that added it.
	Kind NodeKind

	// ItemCalls is the most calls one item can get: item retries, and the
	// probes of a pause under OpenPause (which spend no retry), within node
	// restarts, (ItemRetry.MaxRetries + 1 + PauseProbes) ×
	// (NodeRestart.MaxRestarts + 1), capped at resilience.MaxRepeats + 1,
	// where the engine fails the node. 0 for a node whose items are not
	// called by a function of yours that can fail, where item retry cannot
	// act: a source, and the nodes whose graph lists no retry (Filter,
	// Batch, Unbatch, Merge, Route and its branches, Aggregate, Join).
	ItemCalls int
	// Starts is how often the node can be started: node retry runs it
	// again only while it has consumed nothing, so this multiplies starts,
	// not the calls of an item that was read. 1 where no start can fail
	// before the node consumes (the graph lists no node retry): on every
	// node but sources, transforms, sinks and flat maps.
	Starts int
	// Multiplied is ItemCalls × Starts, uncapped: the product of the
	// three layers' attempts (where ItemCalls is 0, the node's starts and
	// restarts).
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
	// ItemPause is the longest pauses can hold one item back in all: Pause
	// in every restart cycle the item can go through (MaxPause counts from
	// the item's first refusal in each cycle), as the repeat cap allows.
	ItemPause time.Duration
	// AttemptTimeout bounds each call (0: unbounded): an item's calls take
	// at most ItemCalls × AttemptTimeout on top of ItemWait, for calls that
	// heed their context.
	AttemptTimeout time.Duration
	// RateLimit is the node's calls per second (0: none): every call,
	// retries included, waits for a token.
	RateLimit float64
	// Fallback says a Fallback may rescue an item before its failure
	// action.
	Fallback bool
	// MaxElapsed caps the item-retry waits of one cycle (0: no cap); it is
	// applied in ItemWait.
	MaxElapsed time.Duration
	// Budget says the node's item retries draw on a shared retry budget:
	// ItemCalls and Multiplied are then what one item can get when the
	// budget allows, not what every item gets.
	Budget bool
	// OnItemFailure is what happens to an item after all that, unless one
	// of the node's FailureRules (their number) decides.
	OnItemFailure resilience.FailureAction
	// FailureRules is the number of the node's failure rules; 0 when
	// OnItemFailure alone decides.
	FailureRules int

	// Deliveries is how often a broker can deliver one item to the node:
	// 1 + the retries of the broker layer of the source upstream (a
	// node.Redeliverer, such as a RabbitMQ source with a retry topology),
	// else 1. BrokerWait is what that layer waits in all.
	Deliveries int
	// BrokerWait is the most time the broker layer waits between one
	// item's deliveries, in all; 0 without a broker layer.
	BrokerWait time.Duration
	// AllCalls is the most calls of one item across every layer, the
	// broker's included: ItemCalls × Deliveries. AllTime is the most time
	// one item can take across them: every delivery's ItemWait, ItemPause
	// and calls (ItemCalls × AttemptTimeout, when set; the calls' own time is
	// unknown otherwise), plus BrokerWait.
	AllCalls int
	// AllTime is the most time one item can take across every layer, as
	// described under AllCalls.
	AllTime time.Duration
}

// Plan returns the worst case of every node's resilience layers.
func (p *Pipeline) Plan() Plan {
	pl := Plan{Pipeline: p.name, Nodes: make([]NodePlan, len(p.nodes))}
	broker := brokerLayers(p.nodes)
	for i, n := range p.nodes {
		np := planNode(n)
		retries, delay := broker[n].retries, broker[n].delay
		np.Deliveries = retries + 1
		np.BrokerWait = mulSat(delay, retries)
		np.AllCalls = np.ItemCalls * np.Deliveries
		perDelivery := addSat(addSat(np.ItemWait, np.ItemPause), mulSat(np.AttemptTimeout, np.ItemCalls))
		np.AllTime = addSat(mulSat(perDelivery, np.Deliveries), np.BrokerWait)
		pl.Nodes[i] = np
	}
	return pl
}

type brokerLayer struct {
	retries int
	delay   time.Duration
}

// brokerLayers returns, for every node, the broker layer over it: the most
// redeliveries (and their delay) of the sources upstream, passed along the
// streams. Nodes come in the order they were added, producers first.
func brokerLayers(nodes []*spec) map[*spec]brokerLayer {
	over := make(map[*spec]brokerLayer, len(nodes))
	for _, n := range nodes {
		l := over[n]
		if n.redeliveries != nil {
			l.retries, l.delay = n.redeliveries()
			l.retries = max(l.retries, 0)
			over[n] = l
		}
		if n.output == nil {
			continue
		}
		for _, c := range n.output.consumers {
			if cl := over[c]; l.retries > cl.retries || (l.retries == cl.retries && l.delay > cl.delay) {
				over[c] = l
			}
		}
	}
	return over
}

// mulSat is d × n, saturating at resilience.MaxDuration.
func mulSat(d time.Duration, n int) time.Duration {
	if d <= 0 || n <= 0 {
		return 0
	}
	if d > resilience.MaxDuration/time.Duration(n) {
		return resilience.MaxDuration
	}
	return d * time.Duration(n)
}

// planNode returns n's worst case. The layers count where the graph lists
// them (armedLayers), which is where the runtime applies them: item retry,
// the breaker and the attempt timeout on nodes that call a function of
// yours that returns an error; node retry on those and on sources.
func planNode(n *spec) NodePlan {
	o := n.res
	fallible := n.fallible()
	np := NodePlan{Node: n.name, Kind: n.kind, Starts: 1, OnItemFailure: o.OnItemFailure,
		FailureRules: len(o.FailureRules), Fallback: n.cfg.fallback != nil}
	if n.nodeRetried() {
		np.Starts = o.NodeRetry.MaxRetries + 1
		np.StartWait = o.NodeRetry.Backoff.TotalDelay(o.NodeRetry.MaxRetries)
	}
	if fallible {
		np.AttemptTimeout, np.MaxElapsed, np.Budget = o.ItemRetry.AttemptTimeout, o.ItemRetry.MaxElapsed, o.RetryBudget != nil
		if o.CircuitBreaker.Enabled && o.CircuitBreaker.WhenOpen == resilience.OpenPause {
			np.Pause = o.CircuitBreaker.MaxPause
		}
	}
	if n.cfg.limited {
		np.RateLimit = n.cfg.rate
	}
	cycles := o.NodeRestart.MaxRestarts + 1
	if !fallible {
		// A source's items are not called, nor are those of a node that
		// calls nothing of yours that can fail (a Batch, a Merge, a
		// Filter); restarts run the node again.
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
		cycleWait := o.ItemRetry.Backoff.TotalDelay(retries)
		if e := o.ItemRetry.MaxElapsed; e > 0 && cycleWait > e {
			cycleWait = e // no retry starts past MaxElapsed
		}
		wait = addSat(wait, cycleWait)
		// A pause is bounded per cycle: a restart starts the item's next.
		np.ItemPause = addSat(np.ItemPause, np.Pause)
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
	fmt.Fprintln(tw, "node\tkind\tcalls/item\tstarts\tmultiplied\twait/item\twait to start\tpause/item\tcall limit\tdeliveries\tall calls\tall time\tthen")
	for _, n := range pl.Nodes {
		calls := "-"
		if n.ItemCalls > 0 {
			calls = fmt.Sprint(n.ItemCalls)
		}
		pause := "-"
		if n.ItemPause > 0 {
			pause = short(n.ItemPause)
		}
		then := n.OnItemFailure.String()
		if n.Fallback {
			then = "fallback, then " + then
		}
		switch {
		case n.Kind == KindSource:
			then = "fail"
		case n.FailureRules == 1:
			then += " (1 rule first)"
		case n.FailureRules > 1:
			then += fmt.Sprintf(" (%d rules first)", n.FailureRules)
		}
		var limits []string
		if n.AttemptTimeout > 0 {
			limits = append(limits, n.AttemptTimeout.String())
		}
		if n.RateLimit > 0 {
			limits = append(limits, fmt.Sprintf("%g/s", n.RateLimit))
		}
		limit := "-"
		if len(limits) > 0 {
			limit = strings.Join(limits, ", ")
		}
		allCalls, allTime := "-", "-"
		if n.Kind != KindSource {
			allTime = short(n.AllTime)
		}
		if n.ItemCalls > 0 {
			allCalls = fmt.Sprint(n.AllCalls)
			if n.Budget {
				allCalls += " (budget)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", n.Node, n.Kind, calls, n.Starts, n.Multiplied,
			short(n.ItemWait), short(n.StartWait), pause, limit, n.Deliveries, allCalls, allTime, then)
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
