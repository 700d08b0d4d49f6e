package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// recClock records the durations of the timers made on it, and cancels
// ctx at the first one.
type recClock struct {
	*clockwork.FakeClock
	ds     []time.Duration
	cancel context.CancelFunc
}

func (c *recClock) NewTimer(d time.Duration) clockwork.Timer {
	c.ds = append(c.ds, d)
	c.cancel()
	return c.FakeClock.NewTimer(d)
}

// A rate so slow that a token takes longer than a Duration holds waits on
// one long timer, not on 1 ns timers in a loop.
func TestLimiterTinyRateWaitsLong(t *testing.T) {
	for _, rate := range []float64{1e-10, 1e-12, 5e-324} {
		ctx, cancel := context.WithCancel(t.Context())
		clk := &recClock{FakeClock: clockwork.NewFakeClock(), cancel: cancel}
		l := newLimiter(rate, 1, clk)
		if err := l.wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.wait(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("rate %g: %v", rate, err)
		}
		if len(clk.ds) != 1 || clk.ds[0] < time.Hour {
			t.Errorf("rate %g: timers of %v, want one long wait", rate, clk.ds)
		}
	}
}

// The cost of one call's token when none has to wait (a rate and burst
// far above the calls), from 4 goroutines at once, as a node's workers.
func BenchmarkLimiterWaitNoDelay(b *testing.B) {
	l := newLimiter(1e12, 1<<30, clockwork.NewFakeClock())
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := l.wait(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
