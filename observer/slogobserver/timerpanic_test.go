package slogobserver_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/slogobserver"
)

// panicOnSummary is a handler that panics on summaries of dead letters,
// once it has been told where it is.
type panicOnSummary struct {
	panicked chan struct{}
	once     atomic.Bool
}

func (*panicOnSummary) Enabled(context.Context, slog.Level) bool { return true }
func (h *panicOnSummary) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h *panicOnSummary) WithGroup(string) slog.Handler          { return h }

func (h *panicOnSummary) Handle(_ context.Context, r slog.Record) error {
	if r.Message == slogobserver.MsgDeadLetters {
		if h.once.CompareAndSwap(false, true) {
			defer close(h.panicked)
		}
		panic("handler bug")
	}
	return nil
}

// A handler that panics on a summary the interval's timer writes, on the
// timer's goroutine, where no one could recover it, killed the program.
// Now the Observer catches it there, raises it on the next event's
// goroutine, once (where the engine turns an observer's panic into the
// run's failure, naming the node and the event), and Close returns it.
func TestHandlerPanicOnATimersSummaryIsRaisedByTheNextEvent(t *testing.T) {
	t.Parallel()
	h := &panicOnSummary{panicked: make(chan struct{})}
	clock := clockwork.NewFakeClock()
	o := slogobserver.New(slog.New(h), slogobserver.WithClock(clock))
	e := observer.DeadLetterEvent{Event: observer.Event{Pipeline: "p", RunID: "r", Node: "n", Time: clock.Now()},
		OriginNode: "n", Key: "k", Attempts: 1, Err: errors.New("bad")}
	o.OnDeadLetter(e) // logged at once
	o.OnDeadLetter(e) // counted: the timer is armed
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(slogobserver.DefaultSummaryEvery)
	<-h.panicked // on the timer's goroutine, which lives on

	var raised any
	func() {
		defer func() { raised = recover() }()
		o.OnNodeStarted(observer.NodeEvent{Event: e.Event})
	}()
	require.NotNil(t, raised, "the next event raises the handler's panic")
	err, ok := raised.(error)
	require.True(t, ok)
	assert.Contains(t, err.Error(), "the handler panicked on a summary the interval's timer wrote: handler bug")
	o.OnNodeStarted(observer.NodeEvent{Event: e.Event}) // once only
	cerr := o.Close()
	require.Error(t, cerr)
	assert.Equal(t, err.Error(), cerr.Error())
}
