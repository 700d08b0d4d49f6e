package idempotency

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/node"
)

type failingComplete struct{ Store }

func (failingComplete) Complete(context.Context, string, string, time.Time) error {
	return errors.New("store unreachable")
}

// A guard whose store cannot complete keeps a mark per written key for
// two leases, not for ever: over a long outage its marks stay within what
// two leases of writes hold (a sweep at each power of two), where they
// grew by one per item given up.
func TestPendingMarksStayWithinTwoLeases(t *testing.T) {
	t.Parallel()
	const lease = 30 * time.Second
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	sink := node.SinkFunc[string](func(context.Context, string) error { return nil })
	g := Sink[string](sink, failingComplete{NewMemory(WithMaxKeys(1 << 20))}, func(s string) string { return s },
		WithClock(clock), WithLease(lease))
	most := 0
	for i := range 20000 {
		_ = g.Write(context.Background(), fmt.Sprint("k", i))
		clock.Advance(lease / 64) // 128 writes in two leases
		g.mu.Lock()
		most = max(most, len(g.pending))
		g.mu.Unlock()
	}
	assert.True(t, most <= 256, "at most %d marks", most)
	assert.Equal(t, int64(20000), g.Stats().Unrecorded)
}
