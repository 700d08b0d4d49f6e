//go:build linux

package main_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dlq filter reads a named pipe once: before, it opened each input to
// look at it and closed it at once, which cut off a writer that had
// opened the pipe (its write failed with a broken pipe), and then waited
// in the read for a writer that would not come.
func TestCLIFilterReadsANamedPipeOnce(t *testing.T) {
	t.Parallel()
	dir := fixture(t)
	content, err := os.ReadFile(filepath.Join(dir, "dlq.jsonl"))
	require.NoError(t, err)
	fifo := filepath.Join(dir, "in.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	wrote := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			wrote <- err
			return
		}
		_, err = w.Write(content)
		wrote <- errors.Join(err, w.Close())
		if err != nil {
			// The reader left: let a read that waits for a writer end.
			if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				_ = w.Close()
			}
		}
	}()
	code, stdout, stderr := sluice(t, dir, "dlq", "filter", "in.fifo", "-o", "all.jsonl")
	require.NoError(t, <-wrote, "the writer was cut off")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "6 of 6 envelopes written to all.jsonl\n", stdout)
	got, err := os.ReadFile(filepath.Join(dir, "all.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, string(content), string(got))
}
