package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
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
// passes. The grace period waits only while such calls run: once none
// runs (or none ran when the run failed), nothing waits for it. The same
// holds within a node of parallel workers when one of them fails the
// node; when no node restart will take it up, the run stops taking in
// items at that moment, not once the siblings' calls end. Cancelling the caller's context still ends every call at once.
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
// The timer waits only while a call of the scope runs: a scope that stops
// with none running, or whose last call returns, ends its calls' context
// at once, so nothing waits on the clock for calls that are not there (a
// fake clock that a test moves while anything waits would otherwise move
// the whole grace period at the end of every failed run, and at every
// restart of a group).
type callGrace struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	clock  clockwork.Clock
	grace  time.Duration
	// running counts the calls of the scope that are running now: the
	// node's, for a group; every node's, for a run.
	running func() int64
	// stopping is set, under mu, once the scope started to stop; a call
	// that returns reads it without the lock (see settle).
	stopping atomic.Bool

	mu    sync.Mutex
	stop  context.Context // the stop signal, once stopping
	timer clockwork.Timer
	ended bool
}

// newCallGrace returns a scope whose calls context ends with parent, or
// grace after start while calls counted by running still run.
func newCallGrace(parent context.Context, clock clockwork.Clock, grace time.Duration, running func() int64) *callGrace {
	ctx, cancel := context.WithCancelCause(parent)
	return &callGrace{ctx: ctx, cancel: cancel, clock: clock, grace: grace, running: running}
}

// start begins the scope's stop, once: its calls' context is cancelled,
// with stop's cause, at once when no call runs, else when the last call
// returns or the grace period passes, whichever comes first.
func (g *callGrace) start(stop context.Context) {
	g.mu.Lock()
	if g.ended || g.stop != nil {
		g.mu.Unlock()
		return
	}
	g.stop = stop
	// Set before reading running, as a call that returns lowers running
	// before reading stopping: one of the two sees the other (see settle).
	g.stopping.Store(true)
	if g.running() > 0 {
		g.timer = g.clock.AfterFunc(g.grace, func() { g.cancel(context.Cause(stop)) })
		g.mu.Unlock()
		return
	}
	g.ended = true
	g.mu.Unlock()
	g.cancel(context.Cause(stop))
}

// settle ends a stopping scope whose calls all returned: its timer stops
// and its calls' context is cancelled with the stop's cause. A call of the
// scope calls it after it returned and lowered running.
func (g *callGrace) settle() {
	if !g.stopping.Load() {
		return
	}
	g.mu.Lock()
	if g.ended || g.running() > 0 {
		g.mu.Unlock()
		return
	}
	g.ended = true
	if g.timer != nil {
		g.timer.Stop()
	}
	stop := g.stop
	g.mu.Unlock()
	g.cancel(context.Cause(stop))
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

// enterCall returns the context for a call of user code that the node
// makes under ctx, its stop signal, and counts the call as running until
// leaveCall: while ctx is live, the calls context of the node's group of
// workers, if it runs in one, else of the run; so that a failure does not
// cancel a call already running. Once ctx is done, ctx itself, so that a
// call started after the node stopped ends at once. Every enterCall is
// paired with a leaveCall, deferred.
func (nr *nodeRun) enterCall(ctx context.Context) context.Context {
	// Counted first, so that a scope that starts to stop after this
	// sees the call running and gives it the grace period.
	nr.running.Add(1)
	// Err, not a select on Done: the same answer (Err is set once Done is
	// closed), without the channel operation, which cost a sink more than
	// the rest of its call.
	if ctx.Err() != nil {
		return ctx
	}
	if nr.groupCalls != nil {
		return nr.groupCalls.ctx
	}
	return nr.rs.calls.ctx
}

// leaveCall counts the end of a call that enterCall started; the last call
// of a stopping scope ends the scope's grace period.
func (nr *nodeRun) leaveCall() {
	if nr.running.Add(-1) > 0 {
		return
	}
	if g := nr.groupCalls; g != nil {
		g.settle()
	}
	nr.rs.calls.settle()
}

// userCall calls f, a function of the user's, as a call of the node
// (see enterCall).
func userCall[In, R any](nr *nodeRun, ctx context.Context, f func(context.Context, In) (R, error), in In) (R, error) {
	defer nr.leaveCall()
	return f(callsWithStop(nr, ctx, nr.enterCall(ctx)), in)
}

// userWrite calls s's Write as a call of the node (see enterCall).
func userWrite[T any](nr *nodeRun, ctx context.Context, s node.Sink[T], item T) error {
	defer nr.leaveCall()
	return s.Write(nr.enterCall(ctx), item)
}

// running returns the calls of user code running on any node of the run.
func (rs *runState) running() int64 {
	var n int64
	for _, nr := range rs.nodes {
		n += nr.running.Load()
	}
	return n
}

// group gives the calls of a body whose workers run in a group, whose
// context is gctx, a scope of their own: when gctx ends (a worker failed
// the node, or the run stops), the calls already running get the grace
// period. The body calls the function returned once every worker has
// returned.
func (nr *nodeRun) group(gctx context.Context) func() {
	g := newCallGrace(nr.rs.calls.ctx, nr.rs.p.cfg.clock, nr.rs.calls.grace, nr.running.Load)
	nr.groupCalls = g
	// The restarts used when this body started: the function below may
	// run after the body returned (context.AfterFunc starts it in a
	// goroutine of its own), when a restart has already counted one more.
	restarts := nr.restarts.Load()
	stop := context.AfterFunc(gctx, func() {
		if cause := context.Cause(gctx); nr.failsForGood(cause, restarts) {
			// The node fails once its body returns, which waits for
			// the siblings' calls; the run stops taking in items now,
			// and its grace period starts with the group's.
			nr.rs.fail(nr.spec.name, nr.finalError(cause, restarts))
		}
		g.start(gctx)
	})
	return func() {
		stop()
		g.end()
		nr.groupCalls = nil
	}
}

// failsForGood reports whether cause, the error that ended the node's
// group of workers while the run goes on, fails the node once its body
// returns: no node restart takes it up (none configured, none left, or
// the error is not one to restart on). When unsure (restarts that
// ResetAfterItems may give back), it says no, and the node fails the run
// when its body returns, as any node does.
//
// restarts is how many node restarts the node had used when its body
// started.
func (nr *nodeRun) failsForGood(cause error, restarts int64) bool {
	if cause == nil || cause == context.Canceled || nr.ctx.Err() != nil || nr.rs.ctx.Err() != nil {
		return false // the body ended, or the node or the run is stopping
	}
	if !restartable(cause) {
		return true
	}
	o := nr.spec.res.NodeRestart
	if o.MaxRestarts == 0 {
		return true
	}
	return o.ResetAfterItems == 0 && restarts >= int64(o.MaxRestarts)
}

// finalError is the error the node fails with after cause, as
// nodeRestart words it: the error itself, or the restarts that ran out.
func (nr *nodeRun) finalError(cause error, restarts int64) error {
	if n := restarts; n > 0 && restartable(cause) {
		return nr.exhausted(resilience.NodeRestart, int(n)+1, cause)
	}
	return cause
}
