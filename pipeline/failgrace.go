package pipeline

import (
	"context"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// DefaultFailGrace is how long, on the pipeline's clock, a call of user
// code that is running when its run fails may go on before its context is
// cancelled, unless [WithDrainTimeout] sets that bound.
//
// A failure stops the run taking in and handing on items at once, but does
// not cancel the calls already running (a Write, a Process, a dead-letter
// sink's Write): a write that committed would otherwise report
// context.Canceled, its item end Failed, and a broker deliver it again. So
// a call ends on its own, and its item gets its real outcome (a write that
// returns nil is Delivered, and a broker source acks it), or its context
// is cancelled, with the run's failure as its cause, once the grace period
// passes. The same holds within a node of parallel workers when one of
// them fails the node. Cancelling the caller's context still ends every
// call at once.
const DefaultFailGrace = 10 * time.Second

// failGrace is the grace period of a failure: WithDrainTimeout's bound
// when set, else DefaultFailGrace.
func (p *Pipeline) failGrace() time.Duration {
	if d := p.cfg.drainTimeout; d > 0 {
		return d
	}
	return DefaultFailGrace
}

// A callGrace is the context that the calls of user code get in one scope
// (a run, or one body of a node whose workers run in a group), and the
// timer that cancels it a grace period after the scope started to stop.
type callGrace struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	clock  clockwork.Clock
	grace  time.Duration

	mu    sync.Mutex
	timer clockwork.Timer
	ended bool
}

// newCallGrace returns a scope whose calls context ends with parent, or
// grace after start.
func newCallGrace(parent context.Context, clock clockwork.Clock, grace time.Duration) *callGrace {
	ctx, cancel := context.WithCancelCause(parent)
	return &callGrace{ctx: ctx, cancel: cancel, clock: clock, grace: grace}
}

// start arms the grace period, once: when it passes, the calls' context is
// cancelled with stop's cause.
func (g *callGrace) start(stop context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended || g.timer != nil {
		return
	}
	g.timer = g.clock.AfterFunc(g.grace, func() { g.cancel(context.Cause(stop)) })
}

// end stops the grace period's timer and cancels the calls' context: the
// scope is over, and so are its calls.
func (g *callGrace) end() {
	g.mu.Lock()
	g.ended = true
	if g.timer != nil {
		g.timer.Stop()
	}
	g.mu.Unlock()
	g.cancel(nil)
}

// callContext returns the context for a call of user code that the node
// makes under ctx, its stop signal: while ctx is live, the calls context
// of the node's group of workers, if it runs in one, else of the run; so
// that a failure does not cancel a call already running. Once ctx is
// done, ctx itself, so that a call started after the node stopped ends at
// once.
func (nr *nodeRun) callContext(ctx context.Context) context.Context {
	select {
	case <-ctx.Done():
		return ctx
	default:
	}
	if nr.groupCalls != nil {
		return nr.groupCalls
	}
	return nr.rs.calls.ctx
}

// group gives the calls of a body whose workers run in a group, whose
// context is gctx, a scope of their own: when gctx ends (a worker failed
// the node, or the run stops), the calls already running get the grace
// period. The body calls the function returned once every worker has
// returned.
func (nr *nodeRun) group(gctx context.Context) func() {
	g := newCallGrace(nr.rs.calls.ctx, nr.rs.p.cfg.clock, nr.rs.calls.grace)
	nr.groupCalls = g.ctx
	stop := context.AfterFunc(gctx, func() { g.start(gctx) })
	return func() {
		stop()
		g.end()
		nr.groupCalls = nil
	}
}
