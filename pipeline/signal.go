package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// ErrInterrupted is matched by every [*SignalError] with [errors.Is]: a
// signal stopped the run that [RunUntilSignal] ran.
var ErrInterrupted = errors.New("pipeline: interrupted by a signal")

// A SignalError is what [RunUntilSignal] returns when a signal stopped the
// run. It matches [ErrInterrupted]; it also matches [ErrDrained] when the
// drain ended cleanly (Err is nil), and unwraps to Err otherwise, so that
// errors.Is(err, [ErrDrainTimeout]) or errors.Is(err, context.Canceled)
// tell a drain that ran out of time and a second signal apart.
type SignalError struct {
	// Signal is the first signal received: the one that drained the run.
	Signal os.Signal
	// Cancelled says that a second signal cancelled the run before its
	// drain ended.
	Cancelled bool
	// Err is what Run returned: nil when the drain ended with every item
	// taken in settled; [ErrDrainTimeout] when the drain ran out of time;
	// context.Canceled after a second signal; or a failure of the run's
	// own (a *NodeError) that the drain did not hide.
	Err error
}

// Error says what the signals did, and how the run ended.
func (e *SignalError) Error() string {
	switch {
	case e.Cancelled:
		return fmt.Sprintf("pipeline: drained on %v, cancelled on a second signal: %v", e.Signal, e.Err)
	case e.Err != nil:
		return fmt.Sprintf("pipeline: drained on %v: %v", e.Signal, e.Err)
	}
	return fmt.Sprintf("pipeline: drained on %v: every item taken in reached its outcome", e.Signal)
}

// Is reports whether target is [ErrInterrupted], or [ErrDrained] for a
// drain that ended cleanly.
func (e *SignalError) Is(target error) bool {
	return target == ErrInterrupted || (target == ErrDrained && e.Err == nil && !e.Cancelled)
}

// Unwrap returns what Run returned.
func (e *SignalError) Unwrap() error { return e.Err }

// RunUntilSignal runs p as [Pipeline.Run] does, and stops it gently on a
// signal: the first signal drains the run (see [Pipeline.Drain]: the
// sources stop, every item already taken in reaches its outcome, within
// the pipeline's [WithDrainTimeout] when it has one), and a second signal
// cancels it at once. With no signals given it listens for os.Interrupt
// (Ctrl-C) and syscall.SIGTERM (what a service manager or Kubernetes
// sends).
//
// It returns Run's Result, with Run's error while no signal came. Once a
// signal drained the run, the error is a [*SignalError]:
// errors.Is(err, [ErrDrained]) when the drain ended cleanly (Run itself
// would have returned nil), errors.Is(err, context.Canceled) after a
// second signal, errors.Is(err, [ErrDrainTimeout]) when the drain ran out
// of time; errors.Is(err, [ErrInterrupted]) in all three. A first signal
// that finds nothing to drain changes nothing, and the run's own result
// is returned: one that comes when every node has finished (while the
// sources close and the last checkpoint is saved), or while the run
// drains already ([Pipeline.Drain] was called).
//
// A signal that arrives before the run started (while it loads its
// checkpoint, say) drains it as soon as it starts. The signals are the
// program's again after the second signal, so that a third one has its
// default effect (Ctrl-C kills the program) when nothing else in the
// program listens for it, and once RunUntilSignal returns
// ([signal.Stop]); it leaves no goroutine behind. The operating system
// may deliver two equal signals sent at once as one (it keeps one pending
// signal of each kind), so a second Ctrl-C counts once the first was
// taken: pressed twice in a blink, it may only drain.
func RunUntilSignal(ctx context.Context, p *Pipeline, signals ...os.Signal) (Result, error) {
	if len(signals) == 0 {
		signals = []os.Signal{os.Interrupt, syscall.SIGTERM}
	}
	// Two slots: a second signal sent right after the first is not lost
	// while the watcher is busy draining.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, signals...)
	defer signal.Stop(sigs)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := &drainRequest{p: p, asked: make(chan struct{})}
	ctx = context.WithValue(ctx, drainRequestKey{}, req)

	done := make(chan struct{})
	watched := make(chan struct{})
	var (
		first     os.Signal // written by the watcher, read after watched is closed
		cancelled bool
	)
	go func() {
		defer close(watched)
		for n := 0; ; n++ {
			select {
			case s := <-sigs:
				if n == 0 {
					first = s
					req.ask()
					continue
				}
				// A third signal is the program's: with no listener
				// left, Ctrl-C kills it, however long the cancelled run
				// takes to return.
				signal.Stop(sigs)
				cancelled = true
				cancel()
				return
			case <-done:
				return
			}
		}
	}()
	res, err := p.Run(ctx)
	close(done)
	<-watched

	drained := req.drained()
	switch {
	case first == nil || (!drained && !cancelled):
		// No signal, or one that came when there was nothing left to
		// drain: the run's own ending.
		return res, err
	case err == nil && !drained:
		// The second signal came after the last node finished: the
		// run succeeded.
		return res, nil
	}
	return res, &SignalError{Signal: first, Cancelled: cancelled && err != nil, Err: err}
}

// drainRequestKey is the key of the *drainRequest in the context that
// RunUntilSignal gives Run.
type drainRequestKey struct{}

// A drainRequest carries a drain asked for by a signal to the run it is
// for, which may not have started yet when the signal comes: the run
// attaches itself as soon as it is published (see Pipeline.run), and is
// drained then if the signal came first.
type drainRequest struct {
	p     *Pipeline
	asked chan struct{} // closed by ask
	mu    sync.Mutex
	rs    *runState // the run, once attached
	// finished is set once every node of the run returned (see
	// nodesFinished): from then on a signal has nothing to drain.
	finished bool
	did      bool // the request switched a live run's drain on
}

// ask drains the run, now or once it is attached.
func (r *drainRequest) ask() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.asked:
		return
	default:
	}
	close(r.asked)
	if r.rs != nil {
		r.drainLocked()
	}
}

// attach is called by rs's Run once rs is published, before any node
// starts.
func (r *drainRequest) attach(rs *runState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rs = rs
	select {
	case <-r.asked:
		r.drainLocked()
	default:
	}
}

func (r *drainRequest) drainLocked() {
	if r.finished || r.rs.ended.Load() {
		// Every node finished: the sources close, the last checkpoint
		// is saved, but nothing is left to drain.
		return
	}
	// A drain already on (Pipeline.Drain was called) is not the
	// signal's doing; nor is one that the run's end refused.
	wasOn := r.rs.drains.on.Load()
	r.rs.drain()
	r.did = !wasOn && r.rs.drains.on.Load()
}

// nodesFinished is called by the run once every node returned, before
// the sources close: a signal that comes later drains nothing. It does
// nothing on a nil r, a run that RunUntilSignal did not start.
func (r *drainRequest) nodesFinished() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finished = true
}

// drained reports whether the request drained a live run.
func (r *drainRequest) drained() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.did
}

// attachDrainRequest attaches rs to the drain request that ctx (Run's
// context) carries for rs's pipeline, if any, and returns it (nil when
// there is none): a request carried along for another pipeline (one run
// from inside a node's call) is not this run's.
func attachDrainRequest(ctx context.Context, rs *runState) *drainRequest {
	if r, ok := ctx.Value(drainRequestKey{}).(*drainRequest); ok && r.p == rs.p {
		r.attach(rs)
		return r
	}
	return nil
}
