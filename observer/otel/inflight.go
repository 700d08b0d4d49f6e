package otel

import (
	"sync/atomic"

	"github.com/sluicehq/sluice/pipeline"
)

// A watched pipeline is one an Observer reads at collection time, with what it
// needs to count the items in flight of the current run.
//
// The engine's counters add up every run of a pipeline, and a run that
// fails leaves items taken in and never finished. So the items in flight
// of a node are counted from where its counters stood when it started:
// base holds, per node, held(counters) at its last start.
type watched struct {
	p     *pipeline.Pipeline
	index map[string]int // node name → position in Stats.Nodes
	base  []atomic.Int64
}

func watch(p *pipeline.Pipeline) *watched {
	s := p.Stats()
	w := &watched{p: p, index: make(map[string]int, len(s.Nodes)), base: make([]atomic.Int64, len(s.Nodes))}
	for i, n := range s.Nodes {
		w.index[n.Node] = i
		w.base[i].Store(held(n))
	}
	return w
}

// started records where the counters of the node called name stand. The
// engine reports a node started before the node touches its counters.
func (w *watched) started(name string) {
	i, ok := w.index[name]
	if !ok {
		return
	}
	n := w.p.Stats().Nodes[i]
	w.base[i].Store(held(n))
}

// inFlight returns the items in flight of node i in s, and whether the
// figure is defined for the node's kind.
func (w *watched) inFlight(s pipeline.Stats, i int) (int64, bool) {
	n := s.Nodes[i]
	if !oneToOne(n.Kind) {
		return 0, false
	}
	if !s.Running {
		return 0, true
	}
	// Stages publish their counts in small tallies, so the difference can
	// briefly fall below zero; it is an estimate, never negative.
	return max(0, held(n)-w.base[i].Load()), true
}

// held is what a node has taken in and not yet let go of, over every run.
func held(n pipeline.NodeStats) int64 {
	return n.In - n.Out - n.Filtered - n.Skipped - n.DeadLettered
}

// oneToOne reports whether a node of kind hands on at most one item for
// each item it takes in, so that in minus out means something.
func oneToOne(kind string) bool {
	switch kind {
	case "transform", "sink", "filter", "merge":
		return true
	}
	return false
}
