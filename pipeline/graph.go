package pipeline

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/resilience"
)

// A Graph is a picture of a built pipeline: its nodes, in the order they
// were added, and the channels between them. [Graph.Mermaid] and
// [Graph.DOT] render it; [Graph.WithStats] adds live counts. The output is
// deterministic: the same pipeline (and counts) renders to the same text.
type Graph struct {
	// Pipeline is the pipeline's name.
	Pipeline string
	// HandOver is the pipeline's hand-over batch (WithHandOverBatch): how
	// many items a stage gathers before one channel operation.
	HandOver int
	// Nodes are the pipeline's nodes, in the order they were added; an
	// edge names a node by its index here.
	Nodes []GraphNode
	// Edges are the streams between the nodes, one per consumer of a
	// node's output.
	Edges []GraphEdge
	// RunID is the run the counts are from, when WithStats added some.
	RunID string
}

// A GraphNode is one node of a [Graph].
type GraphNode struct {
	// Name is the node's name.
	Name string
	// Kind is what the node does: the pipeline function that added it.
	Kind NodeKind
	// Parallel is the node's workers (Parallel or Keyed); 1 without.
	Parallel  int
	Unordered bool // Unordered, with Parallel above 1
	Keyed     bool // Keyed: Parallel workers that keep order per key
	// Layers are the resilience layers armed on the node, as they are
	// shown: "retry 3", "restart 2", "node retry 3", "breaker",
	// "fallback", "dead letter", "skip", "rate 100/s", "timeout 2s". A
	// layer is listed where it can act: item retry, breaker, attempt
	// timeout and fallback on nodes that call a function that returns an
	// error (transform, sink, flat map); the failure actions also on
	// filters and routes, whose function can panic or pick no branch,
	// and on aggregates and joins, which refuse an item whose key or
	// time they cannot hold ("dead letter" also where late items are
	// dead-lettered: see [ErrLate]); node retry on nodes whose start can fail (source, transform, sink,
	// flat map); restart and rate limit wherever they are set. A Join's
	// tagging nodes ("name/left", "name/right") call nothing that fails.
	Layers []string
	// Stats are the node's counts, when WithStats added them; nil without.
	// Labels show In and Out (a source: Out, and its Size when known),
	// then what is not zero: filtered, skipped, "dead" (dead-lettered),
	// "failed" (the failures neither skipped nor dead-lettered: those
	// that failed the node), retries, restarts, node retries, fallbacks,
	// handed off, broker retries, in flight, and a breaker that is not
	// closed. Nodes with failures, dead letters or a breaker not closed
	// get a red border.
	Stats *NodeStats
}

// A GraphEdge is the channel in front of node To, which node From writes
// to. Nodes are indexes into Graph.Nodes.
type GraphEdge struct {
	// From is the index in Graph.Nodes of the node whose output the
	// stream carries, To that of the node that reads it.
	From, To int
	// Buffer is the channel's capacity in items: the node's Buffer, else
	// the pipeline's (WithBuffer or the profile's).
	Buffer int
	// Broadcast says that From's stream has several consumers, each of
	// which gets every item. Branches are not a broadcast: each item
	// goes to one of them (a Route's, an Aggregate's with Late, a Join's
	// with JoinLate).
	Broadcast bool
}

// Graph returns the picture of the pipeline, without counts; see
// [Graph.WithStats] for one with them.
func (p *Pipeline) Graph() Graph {
	g := Graph{Pipeline: p.name, HandOver: p.cfg.handOver, Nodes: make([]GraphNode, len(p.nodes))}
	for i, n := range p.nodes {
		g.Nodes[i] = GraphNode{Name: n.name, Kind: n.kind, Parallel: n.cfg.parallel, Keyed: n.cfg.keyed != nil,
			Unordered: n.cfg.unordered && n.cfg.parallel > 1 && n.cfg.keyed == nil, Layers: armedLayers(n)}
		if n.output == nil {
			continue
		}
		// A node whose consumers are branches (a Route, an Aggregate with
		// Late, a Join with JoinLate) routes each item to one of them.
		broadcast := len(n.output.consumers) > 1 && n.output.consumers[0].kind != KindBranch
		for _, c := range n.output.consumers {
			buffer := p.cfg.buffer
			if c.cfg.buffer >= 0 {
				buffer = c.cfg.buffer
			}
			g.Edges = append(g.Edges, GraphEdge{From: i, To: c.id, Buffer: buffer, Broadcast: broadcast})
		}
	}
	return g
}

// WithStats returns a copy of g whose nodes carry their counts from s,
// matched by name, such as p.Graph().WithStats(p.Stats()) while or after
// the pipeline runs. For one run's counts, give its Result's:
// Stats{Pipeline: res.Pipeline, RunID: res.RunID, Nodes: res.Nodes}.
func (g Graph) WithStats(s Stats) Graph {
	byName := make(map[string]NodeStats, len(s.Nodes))
	for _, n := range s.Nodes {
		byName[n.Node] = n
	}
	nodes := make([]GraphNode, len(g.Nodes))
	for i, n := range g.Nodes {
		n.Stats = nil
		if ns, ok := byName[n.Name]; ok {
			n.Stats = &ns
		}
		nodes[i] = n
	}
	g.Nodes = nodes
	g.RunID = s.RunID
	return g
}

// exhaustible returns the layers and limits that can end node n's
// retries: those of armedLayers, with the limits its options set.
func exhaustible(n *spec) observer.Exhaustions {
	o := n.res
	var e observer.Exhaustions
	fallible := n.fallible()
	if fallible && o.ItemRetry.MaxRetries > 0 {
		e = e.With(resilience.ItemRetry, resilience.LimitCount)
		if o.ItemRetry.MaxElapsed > 0 {
			e = e.With(resilience.ItemRetry, resilience.LimitElapsed)
		}
		if o.RetryBudget != nil {
			e = e.With(resilience.ItemRetry, resilience.LimitBudget)
		}
	}
	if o.NodeRestart.MaxRestarts > 0 {
		e = e.With(resilience.NodeRestart, resilience.LimitCount)
		if o.NodeRestart.MaxElapsed > 0 {
			e = e.With(resilience.NodeRestart, resilience.LimitElapsed)
		}
	}
	if n.nodeRetried() && o.NodeRetry.MaxRetries > 0 {
		e = e.With(resilience.NodeRetry, resilience.LimitCount)
		if o.NodeRetry.MaxElapsed > 0 {
			e = e.With(resilience.NodeRetry, resilience.LimitElapsed)
		}
	}
	return e
}

// armedLayers returns the resilience layers that can act on node n, as
// GraphNode.Layers describes.
func armedLayers(n *spec) []string {
	o := n.res
	var ls []string
	fallible := n.fallible()
	if fallible && o.ItemRetry.MaxRetries > 0 {
		l := "retry " + strconv.Itoa(o.ItemRetry.MaxRetries)
		if o.RetryBudget != nil {
			l += " (budget)"
		}
		ls = append(ls, l)
	}
	if o.NodeRestart.MaxRestarts > 0 {
		ls = append(ls, "restart "+strconv.Itoa(o.NodeRestart.MaxRestarts))
	}
	if n.nodeRetried() && o.NodeRetry.MaxRetries > 0 {
		ls = append(ls, "node retry "+strconv.Itoa(o.NodeRetry.MaxRetries))
	}
	if fallible && n.breaker != nil {
		ls = append(ls, "breaker")
	}
	if fallible && o.ItemRetry.AttemptTimeout > 0 {
		ls = append(ls, "timeout "+o.ItemRetry.AttemptTimeout.String())
	}
	if n.cfg.limited {
		ls = append(ls, "rate "+strconv.FormatFloat(n.cfg.rate, 'g', -1, 64)+"/s")
	}
	if n.cfg.fallback != nil {
		ls = append(ls, "fallback")
	}
	if n.decides() {
		skip := o.OnItemFailure == resilience.Skip
		for _, r := range o.FailureRules {
			skip = skip || r.Action == resilience.Skip
		}
		if mayDeadLetter(o) || n.lateDeadLettered() {
			ls = append(ls, "dead letter")
		}
		if skip {
			ls = append(ls, "skip")
		}
	}
	return ls
}

// describe returns the second line of a node's label: kind, workers and
// layers.
func (n GraphNode) describe() string {
	parts := []string{n.Kind.String()}
	switch {
	case n.Keyed:
		parts = append(parts, "keyed ×"+strconv.Itoa(n.Parallel))
	case n.Parallel > 1 && n.Unordered:
		parts = append(parts, "×"+strconv.Itoa(n.Parallel)+" unordered")
	case n.Parallel > 1:
		parts = append(parts, "×"+strconv.Itoa(n.Parallel))
	}
	if len(n.Layers) > 0 {
		parts = append(parts, strings.Join(n.Layers, ", "))
	}
	return strings.Join(parts, " · ")
}

// counts returns the third line of a node's label, its counts; "" without
// stats.
func (n GraphNode) counts() string {
	s := n.Stats
	if s == nil {
		return ""
	}
	var parts []string
	add := func(label string, v int64, always bool) {
		if always || v != 0 {
			parts = append(parts, label+" "+groupDigits(v))
		}
	}
	if n.Kind == KindSource {
		out := "out " + groupDigits(s.Out)
		if s.Sized {
			out += " of " + groupDigits(s.Size)
		}
		parts = append(parts, out)
	} else {
		add("in", s.In, true)
		add("out", s.Out, true)
	}
	add("filtered", s.Filtered, false)
	add("skipped", s.Skipped, false)
	add("dead", s.DeadLettered, false)
	// Failed counts every item layer 1 gave up on; those skipped or
	// dead-lettered show above, so only the rest: items that failed the
	// node, for a restart or the end of the run.
	add("failed", failedNode(*s), false)
	add("retries", s.ItemRetries, false)
	add("restarts", s.NodeRestarts, false)
	add("node retries", s.NodeRetries, false)
	add("fallbacks", s.Fallbacks, false)
	add("handed off", s.HandedOff, false)
	add("broker retries", s.BrokerRetries, false)
	add("in flight", s.InFlight, false)
	if s.Circuit != resilience.CircuitClosed {
		parts = append(parts, "circuit "+s.Circuit.String())
	}
	return strings.Join(parts, " · ")
}

// troubled reports whether the node's counts show failures, dead letters
// or a breaker that is not closed: the renderings mark it.
func (n GraphNode) troubled() bool {
	s := n.Stats
	return s != nil && (failedNode(*s) > 0 || s.DeadLettered > 0 || s.Circuit != resilience.CircuitClosed)
}

// failedNode returns the items that failed the node: those layer 1 gave up
// on, less the skipped and dead-lettered ones. Counters read one at a time
// during a run can make it dip below zero for a moment; it is then 0.
func failedNode(s NodeStats) int64 {
	return max(0, s.Failed-s.Skipped-s.DeadLettered-s.BrokerRetries)
}

// lines returns the lines of a node's label, names made printable.
func (n GraphNode) lines() []string {
	ls := []string{printable(n.Name), n.describe()}
	if c := n.counts(); c != "" {
		ls = append(ls, c)
	}
	return ls
}

// label is the label of an edge: the channel's capacity in items.
func (e GraphEdge) label() string {
	l := strconv.Itoa(e.Buffer)
	if e.Broadcast {
		l += " · broadcast"
	}
	return l
}

// nbsp separates the digit groups of a count, so that a label never
// wraps inside a number.
const nbsp = "\u00a0"

// groupDigits formats v with its digits in groups of three: 1 234 567.
func groupDigits(v int64) string {
	s := strconv.FormatInt(v, 10)
	sign := ""
	if v < 0 {
		sign, s = "-", s[1:]
	}
	var sb strings.Builder
	sb.WriteString(sign)
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			sb.WriteString(nbsp)
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// printable returns name with control characters (a newline, a tab, a
// NUL) and invalid UTF-8 written as Go escapes, so that every name shows
// on one line and no renderer sees a raw control character.
func printable(name string) string {
	q := strconv.QuoteToGraphic(name)
	q = q[1 : len(q)-1]
	// QuoteToGraphic also escapes quotes and backslashes, which are
	// printable: undo that, each format escapes them its own way.
	var sb strings.Builder
	for i := 0; i < len(q); i++ {
		if q[i] == '\\' && i+1 < len(q) && (q[i+1] == '"' || q[i+1] == '\\') {
			i++
		}
		sb.WriteByte(q[i])
	}
	return sb.String()
}

// nodeID is the identifier of node i in both renderings: "n", its index,
// and the ASCII letters and digits of its name, for a reader of the text.
func nodeID(i int, name string) string {
	var sb strings.Builder
	sb.WriteString("n")
	sb.WriteString(strconv.Itoa(i))
	under := false
	for _, r := range name {
		if sb.Len() >= 32 {
			break
		}
		if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			if !under {
				sb.WriteByte('_')
			}
			sb.WriteRune(r)
			under = true
			continue
		}
		under = false
	}
	return sb.String()
}

// mermaidText escapes s for a quoted Mermaid label: entity codes for the
// characters Mermaid or its HTML labels would read.
var mermaidText = strings.NewReplacer(
	"#", "#35;", `"`, "#quot;", "<", "#lt;", ">", "#gt;", "&", "#amp;", "`", "#96;")

// Mermaid returns the graph as a Mermaid flowchart, top to bottom: one
// node per line, labelled with its name, kind, workers and armed layers
// (and counts, with stats), shaped and styled by kind; one edge per
// channel, labelled with its capacity in items. Names are escaped, so any
// name renders as written.
func (g Graph) Mermaid() string {
	var sb strings.Builder
	// The comments follow the header: a renderer that looks for the
	// diagram's type on the first line finds it there.
	sb.WriteString("flowchart TD\n")
	fmt.Fprintf(&sb, "    %%%% pipeline %s: edges are channels, labelled with their capacity in items (hand-over batch %d)\n",
		printable(g.Pipeline), g.HandOver)
	if g.RunID != "" {
		fmt.Fprintf(&sb, "    %%%% counts of run %s\n", printable(g.RunID))
	}
	ids := make([]string, len(g.Nodes))
	for i, n := range g.Nodes {
		ids[i] = nodeID(i, n.Name)
		lines := n.lines()
		for j, l := range lines {
			lines[j] = mermaidText.Replace(l)
		}
		label := `"` + strings.Join(lines, "<br>") + `"`
		shape, _ := shapeOf(n.Kind)
		fmt.Fprintf(&sb, "    %s%s:::%s\n", ids[i], shape[0]+label+shape[1], classOf(n.Kind))
	}
	for _, e := range g.Edges {
		fmt.Fprintf(&sb, "    %s -->|\"%s\"| %s\n", ids[e.From], e.label(), ids[e.To])
	}
	sb.WriteString("    classDef source fill:#e3f2fd,stroke:#1565c0\n")
	sb.WriteString("    classDef sink fill:#e8f5e9,stroke:#2e7d32\n")
	sb.WriteString("    classDef work fill:#fff8e1,stroke:#f9a825\n")
	sb.WriteString("    classDef structure fill:#f5f5f5,stroke:#757575\n")
	for i, n := range g.Nodes {
		if n.troubled() {
			fmt.Fprintf(&sb, "    style %s stroke:#c62828,stroke-width:3px\n", ids[i])
		}
	}
	return sb.String()
}

// dotText escapes s for a quoted DOT string: backslashes and quotes.
var dotText = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// DOT returns the graph in Graphviz's DOT language, top to bottom, with
// the labels of [Graph.Mermaid]; render it with dot -Tsvg.
func (g Graph) DOT() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "digraph \"%s\" {\n", dotText.Replace(printable(g.Pipeline)))
	fmt.Fprintf(&sb, "    // pipeline %s: edges are channels, labelled with their capacity in items (hand-over batch %d)\n",
		printable(g.Pipeline), g.HandOver)
	if g.RunID != "" {
		fmt.Fprintf(&sb, "    // counts of run %s\n", printable(g.RunID))
	}
	sb.WriteString("    node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=11];\n")
	sb.WriteString("    edge [fontname=\"Helvetica\", fontsize=10];\n")
	fills := map[string]string{"source": "#e3f2fd", "sink": "#e8f5e9", "work": "#fff8e1", "structure": "#f5f5f5"}
	ids := make([]string, len(g.Nodes))
	for i, n := range g.Nodes {
		ids[i] = nodeID(i, n.Name)
		lines := n.lines()
		for j, l := range lines {
			lines[j] = dotText.Replace(l)
		}
		attrs := fmt.Sprintf("label=\"%s\", fillcolor=\"%s\"", strings.Join(lines, `\n`), fills[classOf(n.Kind)])
		_, shape := shapeOf(n.Kind)
		attrs += shape
		if n.troubled() {
			attrs += ", color=\"#c62828\", penwidth=3"
		}
		fmt.Fprintf(&sb, "    %s [%s];\n", ids[i], attrs)
	}
	for _, e := range g.Edges {
		fmt.Fprintf(&sb, "    %s -> %s [label=\"%s\"];\n", ids[e.From], ids[e.To], dotText.Replace(e.label()))
	}
	sb.WriteString("}\n")
	return sb.String()
}
