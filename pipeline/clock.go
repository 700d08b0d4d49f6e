package pipeline

import (
	"fmt"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/node"
)

// A ClockSetter is a node that waits on a clock, such as a source that
// polls a table every few seconds. The pipeline calls SetClock at the
// start of each of its runs, before any node opens or runs, with its own
// clock ([WithClock]; the real clock by default), so that one fake clock
// in a test drives the node's waits with the pipeline's. A node whose own
// option names a clock keeps that one: an explicit clock wins. SetClock
// is called on the goroutine that calls Run, one node after another; a
// panic in it fails the run before any node starts.
type ClockSetter interface {
	SetClock(clock clockwork.Clock)
}

// clockSetterOf returns v's SetClock: v's own, else that of the node it
// wraps (node.Wrapper, a few levels deep); nil when none has one.
func clockSetterOf(v any) func(clockwork.Clock) {
	for range 8 {
		if isNil(v) {
			return nil
		}
		if c, ok := v.(ClockSetter); ok {
			return c.SetClock
		}
		w, ok := v.(node.Wrapper)
		if !ok {
			return nil
		}
		v = w.Unwrap()
	}
	return nil
}

// setClocks gives the pipeline's clock to every node that takes one
// (ClockSetter), before any node starts.
func (rs *runState) setClocks() error {
	for _, n := range rs.p.nodes {
		if n.setClock == nil {
			continue
		}
		if err := protect(func() { n.setClock(rs.p.cfg.clock) }); err != nil {
			return &NodeError{Node: n.name, Err: fmt.Errorf("pipeline: node %q: SetClock: %w", n.name, err)}
		}
	}
	return nil
}
