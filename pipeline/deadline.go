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

// withDeadlineOn returns a child of parent that ends d later on clock, and
// its cancel function, which must be called. On the real clock it is
// context.WithTimeout. On another clock (a fake one, in tests) it is a
// context of its own: its Err does not block (clockwork's fake-clock
// context waits in Err until it is done), and cancel stops its timer, so
// that no stale timer keeps counting as a waiter on the fake clock.
func withDeadlineOn(parent context.Context, clock clockwork.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if reflect.TypeOf(clock) == realClockType {
		return context.WithTimeout(parent, d)
	}
	c := &deadlineCtx{Context: parent, deadline: clock.Now().Add(d), done: make(chan struct{})}
	if pd, ok := parent.Deadline(); ok && pd.Before(c.deadline) {
		c.deadline = pd
	}
	t := clock.NewTimer(d)
	stop := make(chan struct{})
	var stopOnce sync.Once
	go func() {
		defer t.Stop()
		select {
		case <-t.Chan():
			c.end(context.DeadlineExceeded)
		case <-parent.Done():
			c.end(parent.Err())
		case <-stop:
		}
	}()
	return c, func() {
		stopOnce.Do(func() {
			// Stopped here, not by the goroutine: a fake clock must not
			// count the timer as a waiter once the call is over.
			t.Stop()
			close(stop)
		})
		c.end(context.Canceled)
	}
}

// A deadlineCtx is a context with a deadline on a clock of the pipeline's.
type deadlineCtx struct {
	context.Context // the parent, for Value
	deadline        time.Time
	done            chan struct{}
	once            sync.Once
	mu              sync.Mutex
	err             error
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *deadlineCtx) Done() <-chan struct{}       { return c.done }

func (c *deadlineCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *deadlineCtx) end(err error) {
	c.once.Do(func() {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.done)
	})
}

// deadlinePassed reports, without blocking, whether ctx ended by its own
// deadline.
func deadlinePassed(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return ctx.Err() == context.DeadlineExceeded
	default:
		return false
	}
}
