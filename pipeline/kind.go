package pipeline

import (
	"strings"

	"github.com/sluicehq/sluice/observer"
)

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

// A kindInfo describes what the nodes of one kind do and which options
// they take. It is the one place that says so: Build, the run, Graph,
// Mermaid, DOT and Plan read it instead of listing kinds.
type kindInfo struct {
	// plural names the kind in messages that list kinds ("flat maps").
	plural string
	// consumes: reads an input stream, through a channel of its own that
	// Buffer sizes. All but sources.
	consumes bool
	// callsUser: calls a function of the user's on the items it takes in,
	// whose calls a retry budget counts as first attempts and a tracer
	// makes spans of. Not a Batch, Unbatch, Merge or branch, which only
	// move items along (nor a Join's tagging transforms: see
	// spec.callsUser).
	callsUser bool
	// fallible: calls a function that returns an error, so that item
	// retry, the breaker, the attempt timeout and node retry act on it.
	fallible bool
	// nodeRetried: a node retry opens it again when its start fails; sources
	// and the fallible kinds.
	nodeRetried bool
	// decides: a failed item meets the node's failure action (skip, dead
	// letter): the fallible kinds; filters and routes, whose function
	// can panic or pick no branch; aggregates and joins, which refuse an
	// item whose key or time they cannot hold, and take late items.
	decides bool
	// parallel: takes Parallel (and Unordered).
	parallel bool
	// keyed: takes Keyed.
	keyed bool
	// rateLimited: takes RateLimit, which limits its calls.
	rateLimited bool
	// fallback: takes Fallback.
	fallback bool
	// parks: takes MaxParked, its items' retry waits park while its
	// workers move on (see MaxParked): the fallible kinds that take
	// Parallel or Keyed.
	parks bool
	// emits: takes the source options SourceKey and SourceTraceHeaders.
	emits bool
	// class is the style class of the kind in Mermaid and DOT: "source",
	// "sink", "work" (calls the user's functions) or "structure".
	class string
	// mermaid is the opening and closing of the kind's Mermaid shape;
	// dot the attributes of its DOT shape.
	mermaid [2]string
	dot     string
}

// kinds holds the kindInfo of every kind, indexed by the kind.
var kinds = [...]kindInfo{
	KindSource: {plural: "sources", callsUser: true, nodeRetried: true, emits: true,
		class: "source", mermaid: [2]string{"([", "])"}, dot: ", shape=invhouse"},
	KindTransform: {plural: "transforms", consumes: true, callsUser: true, fallible: true, nodeRetried: true, decides: true,
		parallel: true, keyed: true, rateLimited: true, fallback: true, parks: true, class: "work"},
	KindSink: {plural: "sinks", consumes: true, callsUser: true, fallible: true, nodeRetried: true, decides: true,
		parallel: true, keyed: true, rateLimited: true, parks: true,
		class: "sink", mermaid: [2]string{"[(", ")]"}, dot: ", shape=cylinder"},
	KindFilter: {plural: "filters", consumes: true, callsUser: true, decides: true,
		parallel: true, keyed: true, rateLimited: true, class: "work"},
	KindFlatMap: {plural: "flat maps", consumes: true, callsUser: true, fallible: true, nodeRetried: true, decides: true,
		parallel: true, keyed: true, rateLimited: true, parks: true, class: "work"},
	KindBatch:   {plural: "batches", consumes: true},
	KindUnbatch: {plural: "unbatches", consumes: true},
	KindMerge:   {plural: "merges", consumes: true},
	KindRoute: {plural: "routes", consumes: true, callsUser: true, decides: true, parallel: true,
		mermaid: [2]string{"{{", "}}"}, dot: ", shape=hexagon"},
	KindBranch:    {plural: "branches", consumes: true},
	KindAggregate: {plural: "aggregates", consumes: true, callsUser: true, decides: true, class: "work"},
	KindJoin:      {plural: "joins", consumes: true, callsUser: true, decides: true, class: "work"},
}

// infoOf returns the kindInfo of kind k; a kind the table lacks (the
// zero kind) has none of the abilities.
func infoOf(k NodeKind) *kindInfo {
	if int(k) > 0 && int(k) < len(kinds) {
		return &kinds[k]
	}
	return &kindInfo{}
}

// kindsThat names the kinds whose kindInfo has has, in the order of their
// values: "transforms, sinks, filters and flat maps".
func kindsThat(has func(*kindInfo) bool) string {
	var names []string
	for _, k := range NodeKinds() {
		if has(infoOf(k)) {
			names = append(names, infoOf(k).plural)
		}
	}
	switch len(names) {
	case 0:
		return "none"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// shapeOf returns the Mermaid shape and DOT attributes of kind k: a work
// node's are a rectangle and a filled box; a structural one's a rounded
// box and the default.
func shapeOf(k NodeKind) (mermaid [2]string, dot string) {
	ki := infoOf(k)
	switch {
	case ki.mermaid != [2]string{}:
		return ki.mermaid, ki.dot
	case ki.class == "work":
		return [2]string{"[", "]"}, ", style=filled"
	}
	return [2]string{"(", ")"}, ""
}

// classOf returns the style class of kind k; see kindInfo.class.
func classOf(k NodeKind) string {
	if c := infoOf(k).class; c != "" {
		return c
	}
	return "structure"
}

// fallible reports whether node n calls a function of the user's that
// returns an error (see kindInfo.fallible); a Join's tagging transforms
// call nothing that fails.
func (n *spec) fallible() bool { return infoOf(n.kind).fallible && !n.tagging }

// nodeRetried reports whether a node retry can act on node n: see
// kindInfo.nodeRetried.
func (n *spec) nodeRetried() bool { return infoOf(n.kind).nodeRetried && !n.tagging }

// decides reports whether node n's failed items meet its failure action:
// see kindInfo.decides.
func (n *spec) decides() bool { return infoOf(n.kind).decides && !n.tagging }

// lateDeadLettered reports whether node n dead-letters the late items no
// failure rule takes: an event-time Aggregate without Late, an
// event-time Join without JoinLate (see [ErrLate]).
func (n *spec) lateDeadLettered() bool {
	switch n.kind {
	case KindAggregate:
		return n.cfg.eventTime != nil && n.cfg.late == nil
	case KindJoin:
		return n.cfg.joinTime != nil && n.cfg.joinLate == nil
	}
	return false
}
