package kafka

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitReturns reports whether wait returned within a guard of 10 s (a
// hang's guard, not a timing: every wait asserted to return can).
func waitReturns(c *settlingCount, ctx context.Context) bool {
	done := make(chan struct{})
	go func() {
		c.wait(ctx)
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(10 * time.Second):
		return false
	}
}

func TestSettlingCountWaitsForZero(t *testing.T) {
	var c settlingCount
	require.True(t, waitReturns(&c, t.Context()), "nothing settling: the wait returns at once")

	c.add()
	c.add()
	done := make(chan struct{})
	go func() {
		c.wait(t.Context())
		close(done)
	}()
	c.done()
	select {
	case <-done:
		t.Fatal("the wait returned with a run still settling")
	default:
	}
	c.done()
	<-done

	// A wait its context ended returns, leaving no goroutine (goleak, in
	// TestMain) while the count stays up.
	c.add()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.True(t, waitReturns(&c, ctx))
	c.done()
}

// Runs rejected while a closing session waits count up from zero during
// the wait: a sync.WaitGroup forbids that (the race detector reports it,
// and it may panic); settlingCount takes it, and every wait still ends
// once the count is zero.
func TestSettlingCountAddDuringWait(t *testing.T) {
	var c settlingCount
	for range 200 {
		c.add()
		var wg sync.WaitGroup
		waited := make(chan struct{})
		go func() {
			c.wait(t.Context())
			close(waited)
		}()
		for range 4 {
			wg.Go(func() {
				c.add()
				c.done()
			})
		}
		c.done()
		wg.Wait()
		<-waited
	}
}
