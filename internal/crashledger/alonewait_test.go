package crashledger_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/crashledger"
	"github.com/sluicehq/sluice/internal/require"
)

const aloneWait = time.Minute

// suspectOn makes suspects of ids at path, and opens the ledger there
// again with a fake clock and AloneWait of a minute.
func suspectOn(t *testing.T, path string, ids ...string) (*crashledger.Ledger, *clockwork.FakeClock) {
	t.Helper()
	l := open(t, path)
	for _, id := range ids {
		run(t, l, id)
	}
	require.NoError(t, crashledger.Abandon(l))
	clock := clockwork.NewFakeClock()
	l, err := crashledger.Open(path, crashledger.Options{Clock: clock, AloneWait: aloneWait})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l, clock
}

// turnAsync takes e's turn in a goroutine; the channel gets its error.
func turnAsync(ctx context.Context, e *crashledger.Entry) <-chan error {
	got := make(chan error, 1)
	go func() { got <- e.Turn(ctx) }()
	return got
}

// waiting waits until n turns of l wait.
func waiting(t *testing.T, l *crashledger.Ledger, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for l.Waiting() != n {
		select {
		case <-ctx.Done():
			t.Fatalf("%d turns wait, want %d", l.Waiting(), n)
		case <-tick.C:
		}
	}
}

// A suspect that arrives while something runs (and would run for ever,
// as an item held by a batch without linger) waits AloneWait, no more,
// then runs beside it, not alone: a crash then keeps it a suspect, not
// the culprit.
func TestSuspectWaitsForIdleAtMostAloneWait(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	l, clock := suspectOn(t, path, "s")
	run(t, l, "held") // never settled
	s := l.Entry("s")
	got := turnAsync(t.Context(), s)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	waiting(t, l, 1)
	clock.Advance(aloneWait - time.Nanosecond)
	select {
	case err := <-got:
		t.Fatalf("the suspect's turn came before AloneWait: %v", err)
	default:
	}
	clock.Advance(time.Nanosecond)
	require.NoError(t, <-got, "the turn comes at AloneWait")
	assert.False(t, s.Alone(), "it runs beside the held message")
	c := run(t, l, "c") // and nothing waits behind it
	assert.Zero(t, l.Waiting())
	c.Settle()
	require.NoError(t, l.Flush())

	l = crash(t, l, path)
	assert.Equal(t, crashledger.Found{Suspects: 2, Crashed: true, InFlight: []string{"held", "s"}}, l.Found(),
		"a crash beside others names no culprit")
	e := l.Entry("s")
	assert.Equal(t, crashledger.Suspect, e.Verdict())
	assert.Equal(t, 2, e.Crashes(), "both crashes counted")
}

// A suspect that runs alone and is not settled within AloneWait (held by
// a batch that waits for more) stops running alone: the turns that waited
// for it come, and a crash then keeps it a suspect, not the culprit.
func TestSuspectRunsAloneAtMostAloneWait(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	l, clock := suspectOn(t, path, "s")
	s := run(t, l, "s")
	require.True(t, s.Alone(), "nothing ran: it runs alone")
	c := l.Entry("c")
	got := turnAsync(t.Context(), c)
	waiting(t, l, 1)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "the end of its time alone")
	clock.Advance(aloneWait - time.Nanosecond)
	select {
	case err := <-got:
		t.Fatalf("a turn came while the suspect ran alone: %v", err)
	default:
	}
	clock.Advance(time.Nanosecond)
	require.NoError(t, <-got, "the waiting turn comes at AloneWait")
	assert.False(t, s.Alone())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(b), "n \"s\"\n", "written before the other message runs")

	l = crash(t, l, path)
	assert.Equal(t, crashledger.Found{Suspects: 2, Crashed: true, InFlight: []string{"c", "s"}}, l.Found(),
		"not the culprit: others ran beside it")
}

// A suspect settled within AloneWait ends its time alone with nothing
// left on the clock; a crash while it runs alone, before AloneWait, still
// names it the culprit.
func TestSuspectAloneWithinAloneWait(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	l, clock := suspectOn(t, path, "s", "x")
	s := run(t, l, "s")
	require.True(t, s.Alone())
	s.Settle()
	noTimer(t, clock)
	x := run(t, l, "x")
	require.True(t, x.Alone())
	clock.Advance(aloneWait - time.Nanosecond)
	require.NoError(t, l.Flush())
	l = crash(t, l, path)
	assert.Equal(t, crashledger.Culprit, l.Entry("x").Verdict())
	assert.Equal(t, crashledger.Clean, l.Entry("s").Verdict())
}

// A suspect's wait for idleness ends at once with its context, and leaves
// nothing waiting nor running: the message goes back, still a suspect.
func TestSuspectWaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	l, clock := suspectOn(t, path, "s")
	run(t, l, "held")
	ctx, cancel := context.WithCancelCause(t.Context())
	s := l.Entry("s")
	got := turnAsync(ctx, s)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	cancel(context.Canceled)
	require.ErrorIs(t, <-got, context.Canceled)
	assert.Zero(t, l.Waiting())
	assert.False(t, s.Alone())
	s.Release()
	noTimer(t, clock)
	l = crash(t, l, path)
	assert.Equal(t, crashledger.Suspect, l.Entry("s").Verdict())
}

// noTimer checks that nothing waits on the clock.
func noTimer(t *testing.T, clock *clockwork.FakeClock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, 0), "a timer is left on the clock")
}
