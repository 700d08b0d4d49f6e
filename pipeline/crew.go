package pipeline

import (
	"context"
	"sync"
)

// A crew owns goroutines of the runtime: every goroutine the engine
// starts, it starts through a crew, which waits for them and turns a panic
// in one into its error, through the one guard (guard.go) that does so
// for user code: a [*resilience.PanicError] with the panic's value and
// stack, which unwraps to the value when that was an error. A panic there is a bug of
// the engine; it fails the run, naming it, instead of crashing the
// process that runs the pipeline.
//
// A crew from newCrew cancels its context with its first error, as
// errgroup.WithContext does; a zero crew cancels nothing. It is the
// engine's own rather than sourcegraph/conc's (see docs/concepts.md):
// conc's pool would add a module to every user's go.mod, and the run
// needs errgroup's cancel-with-cause, which conc's WaitGroup lacks.
type crew struct {
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

// newCrew returns a crew whose first error cancels the context returned,
// a child of ctx.
func newCrew(ctx context.Context) (*crew, context.Context) {
	ctx, cancel := context.WithCancelCause(ctx)
	return &crew{cancel: cancel}, ctx
}

// Go starts f on a goroutine of the crew. f's error, or its panic, is
// the crew's if it is the first.
func (c *crew) Go(f func() error) {
	c.wg.Go(func() {
		if err := owned(f); err != nil {
			c.once.Do(func() {
				c.err = err
				if c.cancel != nil {
					c.cancel(err)
				}
			})
		}
	})
}

// Wait waits for every goroutine of the crew and returns its first error;
// it then cancels the crew's context.
func (c *crew) Wait() error {
	c.wg.Wait()
	if c.cancel != nil {
		c.cancel(c.err)
	}
	return c.err
}

// owned calls f and returns its error, or its panic as an error that
// names the engine, which node restart does not repeat: it is a bug.
func owned(f func() error) (err error) {
	defer recoveredPolicy("a goroutine of the engine", &err)
	return f()
}
