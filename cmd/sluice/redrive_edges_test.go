package main_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
)

// silentBroker is a TCP server that accepts connections and never
// answers: a redrive's Open waits on it until interrupted or timed out.
func silentBroker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	return ln.Addr().String()
}

// startSluice starts the program in dir; the test's end kills it.
func startSluice(t *testing.T, dir string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, &stdout, &stderr
}

// waitForFile waits until path exists, looking again and again (a file
// another process makes); it fails the test after 30 s.
func waitForFile(t *testing.T, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s was never made", path)
}

// firstRaw returns the first line of the dead-letter file at path.
func firstRaw(t *testing.T, path string) []byte {
	t.Helper()
	for r, err := range deadletter.ReadRecords(path) {
		require.NoError(t, err)
		return r.Raw
	}
	t.Fatal("no envelope")
	return nil
}

// A "--" that is a flag's value is that value, not the end of the flags:
// the --dry-run after it stays a flag. (Found by review: the redrive
// published, taking --dry-run for a file.)
func TestDoubleDashAsAFlagsValueIsAValue(t *testing.T) {
	b := newBroker(t)
	q := b.queue(t)
	dir := t.TempDir()
	writeLetters(t, dir, "l.jsonl", 3)
	code, stdout, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", b.url, "--queue", q, "--ledger", "--", "l.jsonl", "--dry-run")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "3 of 3 envelopes would be re-driven")
	assert.Contains(t, stdout, "(ledger --)")
	assert.Equal(t, 0, b.count(t, q), "a dry run sends nothing")
	assert.NoFileExists(t, filepath.Join(dir, "--"))

	// And filter's -o --: the flag after it still filters.
	writeLetters(t, dir, "other.jsonl", 0)
	code, stdout, stderr = sluice(t, dir, "dlq", "filter", "-o", "--", "l.jsonl", "--node", "nobody")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "0 of 3 envelopes written to --\n", stdout)
}

// A dangling symbolic link as the ledger is named as such. (Found by
// review: the redrive said the ledger was made anew eight times.)
func TestRedriveRefusesADanglingSymlinkLedger(t *testing.T) {
	b := newBroker(t)
	q := b.queue(t)
	dir := t.TempDir()
	writeLetters(t, dir, "l.jsonl", 3)
	require.NoError(t, os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "L")))
	code, _, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", b.url, "--queue", q, "--ledger", "L", "l.jsonl")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "ledger L: a symbolic link to a file that does not exist")
	assert.Equal(t, 0, b.count(t, q))
}

// A redrive that made its ledger and sent nothing removes it only while
// its path still names that file: a ledger another redrive made there
// meanwhile is kept. (Found by review: it was removed, and its letters
// sent again.)
func TestRedriveLeavesALedgerMadeAnewAtItsPath(t *testing.T) {
	b := newBroker(t)
	q := b.queue(t)
	dir := t.TempDir()
	writeLetters(t, dir, "l.jsonl", 3)
	ledger := filepath.Join(dir, "l.jsonl.redriven")
	first, _, firstErr := startSluice(t, dir, "dlq", "redrive", "--amqp", "amqp://guest:guest@"+silentBroker(t)+"/", "--queue", q, "--timeout", "60s", "l.jsonl")
	waitForLock(t, ledger)                // made, locked, and its broker never answers
	require.NoError(t, os.Remove(ledger)) // an operator cleaning up
	code, _, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", b.url, "--queue", q, "l.jsonl")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, first.Process.Signal(os.Interrupt))
	assert.Error(t, first.Wait())
	assert.Contains(t, firstErr.String(), "interrupted")
	code, stdout, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", b.url, "--queue", q, "--dry-run", "l.jsonl")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "0 of 3 envelopes would be re-driven", "the second redrive's ledger is kept")
	assert.Len(t, b.drain(t, q), 3, "each letter once")
}

// Ctrl-C before the first letter (while the input is read, or the broker
// is dialled) ends the redrive saying so, and leaves no ledger: it sent
// nothing. (Found by review: one caught before its handler left the
// ledger, and one during the dial said only "i/o timeout".)
func TestRedriveInterruptedBeforeAnyLetterLeavesNoLedger(t *testing.T) {
	dir := t.TempDir()
	writeLetters(t, dir, "l.jsonl", 20000)
	cmd, _, stderr := startSluice(t, dir, "dlq", "redrive", "--amqp", "amqp://guest:guest@"+silentBroker(t)+"/", "--queue", "q", "--timeout", "60s", "l.jsonl")
	ledger := filepath.Join(dir, "l.jsonl.redriven")
	waitForFile(t, ledger)
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	var exit *exec.ExitError
	require.ErrorAs(t, cmd.Wait(), &exit)
	assert.Equal(t, 1, exit.ExitCode())
	assert.Contains(t, stderr.String(), "interrupted")
	assert.NoFileExists(t, ledger, "a redrive that sent nothing leaves no ledger")
}

// Every spelling of one broker is one broker to the ledger.
func TestRedriveOneBrokerSpelledManyWays(t *testing.T) {
	b := newBroker(t)
	q := b.queue(t)
	dir := t.TempDir()
	writeLetters(t, dir, "l.jsonl", 2)
	code, _, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", "amqp://guest:guest@127.0.0.1:5672/", "--queue", q, "l.jsonl")
	require.Equal(t, 0, code, stderr)
	for _, u := range []string{"amqp://guest:guest@127.0.0.1", "amqp://127.0.0.1:5672/%2f", "amqp://x:y@127.0.0.1:5672/%2F",
		"AMQP://127.0.0.1", "amqp://127.0.0.1:05672/", "amqp://127.0.0.1.:5672/", "amqp://[::ffff:127.0.0.1]:5672/"} {
		code, stdout, stderr := sluice(t, dir, "dlq", "redrive", "--dry-run", "--amqp", u, "--queue", q, "l.jsonl")
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, stdout, "0 of 2 envelopes would be re-driven", u)
	}
	code, stdout, stderr := sluice(t, dir, "dlq", "redrive", "--dry-run", "--amqp", "amqp://127.0.0.1:5672/other", "--queue", q, "l.jsonl")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "2 of 2 envelopes would be re-driven", "another vhost")
}

// A ledger line of the form written before broker names were canonical
// counts for every spelling of its broker. (Found by review: only the URL
// spelled as it was then matched.)
func TestRedriveReadsOldFormLinesOfAnySpelling(t *testing.T) {
	dir := t.TempDir()
	writeLetters(t, dir, "l.jsonl", 1)
	old := fmt.Sprintf("%s amqp://127.0.0.1%%20vhost%%20/%%20queue%%20%q l.jsonl:1\n", letterKeyOf(firstRaw(t, filepath.Join(dir, "l.jsonl"))), "q")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "l.jsonl.redriven"), []byte(old), 0o600))
	for _, u := range []string{"amqp://127.0.0.1", "amqp://127.0.0.1:5672", "amqp://127.0.0.1:5672/"} {
		code, stdout, stderr := sluice(t, dir, "dlq", "redrive", "--dry-run", "--amqp", u, "--queue", "q", "l.jsonl")
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, stdout, "0 of 1 envelopes would be re-driven", u)
	}
	code, stdout, stderr := sluice(t, dir, "dlq", "redrive", "--dry-run", "--amqp", "amqp://127.0.0.1", "--queue", "q2", "l.jsonl")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "1 of 1 envelopes would be re-driven", "another queue")
}

// --ledger naming an input is refused: the ledger's lines would be
// appended to the dead letters. (Found by review.)
func TestRedriveRefusesALedgerThatIsAnInput(t *testing.T) {
	b := newBroker(t)
	q := b.queue(t)
	dir := t.TempDir()
	writeLetters(t, dir, "l.jsonl", 3)
	before, err := os.ReadFile(filepath.Join(dir, "l.jsonl"))
	require.NoError(t, err)
	code, _, stderr := sluice(t, dir, "dlq", "redrive", "--ledger", "./l.jsonl", "--amqp", b.url, "--queue", q, "l.jsonl")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "dlq redrive: --ledger ./l.jsonl is the input l.jsonl")
	after, err := os.ReadFile(filepath.Join(dir, "l.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, before, after)
	assert.Equal(t, 0, b.count(t, q))
}

// Control characters in an envelope's node and run are shown as escapes
// by ls and stats, as in its error. (Found by review.)
func TestLsAndStatsEscapeNodeAndRun(t *testing.T) {
	dir := t.TempDir()
	line := `{"item":1,"error":"e","pipeline":"p","run_id":"r\u001b]0;pwned\u0007","origin_node":"n\u001b[2J","decision_node":"n","attempts":1,"history":[],"first_failure":"2026-03-01T12:00:00Z","last_failure":"2026-03-01T12:00:00Z"}` + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "c.jsonl"), []byte(line), 0o600))
	for _, args := range [][]string{{"dlq", "ls", "c.jsonl"}, {"dlq", "stats", "c.jsonl"}} {
		code, stdout, stderr := sluice(t, dir, args...)
		require.Equal(t, 0, code, stderr)
		assert.NotContains(t, stdout, "\x1b", args)
		assert.Contains(t, stdout, `n\x1b[2J`, args)
	}
	_, stdout, _ := sluice(t, dir, "dlq", "stats", "c.jsonl", "--by", "run")
	assert.Contains(t, stdout, `r\x1b]0;pwned\x07`)
}
