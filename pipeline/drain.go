package pipeline

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// ErrDrained is the cause of a source's context once [Pipeline.Drain] was
// called: the source should stop emitting and return. A source that
// returns after a drain (with this error, its context's error or nil) ends
// cleanly.
var ErrDrained = errors.New("pipeline: draining: no new items")

// ErrDrainTimeout is the cause of a run that a drain did not finish within
// the time [WithDrainTimeout] gave it: the run is cancelled, the calls of
// user code still running with it, and items still in flight end Failed,
// as for any cancellation.
var ErrDrainTimeout = errors.New("pipeline: drain timed out")

// WithDrainTimeout bounds a drain (see [Pipeline.Drain]): d after Drain, on
// the pipeline's clock, the run is cancelled with [ErrDrainTimeout]. 0, the
// default, waits for every item in flight however long it takes; a
// negative d is a Build error.
//
// d > 0 is also the grace period of a failure: how long the calls of user
// code running when the run fails may go on (see [DefaultFailGrace], the
// grace period when d is 0).
func WithDrainTimeout(d time.Duration) Option {
	return func(c *config) { c.drainTimeout = d }
}

// drainState is a run's drain.
type drainState struct {
	on      atomic.Bool
	ch      chan struct{} // closed by the drain
	mu      sync.Mutex
	cancels []context.CancelCauseFunc // of the sources' Run contexts
	// recalls run when the run drains: each hands a node's parked items
	// back to their broker (see parking.recall).
	recalls map[*func()]struct{}
	timer   clockwork.Timer
	stopped bool // the run ended: a drain arms no timer
}

// errDrainWoke ends a source's restart or retry backoff when the run
// drains.
var errDrainWoke = errors.New("pipeline: drained while waiting")

// drainedSource reports whether nr is a source of a run that drains.
func (nr *nodeRun) drainedSource() bool {
	return nr.spec.kind == KindSource && nr.rs.drains.on.Load()
}

// Drain stops the current run's sources from emitting, lets every item
// already emitted reach its outcome, and so ends the run as if the input
// had ended: Run returns nil once every item is settled. Each source's Run
// context is cancelled with [ErrDrained] as its cause, and Emit refuses new
// items soon after; a broker source stops consuming, and the messages it
// held but had not emitted go back to the queue when it closes.
//
// An item parked on a Parallel node (its retry waits, see [MaxParked])
// does not hold the drain when its source's broker can take it back
// ([deadletter.HandOffSource]): it goes back at once, whatever is left of
// its wait, as a hand-off of HandOffAfter goes, and ends HandedOff; so
// does an item that parks while the run drains. Other parked items finish
// their waits: those of a Keyed node (its key's later items would be
// written first), those whose source takes no hand-off, and those whose
// broker refuses it.
//
// With [WithDrainTimeout], a drain that takes longer cancels the run, and
// the calls of user code still running with it. Drain
// reports whether a run was there to drain; it is safe to call more than
// once and from any goroutine.
func (p *Pipeline) Drain() bool {
	rs := p.current.Load()
	if rs == nil || rs.ended.Load() {
		return false
	}
	rs.drain()
	return true
}

func (rs *runState) drain() {
	d := &rs.drains
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped || d.on.Swap(true) {
		return
	}
	close(d.ch)
	for _, cancel := range d.cancels {
		cancel(ErrDrained)
	}
	for f := range d.recalls {
		(*f)()
	}
	if t := rs.p.cfg.drainTimeout; t > 0 {
		d.timer = rs.p.cfg.clock.AfterFunc(t, func() {
			// The drain had its time: calls still running end too.
			rs.cancel(ErrDrainTimeout)
			rs.calls.cancel(ErrDrainTimeout)
		})
	}
}

// sourceContext returns the context a source's Run gets: ctx, cancelled
// with ErrDrained when the run drains.
func (rs *runState) sourceContext(ctx context.Context) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithCancelCause(ctx)
	d := &rs.drains
	d.mu.Lock()
	if d.on.Load() {
		cancel(ErrDrained)
	}
	d.cancels = append(d.cancels, cancel)
	d.mu.Unlock()
	return sctx, func() { cancel(nil) }
}

// onDrain runs f when the run drains, at once when it drains already; f
// must not wait. forget forgets f, once the body it serves ended.
func (rs *runState) onDrain(f func()) (forget func()) {
	d := &rs.drains
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.on.Load() {
		f()
	}
	if d.recalls == nil {
		d.recalls = make(map[*func()]struct{})
	}
	d.recalls[&f] = struct{}{}
	return func() {
		d.mu.Lock()
		delete(d.recalls, &f)
		d.mu.Unlock()
	}
}

// stopDrain stops the drain's timer at the end of the run.
func (rs *runState) stopDrain() {
	d := &rs.drains
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	if d.timer != nil {
		d.timer.Stop()
	}
}

// drained reports whether err ended a source's Run because of a drain: the
// run drains, its own context is live, and err is the drain's echo (the
// cause ErrDrained, or the plain cancellation of the source's context), not
// a failure of the source's own.
func (rs *runState) drained(err error, sctx context.Context) bool {
	if err == nil || !rs.drains.on.Load() || rs.ctx.Err() != nil {
		return false
	}
	// Emit may refuse with ErrDrained a moment before the drain cancels
	// the source's context.
	return errors.Is(err, ErrDrained) || (errors.Is(err, context.Canceled) && errors.Is(context.Cause(sctx), ErrDrained))
}
