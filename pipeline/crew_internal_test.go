package pipeline

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

var errFirst = errors.New("first")

// The first error is the crew's, and cancels its context with it as the
// cause, as errgroup's does; Wait returns it once every goroutine did.
func TestCrewFirstErrorCancelsWithCause(t *testing.T) {
	t.Parallel()
	c, ctx := newCrew(context.Background())
	var after atomic.Int32
	c.Go(func() error { return errFirst })
	for range 3 {
		c.Go(func() error {
			<-ctx.Done()
			after.Add(1)
			return errors.New("later")
		})
	}
	if err := c.Wait(); err != errFirst {
		t.Fatalf("Wait = %v, want the first error", err)
	}
	if got := after.Load(); got != 3 {
		t.Errorf("Wait returned before every goroutine: %d of 3 ended", got)
	}
	if cause := context.Cause(ctx); cause != errFirst {
		t.Errorf("cause = %v, want the first error", cause)
	}
}

// Without an error the crew's context ends only once Wait returned.
func TestCrewWaitEndsItsContext(t *testing.T) {
	t.Parallel()
	c, ctx := newCrew(context.Background())
	c.Go(func() error {
		if ctx.Err() != nil {
			return errors.New("context ended while the crew ran")
		}
		return nil
	})
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() == nil {
		t.Error("the crew's context is still live after Wait")
	}
}

// A panic in a goroutine of the crew is its error: a PanicError with the
// value and the stack, unwrapping to the value when it is an error, that
// names the engine and that node restart does not repeat.
func TestCrewTurnsAPanicIntoAnError(t *testing.T) {
	t.Parallel()
	for _, v := range []any{"boom", errFirst} {
		var c crew // a zero crew: no context to cancel
		c.Go(func() error { panic(v) })
		err := c.Wait()
		var pe *resilience.PanicError
		if !errors.As(err, &pe) {
			t.Fatalf("Wait = %v, want a *resilience.PanicError", err)
		}
		if pe.Value != v || !strings.Contains(string(pe.Stack), "crew_internal_test.go") {
			t.Errorf("value %v, stack without the panicking function:\n%s", pe.Value, pe.Stack)
		}
		if !errors.Is(err, resilience.ErrPanic) {
			t.Errorf("%v is not ErrPanic", err)
		}
		if ve, ok := v.(error); ok && !errors.Is(err, ve) {
			t.Errorf("%v does not unwrap to the panic's error", err)
		}
		if restartable(err) {
			t.Errorf("%v is restartable", err)
		}
		if !strings.Contains(err.Error(), "a goroutine of the engine panicked") {
			t.Errorf("%q does not name the engine", err)
		}
	}
}

// panicky panics on its flush, after saying so.
type panicky chan struct{}

func (p panicky) tryFlush() flushResult {
	close(p)
	panic("flush")
}

// The run's flusher is a goroutine of a crew: a panic in it is the error
// its close returns, not a crash.
func TestFlusherPanicIsItsCloseError(t *testing.T) {
	t.Parallel()
	f := newFlusher()
	p := make(panicky)
	f.arm(p)
	<-p
	err := f.close()
	if !errors.Is(err, resilience.ErrPanic) {
		t.Fatalf("close = %v, want the flusher's panic", err)
	}
	if err2 := f.close(); err2 != err {
		t.Errorf("a second close = %v, want %v", err2, err)
	}
}

// brokenBody is a runner whose body panics, as a bug of the engine would.
type brokenBody struct{ runner }

func (brokenBody) body(context.Context) error { panic("engine bug") }

// A panic in a node's goroutine, outside any call of user code, fails the
// run naming the node, with the panic as the error; the process goes on.
func TestEnginePanicFailsTheRun(t *testing.T) {
	t.Parallel()
	b := New("bug")
	Sink(b, "sink", Source(b, "src", sliceSource{1, 2, 3}), node.SinkFunc[int](func(context.Context, int) error { return nil }))
	p, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	sink := p.nodes[1]
	newRunner := sink.newRunner
	sink.newRunner = func(nr *nodeRun) runner { return brokenBody{newRunner(nr)} }
	_, err = p.Run(context.Background())
	var ne *NodeError
	if !errors.As(err, &ne) || ne.Node != "sink" {
		t.Fatalf("Run = %v, want the sink's NodeError", err)
	}
	if !errors.Is(err, resilience.ErrPanic) || !strings.Contains(err.Error(), "a goroutine of the engine panicked: resilience: panic: engine bug") {
		t.Errorf("Run = %v, want the engine's panic", err)
	}
}

// sliceSource emits its items.
type sliceSource []int

func (s sliceSource) Run(ctx context.Context, out node.Emitter[int]) error {
	for _, v := range s {
		if err := out.Emit(ctx, v); err != nil {
			return err
		}
	}
	return nil
}
