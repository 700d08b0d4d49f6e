package pipeline

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// realClockType is the type of clockwork's real clock.
var realClockType = reflect.TypeOf(clockwork.NewRealClock())

// withDeadlineOn returns a child of parent that ends at deadline on clock,
// and its cancel function, which must be called. The caller computes the
// deadline from its one reading of the clock, so that the context ends
// when it says (a second reading could be later). On the real clock it is
// context.WithDeadline. On another clock (a fake one, in tests) it is a
// context of its own, which differs from clockwork's in three ways: its Err
// does not block (clockwork's waits until the context is done); its timer
// starts only when the call asks for Done, so that a call that never waits
// on its context puts no timer on the fake clock, which a test driver
// (pipelinetest.AdvanceUntilDone) would take for a waiter and move time
// for while the call runs; and cancel stops that timer.
func withDeadlineOn(parent context.Context, clock clockwork.Clock, deadline time.Time) (context.Context, context.CancelFunc) {
	if reflect.TypeOf(clock) == realClockType {
		return context.WithDeadline(parent, deadline)
	}
	c := &deadlineCtx{Context: parent, clock: clock, deadline: deadline, done: make(chan struct{}), stop: make(chan struct{})}
	return c, c.cancel
}

// A deadlineCtx is a context with a deadline on a clock of the pipeline's.
type deadlineCtx struct {
	context.Context // the parent, for Value
	clock           clockwork.Clock
	deadline        time.Time
	done            chan struct{}

	startOnce sync.Once
	mu        sync.Mutex
	timer     clockwork.Timer
	stop      chan struct{} // closed by cancel
	stopped   bool
	err       error
	watch     crew // the goroutine that waits for the timer or the parent
}

func (c *deadlineCtx) Deadline() (time.Time, bool) {
	if pd, ok := c.Context.Deadline(); ok && pd.Before(c.deadline) {
		return pd, true
	}
	return c.deadline, true
}

// Done starts the timer, and the watch of the parent, the first time.
func (c *deadlineCtx) Done() <-chan struct{} {
	c.startOnce.Do(c.start)
	return c.done
}

func (c *deadlineCtx) start() {
	c.mu.Lock()
	if c.stopped || c.err != nil {
		c.mu.Unlock()
		return
	}
	if !c.clock.Now().Before(c.deadline) {
		c.endLocked(context.DeadlineExceeded)
		c.mu.Unlock()
		return
	}
	// Armed at the deadline, not for the time left at a reading: the
	// clock may move before the timer is armed.
	t := newTimerAt(c.clock, c.deadline)
	c.timer = t
	// Started under mu, so that cancel, which waits for it, either comes
	// first (and there is nothing to start) or sees it started.
	c.watch.Go(func() error {
		select {
		case <-t.Chan():
			c.end(context.DeadlineExceeded)
		case <-c.Context.Done():
			c.end(c.Context.Err())
		case <-c.stop:
		}
		return nil
	})
	c.mu.Unlock()
}

// Err is the context's error, without blocking: the parent's once it
// ended, DeadlineExceeded once the clock reached the deadline.
func (c *deadlineCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		if err := c.Context.Err(); err != nil {
			c.endLocked(err)
		} else if !c.clock.Now().Before(c.deadline) {
			c.endLocked(context.DeadlineExceeded)
		}
	}
	return c.err
}

func (c *deadlineCtx) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endLocked(err)
}

func (c *deadlineCtx) endLocked(err error) {
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}

func (c *deadlineCtx) cancel() {
	c.mu.Lock()
	if !c.stopped {
		c.stopped = true
		if c.timer != nil {
			c.timer.Stop() // here, so the fake clock counts no waiter once the call is over
		}
		close(c.stop)
	}
	c.endLocked(context.Canceled)
	c.mu.Unlock()
	// The watch, woken by stop, returns at once; a panic in it (a bug)
	// has nowhere to go but the context's own end, which has come.
	_ = c.watch.Wait()
}
