package slogobserver_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/slogobserver"
)

// slowSummaries is a handler that holds up the first summary of dead
// letters until the test lets it through: a slow log sink.
type slowSummaries struct {
	entered, open chan struct{}
	first         atomic.Bool
	written       atomic.Bool // the held summary was written
}

func (h *slowSummaries) Enabled(context.Context, slog.Level) bool { return true }

func (h *slowSummaries) Handle(_ context.Context, r slog.Record) error {
	if r.Message == slogobserver.MsgDeadLetters && h.first.CompareAndSwap(false, true) {
		close(h.entered)
		<-h.open
		h.written.Store(true)
	}
	return nil
}

func (h *slowSummaries) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *slowSummaries) WithGroup(string) slog.Handler      { return h }

// TestCloseWaitsForSummariesBeingWritten checks that Close returns once
// every summary is written, as its doc says, those that a node's
// completion (or an event that ends an interval) took out of the groups
// and writes outside the lock included: docs/observability.md says to
// Close the observer when the program ends, and a summary written after
// Close would go into a handler the program may have closed by then.
func TestCloseWaitsForSummariesBeingWritten(t *testing.T) {
	h := &slowSummaries{entered: make(chan struct{}), open: make(chan struct{})}
	clock := clockwork.NewFakeClock()
	o := slogobserver.New(slog.New(h), slogobserver.WithClock(clock))
	ev := observer.Event{Pipeline: "p", RunID: "r", Node: "price", Time: clock.Now()}
	for range 3 {
		o.OnDeadLetter(observer.DeadLetterEvent{Event: ev, OriginNode: "price", Attempts: 1, Err: errors.New("HTTP 400")})
	}
	completed := make(chan struct{})
	go func() {
		defer close(completed)
		o.OnNodeCompleted(observer.NodeEvent{Event: ev}) // writes the summary of 2
	}()
	select {
	case <-h.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no summary written")
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = o.Close()
	}()
	select {
	case <-closed:
		assert.True(t, h.written.Load(), "Close returned before the summary was written")
	case <-time.After(time.Second):
		// Close waits for the summary, as documented.
	}
	close(h.open)
	<-closed
	<-completed
}
