//go:build linux

package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One Ctrl-C ends a redrive whose read of its input blocks (a FIFO nobody
// writes), and the ledger it made and left empty is removed. (Found by
// review: with the signal caught from before the reading, the first
// Ctrl-C did nothing, and the second killed it, leaving the ledger.)
func TestRedriveInterruptedWhileItsInputBlocks(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "l.jsonl"), 0o600))
	cmd, _, stderr := startSluice(t, dir, "dlq", "redrive", "--amqp", "amqp://127.0.0.1:1/", "--queue", "q", "l.jsonl")
	ledger := filepath.Join(dir, "l.jsonl.redriven")
	waitForLock(t, ledger) // made and locked; the read of the FIFO comes next, and blocks
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		assert.Equal(t, 1, exit.ExitCode())
	case <-time.After(30 * time.Second):
		t.Fatal("one Ctrl-C did not end a redrive blocked reading its input")
	}
	assert.Contains(t, stderr.String(), "interrupted while reading the dead letters: nothing was sent")
	assert.NoFileExists(t, ledger, "the ledger it made and left empty")
}
