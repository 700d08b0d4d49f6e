package crashledger_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/crashledger"
	"github.com/sluicehq/sluice/internal/require"
)

func ledgerPath(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "crash.ledger")
}

func open(t *testing.T, path string) *crashledger.Ledger {
	t.Helper()
	l, err := crashledger.Open(path, crashledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// run takes a message's turn and fails the test when it must wait.
func run(t *testing.T, l *crashledger.Ledger, id string) *crashledger.Entry {
	t.Helper()
	e := l.Entry(id)
	require.NoError(t, e.Turn(t.Context()), "the turn of %q", id)
	return e
}

// mustWait checks that e's turn has not come: Turn with a context already
// done returns at once, with the context's error, only when it would wait.
func mustWait(t *testing.T, e *crashledger.Entry) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, e.Turn(ctx), context.Canceled, "the turn of %q must wait", e.ID())
}

// crash ends l as a dying process does, and opens the path again.
func crash(t *testing.T, l *crashledger.Ledger, path string) *crashledger.Ledger {
	t.Helper()
	require.NoError(t, crashledger.Abandon(l))
	return open(t, path)
}

func TestMissingFileIsAFreshLedger(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	l := open(t, path)
	assert.Equal(t, crashledger.Found{}, l.Found())
	assert.Equal(t, crashledger.Clean, l.Entry("m-1").Verdict())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "sluice crash ledger v1\n", string(b), "the file exists from Open on")
}

func TestEmptyFileIsAFreshLedger(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	l := open(t, path)
	assert.Equal(t, crashledger.Found{}, l.Found())
	assert.Equal(t, crashledger.Clean, l.Entry("m-1").Verdict())
}

// What was in flight when the process died is suspect; what was settled
// or released before is not.
func TestInFlightAtACrashIsSuspect(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	l := open(t, path)
	a, b, c := run(t, l, "a"), run(t, l, "b"), l.Entry("c")
	c.Hold() // held, never emitted
	a.Settle()
	run(t, l, "d").Release()
	e := run(t, l, "e") // its turn writes the settlements before it
	l = crash(t, l, path)
	assert.Equal(t, crashledger.Found{Suspects: 3, Crashed: true, InFlight: []string{"b", "c", "e"}}, l.Found())
	assert.Equal(t, crashledger.Clean, l.Entry("a").Verdict(), "settled before the crash")
	assert.Equal(t, crashledger.Clean, l.Entry("d").Verdict(), "released before the crash")
	for _, id := range []string{b.ID(), c.ID(), e.ID()} {
		e := l.Entry(id)
		assert.Equal(t, crashledger.Suspect, e.Verdict(), id)
		assert.Equal(t, 1, e.Crashes(), id)
		assert.Zero(t, l.Entry(id).Crashes(), "a crash is reported once per process")
	}
}

// A suspect runs alone: it waits until nothing runs, and nothing runs
// beside it until it is settled.
func TestSuspectRunsAlone(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	l := open(t, path)
	run(t, l, "s")
	l = crash(t, l, path)

	c1 := run(t, l, "c1")
	s := l.Entry("s")
	require.Equal(t, crashledger.Suspect, s.Verdict())
	mustWait(t, s)
	c1.Settle()
	require.NoError(t, s.Turn(t.Context()), "nothing runs now")
	c2 := l.Entry("c2")
	mustWait(t, c2)

	// A waiting turn comes when the suspect is settled.
	got := make(chan error, 1)
	go func() { got <- c2.Turn(t.Context()) }()
	s.Settle()
	require.NoError(t, <-got)
	c2.Settle()
	require.NoError(t, l.Flush()) // else the next Turn writes it

	l = crash(t, l, path)
	assert.Equal(t, crashledger.Found{}, l.Found(), "a suspect that was settled is cleared")
	assert.Equal(t, crashledger.Clean, l.Entry("s").Verdict())
}

// A second crash while a suspect runs alone names it the culprit; what
// else was held then stays a suspect, with both crashes counted.
func TestCrashWhileAloneNamesTheCulprit(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	l := open(t, path)
	run(t, l, "x")
	run(t, l, "n")
	l = crash(t, l, path)

	x := run(t, l, "x")
	require.Equal(t, crashledger.Suspect, x.Verdict())
	n := l.Entry("n")
	n.Hold() // held behind the suspect, waiting for its turn
	require.NoError(t, l.Flush())
	l = crash(t, l, path)

	assert.Equal(t, crashledger.Found{Suspects: 1, Culprits: 1, Crashed: true, InFlight: []string{"n", "x"}}, l.Found())
	culprit := l.Entry("x")
	assert.Equal(t, crashledger.Culprit, culprit.Verdict())
	e := l.Entry("n")
	assert.Equal(t, crashledger.Suspect, e.Verdict(), "a neighbour is never condemned")
	assert.Equal(t, 2, e.Crashes())

	// Dead-lettered: settled without a turn, and cleared.
	culprit.Settle()
	require.NoError(t, l.Close())
	l = open(t, path)
	assert.Equal(t, crashledger.Clean, l.Entry("x").Verdict())
	assert.Equal(t, crashledger.Suspect, l.Entry("n").Verdict())
}

// A suspect released (its run ended first) stays suspect; a clean Close
// makes nothing suspect.
func TestReleaseAndCloseKeepMarksOnly(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	l := open(t, path)
	run(t, l, "s")
	l = crash(t, l, path)
	run(t, l, "s").Release()
	run(t, l, "c") // in flight at a clean Close: back in the queue, innocent
	require.NoError(t, l.Close())
	l = open(t, path)
	assert.Equal(t, crashledger.Found{Suspects: 1}, l.Found())
	assert.Equal(t, crashledger.Suspect, l.Entry("s").Verdict())
	assert.Equal(t, crashledger.Clean, l.Entry("c").Verdict())
}

// A crash of the machine mid-write leaves a torn last line: it is
// ignored, and what the whole lines say stands.
func TestTornLastLineIsIgnored(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	require.NoError(t, os.WriteFile(path, []byte("sluice crash ledger v1\n+ \"a\"\n+ \"b\"\n- \"b\"\n+ \"zz"), 0o644))
	l := open(t, path)
	assert.Equal(t, crashledger.Found{Suspects: 1, Crashed: true, Torn: true, InFlight: []string{"a"}}, l.Found())
	assert.Equal(t, crashledger.Suspect, l.Entry("a").Verdict())
	assert.Equal(t, crashledger.Clean, l.Entry("b").Verdict())
	assert.Equal(t, crashledger.Clean, l.Entry("zz").Verdict())

	// A torn header alone is a fresh ledger.
	torn := ledgerPath(t)
	require.NoError(t, os.WriteFile(torn, []byte("sluice cra"), 0o644))
	assert.Equal(t, crashledger.Found{Torn: true}, open(t, torn).Found())
}

// A damaged line before the last, or a file that is no ledger, is an
// error that names the file and the line, and the file is left alone.
func TestDamagedFileIsAnError(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		body string
		line string
	}{
		"damaged record":  {"sluice crash ledger v1\n+ \"a\"\n? what\n+ \"b\"\n", "line 3"},
		"unquoted id":     {"sluice crash ledger v1\n+ a\n", "line 2"},
		"bad mark":        {"sluice crash ledger v1\ns \"a\" x 1\n", "line 2"},
		"not a ledger":    {"{\"item\": 1}\n{\"item\": 2}\n", "line 1"},
		"torn other file": {"hello", "line 1"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := ledgerPath(t)
			require.NoError(t, os.WriteFile(path, []byte(tc.body), 0o644))
			_, err := crashledger.Open(path, crashledger.Options{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), tc.line)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, tc.body, string(b), "the file is left as it was")
			l := open(t, path+"2") // and the lock was let go
			require.NoError(t, l.Close())
		})
	}
}

// Ids of any bytes and any length: newlines, quotes, invalid UTF-8, a
// megabyte. A huge id is kept as its hash, and found again by it.
func TestOddAndHugeIDs(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	huge := strings.Repeat("x\n\"", 1<<20/3)
	odd := []string{"", "a b\nc", "\"quoted\"", "\xff\xfe", strings.Repeat("é", 200), huge}
	l := open(t, path)
	run(t, l, huge+"!").Settle()
	for _, id := range odd {
		run(t, l, id)
	}
	l = crash(t, l, path)
	assert.Equal(t, len(odd), l.Found().Suspects)
	for _, id := range odd {
		assert.Equal(t, crashledger.Suspect, l.Entry(id).Verdict(), "%.20q", id)
	}
	assert.Equal(t, crashledger.Clean, l.Entry(huge+"?").Verdict(), "another huge id")
	assert.Len(t, l.Entry(huge).ID(), len("sha256:")+64)
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Less(t, info.Size(), int64(4096), "a huge id takes a hash's room")
}

// One process at a time: a second Open of the path fails until the first
// ledger is closed, or its process dies.
func TestOneLedgerAtATime(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	l := open(t, path)
	_, err := crashledger.Open(path, crashledger.Options{})
	require.ErrorIs(t, err, crashledger.ErrLocked)
	assert.Contains(t, err.Error(), path)
	require.NoError(t, l.Close())
	open(t, path)
}

// Entries outlive their ledger harmlessly: after Close they do nothing,
// and a waiting turn ends.
func TestClosedLedgerEntriesDoNothing(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	l := open(t, path)
	run(t, l, "s")
	l = crash(t, l, path)
	c := run(t, l, "c")
	s := l.Entry("s")
	got := make(chan error, 1)
	go func() { got <- s.Turn(t.Context()) }()
	require.NoError(t, l.Close())
	require.NoError(t, <-got)
	c.Settle()
	s.Settle()
	l = open(t, path)
	assert.Equal(t, crashledger.Suspect, l.Entry("s").Verdict(), "a settlement after Close is not written")
}

// Marks of messages that never come back are forgotten after
// ForgetAfter.
func TestUnresolvedMarksAreForgotten(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	clock := clockwork.NewFakeClock()
	opts := crashledger.Options{Clock: clock, ForgetAfter: time.Hour}
	l, err := crashledger.Open(path, opts)
	require.NoError(t, err)
	run(t, l, "gone")
	require.NoError(t, crashledger.Abandon(l))
	l, err = crashledger.Open(path, opts)
	require.NoError(t, err)
	require.Equal(t, 1, l.Found().Suspects)
	require.NoError(t, l.Close())
	clock.Advance(time.Hour + time.Second)
	l, err = crashledger.Open(path, opts)
	require.NoError(t, err)
	defer l.Close()
	assert.Equal(t, crashledger.Found{}, l.Found())
}

// A write that fails is returned by Hold and Turn, so that a source never
// emits a message the ledger could not record.
func TestWriteErrorIsReturned(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	l := open(t, path)
	require.NoError(t, crashledger.Abandon(l)) // its file is closed under it
	e := l.Entry("a")
	e.Hold()
	assert.NoError(t, e.Turn(t.Context()), "a closed ledger does nothing")
	l2 := open(t, path)
	require.NoError(t, crashledger.BreakFile(l2))
	err := l2.Entry("b").Turn(t.Context())
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	assert.True(t, errors.Is(l2.Entry("c").Turn(t.Context()), os.ErrClosed), "every later write returns it")
}

// The file is written anew when it grows past its bound, with what is in
// flight and running alone: a crash after that finds them as before.
func TestCompactionKeepsWhatHolds(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	l := open(t, path)
	run(t, l, "s")
	run(t, l, "t")
	l = crash(t, l, path)
	crashledger.SetCompactAt(l, 512)
	s := run(t, l, "s") // alone
	n := l.Entry("n")
	n.Hold()
	for i := range 200 {
		e := l.Entry("x" + strconv.Itoa(i))
		e.Hold()
		e.Release()
		require.NoError(t, l.Flush())
	}
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Less(t, info.Size(), int64(1024), "the file stays small")
	require.Equal(t, crashledger.Suspect, s.Verdict())
	l = crash(t, l, path)
	assert.Equal(t, crashledger.Culprit, l.Entry("s").Verdict(), "it ran alone")
	assert.Equal(t, crashledger.Suspect, l.Entry("n").Verdict(), "held")
	assert.Equal(t, crashledger.Suspect, l.Entry("t").Verdict(), "never came back")
	assert.Equal(t, crashledger.Clean, l.Entry("x7").Verdict())
}

// WaitAlone waits while a suspect runs alone; Suspects counts those not
// resolved.
func TestWaitAloneAndSuspects(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	l := open(t, path)
	run(t, l, "s1")
	run(t, l, "s2")
	l = crash(t, l, path)
	require.Equal(t, 2, l.Suspects())
	require.NoError(t, l.WaitAlone(t.Context()), "nothing runs alone")
	s := run(t, l, "s1")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, l.WaitAlone(ctx), context.Canceled, "s1 runs alone")
	got := make(chan error, 1)
	go func() { got <- l.WaitAlone(t.Context()) }()
	s.Settle()
	require.NoError(t, <-got)
	assert.Equal(t, 1, l.Suspects(), "s1 is resolved")
	run(t, l, "s2").Release()
	assert.Equal(t, 1, l.Suspects(), "a suspect released stays one")
}

// Suspect adds a crash to a message the ledger never held, at once and
// for good; a culprit stays one.
func TestSuspectAddsACrash(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	l := open(t, path)
	run(t, l, "x")
	l = crash(t, l, path)
	run(t, l, "x")
	l = crash(t, l, path)
	require.NoError(t, l.Suspect("unheld"))
	require.NoError(t, l.Suspect("x"))
	l = crash(t, l, path)
	e := l.Entry("unheld")
	assert.Equal(t, crashledger.Suspect, e.Verdict())
	assert.Equal(t, 1, e.Crashes())
	assert.Equal(t, crashledger.Culprit, l.Entry("x").Verdict())
}

// Past MaxMarks suspects, the oldest are forgotten.
func TestMarksAreBounded(t *testing.T) {
	t.Parallel()
	path := ledgerPath(t)
	clock := clockwork.NewFakeClock()
	var b strings.Builder
	b.WriteString("sluice crash ledger v1\n")
	for i := range crashledger.MaxMarks + 3 {
		// The first three are the oldest.
		fmt.Fprintf(&b, "s %q 1 %d\n", "m"+strconv.Itoa(i), clock.Now().Add(time.Duration(i)*time.Millisecond).UnixNano())
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	l, err := crashledger.Open(path, crashledger.Options{Clock: clock})
	require.NoError(t, err)
	defer l.Close()
	assert.Equal(t, crashledger.MaxMarks, l.Found().Suspects)
	for i := range 3 {
		assert.Equal(t, crashledger.Clean, l.Entry("m"+strconv.Itoa(i)).Verdict(), "m%d is among the oldest", i)
	}
	assert.Equal(t, crashledger.Suspect, l.Entry("m3").Verdict())
}
