package main_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
)

// dlq filter -o - whose standard output is appended to its input is
// refused: it would read back what it writes, for ever. (Found by review:
// the file grew by 135 MB in 5 s.)
func TestFilterRefusesToWriteIntoItsInput(t *testing.T) {
	dir := t.TempDir()
	writeLetters(t, dir, "l.jsonl", 50)
	before, err := os.ReadFile(filepath.Join(dir, "l.jsonl"))
	require.NoError(t, err)
	out, err := os.OpenFile(filepath.Join(dir, "l.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	defer out.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "dlq", "filter", "-o", "-", "l.jsonl")
	var stderr bytes.Buffer
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, &stderr
	err = cmd.Run()
	require.NoError(t, ctx.Err(), "filter ended")
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 2, exit.ExitCode())
	assert.Contains(t, stderr.String(), "dlq filter: -o - is the input l.jsonl")
	after, err := os.ReadFile(filepath.Join(dir, "l.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, before, after, "the input as it was")

	// Named, through a link, as well.
	require.NoError(t, os.Symlink("l.jsonl", filepath.Join(dir, "link.jsonl")))
	code, _, errOut := sluice(t, dir, "dlq", "filter", "-o", "link.jsonl", "l.jsonl")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "dlq filter: -o link.jsonl is the input l.jsonl")
}

// dlq filter --rotated -o FILE FILE, where FILE is gone and only its
// rotated files are left: the input is found once, before OUT is made, so
// OUT is not read as input. (Found by review: filter read back what it
// wrote, for ever.)
func TestFilterFindsItsInputOnce(t *testing.T) {
	dir := t.TempDir()
	writeLetters(t, dir, "l.jsonl", 50)
	require.NoError(t, os.Rename(filepath.Join(dir, "l.jsonl"), filepath.Join(dir, "l.jsonl.000001")))
	code, stdout, stderr := sluice(t, dir, "dlq", "filter", "--rotated", "-o", "l.jsonl", "l.jsonl")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "50 of 50 envelopes written to l.jsonl\n", stdout)
	n := 0
	for _, err := range deadletter.ReadFile(filepath.Join(dir, "l.jsonl")) {
		require.NoError(t, err)
		n++
	}
	assert.Equal(t, 50, n)
}

// dlq ls and stats show an error text's control characters as escapes, so
// that a terminal does not act on them. (Found by review: they were
// printed as they were.)
func TestLsShowsControlCharactersAsEscapes(t *testing.T) {
	dir := t.TempDir()
	f, err := deadletter.OpenFile(filepath.Join(dir, "l.jsonl"))
	require.NoError(t, err)
	require.NoError(t, f.Write(t.Context(), deadletter.Envelope{Item: 1, ErrText: "upstream said: \x1b]0;owned\x07\x1b[2J\u009b end"}))
	require.NoError(t, f.Close())
	for _, cmd := range []string{"ls", "stats"} {
		code, stdout, stderr := sluice(t, dir, "dlq", cmd, "l.jsonl")
		require.Equal(t, 0, code, stderr)
		assert.NotContains(t, stdout, "\x1b", cmd)
		assert.NotContains(t, stdout, "\x07", cmd)
		assert.NotContains(t, stdout, "\u009b", cmd)
		if cmd == "ls" { // stats shows the reason, its digits as N
			assert.Contains(t, stdout, `upstream said: \x1b]0;owned\x07\x1b[2J\x9b end`)
		}
	}
}

// "--" ends the flags: a file whose name starts with - after it is a file.
// (Found by review: it was taken for a flag.)
func TestDoubleDashEndsTheFlags(t *testing.T) {
	dir := t.TempDir()
	writeLetters(t, dir, "a.jsonl", 1)
	writeLetters(t, dir, "-b.jsonl", 2)
	code, stdout, stderr := sluice(t, dir, "dlq", "ls", "--node", "n", "--", "a.jsonl", "-b.jsonl")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "-b.jsonl  2")
	code, _, stderr = sluice(t, dir, "dlq", "ls", "a.jsonl", "-b.jsonl")
	assert.Equal(t, 2, code, "without --, -b.jsonl is a flag: %s", stderr)
}
